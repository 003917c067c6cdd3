/**
 * ringserve's own ZMTP PULL socket (src/engine/vllm/zmtp-pull.ts) against two peers that share
 * nothing with it: libzmq's PUSH (the zeromq package, the library pyzmq wraps, so what vLLM's
 * engine core sends with), and a raw TCP peer written here from the ZMTP 3.0/3.1 specifications
 * (rfc.zeromq.org specs 23 and 37) byte by byte, for what libzmq never sends: broken greetings, a
 * frame before READY, reserved flag bits, a frame over the limit, a message cut off, PING.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { Push } from 'zeromq';
import { ZmtpPull, type ZmtpPullOptions } from '../../../src/engine/vllm/zmtp-pull.js';
import { until } from '../../until.js';
import {
  mixedMessages,
  pattern,
  RawPeer,
  specFrame,
  specGreeting,
  specReady,
} from './zmtp-spec-peer.js';

const closers: (() => void)[] = [];

afterEach(() => {
  for (const close of closers.splice(0).reverse()) close();
});

interface Bound {
  pull: ZmtpPull;
  messages: Buffer[][];
  errors: Error[];
}

async function bound(options: Partial<ZmtpPullOptions> = {}, host = '127.0.0.1'): Promise<Bound> {
  const messages: Buffer[][] = [];
  const errors: Error[] = [];
  const pull = await ZmtpPull.bind(host, {
    // Copies: a frame may be a view of a chunk; the test keeps them past the call.
    onMessage: (frames) => messages.push(frames.map((frame) => Buffer.from(frame))),
    onPeerError: (error) => errors.push(error),
    ...options,
  });
  closers.push(() => pull.close());
  return { pull, messages, errors };
}

function libzmqPush(endpoint: string): Push {
  const push = new Push({ sendHighWaterMark: 0, linger: 0 });
  push.connect(endpoint);
  closers.push(() => push.close());
  return push;
}

/** A spec peer connected to `endpoint`, destroyed after the test. */
async function rawPeer(endpoint: string): Promise<RawPeer> {
  const peer = await RawPeer.open(endpoint);
  closers.push(() => peer.socket.destroy());
  return peer;
}

