/**
 * `--output-processing workers` (the default): the output worker drains the output ring into the
 * accumulators, the packer pool encodes finished requests into one Buffer each, and the main thread
 * only forwards slots and Buffers. Per request it keeps one small identity object; per drain pass it
 * receives one message, whatever the number of tokens in it.
 */
import type { RingserveConfig } from '../config.js';
import type { GenerateRequest } from '../protocol/generate-request.js';
import type { ResponseForm } from '../protocol/generate-response.js';
import { outputRingOffset } from '../shm/layout.js';
import type { Region } from '../shm/region.js';
import { getModelCard } from '../wire/model-card.js';
import { AccumulatorTable } from './output/accumulators.js';
import { reserveArenaBuffer } from './output/block-arena.js';
import type { OutputBatch } from './output/messages.js';
import { OutputWorker } from './output/output-worker-handle.js';
import { PackerPool } from './output/packer-pool.js';
import { requestFailure } from './output/response-view.js';
import { ResponseFormCode, SlotMetaTable } from './output/slot-meta.js';
import type { ChoiceGroup, OutputEvents, OutputPath, ResponseIdentity } from './output-path.js';

const FORM_CODE: Readonly<Record<ResponseForm, ResponseFormCode>> = {
  packed: ResponseFormCode.Packed,
  legacy: ResponseFormCode.Legacy,
  msgpack: ResponseFormCode.Msgpack,
};

interface Pending {
  gen: number;
  group: ChoiceGroup;
  form: ResponseForm;
  stream: boolean;
  identity: ResponseIdentity;
  kvTransferParams: unknown;
}

export class WorkerOutputPath implements OutputPath {
  readonly #meta: SlotMetaTable;
  readonly #acc: AccumulatorTable;
  readonly #packers: PackerPool;
  readonly #events: OutputEvents;
  readonly #pending: (Pending | undefined)[];
  #worker: OutputWorker | null = null;

  private constructor(
    meta: SlotMetaTable,
    acc: AccumulatorTable,
    packers: PackerPool,
    events: OutputEvents,
  ) {
    this.#meta = meta;
    this.#acc = acc;
    this.#packers = packers;
    this.#events = events;
    this.#pending = new Array(meta.slots);
  }

  static async start(
    config: RingserveConfig,
    region: Region,
    server: number,
    events: OutputEvents,
  ): Promise<WorkerOutputPath> {
    const slots = config.maxQueueLen;
    const meta = new SlotMetaTable(slots);
    const acc = new AccumulatorTable(slots);
    const arenaSab = reserveArenaBuffer();
    const priority = { nice: config.workerNice, policy: config.workerSchedPolicy };
    const packers = new PackerPool({
      metaSab: meta.sab,
      accSab: acc.sab,
      arenaSab,
      threads: config.packerThreads,
      responsePoolBytes: config.responsePoolMb * 1024 * 1024,
      priority,
    });
    const path = new WorkerOutputPath(meta, acc, packers, events);
    const preset = getModelCard(config.model);
    path.#worker = await OutputWorker.start({
      ringSab: region.sab,
      ringOffset: outputRingOffset(region.params, server),
      ringCapacity: region.params.outputRingBytes,
      meta,
      acc,
      arenaSab,
      serverIndex: server,
      preset: preset.name,
      specialTokenIds: preset.eosTokenIds,
      priority,
      onBatch: (batch) => path.#onBatch(batch),
      onFailure: (error, fatal) => {
        console.error(`ringserve-api-${server}: output worker: ${error.message}`);
        // Without its output worker this API server can answer nothing: let the supervisor
        // restart it (the engine drops its requests), rather than leave requests hanging.
        if (fatal) process.exit(70);
      },
    });
    return path;
  }

  open(
    group: ChoiceGroup,
    index: number,
    request: GenerateRequest,
    form: ResponseForm,
    identity: ResponseIdentity,
  ): void {
    const slot = group.slots[index]!;
    const gen = group.gens[index]!;
    const p = request.params;
    this.#meta.write(slot, gen, {
      stream: request.stream,
      logprobs: p.logprobs,
      samplingMask: p.returnSamplingMask,
      routedExperts: p.returnRoutedExperts,
      includeStopStrInOutput: request.includeStopStrInOutput,
      includeUsage: request.includeUsage,
      continuousUsageStats: request.continuousUsageStats,
      form: FORM_CODE[form],
      promptLen: request.promptTokenIds.length,
      routedExpertsPromptStart: p.routedExpertsPromptStart,
      maxTokens: p.maxTokens,
      minTokens: p.minTokens,
      stop: request.stop,
      choiceIndex: index,
      choiceCount: group.slots.length,
    });
    this.#pending[slot] = {
      gen,
      group,
      form,
      stream: request.stream,
      identity,
      kvTransferParams: request.kvTransferParams,
    };
    if (request.stream) {
      this.#worker!.stream(slot, gen, identity.requestId, identity.model, identity.created);
    }
  }

  free(slot: number, gen: number): void {
    const pending = this.#pending[slot];
    if (pending?.gen === gen) this.#pending[slot] = undefined;
    this.#worker?.free(slot, gen);
  }

  engineDown(): void {
    this.#pending.fill(undefined);
    this.#worker?.engineDown();
  }

  queueDepth(): number {
    return this.#packers.queueSize;
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
    for (let i = 0; i < batch.finished.length; i++) {
      this.#finished(batch.finished[i]!, batch.finishedGenerations[i]!);
    }
    for (let i = 0; i < batch.released.length; i++) {
      events.released(batch.released[i]!, batch.releasedGenerations[i]!);
    }
  }

  #finished(slot: number, gen: number): void {
    const pending = this.#pending[slot];
    if (pending === undefined || pending.gen !== gen) return;
    const group = pending.group;
    const first = group.slots[0]!;
    const firstGen = group.gens[0]!;
    const failure = requestFailure(this.#acc, slot, pending.identity.requestId);
    if (failure !== null) {
      if (group.failed) return;
      group.failed = true;
      this.#events.complete(first, firstGen, failure);
      // The request is answered: its other sequences need not run on.
      for (let i = 0; i < group.slots.length; i++) {
        if (group.slots[i] !== slot) this.#events.stopped(group.slots[i]!, group.gens[i]!);
      }
      return;
    }
    if (pending.stream || group.failed || --group.remaining > 0) return;
    this.#packers
      .pack({
        slots: group.slots,
        generations: group.gens,
        form: pending.form,
        requestId: pending.identity.requestId,
        model: pending.identity.model,
        created: pending.identity.created,
        kvTransferParams: pending.kvTransferParams,
      })
      .then(
        (body) => this.#events.complete(first, firstGen, body),
        (error: Error) => this.#events.complete(first, firstGen, error),
      );
  }
}
