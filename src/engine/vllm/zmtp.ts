/**
 * ZeroMQ's wire protocol, ZMTP 3.1 with the NULL security mechanism (3.0 peers too), for
 * ringserve's own PULL (zmtp-pull.ts, the bridge's output socket) and PUSH (zmtp-push.ts, the
 * headless engine's): both speak to libzmq 4.x peers (vLLM's pyzmq sockets) over TCP. What the wire
 * carries (ZMTP 3.0, rfc.zeromq.org/spec/23; 3.1, spec/37):
 *
 * - a 64-byte greeting each way: 0xFF, 8 bytes of padding, 0x7F, the version (3, 1), the
 *   mechanism's name in 20 bytes ("NULL" and zeros), as-server (0 under NULL), 31 bytes of filler;
 * - then frames: a flags byte (bit 0 MORE, bit 1 LONG, bit 2 COMMAND, the rest zero), the size in
 *   one byte or, when LONG, eight (network order), the body;
 * - under NULL, each side's first frame is the READY command (name length, "READY", then
 *   properties: name length, name, 4-byte value length, value), whose Socket-Type must be one this
 *   socket can talk to (a PULL takes PUSH peers only, a PUSH PULL peers); an ERROR command (a
 *   reason) ends a connection; ZMTP 3.1's PING is answered with PONG and its context, whatever the
 *   peer's heartbeat settings.
 *
 * A received frame that lies whole in one chunk read from the connection is a view of that chunk
 * (no copy, no finalizer); a frame cut by a chunk boundary is copied once into a buffer of its
 * exact size. A connection that breaks the protocol is closed and reported (RS_ERR_ZMTP_PROTOCOL).
 */
import type { Socket } from 'node:net';
import { RS_ERR_ZMTP_PROTOCOL } from '../../errors.js';

/** The socket types spoken here, and the one each talks to. */
export type ZmtpSocketType = 'PULL' | 'PUSH';
const PEER_TYPE: Readonly<Record<ZmtpSocketType, ZmtpSocketType>> = { PULL: 'PUSH', PUSH: 'PULL' };

const GREETING_BYTES = 64;
const FLAG_MORE = 0x01;
const FLAG_LONG = 0x02;
const FLAG_COMMAND = 0x04;
const FLAG_RESERVED = 0xf8;
/** ZMTP 3.1's PING context is at most 16 bytes after the 2-byte TTL. */
const PING_CONTEXT_MAX = 16;
/** A frame larger than this closes its connection (ZMQ_MAXMSGSIZE's role; zeromq's default is none). */
export const MAX_FRAME_BYTES = 1 << 30;

const EMPTY = Buffer.alloc(0);

/** This side's greeting: version 3.1, mechanism NULL, as-server 0. */
const GREETING = (() => {
  const greeting = Buffer.alloc(GREETING_BYTES);
  greeting[0] = 0xff;
  greeting[9] = 0x7f;
  greeting[10] = 3;
  greeting[11] = 1;
  greeting.write('NULL', 12, 'latin1');
  return greeting;
})();

/** The signature (10 bytes) and the major version (1). */
const VERSION_END = 11;

/** The signature, and a major version of 3 or more (ZMTP 2.0's greeting has 1 there, 1.0 no 0xFF). */
function checkVersion(greeting: Buffer): void {
  if (greeting[0] !== 0xff || (greeting[9]! & 1) === 0)
    throw new RS_ERR_ZMTP_PROTOCOL(
      'the peer does not speak ZMTP 2.0 or later (no greeting signature)',
    );
  if (greeting[10]! < 3)
    throw new RS_ERR_ZMTP_PROTOCOL(
      `the peer's greeting has major version ${greeting[10]}; ZMTP 3.0 or later is needed`,
    );
}

/** A command frame (short or long form) carrying `name` and `data`. */
function zmtpCommand(name: string, data: Buffer = EMPTY): Buffer {
  const bodyBytes = 1 + name.length + data.length;
  const long = bodyBytes > 255;
  const frame = Buffer.allocUnsafe((long ? 9 : 2) + bodyBytes);
  let at = 0;
  frame[at++] = FLAG_COMMAND | (long ? FLAG_LONG : 0);
  if (long) {
    frame.writeBigUInt64BE(BigInt(bodyBytes), at);
    at += 8;
  } else frame[at++] = bodyBytes;
  frame[at++] = name.length;
  at += frame.write(name, at, 'latin1');
  data.copy(frame, at);
  return frame;
}

