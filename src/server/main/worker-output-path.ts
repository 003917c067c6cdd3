/**
 * `--output-processing workers` (the default): the output worker drains the output ring into the
 * accumulators, the packer pool encodes finished requests into one Buffer each, and the main thread
 * only forwards slots and Buffers. It keeps nothing per request (the coordinator's record has all it
 * needs); per drain pass it receives one message, whatever the number of tokens in it.
 *
 * The one exception is a small answer (at most --inline-pack-values numbers: a short completion
 * without routing rows): handing it to a packer costs the main thread more than encoding it (the
 * task's messages, piscina's bookkeeping, a second wake-up), so the main thread encodes it itself,
 * with the packers' own encoder, from the same typed-array columns; its time is bounded by the limit
 * and no per-token object is made.
 */
import type { RingserveConfig } from '../../config.js';
import { ExitCode } from '../../errors.js';
import { JsonWriter } from '../../protocol/json-writer.js';
import { writeOpenAiUsageChunk } from '../../protocol/openai-stream.js';
import { writeStreamDone } from '../../protocol/sse.js';
import { outputRingOffset } from '../../shm/layout.js';
import type { Region } from '../../shm/region.js';
import type { SharedTokenBytes } from '../../tokenizer/token-bytes.js';
import { getModelCard } from '../../wire/model-card.js';
import { AccumulatorTable } from '../cross-thread/accumulators.js';
import { reserveArenaBuffer } from '../cross-thread/block-arena.js';
import type { TokenBytesData } from '../cross-thread/detokenizer.js';
import { tokenBytesFor } from '../cross-thread/detokenizer.js';
import type { KvParamsBatch, OutputBatch } from '../cross-thread/messages.js';
import type { PackOpenAi, PackTask } from '../cross-thread/pack-task.js';
import { ResponsePacker } from '../cross-thread/response-packer.js';
import type { ResponsePoolStats } from '../cross-thread/response-pool.js';
import { requestFailure } from '../cross-thread/response-view.js';
import { SlotMetaTable } from '../cross-thread/slot-meta.js';
import { decodeKvParams } from './engine-kv-params.js';
import type { OutputEvents, OutputPath } from './output-path.js';
import { OutputWorker } from './output-worker-handle.js';
import { PackerPool } from './packer-pool.js';
import type { RequestRecord } from './request-record.js';
import { slotMetaRow } from './slot-meta-row.js';

export class WorkerOutputPath implements OutputPath {
  readonly #meta: SlotMetaTable;
  readonly #acc: AccumulatorTable;
  readonly #packers: PackerPool;
  /** The main thread's encoder of small answers; null when --inline-pack-values is 0. */
  readonly #inline: { packer: ResponsePacker; maxValues: number } | null;
  readonly #events: OutputEvents;
  #worker: OutputWorker | null = null;
  #inlineAnswers = 0;

  private constructor(
    meta: SlotMetaTable,
    acc: AccumulatorTable,
    packers: PackerPool,
    inline: { packer: ResponsePacker; maxValues: number } | null,
    events: OutputEvents,
  ) {
    this.#meta = meta;
    this.#acc = acc;
    this.#packers = packers;
    this.#inline = inline;
    this.#events = events;
  }

