/**
 * Random bytes where ring records live, fed to everything that decodes them, in-process: the ring
 * consumer's record framing (src/shm/ring.ts), the engine's ADD decoder and the output worker's STEP
 * scatter (src/wire/messages.ts, src/server/output-worker/scatter.ts). A corrupt record may be refused with
 * its own coded error (RS_ERR_RING_CORRUPT, RS_ERR_OUTPUT_BAD_STEP) or decoded into values the next
 * layer checks; anything else thrown (a RangeError, a TypeError), a record outside the ring's data,
 * or an ADD whose arrays do not match its declared lengths is a failure.
 */
import fc from 'fast-check';
import { isRingserveError } from '../../src/errors.js';
import { AccumulatorTable } from '../../src/server/cross-thread/accumulators.js';
import { BlockArena, createArenaBuffer } from '../../src/server/cross-thread/block-arena.js';
import { ByteLevelStandIn } from '../../src/server/cross-thread/detokenizer.js';
import { ResponseFormCode, SlotMetaTable } from '../../src/server/cross-thread/slot-meta.js';
import { StepScatter } from '../../src/server/output-worker/scatter.js';
import { RING_DATA, RING_HEAD, RING_TAIL } from '../../src/shm/layout.js';
import { RingConsumer } from '../../src/shm/ring.js';
import { type RegionViews, readAbortSlot, readAdd, regionViews } from '../../src/wire/messages.js';

const CAPACITY = 4096;
const SLOTS = 8;
/** The generation the fuzzed slots are open under; structured STEP rows use it half the time. */
const GEN = 1;
const ALLOWED_CODES = new Set(['RS_ERR_RING_CORRUPT', 'RS_ERR_OUTPUT_BAD_STEP']);

/** A ring whose header words and data are random, as a crashed or hostile producer leaves it. */
export interface RingState {
  head: number;
  tail: number;
  data: Uint8Array;
}

const i32 = fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 });

export const ringState: fc.Arbitrary<RingState> = fc
  .tuple(
    i32,
    fc.uint8Array({ minLength: 8, maxLength: 512 }),
    // Records laid end to end from the tail, as a producer writes them, with lengths and types that
    // are plausible, or not; then, a quarter of the time, a head that does not match them.
    fc.array(
      fc.tuple(fc.oneof(fc.nat({ max: 700 }), i32), fc.oneof(fc.constantFrom(0, 1, 2, 16), i32)),
      {
        maxLength: 8,
      },
    ),
    fc.oneof({ weight: 3, arbitrary: fc.constant(0) }, { weight: 1, arbitrary: i32 }),
  )
  .map(([tail, pattern, records, headSkew]) => {
    const data = new Uint8Array(CAPACITY);
    for (let i = 0; i < CAPACITY; i++) data[i] = pattern[i % pattern.length]!;
    const words = new Int32Array(data.buffer);
    let pos = tail;
    for (const [length, type] of records) {
      const at = (pos & (CAPACITY - 1)) >> 2;
      words[at] = length;
      words[at + 1] = type;
      pos = (pos + 8 + ((Math.max(0, length) + 7) & ~7)) | 0;
      if (((pos - tail) | 0) > CAPACITY) break;
    }
    return { head: (pos + headSkew) | 0, tail, data };
  });

/** A STEP record payload: random words, or a header and columns that point at open slots. */
export const stepPayload: fc.Arbitrary<Int32Array> = fc.oneof(
  fc.array(i32, { minLength: 0, maxLength: 400 }).map((w) => Int32Array.from(w)),
  fc
    .tuple(
      fc.integer({ min: 0, max: 12 }),
      fc.integer({ min: 0, max: 4 }),
      fc.integer({ min: 0, max: 4 }),
      fc.constantFrom(1, 2),
      fc.array(fc.integer({ min: -3, max: 1100 }), { minLength: 400, maxLength: 400 }),
      fc.array(fc.nat({ max: 6 }), { minLength: 12, maxLength: 12 }),
      fc.array(i32, { maxLength: 4 }),
    )
    .map(([count, layers, topk, idBytes, noise, finishes, lies]) => {
      // A STEP record as the engine writes one (stepRecordBytes), with every value random.
      const stride = ((count * 4 + 7) & ~7) >> 2;
      let masks = 0;
      let rows = 0;
      const maskCounts = finishes.map((f) => f % 3);
      const rowCounts = finishes.map((f) => f % 2);
      for (let j = 0; j < count; j++) {
        masks += maskCounts[j]!;
        rows += rowCounts[j]!;
      }
      // The header: i32[10] and f64[2] (14 words); then 17 columns.
      const words = new Int32Array(14 + stride * 17 + masks + 64);
      words.set([count, masks, rows, layers, topk, idBytes, 0, 0, 0, 0], 0);
      for (let k = 14; k < words.length; k++) words[k] = noise[k % noise.length]!;
      const col = (c: number, j: number) => 14 + c * stride + j;
      for (let j = 0; j < count; j++) {
        words[col(0, j)] = Math.abs(words[col(0, j)]!) % SLOTS;
        words[col(3, j)] = finishes[j]!;
        words[col(7, j)] = maskCounts[j]!;
        words[col(8, j)] = rowCounts[j]!;
        words[col(10, j)] = GEN;
        words[col(16, j)] = 0;
      }
      // A few words anywhere replaced by any 32-bit value.
      for (const lie of lies) words[Math.abs(lie) % words.length] = lie;
      return words;
    }),
);

