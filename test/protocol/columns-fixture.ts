import type {
  ChoiceColumns,
  GenerateResponseColumns,
  RoutingColumns,
} from '../../src/protocol/response-columns.js';

/**
 * Realistic response columns made from a seed: peaked masks (most rows keep 1-3 ids, some keep
 * hundreds, some none), logprobs with the -9999 floor, routing rows that end at the last forwarded
 * position. Deterministic, so a failure reproduces.
 */

export interface FixtureOptions {
  promptLen: number;
  completion: number;
  vocab?: number;
  logprobs?: boolean;
  mask?: boolean;
  routing?: boolean;
  /** Experts per layer; > 256 makes ids that need uint16. */
  experts?: number;
  layers?: number;
  topk?: number;
  routedExpertsPromptStart?: number;
  weightVersions?: boolean;
  index?: number;
  seed?: number;
  /** Put every column in one SharedArrayBuffer, as the accumulators do. */
  shared?: boolean;
}

function rng(seed: number): () => number {
  let x = seed >>> 0 || 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return (x >>> 0) / 2 ** 32;
  };
}

function alloc<T extends Int32Array | Float32Array | Uint8Array | Uint16Array>(
  ctor: {
    new (n: number): T;
    new (b: SharedArrayBuffer, o: number, n: number): T;
    BYTES_PER_ELEMENT: number;
  },
  n: number,
  shared: boolean,
): T {
  if (!shared) return new ctor(n);
  // An odd leading offset, so views never start at byte 0 of their buffer.
  const pad = 8;
  return new ctor(new SharedArrayBuffer(pad + n * ctor.BYTES_PER_ELEMENT + 8), pad, n);
}

export function makeChoice(o: FixtureOptions): ChoiceColumns {
  const r = rng(o.seed ?? 1);
  const vocab = o.vocab ?? 151936;
  const shared = o.shared ?? false;
  const n = o.completion;
  const tokenIds = alloc(Int32Array, n, shared);
  for (let i = 0; i < n; i++) tokenIds[i] = Math.floor(r() * vocab);
  let logprobs: Float32Array | null = null;
  if (o.logprobs ?? true) {
    logprobs = alloc(Float32Array, n, shared);
    for (let i = 0; i < n; i++)
      logprobs[i] = r() < 0.01 ? -9999 : r() < 0.5 ? -r() * 0.01 : -r() * 20;
  }
  let maskCounts: Int32Array | null = null;
  let maskIds: Int32Array | null = null;
  if (o.mask ?? true) {
    maskCounts = alloc(Int32Array, n, shared);
    const ids: number[] = [];
    for (let i = 0; i < n; i++) {
      const u = r();
      const count = u < 0.05 ? 0 : u < 0.9 ? 1 + Math.floor(r() * 3) : 50 + Math.floor(r() * 300);
      maskCounts[i] = count;
      if (count === 0) continue;
      const at = Math.floor(r() * count);
      for (let k = 0; k < count; k++)
        ids.push(k === at ? (tokenIds[i] as number) : Math.floor(r() * vocab));
    }
    maskIds = alloc(Int32Array, ids.length, shared);
    maskIds.set(ids);
  }
  const routing = (o.routing ?? true) ? makeRouting(o, r, shared) : null;
  let weightVersions: Int32Array | null = null;
  if (o.weightVersions ?? false) {
    weightVersions = alloc(Int32Array, n, shared);
    for (let i = 0; i < n; i++) weightVersions[i] = i < n / 2 ? 3 : 4;
  }
  return {
    index: o.index ?? 0,
    tokenIds,
    logprobs,
    maskCounts,
    maskIds,
    routing,
    weightVersions,
    finishReason: 'length',
    stopReason: null,
  };
}

function makeRouting(o: FixtureOptions, r: () => number, shared: boolean): RoutingColumns {
  const layers = o.layers ?? 3;
  const topk = o.topk ?? 2;
  const experts = o.experts ?? 128;
  const start = o.routedExpertsPromptStart ?? 0;
  // Rows cover positions start .. promptLen + completion - 2 (the last sampled token is never forwarded).
  const rows = Math.max(0, o.promptLen + o.completion - 1 - start);
  const data =
    experts > 256
      ? alloc(Uint16Array, rows * layers * topk, shared)
      : alloc(Uint8Array, rows * layers * topk, shared);
  for (let i = 0; i < data.length; i++) data[i] = Math.floor(r() * experts);
  return { data, rows, layers, topk, start };
}

export function makeResponse(
  choices: ChoiceColumns[],
  promptLen: number,
  extra: Partial<GenerateResponseColumns> = {},
): GenerateResponseColumns {
  let completion = 0;
  for (const c of choices) completion += c.tokenIds.length;
  return {
    requestId: 'abc',
    model: 'sim-qwen3-30b-a3b',
    created: 1764400000,
    choices,
    usage: { promptTokens: promptLen, completionTokens: completion, cachedTokens: null },
    kvTransferParams: null,
    ...extra,
  };
}