/** READY's metadata: each property a 1-byte name length, the name, a 4-byte value length, the value. */
function zmtpProperties(properties: Readonly<Record<string, string>>): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of Object.entries(properties)) {
    const head = Buffer.allocUnsafe(1 + name.length + 4);
    head[0] = name.length;
    head.write(name, 1, 'latin1');
    const text = Buffer.from(value, 'latin1');
    head.writeUInt32BE(text.length, 1 + name.length);
    parts.push(head, text);
  }
  return Buffer.concat(parts);
}

/** This side's READY for each socket type spoken here. */
const READY: Readonly<Record<ZmtpSocketType, Buffer>> = {
  PULL: zmtpCommand('READY', zmtpProperties({ 'Socket-Type': 'PULL' })),
  PUSH: zmtpCommand('READY', zmtpProperties({ 'Socket-Type': 'PUSH' })),
};

/** A ZMTP short string: a 1-byte length, then the bytes (ERROR's reason). */
function shortString(text: string): Buffer {
  const bytes = Buffer.from(text, 'latin1');
  return Buffer.concat([Buffer.of(bytes.length), bytes]);
}

/** READY's properties, names lower-cased (ZMTP: property names are case-insensitive). */
function readProperties(body: Buffer, at: number): Map<string, Buffer> {
  const properties = new Map<string, Buffer>();
  while (at < body.length) {
    const nameBytes = body[at]!;
    if (at + 1 + nameBytes + 4 > body.length)
      throw new RS_ERR_ZMTP_PROTOCOL('a READY property is cut short');
    const name = body.toString('latin1', at + 1, at + 1 + nameBytes).toLowerCase();
    at += 1 + nameBytes;
    const valueBytes = body.readUInt32BE(at);
    at += 4;
    if (at + valueBytes > body.length)
      throw new RS_ERR_ZMTP_PROTOCOL(`READY's ${name} is cut short`);
    properties.set(name, body.subarray(at, at + valueBytes));
    at += valueBytes;
  }
  return properties;
}

/**
 * A multipart message's wire bytes: each frame's header (MORE on all but the last; LONG past 255
 * bytes) and body, in one buffer, so that a message is one write.
 */
export function encodeMessage(frames: readonly Uint8Array[]): Buffer {
  if (frames.length === 0) throw new RS_ERR_ZMTP_PROTOCOL('a message has at least one frame');
  let total = 0;
  for (const frame of frames) total += frameHeaderBytes(frame.length) + frame.length;
  const out = Buffer.allocUnsafe(total);
  let at = 0;
  const last = frames.length - 1;
  for (let i = 0; i <= last; i++) {
    const frame = frames[i]!;
    at = writeFrameHeader(out, at, frame.length, i < last);
    out.set(frame, at);
    at += frame.length;
  }
  return out;
}

/**
 * The frames after a message's first, without an object per frame: how many, each one's length,
 * and a copy of each into the wire buffer (the headless engine's out-of-band arrays: ndarray.ts
 * AuxFrames).
 */
export interface FrameSource {
  readonly count: number;
  lengthOf(i: number): number;
  copyTo(i: number, out: Uint8Array, at: number): void;
}

/**
 * A multipart message's wire bytes, as encodeMessage, from its first frame's bytes
 * (`first[0 .. firstLength)`, e.g. a msgpack writer's buffer) and the frames of `rest`: each byte
 * is copied once, into the one buffer written.
 */
export function encodeMessageFrom(
  first: Uint8Array,
  firstLength: number,
  rest: FrameSource,
): Buffer {
  let total = frameHeaderBytes(firstLength) + firstLength;
  for (let i = 0; i < rest.count; i++) {
    const n = rest.lengthOf(i);
    total += frameHeaderBytes(n) + n;
  }
  const out = Buffer.allocUnsafe(total);
  let at = writeFrameHeader(out, 0, firstLength, rest.count > 0);
  out.set(first.subarray(0, firstLength), at);
  at += firstLength;
  for (let i = 0; i < rest.count; i++) {
    const n = rest.lengthOf(i);
    at = writeFrameHeader(out, at, n, i < rest.count - 1);
    rest.copyTo(i, out, at);
    at += n;
  }
  return out;
}

function frameHeaderBytes(length: number): number {
  return length > 255 ? 9 : 2;
}

/** A frame's header at `at`; returns where its body starts. */
function writeFrameHeader(out: Buffer, at: number, length: number, more: boolean): number {
  const flags = more ? FLAG_MORE : 0;
  if (length > 255) {
    out[at] = flags | FLAG_LONG;
    out.writeUInt32BE(Math.floor(length / 2 ** 32), at + 1);
    out.writeUInt32BE(length >>> 0, at + 5);
    return at + 9;
  }
  out[at] = flags;
  out[at + 1] = length;
  return at + 2;
}

