/**
 * The primary's connection handover, with fake API servers: round-robin over the live ones, one
 * unacknowledged connection per server at a time, queued while none can take one, and a
 * connection handed to a server that dies before acknowledging it goes to another, unread.
 */
import type { Worker } from 'node:cluster';
import { EventEmitter } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ConnectionDistributor } from '../../src/cluster/connection-distributor.js';
import { until } from '../until.js';

class FakeServer extends EventEmitter {
  readonly got: Socket[] = [];
  connected = true;
  failSends = false;
  send(_message: unknown, socket: Socket, _options: unknown, done: (e: Error | null) => void) {
    if (this.failSends) {
      setImmediate(() => done(new Error('channel closed')));
      return false;
    }
    this.got.push(socket);
    setImmediate(() => done(null));
    return true;
  }
  isConnected(): boolean {
    return this.connected;
  }
  get worker(): Worker {
    return this as unknown as Worker;
  }
}

const clients: Socket[] = [];
let distributor: ConnectionDistributor | null = null;

afterEach(() => {
  for (const c of clients.splice(0)) c.destroy();
  distributor?.close();
  distributor = null;
});

async function setUp(): Promise<{ d: ConnectionDistributor; port: number }> {
  const d = new ConnectionDistributor();
  distributor = d;
  return { d, port: await d.listen('127.0.0.1', 0) };
}

function openClient(port: number): Socket {
  const c = connect(port, '127.0.0.1');
  c.on('error', () => {});
  clients.push(c);
  return c;
}

describe('ConnectionDistributor', () => {
  it('hands connections round-robin, one unacknowledged at a time per server', async () => {
    const { d, port } = await setUp();
    const a = new FakeServer();
    const b = new FakeServer();
    d.add(a.worker);
    d.add(b.worker);
    for (let i = 0; i < 3; i++) openClient(port);
    await until(
      () => a.got.length + b.got.length,
      (n) => n === 2,
    );
    await new Promise((r) => setTimeout(r, 50));
    // The third waits: both servers have one unacknowledged.
    expect([a.got.length, b.got.length]).toEqual([1, 1]);
    d.acknowledged(a.worker);
    await until(
      () => a.got.length,
      (n) => n === 2,
    );
    expect([a.got.length, b.got.length]).toEqual([2, 1]);
    // An acknowledged connection's primary copy is closed.
    expect(a.got[0]!.destroyed).toBe(true);
    expect(b.got[0]!.destroyed).toBe(false);
  });

  it('gives the unacknowledged connection of a server that died to another, unread', async () => {
    const { d, port } = await setUp();
    const dead = new FakeServer();
    const live = new FakeServer();
    d.add(dead.worker);
    const client = openClient(port);
    await until(
      () => dead.got.length,
      (n) => n === 1,
    );
    client.write('GET /health HTTP/1.1\r\n\r\n');
    d.add(live.worker);
    dead.connected = false;
    d.remove(dead.worker);
    await until(
      () => live.got.length,
      (n) => n === 1,
    );
    expect(live.got[0]).toBe(dead.got[0]);
    // Paused since accepted: the request's bytes are still there for the server that takes it.
    const socket = live.got[0]!;
    socket.resume();
    const first = await new Promise<string>((r) => socket.once('data', (b) => r(String(b))));
    expect(first).toBe('GET /health HTTP/1.1\r\n\r\n');
    // A removed server gets nothing more.
    d.acknowledged(live.worker);
    openClient(port);
    await until(
      () => live.got.length,
      (n) => n === 2,
    );
    expect(dead.got.length).toBe(1);
  });

  it('re-hands a connection whose handover failed, and skips a disconnected server', async () => {
    const { d, port } = await setUp();
    const dying = new FakeServer();
    dying.failSends = true;
    const gone = new FakeServer();
    gone.connected = false;
    const live = new FakeServer();
    d.add(dying.worker);
    d.add(gone.worker);
    openClient(port);
    // Nobody can take it yet: it waits in the queue.
    await new Promise((r) => setTimeout(r, 100));
    d.add(live.worker);
    await until(
      () => live.got.length,
      (n) => n === 1,
    );
    expect(live.got.length).toBe(1);
    expect(gone.got.length).toBe(0);
  });
});
