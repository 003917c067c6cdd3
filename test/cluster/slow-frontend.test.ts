/**
 * No loss under a slow frontend (issue 11, item 3), on a real cluster: one of two API servers is
 * stopped (SIGSTOP) for 10 s while the other keeps serving. The engine fills the stopped server's
 * output ring and then holds its requests instead of waiting on it or giving up on it; the sibling
 * completes its requests meanwhile, old and new; after SIGCONT every request of both completes
 * with a full answer, and no API server was restarted.
 */
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import { checkInvariants, type GenerateResult, generate } from '../../src/client/index.js';
import { outputRingOffset, RING_HEAD, RING_TAIL } from '../../src/shm/layout.js';
import { until } from '../until.js';
import { type Cluster, startCluster } from './harness.js';

const STOP_MS = 10_000;
/** Tokens per request of the first wave: with 500 mask ids each (~2 KB of output ring per token), a
 * handful of them fill a 16 MiB output ring well before they finish. */
const LONG = 1500;
const SHORT = 200;
const PROMPT_LEN = 16;
/** A request stuck for good fails the test well before vitest's timeout. */
const REQUEST_TIMEOUT_MS = 45_000;

// Stopped in afterEach, which runs even when the test times out.
let cluster: Cluster | null = null;
let agent: Agent | null = null;
let stoppedPid = 0;

afterEach(async () => {
  if (stoppedPid > 0) resume(stoppedPid);
  stoppedPid = 0;
  await agent?.destroy();
  agent = null;
  await cluster?.stop();
  cluster = null;
});

function resume(pid: number): void {
  try {
    process.kill(pid, 'SIGCONT');
  } catch {
    // gone: the assertions below say what happened to it
  }
}

function body(seed: number, maxTokens: number) {
  return {
    token_ids: Array.from({ length: PROMPT_LEN }, (_, i) => (seed * 31 + i * 7 + 1) % 990),
    sampling_params: {
      max_tokens: maxTokens,
      ignore_eos: true,
      seed,
      temperature: 1,
      top_p: 1,
      top_k: 500,
      logprobs: 1,
      return_sampling_mask: true,
      return_routed_experts: true,
    },
  };
}

function ringUsed(c: Cluster, server: number): number {
  const region = c.region();
  const ring = outputRingOffset(region.params, server);
  const head = Atomics.load(region.i32, (ring + RING_HEAD) >> 2);
  return (head - Atomics.load(region.i32, (ring + RING_TAIL) >> 2)) | 0;
}

/** A typed array's bytes, to compare 750k-element arrays at once (toEqual walks them for seconds). */
const bytesOf = (a: Int32Array): Buffer => Buffer.from(a.buffer, a.byteOffset, a.byteLength);

function expectFull(result: GenerateResult, maxTokens: number): void {
  const choice = result.choices[0]!;
  expect(choice.finishReason).toBe('length');
  expect(choice.tokenIds.length).toBe(maxTokens);
  expect(choice.mask?.counts.length).toBe(maxTokens);
  checkInvariants(result, PROMPT_LEN);
}

describe('a stopped API server', () => {
  it('is held by the engine, not failed: both servers complete every request', async () => {
    const c = await startCluster([
      '--api-server-count',
      '2',
      '--model',
      'tiny',
      '--num-gpu-blocks',
      '8192',
    ]);
    cluster = c;
    // One connection per request, spread over both servers by node:cluster.
    const dispatcher = new Agent({ pipelining: 0 });
    agent = dispatcher;
    const completedAt: number[] = [];
    const send = (seed: number, maxTokens: number): Promise<GenerateResult> => {
      const options = { dispatcher, timeoutMs: REQUEST_TIMEOUT_MS };
      const sent = generate(c.url, body(seed, maxTokens), options).then((r) => {
        completedAt.push(Date.now());
        return r;
      });
      sent.catch(() => {}); // judged below, once all are settled
      return sent;
    };
    const before = await c.pids();
    const victim = before.get('ringserve-api-0')!;
    expect(victim).toBeGreaterThan(0);
    const first = Array.from({ length: 16 }, (_, i) => send(i, LONG));
    const both = await until(
      () => [c.serverInFlight(0), c.serverInFlight(1)],
      ([a, b]) => a! >= 2 && b! >= 2,
    );
    expect(both[0]).toBeGreaterThanOrEqual(2);
    expect(both[1]).toBeGreaterThanOrEqual(2);

    process.kill(victim, 'SIGSTOP');
    stoppedPid = victim;
    const stoppedAt = Date.now();
    let second: Promise<GenerateResult>[] = [];
    try {
      // The engine fills the stopped server's ring up to what it can budget, then holds it.
      const capacity = c.region().params.outputRingBytes;
      const used = await until(
        () => ringUsed(c, 0),
        (u) => u > capacity / 2,
        { timeoutMs: STOP_MS },
      );
      expect(used).toBeGreaterThan(capacity / 2);
      // The sibling keeps serving: new requests (node:cluster hands new connections to the
      // server that still accepts them) and the first wave's requests it holds.
      let newDone = 0;
      second = Array.from({ length: 6 }, (_, i) =>
        send(100 + i, SHORT).then((r) => {
          newDone++;
          return r;
        }),
      );
      for (const p of second) p.catch(() => {});
      const served = await until(
        () => ({
          done: completedAt.filter((t) => t > stoppedAt).length,
          newDone,
          idle: c.serverInFlight(1) === 0,
          late: Date.now() - stoppedAt >= STOP_MS,
        }),
        (s) => s.done >= 3 && s.newDone >= 1 && s.idle && s.late,
        { timeoutMs: STOP_MS + 20_000 },
      );
      expect(served.newDone).toBeGreaterThanOrEqual(1);
      expect(served.done).toBeGreaterThanOrEqual(3);
      expect(served.idle).toBe(true);
      // Still full: nothing of the stopped server was dropped to make room.
      expect(ringUsed(c, 0)).toBeGreaterThan(capacity / 2);
    } finally {
      resume(stoppedPid);
      stoppedPid = 0;
    }
    const results = await Promise.allSettled([...first, ...second]);
    const failed = results.filter((r) => r.status === 'rejected');
    expect(failed).toEqual([]);
    results.forEach((r, i) => {
      expectFull((r as PromiseFulfilledResult<GenerateResult>).value, i < 16 ? LONG : SHORT);
    });
    // Same seed, same answer: the first wave again, with nobody stopped.
    const again = await Promise.all(Array.from({ length: 16 }, (_, i) => send(i, LONG)));
    again.forEach((r, i) => {
      const held = (results[i] as PromiseFulfilledResult<GenerateResult>).value.choices[0]!;
      expect(bytesOf(r.choices[0]!.tokenIds).equals(bytesOf(held.tokenIds))).toBe(true);
      expect(bytesOf(r.choices[0]!.mask!.ids).equals(bytesOf(held.mask!.ids))).toBe(true);
    });
    expect(await c.pids()).toEqual(before);
    expect(c.log()).not.toMatch(/exited; restarting|no consumer any more/);
  }, 90_000);
});
