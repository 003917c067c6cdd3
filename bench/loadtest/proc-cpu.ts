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

/** A `/proc/.../stat` text's name (`comm`) and the fields after it (field 3 on, from index 0). */
function parseStat(text: string): { comm: string; fields: string[] } {
  const close = text.lastIndexOf(')');
  return {
    comm: text.slice(text.indexOf('(') + 1, close),
    fields: text.slice(close + 2).split(' '),
  };
}

/** user + system CPU in a stat text's fields, ms. */
const cpuMsOfFields = (fields: string[]): number =>
  (Number(fields[11]) + Number(fields[12])) * TICK_MS;

/** user + system CPU of a process (`/proc/<pid>/stat`) or a thread (`/proc/<pid>/task/<tid>/stat`), ms. */
export function cpuMsOf(statPath: string): number {
  return cpuMsOfFields(parseStat(readFileSync(statPath, 'utf8')).fields);
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
 * CPU ms of a process and its children (every thread of each), summed by process name (`comm`, at
 * most 15 characters: `ringserve-api-0`, `ringserve-engin`): a cluster's primary forks every other
 * process of it, as the bare route's primary forks its workers. One read of each process's stat.
 * Processes that exit between two readings are missing from the later one; compare readings of a
 * steady cluster.
 */
export function familyCpuMs(rootPid: number): Map<string, number> {
  const out = new Map<string, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
    } catch {
      continue; // gone since the listing
    }
    const { comm, fields } = parseStat(stat);
    if (Number(entry) !== rootPid && Number(fields[1]) !== rootPid) continue;
    out.set(comm, (out.get(comm) ?? 0) + cpuMsOfFields(fields));
  }
  return out;
}

/** The machine's CPU time from /proc/stat's first line, in ticks: all of it, and idle + iowait. */
export function machineTicks(): { total: number; idle: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1);
  const ticks = fields.map(Number);
  return { total: ticks.reduce((a, b) => a + b, 0), idle: ticks[3]! + (ticks[4] ?? 0) };
}