  static async start(
    config: RingserveConfig,
    region: Region,
    server: number,
    events: OutputEvents,
    tokenBytes?: SharedTokenBytes,
  ): Promise<WorkerOutputPath> {
    const slots = config.maxQueueLen;
    const meta = new SlotMetaTable(slots);
    const acc = new AccumulatorTable(slots);
    const arenaSab = reserveArenaBuffer();
    const priority = { nice: config.workerNice, policy: config.workerSchedPolicy };
    // The threads detokenize with the served tokenizer's table (the stand-in only without one).
    const tokens: TokenBytesData = {
      specialTokenIds: getModelCard(config.model).eosTokenIds,
      ...(tokenBytes === undefined ? {} : { tokenBytes }),
    };
    const packers = new PackerPool({
      metaSab: meta.sab,
      accSab: acc.sab,
      arenaSab,
      threads: config.packerThreads,
      responsePoolBytes: config.responsePoolMb * 1024 * 1024,
      priority,
      ...tokens,
    });
    const inline =
      config.inlinePackValues > 0
        ? {
            packer: new ResponsePacker(meta.sab, acc.sab, arenaSab, tokenBytesFor(tokens)),
            maxValues: config.inlinePackValues,
          }
        : null;
    const path = new WorkerOutputPath(meta, acc, packers, inline, events);
    path.#worker = await OutputWorker.start({
      ringSab: region.sab,
      ringOffset: outputRingOffset(region.params, server),
      ringCapacity: region.params.outputRingBytes,
      meta,
      acc,
      arenaSab,
      serverIndex: server,
      ...tokens,
      priority,
      onBatch: (batch) => path.#onBatch(batch),
      onFailure: (error, fatal) => {
        console.error(`ringserve-api-${server}: output worker: ${error.message}`);
        // Without its output worker this API server can answer nothing: let the supervisor
        // restart it (the engine drops its requests), rather than leave requests hanging.
        if (fatal) process.exit(ExitCode.OutputWorkerFailed);
      },
    });
    return path;
  }

  open(record: RequestRecord, index: number): void {
    const { group, request, identity } = record;
    const slot = group.slots[index]!;
    const gen = group.gens[index]!;
    this.#meta.write(slot, gen, slotMetaRow(record, index));
    if (request.stream) {
      const openai = request.openai;
      const prompt = openai === undefined ? 0 : Math.floor(index / openai.n);
      this.#worker!.stream(slot, gen, identity.requestId, identity.model, identity.created, {
        echo: openai?.echo?.[prompt] ?? null,
        promptTokenIds: openai?.returnTokenIds ? openai.prompts[prompt]! : null,
        chatParse: openai?.chatParse ?? null,
      });
    }
  }

  encode(record: RequestRecord): Buffer | Promise<Buffer> {
    const task = packTask(record);
    const inline = this.#inline;
    if (inline !== null && this.#values(task) <= inline.maxValues) {
      const body = inline.packer.packLocal(task);
      this.#inlineAnswers++;
      return body;
    }
    return this.#packers.pack(task);
  }

  /** The numbers the task's answer holds (accumulated columns, echoed prompts and their ids). */
  #values(task: PackTask): number {
    let values = 0;
    for (const slot of task.slots) values += this.#acc.answerValues(slot);
    const openai = task.openai;
    if (openai !== undefined) {
      for (const text of openai.echo ?? []) values += text.length >> 2;
      for (const ids of openai.promptTokenIds ?? []) values += ids.length;
    }
    return values;
  }

  streamTail(record: RequestRecord): Buffer {
    const { identity, request, group } = record;
    const w = new JsonWriter(512);
    const openai = request.openai;
    if (request.includeUsage && openai !== undefined) {
      let promptTokens = 0;
      for (const p of openai.prompts) promptTokens += p.length;
      let completionTokens = 0;
      for (const slot of group.slots) completionTokens += this.#acc.completionTokens(slot);
      const usage = { promptTokens, completionTokens, cachedTokens: null };
      const { requestId, model, created } = identity;
      writeOpenAiUsageChunk(w, openai.kind, requestId, model, created, usage);
    }
    writeStreamDone(w);
    return w.copy();
  }

  free(slot: number, gen: number): void {
    this.#worker?.free(slot, gen);
  }

  engineDown(): void {
    this.#worker?.engineDown();
  }

  queueDepth(): number {
    return this.#packers.queueSize;
  }

  inlineAnswers(): number {
    return this.#inlineAnswers;
  }

  poolStats(): ResponsePoolStats | null {
    return this.#packers.poolStats();
  }

  async close(): Promise<void> {
    await this.#worker?.stop().catch(() => {});
    await this.#packers.close();
  }

  #onBatch(batch: OutputBatch): void {
    const events = this.#events;
    const streams = batch.streams;
    if (streams !== null) {
      const bytes = Buffer.from(streams.bytes);
      let from = 0;
      for (let i = 0; i < streams.slots.length; i++) {
        const to = streams.ends[i]!;
        events.stream(
          streams.slots[i]!,
          streams.generations[i]!,
          bytes.subarray(from, to),
          streams.done[i] === 1,
        );
        from = to;
      }
    }
    for (let i = 0; i < batch.stopped.length; i++) {
      events.stopped(batch.stopped[i]!, batch.stoppedGenerations[i]!);
    }
    const kvFailures = batch.kvParams === null ? null : setKvParams(events, batch.kvParams);
    for (let i = 0; i < batch.finished.length; i++) {
      const slot = batch.finished[i]!;
      const gen = batch.finishedGenerations[i]!;
      const failure = kvFailures?.get(slot);
      if (failure !== undefined) events.finished(slot, gen, failure);
      else this.#finished(slot, gen);
    }
    for (let i = 0; i < batch.released.length; i++) {
      events.released(batch.released[i]!, batch.releasedGenerations[i]!);
    }
  }

  #finished(slot: number, gen: number): void {
    const record = this.#events.record(slot, gen);
    if (record === undefined) return;
    this.#events.finished(slot, gen, requestFailure(this.#acc, slot, record.identity.requestId));
  }
}

/**
 * Sets the kv_transfer_params engines answered on their requests (the packers write them); those
 * that do not decode fail their request (returned by slot).
 */
function setKvParams(events: OutputEvents, kv: KvParamsBatch): Map<number, Error> | null {
  let failures: Map<number, Error> | null = null;
  let from = 0;
  for (let i = 0; i < kv.slots.length; i++) {
    const slot = kv.slots[i]!;
    const to = kv.ends[i]!;
    const record = events.record(slot, kv.generations[i]!);
    if (record !== undefined) {
      try {
        record.request.kvTransferParams = decodeKvParams(
          kv.bytes.subarray(from, to),
          record.identity.requestId,
        );
      } catch (error) {
        failures ??= new Map();
        failures.set(slot, error as Error);
      }
    }
    from = to;
  }
  return failures;
}

/** What an encoder needs besides the slots' columns to write the request's answer. */
function packTask(record: RequestRecord): PackTask {
  const { group, identity } = record;
  return {
    slots: group.slots,
    generations: group.gens,
    form: record.form,
    requestId: identity.requestId,
    model: identity.model,
    created: identity.created,
    kvTransferParams: record.request.kvTransferParams,
    ...packOpenAi(record),
  };
}

/** What a packer needs besides the columns to write an OpenAI answer (nothing for generate). */
function packOpenAi(record: RequestRecord): { openai?: PackOpenAi } {
  const openai = record.request.openai;
  if (openai === undefined) return {};
  return {
    openai: {
      n: openai.n,
      promptLens: openai.prompts.map((p) => p.length),
      echo: openai.echo,
      promptTokenIds: openai.returnTokenIds ? openai.prompts : null,
      topLogprobs: openai.topLogprobs,
      returnTokenIds: openai.returnTokenIds,
      chatParse: openai.chatParse ?? null,
    },
  };
}
