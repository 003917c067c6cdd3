/**
 * ringserve's own ZMTP PUSH socket (src/engine/vllm/zmtp-push.ts, the headless engine's output)
 * against two peers that share nothing with it: libzmq's PULL (the zeromq package, the library
 * pyzmq wraps, so what vLLM's frontends read with), and a peer written from the ZMTP 3.0/3.1
 * specifications (zmtp-spec-peer.ts), for the bytes on the wire and what libzmq never sends: PING,
 * a peer of the wrong socket type, a message from a PULL.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Pull } from 'zeromq';
import { AuxFrames } from '../../../src/engine/vllm/ndarray.js';
import { encodeMessageFrom } from '../../../src/engine/vllm/zmtp.js';
import { parseTcpEndpoint, ZmtpPush } from '../../../src/engine/vllm/zmtp-push.js';
import { until } from '../../until.js';
import {
  mixedMessages,
  pattern,
  RawPeer,
  specCommand,
  specFrame,
  specFrames,
  specGreeting,
  specReady,
} from './zmtp-spec-peer.js';

const closers: (() => unknown)[] = [];

afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

function push(endpoint: string, errors: Error[] = []): ZmtpPush {
  const socket = ZmtpPush.connect(endpoint, {
    onPeerError: (e) => errors.push(e),
    reconnectMs: 20,
  });
  closers.push(() => socket.close());
  return socket;
}

async function libzmqPull(
  endpoint = 'tcp://127.0.0.1:0',
): Promise<{ pull: Pull; endpoint: string }> {
  const pull = new Pull({ linger: 0, ipv6: endpoint.includes('[') });
  await pull.bind(endpoint);
  closers.push(() => pull.close());
  return { pull, endpoint: pull.lastEndpoint! };
}

/** `count` messages from `pull`, each copied. */
async function receive(pull: Pull, count: number): Promise<Buffer[][]> {
  const out: Buffer[][] = [];
  while (out.length < count) out.push((await pull.receive()).map((f) => Buffer.from(f)));
  return out;
}

