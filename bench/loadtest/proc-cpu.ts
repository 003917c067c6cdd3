/**
 * CPU time of processes from /proc (Linux): user + system of every thread, in milliseconds, at
 * USER_HZ (1/100 s) resolution, so it is read over windows of seconds. Benchmarks take two
 * readings around a window and divide the difference by the work done in it.
 */
import { readFileSync } from 'node:fs';
import type { Region } from '../../src/shm/region.js';
import { enginePid, serverPid } from '../../src/shm/words.js';

/** Linux's USER_HZ: /proc/<pid>/stat counts CPU in 1/100 s. */
const TICK_MS = 10;

/** user + system CPU of a process (`/proc/<pid>/stat`) or a thread (`/proc/<pid>/task/<tid>/stat`), ms. */
export function cpuMsOf(statPath: string): number {
  const fields = readFileSync(statPath, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) * TICK_MS;
}

/** A process's CPU ms, or NaN once it is gone. */
export function processCpuMs(pid: number): number {
  try {
    return cpuMsOf(`/proc/${pid}/stat`);
  } catch {
    return Number.NaN;
  }
}

/** The engine-core process and each API server of a cluster's region, by role. */
export function clusterPids(region: Region): { engine: number; apiServers: number[] } {
  const apiServers: number[] = [];
  for (let k = 0; k < region.params.apiServerCount; k++) {
    apiServers.push(serverPid(region.i32, region.params, k));
  }
  return { engine: enginePid(region.i32), apiServers };
}
