/**
 * The cluster's processes as /proc shows them: the primary and its children by process title
 * (ringserve-engine, ringserve-api-<k>), with their resident memory and its parts: private
 * (anonymous) pages, file pages (code, mapped files), and shared-memory pages, which are the pages
 * of the shared region (rings, arenas) this process has touched so far. Read once per sample.
 */
import { readdir, readFile, readlink } from 'node:fs/promises';

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

/** The pid in a processKey. */
export function pidOf(key: string): number {
  return Number(key.slice(key.lastIndexOf('#') + 1));
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

/** One mapping of a process with private pages: where it is, how big, what is written in it. */
export interface Mapping {
  /** Its start address, hex as /proc shows it (the key two readings are matched by). */
  start: string;
  sizeBytes: number;
  /** Anonymous (private, written) bytes resident in it. */
  anonBytes: number;
  /** The path or pseudo-path (`[heap]`, `[stack]`), '' for anonymous memory. */
  name: string;
}

/**
 * How many sockets a process has open (its fds that are sockets: an API server's client
 * connections, and a few of its own), or null once it is gone. Memory an API server holds per
 * connection (Node's HTTP parser, kept for reuse when the connection closes, and the socket's
 * state) follows the connections, and in a soak with faults they move to the server that was not
 * killed.
 */
export async function openSockets(pid: number): Promise<number | null> {
  const fds = await readdir(`/proc/${pid}/fd`).catch(() => null);
  if (fds === null) return null;
  const links = await Promise.all(
    fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => '')),
  );
  return links.filter((l) => l.startsWith('socket:')).length;
}

/**
 * The process's mappings holding anonymous memory, from /proc/<pid>/smaps: a glibc thread arena,
 * a large malloc (its own mapping), V8's pages, a thread's stack. Empty if the process is gone.
 */
export async function readMappings(pid: number): Promise<Mapping[]> {
  const smaps = await readFile(`/proc/${pid}/smaps`, 'utf8').catch(() => '');
  const out: Mapping[] = [];
  let current: Mapping | null = null;
  for (const line of smaps.split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \d+\s*(.*)$/.exec(line);
    if (head !== null) {
      if (current !== null && current.anonBytes > 0) out.push(current);
      const size = Number.parseInt(head[2]!, 16) - Number.parseInt(head[1]!, 16);
      current = { start: head[1]!, sizeBytes: size, anonBytes: 0, name: head[3] ?? '' };
      continue;
    }
    const anon = /^Anonymous:\s+(\d+) kB/.exec(line);
    if (anon !== null && current !== null) current.anonBytes = 1024 * Number(anon[1]);
  }
  if (current !== null && current.anonBytes > 0) out.push(current);
  return out;
}

/**
 * Where a process's anonymous memory grew between two readings: each mapping that is new, gone or
 * changed by >= `minBytes`, largest change first ("+4.2 MB in a new 8.0 MiB mapping anon at
 * 7f12..."; sizes in MiB, changes in MB), then the sum of the smaller changes, with the three
 * mapping sizes that changed most ("the rest: +3.1 MB over 40 mappings, 12 new, 3 gone, by
 * mapping size: 256 KiB x 30 +2.9 MB, ..."), which is where diffuse growth (V8's pages) shows.
 */
export function mappingChanges(
  before: readonly Mapping[],
  after: readonly Mapping[],
  minBytes = 1024 * 1024,
): string[] {
  const was = new Map(before.map((m) => [m.start, m]));
  const is = new Map(after.map((m) => [m.start, m]));
  const changes: [number, string][] = [];
  const rest = { bytes: 0, mappings: 0, born: 0, gone: 0 };
  const mib = (b: number) => (b / 1048576).toFixed(1);
  const kib = (b: number) => Math.round(b / 1024);
  const mb = (b: number) => `${b >= 0 ? '+' : ''}${(b / 1e6).toFixed(1)} MB`;
  const what = (m: Mapping) => `${mib(m.sizeBytes)} MiB mapping ${m.name || 'anon'} at ${m.start}`;
  /** The smaller changes by mapping size: [mappings, bytes] (V8's pages are 256 KiB each). */
  const bySize = new Map<number, [number, number]>();
  const small = (m: Mapping, delta: number, born: boolean, gone: boolean) => {
    rest.bytes += delta;
    rest.mappings++;
    const entry = bySize.get(m.sizeBytes) ?? [0, 0];
    entry[0]++;
    entry[1] += delta;
    bySize.set(m.sizeBytes, entry);
    if (born) rest.born++;
    if (gone) rest.gone++;
  };
  for (const m of after) {
    const old = was.get(m.start);
    const delta = m.anonBytes - (old?.anonBytes ?? 0);
    if (delta === 0) continue;
    if (Math.abs(delta) < minBytes) small(m, delta, old === undefined, false);
    else
      changes.push([delta, `${mb(delta)} in ${old === undefined ? 'a new ' : 'the '}${what(m)}`]);
  }
  for (const m of before) {
    if (is.has(m.start)) continue;
    if (m.anonBytes < minBytes) small(m, -m.anonBytes, false, true);
    else changes.push([-m.anonBytes, `${mb(-m.anonBytes)}: the ${what(m)} is gone`]);
  }
  const out = changes.sort((a, b) => Math.abs(b[0]) - Math.abs(a[0])).map(([, text]) => text);
  if (rest.mappings > 0) {
    out.push(
      `the rest: ${mb(rest.bytes)} over ${rest.mappings} mappings, ${rest.born} new, ${rest.gone} gone` +
        `, by mapping size: ${[...bySize]
          .sort((a, b) => Math.abs(b[1][1]) - Math.abs(a[1][1]))
          .slice(0, 3)
          .map(([size, [n, bytes]]) => `${kib(size)} KiB x ${n} ${mb(bytes)}`)
          .join(', ')}`,
    );
  }
  return out;
}
