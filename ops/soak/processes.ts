/**
 * The cluster's processes as /proc shows them: the primary and its children by process title
 * (ringserve-engine, ringserve-api-<k>), with their resident memory. Read once per sample.
 */
import { readdir, readFile } from 'node:fs/promises';

export interface ProcessInfo {
  pid: number;
  title: string;
  rssBytes: number;
  /** 'T' when stopped (SIGSTOP). */
  state: string;
}

async function read(
  pid: number,
): Promise<{ ppid: number; state: string; title: string; rss: number } | null> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
  if (stat === null) return null;
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '');
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return {
    ppid: Number(fields[1]),
    state: fields[0] ?? '?',
    title: cmdline.split('\0')[0] ?? '',
    rss: rssKb * 1024,
  };
}

/** The primary and its direct children. */
export async function clusterProcesses(primaryPid: number): Promise<ProcessInfo[]> {
  const out: ProcessInfo[] = [];
  const primary = await read(primaryPid);
  if (primary !== null)
    out.push({
      pid: primaryPid,
      title: 'ringserve-primary',
      rssBytes: primary.rss,
      state: primary.state,
    });
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid !== primaryPid) continue;
    const info = await read(Number(entry));
    if (info?.title.startsWith('ringserve-')) {
      out.push({ pid: Number(entry), title: info.title, rssBytes: info.rss, state: info.state });
    }
  }
  return out;
}
