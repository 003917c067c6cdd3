import { combine, UINT32_TO_UNIT } from '../wire/hash.js';
import type { KvBlockPool } from './kv-block-pool.js';
import { OffloadTier } from './offload-tier.js';
import type { Sequence } from './sequence.js';

/** What ExternalKv is built from (engine-config.ts resolves it from the flags). */
export interface ExternalKvConfig {
  blockSize: number;
  /** --kv-load-failure-rate: the fraction of P/D imports that fail (decided by request seed). */
  kvLoadFailureRate: number;
  /** --kv-transfer-bandwidth-gbs: GB/s of a P/D import and of the CPU tier's reloads. */
  kvTransferBandwidthGbs: number;
  /** --kv-offload-gib: the CPU tier's size; 0 = none. */
  kvOffloadGib: number;
  /** KV bytes of one token on one GPU (the preset's), what a transfer moves. */
  kvBytesPerToken: number;
  /** Multiplies modelled transfer times: 1 / speedup, 0 in max-speed mode. */
  timeScale: number;
}

/** Counters ExternalKv feeds (EngineStats reads them). */
export interface ExternalKvCounters {
  kvImports: number;
  kvImportFailures: number;
  kvImportedTokens: number;
  offloadLoadedBlocks: number;
}

/**
 * KV that a request gets from outside the GPU pool at admission, as vLLM's KV connectors give it
 * (get_num_new_matched_tokens): a P/D import from a prefill instance (nixl's role), or prefix
 * blocks reloaded from this instance's CPU tier (the offloading connector's). Either takes modelled
 * transfer time (tokens x KV bytes per token / bandwidth), during which the request holds its
 * blocks and is not scheduled.
 *
 * Routing rows never travel with KV: they stay with the instance that computed them. A decode
 * instance that imported the prompt emits rows from its first forward on (position P-1, which it
 * recomputes), and a block that came from outside is marked rowless in the pool, so a later
 * request that needs its rows cuts its prefix hit there (scheduler.ts) and the CPU tier never
 * loads a block whose rows are asked for (it stops at block_floor(routed_experts_prompt_start)).
 */
export class ExternalKv {
  readonly tier: OffloadTier | null;
  readonly #cfg: ExternalKvConfig;
  readonly #counters: ExternalKvCounters;
  /** Of the last plan(): the import failed; the tokens came from the CPU tier. */
  #importFailed = false;
  #fromTier = false;

  constructor(cfg: ExternalKvConfig, counters: ExternalKvCounters) {
    this.#cfg = cfg;
    this.#counters = counters;
    const blockBytes = cfg.kvBytesPerToken * cfg.blockSize;
    const blocks = Math.floor((cfg.kvOffloadGib * 2 ** 30) / blockBytes);
    this.tier = blocks > 0 ? new OffloadTier(blocks) : null;
  }

  /**
   * Tokens past the `numHits` prefix-cache blocks that the request can load instead of computing
   * (block hashes must be computed up to the lookup's bound). Pure but for the import's routing
   * anchor, so an admission that fails for want of blocks can plan again at the next step.
   */
  plan(seq: Sequence, numHits: number): number {
    const B = this.#cfg.blockSize;
    this.#importFailed = false;
    this.#fromTier = false;
    if (seq.importKvTokens > 0) {
      if (this.#importFails(seq)) {
        this.#importFailed = true;
        return 0;
      }
      // Rows from the first forward on: the prefill instance has those before it.
      seq.routingEmittedTo = Math.max(seq.routingEmittedTo, seq.importKvTokens);
      return Math.max(0, seq.importKvTokens - numHits * B);
    }
    const tier = this.tier;
    if (tier === null) return 0;
    let limit = Math.min(seq.numHashedBlocks, Math.floor((seq.numTokens - 1) / B));
    if (seq.params.returnRoutedExperts) limit = Math.min(limit, Math.floor(rowsFrom(seq) / B));
    let b = numHits;
    while (b < limit && tier.has(seq.blockHashHi[b] as number, seq.blockHashLo[b] as number)) b++;
    this.#fromTier = b > numHits;
    return (b - numHits) * B;
  }

  /**
   * The request was admitted with `tokens` loaded past its `numHits` hit blocks (the last plan()):
   * marks those blocks rowless, counts, and holds the request for the transfer time.
   */
  commit(seq: Sequence, numHits: number, tokens: number, pool: KvBlockPool, nowMs: number): void {
    const c = this.#counters;
    const B = this.#cfg.blockSize;
    if (seq.importKvTokens > 0) {
      c.kvImports++;
      if (this.#importFailed) c.kvImportFailures++;
      else c.kvImportedTokens += tokens;
      seq.importKvTokens = 0; // one import: after a preemption the request recomputes
    } else if (this.#fromTier) {
      c.offloadLoadedBlocks += tokens / B;
    }
    if (tokens === 0) return;
    const end = Math.ceil((numHits * B + tokens) / B);
    for (let b = numHits; b < end; b++) pool.markRowless(seq.blocks[b] as number);
    const cfg = this.#cfg;
    const ms = (tokens * cfg.kvBytesPerToken) / (cfg.kvTransferBandwidthGbs * 1e6);
    seq.readyAtMs = nowMs + ms * cfg.timeScale;
  }

  /** Whether this request's import fails: a draw from its seed, so reruns fail alike. */
  #importFails(seq: Sequence): boolean {
    const rate = this.#cfg.kvLoadFailureRate;
    if (rate <= 0) return false;
    if (rate >= 1) return true;
    return (combine(seq.seedKey, 0x6b76) >>> 0) * UINT32_TO_UNIT < rate;
  }
}

/** The first position whose routing row the request still needs. */
export function rowsFrom(seq: Sequence): number {
  return Math.max(seq.routingEmittedTo, seq.params.routedExpertsPromptStart);
}
