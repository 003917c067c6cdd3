/**
 * Faults on a schedule, one at a time, rotating: SIGKILL of a random API server, SIGKILL of the
 * engine core, SIGSTOP of a random API server for 2 s then SIGCONT. A fault is recovered when the
 * process it hit is back (a new pid under the same title, or the stopped one running again) and
 * /health has then answered 200 three times in a row; its window runs from the injection to the
 * recovery (or the end of the run, if it never recovers within RECOVERY_BOUND_MS).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { clusterProcesses } from './processes.js';

export type FaultKind = 'kill-api' | 'kill-engine' | 'stop-api';
const ROTATION: readonly FaultKind[] = ['kill-api', 'kill-engine', 'stop-api'];
const STOP_FOR_MS = 2_000;
const RECOVERY_BOUND_MS = 60_000;
const HEALTHY_IN_A_ROW = 3;

export interface Fault {
  kind: FaultKind;
  title: string;
  injectedAtMs: number;
  recoveredAtMs: number | null;
}

export class FaultInjector {
  readonly faults: Fault[] = [];
  readonly #primaryPid: number;
  readonly #url: string;
  readonly #rand: () => number;
  #next = 0;

  constructor(primaryPid: number, url: string, rand: () => number) {
    this.#primaryPid = primaryPid;
    this.#url = url;
    this.#rand = rand;
  }

  /** Injects the next fault and waits for its recovery (bounded). */
  async injectNext(): Promise<Fault | null> {
    const kind = ROTATION[this.#next++ % ROTATION.length]!;
    const procs = await clusterProcesses(this.#primaryPid);
    const targets = procs.filter((p) =>
      kind === 'kill-engine'
        ? p.title === 'ringserve-engine'
        : p.title.startsWith('ringserve-api-'),
    );
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
    const deadline = fault.injectedAtMs + RECOVERY_BOUND_MS;
    while (Date.now() < deadline) {
      if (await this.#isBack(kind, target.title, target.pid)) {
        fault.recoveredAtMs = Date.now();
        break;
      }
      await sleep(100);
    }
    return fault;
  }

  async #isBack(kind: FaultKind, title: string, oldPid: number): Promise<boolean> {
    const procs = await clusterProcesses(this.#primaryPid);
    const now = procs.find((p) => p.title === title);
    if (now === undefined || now.state === 'T' || now.state === 'Z') return false;
    if (kind !== 'stop-api' && now.pid === oldPid) return false;
    for (let i = 0; i < HEALTHY_IN_A_ROW; i++) {
      const ok = await fetch(`${this.#url}/health`, { signal: AbortSignal.timeout(2_000) }).then(
        (r) => r.status === 200,
        () => false,
      );
      if (!ok) return false;
    }
    return true;
  }
}
