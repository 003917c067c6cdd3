/**
 * The primary's listener as --listener reuseport uses it (connection-distributor.ts): it stops
 * listening while what it accepted is still handed over (close() instead closes those), listens
 * again on the same port, and with reusePort shares the port with other listeners.
 */
import type { Worker } from 'node:cluster';
import { EventEmitter } from 'node:events';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { ConnectionDistributor } from '../../src/cluster/connection-distributor.js';
import { reusePortSupported } from '../../src/cluster/listener.js';
import { until } from '../until.js';

class FakeServer extends EventEmitter {
  readonly got: Socket[] = [];
  send(_message: unknown, socket: Socket, _options: unknown, done: (e: Error | null) => void) {
    this.got.push(socket);
    setImmediate(() => done(null));
    return true;
  }
  isConnected(): boolean {
    return true;
  }
  get worker(): Worker {
    return this as unknown as Worker;
  }
}

const clients: Socket[] = [];
const distributors: ConnectionDistributor[] = [];

afterEach(() => {
  for (const c of clients.splice(0)) c.destroy();
  for (const d of distributors.splice(0)) d.close();
});

function distributor(): ConnectionDistributor {
  const d = new ConnectionDistributor();
  distributors.push(d);
  return d;
}

/** A client connection: resolves once connected, or with the error's code. */
function openClient(port: number): Promise<Socket | string> {
  return new Promise((resolve) => {
    const c = connect(port, '127.0.0.1', () => resolve(c));
    c.on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    clients.push(c);
  });
}

/** Resolves once the primary's side of `socket` is open: the peer has not closed it. */
function stillOpen(socket: Socket): Promise<boolean> {
  return new Promise((resolve) => {
    if (socket.destroyed) return resolve(false);
    socket.once('close', () => resolve(false));
    setTimeout(() => resolve(!socket.destroyed), 100);
  });
}

describe('ConnectionDistributor listening', () => {
  it('stopListening closes the port but keeps handing over what it accepted', async () => {
    const d = distributor();
    const port = await d.listen('127.0.0.1', 0);
    expect(d.listening).toBe(true);
    const client = await openClient(port);
    expect(typeof client).not.toBe('string');
    // Accepted (queued: no server yet) before the listen socket closes.
    await until(
      () => d.queued,
      (n) => n === 1,
    );
    expect(await d.stopListening()).toBe(true);
    expect(d.listening).toBe(false);
    expect(await d.stopListening()).toBe(false);
    expect(await openClient(port)).toBe('ECONNREFUSED');
    const server = new FakeServer();
    d.add(server.worker);
    await until(
      () => server.got.length,
      (n) => n === 1,
    );
    expect(await stillOpen(server.got[0]!)).toBe(true);
  });

  it('listens again on the same port; after close() nothing listens, also a listen it cut short', async () => {
    const d = distributor();
    const port = await d.listen('127.0.0.1', 0);
    expect(await d.listen('127.0.0.1', 0)).toBe(port);
    await d.stopListening();
    expect(await d.listen('127.0.0.1', port)).toBe(port);
    expect(typeof (await openClient(port))).not.toBe('string');
    await d.stopListening();
    const listening = d.listen('127.0.0.1', port);
    d.close();
    await listening.catch(() => {});
    await until(
      () => openClient(port),
      (c) => c === 'ECONNREFUSED',
    );
    await expect(d.listen('127.0.0.1', port)).rejects.toThrow(/closed/);
  });

  it.skipIf(!reusePortSupported())(
    'with reusePort shares its port with another listener, which keeps it after the first stops',
    async () => {
      const a = distributor();
      const b = distributor();
      const port = await a.listen('127.0.0.1', 0, { reusePort: true });
      expect(await b.listen('127.0.0.1', port, { reusePort: true })).toBe(port);
      const serverB = new FakeServer();
      b.add(serverB.worker);
      await a.stopListening();
      const answers = await Promise.all(Array.from({ length: 8 }, () => openClient(port)));
      expect(answers.every((c) => typeof c !== 'string')).toBe(true);
      await until(
        () => serverB.got.length,
        (n) => n >= 1,
      );
    },
  );
});
