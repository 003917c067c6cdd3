/** The free-port helper of the headless DP tests. */
import { createServer } from 'node:net';

/**
 * A TCP port on 127.0.0.1 that was free a moment ago (listened on with port 0, then closed): for
 * what must be given a fixed port, such as a DP group's master port.
 */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}
