/**
 * What the P/D identity tests share: prompts, request bodies, the router process (stopped after the
 * file whatever happened), and the comparison of a routed answer with a colocated one.
 */
import { afterAll } from 'vitest';
import type { BenchCluster } from '../../bench/loadtest/cluster.js';
import { startRouter as startRouterProcess } from '../../bench/loadtest/router-process.js';
import type { DecodedChoice, GenerateResult } from '../../src/client/index.js';

const routers = new Set<BenchCluster>();
afterAll(async () => {
  await Promise.all([...routers].map((r) => r.stop()));
  routers.clear();
});

/** A router in front of the instances, stopped after the file. */
export async function startRouter(prefill: string[], decode: string[]): Promise<BenchCluster> {
  const router = await startRouterProcess(prefill, decode, { stopTimeoutMs: 5_000 });
  routers.add(router);
  return router;
}

/** A prompt of `length` ids clear of the tiny presets' EOS ids. */
export function promptOf(length: number, salt: number): number[] {
  return Array.from({ length }, (_, i) => (i * 37 + salt * 101 + 11) % 990);
}

/** `count` prompt lengths spread over [64, 6000]. */
export function promptLengths(count: number): number[] {
  return Array.from({ length: count }, (_, i) =>
    Math.round(64 + ((6000 - 64) * ((i * 7) % count)) / (count - 1)),
  );
}

export function body(prompt: number[], seed: number, salt: string, maxTokens = 48) {
  return {
    token_ids: prompt,
    cache_salt: salt,
    sampling_params: {
      max_tokens: maxTokens,
      seed,
      temperature: 1,
      top_p: 0.97,
      top_k: 50,
      logprobs: 1,
      return_routed_experts: true,
      return_sampling_mask: true,
    },
  };
}

const bytes = (a: ArrayBufferView | null | undefined): Buffer =>
  a === null || a === undefined
    ? Buffer.alloc(0)
    : Buffer.from(a.buffer, a.byteOffset, a.byteLength);

/** Where a routed choice differs from the colocated one ([] when identical), rows checked. */
export function differences(
  routed: DecodedChoice,
  colocated: DecodedChoice,
  promptLength: number,
): string[] {
  const out: string[] = [];
  const same = (what: string, a: ArrayBufferView | null, b: ArrayBufferView | null): void => {
    if (!bytes(a).equals(bytes(b))) out.push(what);
  };
  same('token_ids', routed.tokenIds, colocated.tokenIds);
  same('logprobs', routed.logprobs, colocated.logprobs);
  same('mask.counts', routed.mask?.counts ?? null, colocated.mask?.counts ?? null);
  same('mask.ids', routed.mask?.ids ?? null, colocated.mask?.ids ?? null);
  const r = routed.routedExperts;
  const c = colocated.routedExperts;
  if (r === null || c === null) return [...out, 'routed_experts missing'];
  if (r.data.constructor !== c.data.constructor) out.push('routing dtype');
  same('routed_experts', r.data, c.data);
  if (r.shape.join() !== c.shape.join()) out.push(`shape ${r.shape} vs ${c.shape}`);
  if (r.start !== 0) out.push(`start ${r.start}`);
  const rows = promptLength + routed.tokenIds.length - 1;
  if (r.shape[0] !== rows) out.push(`rows ${r.shape[0]}, not P + C - 1 = ${rows}`);
  return out;
}

export function firstChoice(result: GenerateResult): DecodedChoice {
  const c = result.choices[0];
  if (c === undefined) throw new Error('no choice');
  return c;
}

/** A counter's value summed over its series in Prometheus text. */
export function counterValue(text: string, name: string): number {
  let sum = 0;
  for (const line of text.split('\n')) {
    if (line.startsWith(`${name}{`) || line.startsWith(`${name} `)) {
      sum += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
  }
  return sum;
}
