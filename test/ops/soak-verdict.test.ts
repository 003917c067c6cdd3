/**
 * Which /health probes the soak's verdict judges (ops/soak/verdict.ts): none that started in the
 * warm-up (--health-warmup), none overlapping a fault's window (injection to recovery + grace, or to
 * the end of the run for a fault never recovered); every other one, however slow.
 */
import { describe, expect, it } from 'vitest';
import {
  engineKillsUntil,
  type Fault,
  faultTargets,
  WITNESS_TITLE,
} from '../../ops/soak/faults.js';
import type { ProbeSample } from '../../ops/soak/health-probe.js';
import { parseSoakOptions } from '../../ops/soak/options.js';
import type { ProcessInfo } from '../../ops/soak/processes.js';
import {
  judgedGrowth,
  judgedProbes,
  judgedSlopes,
  type RssSeries,
} from '../../ops/soak/verdict.js';

const probe = (atMs: number, latencyMs = 1): ProbeSample => ({ atMs, latencyMs, status: 200 });
const fault = (injectedAtMs: number, recoveredAtMs: number | null): Fault => ({
  kind: 'kill-api',
  title: 'ringserve-api-0',
  injectedAtMs,
  recoveredAtMs,
});

describe('judgedProbes', () => {
  const window = { warmupEndMs: 10_000, graceMs: 2_000, endMs: 100_000 };

  it('leaves out the warm-up and nothing else when there is no fault', () => {
    const probes = [probe(0, 750), probe(9_999), probe(10_000), probe(50_000, 300)];
    expect(judgedProbes(probes, [], window).map((p) => p.atMs)).toEqual([10_000, 50_000]);
  });

  it('leaves out a fault window up to recovery + grace, and a probe still in flight at injection', () => {
    const probes = [
      probe(19_000, 500), // in flight when the fault is injected at 19.4 s
      probe(18_000, 10), // answered before it
      probe(25_000, 200),
      probe(32_000, 211), // within recovery (30 s) + grace (2 s)
      probe(32_001, 71), // after it: judged
    ];
    expect(judgedProbes(probes, [fault(19_400, 30_000)], window).map((p) => p.atMs)).toEqual([
      18_000, 32_001,
    ]);
  });

  it('a fault never recovered covers the rest of the run', () => {
    const probes = [probe(40_000), probe(60_000), probe(99_000)];
    expect(judgedProbes(probes, [fault(50_000, null)], window).map((p) => p.atMs)).toEqual([
      40_000,
    ]);
  });
});

describe('RSS over the judged span', () => {
  const o = parseSoakOptions(['--warmup', '10', '--slope-window', '60']);
  const MB = 1048576;
  // 2 s samples for 100 s: private memory flat at 150 MB, shared-region pages growing 50 -> 99 MB.
  const series = (key: string, seconds: number): RssSeries => {
    const s: RssSeries = { key, startedAtMs: 0, points: [], parts: [] };
    for (let t = 0; t <= seconds; t += 2) {
      const shmem = (50 + t / 2) * MB;
      s.points.push([t * 1000, 150 * MB + shmem]);
      s.parts.push({ anonBytes: 150 * MB, shmemBytes: shmem });
    }
    return s;
  };

  it('judges only series with the slope window after warm-up, and says which part grew', () => {
    const all = [series('api-0#1', 100), series('api-1#2', 60)];
    expect([...judgedSlopes(all, o).keys()]).toEqual(['api-0#1']);
    expect(judgedGrowth(all, o)).toEqual([
      'api-0#1 RSS 205 -> 250 MB (private 150 -> 150, shared region 55 -> 100)',
    ]);
  });
});

describe('soak options', () => {
  it('takes a subset of fault kinds, in the order given, and refuses an unknown one naming the flag', () => {
    expect(parseSoakOptions([]).faultKinds).toEqual(['kill-api', 'kill-engine', 'stop-api']);
    expect(parseSoakOptions(['--faults', 'stop-api,kill-engine']).faultKinds).toEqual([
      'stop-api',
      'kill-engine',
    ]);
    expect(() => parseSoakOptions(['--faults', 'kill-api,reboot'])).toThrow(/--faults.*"reboot"/);
    expect(() => parseSoakOptions(['--faults', ''])).toThrow(/--faults/);
  });
});

describe('fault schedule', () => {
  const proc = (pid: number, title: string): ProcessInfo => ({
    pid,
    title,
    rssBytes: 0,
    anonBytes: 0,
    fileBytes: 0,
    shmemBytes: 0,
    state: 'S',
  });
  const procs = [
    proc(1, 'ringserve-engine'),
    proc(2, 'ringserve-api-0'),
    proc(3, 'ringserve-api-1'),
    proc(4, 'ringserve-api-2'),
  ];
  const titles = (ps: ProcessInfo[]) => ps.map((p) => p.title);

  it('SIGKILL spares the witness API server; SIGSTOP and the engine kill do not care', () => {
    const w = WITNESS_TITLE;
    expect(titles(faultTargets('kill-api', procs, w))).toEqual([
      'ringserve-api-1',
      'ringserve-api-2',
    ]);
    expect(titles(faultTargets('stop-api', procs, w))).toEqual([
      'ringserve-api-0',
      'ringserve-api-1',
      'ringserve-api-2',
    ]);
    expect(titles(faultTargets('kill-engine', procs, w))).toEqual(['ringserve-engine']);
    expect(titles(faultTargets('kill-api', procs.slice(0, 2), null))).toEqual(['ringserve-api-0']);
  });

  it('stops killing the engine in the last warm-up + window (+ margin) of a long run only', () => {
    const o = { durationS: 3600, warmupS: 600, slopeWindowS: 600 };
    expect(engineKillsUntil(o, 1_000_000, 60_000)).toBe(1_000_000 + 2_400_000 - 60_000);
    expect(engineKillsUntil({ ...o, durationS: 2399 }, 0)).toBe(Number.POSITIVE_INFINITY);
    expect(engineKillsUntil({ ...o, durationS: 180, warmupS: 60 }, 0)).toBe(
      Number.POSITIVE_INFINITY,
    );
  });
});
