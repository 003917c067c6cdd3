// A StepScatter with a RequestRecorder attached, over plain buffers: the output worker's metrics
// path without threads or a region. Records carry an engine clock and step duration the test picks;
// the recorder's wall clock is the test's too.

import { RequestRecorder } from '../../src/obs/request-recorder.js';
import { RequestTimeline } from '../../src/obs/request-timeline.js';
import { AccumulatorTable } from '../../src/server/cross-thread/accumulators.js';
import { BlockArena, createArenaBuffer } from '../../src/server/cross-thread/block-arena.js';
import { ByteLevelStandIn } from '../../src/server/cross-thread/detokenizer.js';
import { type SlotMetaFields, SlotMetaTable } from '../../src/server/cross-thread/slot-meta.js';
import { StepScatter } from '../../src/server/output-worker/scatter.js';
import { REQ_METRICS_SLOT_COUNT } from '../../src/shm/layout.js';
import { regionViews } from '../../src/wire/messages.js';
import { metaFields } from '../server/output/harness.js';
import { type StepRow, TINY_GEOMETRY, writeStep } from '../server/output/step-records.js';

/** Where the recorder's slots start in `slots`: not 0, so an index bug shows. */
export const BASE = 40;

export interface RecorderHarness {
  slots: Float64Array;
  timeline: RequestTimeline;
  meta: SlotMetaTable;
  scatter: StepScatter;
  /** The recorder's wall clock, ms. */
  now: { ms: number };
  /** A request enters: slot meta written, arrival at `arrivalMs` (wall clock). */
  open(slot: number, gen: number, arrivalMs: number, fields?: Partial<SlotMetaFields>): void;
  /** One STEP record at engine clock `clockMs` that modelled `stepMs`, handled at wall `nowMs`. */
  step(clockMs: number, stepMs: number, nowMs: number, rows: readonly StepRow[]): void;
  /** Request-metrics slot `slot` (an RM_* constant, plus a bucket index for histograms). */
  at(slot: number): number;
}

export function makeRecorderHarness(maxModelLen = 4096): RecorderHarness {
  const meta = new SlotMetaTable(8);
  const acc = new AccumulatorTable(meta.slots);
  const arena = new BlockArena(createArenaBuffer(256 * 1024, 16 * 1024 * 1024));
  const slots = new Float64Array(BASE + REQ_METRICS_SLOT_COUNT + 8);
  const timeline = new RequestTimeline(meta.slots);
  const now = { ms: 0 };
  const recorder = new RequestRecorder({
    slots,
    base: BASE,
    timeline,
    promptLen: (slot) => meta.promptLen(slot),
    maxModelLen,
    clock: () => now.ms,
  });
  const scatter = new StepScatter({
    meta,
    acc,
    arena,
    tokens: new ByteLevelStandIn([999]),
    metrics: recorder,
  });
  const records = regionViews(new SharedArrayBuffer(1024 * 1024));
  return {
    slots,
    timeline,
    meta,
    scatter,
    now,
    open(slot, gen, arrivalMs, fields = {}) {
      meta.write(slot, gen, metaFields({ samplingMask: false, routedExperts: false, ...fields }));
      timeline.arrive(slot, arrivalMs);
    },
    step(clockMs, stepMs, nowMs, rows) {
      const offset = 64;
      const length = writeStep(records, offset, rows, TINY_GEOMETRY);
      // The STEP header's f64 pair follows its i32[10] (messages.ts).
      records.f64[(offset >> 3) + 5] = clockMs;
      records.f64[(offset >> 3) + 6] = stepMs;
      now.ms = nowMs;
      scatter.clearEvents();
      scatter.scatterStep(records, offset, length);
    },
    at: (slot) => slots[BASE + slot]!,
  };
}
