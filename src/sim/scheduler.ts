import type { OutputRoom } from '../engine/output-room.js';
import { type ExternalKv, rowsFrom } from './external-kv.js';
import type { KvBlockPool } from './kv-block-pool.js';
import { OutputCharge } from './output-charge.js';
import { SeqStatus, type Sequence } from './sequence.js';
import { comesBefore, type SchedulingPolicy, WaitingQueue } from './waiting-queue.js';

export interface SchedulerConfig {
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  blockSize: number;
  policy: SchedulingPolicy;
  enablePrefixCaching: boolean;
  preset: { readonly vocabSize: number };
}

/** Counters the scheduler feeds (EngineStats reads them). */
export interface SchedulerCounters {
  numPreemptions: number;
  prefixQueries: number;
  prefixHits: number;
}

/**
 * vLLM v1's scheduler, one step at a time:
 * 1. Running requests in order each get min(tokens still to compute, remaining budget) tokens,
 *    KV blocks allocated to match. The order is admission order (re-admitted requests go to the
 *    end), and an earlier-admitted request is always served first, so it finishes its prefill no
 *    later than any request admitted after it: decodes come before prefill chunks. When
 *    blocks run out the newest running request (FCFS) or the lowest-priority one (priority) is
 *    preempted by recompute: its blocks are freed, it returns to the waiting queue with no
 *    computed tokens; if that is the request being scheduled, the pass stops.
 * 2. If nothing was preempted, waiting requests are admitted in queue order while the budget,
 *    max_num_seqs and the free blocks allow, their prompts looked up in the prefix cache first
 *    (vLLM caps a hit at num_tokens - 1 so that at least one token is computed), and chunked to
 *    the remaining budget.
 * KV from outside the pool (a P/D import, the CPU tier: external-kv.ts) is planned after the
 * prefix-cache lookup; a request whose KV is still loading holds its blocks and is skipped until
 * `readyAtMs`. A prefill instance's finished request that a decode instance will import keeps its
 * blocks pinned until its transfer timeout.
 * With an OutputRoom (the API servers' output rings), each request's output is charged to its API
 * server before it is scheduled (output-charge.ts); a server whose ring cannot take it is held for
 * the rest of the step, and its requests are skipped, running or waiting, as vLLM v1 skips
 * requests it cannot schedule yet (skipped_waiting_requests): they keep their place, and running
 * ones their KV blocks, unless they are preempted.
 */
export class Scheduler {
  readonly running: Sequence[] = [];
  readonly waiting: WaitingQueue;
  /** This step's batch: batch[i] is forwarded for batchTokens[i] tokens; [0, batchSize). */
  readonly batch: Sequence[] = [];
  batchTokens = new Int32Array(64);
  batchSize = 0;
  /** Engine time (ms) of this step; set by the engine before schedule(). */
  nowMs = 0;
  /** Earliest readyAtMs among requests this step skipped while their KV loads (Infinity: none). */
  nextReadyMs = Number.POSITIVE_INFINITY;
  /** Finished requests whose blocks stay pinned for a decode instance, oldest first. */
  readonly pinned: Sequence[] = [];
  readonly #external: ExternalKv;
  readonly #cfg: SchedulerConfig;
  readonly #pool: KvBlockPool;
  readonly #counters: SchedulerCounters;
  readonly #output: OutputCharge;
  #hits = new Int32Array(64);
  /** What the last admission pass could not give requests of servers that are not held. */
  #blocksWanted = 0;
  #seatsWanted = 0;

  constructor(
    cfg: SchedulerConfig,
    pool: KvBlockPool,
    counters: SchedulerCounters,
    external: ExternalKv,
  ) {
    this.#cfg = cfg;
    this.#external = external;
    this.#pool = pool;
    this.#counters = counters;
    this.#output = new OutputCharge(cfg.preset.vocabSize, cfg.blockSize);
    this.waiting = new WaitingQueue(cfg.policy);
  }

