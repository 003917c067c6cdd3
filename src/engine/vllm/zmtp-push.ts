/**
 * A ZeroMQ PUSH socket that connects over TCP (zmtp.ts: ZMTP 3.1, NULL), written for the headless
 * engine's output socket: the engine connects it to the frontend's output PULL (pyzmq over libzmq
 * 4.x in vLLM's frontends, zmtp-pull.ts in ringserve's bridge) and sends one multipart message
 * per step. zeromq.js sends every frame over 128 bytes zero-copy, with a reference released through
 * the main thread, and at vLLM's default zero-copy threshold every routing row goes out as a frame
 * of its own; here a message is encoded into one buffer and written once.
 *
 * As libzmq's PUSH with one peer, configured as vLLM's engine core configures its output socket
 * (no send high-water mark: vllm/utils/network_utils.py `make_zmq_socket`; linger 4 s at close:
 * vllm/v1/engine/core.py, headless/dial.ts):
 *
 * - `send` never blocks: a message sent before the connection is up, or while it is down, waits in
 *   order and goes out once the peer's READY has come. There is no high-water mark, as with
 *   `sndhwm = 0`: what the peer does not read waits in this process.
 * - A connection that fails or closes is dialled again every `reconnectMs` (libzmq's
 *   ZMQ_RECONNECT_IVL, 100 ms) until `close()`; messages already written to the lost connection are
 *   lost with it, as in libzmq.
 * - `close(lingerMs)` gives what is still queued or unsent that long to leave (ZMQ_LINGER), then
 *   drops it.
 */
import { connect, type Socket } from 'node:net';
import { RS_ERR_ZMTP_PROTOCOL } from '../../errors.js';
import { encodeMessage, ZmtpConnection, type ZmtpOwner } from './zmtp.js';

/** libzmq's ZMQ_RECONNECT_IVL default. */
const RECONNECT_MS = 100;
/** Commands are all a PULL peer sends; a frame this large is not one. */
const MAX_PEER_FRAME_BYTES = 1 << 16;

export interface ZmtpPushOptions {
  /** A connection failed or broke the protocol; the socket dials again. */
  onPeerError?(error: Error): void;
  reconnectMs?: number;
  /** How long `close()` gives what is unsent to leave (ZMQ_LINGER); 0 unless given. */
  lingerMs?: number;
}

/** `tcp://host:port` (an IPv6 host in brackets) as host and port. */
export function parseTcpEndpoint(endpoint: string): { host: string; port: number } {
  const match = /^tcp:\/\/(\[[^\]]+\]|[^:/]+):(\d{1,5})$/.exec(endpoint);
  const port = match === null ? Number.NaN : Number(match[2]);
  if (match === null || !(port >= 1 && port <= 65_535))
    throw new RS_ERR_ZMTP_PROTOCOL(`${JSON.stringify(endpoint)} is not a tcp://host:port endpoint`);
  return { host: match[1]!.replace(/^\[|\]$/g, ''), port };
}

export class ZmtpPush implements ZmtpOwner {
  readonly paused = false;
  readonly maxFrameBytes = MAX_PEER_FRAME_BYTES;
  readonly #host: string;
  readonly #port: number;
  readonly #options: ZmtpPushOptions;
  #socket: Socket | null = null;
  #connection: ZmtpConnection | null = null;
  /** Messages (their wire bytes) waiting for a ready connection, in order. */
  #queue: Buffer[] = [];
  #redial: NodeJS.Timeout | null = null;
  /** Set by close(): nothing more is sent or dialled. */
  #closing: Promise<void> | null = null;

  private constructor(endpoint: string, options: ZmtpPushOptions) {
    const { host, port } = parseTcpEndpoint(endpoint);
    this.#host = host;
    this.#port = port;
    this.#options = options;
  }

  /** Starts dialling `endpoint` (`tcp://host:port`); messages may be sent at once. */
  static connect(endpoint: string, options: ZmtpPushOptions = {}): ZmtpPush {
    const push = new ZmtpPush(endpoint, options);
    push.#dial();
    return push;
  }

  /** Whether a connection is up and past both READYs. */
  get connected(): boolean {
    return this.#connection?.ready === true;
  }

  /** Messages sent and not yet handed to a connection. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Sends one multipart message (its frames are copied: the caller may reuse them at once). */
  send(frames: readonly Uint8Array[]): void {
    this.sendEncoded(encodeMessage(frames));
  }

  /**
   * Sends one multipart message already in its wire bytes (zmtp.ts encodeMessage,
   * encodeMessageFrom); the socket keeps `bytes` until written, so the caller must not reuse them.
   */
  sendEncoded(bytes: Buffer): void {
    if (this.#closing !== null) throw new RS_ERR_ZMTP_PROTOCOL('send on a closed PUSH socket');
    const connection = this.#connection;
    if (connection?.ready === true && this.#queue.length === 0) connection.write(bytes);
    else this.#queue.push(bytes);
  }

  /**
   * Stops sending: what is queued or unsent gets `lingerMs` (the socket's linger unless given) to
   * reach the peer, then the connection closes. Resolves once it has.
   */
  close(lingerMs = this.#options.lingerMs ?? 0): Promise<void> {
    if (this.#closing !== null) return this.#closing;
    if (this.#redial !== null) clearTimeout(this.#redial);
    this.#redial = null;
    const socket = this.#socket;
    if (socket === null || socket.destroyed) {
      this.#queue = [];
      this.#closing = Promise.resolve();
      return this.#closing;
    }
    this.#closing = new Promise<void>((resolve) => {
      const timer = setTimeout(() => socket.destroy(), lingerMs);
      socket.once('close', () => {
        clearTimeout(timer);
        this.#queue = [];
        resolve();
      });
      // A ready connection ends now (after what it holds); one still in its handshake ends
      // once the queue has gone out (peerReady), or at the timer.
      if (this.#connection?.ready === true) socket.end();
    });
    return this.#closing;
  }

  #dial(): void {
    this.#redial = null;
    const socket = connect({ host: this.#host, port: this.#port, noDelay: true });
    this.#socket = socket;
    const failed = (error: Error): void => {
      // Before the connection: refused, unreachable. After it, ZmtpConnection handles the socket.
      socket.destroy();
      this.#options.onPeerError?.(error);
      this.#lost(socket);
    };
    socket.once('error', failed);
    socket.once('connect', () => {
      socket.off('error', failed);
      this.#connection = new ZmtpConnection(this, socket, 'PUSH');
    });
  }

  /** The socket is gone: dial again unless closed. */
  #lost(socket: Socket): void {
    if (this.#socket !== socket) return;
    this.#socket = null;
    this.#connection = null;
    if (this.#closing === null)
      this.#redial = setTimeout(() => this.#dial(), this.#options.reconnectMs ?? RECONNECT_MS);
  }

  /** @internal the peer's READY: what waited goes out, in order. */
  peerReady(connection: ZmtpConnection): void {
    const queue = this.#queue;
    this.#queue = [];
    for (const bytes of queue) connection.write(bytes);
    if (this.#closing !== null) this.#socket?.end();
  }

  /** @internal a PULL peer sends no messages. */
  deliver(): void {
    throw new RS_ERR_ZMTP_PROTOCOL('the PULL peer sent a message; a PUSH socket takes none');
  }

  /** @internal */
  peerError(error: Error): void {
    this.#options.onPeerError?.(error);
  }

  /** @internal the connection closed (an error, the peer's close, or ours). */
  forget(connection: ZmtpConnection): void {
    if (this.#connection !== connection) return;
    const socket = this.#socket;
    if (socket !== null) this.#lost(socket);
  }
}