/** A port nothing listens on (for now). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

describe('ZmtpPush against libzmq PULL', () => {
  it('sends multipart messages of every frame size whole and in order, sent before it connected', async () => {
    const { pull, endpoint } = await libzmqPull();
    const errors: Error[] = [];
    const socket = push(endpoint, errors);
    const sent = mixedMessages();
    for (const frames of sent) socket.send(frames);
    // Every send came before the connection: they waited, in order.
    expect(socket.connected).toBe(false);
    const got = await receive(pull, sent.length);
    expect(errors).toEqual([]);
    for (let m = 0; m < sent.length; m++) {
      expect(got[m]!.length).toBe(sent[m]!.length);
      for (let f = 0; f < sent[m]!.length; f++) expect(got[m]![f]!.equals(sent[m]![f]!)).toBe(true);
    }
  });

  it('sends messages encoded from a first frame and an aux arena (the step path) as libzmq reads them', async () => {
    const { pull, endpoint } = await libzmqPull();
    const errors: Error[] = [];
    const socket = push(endpoint, errors);
    const sent = mixedMessages().slice(0, 60);
    // One arena and one oversized first-frame buffer, reused for every message, as the encoder
    // reuses its own: what went out must not change when the next message overwrites them.
    const aux = new AuxFrames();
    const body = Buffer.alloc(64);
    for (const [first, ...rest] of sent) {
      aux.reset();
      for (const frame of rest) aux.add(frame, 0, frame.length);
      first!.copy(body);
      socket.sendEncoded(encodeMessageFrom(body, first!.length, aux));
    }
    const got = await receive(pull, sent.length);
    expect(errors).toEqual([]);
    for (let m = 0; m < sent.length; m++) {
      expect(got[m]!.length).toBe(sent[m]!.length);
      for (let f = 0; f < sent[m]!.length; f++) expect(got[m]![f]!.equals(sent[m]![f]!)).toBe(true);
    }
  });

  it('dials until the peer binds, and again after the peer goes away and comes back', async () => {
    const endpoint = `tcp://127.0.0.1:${await freePort()}`;
    const errors: Error[] = [];
    const socket = push(endpoint, errors);
    socket.send([Buffer.from('early')]);
    await until(() => errors.length >= 2, Boolean, { what: 'two refused dials' });
    expect(errors[0]!.message).toMatch(/ECONNREFUSED/);
    const first = await libzmqPull(endpoint);
    expect((await receive(first.pull, 1))[0]![0]!.toString()).toBe('early');
    expect(socket.connected).toBe(true);
    first.pull.close();
    await until(() => !socket.connected, Boolean, { what: 'the lost connection to be noticed' });
    socket.send([Buffer.from('while'), Buffer.from('down')]);
    expect(socket.queued).toBe(1);
    const second = await libzmqPull(endpoint);
    const [again] = await receive(second.pull, 1);
    expect(again!.map((f) => f.toString())).toEqual(['while', 'down']);
    expect(socket.queued).toBe(0);
  });

  it('lingers at close until what was sent has left; close with no peer ends at once', async () => {
    const { pull, endpoint } = await libzmqPull();
    const socket = push(endpoint);
    for (let i = 0; i < 40; i++) socket.send([Buffer.from(String(i)), pattern(1 << 20, i)]);
    const closed = socket.close(10_000);
    expect(() => socket.send([Buffer.from('late')])).toThrow(/closed PUSH socket/);
    const got = await receive(pull, 40);
    expect(got.map((m) => Number(m[0]!.toString()))).toEqual([...Array(40).keys()]);
    expect(got[39]![1]!.equals(pattern(1 << 20, 39))).toBe(true);
    await closed;

    const nowhere = push(`tcp://127.0.0.1:${await freePort()}`);
    nowhere.send([Buffer.from('lost')]);
    const started = Date.now();
    await nowhere.close(0);
    expect(Date.now() - started).toBeLessThan(5_000); // not the 10 s linger above, nor forever
  });

  it('connects to IPv6 loopback by a bracketed endpoint', async () => {
    const { pull, endpoint } = await libzmqPull('tcp://[::1]:0');
    expect(endpoint).toMatch(/^tcp:\/\/\[::1\]:\d+$/);
    push(endpoint).send([Buffer.from('six')]);
    expect((await receive(pull, 1))[0]![0]!.toString()).toBe('six');
  });
});

/** A TCP server whose every connection is a spec peer; `peers` in the order they came. */
async function specServer(): Promise<{ endpoint: string; peers: RawPeer[]; server: Server }> {
  const peers: RawPeer[] = [];
  const sockets: Socket[] = [];
  const server = createServer((socket) => {
    sockets.push(socket);
    peers.push(new RawPeer(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(() => {
    for (const socket of sockets) socket.destroy();
    return new Promise((resolve) => server.close(resolve));
  });
  const { port } = server.address() as { port: number };
  return { endpoint: `tcp://127.0.0.1:${port}`, peers, server };
}

/** Greets `peer`'s socket, waits for its READY (it comes after both greetings), says READY as `type`. */
async function handshake(peer: RawPeer, type = 'PULL'): Promise<void> {
  peer.write(specGreeting());
  await until(() => specFrames(peer.received).length >= 1, Boolean, { what: "the socket's READY" });
  peer.write(specReady(type));
}

describe('ZmtpPush against a peer written from the spec', () => {
  it('greets as ZMTP 3.1 NULL, says READY as PUSH, and frames messages as the spec says', async () => {
    const { endpoint, peers } = await specServer();
    const socket = push(endpoint);
    socket.send([Buffer.from('a'), pattern(300, 1), Buffer.alloc(0)]);
    await until(() => peers.length === 1, Boolean);
    const peer = peers[0]!;
    await until(() => peer.received.length >= 64, Boolean);
    const greeting = peer.received.subarray(0, 64);
    expect([greeting[0], greeting[9], greeting[10], greeting[11]]).toEqual([0xff, 0x7f, 3, 1]);
    expect(greeting.toString('ascii', 12, 32).replace(/\0+$/, '')).toBe('NULL');
    expect(greeting[32]).toBe(0);
    await handshake(peer);
    const [ready] = specFrames(peer.received);
    expect(ready!.command).toBe(true);
    const { name, data } = specCommand(ready!);
    expect(name).toBe('READY');
    // Socket-Type = PUSH: name length, name, 4-byte value length, value.
    expect(
      data.equals(
        Buffer.concat([
          Buffer.from([11]),
          Buffer.from('Socket-Type'),
          Buffer.from([0, 0, 0, 4]),
          Buffer.from('PUSH'),
        ]),
      ),
    ).toBe(true);
    await until(() => specFrames(peer.received).length === 4, Boolean, { what: 'the message' });
    const message = specFrames(peer.received).slice(1);
    expect(message.map((f) => [f.more, f.long, f.command, f.body.length])).toEqual([
      [true, false, false, 1],
      [true, true, false, 300],
      [false, false, false, 0],
    ]);
    expect(message[1]!.body.equals(pattern(300, 1))).toBe(true);
  });

  it('answers PING with PONG and its context', async () => {
    const { endpoint, peers } = await specServer();
    push(endpoint);
    await until(() => peers.length === 1, Boolean);
    const peer = peers[0]!;
    await handshake(peer);
    const ping = Buffer.concat([
      Buffer.from([4]),
      Buffer.from('PING'),
      Buffer.from([0, 10]),
      Buffer.from('ctx'),
    ]);
    peer.write(specFrame(ping, { command: true }));
    await until(() => specFrames(peer.received).length === 2, Boolean, { what: 'PONG' });
    const pong = specCommand(specFrames(peer.received)[1]!);
    expect([pong.name, pong.data.toString()]).toEqual(['PONG', 'ctx']);
  });

  it('refuses a peer of another socket type with ERROR, reports it and dials again', async () => {
    const { endpoint, peers } = await specServer();
    const errors: Error[] = [];
    const socket = push(endpoint, errors);
    await until(() => peers.length === 1, Boolean);
    await handshake(peers[0]!, 'PUSH');
    await until(() => peers[0]!.closed, Boolean, { what: 'the connection to close' });
    const error = specFrames(peers[0]!.received)[1]!;
    expect(specCommand(error).name).toBe('ERROR');
    expect(errors.map((e) => (e as { code?: string }).code)).toEqual(['RS_ERR_ZMTP_PROTOCOL']);
    expect(errors[0]!.message).toMatch(/a PUSH peer cannot talk to a PUSH socket \(PULL can\)/);
    // It dials again; this time the peer is a PULL and gets what was sent meanwhile.
    socket.send([Buffer.from('after')]);
    await until(() => peers.length === 2, Boolean, { what: 'a second dial' });
    await handshake(peers[1]!);
    await until(() => specFrames(peers[1]!.received).length === 2, Boolean);
    expect(specFrames(peers[1]!.received)[1]!.body.toString()).toBe('after');
  });

  it('closes a connection whose PULL peer sends a message', async () => {
    const { endpoint, peers } = await specServer();
    const errors: Error[] = [];
    push(endpoint, errors);
    await until(() => peers.length === 1, Boolean);
    await handshake(peers[0]!);
    peers[0]!.write(specFrame(Buffer.from('not yours')));
    await until(() => peers[0]!.closed, Boolean);
    expect(errors[0]!.message).toMatch(/the PULL peer sent a message/);
    await until(() => peers.length === 2, Boolean, { what: 'a second dial' });
  });
});

describe('parseTcpEndpoint', () => {
  it('reads host and port, IPv6 in brackets; refuses anything else', () => {
    expect(parseTcpEndpoint('tcp://10.0.0.2:5555')).toEqual({ host: '10.0.0.2', port: 5555 });
    expect(parseTcpEndpoint('tcp://[fe80::1]:7')).toEqual({ host: 'fe80::1', port: 7 });
    expect(parseTcpEndpoint('tcp://node-3:80')).toEqual({ host: 'node-3', port: 80 });
    for (const bad of ['ipc:///tmp/x', 'tcp://h:0', 'tcp://h:70000', 'tcp://h', 'tcp://:5']) {
      expect(() => parseTcpEndpoint(bad)).toThrow(/is not a tcp:\/\/host:port endpoint/);
    }
  });
});
