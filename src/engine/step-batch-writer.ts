/**
 * Writes one engine step's outputs into the output rings: one columnar STEP record per API server
 * that has outputs this step (messages.ts has the format). The engine's StepOutputs hold every
 * server's outputs interleaved; this pass counts per server, reserves each record at its final size
 * and gathers the columns straight into ring memory. Nothing is allocated per token: counters live in
 * preallocated typed arrays, and only prefill-sized routing runs are copied with a subarray view.
 *
 * The writer never waits for room: before the step, measure() opened each server's OutputRoom from
 * its ring, and the engine produced only outputs that room had space for. A record that still finds
 * no room is a bug in that budget and fails loudly (the error leaves the core loop); a ring whose
 * consumer is gone is reported to the sink.
 */
import { type RingProducer, recordBytes } from '../shm/ring.js';
import {
  RecordType,
  type RegionViews,
  StepColumn,
  StepRecordView,
  stepRecordBytes,
  writeStepHeader,
} from '../wire/messages.js';
import { copyIds } from './copy-ids.js';
import type { OutputRoom } from './output-room.js';
import type { StepOutputs } from './step-outputs.js';

export interface StepBatchSink {
  /** The producer of API server k's output ring, or null when that server is gone. */
  producer(server: number): RingProducer | null;
  /** The slot generation the engine recorded when (server, slot) was added. */
  slotGen(server: number, slot: number): number;
  /** Server k's ring has lost its consumer (RS_ERR_RING_PEER_GONE): drop its requests. */
  serverGone(server: number, error: Error): void;
}

export class StepBatchWriter {
  readonly #servers: number;
  readonly #count: Int32Array;
  readonly #maskIds: Int32Array;
  readonly #routingRows: Int32Array;
  readonly #topEntries: Int32Array;
  readonly #promptEntries: Int32Array;
  readonly #kvBytes: Int32Array;
  readonly #view = new StepRecordView();
  readonly #layers: number;
  readonly #topk: number;
  readonly #idBytes: number;

  constructor(servers: number, layers: number, topk: number, routingIdBytes: number) {
    this.#servers = servers;
    this.#count = new Int32Array(servers);
    this.#maskIds = new Int32Array(servers);
    this.#routingRows = new Int32Array(servers);
    this.#topEntries = new Int32Array(servers);
    this.#promptEntries = new Int32Array(servers);
    this.#kvBytes = new Int32Array(servers);
    this.#layers = layers;
    this.#topk = topk;
    this.#idBytes = routingIdBytes;
  }

  /**
   * Opens every server's room for the next step from what its ring has free now; a server without a
   * producer (gone) is not limited, its outputs are dropped anyway.
   */
  measure(room: OutputRoom, sink: StepBatchSink): void {
    for (let k = 0; k < this.#servers; k++) {
      const producer = sink.producer(k);
      if (producer === null) room.unlimit(k);
      else room.open(k, producer.free(), producer.capacity, recordBytes(recordBudget(producer)));
    }
  }

