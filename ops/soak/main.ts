/**
 * `ringserve soak` / `npm run soak -- --duration 1h --concurrency 300 [--json]` (issue 15): a real
 * cluster under closed-loop long requests in every answer form, with clients that leave and clients
 * that read slowly, pause -> update_weights -> resume cycles, and faults on a schedule (faults.ts).
 * Throughout it samples every process's RSS (/proc), each API server's heap, output-ring bytes, KV
 * blocks in use and requests in flight (/metrics), and /health latency (a worker thread), and shows
 * progress on stderr. At the end it drains, reads what is still held, and prints the verdict table
 * (and, with --json, one JSON object); it exits 1 on any violation (verdict.ts).
 *
 * Memory stays bounded for any duration: requests leave only counters, and the samples are a few
 * numbers every SAMPLE_EVERY_MS per process (an hour: ~2,000 per series) and 5 /health probes a
 * second (an hour: 18,000).
 */

import { writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';
import { startCluster } from '../../bench/loadtest/cluster.js';
import { startFloorServer } from '../../bench/loadtest/floor.js';
import { parsePromText } from '../../bench/loadtest/prom-text.js';
import { ExitCode } from '../../src/errors.js';
import {
  engineKillsUntil,
  engineRestS,
  type Fault,
  FaultInjector,
  WITNESS_TITLE,
} from './faults.js';
import type { ProbeBatch, ProbeSample, ProbeWorkerData } from './health-probe.js';
import {
  collectRecords,
  type IdleCheckpoint,
  mallocAtRest,
  mallocGrowth,
  readIdleMemory,
  Turns,
} from './idle-memory.js';
import { parseSoakOptions, SOAK_USAGE, type SoakOptions } from './options.js';
import { clusterProcesses, pidOf, processKey } from './processes.js';
import { Traffic } from './traffic.js';
import {
  buildVerdict,
  idleGrowth,
  idleSlopes,
  judgedGrowth,
  judgedProbes,
  judgedRssSlopes,
  judgedSlopes,
  outsideSpells,
  type RssSeries,
  restPairs,
  type Verdict,
  violations,
} from './verdict.js';

const SAMPLE_EVERY_MS = 2_000;
const PROGRESS_EVERY_MS = 10_000;
/** After the drain, how long held slots and blocks get to come back before they count as leaked. */
const SETTLE_MS = 30_000;
/** The cluster's log is kept whole for the run's stall report (at --log-level warn: a few lines a minute). */
const LOG_KEEP_CHARS = 16 * 1024 * 1024;

interface ClusterFigures {
  inFlight: number;
  running: number;
  waiting: number;
  kvBlocks: number;
  ringBytes: number;
  heapBytes: Map<string, number>;
}

async function scrape(url: string): Promise<ClusterFigures | null> {
  const text = await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5_000) })
    .then((r) => (r.ok ? r.text() : null))
    .catch(() => null);
  if (text === null) return null;
  const f: ClusterFigures = {
    inFlight: 0,
    running: 0,
    waiting: 0,
    kvBlocks: 0,
    ringBytes: 0,
    heapBytes: new Map(),
  };
  let usage = 0;
  let blocks = 0;
  for (const s of parsePromText(text).samples) {
    if (s.name === 'ringserve_requests_in_flight') f.inFlight += s.value;
    else if (s.name === 'vllm:num_requests_running') f.running += s.value;
    else if (s.name === 'vllm:num_requests_waiting') f.waiting += s.value;
    else if (s.name === 'vllm:kv_cache_usage_perc') usage = s.value;
    else if (s.name === 'vllm:cache_config_info') blocks = Number(s.labels.num_gpu_blocks ?? 0);
    else if (s.name === 'ringserve_output_ring_used_bytes') f.ringBytes += s.value;
    else if (s.name === 'nodejs_heap_size_used_bytes' && s.labels.api_server !== undefined) {
      f.heapBytes.set(String(s.labels.api_server), s.value);
    }
  }
  f.kvBlocks = Math.round(usage * blocks);
  return f;
}

