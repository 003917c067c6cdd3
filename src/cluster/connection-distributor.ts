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
 * the primary's or wholly the server's. Node >= 22.12 could give each server its own listener with
 * SO_REUSEPORT (`reusePort`), leaving the kernel to skip dead ones; ringserve runs on Node 20.
 */
import type { Worker } from 'node:cluster';
import { createServer, type Server, type Socket } from 'node:net';
import { DrainingAnswer } from './draining-answer.js';
import type { SupervisorMessage } from './roles.js';

/** A connection that waited longer than this for a free API server is reported (onSlowHandover). */
export const SLOW_HANDOVER_MS = 100;

export interface DistributorOptions {
  /** A connection waited `waitedMs` in the primary before it went to a server; `queued` still wait. */
  onSlowHandover?: (waitedMs: number, queued: number) => void;
}

interface Member {
  readonly worker: Worker;
  /** The connection handed over and not yet acknowledged, or null when it may take another. */
  pending: Socket | null;
}

export class ConnectionDistributor {
  readonly #server: Server;
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
    // pauseOnConnect: the primary never reads; the bytes wait in the socket for the server.
    this.#server = createServer({ pauseOnConnect: true }, (socket) => this.#accept(socket));
  }

  listen(host: string, port: number): Promise<number> {
    return new Promise((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen({ host, port }, () => {
        this.#server.off('error', reject);
        const address = this.#server.address();
        resolve(typeof address === 'object' && address !== null ? address.port : port);
      });
    });
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
    this.#server.close();
    for (const socket of this.#queue.splice(0)) socket.destroy();
    this.#draining?.close();
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
