/**
 * A Map for long-lived tables whose entries come and go at request rate (the API server's requests
 * by id, an engine's sequences by slot).
 *
 * A JS Map (V8's OrderedHashMap) rebuilds its hash table every few dozen insertions and deletions
 * when it churns, and the table it replaces keeps its entries and a pointer to its successor, for
 * iterators that may still walk it. Once one of those tables has reached the old generation (a
 * full GC moves every live young object there), it is garbage that young-generation collections
 * cannot see as garbage: its successor, and every value the successor holds, survive each scavenge
 * and are promoted in turn, and so on, until the next full GC breaks the chain. A request table
 * held that way keeps every request's object graph (the HTTP request and response, the reply, the
 * record) alive through two scavenges: measured in the API server under the short-request
 * benchmark, ~3 KB of each request promoted and scavenges of 12-60 ms; a standalone loop of
 * set/delete on a Map promoted 77 % of everything it allocated, the same loop on this table 0.3 %.
 *
 * This table keeps its entries as properties of a prototype-less object, which V8 holds in a plain
 * hash dictionary: a rebuilt dictionary links to nothing. Iteration follows V8's property order
 * (integer-like keys ascending, then the others as inserted), not insertion order alone.
 */

interface Entry<K, V> {
  readonly key: K;
  value: V;
}

export class ChurnMap<K extends string | number, V> implements Iterable<[K, V]> {
  #table: Record<string | number, Entry<K, V> | undefined> = Object.create(null);
  #size = 0;

  get size(): number {
    return this.#size;
  }

  get(key: K): V | undefined {
    return this.#table[key]?.value;
  }

  has(key: K): boolean {
    return this.#table[key] !== undefined;
  }

  set(key: K, value: V): this {
    const entry = this.#table[key];
    if (entry !== undefined) {
      entry.value = value;
    } else {
      this.#table[key] = { key, value };
      this.#size++;
    }
    return this;
  }

  delete(key: K): boolean {
    if (this.#table[key] === undefined) return false;
    delete this.#table[key];
    this.#size--;
    return true;
  }

  clear(): void {
    this.#table = Object.create(null);
    this.#size = 0;
  }

  *entries(): IterableIterator<[K, V]> {
    // The keys are listed first, so entries may be deleted (or added) while iterating.
    for (const name of Object.keys(this.#table)) {
      const entry = this.#table[name];
      if (entry !== undefined) yield [entry.key, entry.value];
    }
  }

  *keys(): IterableIterator<K> {
    for (const [key] of this.entries()) yield key;
  }

  *values(): IterableIterator<V> {
    for (const [, value] of this.entries()) yield value;
  }

  [Symbol.iterator](): IterableIterator<[K, V]> {
    return this.entries();
  }
}
