/**
 * A Map for long-lived tables whose entries come and go at request rate (the API server's requests
 * by id, an engine's sequences by slot).
 *
 * A JS Map (V8's OrderedHashMap) that churns is rebuilt into a new hash table every few dozen
 * insertions and deletions, and the table it replaces is left as it was (its entries, and a pointer
 * to the new one for iterators still walking it) for the garbage collector. Once the Map is in the
 * old generation, its tables are allocated there too, and a young-generation collection
 * (scavenge), which cannot tell a dead old object from a live one, treats everything an old
 * table points to as live: the values it held when it was replaced survive, are promoted, and wait
 * for the next full GC. A request table held that way keeps each request's object graph (the HTTP
 * request and response, the reply, the record) through its scavenges: measured in the API server
 * under the short-request benchmark, ~3 KB of each request promoted and scavenges of 12-60 ms; a
 * standalone loop of set/delete on a Map with 64 and 300 entries in flight promoted 21 and 38 % of
 * everything it allocated, the same loop on this table 0.7 % (bench/churn-map.ts).
 *
 * This table keeps its values in an array of its own, one position per entry, and indexes them
 * with a Map from key to position: the index still churns and still leaves old tables behind, but
 * they hold keys and small integers, never a value. A position is reused once its entry is
 * deleted, and the array only grows (to the most entries held at once), so a steady churn never
 * rebuilds it. Iteration, lookup and key semantics are the Map's.
 */

export class ChurnMap<K, V> implements Iterable<[K, V]> {
  /** Key -> position in #values. */
  readonly #index = new Map<K, number>();
  readonly #values: (V | undefined)[] = [];
  /** Positions of deleted entries, reused before the array grows. */
  readonly #free: number[] = [];

  get size(): number {
    return this.#index.size;
  }

  get(key: K): V | undefined {
    const at = this.#index.get(key);
    return at === undefined ? undefined : this.#values[at];
  }

  has(key: K): boolean {
    return this.#index.has(key);
  }

  set(key: K, value: V): this {
    let at = this.#index.get(key);
    if (at === undefined) {
      at = this.#free.pop() ?? this.#values.length;
      this.#index.set(key, at);
    }
    this.#values[at] = value;
    return this;
  }

  delete(key: K): boolean {
    const at = this.#index.get(key);
    if (at === undefined) return false;
    this.#index.delete(key);
    this.#values[at] = undefined;
    this.#free.push(at);
    return true;
  }

  clear(): void {
    this.#index.clear();
    this.#values.length = 0;
    this.#free.length = 0;
  }

  *entries(): IterableIterator<[K, V]> {
    for (const [key, at] of this.#index) yield [key, this.#values[at] as V];
  }

  *keys(): IterableIterator<K> {
    yield* this.#index.keys();
  }

  *values(): IterableIterator<V> {
    for (const at of this.#index.values()) yield this.#values[at] as V;
  }

  [Symbol.iterator](): IterableIterator<[K, V]> {
    return this.entries();
  }
}
