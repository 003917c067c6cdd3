import { fileURLToPath } from 'node:url';
import { BenchChild } from './child.js';
import type { FloorProgress } from './messages.js';

const FLOOR_SERVER = fileURLToPath(new URL('./floor-server.js', import.meta.url));
const START_TIMEOUT_MS = 15_000;

/**
 * Forks the floor server (floor-server.ts) and waits until it listens; the caller stops `child`.
 * If it does not start, it is stopped here and the error thrown.
 */
export async function startFloorServer(): Promise<{ child: BenchChild; url: string }> {
  const child = new BenchChild(FLOOR_SERVER, 'floor server');
  try {
    await child.next('ready', START_TIMEOUT_MS);
    const listening = child.next('progress', START_TIMEOUT_MS);
    child.send({ type: 'start', spec: {} });
    const { url } = (await listening).progress as FloorProgress;
    return { child, url };
  } catch (error) {
    await child.stop();
    throw error;
  }
}
