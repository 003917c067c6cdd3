/**
 * How long the supervisor waits before restarting a child that died: 200 ms for a child that had
 * been running for a while, doubling for each crash that follows its restart too soon, up to 30 s.
 * A crash loop (a bad flag, a full /dev/shm, a bug hit at start) then costs a few restarts a minute
 * instead of five a second, and a child that crashes once in a long run is back at once.
 * systemd's RestartSec/RestartSteps and Kubernetes' CrashLoopBackOff (10 s doubling to 5 min, reset
 * after 10 min of running) make the same trade; ringserve's children start in about a second, so
 * its steps are shorter.
 */

/** The first restart's delay. */
export const RESTART_INITIAL_MS = 200;
/** No restart waits longer than this. */
export const RESTART_MAX_MS = 30_000;
/** A child that ran this long before dying is not in a crash loop: its next delay starts over. */
export const RESTART_STABLE_MS = 10_000;

export class RestartBackoff {
  readonly #initialMs: number;
  readonly #maxMs: number;
  readonly #stableMs: number;
  /** The delay chosen for the last restart, 0 before the first. */
  #delayMs = 0;
  #startedAt: number;
  #restarts = 0;

  constructor(
    now: number,
    initialMs = RESTART_INITIAL_MS,
    maxMs = RESTART_MAX_MS,
    stableMs = RESTART_STABLE_MS,
  ) {
    this.#startedAt = now;
    this.#initialMs = initialMs;
    this.#maxMs = maxMs;
    this.#stableMs = stableMs;
  }

  /** The child died at `now`: how long to wait before starting the next one. */
  nextDelay(now: number): number {
    const ranFor = now - this.#startedAt;
    this.#delayMs =
      this.#delayMs === 0 || ranFor >= this.#stableMs
        ? this.#initialMs
        : Math.min(this.#delayMs * 2, this.#maxMs);
    this.#restarts += 1;
    return this.#delayMs;
  }

  /** A new child was started at `now` (its uptime counts from here). */
  started(now: number): void {
    this.#startedAt = now;
  }

  /** The delay chosen for the last restart, ms (0 before any). */
  get delayMs(): number {
    return this.#delayMs;
  }

  get restarts(): number {
    return this.#restarts;
  }
}
