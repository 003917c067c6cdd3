// Output arena memory after a burst: `npm run bench:arena-rss` (add `-- --json` for a last line of
// JSON; `-- --requests N --tokens N` for another burst; the default is the quick profile's 64 x 4096).
//
// A burst of long requests with logprobs, sampling masks (3 ids a token) and routed experts
// (glm-4.5-air: 45 layers x 8, one byte each) goes through an output worker thread and its arena
// exactly as in an API server: STEP records into the output ring, the worker scatters them, each
// finished request is freed, then the process idles. The process's RSS is read before the burst,
// at its peak, and 3 s after the worker's hold on an empty arena ends (EMPTY_HOLD_MS, 10 s after
// the last records: it keeps free memory through a short lull, then gives it back).
//
//   reserved   the arena on reserveArenaBuffer() (addon memory; trim() gives free pages back)
//   growable   the arena on a growable SharedArrayBuffer, as before (its pages stay committed)
//
// Each arena runs in a process of its own (this file, forked with --child <arena>), so one's pages
// never count in the other's RSS.
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { ExitCode } from '../src/errors.js';
import { AccumulatorTable } from '../src/server/cross-thread/accumulators.js';
import { createArenaBuffer, reserveArenaBuffer } from '../src/server/cross-thread/block-arena.js';
import { ResponseFormCode, SlotMetaTable } from '../src/server/cross-thread/slot-meta.js';
import { OutputWorker } from '../src/server/main/output-worker-handle.js';
import { EMPTY_HOLD_MS } from '../src/server/output-worker/output-loop.js';
import { outputRingOffset } from '../src/shm/layout.js';
import { createRegion, outputRingProducer, unlinkRegion } from '../src/shm/region.js';
import type { RingProducer } from '../src/shm/ring.js';
import {
  RecordType,
  StepColumn,
  StepRecordView,
  stepRecordBytes,
  writeStepHeader,
} from '../src/wire/messages.js';

type ArenaKind = 'reserved' | 'growable';

interface Burst {
  requests: number;
  tokens: number;
}

interface ArenaReport {
  arena: ArenaKind;
  rss_before_mb: number;
  rss_peak_mb: number;
  rss_after_mb: number;
  after_over_before: number;
  drain_ms: number;
}

const LAYERS = 45;
const TOPK = 8;
const MASK_IDS = 3;
const RING_BYTES = 4 << 20;
const SETTLE_MS = 3_000;
const WAIT_MS = 10_000;
const MIB = 1024 * 1024;

const rssMb = (): number => process.memoryUsage.rss() / MIB;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** One decode step of every request: a token, its logprob, MASK_IDS mask ids, one routing row. */
function writeStep(producer: RingProducer, requests: number, step: number, last: boolean): void {
  const rowIds = LAYERS * TOPK;
  const bytes = stepRecordBytes(requests, requests * MASK_IDS, requests, rowIds, 1);
  const at = producer.reserve(RecordType.Step, bytes, WAIT_MS);
  writeStepHeader(producer, at, requests, requests * MASK_IDS, requests, LAYERS, TOPK, 1, 0, 0);
  const rec = new StepRecordView().attach(producer, at);
  const { i32, f32, bytes: u8 } = producer;
  let mask = rec.maskBase;
  let routing = rec.routingByteOffset;
  for (let j = 0; j < requests; j++) {
    i32[rec.at(StepColumn.Slot, j)] = j;
    i32[rec.at(StepColumn.SlotGen, j)] = 1;
    i32[rec.at(StepColumn.Token, j)] = (step * 31 + j) % 900;
    f32[rec.at(StepColumn.Logprob, j)] = -0.5;
    i32[rec.at(StepColumn.Finish, j)] = last ? 2 : 0;
    i32[rec.at(StepColumn.StopTokenId, j)] = -1;
    i32[rec.at(StepColumn.NumCached, j)] = 0;
    i32[rec.at(StepColumn.WeightVersion, j)] = 0;
    i32[rec.at(StepColumn.MaskCount, j)] = MASK_IDS;
    i32[rec.at(StepColumn.RoutingRows, j)] = 1;
    i32[rec.at(StepColumn.RoutingFirstPos, j)] = 16 + step;
    i32[rec.at(StepColumn.RejectReason, j)] = 0;
    i32[rec.at(StepColumn.KvParamsBytes, j)] = 0;
    for (let k = 0; k < MASK_IDS; k++) i32[mask++] = (step + k) % 900;
    u8.fill((step + j) & 0x7f, routing, routing + rowIds);
    routing += rowIds;
  }
  producer.commit();
}

