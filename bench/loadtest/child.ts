import { type ChildProcess, fork } from 'node:child_process';
import { stopChild } from '../../src/cluster/stop-child.js';
import { ExitCode } from '../../src/errors.js';
import { RS_ERR_BENCH_CHILD_FAILED, RS_ERR_BENCH_TIMEOUT } from './errors.js';
import type { ChildMessage, ParentMessage } from './messages.js';

/**
 * A benchmark's forked helper (load generator, probe, floor server): typed IPC, every wait
 * bounded, no message lost for arriving before its wait, and a child that dies or reports
 * failure turns every pending wait into RS_ERR_BENCH_CHILD_FAILED. The child side (serveChild)
 * exits when its parent's IPC channel closes, so no helper outlives a benchmark that was killed.
 */
export class BenchChild {
  readonly name: string;
  readonly #child: ChildProcess;
  #failure: Error | null = null;
  readonly #waiters = new Set<{
    type: string;
    resolve(m: ChildMessage): void;
    reject(e: Error): void;
  }>();
  #onProgress: ((m: ChildMessage & { type: 'progress' }) => void) | null = null;
  /**
   * Messages (other than progress) that arrived before anyone waited for them: a child answers
   * 'ready' as soon as it has loaded, which can be before its parent, busy starting another
   * helper, calls next('ready').
   */
  readonly #unclaimed: ChildMessage[] = [];

  constructor(modulePath: string, name: string) {
    this.name = name;
    this.#child = fork(modulePath, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    this.#child.on('message', (m: ChildMessage) => this.#receive(m));
    this.#child.once('exit', (code, signal) => {
      this.#fail(new RS_ERR_BENCH_CHILD_FAILED(name, `exited (code ${code}, signal ${signal})`));
    });
    this.#child.once('error', (error) =>
      this.#fail(new RS_ERR_BENCH_CHILD_FAILED(name, error.message)),
    );
  }

  /** The child's process id (undefined if it could not be started). */
  get pid(): number | undefined {
    return this.#child.pid;
  }

  onProgress(fn: (m: ChildMessage & { type: 'progress' }) => void): void {
    this.#onProgress = fn;
  }

  send(message: ParentMessage): void {
    if (this.#failure !== null) throw this.#failure;
    this.#child.send(message);
  }

  /** The next message of that type; RS_ERR_BENCH_TIMEOUT after timeoutMs. */
  next<T extends ChildMessage['type']>(
    type: T,
    timeoutMs: number,
  ): Promise<Extract<ChildMessage, { type: T }>> {
    if (this.#failure !== null) return Promise.reject(this.#failure);
    const early = this.#unclaimed.findIndex((m) => m.type === type);
    if (early >= 0) {
      const [m] = this.#unclaimed.splice(early, 1);
      return Promise.resolve(m as Extract<ChildMessage, { type: T }>);
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        type,
        resolve: (m: ChildMessage) => {
          clearTimeout(timer);
          resolve(m as Extract<ChildMessage, { type: T }>);
        },
        reject: (e: Error) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(waiter);
        reject(new RS_ERR_BENCH_TIMEOUT(`a '${type}' message from the ${this.name}`, timeoutMs));
      }, timeoutMs);
      this.#waiters.add(waiter);
    });
  }

  /** Ends the child: it should have exited after its result; SIGKILL if not within timeoutMs. */
  stop(timeoutMs = 5_000): Promise<void> {
    // Asked by closing its IPC channel: serveChild exits on 'disconnect'.
    return stopChild(this.#child, timeoutMs, (child) => {
      if (child.connected) child.disconnect();
    });
  }

  #receive(m: ChildMessage): void {
    if (m.type === 'failed') {
      this.#fail(new RS_ERR_BENCH_CHILD_FAILED(this.name, m.message));
      return;
    }
    if (m.type === 'progress') this.#onProgress?.(m);
    for (const w of this.#waiters) {
      if (w.type !== m.type) continue;
      this.#waiters.delete(w);
      w.resolve(m);
      return;
    }
    // Progress is a stream read through onProgress; anything else is kept for a later next().
    if (m.type !== 'progress') this.#unclaimed.push(m);
  }

  #fail(error: Error): void {
    this.#failure ??= error;
    for (const w of this.#waiters) w.reject(this.#failure);
    this.#waiters.clear();
  }
}

/**
 * The child side: answers 'ready', runs `start(spec)` on 'start', and on 'stop' sends the result
 * of `stop()` and exits. An error anywhere is reported as 'failed' before the process exits.
 */
export function serveChild<S, R>(handlers: {
  start(spec: S, progress: (p: unknown) => void): void;
  stop(): Promise<R>;
}): void {
  const send = (m: ChildMessage): void => {
    if (process.connected) process.send?.(m);
  };
  const fail = (error: unknown): void => {
    send({ type: 'failed', message: (error as Error).stack ?? String(error) });
    setTimeout(() => process.exit(ExitCode.Failure), 100);
  };
  process.on('uncaughtException', fail);
  process.on('unhandledRejection', fail);
  process.on('disconnect', () => process.exit(ExitCode.Ok));
  process.on('message', (m: ParentMessage) => {
    if (m.type === 'start') {
      try {
        handlers.start(m.spec as S, (p) => send({ type: 'progress', progress: p as never }));
      } catch (error) {
        fail(error);
      }
    } else if (m.type === 'stop') {
      handlers.stop().then((result) => {
        // Disconnect only once the result is written: the parent is waiting for it.
        process.send?.({ type: 'result', result } as ChildMessage, undefined, {}, () => {
          if (process.connected) process.disconnect();
        });
      }, fail);
    }
  });
  send({ type: 'ready' });
}
