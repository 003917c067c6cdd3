// The measuring half of an allocation probe, shared by the fixtures that prove a hot path
// allocates nothing per token (test/fixtures/output-scatter-alloc.mjs,
// test/obs/fixtures/recorder-alloc.mjs, test/sim/fixtures/engine-alloc.mjs). A fixture is a plain
// Node script over dist/: it builds its hot loop as `step(n)`, warms it up, and hands it here.
// runAllocProbe (spawn-alloc-probe.ts) starts it with --expose-gc and a young generation large
// enough (64 MB semi-spaces) that no scavenge runs during a measured round, so heap growth over a
// round is what the loop allocated.
import { PerformanceObserver } from 'node:perf_hooks';
import v8 from 'node:v8';

const settle = () => new Promise((resolve) => setTimeout(resolve, 20));

const newSpaceUsed = () =>
  v8.getHeapSpaceStatistics().find((s) => s.space_name === 'new_space')?.space_used_size ?? 0;

/**
 * Runs `step(0)`, `step(1)`, ...: `warmup` steps, then `rounds` rounds of `steps` steps, each round
 * after a full GC, and returns the smallest figures over the rounds: per-token garbage recurs in
 * every round, while the optimising compiler's code objects (heap too) land in one round at most.
 *   grownBytes:    heap growth across the round, no GC in between (what the loop allocated);
 *   newSpaceBytes: young-generation growth across the round (allocation alone, no code objects);
 *   retainedBytes: heap growth once a full GC has run after the round (what the loop kept);
 *   gcsDuring:     the most GCs any round saw (anything but 0 makes the figures meaningless).
 */
export async function measureRounds(step, { warmup = 0, steps, rounds = 3 }) {
  for (let n = 0; n < warmup; n++) step(n);
  let gcs = 0;
  const observer = new PerformanceObserver((list) => {
    gcs += list.getEntries().length;
  });
  const out = {
    grownBytes: Number.POSITIVE_INFINITY,
    newSpaceBytes: Number.POSITIVE_INFINITY,
    retainedBytes: Number.POSITIVE_INFINITY,
    gcsDuring: 0,
  };
  let n = warmup;
  for (let round = 0; round < rounds; round++) {
    globalThis.gc();
    await settle();
    gcs = 0;
    observer.observe({ entryTypes: ['gc'] });
    // The heap window holds the loop alone; the young one also the two memoryUsage() objects.
    const youngBefore = newSpaceUsed();
    const before = process.memoryUsage().heapUsed;
    for (const end = n + steps; n < end; n++) step(n);
    const after = process.memoryUsage().heapUsed;
    const young = newSpaceUsed() - youngBefore;
    await settle();
    observer.disconnect();
    out.gcsDuring = Math.max(out.gcsDuring, gcs);
    globalThis.gc();
    out.grownBytes = Math.min(out.grownBytes, after - before);
    out.newSpaceBytes = Math.min(out.newSpaceBytes, young);
    out.retainedBytes = Math.min(out.retainedBytes, process.memoryUsage().heapUsed - before);
  }
  return out;
}

/** Prints a probe's figures as the one JSON line runAllocProbe reads. */
export function report(figures) {
  console.log(JSON.stringify(figures));
}
