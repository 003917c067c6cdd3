/**
 * --listener reuseport: each API server listens on the port itself, with SO_REUSEPORT, and the
 * kernel spreads new connections over the listening sockets (as vLLM's API servers share theirs),
 * with no process in between. The primary listens on the same port only while no API server does:
 * at start until every API server is ready, while every one is dead (a sole server restarting), and
 * through a drain (the 503 answer). What the primary accepts it hands over as in --listener primary
 * (connection-distributor.ts). Start, restart and drain: supervisor.ts; the API server's side:
 * api-process.ts.
 */
import type { Server as HttpServer } from 'node:http';
import { createServer, type ListenOptions, type Server } from 'node:net';
import { nodeHasReusePort } from '../config.js';

export type ListenerMode = 'primary' | 'reuseport';

/** net.Server.listen's options with Node >= 22.12's `reusePort`, which @types/node 20 lacks. */
export type ReusePortListenOptions = ListenOptions & { reusePort?: boolean };

/**
 * Whether `--listener reuseport` can run on this Node: net.Server.listen takes `reusePort` from
 * 22.12.0 and 23.1.0 on (earlier ones ignore it, and a second listener on the port fails with
 * EADDRINUSE). The config refuses the mode where this is false; tests skip on it.
 */
export function reusePortSupported(): boolean {
  return nodeHasReusePort();
}

/**
 * An API server's own listener on `host:port`, joined to the port's SO_REUSEPORT group. `exclusive`:
 * in a node:cluster worker a listen otherwise goes through the primary's shared handle. Every
 * connection it accepts is served by `http` as if that server had accepted it itself: the
 * listener is created with http.Server's own socket defaults (half-open allowed, Nagle off). It is
 * a listener of its own rather than `http.listen()`, so that closing it only stops accepting: the
 * HTTP server's close, at the end of a drain, then does exactly what it does for connections the
 * primary handed over (a net.Server's close would wait for every connection it accepted to end).
 */
export function listenReusePort(http: HttpServer, host: string, port: number): Promise<Server> {
  const listener = createServer({ allowHalfOpen: true, noDelay: true }, (socket) => {
    http.emit('connection', socket);
  });
  return new Promise((resolve, reject) => {
    listener.once('error', reject);
    const options: ReusePortListenOptions = { host, port, exclusive: true, reusePort: true };
    listener.listen(options, () => {
      listener.off('error', reject);
      resolve(listener);
    });
  });
}