enum Stage {
  Greeting,
  Header,
  Body,
}

/** What a connection reports to the socket that owns it. */
export interface ZmtpOwner {
  /** Whether reading stops at the next message boundary (a PULL's backpressure). */
  readonly paused: boolean;
  readonly maxFrameBytes: number;
  /** The peer's READY was accepted: messages may be written. */
  peerReady(connection: ZmtpConnection): void;
  /** A complete multipart message from the peer. */
  deliver(frames: Buffer[]): void;
  /** The peer broke the protocol (or sent ERROR); the connection closes next. */
  peerError(error: Error): void;
  /** The connection closed, for whatever reason. */
  forget(connection: ZmtpConnection): void;
}

/**
 * One peer's connection, either end of it: the greeting, each side's READY, then frames into
 * messages for the owner (a PULL) or messages written to the peer (a PUSH).
 */
export class ZmtpConnection {
  readonly #owner: ZmtpOwner;
  readonly #socket: Socket;
  readonly #type: ZmtpSocketType;
  #stage = Stage.Greeting;
  /** The greeting or a frame header being gathered across chunks. */
  readonly #scratch = Buffer.alloc(GREETING_BYTES);
  #have = 0;
  /** A body cut by a chunk boundary, filled as chunks come. */
  #body: Buffer = EMPTY;
  #bodyHave = 0;
  #flags = 0;
  #ready = false;
  #frames: Buffer[] = [];
  /** The part of a chunk left unread when the socket was paused. */
  #rest: Buffer = EMPTY;
  #closed = false;

  /** Starts the handshake on a connected `socket`, this side being a `type` socket. */
  constructor(owner: ZmtpOwner, socket: Socket, type: ZmtpSocketType) {
    this.#owner = owner;
    this.#socket = socket;
    this.#type = type;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    // A reset or an end drops the message in progress, as zeromq's PULL does; the engine's link
    // (its liveness ping) decides what a silent engine means.
    socket.on('error', () => this.close());
    socket.on('close', () => this.close());
    socket.write(GREETING);
  }

  /** Both READYs have passed: a PUSH may write messages. */
  get ready(): boolean {
    return this.#ready && !this.#closed;
  }

  /** Writes a message's wire bytes (encodeMessage); false once the socket's buffer is full. */
  write(bytes: Buffer): boolean {
    return this.#socket.write(bytes);
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#frames = [];
    this.#rest = EMPTY;
    this.#socket.destroy();
    this.#owner.forget(this);
  }

