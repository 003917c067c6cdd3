import { ENGINE_DEFAULTS } from '../wire/engine-defaults.js';
import { combine, hashString, seedKey } from '../wire/hash.js';
import { int32Array } from '../wire/int32-slab.js';
import type { EngineRequest, SamplingParams } from '../wire/types.js';
import { TokenCounts } from './token-counts.js';

export enum SeqStatus {
  Waiting = 0,
  Running = 1,
  Finished = 2,
}

/** Seed of the rolling context hash (the hash of the empty context). */
const CONTEXT_SEED = 0x811c9dc5;
/** Seeds of the two independent 32-bit block-hash chains (64 bits together). */
const BLOCK_SEED_HI = 0x243f6a88;
const BLOCK_SEED_LO = 0x85a308d3;

/**
 * One request's engine-side state. Tokens (prompt then output) live in a typed array that grows
 * by doubling; per-token work touches only typed arrays. Everything the outputs depend on is a
 * function of the tokens, the seed and the weight version, so a preempted sequence that is
 * recomputed from scratch emits exactly what it would have.
 */
export class Sequence {
  readonly id: number;
  readonly server: number;
  readonly slot: number;
  readonly params: SamplingParams;
  readonly priority: number;
  readonly arrivalTimeMs: number;
  /** Key of the request seed: the sampler's uniforms are hashes of (seedKey, position). */
  readonly seedKey: number;
  readonly numPromptTokens: number;
  /** Response length the model aims for (from the length profile), see SimModel.eosLogit. */
  targetLength = 0;
  tokens: Int32Array;
  numTokens = 0;
  /** Tokens whose KV is computed (forwarded). */
  numComputed = 0;
  /** Rolling hash of tokens[0 .. numTokens). */
  contextHash = CONTEXT_SEED;
  status = SeqStatus.Waiting;
  numPreemptions = 0;
  /** Prompt tokens served from the prefix cache at first scheduling (-1: not scheduled yet). */
  numCachedTokens = -1;
  /** Positions below this already had their routing row emitted (never re-emitted on recompute). */
  routingEmittedTo = 0;
  /**
   * Prompt positions below this already had their prompt logprobs emitted (prompt-logprobs.ts):
   * position 0 never is (vLLM's first entry is None), and a recompute never re-emits one.
   */
  promptLogprobsTo = 1;
  /** Rolling hash of tokens[0 .. promptLogprobsTo): the context of the next position to emit. */
  promptLogprobsHash = CONTEXT_SEED;
  /** Set once the prompt's prefill has completed (for the prompt-token counter). */
  prefillDone = false;
  /** Set while it is in the current step's batch. */
  scheduled = false;
  /** P/D: keep its blocks for a decode instance when it finishes, until pinnedUntilMs. */
  readonly pinKv: boolean;
  pinnedUntilMs = 0;
  /** P/D: leading prompt tokens to import from a prefill instance at admission (0 once tried). */
  importKvTokens: number;
  /** Not scheduled before this engine time: its KV is still being loaded (external-kv.ts). */
  readyAtMs = 0;
  readonly counts: TokenCounts | null;
  /**
   * The scripted answer (EngineRequest.script): output token k < script.length is script[k]
   * (model-runner.ts), null for none. Held, not copied: the request's own array (readAdd's copy).
   */
  readonly script: Int32Array | null;
  /** With a script: the model's EOS follows it (once min_tokens allows), unless ignore_eos. */
  readonly scriptEnds: boolean;

  /** Block ids of the sequence's KV, in order (grown by pushBlock). */
  blocks: Int32Array;
  numBlocks = 0;
  /** Chained hash of block i's tokens (and of every block before it, and the cache salt). */
  blockHashHi: Int32Array;
  blockHashLo: Int32Array;
  numHashedBlocks = 0;
  /** Leading blocks already offered to the prefix cache. */
  numRegisteredBlocks = 0;
  readonly #saltHi: number;
  readonly #saltLo: number;

