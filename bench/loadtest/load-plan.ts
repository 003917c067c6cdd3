import type { LoadSpec } from './messages.js';

/**
 * The requests a load generator sends, a pure function of the spec's seed and the request's
 * serial number, so every arm of a run gets the identical sequence of prompts, lengths and
 * sampling seeds. Lengths follow a log-normal with the spec's mean (response lengths of sampled LLM
 * outputs are right-skewed; the engine's own length profiles use the same family), and `ignore_eos`
 * makes each response exactly as long as asked, so the length distribution is the client's.
 */

/** A 32-bit integer hash (lowbias32), the base of every draw below. */
function hash32(x: number): number {
  let h = x >>> 0;
  h ^= h >>> 16;
  h = Math.imul(h, 0x7feb352d);
  h ^= h >>> 15;
  h = Math.imul(h, 0x846ca68b);
  h ^= h >>> 16;
  return h >>> 0;
}

/** A uniform in (0, 1) from two keys. */
function unit(a: number, b: number): number {
  return (hash32(hash32(a) ^ Math.imul(b, 0x9e3779b1)) + 0.5) / 4294967296;
}

/** The max_tokens of request `serial`: log-normal with mean `meanTokens`, clamped. */
export function requestLength(spec: LoadSpec, serial: number): number {
  if (spec.sigma === 0) return Math.round(spec.meanTokens);
  const median = spec.meanTokens / Math.exp((spec.sigma * spec.sigma) / 2);
  const u1 = unit(spec.seed ^ 0x4c454e31, serial);
  const u2 = unit(spec.seed ^ 0x4c454e32, serial);
  const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  const length = Math.round(median * Math.exp(spec.sigma * z));
  return Math.min(spec.maxTokens, Math.max(spec.minTokens, length));
}

/**
 * The JSON body of request `serial`. Every prompt is distinct (its ids are drawn per request), so
 * no arm gains from the prefix cache more than another. The body is built as text, once per
 * request: the generator's cost stays per request, never per generated token.
 */
export function requestBody(spec: LoadSpec, serial: number, maxTokens: number): string {
  const ids = new Array<number>(spec.promptTokens);
  for (let i = 0; i < spec.promptTokens; i++) {
    ids[i] = Math.floor(unit(spec.seed ^ serial, i) * spec.promptIdCeiling);
  }
  const seed = (hash32(spec.seed ^ hash32(serial)) & 0x3fffffff) + 1;
  return (
    `{"token_ids":[${ids.join(',')}],"sampling_params":{"temperature":1.0,"top_p":0.97,` +
    `"top_k":512,"max_tokens":${maxTokens},"ignore_eos":true,"logprobs":0,"seed":${seed}}}`
  );
}
