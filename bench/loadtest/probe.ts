/**
 * The probe, a process of its own (not the load generator's, not the cluster's): what a router,
 * a Prometheus server and an RL trainer's control loop do to a server under load.
 * - GET /health every healthEveryMs, open loop: a probe is sent when it is due whether or not the
 *   previous one has answered, and its latency is measured from when it was due, so a server that
 *   stalls for 2 s shows 40 slow probes, not one (no coordinated omission).
 * - GET /metrics every metricsEveryMs, half a health period out of phase with the probes, kept as
 *   text and parsed into the figures the benchmark reports once the window is over: parsing a
 *   scrape takes 1-5 ms of this process's event loop, and done at once it delayed the /health
 *   answer that arrived with it, so the probe's own work showed as server latency.
 * - every cycleEveryMs (a quarter of a health period out of phase): POST /pause, POST
 *   /update_weights {"weight_dir": null}, POST /resume, each timed, and the cycle as a whole.
 * - GET /health of the floor server (floor-server.ts) every healthEveryMs, three quarters of a
 *   period out of phase: the same probe of a process with nothing else to do.
 * - after the load: one more scrape once the generator's requests are done, the servers have none
 *   in flight and 13 s have passed (the memory a server keeps once its load is gone).
 * Every call is bounded by callTimeoutMs; a probe that reaches the bound is recorded at it.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { STAT_GENERATION_TOKENS } from '../../src/shm/layout.js';
import { openRegion, type Region } from '../../src/shm/region.js';
import { engineStat } from '../../src/shm/words.js';
import { serveChild } from './child.js';
import type { ParentMessage, ProbeProgress, ProbeResult, ProbeSpec } from './messages.js';
import { type MetricsSnapshot, metricsSnapshot } from './prom-text.js';

/** Epoch ms with sub-millisecond resolution (Date.now() is whole ms; health answers take less). */
const nowMs = (): number => performance.timeOrigin + performance.now();

/** Status recorded for a probe that got no HTTP answer (timeout, connection error). */
const NO_ANSWER = 0;
const PROGRESS_EVERY_MS = 500;
/** After the load: the longest wait for 'load-done' and then no request in flight on any server. */
const DRAIN_BOUND_MS = 20_000;
const DRAIN_POLL_MS = 200;
/**
 * Time given to the servers once nothing is in flight: aborted requests freed, buffers returned,
 * and the free memory they keep through a lull (response pool chunks unused for 10-12 s, an empty
 * output arena after 10 s quiet; src/server/output-worker/) given back.
 */
const DRAIN_SETTLE_MS = 13_000;

