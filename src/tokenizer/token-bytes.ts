// Every token id's UTF-8 bytes in one SharedArrayBuffer, so the output worker (and any thread it is
// handed to, without a copy) turns ids into text with no per-token objects: the bytes of id i are
// bytes[offsets[i] .. offsets[i + 1]). Bytes, not strings, because a token may hold part of a
// character (byte-level BPE splits a character's bytes over tokens; byte-fallback tokens `<0xNN>`
// are one raw byte); text is valid UTF-8 only where tokens are concatenated.
//
//   sab: | offsets: Int32 x (count + 1) | flags: Uint8 x count | bytes: Uint8 x offsets[count] |
//
// The table is what every consumer of token bytes reads them through: it has the shape of TokenBytes
// (src/protocol/token-bytes.ts, the one interface; this layer may not import protocol, so the shape
// is checked where a table is handed on as one).

/** Flag bits per id. */
export const TokenFlag = {
  /** The id has a token (vocabularies may have holes). */
  Present: 1,
  /** A special token: skipped by skip_special_tokens. */
  Special: 2,
  /** An added token (its text is its spelling), not one of the model's vocabulary. */
  Added: 4,
} as const;

/** What crosses to another thread: structured-clonable, the buffer shared. */
export interface SharedTokenBytes {
  sab: SharedArrayBuffer;
  count: number;
}

export class TokenBytesTable {
  readonly shared: SharedTokenBytes;
  /** Ids in [0, size) may have a token; write() gives nothing for the others. */
  readonly size: number;
  /** The most bytes one token has. */
  readonly maxTokenBytes: number;
  readonly #offsets: Int32Array;
  readonly #flags: Uint8Array;
  readonly #bytes: Uint8Array;

  constructor(shared: SharedTokenBytes) {
    const { sab, count } = shared;
    this.shared = shared;
    this.size = count;
    this.#offsets = new Int32Array(sab, 0, count + 1);
    this.#flags = new Uint8Array(sab, 4 * (count + 1), count);
    this.#bytes = new Uint8Array(sab, 4 * (count + 1) + count);
    let longest = 1;
    for (let i = 0; i < count; i++) longest = Math.max(longest, this.tokenLength(i));
    this.maxTokenBytes = longest;
  }

  /** Whether `id` has a token. */
  has(id: number): boolean {
    return id >= 0 && id < this.size && (this.#flags[id]! & TokenFlag.Present) !== 0;
  }

  isSpecial(id: number): boolean {
    return id >= 0 && id < this.size && (this.#flags[id]! & TokenFlag.Special) !== 0;
  }

  isAdded(id: number): boolean {
    return id >= 0 && id < this.size && (this.#flags[id]! & TokenFlag.Added) !== 0;
  }

  /** Byte length of `id`'s token (0 for an id without one). */
  tokenLength(id: number): number {
    if (id < 0 || id >= this.size) return 0;
    return this.#offsets[id + 1]! - this.#offsets[id]!;
  }

  /**
   * TokenBytes.write: `id`'s bytes at `out[offset..]` (room for maxTokenBytes), how many returned;
   * ids without a token write nothing, special tokens their text unless `skipSpecial` (the default).
   */
  write(tokenId: number, out: Uint8Array, offset: number, skipSpecial = true): number {
    if (tokenId < 0 || tokenId >= this.size) return 0;
    if (skipSpecial && (this.#flags[tokenId]! & TokenFlag.Special) !== 0) return 0;
    const from = this.#offsets[tokenId]!;
    const n = this.#offsets[tokenId + 1]! - from;
    const bytes = this.#bytes;
    for (let k = 0; k < n; k++) out[offset + k] = bytes[from + k]!;
    return n;
  }

  /** A view of `id`'s bytes (not for per-token hot paths: it is an object). */
  bytesOf(id: number): Uint8Array {
    if (id < 0 || id >= this.size) return new Uint8Array(0);
    return this.#bytes.subarray(this.#offsets[id]!, this.#offsets[id + 1]!);
  }
}

/**
 * Builds a table with no object per token: the caller writes an id's bytes into `room(n)` at
 * `at` and commits them; ids come in any order, and a later commit for an id wins.
 */
export class TokenBytesBuilder {
  readonly #count: number;
  readonly #start: Int32Array;
  readonly #length: Int32Array;
  readonly #flags: Uint8Array;
  #bytes = new Uint8Array(1 << 20);
  #at = 0;

  /** Ids in [0, count). */
  constructor(count: number) {
    this.#count = count;
    this.#start = new Int32Array(count);
    this.#length = new Int32Array(count);
    this.#flags = new Uint8Array(count);
  }

  /** Where the next id's bytes go. */
  get at(): number {
    return this.#at;
  }

  /** The scratch buffer, with room for `n` bytes at `at`. */
  room(n: number): Uint8Array {
    if (this.#at + n > this.#bytes.length) {
      const grown = new Uint8Array(Math.max(2 * this.#bytes.length, this.#at + n));
      grown.set(this.#bytes.subarray(0, this.#at));
      this.#bytes = grown;
    }
    return this.#bytes;
  }

  /** `id`'s token is the `length` bytes just written at `at`. */
  commit(id: number, length: number, special: boolean, added: boolean): void {
    this.#start[id] = this.#at;
    this.#length[id] = length;
    this.#flags[id] =
      TokenFlag.Present | (special ? TokenFlag.Special : 0) | (added ? TokenFlag.Added : 0);
    this.#at += length;
  }

  finish(): TokenBytesTable {
    const count = this.#count;
    let total = 0;
    for (let id = 0; id < count; id++) total += this.#length[id]!;
    const sab = new SharedArrayBuffer(4 * (count + 1) + count + total);
    const offsets = new Int32Array(sab, 0, count + 1);
    new Uint8Array(sab, 4 * (count + 1), count).set(this.#flags);
    const bytes = new Uint8Array(sab, 4 * (count + 1) + count);
    let at = 0;
    for (let id = 0; id < count; id++) {
      offsets[id] = at;
      const from = this.#start[id]!;
      const to = from + this.#length[id]!;
      for (let k = from; k < to; k++) bytes[at++] = this.#bytes[k]!;
    }
    offsets[count] = at;
    return new TokenBytesTable({ sab, count });
  }
}