function thrownProblem(where: string, error: unknown): string | null {
  if (isRingserveError(error) && ALLOWED_CODES.has(error.code)) return null;
  return `${where} threw ${(error as Error)?.stack ?? String(error)}`;
}

/** Every ADD decode must be null or arrays that match its declared lengths. */
function addProblem(v: RegionViews, offset: number, length: number): string | null {
  try {
    const add = readAdd(v, offset, length, 0);
    if (add === null) return null;
    if (
      !(add.promptTokenIds instanceof Int32Array) ||
      !(add.params.stopTokenIds instanceof Int32Array)
    ) {
      return 'readAdd returned arrays of the wrong type';
    }
    const used = add.promptTokenIds.length * 4 + add.params.stopTokenIds.length * 4;
    if (used > length) return `readAdd returned ${used} bytes of ids from a ${length}-byte record`;
    return null;
  } catch (error) {
    return thrownProblem('readAdd', error);
  }
}

/** The output side of one API server with every slot open, for scatter to write into. */
export function makeScatter(): StepScatter {
  const meta = new SlotMetaTable(SLOTS);
  const acc = new AccumulatorTable(meta.slots);
  const arenaSab = createArenaBuffer(64 * 1024, 4 * 1024 * 1024);
  const arena = new BlockArena(arenaSab, { growStepBytes: 64 * 1024 });
  for (let slot = 0; slot < SLOTS; slot++) {
    meta.write(slot, GEN, {
      stream: slot % 2 === 0,
      logprobs: true,
      samplingMask: slot % 3 !== 0,
      routedExperts: slot % 4 !== 0,
      includeStopStrInOutput: false,
      includeUsage: true,
      continuousUsageStats: false,
      form: ResponseFormCode.Packed,
      promptLen: 4,
      routedExpertsPromptStart: 0,
      maxTokens: 64,
      minTokens: 0,
      stop: slot === 5 ? ['ab'] : [],
    });
  }
  return new StepScatter({ meta, acc, arena, tokens: new ByteLevelStandIn([999]) });
}

const stepViews = regionViews(new SharedArrayBuffer(64 * 1024));

/** One STEP payload through a scatter (one per case, or shared across a run). */
export function stepProblem(scatter: StepScatter, payload: Int32Array): string | null {
  stepViews.i32.fill(0);
  stepViews.i32.set(payload, 16);
  try {
    scatter.clearEvents();
    scatter.scatterStep(stepViews, 64, payload.length * 4);
    return null;
  } catch (error) {
    return thrownProblem('StepScatter.scatterStep', error);
  }
}

/** Reads every record a random ring state yields and feeds each to every decoder. */
export function ringProblem(state: RingState, scatter: StepScatter): string | null {
  const sab = new SharedArrayBuffer(RING_DATA + CAPACITY);
  const words = new Int32Array(sab);
  new Uint8Array(sab, RING_DATA).set(state.data);
  words[RING_HEAD >> 2] = state.head;
  words[RING_TAIL >> 2] = state.tail;
  let consumer: RingConsumer;
  try {
    consumer = new RingConsumer(sab, 0, CAPACITY);
  } catch (error) {
    return thrownProblem('new RingConsumer', error);
  }
  try {
    for (let n = 0; n < 64 && consumer.next(); n++) {
      const { offset, length } = consumer;
      if (offset < RING_DATA || offset + length > RING_DATA + CAPACITY) {
        return `a record at ${offset} of ${length} bytes lies outside the ring's data`;
      }
      const problem =
        addProblem(consumer, offset, length) ??
        stepProblem(scatter, new Int32Array(sab.slice(offset, offset + (length & ~3))));
      if (problem !== null) return problem;
      readAbortSlot(consumer, offset);
    }
    return null;
  } catch (error) {
    return thrownProblem('RingConsumer.next', error);
  }
}

export interface RingFuzzReport {
  cases: number;
  failures: string[];
}

/** `cases` runs each of the ring and STEP properties; the first failure is fast-check's shrunk one. */
export function runRingFuzz(cases: number, seed: number): RingFuzzReport {
  const failures: string[] = [];
  const scatter = makeScatter();
  for (const [name, arbitrary, check] of [
    ['ring records', ringState, (s: RingState) => ringProblem(s, scatter)],
    ['STEP records', stepPayload, (p: Int32Array) => stepProblem(makeScatter(), p)],
  ] as const) {
    const result = fc.check(
      fc.property(arbitrary as fc.Arbitrary<unknown>, (value) => {
        const problem = (check as (v: unknown) => string | null)(value);
        if (problem !== null) throw new Error(problem);
      }),
      // No shrinking: a counterexample of a 4 KiB ring shrinks for many minutes; it is printed as found.
      { numRuns: cases, seed, endOnFailure: true },
    );
    if (result.failed) {
      failures.push(
        `${name}: ${result.errorInstance instanceof Error ? result.errorInstance.message : String(result.errorInstance)} (counterexample ${fc.stringify(result.counterexample).slice(0, 400)})`,
      );
    }
  }
  return { cases, failures };
}