  /** Builds this step's batch; with `room`, only what the API servers' output rings can take. */
  schedule(room: OutputRoom | null = null): void {
    for (let i = 0; i < this.batchSize; i++) (this.batch[i] as Sequence).scheduled = false;
    this.batchSize = 0;
    let budget = this.#cfg.maxNumBatchedTokens;
    let preempted = false;
    this.nextReadyMs = Number.POSITIVE_INFINITY;
    let i = 0;
    while (i < this.running.length && budget > 0) {
      const seq = this.running[i] as Sequence;
      if (seq.readyAtMs > this.nowMs) {
        if (seq.readyAtMs < this.nextReadyMs) this.nextReadyMs = seq.readyAtMs;
        i++; // its KV is still loading
        continue;
      }
      let numNew = Math.min(seq.numTokens - seq.numComputed, budget);
      if (room !== null) {
        numNew = this.#output.charge(seq, seq.numComputed, numNew, room);
        if (numNew === 0) {
          i++; // held: it stays running, its blocks kept
          continue;
        }
      }
      let ok = true;
      while (!this.#allocate(seq, seq.numComputed + numNew)) {
        const victim = this.#pickVictim(room);
        if (victim.scheduled) {
          budget += this.#unschedule(victim);
        }
        if (this.running.indexOf(victim) < i) i--;
        this.#preempt(victim);
        preempted = true;
        if (victim === seq) {
          ok = false;
          break;
        }
      }
      if (!ok) break;
      this.#push(seq, numNew);
      budget -= numNew;
      i++;
    }
    if (preempted) return;
    this.#admitWaiting(budget, room);
    if (this.#blocksWanted > 0 || this.#seatsWanted > 0) this.#preemptHeld(room as OutputRoom);
  }

  /** A finished request whose KV a decode instance will import: its blocks stay until `untilMs`. */
  pin(seq: Sequence, untilMs: number): void {
    this.remove(seq, false);
    seq.pinnedUntilMs = untilMs;
    this.pinned.push(seq);
  }

  /** Frees the blocks of pins whose transfer timeout passed. */
  releaseExpiredPins(nowMs: number): void {
    let kept = 0;
    for (const seq of this.pinned) {
      if (seq.pinnedUntilMs > nowMs) this.pinned[kept++] = seq;
      else this.#freeBlocks(seq);
    }
    this.pinned.length = kept;
  }

  /** The request of (server, slot) pinned last, while its pin holds; undefined if none. */
  pinnedAt(server: number, slot: number): Sequence | undefined {
    for (let i = this.pinned.length - 1; i >= 0; i--) {
      const seq = this.pinned[i] as Sequence;
      if (seq.server === server && seq.slot === slot) return seq;
    }
    return undefined;
  }

  /** Frees the blocks of the pin of request `id` now (imported, or its lease ran out); false if gone. */
  releasePin(id: number): boolean {
    const i = this.pinned.findIndex((seq) => seq.id === id);
    if (i < 0) return false;
    this.#freeBlocks(this.pinned[i] as Sequence);
    this.pinned.splice(i, 1);
    return true;
  }

  /** Frees a request's blocks and takes it out of the queues (finish, abort). */
  remove(seq: Sequence, free = true): void {
    if (free) this.#freeBlocks(seq);
    if (seq.status === SeqStatus.Running) {
      const i = this.running.indexOf(seq);
      if (i >= 0) this.running.splice(i, 1);
    } else if (seq.status === SeqStatus.Waiting) {
      this.waiting.remove(seq);
    }
    seq.status = SeqStatus.Finished;
  }

  /**
   * Admits waiting requests. With a room, notes what requests of servers that are not held could
   * not get because of held ones: the blocks the first one short of blocks lacked, or the seats
   * (max_num_seqs) of those left waiting once every seat is taken.
   */
  #admitWaiting(initialBudget: number, room: OutputRoom | null): void {
    this.#blocksWanted = 0;
    this.#seatsWanted = 0;
    let budget = initialBudget;
    const B = this.#cfg.blockSize;
    const pool = this.#pool;
    const waiting = this.waiting;
    // Requests before `w` belong to held API servers: skipped this step, in place.
    let w = 0;
    while (budget > 0 && w < waiting.length && this.running.length < this.#cfg.maxNumSeqs) {
      const seq = waiting.at(w) as Sequence;
      if (room?.isHeld(seq.server)) {
        w++;
        continue;
      }
      let numHits = this.#lookupPrefix(seq);
      if (room !== null) numHits = this.#output.capHits(seq, numHits, room);
      let loaded = this.#external.plan(seq, numHits);
      if (room !== null) loaded = this.#output.capLoaded(seq, numHits * B, loaded, room);
      const computed = numHits * B + loaded;
      let numNew = Math.min(seq.numTokens - computed, budget);
      if (room !== null) {
        numNew = this.#output.charge(seq, computed, numNew, room);
        if (numNew === 0) {
          w++;
          continue;
        }
      }
      const needed = Math.ceil((computed + numNew) / B) - numHits;
      let freeHits = 0;
      for (let h = 0; h < numHits; h++)
        if (pool.refCount[this.#hits[h] as number] === 0) freeHits++;
      if (needed > pool.numFree - freeHits) {
        if (room !== null) this.#blocksWanted = needed - pool.numFree + freeHits;
        return;
      }
      if (seq.numPreemptions === 0) {
        this.#counters.prefixQueries += seq.numTokens;
        this.#counters.prefixHits += computed;
      }
      if (seq.numCachedTokens < 0) seq.numCachedTokens = computed;
      for (let h = 0; h < numHits; h++) {
        const b = this.#hits[h] as number;
        pool.touch(b);
        seq.pushBlock(b);
      }
      seq.numRegisteredBlocks = numHits;
      for (let n = 0; n < needed; n++) seq.pushBlock(pool.allocate());
      seq.numComputed = computed;
      this.#external.commit(seq, numHits, loaded, pool, this.nowMs);
      waiting.removeAt(w);
      seq.status = SeqStatus.Running;
      this.running.push(seq);
      if (seq.readyAtMs > this.nowMs) {
        if (seq.readyAtMs < this.nextReadyMs) this.nextReadyMs = seq.readyAtMs;
        continue; // scheduled once its KV has arrived
      }
      this.#push(seq, numNew);
      budget -= numNew;
    }
    if (room === null || budget <= 0 || this.running.length < this.#cfg.maxNumSeqs) return;
    for (; w < waiting.length; w++)
      if (!room.isHeld((waiting.at(w) as Sequence).server)) this.#seatsWanted++;
  }

  /**
   * Cached leading blocks of the sequence's tokens (block ids into #hits); returns how many. A
   * request that needs routing rows stops at a rowless block holding a position it needs rows of.
   */
  #lookupPrefix(seq: Sequence): number {
    if (!this.#cfg.enablePrefixCaching) return 0;
    const B = this.#cfg.blockSize;
    const maxBlocks = Math.floor((seq.numTokens - 1) / B);
    if (maxBlocks === 0) return 0;
    seq.hashBlocksUpTo(maxBlocks, B);
    if (this.#hits.length < maxBlocks) this.#hits = new Int32Array(maxBlocks * 2);
    const rowsNeededFrom = seq.params.returnRoutedExperts ? rowsFrom(seq) : Infinity;
    let n = 0;
    while (n < maxBlocks) {
      const b = this.#pool.lookup(seq.blockHashHi[n] as number, seq.blockHashLo[n] as number);
      if (b < 0) break;
      if ((n + 1) * B > rowsNeededFrom && this.#pool.isRowless(b)) break;
      this.#hits[n++] = b;
    }
    return n;
  }

  /** Makes the sequence's block table cover `tokens` tokens; false if the pool is short. */
  #allocate(seq: Sequence, tokens: number): boolean {
    const needed = Math.ceil(tokens / this.#cfg.blockSize) - seq.numBlocks;
    if (needed <= 0) return true;
    if (needed > this.#pool.numFree) return false;
    for (let n = 0; n < needed; n++) seq.pushBlock(this.#pool.allocate());
    return true;
  }

  /**
   * A held server's running requests make no progress but keep their blocks and seats; when
   * requests of servers that are not held cannot be admitted for want of those, the newest held
   * ones are preempted until they could be (they are admitted at the next step), so a stopped API
   * server does not starve the others of KV cache or of seats.
   */
  #preemptHeld(room: OutputRoom): void {
    const target = this.#pool.numFree + this.#blocksWanted;
    let seats = this.#seatsWanted;
    for (let j = this.running.length - 1; j >= 0; j--) {
      if (this.#pool.numFree >= target && seats <= 0) return;
      const seq = this.running[j] as Sequence;
      if (!room.isHeld(seq.server)) continue;
      this.#preempt(seq);
      seats--;
    }
  }

  /** The request to preempt: a held server's first (it makes no progress), then as vLLM picks. */
  #pickVictim(room: OutputRoom | null): Sequence {
    const running = this.running;
    if (room !== null) {
      for (let j = running.length - 1; j >= 0; j--) {
        const seq = running[j] as Sequence;
        if (room.isHeld(seq.server)) return seq;
      }
    }
    let victim = running[running.length - 1] as Sequence;
    if (this.#cfg.policy === 'priority') {
      // The request that would be scheduled last: max (priority, arrival) as vLLM picks.
      for (const s of running) if (comesBefore(victim, s)) victim = s;
    }
    return victim;
  }

  #preempt(seq: Sequence): void {
    this.#freeBlocks(seq);
    const i = this.running.indexOf(seq);
    if (i >= 0) this.running.splice(i, 1);
    seq.numComputed = 0;
    seq.readyAtMs = 0;
    seq.numPreemptions++;
    seq.status = SeqStatus.Waiting;
    this.#counters.numPreemptions++;
    this.waiting.addPreempted(seq);
  }

  /** Takes a request out of this step's batch; returns the tokens it had been given. */
  #unschedule(seq: Sequence): number {
    const i = this.batch.indexOf(seq);
    const tokens = this.batchTokens[i] as number;
    for (let j = i + 1; j < this.batchSize; j++) {
      this.batch[j - 1] = this.batch[j] as Sequence;
      this.batchTokens[j - 1] = this.batchTokens[j] as number;
    }
    this.batchSize--;
    seq.scheduled = false;
    return tokens;
  }

  /** Releases blocks last-first, so a request's tail blocks are evicted before its prefix. */
  #freeBlocks(seq: Sequence): void {
    for (let b = seq.numBlocks - 1; b >= 0; b--) this.#pool.release(seq.blocks[b] as number);
    seq.numBlocks = 0;
    seq.numRegisteredBlocks = 0;
  }

  #push(seq: Sequence, tokens: number): void {
    const n = this.batchSize;
    if (n === this.batchTokens.length) {
      const grown = new Int32Array(n * 2);
      grown.set(this.batchTokens);
      this.batchTokens = grown;
    }
    this.batch[n] = seq;
    this.batchTokens[n] = tokens;
    this.batchSize = n + 1;
    seq.scheduled = true;
  }
}