describe('ZmtpPull against libzmq PUSH', () => {
  it('receives multipart messages of every frame size whole and in order', async () => {
    const { pull, messages, errors } = await bound();
    expect(pull.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const push = libzmqPush(pull.endpoint);
    const sent = mixedMessages();
    for (const frames of sent) await push.send(frames);
    await until(() => messages.length === sent.length, Boolean);
    expect(errors).toEqual([]);
    for (let m = 0; m < sent.length; m++) {
      expect(messages[m]!.length).toBe(sent[m]!.length);
      for (let f = 0; f < sent[m]!.length; f++)
        expect(messages[m]![f]!.equals(sent[m]![f]!)).toBe(true);
    }
  });

  it('takes several peers, each in its own order, and one that comes back after a reset', async () => {
    const { pull, messages, errors } = await bound();
    const peers = [libzmqPush(pull.endpoint), libzmqPush(pull.endpoint)];
    for (let i = 0; i < 200; i++) {
      await peers[i % 2]!.send([Buffer.from([i % 2]), Buffer.from(String(i)), pattern(500, i)]);
    }
    await until(() => messages.length === 200, Boolean);
    for (const peer of [0, 1]) {
      const order = messages.filter((m) => m[0]![0] === peer).map((m) => Number(m[1]!.toString()));
      expect(order).toEqual([...Array(100).keys()].map((k) => k * 2 + peer));
    }
    peers[0]!.close();
    const again = libzmqPush(pull.endpoint);
    await again.send([Buffer.from('back')]);
    await until(() => messages.length === 201, Boolean);
    expect(messages[200]![0]!.toString()).toBe('back');
    expect(errors).toEqual([]);
  });

  it('pause() holds delivery at a message boundary and resume() gives the rest in order', async () => {
    const { pull, messages } = await bound({
      onMessage: (frames) => {
        messages.push(frames.map((frame) => Buffer.from(frame)));
        if (messages.length === 10) pull.pause();
      },
    });
    const push = libzmqPush(pull.endpoint);
    for (let i = 0; i < 400; i++) await push.send([Buffer.from(String(i)), pattern(2_000, i)]);
    await until(() => messages.length === 10, Boolean);
    await sleep(200);
    expect(messages.length).toBe(10);
    pull.resume();
    await until(() => messages.length === 400, Boolean);
    expect(messages.map((m) => Number(m[0]!.toString()))).toEqual([...Array(400).keys()]);
  });

  it('binds IPv6 loopback with a bracketed endpoint', async () => {
    const { pull, messages } = await bound({}, '::1');
    expect(pull.endpoint).toMatch(/^tcp:\/\/\[::1\]:\d+$/);
    const push = new Push({ ipv6: true, linger: 0 });
    closers.push(() => push.close());
    push.connect(pull.endpoint);
    await push.send([Buffer.from('six')]);
    await until(() => messages.length === 1, Boolean);
    expect(messages[0]![0]!.toString()).toBe('six');
  });
});

describe('ZmtpPull against a peer written from the specification', () => {
  it('answers the greeting with its own and a READY that names PULL', async () => {
    const { pull } = await bound();
    const peer = await rawPeer(pull.endpoint);
    peer.write(specGreeting());
    await until(() => peer.received.length >= 64 + 2 + 6 + 1 + 11 + 4 + 4, Boolean);
    const greeting = peer.received.subarray(0, 64);
    expect(greeting[0]).toBe(0xff);
    expect(greeting[9]).toBe(0x7f);
    expect(greeting[10]).toBe(3);
    expect(greeting.toString('ascii', 12, 16)).toBe('NULL');
    expect(greeting.subarray(16, 64).every((b) => b === 0)).toBe(true);
    expect(peer.received.subarray(64)).toEqual(specReady('PULL'));
  });

  it('reads a stream that arrives a byte at a time (short and long frames)', async () => {
    const { pull, messages, errors } = await bound();
    const peer = await rawPeer(pull.endpoint);
    const long = pattern(300, 1);
    await peer.trickle(
      Buffer.concat([
        specGreeting(),
        specReady('PUSH'),
        specFrame(Buffer.from('a'), { more: true }),
        specFrame(long, { more: true }),
        specFrame(Buffer.from('bc'), { long: true, more: true }),
        specFrame(Buffer.alloc(0)),
      ]),
    );
    await until(() => messages.length === 1, Boolean);
    expect(errors).toEqual([]);
    expect(messages[0]!.map((f) => f.toString('hex'))).toEqual([
      '61',
      long.toString('hex'),
      '6263',
      '',
    ]);
  });

  it('answers PING with PONG and its context', async () => {
    const { pull } = await bound();
    const peer = await rawPeer(pull.endpoint);
    const ping = Buffer.concat([
      Buffer.from([4]),
      Buffer.from('PING'),
      Buffer.from([0, 100]),
      Buffer.from('ctx-7'),
    ]);
    peer.write(
      Buffer.concat([specGreeting(), specReady('PUSH'), specFrame(ping, { command: true })]),
    );
    const pong = specFrame(
      Buffer.concat([Buffer.from([4]), Buffer.from('PONG'), Buffer.from('ctx-7')]),
      {
        command: true,
      },
    );
    const at = 64 + specReady('PULL').length;
    await until(() => peer.received.length >= at + pong.length, Boolean);
    expect(peer.received.subarray(at)).toEqual(pong);
  });

  it('drops a message whose peer goes away before its last frame, and goes on with the others', async () => {
    const { pull, messages } = await bound();
    const peer = await rawPeer(pull.endpoint);
    peer.write(
      Buffer.concat([
        specGreeting(),
        specReady('PUSH'),
        specFrame(Buffer.from('first'), { more: true }),
      ]),
    );
    await sleep(50);
    peer.socket.destroy();
    const push = libzmqPush(pull.endpoint);
    await push.send([Buffer.from('whole')]);
    await until(() => messages.length === 1, Boolean);
    await sleep(50);
    expect(messages.map((m) => m.map((f) => f.toString()))).toEqual([['whole']]);
  });

  const broken: [string, (endpoint: string) => Buffer, RegExp][] = [
    ['no signature', () => specGreeting({ signature: false }), /no greeting signature/],
    [
      'a ZMTP 2.0 greeting (major version 1)',
      () => specGreeting({ major: 1 }).subarray(0, 12),
      /major version 1/,
    ],
    ['the PLAIN mechanism', () => specGreeting({ mechanism: 'PLAIN' }), /PLAIN mechanism/],
    ['a PUB peer', () => Buffer.concat([specGreeting(), specReady('PUB')]), /PUB peer cannot talk/],
    [
      'a message before READY',
      () => Buffer.concat([specGreeting(), specFrame(Buffer.from('x'))]),
      /before the READY/,
    ],
    [
      'reserved flag bits',
      () => Buffer.concat([specGreeting(), specReady('PUSH'), Buffer.from([0x10, 1, 0x61])]),
      /reserved bits/,
    ],
    [
      'a frame over the limit',
      () => Buffer.concat([specGreeting(), specReady('PUSH'), specFrame(Buffer.alloc(2_000))]),
      /2000 bytes is over the limit of 1024/,
    ],
    [
      'a command inside a multipart message',
      () =>
        Buffer.concat([
          specGreeting(),
          specReady('PUSH'),
          specFrame(Buffer.from('x'), { more: true }),
          specFrame(Buffer.from([4, 80, 79, 78, 71]), { command: true }),
        ]),
      /command frame inside a multipart/,
    ],
    [
      'an ERROR from the peer',
      () =>
        Buffer.concat([
          specGreeting(),
          specFrame(Buffer.from('\x05ERROR\x03bad'), { command: true }),
        ]),
      /sent ERROR: bad/,
    ],
  ];

  it.each(broken)(
    'closes a connection that sends %s, and listens on',
    async (_what, bytes, reason) => {
      const { pull, messages, errors } = await bound({ maxFrameBytes: 1024 });
      const peer = await rawPeer(pull.endpoint);
      peer.write(bytes(pull.endpoint));
      await until(() => peer.closed, Boolean);
      expect(errors.length).toBe(1);
      expect((errors[0] as Error & { code?: string }).code).toBe('RS_ERR_ZMTP_PROTOCOL');
      expect(errors[0]!.message).toMatch(reason);
      expect(messages).toEqual([]);
      const push = libzmqPush(pull.endpoint);
      await push.send([Buffer.from('after')]);
      await until(() => messages.length === 1, Boolean);
    },
  );
});
