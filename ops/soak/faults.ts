/**
 * Faults on a schedule, one at a time, rotating (through all kinds, or those --faults names):
 * SIGKILL of a random API server, SIGKILL of the engine core, SIGSTOP of a random API server for
 * 2 s then SIGCONT. Two exceptions keep processes alive long enough for their RSS slope to be
 * judged (a slope needs a warm-up and a window after it, ~20 minutes; a fault every 45 s restarts
 * everything far sooner): with two or more API servers, SIGKILL spares one of them, the witness (it
 * is still stopped, and lives through every other fault: its siblings' deaths, the engine's
 * restarts), and the engine is no longer killed once the rest of the run is the last incarnation's
 * judged span (`engineKillsUntilMs`; a kill-engine turn then passes to the next kind). A fault is
 * recovered when the process it hit is back (a new pid under the same title, or the stopped one
 * running again) and the cluster answers normally again: the soak's own /health probes
 * (health-probe.ts: a new connection each, in turn to every API server through the primary's
 * hand-off; under --listener reuseport the kernel's hash of the source port picks) answered
 * HEALTHY_IN_A_ROW times in a row, all after the process was back, with 200 within the verdict's
 * --health-max-ms, and when the fault hit an API server, that server itself answered one of the
 * probes since it was back, so (each answer names its server) the check holds under either
 * listener. Its window runs from the injection to the first of the last HEALTHY_IN_A_ROW probes
 * when all that holds (or to the end of the run, if that never happens within RECOVERY_BOUND_MS). A
 * process that is back but whose cluster still answers slowly (the survivor absorbing the
 * reconnecting clients, the newcomer's first requests) is still recovering: the time that takes is
 * the fault's recovery time, reported per fault, and bounded.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { ProbeSample } from './health-probe.js';
import { clusterProcesses, type ProcessInfo } from './processes.js';

export const FAULT_KINDS = ['kill-api', 'kill-engine', 'stop-api'] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];
const STOP_FOR_MS = 2_000;
const RECOVERY_BOUND_MS = 60_000;
/** Five probes: one second of the probe's answers. */
const HEALTHY_IN_A_ROW = 5;
/** API servers' process titles: this and their index (src/cluster/api-process.ts). */
const API_SERVER_TITLE = 'ringserve-api-';

/** The API server SIGKILL spares when there are two or more (the witness). */
export const WITNESS_TITLE = 'ringserve-api-0';
/** Time a killed engine takes to be back and sampled once (engineKillsUntil). */
const ENGINE_RESTART_MARGIN_MS = 60_000;

/** The processes a fault of this kind may hit: SIGKILL of an API server spares the witness. */
export function faultTargets(
  kind: FaultKind,
  procs: readonly ProcessInfo[],
  witness: string | null,
): ProcessInfo[] {
  return procs.filter((p) =>
    kind === 'kill-engine'
      ? p.title === 'ringserve-engine'
      : p.title.startsWith(API_SERVER_TITLE) && (kind !== 'kill-api' || p.title !== witness),
  );
}

/**
 * When the soak reads the engine's last incarnation at rest for the first time (seconds into the
 * run), or null: in a run long enough to hold twice the warm-up plus the slope window, a second
 * quiet spell 2 x the slope window before the end, so that the incarnation is judged at rest over
 * that span (plus the drain) as the first spell's processes are; in a shorter run, none.
 */
export function engineRestS(o: {
  durationS: number;
  warmupS: number;
  slopeWindowS: number;
}): number | null {
  return o.durationS < 2 * (o.warmupS + o.slopeWindowS) ? null : o.durationS - 2 * o.slopeWindowS;
}

/**
 * Until when the engine may be killed (ms since epoch): its last incarnation must be back
 * (`restartMarginMs`: a restart, and its first sample) and past its warm-up at engineRestS; in a
 * shorter run none is judged, and the engine is killed throughout.
 */
export function engineKillsUntil(
  o: { durationS: number; warmupS: number; slopeWindowS: number },
  startMs: number,
  restartMarginMs = ENGINE_RESTART_MARGIN_MS,
): number {
  const restS = engineRestS(o);
  if (restS === null) return Number.POSITIVE_INFINITY;
  return startMs + (restS - o.warmupS) * 1000 - restartMarginMs;
}

export interface Fault {
  kind: FaultKind;
  title: string;
  injectedAtMs: number;
  recoveredAtMs: number | null;
}

export class FaultInjector {
  readonly faults: Fault[] = [];
  readonly #primaryPid: number;
  readonly #health: readonly ProbeSample[];
  readonly #healthMaxMs: number;
  readonly #rand: () => number;
  readonly #rotation: readonly FaultKind[];
  readonly #witness: string | null;
  readonly #engineKillsUntilMs: number;
  #next = 0;

