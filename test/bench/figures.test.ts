import { describe, expect, it } from 'vitest';
import type { LoadResult, ProbeResult } from '../../bench/loadtest/messages.js';
import type { MetricsSnapshot, ServerFigures } from '../../bench/loadtest/prom-text.js';
import { ARMS } from '../../bench/rollout/arms.js';
import { armFigures, counterRate } from '../../bench/rollout/figures.js';
import type { ArmRun } from '../../bench/rollout/run-arm.js';
import { jsonLine, markdownTable, ratioLine } from '../../bench/rollout/table.js';

const T0 = 1_000_000;
const MIB = 1024 * 1024;
const sumGc = (f: ServerFigures): number => Object.values(f.gcSeconds).reduce((a, b) => a + b, 0);

function server(k: number, at: number): ServerFigures {
  // Linear in time: 0.05 s of GC per second per server, one major GC every 10 s. Its other threads
  // add 0.03 s of GC per second; the process uses 0.3 s of CPU per second.
  return {
    server: k,
    gcSeconds: { minor: 0.04 * at, major: 0.01 * at, incremental: 0, weakcb: 0 },
    gcCount: { minor: 10 * at, major: Math.floor(at / 10), incremental: 0, weakcb: 0 },
    gcPauseMaxSeconds: { minor: 0.002, major: 0.03 + 0.01 * k, incremental: 0, weakcb: 0 },
    eventLoopLagP99Seconds: 0.004 + at / 10_000,
    eventLoopLagMaxSeconds: 0.02 + at / 1000,
    heapUsedBytes: (10 + (at % 7) + k) * MIB,
    rssBytes: 300 * MIB,
    cpuSeconds: 0.3 * at,
    inFlight: 64,
    threadGcSeconds: { main: 0.05 * at, output: 0.02 * at, 'packer-1': 0.01 * at, log: 0 },
    threadGcPauseMaxSeconds: { main: 0.03 + 0.01 * k, output: 0.002, 'packer-1': 0.05 + 0.02 * k },
    threadHeapUsedBytes: {
      main: (10 + (at % 7) + k) * MIB,
      output: 5 * MIB,
      'packer-1': 3 * MIB,
      log: 2 * MIB,
    },
  };
}

/** What a server reports once the load has gone: RSS only matters. */
function drained(k: number, rssMib: number): ServerFigures {
  return { ...server(k, 26), inFlight: 0, rssBytes: rssMib * MIB };
}

/** Scrapes every second from t=0 (load start) to t=25 s, two API servers. */
function snapshots(): MetricsSnapshot[] {
  return Array.from({ length: 26 }, (_, s) => ({
    atMs: T0 + s * 1000,
    generationTokensTotal: 30_000 * s,
    servers: [server(0, s), server(1, s)],
  }));
}

function run(overrides: Partial<ProbeResult> = {}): ArmRun {
  const health = Array.from({ length: 500 }, (_, i) => i); // due every 50 ms from t=0
  const load: LoadResult = {
    done: 4,
    errors: 0,
    bytes: 0,
    tokens: 0,
    startedAtMs: T0,
    // One request finished in the warm-up, three in the window.
    finishedAtMs: [T0 + 2000, T0 + 6000, T0 + 12_000, T0 + 24_000],
    latencyMs: [1, 1, 1, 1],
    bodyBytes: [999_999, 400_000, 800_000, 1_200_000],
    completionTokens: [7, 1000, 2000, 3000],
    lengthMismatches: 0,
    cut: 2,
    errorSamples: [],
    sampledBodies: [],
  };
  const probe: ProbeResult = {
    healthAtMs: health.map((i) => T0 + i * 50),
    // 1 ms everywhere, 5000 ms during the warm-up (left out), 100 ms once in the window.
    healthMs: health.map((i) => (i === 20 ? 5000 : i === 300 ? 100 : 1)),
    healthStatus: health.map((i) => (i === 310 ? 503 : 200)),
    // The floor server, three quarters of a period later: 0.5 ms, 3000 ms in the warm-up, 20 ms
    // once in the window, one probe unanswered.
    floorAtMs: health.map((i) => T0 + i * 50 + 37.5),
    floorMs: health.map((i) => (i === 30 ? 3000 : i === 200 ? 20 : 0.5)),
    floorStatus: health.map((i) => (i === 250 ? 0 : 200)),
    metrics: snapshots(),
    engineTokensAtMs: [T0 + 5000, T0 + 25_000],
    engineTokens: [150_000, 750_000],
    metricsFailures: 0,
    metricsFailureSample: null,
    cycleAtMs: [T0 + 2000, T0 + 10_000, T0 + 20_000],
    pauseMs: [1, 1, 1],
    updateMs: [1, 1, 1],
    resumeMs: [1, 1, 1],
    cycleMs: [900, 12, 30],
    cycleFailures: 0,
    cycleFailureSample: null,
    drain: {
      atMs: T0 + 27_000,
      generationTokensTotal: 750_000,
      servers: [drained(0, 120), drained(1, 150)],
    },
    drainProblem: null,
    ...overrides,
  };
  return {
    arm: ARMS.find((a) => a.name === 'packed-mask')!,
    startedAtMs: T0,
    windowStartMs: T0 + 5000,
    wallMs: 20_000,
    load,
    probe,
    clientParseMs: [2, 4],
    clientParseProblems: [],
    clusterEvents: { apiServerRestarts: 0, engineRestarts: 0, outOfMemory: 0 },
    clusterLog: '',
  };
}

