/** vLLM's bucket bounds, and that every histogram fits its slots in the region. */
import { describe, expect, it } from 'vitest';
import { CONFIG_FIELDS } from '../../src/config.js';
import {
  build125Buckets,
  GC_BUCKETS,
  ITL_BUCKETS,
  REQUEST_LATENCY_BUCKETS,
  TTFT_BUCKETS,
} from '../../src/obs/buckets.js';
import { rateLimit } from '../../src/obs/log.js';
import { RegionHistogram } from '../../src/obs/region-histogram.js';
import { GC_HIST_STRIDE, HIST_STRIDE } from '../../src/shm/layout.js';

describe('buckets', () => {
  it("builds vLLM's 1-2-5 buckets up to and including max_model_len", () => {
    expect(build125Buckets(100)).toEqual([1, 2, 5, 10, 20, 50, 100]);
    expect(build125Buckets(4096)).toEqual([1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000]);
    expect(build125Buckets(1)).toEqual([1]);
  });

  it('fits every histogram in its slots, up to the largest --max-model-len', () => {
    const maxModelLen = CONFIG_FIELDS.find((f) => f.key === 'maxModelLen')!.max!;
    for (const bounds of [
      TTFT_BUCKETS,
      ITL_BUCKETS,
      REQUEST_LATENCY_BUCKETS,
      build125Buckets(maxModelLen),
    ]) {
      expect(bounds.length + 2).toBeLessThanOrEqual(HIST_STRIDE);
      expect([...bounds].sort((a, b) => a - b)).toEqual(bounds);
    }
    expect(GC_BUCKETS.length + 2).toBeLessThanOrEqual(GC_HIST_STRIDE);
  });

  it('observes a value into the first bucket whose bound is >= it (Prometheus le)', () => {
    const slots = new Float64Array(10);
    const h = new RegionHistogram(slots, 1, [1, 2, 5]);
    for (const v of [0, 1, 1.5, 2, 5, 6, 1e9]) h.observe(v);
    // slot 0 untouched; buckets le=1, le=2, le=5, +Inf; sum
    expect(Array.from(slots.subarray(0, 6))).toEqual([0, 2, 2, 1, 2, 1_000_000_015.5]);
  });
});

describe('rateLimit', () => {
  it('lets one warning through per interval', async () => {
    const gate = rateLimit(50);
    expect([gate(), gate(), gate()]).toEqual([true, false, false]);
    await new Promise((r) => setTimeout(r, 60));
    expect(gate()).toBe(true);
  });
});