  /**
   * @param seed the request's seed, or the one the engine drew for it
   * @param adapterKey the LoRA adapter's key (lora-adapters.ts), 0 for the base model: it starts
   *   the context hash and salts the block hashes, so everything the sequence emits depends on it
   * @param blockSize the engine's KV block size: sizes the block tables for the tokens the
   *   sequence starts with room for (they grow past that as the tokens do)
   */
  constructor(
    id: number,
    req: EngineRequest,
    seed: number,
    adapterKey = 0,
    blockSize: number = ENGINE_DEFAULTS.blockSize,
  ) {
    const { promptTokenIds: prompt, params, cacheSalt } = req;
    this.id = id;
    this.server = req.server;
    this.slot = req.slot;
    this.params = params;
    this.priority = req.priority;
    this.arrivalTimeMs = req.arrivalTimeMs;
    this.seedKey = seedKey(seed);
    this.numPromptTokens = prompt.length;
    this.pinKv = req.pinKv === true;
    this.script = req.script ?? null;
    this.scriptEnds = this.script !== null && req.scriptEnds === true;
    // vLLM's nixl connector: the decode side recomputes the last prompt token to sample from it.
    this.importKvTokens = Math.max(0, Math.min(req.importKvTokens ?? 0, prompt.length - 1));
    this.tokens = int32Array(prompt.length + Math.min(params.maxTokens, 1024));
    // The three block tables in one array, at their final size for the tokens above: a typed array
    // over 64 bytes lives outside V8's heap and costs 1-5 us to create (int32-slab.ts), and their
    // doubling from 8 entries made six of them for a 512-token prompt.
    const cap = Math.ceil(this.tokens.length / blockSize) + 1;
    const tables = int32Array(3 * cap);
    this.blocks = tables.subarray(0, cap);
    this.blockHashHi = tables.subarray(cap, 2 * cap);
    this.blockHashLo = tables.subarray(2 * cap, 3 * cap);
    const saltHi = cacheSalt === null ? BLOCK_SEED_HI : hashString(cacheSalt, BLOCK_SEED_HI);
    const saltLo = cacheSalt === null ? BLOCK_SEED_LO : hashString(cacheSalt, BLOCK_SEED_LO);
    this.#saltHi = adapterKey === 0 ? saltHi : combine(saltHi, adapterKey);
    this.#saltLo = adapterKey === 0 ? saltLo : combine(saltLo, adapterKey ^ 0x5bd1e995);
    if (adapterKey !== 0) this.contextHash = combine(CONTEXT_SEED, adapterKey);
    // The context of position 1: the first prompt token, folded as #push folds it.
    if (prompt.length > 0) this.promptLogprobsHash = combine(this.contextHash, prompt[0] as number);
    const penalised =
      params.presencePenalty !== 0 ||
      params.frequencyPenalty !== 0 ||
      params.repetitionPenalty !== 1;
    this.counts = penalised ? new TokenCounts(64) : null;
    // The prompt in one copy and one hash loop (#push per token, with its capacity check, was a
    // fifth of the simulator's CPU for short requests).
    this.tokens.set(prompt);
    let h = this.contextHash;
    for (let i = 0; i < prompt.length; i++) h = combine(h, prompt[i] as number);
    this.contextHash = h;
    this.numTokens = prompt.length;
    if (this.counts !== null && params.repetitionPenalty !== 1) {
      for (let i = 0; i < prompt.length; i++) this.counts.addPrompt(prompt[i] as number);
    }
  }

  get numOutputTokens(): number {
    return this.numTokens - this.numPromptTokens;
  }

  /** Appends a sampled token. */
  appendOutput(token: number): void {
    this.#push(token);
    if (this.counts !== null) this.counts.addOutput(token);
  }

  #push(token: number): void {
    if (this.numTokens === this.tokens.length) {
      const grown = new Int32Array(this.tokens.length * 2);
      grown.set(this.tokens);
      this.tokens = grown;
    }
    this.tokens[this.numTokens++] = token;
    this.contextHash = combine(this.contextHash, token);
  }

  /** Computes the chained hashes of full blocks up to block index `count` (exclusive). */
  hashBlocksUpTo(count: number, blockSize: number): void {
    if (count > this.blockHashHi.length) {
      let cap = this.blockHashHi.length;
      while (cap < count) cap *= 2;
      const hi = new Int32Array(cap);
      hi.set(this.blockHashHi);
      this.blockHashHi = hi;
      const lo = new Int32Array(cap);
      lo.set(this.blockHashLo);
      this.blockHashLo = lo;
    }
    for (let b = this.numHashedBlocks; b < count; b++) {
      let hi = b === 0 ? this.#saltHi : (this.blockHashHi[b - 1] as number);
      let lo = b === 0 ? this.#saltLo : (this.blockHashLo[b - 1] as number);
      const end = (b + 1) * blockSize;
      for (let i = b * blockSize; i < end; i++) {
        const t = this.tokens[i] as number;
        hi = combine(hi, t);
        lo = combine(lo, t ^ 0x5bd1e995);
      }
      this.blockHashHi[b] = hi;
      this.blockHashLo[b] = lo;
    }
    if (count > this.numHashedBlocks) this.numHashedBlocks = count;
  }

  /** Appends a block id to the block table. */
  pushBlock(block: number): void {
    if (this.numBlocks === this.blocks.length) {
      const grown = new Int32Array(this.blocks.length * 2);
      grown.set(this.blocks);
      this.blocks = grown;
    }
    this.blocks[this.numBlocks++] = block;
  }
}