async function runChild(kind: ArenaKind, burst: Burst): Promise<ArenaReport> {
  const name = `ringserve-bench-arena-${process.pid}-${randomBytes(3).toString('hex')}`;
  const region = createRegion(name, { requestRingBytes: 4096, outputRingBytes: RING_BYTES });
  try {
    const producer = outputRingProducer(region, 0);
    const meta = new SlotMetaTable(burst.requests);
    const acc = new AccumulatorTable(burst.requests);
    let freed = 0;
    const worker = await OutputWorker.start({
      ringSab: region.sab,
      ringOffset: outputRingOffset(region.params, 0),
      ringCapacity: region.params.outputRingBytes,
      meta,
      acc,
      arenaSab: kind === 'reserved' ? reserveArenaBuffer() : createArenaBuffer(),
      serverIndex: 0,
      preset: 'glm-4.5-air',
      specialTokenIds: [],
      // As the main thread does once an answer is sent: give the request's blocks back.
      onBatch: (batch) => {
        for (let i = 0; i < batch.finished.length; i++) {
          worker.free(batch.finished[i]!, batch.finishedGenerations[i]!);
          freed++;
        }
      },
      onFailure: (error) => {
        console.error(`output worker: ${error.message}`);
        process.exit(ExitCode.Failure);
      },
    });
    for (let s = 0; s < burst.requests; s++) meta.write(s, 1, requestMeta(burst.tokens));
    await sleep(SETTLE_MS);
    const before = rssMb();
    let peak = before;
    for (let step = 0; step < burst.tokens; step++) {
      writeStep(producer, burst.requests, step, step === burst.tokens - 1);
      if (step % 64 === 0) {
        peak = Math.max(peak, rssMb());
        await sleep(0); // lets the worker's batches (and their frees) in
      }
    }
    const drainStart = performance.now();
    while (freed < burst.requests && performance.now() - drainStart < WAIT_MS) {
      peak = Math.max(peak, rssMb());
      await sleep(5);
    }
    const drainMs = performance.now() - drainStart;
    await sleep(EMPTY_HOLD_MS + SETTLE_MS);
    const after = rssMb();
    await worker.stop();
    return {
      arena: kind,
      rss_before_mb: round1(before),
      rss_peak_mb: round1(peak),
      rss_after_mb: round1(after),
      after_over_before: Math.round((after / before) * 100) / 100,
      drain_ms: Math.round(drainMs),
    };
  } finally {
    unlinkRegion(name);
  }
}

function requestMeta(tokens: number) {
  return {
    stream: false,
    logprobs: true,
    samplingMask: true,
    routedExperts: true,
    includeStopStrInOutput: false,
    includeUsage: false,
    continuousUsageStats: false,
    form: ResponseFormCode.Packed,
    promptLen: 16,
    routedExpertsPromptStart: 0,
    maxTokens: tokens,
    minTokens: 0,
    stop: [],
  };
}

const round1 = (x: number): number => Math.round(x * 10) / 10;

function runInChild(kind: ArenaKind, burst: Burst): Promise<ArenaReport> {
  const args = ['--child', kind, '--requests', `${burst.requests}`, '--tokens', `${burst.tokens}`];
  const child = fork(fileURLToPath(import.meta.url), args, {
    stdio: ['ignore', 'pipe', 'inherit', 'ipc'],
  });
  return new Promise((resolve, reject) => {
    child.once('message', (report) => resolve(report as ArenaReport));
    child.once('exit', (code) => reject(new Error(`the ${kind} run exited with code ${code}`)));
  });
}

function flagValue(flag: string, fallback: number): number {
  const at = process.argv.indexOf(flag);
  const value = at < 0 ? fallback : Number(process.argv[at + 1]);
  if (!Number.isInteger(value) || value < 1) throw new Error(`${flag} wants a positive integer`);
  return value;
}

async function main(): Promise<void> {
  const burst = { requests: flagValue('--requests', 64), tokens: flagValue('--tokens', 4096) };
  const child = process.argv.indexOf('--child');
  if (child >= 0) {
    const report = await runChild(process.argv[child + 1] as ArenaKind, burst);
    process.send?.(report, () => process.exit(ExitCode.Ok));
    return;
  }
  const reports = [await runInChild('reserved', burst), await runInChild('growable', burst)];
  console.log(
    `# ${burst.requests} requests x ${burst.tokens} tokens: logprobs, ${MASK_IDS} mask ids and ` +
      `${LAYERS} x ${TOPK} routing ids a token; RSS of the whole process, MiB`,
  );
  console.log('| arena | RSS before | RSS peak | RSS after drain | after / before | drain ms |');
  console.log('|:--|--:|--:|--:|--:|--:|');
  for (const r of reports) {
    console.log(
      `| ${r.arena} | ${r.rss_before_mb} | ${r.rss_peak_mb} | ${r.rss_after_mb} | ${r.after_over_before} | ${r.drain_ms} |`,
    );
  }
  if (process.argv.includes('--json')) {
    console.log(
      JSON.stringify({
        ...burst,
        arenas: reports,
        load_avg_1m: loadavg()[0],
        node: process.version,
      }),
    );
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(ExitCode.Failure);
});