  /**
   * `health`: the probe's samples as they arrive (appended to by the soak); `schedule.rotation`:
   * the kinds injected in turn; `schedule.witness`: the title of the API server SIGKILL spares, or
   * null; `schedule.engineKillsUntilMs`: no engine SIGKILL after this time.
   */
  constructor(
    primaryPid: number,
    health: readonly ProbeSample[],
    healthMaxMs: number,
    rand: () => number,
    schedule: {
      rotation?: readonly FaultKind[];
      witness?: string | null;
      engineKillsUntilMs?: number;
    } = {},
  ) {
    this.#primaryPid = primaryPid;
    this.#health = health;
    this.#healthMaxMs = healthMaxMs;
    this.#rand = rand;
    this.#rotation = schedule.rotation ?? FAULT_KINDS;
    this.#witness = schedule.witness ?? null;
    this.#engineKillsUntilMs = schedule.engineKillsUntilMs ?? Number.POSITIVE_INFINITY;
  }

  /** The kind whose turn it is, passing over kill-engine once its time is up; null if none is left. */
  #nextKind(): FaultKind | null {
    for (let tries = 0; tries < this.#rotation.length; tries++) {
      const kind = this.#rotation[this.#next++ % this.#rotation.length]!;
      if (kind !== 'kill-engine' || Date.now() < this.#engineKillsUntilMs) return kind;
    }
    return null;
  }

  /** Injects the next fault and waits for its recovery (bounded); null if there was nothing to hit. */
  async injectNext(): Promise<Fault | null> {
    const kind = this.#nextKind();
    if (kind === null) return null;
    const targets = faultTargets(kind, await clusterProcesses(this.#primaryPid), this.#witness);
    if (targets.length === 0) return null;
    const target = targets[Math.floor(this.#rand() * targets.length)]!;
    const fault: Fault = {
      kind,
      title: target.title,
      injectedAtMs: Date.now(),
      recoveredAtMs: null,
    };
    this.faults.push(fault);
    if (kind === 'stop-api') {
      process.kill(target.pid, 'SIGSTOP');
      await sleep(STOP_FOR_MS);
      process.kill(target.pid, 'SIGCONT');
    } else {
      process.kill(target.pid, 'SIGKILL');
    }
    const hit = kind === 'kill-engine' ? null : apiServerIndex(target.title);
    const deadline = fault.injectedAtMs + RECOVERY_BOUND_MS;
    let backAtMs: number | null = null;
    while (Date.now() < deadline) {
      if (backAtMs === null && (await this.#isBack(kind, target.title, target.pid))) {
        backAtMs = Date.now();
      }
      if (backAtMs !== null) {
        fault.recoveredAtMs = recoveredAt(this.#health, backAtMs, this.#healthMaxMs, hit);
        if (fault.recoveredAtMs !== null) break;
      }
      await sleep(100);
    }
    return fault;
  }

  async #isBack(kind: FaultKind, title: string, oldPid: number): Promise<boolean> {
    const procs = await clusterProcesses(this.#primaryPid);
    const now = procs.find((p) => p.title === title);
    if (now === undefined || now.state === 'T' || now.state === 'Z') return false;
    return kind === 'stop-api' || now.pid !== oldPid;
  }
}

/** The index in an API server's title (ringserve-api-N). */
function apiServerIndex(title: string): number {
  return Number(title.slice(API_SERVER_TITLE.length));
}

/**
 * When the cluster was answering normally again after `sinceMs` (the hit process back): the start of
 * the first of the last HEALTHY_IN_A_ROW probes, if each started at or after `sinceMs` and answered
 * 200 within `healthMaxMs`, and (`server` not null: the fault hit that API server) one probe since
 * `sinceMs` was answered so by that server; else null.
 */
export function recoveredAt(
  samples: readonly ProbeSample[],
  sinceMs: number,
  healthMaxMs: number,
  server: number | null,
): number | null {
  if (samples.length < HEALTHY_IN_A_ROW) return null;
  const healthy = (s: ProbeSample): boolean =>
    s.atMs >= sinceMs && s.status === 200 && s.latencyMs <= healthMaxMs;
  for (let i = samples.length - HEALTHY_IN_A_ROW; i < samples.length; i++) {
    if (!healthy(samples[i]!)) return null;
  }
  const firstOfRow = samples[samples.length - HEALTHY_IN_A_ROW]!.atMs;
  if (server === null) return firstOfRow;
  for (let i = samples.length - 1; i >= 0 && samples[i]!.atMs >= sinceMs; i--) {
    if (samples[i]!.server === server && healthy(samples[i]!)) return firstOfRow;
  }
  return null;
}