describe('armFigures', () => {
  it('measures the window only: requests, probes, cycles and counters after the warm-up', () => {
    const f = armFigures(run());
    expect(f.name).toBe('packed-mask');
    expect(f.done_reqs).toBe(3);
    expect(f.tokens_per_resp).toBe(2000);
    expect(f.resp_bytes_per_token).toBe(400);
    expect(f.resp_bytes_mean).toBe(800_000);
    expect(f.health_probes).toBe(400);
    expect(f.health_p50_ms).toBe(1);
    expect(f.health_max_ms).toBe(100);
    expect(f.health_failures).toBe(1);
    expect(f.update_cycles).toBe(2);
    expect(f.update_cycle_max_ms).toBe(30);
    expect(f.update_cycle_p99_ms).toBe(30);
    expect(f.gen_tok_s).toBe(30_000);
    expect(f.gen_tok_s_engine).toBe(30_000);
    expect(f.client_parse_ms_mean).toBe(3);
    expect(f.arm_wall_s).toBe(20);
  });

  it("times the floor server's /health over the same window, and notes its failures", () => {
    const f = armFigures(run());
    expect(f.floor_health_p50_ms).toBe(0.5);
    expect(f.floor_health_p99_ms).toBe(0.5);
    expect(f.floor_health_max_ms).toBe(20);
    expect(f.notes).toContain('1 of 400 floor /health probes got no 200');
    const none = armFigures(run({ floorAtMs: [], floorMs: [], floorStatus: [] }));
    expect(none.floor_health_p99_ms).toBeNull();
    expect(none.floor_health_max_ms).toBeNull();
  });

  it('sums GC over API servers, as a share of wall time, and takes peaks of the largest server', () => {
    const f = armFigures(run());
    // 2 servers x 0.05 s of GC per second = 10 % of wall.
    expect(f.gc_pct_wall).toBeCloseTo(10, 3);
    // Majors at 10 and 20 s on each server, counted from the 5 s scrape to the 25 s one.
    expect(f.major_gc_count).toBe(4);
    expect(f.gc_count_by_kind).toEqual({ minor: 400, major: 4, incremental: 0, weakcb: 0 });
    expect(f.max_gc_pause_ms).toBe(40);
    expect(f.eld_p99_ms).toBeCloseTo(6.5, 5);
    expect(f.eld_max_ms).toBe(45);
    // Heap is 10 + (s mod 7) + k MiB: the window's peak is 10 + 6 + 1 at s = 6, 13 or 20.
    expect(f.main_heap_peak_mb).toBe(17);
    expect(f.rss_peak_mb).toBe(300);
    expect(f.notes).toEqual([
      '1 of 400 /health probes got no 200 (no answer or an error)',
      '1 of 400 floor /health probes got no 200',
    ]);
  });

  it('adds every thread of the process: GC, longest pause, heap of all isolates, CPU per token', () => {
    const f = armFigures(run());
    // 2 servers x (0.05 + 0.02 + 0.01) s of GC per second, every thread; the main thread's stays.
    expect(f.gc_pct_wall_all_threads).toBeCloseTo(16, 3);
    expect(f.gc_pct_wall).toBeCloseTo(10, 3);
    // packer-1 of server 1: 0.05 + 0.02 s.
    expect(f.max_gc_pause_ms_all_threads).toBe(70);
    expect(f.max_gc_pause_ms).toBe(40);
    // The main thread's peak 17 MiB plus 5 + 3 + 2 MiB of the other isolates.
    expect(f.heap_peak_mb_all_threads).toBe(27);
    // 2 x 0.3 CPU s per s over 30,000 tok/s: 20 ms per 1,000 tokens.
    expect(f.cpu_ms_per_1k_tokens).toBeCloseTo(20, 5);
    // The largest server's RSS in the scrape after drain.
    expect(f.rss_after_drain_mb).toBe(150);
    expect(f.failed_reqs).toBe(0);
  });

  it('has all-thread figures equal to the main thread plus pino where those are the threads', () => {
    const inline = (s: MetricsSnapshot): MetricsSnapshot => ({
      ...s,
      servers: s.servers.map((f) => ({
        ...f,
        threadGcSeconds: { main: sumGc(f), log: 0 },
        threadGcPauseMaxSeconds: { main: Math.max(...Object.values(f.gcPauseMaxSeconds)), log: 0 },
        threadHeapUsedBytes: { main: f.heapUsedBytes!, log: 2 * MIB },
      })),
    });
    const f = armFigures(run({ metrics: snapshots().map(inline) }));
    expect(f.gc_pct_wall_all_threads).toBe(f.gc_pct_wall);
    expect(f.max_gc_pause_ms_all_threads).toBe(f.max_gc_pause_ms);
    expect(f.heap_peak_mb_all_threads).toBe(f.main_heap_peak_mb! + 2);
  });

  it('counts failed requests and says why RSS after drain is missing', () => {
    const r = run({
      drain: null,
      drainProblem: 'requests still in flight 20 s after the load stopped',
    });
    r.load.errors = 3;
    const f = armFigures(r);
    expect(f.failed_reqs).toBe(3);
    expect(f.rss_after_drain_mb).toBeNull();
    expect(f.notes.join()).toMatch(/RSS after drain: requests still in flight/);
  });

  it('leaves the whole-process figures null where the servers publish no thread or CPU series', () => {
    const old = snapshots().map((s) => ({
      ...s,
      servers: s.servers.map((f) => ({
        ...f,
        cpuSeconds: null,
        threadGcSeconds: {},
        threadGcPauseMaxSeconds: {},
        threadHeapUsedBytes: {},
      })),
    }));
    const f = armFigures(run({ metrics: old }));
    expect(f.gc_pct_wall_all_threads).toBeNull();
    expect(f.max_gc_pause_ms_all_threads).toBeNull();
    expect(f.heap_peak_mb_all_threads).toBeNull();
    expect(f.cpu_ms_per_1k_tokens).toBeNull();
    expect(f.gc_pct_wall).toBeCloseTo(10, 3);
  });

  it('falls back to the engine counter, with a note, where the metrics counter does not move', () => {
    const metrics = snapshots().map((s) => ({ ...s, generationTokensTotal: 0 }));
    const f = armFigures(run({ metrics }));
    expect(f.gen_tok_s).toBe(30_000);
    expect(f.notes.join()).toMatch(/did not move/);
  });

  it('says when the supervisor had to restart a process during the arm', () => {
    const crashed = {
      ...run(),
      clusterEvents: { apiServerRestarts: 2, engineRestarts: 0, outOfMemory: 2 },
    };
    expect(armFigures(crashed).notes.join()).toMatch(
      /restarted 2 API server\(s\) and 0 engine\(s\) that died \(2 reported "JavaScript heap out of memory"\)/,
    );
  });

  it('leaves figures it cannot know as null, and says why', () => {
    const f = armFigures(
      run({ metrics: [], metricsFailures: 3, metricsFailureSample: 'HTTP 404' }),
    );
    expect(f.gc_pct_wall).toBeNull();
    expect(f.main_heap_peak_mb).toBeNull();
    expect(f.notes.join()).toMatch(/3 failed scrapes: HTTP 404/);
  });
});

