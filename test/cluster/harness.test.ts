/**
 * The harness's promise: a cluster test that fails still stops everything it started. The first
 * test starts a cluster and throws (it.fails: the throw is what it asserts); the next one finds
 * the primary, its children and its region gone.
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { describe, expect, it } from 'vitest';
import { processStart, regionExists, regionNameOf, startCluster } from './harness.js';

let left: { pids: number[]; region: string } | null = null;

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

describe('test/cluster/harness.ts', () => {
  it.fails('a test that throws with its cluster running (the throw is expected)', async () => {
    const cluster = await startCluster(['--model', 'tiny', '--max-speed']);
    const pids = [cluster.process.pid!, ...(await cluster.pids()).values()];
    left = { pids, region: regionNameOf(cluster.process.pid!) };
    expect(pids.every(alive)).toBe(true);
    throw new Error('this test fails on purpose, leaving its cluster to the harness');
  });

  it('stopped that cluster after the test: no process and no region left', () => {
    expect(left).not.toBeNull();
    expect(left!.pids.length).toBeGreaterThanOrEqual(3); // primary, engine, API server
    expect(left!.pids.filter(alive)).toEqual([]);
    expect(regionExists(left!.region)).toBe(false);
  });

  it('names a process by pid and start time, so a reused pid is not taken for it', async () => {
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60_000)']);
    await once(child, 'spawn');
    const start = await processStart(child.pid!);
    expect(start).toMatch(/^\d+$/);
    expect(await processStart(child.pid!)).toBe(start);
    // A process started later (this one started before the child) has a start time >= its own.
    expect(Number(await processStart(process.pid))).toBeLessThanOrEqual(Number(start));
    child.kill('SIGKILL');
    await once(child, 'exit');
    expect(await processStart(child.pid!)).toBeUndefined();
  });
});
