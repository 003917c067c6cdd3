/**
 * The cluster's processes as /proc shows them: the primary and its children by process title
 * (ringserve-engine, ringserve-api-<k>), with their resident memory and its parts: private
 * (anonymous) pages, file pages (code, mapped files), and shared-memory pages, which are the pages
 * of the shared region (rings, arenas) this process has touched so far. Read once per sample.
 */
import { readdir, readFile } from 'node:fs/promises';

export interface ProcessInfo {
  pid: number;
  title: string;
  rssBytes: number;
  /** VmRSS's parts: RssAnon, RssFile, RssShmem. */
  anonBytes: number;
  fileBytes: number;
  shmemBytes: number;
  /** 'T' when stopped (SIGSTOP). */
  state: string;
}

type Memory = Pick<ProcessInfo, 'rssBytes' | 'anonBytes' | 'fileBytes' | 'shmemBytes'>;

async function read(
  pid: number,
): Promise<({ ppid: number; state: string; title: string } & Memory) | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (stat === null) return null;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const kb = (field: string) =>
    1024 * Number(new RegExp(`${field}:\\s+(\\d+)`).exec(status)?.[1] ?? 0);
  return {
    ppid: Number(fields[1]),
    state: fields[0] ?? '?',
    title: cmdline.split('\0')[0] ?? '',
    rssBytes: kb('VmRSS'),
    anonBytes: kb('RssAnon'),
    fileBytes: kb('RssFile'),
    shmemBytes: kb('RssShmem'),
  };
}

/** RSS and the parts of it the soak tells apart (at rest, under load). */
export type MemoryParts = Pick<ProcessInfo, 'rssBytes' | 'anonBytes' | 'shmemBytes'>;

/** A process incarnation's key in the soak's samples: `title#pid` (a restart is a new key). */
export function processKey(p: Pick<ProcessInfo, 'title' | 'pid'>): string {
  return `${p.title}#${p.pid}`;
}

/** The primary and its direct children. */
export async function clusterProcesses(primaryPid: number): Promise<ProcessInfo[]> {
  const out: ProcessInfo[] = [];
  const primary = await read(primaryPid);
  if (primary !== null) out.push({ ...primary, pid: primaryPid, title: 'ringserve-primary' });
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid !== primaryPid) continue;
    const info = await read(Number(entry));
    if (info?.title.startsWith('ringserve-')) out.push({ ...info, pid: Number(entry) });
  }
  return out;
}