class Probe {
  readonly #spec: ProbeSpec;
  /** Health probes and control calls use their own connections, so neither queues behind the other. */
  readonly #healthPool: Pool;
  readonly #controlPool: Pool;
  readonly #floorPool: Pool;
  readonly #result: ProbeResult = {
    healthAtMs: [],
    healthMs: [],
    healthStatus: [],
    floorAtMs: [],
    floorMs: [],
    floorStatus: [],
    metrics: [],
    engineTokensAtMs: [],
    engineTokens: [],
    metricsFailures: 0,
    metricsFailureSample: null,
    cycleAtMs: [],
    pauseMs: [],
    updateMs: [],
    resumeMs: [],
    cycleMs: [],
    cycleFailures: 0,
    cycleFailureSample: null,
    drain: null,
    drainProblem: null,
  };
  /** Scrapes of the window, as text until stop() parses them into the result's snapshots. */
  readonly #scrapes: { text: string; atMs: number }[] = [];
  readonly #pending = new Set<Promise<void>>();
  readonly #timers = new Set<NodeJS.Timeout>();
  #stopped = false;
  #healthMaxMs = 0;
  #healthLastMs = 0;
  readonly #region: Region | null;
  #loadDone: () => void = () => {};
  readonly #loadDoneP = new Promise<boolean>((resolve) => {
    this.#loadDone = () => resolve(true);
  });

  constructor(spec: ProbeSpec) {
    this.#spec = spec;
    this.#region = spec.regionName === null ? null : openRegion(spec.regionName);
    const options = { headersTimeout: spec.callTimeoutMs, bodyTimeout: spec.callTimeoutMs };
    this.#healthPool = new Pool(spec.url, { connections: 64, ...options });
    this.#controlPool = new Pool(spec.url, { connections: 4, ...options });
    this.#floorPool = new Pool(spec.floorUrl, { connections: 64, ...options });
  }

  start(progress: (p: ProbeProgress) => void): void {
    const spec = this.#spec;
    // A scrape at the start, so counters (GC, generated tokens) are differenced over the whole arm.
    const first = this.#metrics().finally(() => this.#pending.delete(first));
    this.#pending.add(first);
    // Three clocks, as a router, a Prometheus server and a trainer would be: a scrape or a control
    // cycle never falls due in the same millisecond as a health probe (on one phase, every scrape
    // landed on a probe, whose answer then waited behind the scrape's in the server's socket
    // writes and in this process: 1 probe in 20, systematically, which no deployment sees). The
    // floor's probes keep a fourth phase, clear of the other three.
    const { healthEveryMs } = spec;
    this.#every(healthEveryMs, (dueAtMs) => this.#health(dueAtMs));
    const r = this.#result;
    const floorTimes = { atMs: r.floorAtMs, ms: r.floorMs, status: r.floorStatus };
    const probeFloor = async (dueAtMs: number): Promise<void> => {
      await this.#time(this.#floorPool, dueAtMs, floorTimes);
    };
    this.#every(healthEveryMs, probeFloor, false, (healthEveryMs * 3) / 4);
    this.#every(spec.metricsEveryMs, () => this.#metrics(), false, healthEveryMs / 2);
    if (spec.cycleEveryMs > 0)
      this.#every(spec.cycleEveryMs, () => this.#cycle(), true, healthEveryMs / 4);
    this.#timers.add(
      setInterval(
        () =>
          progress({
            healthCount: this.#result.healthMs.length,
            healthLastMs: this.#healthLastMs,
            healthMaxMs: this.#healthMaxMs,
            cycles: this.#result.cycleMs.length,
          }),
        PROGRESS_EVERY_MS,
      ),
    );
  }

  async stop(): Promise<ProbeResult> {
    this.#stopped = true;
    for (const t of this.#timers) clearTimeout(t);
    // One last scrape, so counters cover the whole arm; then the calls still out (all bounded).
    await this.#metrics();
    await Promise.all(this.#pending);
    this.#parseScrapes();
    await this.#drainScrape();
    await Promise.all([
      this.#healthPool.destroy(),
      this.#controlPool.destroy(),
      this.#floorPool.destroy(),
    ]);
    return this.#result;
  }

  /** The parent says the load generator's requests have all ended. */
  loadDone(): void {
    this.#loadDone();
  }

  /** The scrape after drain (see the file's comment); every wait bounded, a problem noted. */
  async #drainScrape(): Promise<void> {
    const r = this.#result;
    const deadline = nowMs() + DRAIN_BOUND_MS;
    const bound = sleep(DRAIN_BOUND_MS, false, { ref: false });
    if (!(await Promise.race([this.#loadDoneP, bound]))) {
      r.drainProblem = `no 'load-done' within ${DRAIN_BOUND_MS / 1000} s`;
      return;
    }
    const idle = (s: MetricsSnapshot | null): boolean =>
      s?.servers.every((f) => (f.inFlight ?? 0) === 0) === true;
    while (!idle(await this.#scrape().catch(() => null))) {
      if (nowMs() > deadline) {
        r.drainProblem = `requests still in flight ${DRAIN_BOUND_MS / 1000} s after the load stopped`;
        break;
      }
      await sleep(DRAIN_POLL_MS);
    }
    await sleep(DRAIN_SETTLE_MS);
    try {
      r.drain = await this.#scrape();
    } catch (error) {
      r.drainProblem ??= `the scrape after drain failed: ${(error as Error).message}`;
    }
  }

  /**
   * Runs `task` every everyMs from `phaseMs` past the start (fixed multiples: no drift), tracking
   * its promise; a task that `exclusive` says must not overlap itself skips a tick while its
   * previous run is out.
   */
  #every(
    everyMs: number,
    task: (dueAtMs: number) => Promise<void>,
    exclusive = false,
    phaseMs = 0,
  ): void {
    let due = nowMs() + everyMs + phaseMs;
    let running: Promise<void> | null = null;
    let timer: NodeJS.Timeout;
    const tick = (): void => {
      this.#timers.delete(timer);
      if (this.#stopped) return;
      if (!exclusive || running === null) {
        const p = task(due).finally(() => {
          this.#pending.delete(p);
          if (running === p) running = null;
        });
        running = p;
        this.#pending.add(p);
      }
      due += everyMs;
      while (due < nowMs()) due += everyMs;
      timer = setTimeout(tick, due - nowMs());
      this.#timers.add(timer);
    };
    timer = setTimeout(tick, everyMs + phaseMs);
    this.#timers.add(timer);
  }

  async #health(dueAtMs: number): Promise<void> {
    const r = this.#result;
    const ms = await this.#time(this.#healthPool, dueAtMs, {
      atMs: r.healthAtMs,
      ms: r.healthMs,
      status: r.healthStatus,
    });
    this.#healthLastMs = ms;
    this.#healthMaxMs = Math.max(this.#healthMaxMs, ms);
  }

  /** One GET /health on `pool`, recorded into `into`; answers its latency. */
  async #time(
    pool: Pool,
    dueAtMs: number,
    into: { atMs: number[]; ms: number[]; status: number[] },
  ): Promise<number> {
    // Latency counts from when the probe was due, so a late send counts against it (conservative:
    // on a shared machine it is contention either way), or from when it was sent if the timer fired
    // a fraction of a millisecond early.
    const from = Math.min(dueAtMs, nowMs());
    let status = NO_ANSWER;
    try {
      const res = await pool.request({ path: '/health', method: 'GET' });
      await res.body.dump();
      status = res.statusCode;
    } catch {
      // recorded below as NO_ANSWER at the latency it took (the bound, for a timeout)
    }
    const ms = nowMs() - from;
    into.atMs.push(dueAtMs);
    into.ms.push(ms);
    into.status.push(status);
    return ms;
  }

  async #metrics(): Promise<void> {
    const r = this.#result;
    if (this.#region !== null) {
      r.engineTokensAtMs.push(nowMs());
      r.engineTokens.push(engineStat(this.#region.f64, STAT_GENERATION_TOKENS));
    }
    try {
      this.#scrapes.push(await this.#scrapeText());
    } catch (error) {
      this.#scrapeFailed(error);
    }
  }

  #parseScrapes(): void {
    for (const { text, atMs } of this.#scrapes.splice(0)) {
      try {
        this.#result.metrics.push(metricsSnapshot(text, atMs));
      } catch (error) {
        this.#scrapeFailed(error);
      }
    }
  }

  #scrapeFailed(error: unknown): void {
    this.#result.metricsFailures++;
    this.#result.metricsFailureSample ??= (error as Error).message;
  }

  async #scrapeText(): Promise<{ text: string; atMs: number }> {
    const res = await this.#controlPool.request({ path: '/metrics', method: 'GET' });
    const text = await res.body.text();
    if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
    return { text, atMs: nowMs() };
  }

  async #scrape(): Promise<MetricsSnapshot> {
    const { text, atMs } = await this.#scrapeText();
    return metricsSnapshot(text, atMs);
  }

  async #call(path: string, body: string | null): Promise<number> {
    const t0 = performance.now();
    const res = await this.#controlPool.request({
      path,
      method: 'POST',
      headers: body === null ? {} : { 'content-type': 'application/json' },
      body,
    });
    const text = await res.body.text();
    if (res.statusCode !== 200)
      throw new Error(`${path}: HTTP ${res.statusCode}: ${text.slice(0, 200)}`);
    return performance.now() - t0;
  }

  async #cycle(): Promise<void> {
    const r = this.#result;
    const at = nowMs();
    const t0 = performance.now();
    try {
      const pause = await this.#call('/pause', null);
      const update = await this.#call('/update_weights', '{"weight_dir":null}').catch(
        async (error: unknown) => {
          // Never leave the engine paused, whatever update_weights did.
          await this.#call('/resume', null);
          throw error;
        },
      );
      const resume = await this.#call('/resume', null);
      r.cycleAtMs.push(at);
      r.pauseMs.push(pause);
      r.updateMs.push(update);
      r.resumeMs.push(resume);
      r.cycleMs.push(performance.now() - t0);
    } catch (error) {
      r.cycleFailures++;
      r.cycleFailureSample ??= (error as Error).message;
    }
  }
}

let probe: Probe | null = null;

process.on('message', (m: ParentMessage) => {
  if (m.type === 'load-done') probe?.loadDone();
});

serveChild<ProbeSpec, ProbeResult>({
  start(spec, progress) {
    process.title = 'ringserve-bench-probe';
    probe = new Probe(spec);
    probe.start(progress);
  },
  stop: async () => {
    if (probe === null) throw new Error('stop before start');
    return probe.stop();
  },
});
