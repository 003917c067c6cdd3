// What a churning request table costs the garbage collector: `npm run bench:churn-map` (add
// `-- --json` for a last line of JSON, `-- --seconds S` for the length of each run,
// `-- --in-flight 64,300` for the table sizes).
//
// Each run is a child process under `--trace-gc-nvp` that plays a request table at a steady number
// of requests in flight: every request is a small object graph (~4 KB) entered into a long-lived
// table under a fresh id and removed once as many newer ones are in. The table is a JS Map in one run
// and a ChurnMap (src/wire/churn-map.ts) in the other; a third run keeps no table, as the floor.
// From V8's trace lines of the child's main isolate: the bytes allocated and promoted to the old
// generation, and the scavenges' count and pauses.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { exitCodeFor, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { ChurnMap } from '../src/wire/churn-map.js';
import { percentile } from './loadtest/stats.js';

type Table = 'map' | 'churn-map' | 'none';
const TABLES: Table[] = ['none', 'map', 'churn-map'];

interface Row {
  table: Table;
  inFlight: number;
  requests: number;
  allocatedMb: number;
  promotedMb: number;
  promotedShare: number;
  scavenges: number;
  scavengeP50Ms: number;
  scavengeMaxMs: number;
  fullGcs: number;
}

/** One request's objects: ~40 small records with a string and an array each. */
function requestGraph(id: number): object[] {
  const out: object[] = [];
  for (let i = 0; i < 40; i++)
    out.push({ id, i, name: `field-${i}`, values: [i, i + 1, i + 2, i + 3] });
  return out;
}

function play(table: Table, inFlight: number, seconds: number): number {
  const map = new Map<string, object[]>();
  const churn = new ChurnMap<string, object[]>();
  const ids: string[] = [];
  let next = 0;
  let done = 0;
  const end = Date.now() + seconds * 1000;
  while (Date.now() < end) {
    for (let k = 0; k < 256; k++) {
      const id = `req-${next}`;
      const graph = requestGraph(next++);
      if (table === 'map') map.set(id, graph);
      else if (table === 'churn-map') churn.set(id, graph);
      ids.push(id);
      if (ids.length > inFlight) {
        const old = ids.shift() as string;
        if (table === 'map') map.delete(old);
        else if (table === 'churn-map') churn.delete(old);
        done++;
      }
    }
  }
  return done;
}

/** Sums the trace lines of the isolate that allocated most (the child's main thread). */
function summarize(table: Table, inFlight: number, requests: number, trace: string): Row {
  const byIsolate = new Map<string, Record<string, string>[]>();
  for (const line of trace.split('\n')) {
    const m = /^\[(\d+:0x[0-9a-f]+)/.exec(line);
    if (m === null || !line.includes(' gc=')) continue;
    const fields: Record<string, string> = {};
    for (const [, k, v] of line.matchAll(/(\S+?)=(\S+)/g)) fields[k!] = v!;
    const list = byIsolate.get(m[1]!) ?? [];
    list.push(fields);
    byIsolate.set(m[1]!, list);
  }
  const sum = (rows: Record<string, string>[], f: string): number =>
    rows.reduce((a, r) => a + Number(r[f] ?? 0), 0);
  const rows =
    [...byIsolate.values()].sort((a, b) => sum(b, 'allocated') - sum(a, 'allocated'))[0] ?? [];
  const scavenges = rows.filter((r) => r.gc === 's').map((r) => Number(r.pause));
  const allocated = sum(rows, 'allocated');
  const promoted = sum(rows, 'promoted');
  return {
    table,
    inFlight,
    requests,
    allocatedMb: allocated / 1e6,
    promotedMb: promoted / 1e6,
    promotedShare: allocated === 0 ? 0 : promoted / allocated,
    scavenges: scavenges.length,
    scavengeP50Ms: percentile(scavenges, 50) ?? 0,
    scavengeMaxMs: percentile(scavenges, 100) ?? 0,
    fullGcs: rows.filter((r) => r.gc === 'mc').length,
  };
}

function runChild(table: Table, inFlight: number, seconds: number): Promise<Row> {
  const file = fileURLToPath(import.meta.url);
  return new Promise((resolve, reject) => {
    const child = spawn(
      process.execPath,
      ['--trace-gc-nvp', file, '--child', table, String(inFlight), String(seconds)],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => {
      out += chunk;
    });
    child.on('error', reject);
    child.on('exit', (code) => {
      const done = /^requests (\d+)$/m.exec(out);
      if (code !== 0 || done === null) reject(new Error(`the ${table} run exited with ${code}`));
      else resolve(summarize(table, inFlight, Number(done[1]), out));
    });
  });
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args[0] === '--child') {
    const done = play(args[1] as Table, Number(args[2]), Number(args[3]));
    process.stdout.write(`requests ${done}\n`);
    return;
  }
  let json = false;
  let seconds = 5;
  let inFlight = [64, 300];
  for (let i = 0; i < args.length; i++) {
    if (args[i] === '--json') json = true;
    else if (args[i] === '--seconds') {
      seconds = Number(args[++i]);
      if (!(seconds > 0)) throw new RS_ERR_CONFIG_INVALID('--seconds', 'a positive number');
    } else if (args[i] === '--in-flight') {
      inFlight = String(args[++i]).split(',').map(Number);
      if (!inFlight.every((n) => Number.isInteger(n) && n > 0)) {
        throw new RS_ERR_CONFIG_INVALID(
          '--in-flight',
          'a comma-separated list of positive integers',
        );
      }
    } else {
      throw new RS_ERR_CONFIG_INVALID(
        String(args[i]),
        'usage: [--json] [--seconds S] [--in-flight 64,300]',
      );
    }
  }
  const rows: Row[] = [];
  for (const n of inFlight)
    for (const table of TABLES) rows.push(await runChild(table, n, seconds));
  console.log(
    `# requests of ~4 KB in a long-lived table; ${seconds} s per run; Node ${process.version}\n`,
  );
  console.log(
    '| in flight | table | requests | allocated MB | promoted MB | promoted share | scavenges | p50 ms | max ms | full GCs |',
  );
  console.log('|--:|:--|--:|--:|--:|--:|--:|--:|--:|--:|');
  for (const r of rows) {
    console.log(
      `| ${r.inFlight} | ${r.table} | ${r.requests.toLocaleString('en-US')} | ${r.allocatedMb.toFixed(0)} | ${r.promotedMb.toFixed(1)} | ${(100 * r.promotedShare).toFixed(1)} % | ${r.scavenges} | ${r.scavengeP50Ms.toFixed(1)} | ${r.scavengeMaxMs.toFixed(1)} | ${r.fullGcs} |`,
    );
  }
  if (json) console.log(JSON.stringify({ seconds, inFlight, rows }));
}

main().catch((error: unknown) => {
  console.error(`bench:churn-map: ${error instanceof Error ? error.message : String(error)}`);
  process.exitCode = exitCodeFor(error);
});
