// The output side without threads: slot meta, accumulators, arena, a StepScatter and a
// ResponseView over them, and `feed` to scatter hand-written STEP records. Text is the committed
// tiny tokenizer's bytes unless a test gives other TokenBytes.

import type { TokenBytes } from '../../../src/protocol/token-bytes.js';
import { AccumulatorTable } from '../../../src/server/cross-thread/accumulators.js';
import { BlockArena, createArenaBuffer } from '../../../src/server/cross-thread/block-arena.js';
import { ResponseView } from '../../../src/server/cross-thread/response-view.js';
import {
  ResponseFormCode,
  type SlotMetaFields,
  SlotMetaTable,
} from '../../../src/server/cross-thread/slot-meta.js';
import { StepScatter } from '../../../src/server/output-worker/scatter.js';
import { regionViews } from '../../../src/wire/messages.js';
import { TINY_BYTES } from '../tiny-tokens.js';
import { type StepGeometry, type StepRow, TINY_GEOMETRY, writeStep } from './step-records.js';

export interface Harness {
  meta: SlotMetaTable;
  acc: AccumulatorTable;
  arena: BlockArena;
  scatter: StepScatter;
  view: ResponseView;
  /** The token bytes the scatter writes text with (give them to a packer or stream encoder too). */
  tokens: TokenBytes;
  /** Scatters one STEP record made of `rows` (events of earlier feeds are cleared first). */
  feed(rows: readonly StepRow[], geometry?: StepGeometry): void;
  /** The same, keeping earlier events: several records in one drain pass. */
  feedMore(rows: readonly StepRow[], geometry?: StepGeometry): void;
}

export interface HarnessOptions {
  slots?: number;
  arenaInitialBytes?: number;
  arenaMaxBytes?: number;
  arenaGrowStepBytes?: number;
  /** The token bytes (default: the tiny tokenizer's table). */
  tokens?: TokenBytes;
}

export function makeHarness(opts: HarnessOptions = {}): Harness {
  const meta = new SlotMetaTable(opts.slots ?? 8);
  const acc = new AccumulatorTable(meta.slots);
  const arenaSab = createArenaBuffer(
    opts.arenaInitialBytes ?? 256 * 1024,
    opts.arenaMaxBytes ?? 64 * 1024 * 1024,
  );
  const arena = new BlockArena(arenaSab, { growStepBytes: opts.arenaGrowStepBytes ?? 256 * 1024 });
  const tokens = opts.tokens ?? TINY_BYTES;
  const scatter = new StepScatter({ meta, acc, arena, tokens });
  const view = new ResponseView(meta, acc, arenaSab);
  const records = regionViews(new SharedArrayBuffer(4 * 1024 * 1024));
  return {
    meta,
    acc,
    arena,
    scatter,
    view,
    tokens,
    feed(rows, geometry = TINY_GEOMETRY) {
      scatter.clearEvents();
      this.feedMore(rows, geometry);
    },
    feedMore(rows, geometry = TINY_GEOMETRY) {
      const length = writeStep(records, 64, rows, geometry);
      scatter.scatterStep(records, 64, length);
    },
  };
}

/** Slot meta for a plain request: every column asked, no stream, no stop strings. */
export function metaFields(overrides: Partial<SlotMetaFields> = {}): SlotMetaFields {
  return {
    stream: false,
    logprobs: true,
    samplingMask: true,
    routedExperts: true,
    includeStopStrInOutput: false,
    includeUsage: false,
    continuousUsageStats: false,
    form: ResponseFormCode.Packed,
    promptLen: 4,
    routedExpertsPromptStart: 0,
    maxTokens: 100,
    minTokens: 0,
    stop: [],
    ...overrides,
  };
}

/** The (slot, generation) pairs of an event list. */
export function events(list: {
  count: number;
  slots: Int32Array;
  generations: Int32Array;
}): number[][] {
  const out: number[][] = [];
  for (let i = 0; i < list.count; i++) out.push([list.slots[i]!, list.generations[i]!]);
  return out;
}