  /**
   * Writes one STEP record per server with outputs, and commits each server's records with one
   * store. A server whose outputs would make a record larger than a quarter of its ring (a long
   * prefill chunk's routing rows, vocabulary-sized masks) gets several records, so a step never
   * fails for its size and the consumer can drain one record while the next is written.
   */
  write(out: StepOutputs, sink: StepBatchSink, clockMs: number, stepMs: number): void {
    this.#count.fill(0);
    for (let j = 0; j < out.count; j++) {
      const k = out.server[j]!;
      if (k >= 0 && k < this.#servers) this.#count[k]!++;
    }
    for (let k = 0; k < this.#servers; k++) {
      if (this.#count[k] === 0) continue;
      const producer = sink.producer(k);
      if (producer === null) continue;
      try {
        const budget = recordBudget(producer);
        let from = 0;
        while (from < out.count)
          from = this.#writeChunk(out, k, from, budget, producer, sink, clockMs, stepMs);
        producer.commit();
      } catch (error) {
        if ((error as { code?: unknown }).code !== 'RS_ERR_RING_PEER_GONE') throw roomBug(k, error);
        sink.serverGone(k, error as Error);
      }
    }
  }

  /**
   * Writes server k's outputs from index `from` on, as many as fit `budget` bytes (at least one),
   * into one record; returns the index to continue from.
   */
  #writeChunk(
    out: StepOutputs,
    k: number,
    from: number,
    budget: number,
    producer: RingProducer,
    sink: StepBatchSink,
    clockMs: number,
    stepMs: number,
  ): number {
    const rowIds = this.#layers * this.#topk;
    let count = 0;
    let maskIds = 0;
    let rows = 0;
    let top = 0;
    let prompt = 0;
    let kv = 0;
    let to = from;
    for (; to < out.count; to++) {
      if (out.server[to] !== k) continue;
      const nextMask = maskIds + out.maskCount[to]!;
      const nextRows = rows + out.routingRows[to]!;
      const nextTop = top + out.topCount[to]!;
      const nextPrompt = prompt + out.promptPositions[to]! * out.promptWidth[to]!;
      const nextKv = kv + out.kvCount[to]!;
      const bytes = stepRecordBytes(
        count + 1,
        nextMask,
        nextRows,
        rowIds,
        this.#idBytes,
        nextTop,
        nextPrompt,
        nextKv,
      );
      if (count > 0 && bytes > budget) break;
      count++;
      maskIds = nextMask;
      rows = nextRows;
      top = nextTop;
      prompt = nextPrompt;
      kv = nextKv;
    }
    if (count === 0) return out.count;
    this.#count[k] = count;
    this.#maskIds[k] = maskIds;
    this.#routingRows[k] = rows;
    this.#topEntries[k] = top;
    this.#promptEntries[k] = prompt;
    this.#kvBytes[k] = kv;
    this.#writeServer(out, k, from, to, producer, sink, clockMs, stepMs);
    return to;
  }

  #writeServer(
    out: StepOutputs,
    k: number,
    from: number,
    to: number,
    producer: RingProducer,
    sink: StepBatchSink,
    clockMs: number,
    stepMs: number,
  ): void {
    const rowIds = this.#layers * this.#topk;
    const bytes = stepRecordBytes(
      this.#count[k]!,
      this.#maskIds[k]!,
      this.#routingRows[k]!,
      rowIds,
      this.#idBytes,
      this.#topEntries[k]!,
      this.#promptEntries[k]!,
      this.#kvBytes[k]!,
    );
    // A timeout of 0: no waiting. It throws RS_ERR_RING_PEER_GONE if the consumer is gone, else
    // RS_ERR_RING_FULL (the room was budgeted: a bug).
    const at = producer.reserve(RecordType.Step, bytes, 0);
    const v: RegionViews = producer;
    writeStepHeader(
      v,
      at,
      this.#count[k]!,
      this.#maskIds[k]!,
      this.#routingRows[k]!,
      this.#layers,
      this.#topk,
      this.#idBytes,
      clockMs,
      stepMs,
      this.#topEntries[k]!,
      this.#promptEntries[k]!,
      this.#kvBytes[k]!,
    );
    const rec = this.#view.attach(v, at);
    const i32 = v.i32;
    const f32 = v.f32;
    let n = 0;
    let maskAt = rec.maskBase;
    let topAt = 0;
    let promptAt = 0;
    let kvAt = rec.kvByteOffset;
    let routingAt = this.#idBytes === 1 ? rec.routingByteOffset : rec.routingByteOffset >> 1;
    const routingDst = this.#idBytes === 1 ? v.bytes : v.u16;
    for (let j = from; j < to; j++) {
      if (out.server[j] !== k) continue;
      const slot = out.slot[j]!;
      i32[rec.at(StepColumn.Slot, n)] = slot;
      i32[rec.at(StepColumn.Token, n)] = out.token[j]!;
      v.f32[rec.at(StepColumn.Logprob, n)] = out.logprob[j]!;
      i32[rec.at(StepColumn.Finish, n)] = out.finish[j]!;
      i32[rec.at(StepColumn.StopTokenId, n)] = out.stopTokenId[j]!;
      i32[rec.at(StepColumn.NumCached, n)] = out.numCachedTokens[j]!;
      i32[rec.at(StepColumn.WeightVersion, n)] = out.weightVersion[j]!;
      const maskCount = out.maskCount[j]!;
      i32[rec.at(StepColumn.MaskCount, n)] = maskCount;
      const rows = out.routingRows[j]!;
      i32[rec.at(StepColumn.RoutingRows, n)] = rows;
      i32[rec.at(StepColumn.RoutingFirstPos, n)] = out.routingFirstPos[j]!;
      i32[rec.at(StepColumn.SlotGen, n)] = sink.slotGen(k, slot);
      i32[rec.at(StepColumn.RejectReason, n)] = out.rejectReason[j]!;
      const maskFrom = out.maskStart[j]!;
      for (let m = 0; m < maskCount; m++) i32[maskAt + m] = out.maskIds[maskFrom + m]!;
      maskAt += maskCount;
      const top = out.topCount[j]!;
      i32[rec.at(StepColumn.TopCount, n)] = top;
      const topFrom = out.topStart[j]!;
      for (let t = 0; t < top; t++) {
        i32[rec.topIdBase + topAt + t] = out.topIds[topFrom + t]!;
        f32[rec.topLogprobBase + topAt + t] = out.topLogprobs[topFrom + t]!;
      }
      topAt += top;
      const positions = out.promptPositions[j]!;
      const width = out.promptWidth[j]!;
      i32[rec.at(StepColumn.PromptPositions, n)] = positions;
      i32[rec.at(StepColumn.PromptFirstPos, n)] = out.promptFirstPos[j]!;
      i32[rec.at(StepColumn.PromptWidth, n)] = width;
      const entries = positions * width;
      if (entries > 0) {
        // A prefill chunk's worth: three runs copied with one view each.
        const pFrom = out.promptStart[j]!;
        i32.set(out.promptIds.subarray(pFrom, pFrom + entries), rec.promptIdBase + promptAt);
        f32.set(
          out.promptLogprobs.subarray(pFrom, pFrom + entries),
          rec.promptLogprobBase + promptAt,
        );
        i32.set(out.promptRanks.subarray(pFrom, pFrom + entries), rec.promptRankBase + promptAt);
        promptAt += entries;
      }
      const kv = out.kvCount[j]!;
      i32[rec.at(StepColumn.KvParamsBytes, n)] = kv;
      if (kv > 0) {
        // Per request (a prefill's handle), never per token.
        const kvFrom = out.kvStart[j]!;
        v.bytes.set(out.kvBytes.subarray(kvFrom, kvFrom + kv), kvAt);
        kvAt += kv;
      }
      const ids = rows * rowIds;
      if (ids > 0) {
        const src = out.routing;
        const from = out.routingStart[j]! * rowIds;
        copyIds(src, out.routingBytes, from, routingDst, v.bytes, routingAt, ids);
        routingAt += ids;
      }
      n++;
    }
  }
}

/**
 * The payload bytes up to which several outputs share one record: a quarter of the ring, so the
 * consumer can drain one record while the next is written. OutputRoom is opened with the same.
 */
function recordBudget(producer: RingProducer): number {
  return producer.maxPayloadBytes >> 2;
}

/** The error a write that found no room leaves the core loop with. */
function roomBug(server: number, error: unknown): Error {
  const e = error as Error;
  e.message = `output ring of API server ${server}: ${e.message} (its room was budgeted before the step: a bug in OutputRoom's bound)`;
  return e;
}
