/**
 * The floor: a bare node:http server that answers GET /health with an empty 200 and does nothing
 * else, a process of its own at the API servers' priority. The probe times it as it times the API
 * server, out of phase with it, so every arm also says what /health latency this machine gives a
 * Node process with no work of its own under the same load: the part of the API server's /health
 * tail that is the machine's (cores shared with the engine, the load generator, the probe), not
 * the server's.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { serveChild } from './child.js';
import type { FloorProgress, FloorResult, FloorSpec } from './messages.js';

let server: Server | null = null;

serveChild<FloorSpec, FloorResult>({
  start(_spec, progress) {
    process.title = 'ringserve-bench-floor';
    const s = createServer({ keepAliveTimeout: 60_000 }, (req, res) => {
      res.statusCode = req.method === 'GET' && req.url === '/health' ? 200 : 404;
      res.end();
    });
    server = s;
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as AddressInfo;
      progress({ url: `http://127.0.0.1:${port}` } satisfies FloorProgress);
    });
  },
  stop: async () => {
    const s = server;
    if (s === null) throw new Error('stop before start');
    s.closeAllConnections();
    await new Promise<void>((resolve, reject) => s.close((e) => (e ? reject(e) : resolve())));
    return {};
  },
});
