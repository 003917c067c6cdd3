/**
 * A ZeroMQ PULL socket bound on TCP (zmtp.ts: ZMTP 3.1, NULL; 3.0 peers too), written for the
 * bridge's output link: vLLM's engine core connects a PUSH socket to it (pyzmq over libzmq 4.x) and
 * sends one multipart message per step. docs/vllm-protocol.md, "Sockets", says why the bridge reads
 * this socket itself instead of through zeromq.js: zeromq.js hands every received frame over 128
 * bytes to JavaScript as an external Buffer with a finalizer, and at vLLM's default zero-copy
 * threshold every routing row of every request comes in a frame of its own, so receiving cost more
 * than a third of the bridge's time. Here frames are views of the chunks read (zmtp.ts).
 *
 * As zeromq's PULL: messages from several peers are delivered as each completes, a peer's messages
 * in order, a message whose peer goes away before its last frame is dropped, there is no high-water
 * mark (the bridge's backlog is the bound: `pause()` stops reading every connection at the next
 * message boundary, so TCP holds the engine back), and a peer that breaks the protocol loses its
 * connection (reported through `onPeerError`) while the socket keeps listening for it to come
 * back, as libzmq reconnects.
 */
import { createServer, type Server } from 'node:net';
import { RS_ERR_ZMTP_PROTOCOL } from '../../errors.js';
import { MAX_FRAME_BYTES, ZmtpConnection, type ZmtpOwner } from './zmtp.js';

export interface ZmtpPullOptions {
  /** A complete multipart message (its frames may be views of a received chunk: read, keep, never write). */
  onMessage(frames: Buffer[]): void;
  /** A peer broke the protocol (or sent ERROR) and its connection was closed; the socket listens on. */
  onPeerError(error: Error): void;
  maxFrameBytes?: number;
}

export class ZmtpPull implements ZmtpOwner {
  readonly #server: Server;
  readonly #options: ZmtpPullOptions;
  readonly #connections = new Set<ZmtpConnection>();
  /** `tcp://host:port` as bound (an IPv6 host in brackets), for the engine to connect to. */
  readonly endpoint: string;
  readonly maxFrameBytes: number;
  #paused = false;
  #closed = false;

  private constructor(server: Server, endpoint: string, options: ZmtpPullOptions) {
    this.#server = server;
    this.endpoint = endpoint;
    this.#options = options;
    this.maxFrameBytes = options.maxFrameBytes ?? MAX_FRAME_BYTES;
    server.on('connection', (socket) => {
      if (this.#closed) socket.destroy();
      else this.#connections.add(new ZmtpConnection(this, socket, 'PULL'));
    });
  }

  /** Binds on an ephemeral port of `host` (an IPv4 or IPv6 address or a name). */
  static async bind(host: string, options: ZmtpPullOptions): Promise<ZmtpPull> {
    const server = createServer({ noDelay: true });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: host.replace(/^\[|\]$/g, ''), port: 0 }, () => {
        server.off('error', reject);
        resolve();
      });
    });
    const address = server.address();
    if (address === null || typeof address === 'string') {
      server.close();
      throw new RS_ERR_ZMTP_PROTOCOL(`binding ${host} gave no TCP address`);
    }
    const bound = address.family === 'IPv6' ? `[${address.address}]` : address.address;
    return new ZmtpPull(server, `tcp://${bound}:${address.port}`, options);
  }

  get paused(): boolean {
    return this.#paused;
  }

  /** Stops delivering at the next message boundary of every connection; TCP holds the peers back. */
  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    if (!this.#paused || this.#closed) return;
    this.#paused = false;
    for (const connection of this.#connections) {
      connection.resume();
      if (this.#paused) break;
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#server.close();
    for (const connection of this.#connections) connection.close();
  }

  /** @internal nothing to do: a PULL only reads. */
  peerReady(): void {}

  /** @internal a connection's complete message. */
  deliver(frames: Buffer[]): void {
    this.#options.onMessage(frames);
  }

  /** @internal */
  peerError(error: Error): void {
    this.#options.onPeerError(error);
  }

  /** @internal */
  forget(connection: ZmtpConnection): void {
    this.#connections.delete(connection);
  }
}
