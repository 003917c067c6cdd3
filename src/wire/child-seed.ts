const TWO_POW_53 = 2n ** 53n;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);

/**
 * The seed of the index-th sequence of a request with `n > 1`: seed + index, as vLLM v1's
 * parallel sampling seeds its child requests. Wraps within the safe-integer range (the sum of a
 * seed near 2^53 and an index would lose precision as a double); null stays null (each child then
 * gets a seed drawn by the engine).
 */
export function childSeed(seed: number | null, index: number): number | null {
  if (seed === null) return null;
  const sum = seed + index;
  if (Number.isSafeInteger(sum)) return sum;
  let big = BigInt(seed) + BigInt(index);
  while (big > MAX_SAFE) big -= TWO_POW_53;
  while (big < -MAX_SAFE) big += TWO_POW_53;
  return Number(big);
}
