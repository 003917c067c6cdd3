/**
 * CPU time of processes from /proc (Linux): user + system of every thread, in milliseconds, at
 * USER_HZ (1/100 s) resolution, so it is read over windows of seconds. Benchmarks take two
 * readings around a window and divide the difference by the work done in it.
 */
import { readdirSync, readFileSync } from 'node:fs';
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

/**
 * CPU ms of a process and all its descendants (every thread of each), summed by process name
 * (`comm`, at most 15 characters: `ringserve-api-0`, `ringserve-engin`). Processes that exit
 * between the readings are missing from the later one; compare readings of a steady cluster.
 */
export function treeCpuMs(rootPid: number): Map<string, number> {
  const parentOf = new Map<number, number>();
  const nameOf = new Map<number, string>();
  for (const entry of readdirSync('/proc')) {
    const pid = Number(entry);
    if (!Number.isInteger(pid)) continue;
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      nameOf.set(pid, stat.slice(stat.indexOf('(') + 1, close));
      parentOf.set(pid, Number(stat.slice(close + 2).split(' ')[1]));
    } catch {
      // Gone since the listing.
    }
  }
  const inTree = (pid: number): boolean => {
    for (let p = pid, hops = 0; p > 1 && hops < 64; hops++) {
      if (p === rootPid) return true;
      p = parentOf.get(p) ?? 0;
    }
    return false;
  };
  const out = new Map<string, number>();
  for (const [pid, name] of nameOf) {
    if (!inTree(pid)) continue;
    const ms = processCpuMs(pid);
    if (Number.isFinite(ms)) out.set(name, (out.get(name) ?? 0) + ms);
  }
  return out;
}

/** The machine's CPU time from /proc/stat's first line, in ticks: all of it, and idle + iowait. */
export function machineTicks(): { total: number; idle: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1);
  const ticks = fields.map(Number);
  return { total: ticks.reduce((a, b) => a + b, 0), idle: ticks[3]! + (ticks[4] ?? 0) };
}
