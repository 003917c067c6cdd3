/**
 * The CI share of the fuzz (ops/fuzz/; `npm run fuzz` runs 100,000): 5,000 route cases on a real
 * cluster, 5,000 of each ring-record property and 5,000 mutated vLLM engine messages in-process,
 * with a fixed seed so a failure here
 * reproduces with `npm run fuzz -- --cases 5000 --seed 15`. Also the decoder bugs it found, as
 * plain regressions.
 */
import { describe, expect, it } from 'vitest';
import { FUZZ_CLUSTER_FLAGS } from '../../ops/fuzz/flags.js';
import { runHttpFuzz } from '../../ops/fuzz/http-fuzz.js';
import { makeScatter, ringProblem, runRingFuzz, stepProblem } from '../../ops/fuzz/ring-fuzz.js';
import { runVllmFuzz, vllmProblem } from '../../ops/fuzz/vllm-fuzz.js';
import { regionViews } from '../../src/wire/messages.js';
import { startCluster } from '../cluster/harness.js';

const CASES = 5_000;
const SEED = 15;

describe('fuzz', () => {
  it('ring records: random bytes never get past the decoders uncaught', () => {
    expect(runRingFuzz(CASES, SEED).failures).toEqual([]);
  });

  it('vLLM engine messages: a mutated one costs only the requests it names', () => {
    expect(runVllmFuzz(CASES, SEED).failures).toEqual([]);
  });

  // A message that is not an array at all: broken from its first byte, every request it would
  // have named fails, the link stays (case `{kind: 'flip', at: 0}` pinned).
  it('an EngineCoreOutputs that is not an array is a broken message, reported, not thrown', () => {
    expect(
      vllmProblem({ layout: 0, requests: 4, mutation: { kind: 'flip', at: 0, value: 0 } }),
    ).toBeNull();
  });

  it('a STEP header declaring 2^30 outputs is refused, not looped over', () => {
    const header = Int32Array.from([2 ** 30, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    expect(stepProblem(makeScatter(), header)).toBeNull();
  });

  // Case 14,374 of seed 15 (100,000 cases): negative routing factors made the declared size
  // negative, so ~1.7e9 outputs passed the length check and the output worker spun for minutes.
  it.each([
    ['the case found', [1737003325, 5, 1369409198, -1838625203, 1805957132, 1, -7, 1930563297, 13]],
    ['one negative factor', [2 ** 30, 0, 2 ** 30, -(2 ** 31 - 1), 1, 1, 0, 0, 0, 0, 0, 0]],
  ])('a STEP header with negative layers or top-k is refused (%s)', (_name, header) => {
    const views = regionViews(new SharedArrayBuffer(4096));
    views.i32.set(header, 16);
    expect(() => makeScatter().scatterStep(views, 64, header.length * 4)).toThrow(
      /declares more than it holds/,
    );
  });

  it('a ring record of length 2^31 - 7 is corrupt, not read past the ring', () => {
    const data = new Uint8Array(4096);
    new Int32Array(data.buffer).set([2 ** 31 - 7, 1]);
    expect(ringProblem({ head: 2 ** 31 - 8, tail: 0, data }, makeScatter())).toBeNull();
  });

  it('routes: every answer is a 2xx or a 4xx with the contract body, and the cluster stays up', async () => {
    const cluster = await startCluster([...FUZZ_CLUSTER_FLAGS]);
    const report = await runHttpFuzz(cluster.url, cluster.port, CASES, SEED);
    expect(report.failures).toEqual([]);
    expect(report.healthyAfter).toBe(true);
    expect(Object.keys(report.statuses).filter((s) => Number(s) >= 500)).toEqual([]);
    expect(cluster.log()).not.toMatch(/exited; restarting it/);
  }, 240_000);
});
