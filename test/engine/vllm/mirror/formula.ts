/**
 * What the mirror engine generates, as formulas a test recomputes. Token i of a prompt whose ids
 * sum to S is (S + 7i) % (vocab - 10) + 1, so ids stay in 1 .. vocab - 10 and the top 9 ids and 0
 * are free for a test's EOS or stop tokens. Everything else (logprobs, ranks, top-K columns,
 * routing, masks) follows from the token index i, the token, and the position.
 */

/** A large prime: candidate ids `token + PRIME * j` differ from the token and from each other. */
const PRIME = 7919;

export function promptSum(prompt: readonly number[]): number {
  return prompt.reduce((a, b) => a + b, 0);
}

/** The i-th generated token (0-based) of a prompt summing to `sum`. */
export function tokenAt(sum: number, i: number, vocab: number): number {
  return ((sum + 7 * i) % (vocab - 10)) + 1;
}

/** The sampled token's logprob; multiples of 1/16 are exact in float32. */
export function logprobAt(i: number): number {
  return -(i + 1) / 16;
}

/** The sampled token's 1-based vocabulary rank: 1, 2, 3, 1, 2, 3, ... */
export function rankAt(i: number): number {
  return (i % 3) + 1;
}

/** A candidate id other than `token`, the j-th of a family (j >= 1). */
export function otherId(token: number, j: number, vocab: number): number {
  return ((token - 1 + PRIME * j) % (vocab - 10)) + 1;
}

/**
 * One LogprobsLists row of token i with K top candidates: column 0 the sampled token, then the
 * K most likely in order; the sampled token sits in column rankAt(i) when its rank is <= K.
 * Candidate j's logprob is logprobAt(i) + (rank - j) / 4, so the row falls left to right.
 */
export function logprobRow(
  token: number,
  i: number,
  k: number,
  vocab: number,
): { ids: number[]; logprobs: number[] } {
  const rank = rankAt(i);
  const ids = [token];
  const logprobs = [logprobAt(i)];
  for (let j = 1; j <= k; j++) {
    ids.push(j === rank ? token : otherId(token, j, vocab));
    logprobs.push(logprobAt(i) + (rank - j) / 4);
  }
  return { ids, logprobs };
}

/** The logprob of prompt position p (p >= 1) given the tokens before it; exact in float32. */
export function promptLogprobAt(p: number): number {
  return -(p + 2) / 8;
}

/** The 1-based vocabulary rank of prompt token p: 1, 2, 3, 4, 1, ... from position 1 on. */
export function promptRankAt(p: number): number {
  return ((p - 1) % 4) + 1;
}

/**
 * One LogprobsTensors row of prompt position p (token `token`) with K candidates, as logprobRow:
 * column 0 the prompt token, then the K most likely, the prompt token in column promptRankAt(p)
 * when its rank is <= K.
 */
export function promptLogprobRow(
  token: number,
  p: number,
  k: number,
  vocab: number,
): { ids: number[]; logprobs: number[] } {
  const rank = promptRankAt(p);
  const ids = [token];
  const logprobs = [promptLogprobAt(p)];
  for (let j = 1; j <= k; j++) {
    ids.push(j === rank ? token : otherId(token, j, vocab));
    logprobs.push(promptLogprobAt(p) + (rank - j) / 4);
  }
  return { ids, logprobs };
}

/** The expert of position `pos`, layer `layer`, k-th choice. */
export function expertAt(pos: number, layer: number, k: number, numExperts: number): number {
  return (pos + 3 * layer + k) % numExperts;
}

/** The routing rows of one output, flat: ids[(row * layers + layer) * topk + k]. */
export function routingIds(
  positions: readonly number[],
  layers: number,
  topk: number,
  numExperts: number,
): number[] {
  const ids: number[] = [];
  for (const pos of positions)
    for (let l = 0; l < layers; l++)
      for (let k = 0; k < topk; k++) ids.push(expertAt(pos, l, k, numExperts));
  return ids;
}

/**
 * Positions whose routing an output carries (VE §5, scheduler.py:1442-1471 at 52a31cc): the first
 * output with tokens carries the prompt, `start` .. P-1; a later one with k tokens, after C tokens
 * were sent, the k positions forwarded to make them, P+C-1 .. P+C+k-2.
 */
export function routedPositions(
  promptLen: number,
  start: number,
  before: number,
  k: number,
): number[] {
  if (before === 0) return Array.from({ length: promptLen - start }, (_, r) => start + r);
  return Array.from({ length: k }, (_, r) => promptLen + before - 1 + r);
}

/** The sampling-mask row of token i: the token and 1 + i % 3 others, ascending. */
export function maskRowAt(token: number, i: number, vocab: number): number[] {
  const ids = new Set([token]);
  for (let j = 1; j <= 1 + (i % 3); j++) ids.add(otherId(token, j, vocab));
  return [...ids].sort((a, b) => a - b);
}
