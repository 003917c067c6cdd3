/**
 * HAProxy's admin socket (the `stats socket` of ops/lb/haproxy.cfg): the state of each server of a
 * backend as HAProxy's health checks see it. The socket is a file, so a process in any network
 * namespace can ask.
 */
import { connect } from 'node:net';

/** Sends one command and resolves with HAProxy's whole answer (it closes after answering). */
export function haproxyCommand(
  socketPath: string,
  command: string,
  timeoutMs = 2_000,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(socketPath);
    const chunks: Buffer[] = [];
    socket.setTimeout(timeoutMs, () => socket.destroy(new Error(`${command}: no answer`)));
    socket.on('connect', () => socket.end(`${command}\n`));
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    socket.on('error', reject);
    socket.on('close', () => resolve(Buffer.concat(chunks).toString('utf8')));
  });
}

/** Server name -> status (UP, DOWN, MAINT, "UP 1/2", "DOWN 1/3", NOLB, ...) of one backend. */
export async function serverStates(
  socketPath: string,
  backend: string,
): Promise<Map<string, string>> {
  const csv = await haproxyCommand(socketPath, 'show stat');
  const lines = csv.split('\n').filter((l) => l.length > 0);
  const header = (lines[0] ?? '').replace(/^# /, '').split(',');
  const px = header.indexOf('pxname');
  const sv = header.indexOf('svname');
  const status = header.indexOf('status');
  const states = new Map<string, string>();
  for (const line of lines.slice(1)) {
    const cells = line.split(',');
    if (cells[px] !== backend || cells[sv] === 'BACKEND') continue;
    states.set(cells[sv]!, cells[status]!);
  }
  return states;
}