describe('the report text', () => {
  it('has every key the issue lists in its JSON line', () => {
    const figures = [armFigures(run())];
    const parsed = JSON.parse(jsonLine('quick', figures));
    expect(parsed.profile).toBe('quick');
    for (const key of [
      'name',
      'gen_tok_s',
      'done_reqs',
      'gc_pct_wall',
      'major_gc_count',
      'max_gc_pause_ms',
      'eld_p99_ms',
      'eld_max_ms',
      'health_p50_ms',
      'health_p99_ms',
      'health_max_ms',
      'update_cycle_p99_ms',
      'resp_bytes_per_token',
      'client_parse_ms_mean',
      'tokens_per_resp',
      'main_heap_peak_mb',
      'rss_peak_mb',
      'gc_pct_wall_all_threads',
      'max_gc_pause_ms_all_threads',
      'cpu_ms_per_1k_tokens',
      'heap_peak_mb_all_threads',
      'rss_after_drain_mb',
      'failed_reqs',
    ]) {
      expect(parsed.arms[0], key).toHaveProperty(key);
    }
  });

  it('draws one table row per arm and a ratio line between objects and packed', () => {
    const packed = armFigures(run());
    const objects = { ...packed, name: 'objects-mask', health_max_ms: 1000, gen_tok_s: 15_000 };
    const table = markdownTable([objects, packed]).split('\n');
    expect(table).toHaveLength(4);
    expect(table[2]).toMatch(/^\| objects-mask /);
    expect(table[3]).toMatch(/^\| packed-mask .*\| +1\.0 \/ 1\.0 \/ 100\.0 \(1 failed\) \|/);
    const line = ratioLine([objects, packed], 'objects-mask', 'packed-mask');
    expect(line).toContain('gen tok/s 0.5x');
    expect(line).toContain('/health max 10x');
    expect(ratioLine([packed], 'objects-mask', 'packed-mask')).toBeNull();
  });
});

describe('counterRate', () => {
  it('is the increase per second between the first and last sample', () => {
    expect(counterRate([0, 1000, 3000], [10, 20, 70])).toBe(20);
    expect(counterRate([0], [1])).toBeNull();
    expect(counterRate([5, 5], [1, 2])).toBeNull();
  });
});
