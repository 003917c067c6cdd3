/**
 * The primary's listener: accepts every connection and hands it to a live API server, round-robin,
 * as node:cluster's round-robin scheduler does, but without its hole. node:cluster (Node 20,
 * lib/internal/cluster/round_robin_handle.js) keeps a connection it handed over until the worker
 * answers `accepted`; a worker that dies first never answers, and the connection stays open in the
 * primary, unanswered, for ever. Here:
 *
 * - a server takes one connection at a time: it gets the next only once it has acknowledged the
 *   last (a stopped or busy process holds at most one; the others go to its siblings);
 * - the primary keeps its copy of a connection until the server acknowledges it, and when a server
 *   dies with one unacknowledged (or the handover itself fails), that connection goes to another
 *   server, which answers it as if nothing had happened (nothing has read from it yet);
 * - a server is out of the rotation from its death signal on (`remove`), before any new connection
 *   is accepted for it.
 *
 * The server acknowledges before it reads a byte (api-process.ts), so a connection is either still
 * the primary's or wholly the server's.
 *
 * With --listener reuseport (listener.ts) the API servers listen on the port themselves and this
 * listener is open only while none does (start, every server dead, drain): it listens with
 * `reusePort` too, and stopListening() closes the listen socket while what it already accepted
 * is still handed over. Each listen is a new net.Server, so a closed one is never listened again.
 */
import type { Worker } from 'node:cluster';
import { createServer, type Server, type Socket } from 'node:net';
import { DrainingAnswer } from './draining-answer.js';
import type { ReusePortListenOptions } from './listener.js';
import type { SupervisorMessage } from './roles.js';

/** A connection that waited longer than this for a free API server is reported (onSlowHandover). */
export const SLOW_HANDOVER_MS = 100;

export interface DistributorOptions {
  /** A connection waited `waitedMs` in the primary before it went to a server; `queued` still wait. */
  onSlowHandover?: (waitedMs: number, queued: number) => void;
}

export interface ListenAt {
  /** SO_REUSEPORT: share the port with the API servers' own listeners (Node >= 22.12). */
  reusePort?: boolean;
}

interface Member {
  readonly worker: Worker;
  /** The connection handed over and not yet acknowledged, or null when it may take another. */
  pending: Socket | null;
}

export class ConnectionDistributor {
  /** The listen socket, or null while the primary does not listen. */
  #server: Server | null = null;
  /** listen() and stopListening() run one after the other, in the order they were called. */
  #ops: Promise<unknown> = Promise.resolve();
  #port = 0;
  /** Set by close(): nothing listens again. */
  #closed = false;
  /** Live servers in rotation order. */
  readonly #members: Member[] = [];
  /** Accepted connections no server could take yet (every one busy with a handover, or none up). */
  readonly #queue: Socket[] = [];
  #next = 0;
  /** Set once the node drains: new and queued connections get a 503 from the primary itself. */
  #draining: DrainingAnswer | null = null;
  /** When each queued connection was accepted (performance.now()), to report long waits. */
  readonly #acceptedAt = new WeakMap<Socket, number>();
  readonly #onSlowHandover: DistributorOptions['onSlowHandover'];

  constructor(options: DistributorOptions = {}) {
    this.#onSlowHandover = options.onSlowHandover;
  }

  /**
   * Listens on `host:port` (port 0: any free port); resolves with the port. Already listening: the
   * port at once. After stopListening() it may listen again (the same port, with reusePort).
   */
  listen(host: string, port: number, at: ListenAt = {}): Promise<number> {
    const op = this.#ops.then(() => this.#listenNow(host, port, at.reusePort === true));
    this.#ops = op.catch(() => {});
    return op;
  }

  /** Connections accepted and waiting for a server to take them. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Whether the primary's listen socket is open (or opening). */
  get listening(): boolean {
    return this.#server !== null;
  }

