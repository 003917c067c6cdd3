/**
 * A ZMTP peer written from the specifications (ZMTP 3.0, rfc.zeromq.org/spec/23; 3.1, spec/37)
 * byte by byte, sharing nothing with src/engine/vllm/zmtp*.ts: the greeting, frames, READY, and a
 * raw TCP peer that records what it receives, for the tests of ringserve's own PULL and PUSH.
 */
import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/** Deterministic bytes: frame `i` of message `m`. */
export function pattern(size: number, seed: number): Buffer {
  const bytes = Buffer.allocUnsafe(size);
  let x = seed * 2654435761 + 1;
  for (let i = 0; i < size; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    bytes[i] = x >>> 24;
  }
  return bytes;
}

/** Signature, version 3.0, mechanism NULL, as-server 0, filler (spec 23, "The greeting"). */
export function specGreeting(
  overrides: { major?: number; mechanism?: string; signature?: boolean } = {},
) {
  const bytes = Buffer.alloc(64);
  bytes[0] = overrides.signature === false ? 0x00 : 0xff;
  bytes[9] = 0x7f;
  bytes[10] = overrides.major ?? 3;
  bytes[11] = 0;
  bytes.write(overrides.mechanism ?? 'NULL', 12, 'ascii');
  return bytes;
}

/** A frame: flags, then the size in 1 byte or (LONG, bit 1) 8 bytes network order, then the body. */
export function specFrame(
  body: Buffer,
  { more = false, command = false, long = body.length > 255 } = {},
) {
  const flags = (more ? 1 : 0) | (long ? 2 : 0) | (command ? 4 : 0);
  const head = long ? Buffer.alloc(9) : Buffer.alloc(2);
  head[0] = flags;
  if (long) head.writeBigUInt64BE(BigInt(body.length), 1);
  else head[1] = body.length;
  return Buffer.concat([head, body]);
}

/** READY (spec 23, "The NULL security mechanism") with Socket-Type `type`. */
export function specReady(type: string): Buffer {
  const name = Buffer.from('Socket-Type');
  const value = Buffer.from(type);
  const length = Buffer.alloc(4);
  length.writeUInt32BE(value.length);
  return specFrame(
    Buffer.concat([
      Buffer.from([5]),
      Buffer.from('READY'),
      Buffer.from([name.length]),
      name,
      length,
      value,
    ]),
    { command: true },
  );
}

export class RawPeer {
  readonly socket: Socket;
  received = Buffer.alloc(0);
  closed = false;

  constructor(socket: Socket) {
    this.socket = socket;
    socket.on('data', (chunk: Buffer) => {
      this.received = Buffer.concat([this.received, chunk]);
    });
    socket.on('close', () => {
      this.closed = true;
    });
    socket.on('error', () => {});
  }

  static async open(endpoint: string): Promise<RawPeer> {
    const match = /^tcp:\/\/(.+):(\d+)$/.exec(endpoint)!;
    const socket = connect({ host: match[1]!.replace(/^\[|\]$/g, ''), port: Number(match[2]) });
    socket.setNoDelay(true);
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new RawPeer(socket);
  }

  write(bytes: Buffer): void {
    this.socket.write(bytes);
  }

  /** Writes one byte at a time, each in its own turn (most land as chunks of their own). */
  async trickle(bytes: Buffer): Promise<void> {
    for (const byte of bytes) {
      this.socket.write(Buffer.from([byte]));
      await sleep(0);
    }
  }
}

/** One frame as the spec reads it: the flags' bits and the body. */
export interface SpecFrame {
  more: boolean;
  long: boolean;
  command: boolean;
  body: Buffer;
}

/** The whole frames in `bytes` from `from` (past a 64-byte greeting by default). */
export function specFrames(bytes: Buffer, from = 64): SpecFrame[] {
  const frames: SpecFrame[] = [];
  let at = from;
  while (at + 2 <= bytes.length) {
    const flags = bytes[at]!;
    const long = (flags & 2) !== 0;
    const head = long ? 9 : 2;
    if (at + head > bytes.length) break;
    const size = long ? Number(bytes.readBigUInt64BE(at + 1)) : bytes[at + 1]!;
    if (at + head + size > bytes.length) break;
    frames.push({
      more: (flags & 1) !== 0,
      long,
      command: (flags & 4) !== 0,
      body: bytes.subarray(at + head, at + head + size),
    });
    at += head + size;
  }
  return frames;
}

/** A command frame's name and the bytes after it. */
export function specCommand(frame: SpecFrame): { name: string; data: Buffer } {
  const length = frame.body[0]!;
  return {
    name: frame.body.toString('ascii', 1, 1 + length),
    data: frame.body.subarray(1 + length),
  };
}

/** 300 multipart messages of 1 to 6 frames, 0 B to 3 MiB each (short and LONG sizes, split reads). */
export function mixedMessages(): Buffer[][] {
  const sizes = [0, 1, 255, 256, 384, 65_535, 65_536, 200_000, 3 << 20];
  const messages: Buffer[][] = [];
  for (let m = 0; m < 300; m++) {
    const frames = [pattern(12, m)];
    for (let f = 0; f <= m % 5; f++)
      frames.push(pattern(sizes[(m + f) % sizes.length]!, m * 7 + f));
    messages.push(frames);
  }
  return messages;
}
