/**
 * In-place heapsorts over typed arrays: O(n log n), no recursion, no allocation (a typed array's
 * own sort() would need a subarray object per call to sort a prefix).
 */

/** Sorts a[0..n) ascending. */
export function sortInt32Ascending(a: Int32Array, n: number): void {
  if (n < 2) return;
  for (let i = (n >> 1) - 1; i >= 0; i--) siftInt32(a, i, n);
  for (let end = n - 1; end > 0; end--) {
    const t = a[0] as number;
    a[0] = a[end] as number;
    a[end] = t;
    siftInt32(a, 0, end);
  }
}

function siftInt32(a: Int32Array, root: number, n: number): void {
  let i = root;
  for (;;) {
    let c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && (a[c + 1] as number) > (a[c] as number)) c++;
    if ((a[c] as number) <= (a[i] as number)) return;
    const t = a[i] as number;
    a[i] = a[c] as number;
    a[c] = t;
    i = c;
  }
}

/**
 * Sorts order[0..n) (indices into key/tie) so that key descends; equal keys by tie ascending, so
 * the result does not depend on insertion order.
 */
export function sortIndicesByKeyDescending(
  order: Int32Array,
  key: Float64Array,
  tie: Int32Array,
  n: number,
): void {
  if (n < 2) return;
  for (let i = (n >> 1) - 1; i >= 0; i--) siftIndex(order, key, tie, i, n);
  for (let end = n - 1; end > 0; end--) {
    const t = order[0] as number;
    order[0] = order[end] as number;
    order[end] = t;
    siftIndex(order, key, tie, 0, end);
  }
}

/** True when index x must come after index y (the heap keeps "later" items on top). */
function later(key: Float64Array, tie: Int32Array, x: number, y: number): boolean {
  const kx = key[x] as number;
  const ky = key[y] as number;
  return kx < ky || (kx === ky && (tie[x] as number) > (tie[y] as number));
}

function siftIndex(order: Int32Array, key: Float64Array, tie: Int32Array, root: number, n: number) {
  let i = root;
  for (;;) {
    let c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && later(key, tie, order[c + 1] as number, order[c] as number)) c++;
    if (!later(key, tie, order[c] as number, order[i] as number)) return;
    const t = order[i] as number;
    order[i] = order[c] as number;
    order[c] = t;
    i = c;
  }
}