  /** Reads what was left when the socket paused; resumes the socket if nothing pauses it again. */
  resume(): void {
    if (this.#closed) return;
    const rest = this.#rest;
    this.#rest = EMPTY;
    if (rest.length > 0 && !this.#parse(rest)) return;
    this.#socket.resume();
  }

  #onData(chunk: Buffer): void {
    if (this.#closed) return;
    if (this.#rest.length > 0) {
      // Bytes that came after the pause (a chunk already on its way): keep them in order.
      this.#rest = Buffer.concat([this.#rest, chunk]);
      return;
    }
    this.#parse(chunk);
  }

  /** Parses `chunk` to its end (true) or until the socket pauses at a message boundary (false). */
  #parse(chunk: Buffer): boolean {
    const length = chunk.length;
    let at = 0;
    try {
      while (at < length && !this.#closed) {
        if (this.#stage === Stage.Body) {
          const take = Math.min(this.#body.length - this.#bodyHave, length - at);
          chunk.copy(this.#body, this.#bodyHave, at, at + take);
          this.#bodyHave += take;
          at += take;
          if (this.#bodyHave === this.#body.length) {
            const body = this.#body;
            this.#body = EMPTY;
            this.#stage = Stage.Header;
            this.#frame(body);
          }
          continue;
        }
        if (this.#stage === Stage.Greeting) {
          const before = this.#have;
          const take = Math.min(GREETING_BYTES - before, length - at);
          chunk.copy(this.#scratch, before, at, at + take);
          this.#have += take;
          at += take;
          // An older peer sends less than 64 bytes and waits: judge it on its first 11.
          if (before < VERSION_END && this.#have >= VERSION_END) checkVersion(this.#scratch);
          if (this.#have === GREETING_BYTES) {
            this.#have = 0;
            this.#greeted(this.#scratch);
            this.#stage = Stage.Header;
          }
          continue;
        }
        // Stage.Header: pause only between messages.
        if (this.#have === 0 && this.#frames.length === 0 && this.#owner.paused) {
          this.#rest = chunk.subarray(at);
          this.#socket.pause();
          return false;
        }
        let size: number;
        if (this.#have === 0 && length - at >= 9) {
          this.#flags = chunk[at]!;
          if (this.#flags & FLAG_LONG) {
            size = this.#longSize(chunk, at + 1);
            at += 9;
          } else {
            size = chunk[at + 1]!;
            at += 2;
          }
        } else {
          this.#scratch[this.#have++] = chunk[at++]!;
          const need = this.#scratch[0]! & FLAG_LONG ? 9 : 2;
          if (this.#have < need) continue;
          this.#have = 0;
          this.#flags = this.#scratch[0]!;
          size = need === 9 ? this.#longSize(this.#scratch, 1) : this.#scratch[1]!;
        }
        if (this.#flags & FLAG_RESERVED)
          throw new RS_ERR_ZMTP_PROTOCOL(
            `a frame's flags have reserved bits set (0x${this.#flags.toString(16)})`,
          );
        if (size <= length - at) {
          const body = size === 0 ? EMPTY : chunk.subarray(at, at + size);
          at += size;
          this.#frame(body);
        } else {
          this.#body = Buffer.allocUnsafe(size);
          this.#bodyHave = 0;
          this.#stage = Stage.Body;
        }
      }
    } catch (error) {
      this.#owner.peerError(error as Error);
      this.close();
      return false;
    }
    return true;
  }

  #longSize(bytes: Buffer, at: number): number {
    const high = bytes.readUInt32BE(at);
    const size = high * 2 ** 32 + bytes.readUInt32BE(at + 4);
    if (size > this.#owner.maxFrameBytes)
      throw new RS_ERR_ZMTP_PROTOCOL(
        `a frame of ${size} bytes is over the limit of ${this.#owner.maxFrameBytes}`,
      );
    return size;
  }

  #greeted(greeting: Buffer): void {
    const mechanism = greeting.toString('latin1', 12, 32).replace(/\0+$/, '');
    if (mechanism !== 'NULL')
      throw new RS_ERR_ZMTP_PROTOCOL(
        `the peer asks for the ${mechanism} mechanism; only NULL is spoken`,
      );
    this.#socket.write(READY[this.#type]);
  }

  #frame(body: Buffer): void {
    const flags = this.#flags;
    if (flags & FLAG_COMMAND) {
      if (this.#frames.length > 0 || flags & FLAG_MORE)
        throw new RS_ERR_ZMTP_PROTOCOL('a command frame inside a multipart message');
      this.#command(body);
      return;
    }
    if (!this.#ready) throw new RS_ERR_ZMTP_PROTOCOL('a message frame before the READY command');
    this.#frames.push(body);
    if (flags & FLAG_MORE) return;
    const frames = this.#frames;
    this.#frames = [];
    this.#owner.deliver(frames);
  }

  #command(body: Buffer): void {
    if (body.length === 0 || 1 + body[0]! > body.length)
      throw new RS_ERR_ZMTP_PROTOCOL('a command frame without a whole name');
    const nameEnd = 1 + body[0]!;
    const name = body.toString('latin1', 1, nameEnd);
    if (name === 'ERROR') {
      const reason =
        body.length > nameEnd
          ? body.toString('latin1', nameEnd + 1, nameEnd + 1 + body[nameEnd]!)
          : '';
      throw new RS_ERR_ZMTP_PROTOCOL(`the peer sent ERROR: ${reason}`);
    }
    if (!this.#ready) {
      if (name !== 'READY')
        throw new RS_ERR_ZMTP_PROTOCOL(`the peer's first command is ${name}, not READY`);
      const type = readProperties(body, nameEnd).get('socket-type')?.toString('latin1');
      const peer = PEER_TYPE[this.#type];
      if (type !== peer) {
        this.#socket.write(zmtpCommand('ERROR', shortString('Invalid socket type')));
        throw new RS_ERR_ZMTP_PROTOCOL(
          `a ${type ?? 'typeless'} peer cannot talk to a ${this.#type} socket (${peer} can)`,
        );
      }
      this.#ready = true;
      this.#owner.peerReady(this);
      return;
    }
    if (name === 'PING') {
      // TTL (2 bytes), then the context to send back.
      const context = body.subarray(
        Math.min(body.length, nameEnd + 2),
        nameEnd + 2 + PING_CONTEXT_MAX,
      );
      this.#socket.write(zmtpCommand('PONG', context));
    }
    // PONG, and commands of socket types that are not ours (SUBSCRIBE, CANCEL): nothing to do.
  }
}