  /**
   * Closes the listen socket only: connections accepted and not yet handed over still go to the
   * API servers (or get the drain's 503), unlike close(). With SO_REUSEPORT, connections the kernel
   * had queued on this socket and the primary had not yet accepted are reset, unless the sysctl
   * net.ipv4.tcp_migrate_req moves them to another listener of the port. Resolves with whether
   * it was listening.
   */
  stopListening(): Promise<boolean> {
    const op = this.#ops.then(() => {
      const server = this.#server;
      this.#server = null;
      server?.close();
      return server !== null;
    });
    this.#ops = op;
    return op;
  }

  /** Puts a server (listening for 'conn' messages) in the rotation. */
  add(worker: Worker): void {
    this.#members.push({ worker, pending: null });
    this.#drainQueue();
  }

  /** Takes a dead (or dying) server out at once; its unacknowledged connection goes to another. */
  remove(worker: Worker): void {
    const at = this.#members.findIndex((m) => m.worker === worker);
    if (at < 0) return;
    const [member] = this.#members.splice(at, 1);
    if (member?.pending) this.#queue.unshift(member.pending);
    this.#drainQueue();
  }

  /** The server acknowledged its connection: the primary's copy is closed, the next may go. */
  acknowledged(worker: Worker): void {
    const member = this.#members.find((m) => m.worker === worker);
    if (member?.pending == null) return;
    member.pending.destroy();
    member.pending = null;
    this.#drainQueue();
  }

  /**
   * The node drains: no connection goes to an API server any more; every one accepted from now on,
   * and every one not yet handed over, is answered 503 (draining-answer.ts) until close().
   */
  refuse(retryAfterS: number): void {
    this.#draining ??= new DrainingAnswer(retryAfterS);
    for (const socket of this.#queue.splice(0)) this.#draining.take(socket);
  }

  /** Stops accepting; connections not yet handed over (or still being refused) are closed. */
  close(): void {
    this.#closed = true;
    this.#server?.close();
    this.#server = null;
    for (const socket of this.#queue.splice(0)) socket.destroy();
    this.#draining?.close();
  }

  #listenNow(host: string, port: number, reusePort: boolean): Promise<number> {
    if (this.#server !== null) return Promise.resolve(this.#port);
    if (this.#closed) return Promise.reject(new Error('the connection distributor is closed'));
    // pauseOnConnect: the primary never reads; the bytes wait in the socket for the server.
    // noDelay: TCP_NODELAY on the socket itself, which the server's copy shares, as http.Server
    // sets on the connections it accepts (with Nagle on, a reply written in more than one piece
    // waits for the client's delayed ACK).
    const server = createServer({ pauseOnConnect: true, noDelay: true }, (socket) =>
      this.#accept(socket),
    );
    this.#server = server;
    const options: ReusePortListenOptions = reusePort ? { host, port, reusePort } : { host, port };
    return new Promise((resolve, reject) => {
      const failed = (error: Error): void => {
        if (this.#server === server) this.#server = null;
        reject(error);
      };
      server.once('error', failed);
      server.listen(options, () => {
        server.off('error', failed);
        const address = server.address();
        this.#port = typeof address === 'object' && address !== null ? address.port : port;
        // Closed while the listen was under way: it must not stay open.
        if (this.#server !== server) server.close();
        resolve(this.#port);
      });
    });
  }

  #accept(socket: Socket): void {
    if (this.#draining !== null) {
      this.#draining.take(socket);
      return;
    }
    // A client that leaves while queued must not be handed over (nor kept).
    socket.once('close', () => {
      const at = this.#queue.indexOf(socket);
      if (at >= 0) this.#queue.splice(at, 1);
    });
    this.#acceptedAt.set(socket, performance.now());
    this.#queue.push(socket);
    this.#drainQueue();
  }

  #drainQueue(): void {
    while (this.#queue.length > 0) {
      const member = this.#nextFree();
      if (member === null) return;
      this.#handOver(member, this.#queue.shift()!);
    }
  }

  /** The next server in rotation order with no handover in progress, or null. */
  #nextFree(): Member | null {
    const n = this.#members.length;
    for (let i = 0; i < n; i++) {
      const member = this.#members[(this.#next + i) % n]!;
      if (member.pending === null && member.worker.isConnected()) {
        this.#next = (this.#next + i + 1) % n;
        return member;
      }
    }
    return null;
  }

  #handOver(member: Member, socket: Socket): void {
    if (socket.destroyed) return;
    const waitedMs = performance.now() - (this.#acceptedAt.get(socket) ?? performance.now());
    if (waitedMs > SLOW_HANDOVER_MS) this.#onSlowHandover?.(waitedMs, this.#queue.length);
    member.pending = socket;
    const message: SupervisorMessage = { type: 'conn' };
    // keepOpen: the primary's copy stays open until the server acknowledges (see above).
    member.worker.send(message, socket, { keepOpen: true }, (error) => {
      if (!error || member.pending !== socket) return;
      // The channel is gone: the server is dying. Out of the rotation, connection to another.
      this.remove(member.worker);
    });
  }
}
