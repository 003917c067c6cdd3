/**
 * The primary process: creates the cluster's shared region (removing stale ones from crashed runs),
 * forks the engine core and the API servers (node:cluster workers), listens on the one port and
 * hands each connection to a live API server (connection-distributor.ts), restarts whichever child
 * crashes (restart-backoff.ts), drains on SIGTERM and unlinks the region on the way out.
 *
 * --listener reuseport (listener.ts): the API servers listen on the port themselves (SO_REUSEPORT)
 * and the primary's listener is open only while none does: from the start until every API server
 * is ready, whenever every one is dead, and from the start of a drain to the end of its grace.
 *
 * Restart rules (README, "Restarts"):
 * - an API server dies: the engine drops that server's requests and frees their blocks (server-down),
 *   then a new API server takes the same index; the others keep serving;
 * - the engine dies: every API server is told (engine-down: /health 503, in-flight requests fail
 *   with 503), a new engine is forked, and engine-up is sent once it is ready.
 */
import { type ChildProcess, fork } from 'node:child_process';
import cluster, { type Worker } from 'node:cluster';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { RingserveConfig } from '../config.js';
import { ExitCode } from '../errors.js';
import { createLogger, type Logger, rateLimit } from '../obs/log.js';
import {
  STAT_PAUSED,
  STAT_WEIGHT_VERSION,
  SUP_API_BACKOFF_S,
  SUP_API_RESTARTS,
  SUP_ENGINE_BACKOFF_S,
  SUP_ENGINE_RESTARTS,
} from '../shm/layout.js';
import { startMallocTrimmer } from '../shm/malloc-trim.js';
import { createRegion, type Region, removeStaleRegions, unlinkRegion } from '../shm/region.js';
import { addWord, engineStat, writeSlot } from '../shm/words.js';
import { ConnectionDistributor } from './connection-distributor.js';
import { layoutParamsFor } from './layout-params.js';
import { RestartBackoff } from './restart-backoff.js';
import {
  type ChildMessage,
  childEnv,
  ENV_ENGINE_RESTORE,
  type EngineRestore,
  entryPoint,
  type SupervisorMessage,
} from './roles.js';
import { stopChild } from './stop-child.js';

/** How long the engine may take to stop once asked before it is killed. */
const ENGINE_STOP_MS = 5_000;
/** At most one 'waited for a free API server' warning a second (a burst of connections is one event). */
const SLOW_HANDOVER_LOG_MS = 1_000;

export interface SupervisorOptions {
  /**
   * Region name; default `ringserve-<pid>-<128 random bits>`, so that no other process can guess it
   * (the addon creates it with mode 0600 too, so only this user's processes could open it anyway).
   */
  regionName?: string;
  /** Default: a pino logger at the config's --log-level. */
  logger?: Logger;
}

export class Supervisor {
  readonly config: RingserveConfig;
  readonly regionName: string;
  #region: Region | null = null;
  #engine: ChildProcess | null = null;
  readonly #servers = new Map<number, Worker>();
  #stopping = false;
  #port = 0;
  readonly #log: Logger;
  #engineReady: Promise<void> = Promise.resolve();
  readonly #connections: ConnectionDistributor;
  readonly #engineBackoff = new RestartBackoff(performance.now());
  readonly #serverBackoff = new Map<number, RestartBackoff>();
  /** What a restarted engine takes over from the one that died (pause state, weight version). */
  #engineRestore: EngineRestore | null = null;
  /** --listener reuseport: the API servers listening on the port themselves (ready, not dead). */
  readonly #listening = new Set<Worker>();
  /** Every initial API server was ready: from now on the primary listens only while none does. */
  #started = false;