function random(seed: number): () => number {
  let a = (seed ^ 0x9e3779b9) >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

const mb = (bytes: number) => `${(bytes / 1048576).toFixed(0)} MB`;

async function soak(
  o: SoakOptions,
): Promise<{ verdict: Verdict; problems: string[]; notes: string[] }> {
  const cluster = await startCluster(
    ['--api-server-count', String(o.apiServers), ...o.serverFlags],
    60_000,
    { stopTimeoutMs: 30_000, logKeepChars: LOG_KEEP_CHARS },
  );
  const floor = await startFloorServer();
  const health: ProbeSample[] = [];
  const floorHealth: ProbeSample[] = [];
  const probe = new Worker(new URL('./health-probe.js', import.meta.url), {
    workerData: {
      port: cluster.port,
      floorPort: Number(new URL(floor.url).port),
    } satisfies ProbeWorkerData,
  });
  probe.on('message', (batch: ProbeBatch) => {
    for (const s of batch.health) health.push(s);
    for (const s of batch.floor) floorHealth.push(s);
  });
  const probeDone = new Promise((resolve) => probe.once('exit', resolve));
  const traffic = new Traffic({
    url: cluster.url,
    concurrency: o.concurrency,
    minTokens: o.minTokens,
    maxTokens: o.maxTokens,
    seed: o.seed,
    answerTimeoutMs: o.answerTimeoutS * 1000,
  });
  const startMs = Date.now();
  const endMs = startMs + o.durationS * 1000;
  const faults = new FaultInjector(cluster.pid, health, o.healthMaxMs, random(o.seed), {
    rotation: o.faultKinds,
    witness: o.apiServers >= 2 ? WITNESS_TITLE : null,
    engineKillsUntilMs: engineKillsUntil(o, startMs),
  });
  const rss = new Map<string, RssSeries>();
  const peaks = { ringBytes: 0, kvBlocks: 0, inFlight: 0, heap: new Map<string, number>() };
  const pauses = { cycles: 0, failedCalls: 0, spans: [] as string[] };
  // Faults and pause cycles take turns with the quiet spells (the end of the warm-up, and one more
  // in a long run: spellsAtS below).
  const turns = new Turns();
  const idle = {
    checkpoints: [] as IdleCheckpoint[],
    spells: [] as [number, number][],
    notes: [] as string[],
  };
  let running = true;
  traffic.start();

  const sampler = (async () => {
    while (running) {
      const now = Date.now();
      for (const p of await clusterProcesses(cluster.pid)) {
        const key = processKey(p);
        let s = rss.get(key);
        if (s === undefined) {
          // The primary and the first children start with the run; a restarted child starts now.
          s = {
            key,
            startedAtMs: rss.size < o.apiServers + 2 ? startMs : now,
            points: [],
            parts: [],
          };
          rss.set(key, s);
        }
        s.points.push([now, p.rssBytes]);
        s.parts.push({ anonBytes: p.anonBytes, shmemBytes: p.shmemBytes });
      }
      const f = await scrape(cluster.url);
      if (f !== null) {
        peaks.ringBytes = Math.max(peaks.ringBytes, f.ringBytes);
        peaks.kvBlocks = Math.max(peaks.kvBlocks, f.kvBlocks);
        peaks.inFlight = Math.max(peaks.inFlight, f.inFlight);
        for (const [k, v] of f.heapBytes) peaks.heap.set(k, Math.max(peaks.heap.get(k) ?? 0, v));
      }
      await sleep(SAMPLE_EVERY_MS);
    }
  })();

  const faulting = (async () => {
    if (o.faultEveryS <= 0) return;
    await sleep(Math.min(o.faultEveryS * 1000, Math.max(0, endMs - Date.now() - 30_000)));
    while (running && Date.now() < endMs - 20_000) {
      const fault = await turns.run(() => faults.injectNext());
      if (fault !== null) progressLine(`fault ${fault.kind} (${fault.title}) ${describe(fault)}`);
      // Not past the end: the drain starts on time.
      await sleep(Math.min(o.faultEveryS * 1000, Math.max(0, endMs - Date.now())));
    }
  })();

  const pausing = (async () => {
    if (o.pauseEveryS <= 0) return;
    while (running) {
      // Not past the end: the drain waits for this loop, and starts on time.
      await sleep(Math.min(o.pauseEveryS * 1000, Math.max(0, endMs - Date.now())));
      if (!running || Date.now() >= endMs) break;
      await turns.run(() => pauseCycle());
    }
  })();

  async function pauseCycle(): Promise<void> {
    const post = (path: string, body?: string) =>
      fetch(`${cluster.url}${path}`, {
        method: 'POST',
        headers: body === undefined ? {} : { 'content-type': 'application/json' },
        body,
        signal: AbortSignal.timeout(10_000),
      }).then(
        (r) => r.ok,
        () => false,
      );
    const cycleStart = Date.now();
    if (!(await post('/pause'))) pauses.failedCalls++;
    await sleep(500);
    if (!(await post('/update_weights', '{}'))) pauses.failedCalls++;
    // Resume until it is acknowledged: a paused engine must not outlive the cycle.
    for (let i = 0; !(await post('/resume')); i++) {
      pauses.failedCalls++;
      if (i > 60) break;
      await sleep(500);
    }
    pauses.cycles++;
    const s = (ms: number) => ((ms - startMs) / 1000).toFixed(1);
    pauses.spans.push(`${s(cycleStart)}-${s(Date.now())} s`);
  }

  // The idle checkpoints before the end (idle-memory.ts): at the end of the warm-up, where a slope
  // can be judged at all, and in a long run where the engine's last incarnation is past its own.
  const spellsAtS = [o.warmupS, engineRestS(o)].filter(
    (s): s is number => s !== null && o.durationS >= s + o.slopeWindowS,
  );
  if (spellsAtS.length === 0) {
    idle.notes.push('no idle checkpoint: the run is shorter than --warmup + --slope-window');
  }
  const quietSpells = (async () => {
    for (const atS of spellsAtS) {
      await sleep(Math.max(0, startMs + atS * 1000 - Date.now()));
      if (!running) return;
      await turns.quietly(async () => {
        const from = Date.now();
        progressLine(
          'quiet spell: no new requests, faults or pause cycles until memory at rest is read',
        );
        let note: string;
        if (await traffic.hold(o.answerTimeoutS * 1000)) {
          const checkpoint = await readIdleMemory(cluster.pid);
          idle.checkpoints.push(checkpoint);
          note = `idle checkpoint at ${((checkpoint.atMs - startMs) / 1000).toFixed(0)} s (quiet spell of ${((Date.now() - from) / 1000).toFixed(0)} s)`;
        } else {
          note = `no idle checkpoint at ${atS} s: requests still in flight ${o.answerTimeoutS} s into the quiet spell`;
        }
        traffic.resume();
        idle.spells.push([from, Date.now()]);
        idle.notes.push(note);
        progressLine(`quiet spell over: ${note}`);
      });
    }
  })();

  const progressTimer = setInterval(() => {
    const c = traffic.counts;
    const failed = Object.values(c.failed).reduce((a, b) => a + b, 0);
    const recent = health
      .slice(-50)
      .filter((s) => s.status === 200)
      .map((s) => s.latencyMs);
    progressLine(
      `${Math.round((Date.now() - startMs) / 1000)}/${o.durationS} s  sent ${c.sent}  done ${c.completed}  ` +
        `left ${c.left}  failed ${failed}  lost ${c.lost}  in flight ${c.inFlight}  faults ${faults.faults.length}  ` +
        `health max(last 10 s) ${recent.length ? Math.max(...recent).toFixed(1) : '-'} ms`,
    );
  }, PROGRESS_EVERY_MS);

  await sleep(Math.max(0, endMs - Date.now()));
  running = false;
  await Promise.all([faulting, quietSpells]);
  progressLine('draining: no new requests, waiting for those in flight');
  await Promise.all([traffic.drain(o.answerTimeoutS * 1000), pausing]);
  clearInterval(progressTimer);
  // Whatever the cluster still holds once the clients are gone and it had time to let go is leaked.
  let last: ClusterFigures | null = null;
  const settleEnd = Date.now() + SETTLE_MS;
  while (Date.now() < settleEnd) {
    last = await scrape(cluster.url);
    if (last !== null && last.inFlight + last.running + last.waiting + last.kvBlocks === 0) break;
    await sleep(500);
  }
  // The last idle checkpoint: the cluster at rest after the drain.
  if (idle.checkpoints.length > 0) idle.checkpoints.push(await readIdleMemory(cluster.pid));
  await sampler;
  probe.postMessage('stop');
  await probeDone;
  await floor.child.stop();
  const crashed = cluster.crashed();
  await cluster.stop();

  const underLoad = outsideSpells([...rss.values()], idle.spells);
  const loadSlopes = judgedSlopes(underLoad, o);
  const pairs = restPairs(
    idle.checkpoints,
    new Map([...rss.values()].map((s) => [s.key, s.startedAtMs])),
    o.warmupS * 1000,
  );
  const restSlopes = idleSlopes(pairs);
  const slopes = judgedRssSlopes(loadSlopes, restSlopes);
  if (o.seriesFile !== null) {
    await writeFile(o.seriesFile, JSON.stringify({ startMs, series: [...rss.values()] }));
  }
  const probeWindow = {
    warmupEndMs: startMs + o.healthWarmupS * 1000,
    graceMs: o.graceS * 1000,
    endMs: Date.now(),
  };
  // Each main thread pauses for the collection the soak asks for at rest: not judged, as a fault.
  const collections = idle.checkpoints.map((c) => c.collectSpan);
  const steady = judgedProbes(health, faults.faults, probeWindow, collections);
  const steadyFloor = judgedProbes(floorHealth, faults.faults, probeWindow, collections);
  const verdict = buildVerdict(
    traffic.counts,
    {
      slots: last === null ? -1 : last.inFlight + last.running + last.waiting,
      blocks: last === null ? -1 : last.kvBlocks,
    },
    slopes,
    steady,
    faults.faults,
    steadyFloor,
  );
  const problems = violations(verdict, o);
  if (crashed) problems.push('the cluster exited during the run');
  if (last === null) problems.push('/metrics did not answer after the drain');
  const collected = collectRecords(cluster.log());
  const notes = [
    `requests: ${traffic.counts.left} clients left on purpose, ${traffic.counts.slowReaders} slow-reader streams completed`,
    `pause -> update_weights -> resume cycles: ${pauses.cycles} (${pauses.failedCalls} calls refused, mostly during faults), at ${pauses.spans.join(', ')}`,
    `peaks: output rings ${mb(peaks.ringBytes)}, KV blocks ${peaks.kvBlocks}, requests in flight ${peaks.inFlight}, ` +
      `heap ${[...peaks.heap].map(([k, v]) => `${k} ${mb(v)}`).join(', ')}`,
    `/health: ${health.length} probes, ${steady.length} judged (after the ${o.healthWarmupS} s warm-up, outside fault windows + ${o.graceS} s grace and the ${collections.length} collections at rest); ` +
      `slowest judged: ${slowest(steady, startMs)}; slowest of all: ${slowest(health, startMs)}`,
    `floor /health (a bare node:http process, same probe, same windows): ${steadyFloor.length} judged; ` +
      `slowest: ${slowest(steadyFloor, startMs)}`,
    ...stallReport(cluster.log(), startMs),
    `RSS slope judged for ${slopes.size} of ${rss.size} process incarnations; ${idle.notes.join('; ')}`,
    `  at rest, past its warm-up -> after the drain (judged): ` +
      (pairs
        .map(
          (p) =>
            `${p.key} ${restSlopes.get(p.key)?.toFixed(2)} (from ${((p.first.atMs - startMs) / 1000).toFixed(0)} s)`,
        )
        .join(', ') || 'none'),
    ...idleGrowth(pairs).map((g) => `  at rest: ${g}`),
    ...pairs.flatMap((p) => {
      const growth = mallocGrowth(pidOf(p.key), p.first, p.last, collected);
      const series = mallocAtRest(
        pidOf(p.key),
        idle.checkpoints,
        p.first,
        p.last,
        collected,
        startMs,
      );
      return [growth, series].filter((g) => g !== null).map((g) => `  at rest: ${p.key} ${g}`);
    }),
    `  under load, least squares >= ${o.slopeWindowS} s after ${o.warmupS} s warm-up (judged only where not read at rest twice): ` +
      ([...loadSlopes].map(([k, v]) => `${k} ${v.toFixed(2)}`).join(', ') || 'none long enough'),
    ...judgedGrowth(underLoad, o).map((g) => `  under load: ${g}`),
    ...faults.faults.map(
      (f) =>
        `fault ${f.kind} ${f.title} at ${new Date(f.injectedAtMs).toISOString()}: ${describe(f)}`,
    ),
    ...traffic.counts.lostDetails.map((d) => `lost: ${d}`),
  ];
  return { verdict, problems, notes };
}

/** The five slowest of these probes, with when they started (seconds into the run). */
function slowest(health: readonly ProbeSample[], startMs: number): string {
  return [...health]
    .sort((a, b) => b.latencyMs - a.latencyMs)
    .slice(0, 5)
    .map((s) => `${s.latencyMs.toFixed(0)} ms at ${((s.atMs - startMs) / 1000).toFixed(1)} s`)
    .join(', ');
}

/**
 * What the cluster itself logged about stalls (at --log-level warn): API servers whose event loop
 * was blocked (src/obs/process-health.ts) and connections that waited in the primary for a free
 * API server (src/cluster/connection-distributor.ts), with when (seconds into the run).
 */
function stallReport(log: string, startMs: number): string[] {
  const out: string[] = [];
  for (const [what, pattern, field] of [
    ['event loop blocked', /"event loop blocked"/, 'blocked_ms'],
    ['waited for a free API server', /"a connection waited for a free API server"/, 'waited_ms'],
  ] as const) {
    const seen: string[] = [];
    for (const line of log.split('\n')) {
      if (!pattern.test(line)) continue;
      let entry: Record<string, number | string>;
      try {
        entry = JSON.parse(line);
      } catch {
        continue; // Not a whole pino line (a crash report on stderr, say).
      }
      const who = entry.api_server === undefined ? 'primary' : `api-${entry.api_server}`;
      const at = ((Number(entry.time) - startMs) / 1000).toFixed(1);
      seen.push(`${who} ${entry[field]} ms at ${at} s`);
    }
    out.push(`cluster log, ${what}: ${seen.length === 0 ? 'none' : seen.join(', ')}`);
  }
  return out;
}

function describe(f: Fault): string {
  return f.recoveredAtMs === null
    ? 'NOT recovered'
    : `recovered in ${((f.recoveredAtMs - f.injectedAtMs) / 1000).toFixed(1)} s`;
}

function progressLine(text: string): void {
  process.stderr.write(`soak: ${text}\n`);
}

function printTable(v: Verdict, o: SoakOptions, problems: string[], notes: string[]): void {
  const failed = Object.values(v.failed).reduce((a, b) => a + b, 0);
  const causes =
    Object.entries(v.failed)
      .map(([k, n]) => `${k} ${n}`)
      .join(', ') || 'none';
  const rows: [string, string, string][] = [
    ['requests sent', String(v.sent), ''],
    ['completed', String(v.completed), ''],
    ['failed', String(failed), causes],
    ['lost (accepted, never answered)', String(v.lost), 'must be 0'],
    ['leaked slots after drain', String(v.leaked_slots), 'must be 0'],
    ['leaked KV blocks after drain', String(v.leaked_blocks), 'must be 0'],
    [
      'RSS slope max, %/h',
      v.rss_slope_pct_per_h_max === null ? 'n/a' : String(v.rss_slope_pct_per_h_max),
      `<= ${o.maxRssSlopePctPerH} (at rest past its warm-up vs after the drain, each after a collection; else under load)`,
    ],
    ['/health p99 outside faults, ms', String(v.health_p99_ms), `<= ${o.healthP99Ms}`],
    [
      '/health max outside faults, ms',
      String(v.health_max_ms),
      `<= ${o.healthMaxMs} (from ${o.healthWarmupS} s in, fault windows to recovery + ${o.graceS} s and collections at rest left out)`,
    ],
    [
      'floor /health p99 / max, ms',
      `${v.floor_health_p99_ms ?? 'n/a'} / ${v.floor_health_max_ms ?? 'n/a'}`,
      "not judged: a bare node:http process, same probe and windows (the machine's share)",
    ],
    [
      'faults injected / recovered',
      `${v.faults_injected} / ${v.faults_recovered}`,
      'all recovered',
    ],
  ];
  console.log(
    `\nringserve soak: ${o.durationS} s, ${o.concurrency} clients, ${o.apiServers} API servers, ${o.serverFlags.join(' ')}`,
  );
  for (const [name, value, bound] of rows)
    console.log(`| ${name.padEnd(32)} | ${value.padStart(10)} | ${bound}`);
  for (const n of notes) console.log(`  ${n}`);
  console.log(problems.length === 0 ? 'PASS' : `FAIL: ${problems.join('; ')}`);
}

async function main(): Promise<ExitCode> {
  const argv = process.argv.slice(2);
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(SOAK_USAGE);
    return ExitCode.Ok;
  }
  // Ended by a signal: exit through process.exit, so the starter's exit hook stops the cluster.
  process.once('SIGTERM', () => process.exit(ExitCode.Terminated));
  process.once('SIGINT', () => process.exit(ExitCode.Interrupted));
  let o: SoakOptions;
  try {
    o = parseSoakOptions(argv);
  } catch (error) {
    console.error(`soak: ${(error as Error).message}`);
    return ExitCode.Usage;
  }
  const { verdict, problems, notes } = await soak(o);
  printTable(verdict, o, problems, notes);
  if (o.json) console.log(JSON.stringify(verdict));
  return problems.length === 0 ? ExitCode.Ok : ExitCode.Failure;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`soak: ${(error as Error).stack ?? String(error)}`);
    process.exit(ExitCode.Failure);
  },
);