  constructor(config: RingserveConfig, options: SupervisorOptions = {}) {
    this.config = config;
    this.regionName =
      options.regionName ?? `ringserve-${process.pid}-${randomBytes(16).toString('hex')}`;
    this.#log = options.logger ?? createLogger(config.logLevel, { name: 'ringserve' });
    const slowHandover = rateLimit(SLOW_HANDOVER_LOG_MS);
    this.#connections = new ConnectionDistributor({
      onSlowHandover: (waitedMs, queued) => {
        if (slowHandover()) {
          this.#log.warn(
            { waited_ms: Math.round(waitedMs), queued },
            'a connection waited for a free API server',
          );
        }
      },
    });
  }

  /** The port the API servers listen on (known once start() resolved). */
  get port(): number {
    return this.#port;
  }

  async start(): Promise<number> {
    process.title = 'ringserve-primary';
    const removed = removeStaleRegions();
    if (removed.length > 0)
      this.#log.warn({ regions: removed }, 'removed stale shared-memory regions');
    this.#region = createRegion(this.regionName, layoutParamsFor(this.config));
    startMallocTrimmer(this.config.mallocTrimIntervalS);
    await this.#startEngine();
    cluster.setupPrimary({ exec: entryPoint('api'), silent: false });
    cluster.on('exit', (worker, code, signal) => this.#onServerExit(worker, code, signal));
    // The primary listens and hands each connection to a live API server (connection-distributor.ts).
    // With reuseport it resolves the port (0: any free one) for the API servers, and hands over
    // what reaches it until they all listen.
    this.#port = await this.#connections.listen(this.config.host, this.config.port, {
      reusePort: this.#reusePort,
    });
    const servers = [];
    for (let k = 0; k < this.config.apiServerCount; k++) servers.push(this.#startServer(k));
    await Promise.all(servers);
    this.#started = true;
    await this.#followServers();
    this.#log.info(
      {
        host: this.config.host,
        port: this.#port,
        listener: this.config.listener,
        api_server_count: this.config.apiServerCount,
      },
      'listening',
    );
    return this.#port;
  }

  get #reusePort(): boolean {
    return this.config.listener === 'reuseport';
  }

  /**
   * --listener reuseport: the primary listens while no API server does, so that a client never
   * finds the port closed on a node that is up (a sole API server restarting), and stops once one
   * does. Before the start completes it listens anyway; from the drain on, stop() decides.
   */
  async #followServers(): Promise<void> {
    if (!this.#reusePort || !this.#started || this.#stopping) return;
    // Each call queues the state of its moment (the distributor runs them in order), so the last
    // one called decides, however their awaits interleave.
    if (this.#listening.size > 0) {
      if (await this.#connections.stopListening())
        this.#log.info(
          { port: this.#port },
          'API servers listen on the port: the primary stops listening',
        );
      return;
    }
    const wasListening = this.#connections.listening;
    await this.#connections
      .listen(this.config.host, this.#port, { reusePort: true })
      .then(() => {
        if (!wasListening)
          this.#log.warn(
            { port: this.#port },
            'no API server listens: the primary takes the connections until one is back',
          );
      })
      .catch((error: unknown) =>
        this.#log.error({ err: error, port: this.#port }, 'the primary could not listen again'),
      );
  }

  /**
   * Drains the API servers (bounded), stops the engine, unlinks the region. From the start of the
   * drain until --drain-grace-s after it, the listener answers new connections 503 (a load balancer
   * may still send some); with a grace of 0 it closes at once.
   */
  async stop(): Promise<void> {
    if (this.#stopping) return;
    this.#stopping = true;
    const graceS = this.config.drainGraceS;
    if (graceS > 0) {
      this.#connections.refuse(Math.max(1, Math.ceil(graceS)));
      // reuseport: the primary's 503 listener joins the port before the API servers leave it, so
      // the kernel sends it the new connections once they have closed their own (on SIGTERM).
      if (this.#reusePort && this.#port !== 0) await this.#listenToRefuse();
    } else this.#connections.close();
    const drainMs = this.config.drainTimeoutS * 1000;
    await Promise.all(
      [...this.#servers.values()].map((worker) => stopChild(worker.process, drainMs + 2_000)),
    );
    const engineStopped = this.#engine ? stopChild(this.#engine, ENGINE_STOP_MS) : undefined;
    if (graceS > 0) {
      await sleep(graceS * 1000);
      this.#connections.close();
    }
    await engineStopped;
    if (this.#region) unlinkRegion(this.regionName);
  }

  async #listenToRefuse(): Promise<void> {
    await this.#connections
      .listen(this.config.host, this.#port, { reusePort: true })
      .catch((error: unknown) =>
        this.#log.error({ err: error, port: this.#port }, 'the draining answer could not listen'),
      );
  }

  #startEngine(): Promise<void> {
    const restore =
      this.#engineRestore === null
        ? {}
        : { [ENV_ENGINE_RESTORE]: JSON.stringify(this.#engineRestore) };
    const child = fork(entryPoint('engine'), [], {
      env: { ...childEnv('engine', this.regionName, this.config), ...restore },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.#engine = child;
    this.#engineReady = new Promise((resolve, reject) => {
      const onMessage = (message: ChildMessage): void => {
        if (message.type === 'ready') {
          child.off('exit', onEarlyExit);
          resolve();
        } else if (message.type === 'server-reset') this.#restartServer(message.server);
        else if (message.type === 'server-failed')
          this.#servers.get(message.server)?.process.kill('SIGKILL');
      };
      const onEarlyExit = (code: number | null): void =>
        reject(new Error(`the engine core exited with ${code} before it was ready`));
      child.on('message', onMessage);
      child.once('exit', onEarlyExit);
    });
    child.once('exit', (code, signal) => this.#onEngineExit(child, code, signal));
    return this.#engineReady;
  }

  #onEngineExit(child: ChildProcess, code: number | null, signal: string | null): void {
    if (this.#stopping || child !== this.#engine) return;
    this.#engineRestore = this.#lastEngineState();
    const backoffMs = this.#engineBackoff.nextDelay(performance.now());
    this.#publishRestart(SUP_ENGINE_RESTARTS, SUP_ENGINE_BACKOFF_S, backoffMs);
    this.#log.error(
      {
        role: 'engine',
        code,
        signal,
        cause: exitCause(code, signal),
        backoff_ms: backoffMs,
        restarts: this.#engineBackoff.restarts,
        paused: this.#engineRestore.paused,
        weight_version: this.#engineRestore.weightVersion,
      },
      'engine core exited; restarting it',
    );
    this.#broadcast({ type: 'engine-down' });
    setTimeout(() => {
      if (this.#stopping) return;
      const started = performance.now();
      this.#engineBackoff.started(started);
      this.#startEngine().then(
        () => {
          this.#log.info(
            { role: 'engine', restart_ms: Math.round(performance.now() - started) },
            'engine core restarted',
          );
          this.#broadcast({ type: 'engine-up' });
        },
        (error: Error) => this.#log.error({ role: 'engine', err: error }, 'engine restart failed'),
      );
    }, backoffMs);
  }

  /**
   * The pause state and weight version the dead engine last published (it publishes them before it
   * acknowledges a pause or a weight update, so an acknowledged command is always in there).
   */
  #lastEngineState(): EngineRestore {
    const f64 = this.#region!.f64;
    return {
      paused: engineStat(f64, STAT_PAUSED) === 1,
      weightVersion: engineStat(f64, STAT_WEIGHT_VERSION),
    };
  }

  /** Counts a restart of a role and publishes its delay, for /metrics. */
  #publishRestart(counterAt: number, backoffAt: number, backoffMs: number): void {
    const { i32, f64 } = this.#region!;
    addWord(i32, counterAt, 1);
    writeSlot(f64, backoffAt, backoffMs / 1000);
  }

  #startServer(server: number): Promise<number> {
    // The port as resolved (--port 0): a reuseport API server listens on it itself.
    const config = { ...this.config, port: this.#port };
    const worker = cluster.fork({ ...childEnv('api', this.regionName, config, server) });
    this.#servers.set(server, worker);
    return new Promise((resolve, reject) => {
      worker.on('message', (message: ChildMessage) => {
        if (message.type === 'conn-ack') this.#connections.acknowledged(worker);
        else if (message.type === 'ready' && message.role === 'api') {
          // reuseport: it listens on the port already; it takes what the primary accepted too.
          this.#connections.add(worker);
          if (this.#reusePort && worker.isConnected()) {
            this.#listening.add(worker);
            void this.#followServers();
          }
          resolve(this.#port);
        } else if (message.type === 'abort-ids') this.#broadcast(message, message.from);
      });
      // Out of the rotation at the first sign of its death, before 'exit' is even reaped.
      worker.once('disconnect', () => this.#serverGone(worker));
      worker.once('exit', (code) => reject(new Error(`API server ${server} exited with ${code}`)));
    });
  }

  /** An API server is dying: out of the rotation; reuseport: the primary listens if none is left. */
  #serverGone(worker: Worker): void {
    this.#connections.remove(worker);
    if (this.#listening.delete(worker)) void this.#followServers();
  }

  #onServerExit(worker: Worker, code: number, signal: string): void {
    this.#serverGone(worker);
    const server = indexOf(this.#servers, worker);
    if (server < 0) return;
    this.#servers.delete(server);
    if (this.#stopping) return;
    this.#log.error(
      { role: 'api', api_server: server, code, signal, cause: exitCause(code, signal) },
      'API server exited; restarting it',
    );
    // The engine first drops the dead server's requests; its 'server-reset' answer restarts the server.
    this.#engineReady.then(() => this.#engine?.send({ type: 'server-down', server }));
  }

  #restartServer(server: number): void {
    if (this.#stopping || this.#servers.has(server)) return;
    const backoff = this.#backoffOf(server);
    const backoffMs = backoff.nextDelay(performance.now());
    this.#publishRestart(SUP_API_RESTARTS, SUP_API_BACKOFF_S, backoffMs);
    this.#log.warn(
      { role: 'api', api_server: server, backoff_ms: backoffMs, restarts: backoff.restarts },
      'restarting API server',
    );
    setTimeout(() => {
      if (this.#stopping) return;
      backoff.started(performance.now());
      this.#startServer(server).then(
        () => this.#log.info({ role: 'api', api_server: server }, 'API server restarted'),
        (error: Error) =>
          this.#log.error(
            { role: 'api', api_server: server, err: error },
            'API server restart failed',
          ),
      );
    }, backoffMs);
  }

  #backoffOf(server: number): RestartBackoff {
    let backoff = this.#serverBackoff.get(server);
    if (backoff === undefined) {
      backoff = new RestartBackoff(performance.now());
      this.#serverBackoff.set(server, backoff);
    }
    return backoff;
  }

  #broadcast(message: SupervisorMessage, except = -1): void {
    for (const [k, worker] of this.#servers) {
      if (k !== except && worker.isConnected()) worker.send(message);
    }
  }
}

/** Why a child ended, in words (the log line's `cause`). */
function exitCause(code: number | null, signal: string | null): string {
  if (signal !== null)
    return signal === 'SIGKILL' ? 'killed (SIGKILL: OOM killer or kill -9)' : `signal ${signal}`;
  if (code === ExitCode.OutputWorkerFailed) return 'output worker failed';
  return code === 0 ? 'exited on its own' : `exit code ${code}`;
}

function indexOf(servers: Map<number, Worker>, worker: Worker): number {
  for (const [k, w] of servers) if (w === worker) return k;
  return -1;
}
