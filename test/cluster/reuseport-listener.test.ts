/**
 * --listener reuseport (issue 35): each API server listens on the port itself with SO_REUSEPORT
 * and the kernel spreads the connections; the primary listens only while no API server does (at
 * start, while every one is dead, through a drain's grace). Who listens is read from /proc (the
 * LISTEN sockets on the port and the processes holding them), which servers served from their
 * request counters in the region: nothing here depends on timing. On a Node without reusePort
 * (< 22.12, 23.0) the mode is a config error, tested there.
 */
import { execFile } from 'node:child_process';
import { readdir, readFile, readlink } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { generate } from '../../src/client/index.js';
import { reusePortSupported } from '../../src/cluster/listener.js';
import { buildConfig, nodeHasReusePort } from '../../src/config.js';
import { RM_PROMPT_TOKENS, requestMetricsIndex, STAT_RUNNING } from '../../src/shm/layout.js';
import { until } from '../until.js';
import { genBody, generateOnNewConnection, type Outcome } from './control-helpers.js';
import { type Cluster, startCluster } from './harness.js';

const REUSEPORT = ['--listener', 'reuseport'];
const CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));

/** A request on a new connection: status and Retry-After, or the connection error's code. */
function postOnNewConnection(
  port: number,
  body: string,
): Promise<{ status: number; retryAfter: string | null } | { error: string }> {
  return new Promise((resolve) => {
    let received = '';
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(
        `POST /inference/v1/generate HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n` +
          `content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
    });
    let error = 'closed';
    socket.on('data', (chunk) => {
      received += String(chunk);
    });
    socket.on('error', (e: NodeJS.ErrnoException) => {
      error = e.code ?? e.message;
    });
    socket.on('close', () => {
      const status = /^HTTP\/1\.1 (\d{3})/.exec(received);
      if (status === null) return resolve({ error });
      const retryAfter = /\r\nretry-after: *([^\r]*)\r\n/i.exec(received);
      resolve({ status: Number(status[1]), retryAfter: retryAfter?.[1] ?? null });
    });
  });
}

/** The pids of the processes holding a LISTEN socket on 127.0.0.1:`port`, among `pids`. */
async function listenersOf(port: number, pids: readonly number[]): Promise<number[]> {
  const table = await readFile('/proc/net/tcp', 'utf8');
  const inodes = new Set<string>();
  for (const line of table.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    // local_address is ADDR:PORT in hex; st 0A is LISTEN; the inode is field 9.
    if (f.length < 10 || f[3] !== '0A') continue;
    if (Number.parseInt(f[1]!.split(':')[1]!, 16) === port) inodes.add(f[9]!);
  }
  const out: number[] = [];
  for (const pid of pids) {
    const dir = `/proc/${pid}/fd`;
    const fds = await readdir(dir).catch(() => [] as string[]);
    for (const fd of fds) {
      const link = await readlink(join(dir, fd)).catch(() => '');
      const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
      if (inode !== undefined && inodes.has(inode)) {
        out.push(pid);
        break;
      }
    }
  }
  return out.sort((a, b) => a - b);
}

/** The cluster's primary and its API servers by title. */
async function processes(cluster: Cluster): Promise<{ primary: number; api: Map<string, number> }> {
  const api = new Map(
    [...(await cluster.pids())].filter(([title]) => title.startsWith('ringserve-api-')),
  );
  return { primary: cluster.process.pid!, api };
}

/** Who listens on the cluster's port: `primary` and/or `ringserve-api-<k>` titles, sorted. */
async function whoListens(cluster: Cluster): Promise<string[]> {
  const { primary, api } = await processes(cluster);
  const pids = await listenersOf(cluster.port, [primary, ...api.values()]);
  const title = new Map([[primary, 'primary'], ...[...api].map(([t, p]) => [p, t] as const)]);
  return pids.map((p) => title.get(p)!).sort();
}

/** Prompt tokens API server k has counted (its request metrics in the region). */
function promptTokensOf(cluster: Cluster, server: number): number {
  const region = cluster.region();
  return region.f64[requestMetricsIndex(region.params, server) + RM_PROMPT_TOKENS]!;
}

const exited = (child: { exitCode: number | null; signalCode: string | null }): boolean =>
  child.exitCode !== null || child.signalCode !== null;

describe('reusePortSupported', () => {
  it('holds from Node 22.12 and 23.1 on, on Linux, and the config and its default agree', () => {
    const cases: [string, boolean][] = [
      ['20.19.0', false],
      ['22.11.0', false],
      ['22.12.0', true],
      ['23.0.0', false],
      ['23.1.0', true],
      ['24.0.0', true],
    ];
    for (const [version, ok] of cases) expect(nodeHasReusePort(version, 'linux'), version).toBe(ok);
    expect(nodeHasReusePort('24.0.0', 'darwin')).toBe(false);
    expect(reusePortSupported()).toBe(nodeHasReusePort());
    // The default follows the Node: reuseport where it can run, the primary's hand-off elsewhere.
    expect(buildConfig().listener).toBe(reusePortSupported() ? 'reuseport' : 'primary');
    expect(buildConfig({ listener: 'primary' }).listener).toBe('primary');
    if (reusePortSupported())
      expect(buildConfig({ listener: 'reuseport' }).listener).toBe('reuseport');
    else expect(() => buildConfig({ listener: 'reuseport' })).toThrow(/--listener.*Node >= 22\.12/);
  });
});

describe.skipIf(reusePortSupported())('--listener reuseport without reusePort', () => {
  it('is a config error naming --listener and the Node it needs', async () => {
    const { code, stderr } = await new Promise<{ code: number | null; stderr: string }>(
      (resolve) => {
        const child = execFile(
          process.execPath,
          [CLI, 'serve', '--port', '0', '--listener', 'reuseport'],
          { timeout: 20_000, killSignal: 'SIGTERM' },
          (_error, _stdout, stderr) => resolve({ code: child.exitCode, stderr }),
        );
      },
    );
    expect(code).toBe(2);
    expect(stderr).toContain('RS_ERR_CONFIG_INVALID: --listener: reuseport needs Node >= 22.12');
  });
});

describe.skipIf(!reusePortSupported())('--listener reuseport', () => {
  it('by default on this Node each API server listens on the port itself, the primary not, and the kernel spreads connections over both', async () => {
    // No --listener: where Node has reusePort it is the default, and the start says so.
    const cluster = await startCluster([
      '--api-server-count',
      '2',
      '--max-speed',
      '--log-level',
      'info',
    ]);
    expect(await whoListens(cluster)).toEqual(['ringserve-api-0', 'ringserve-api-1']);
    expect(cluster.log()).toMatch(/"listener":"reuseport"[^\n]*"msg":"listening"/);
    const before = [promptTokensOf(cluster, 0), promptTokensOf(cluster, 1)];
    // 40 connections from 40 source ports: the kernel's hash sends all to one listener with
    // probability 2^-39.
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => generateOnNewConnection(cluster.port, i)),
    );
    expect(answers).toEqual(Array(40).fill(200));
    await until(
      () => [promptTokensOf(cluster, 0) - before[0]!, promptTokensOf(cluster, 1) - before[1]!],
      ([a, b]) => a! > 0 && b! > 0 && a! + b! === 40 * 8,
      { what: 'both API servers to have served (prompt tokens counted by each)' },
    );
  }, 90_000);

  it('an API server SIGKILLed under load: only connections it held fail, it is restarted and serves again', async () => {
    const cluster = await startCluster([...REUSEPORT, '--api-server-count', '2', '--max-speed']);
    const victim = (await cluster.pids()).get('ringserve-api-1')!;
    const concurrency = 8;
    const results: { outcome: Outcome; startedAt: number }[] = [];
    let stop = false;
    let seed = 0;
    const loop = async (): Promise<void> => {
      while (!stop) {
        const startedAt = performance.now();
        const outcome = await generateOnNewConnection(cluster.port, seed++);
        results.push({ outcome, startedAt });
      }
    };
    const loops = Array.from({ length: concurrency }, loop);
    let restartedAt = Number.POSITIVE_INFINITY;
    try {
      await until(
        () => results.length,
        (n) => n >= 40,
        { timeoutMs: 30_000, what: '40 answers before the kill' },
      );
      process.kill(victim, 'SIGKILL');
      // Restarted: a new ringserve-api-1 listening on the port again, beside ringserve-api-0.
      await until(
        async () => {
          const replaced = (await cluster.pids()).get('ringserve-api-1');
          return replaced !== undefined && replaced !== victim ? await whoListens(cluster) : [];
        },
        (who) => who.join() === 'ringserve-api-0,ringserve-api-1',
        { timeoutMs: 30_000, what: 'the restarted API server 1 to listen on the port' },
      );
      restartedAt = performance.now();
      const seen = results.length;
      await until(
        () => results.length - seen,
        (n) => n >= 40,
        { timeoutMs: 30_000, what: '40 answers after the restart' },
      );
    } finally {
      stop = true;
      await Promise.all(loops);
    }
    const outcomes = results.map((r) => r.outcome);
    const failed = outcomes.filter((o) => o !== 200);
    // Reset (in its accept queue or accepted) with the dead server: at most one connection per
    // loop at the kill and one it may have opened before the kernel dropped the dead listener.
    expect(
      failed.every((o) => o === 'closed'),
      `outcomes other than 200: ${failed}`,
    ).toBe(true);
    expect(failed.length).toBeLessThanOrEqual(2 * concurrency);
    expect(results.filter((r) => r.startedAt > restartedAt).map((r) => r.outcome)).toEqual(
      Array(results.filter((r) => r.startedAt > restartedAt).length).fill(200),
    );
    // The restarted server serves: its counters (carried over from its predecessor) grow.
    const before = promptTokensOf(cluster, 1);
    const answers = await Promise.all(
      Array.from({ length: 40 }, (_, i) => generateOnNewConnection(cluster.port, 1000 + i)),
    );
    expect(answers).toEqual(Array(40).fill(200));
    await until(
      () => promptTokensOf(cluster, 1),
      (n) => n > before,
      { what: 'the restarted API server 1 to serve' },
    );
  }, 120_000);

  it('while its only API server restarts, the primary listens and answers new connections once it is back', async () => {
    const cluster = await startCluster([...REUSEPORT, '--max-speed']);
    const victim = (await cluster.pids()).get('ringserve-api-0')!;
    expect(await whoListens(cluster)).toEqual(['ringserve-api-0']);
    process.kill(victim, 'SIGKILL');
    await until(
      () => whoListens(cluster),
      (who) => who.join() === 'primary',
      { what: 'the primary to listen while no API server does' },
    );
    // Connections during the restart: queued in the primary, handed to the new server.
    const answers = await Promise.all(
      Array.from({ length: 4 }, (_, i) => generateOnNewConnection(cluster.port, i, 40_000)),
    );
    expect(answers).toEqual([200, 200, 200, 200]);
    // And the primary leaves the port to the restarted server.
    await until(
      () => whoListens(cluster),
      (who) => who.join() === 'ringserve-api-0',
      { what: 'the restarted API server alone to listen' },
    );
    expect((await cluster.pids()).get('ringserve-api-0')).not.toBe(victim);
    expect((await generate(cluster.url, genBody(4, 9))).choices[0]!.tokenIds.length).toBe(4);
  }, 90_000);

  it('drain: the API servers leave the port to the primary, which answers 503 with Retry-After through the grace while requests in flight complete, then closes', async () => {
    // Real-time engine (~10 ms a token): 400 tokens run for seconds, far past the probes below.
    const cluster = await startCluster([
      ...REUSEPORT,
      '--api-server-count',
      '2',
      '--drain-grace-s',
      '8',
    ]);
    const body = JSON.stringify({ token_ids: [1, 2, 3], sampling_params: { max_tokens: 2 } });
    expect(await postOnNewConnection(cluster.port, body)).toEqual({
      status: 200,
      retryAfter: null,
    });
    let settled = false;
    const pending = generate(cluster.url, genBody(400, 1)).finally(() => {
      settled = true;
    });
    await until(
      () => cluster.engineStat(STAT_RUNNING),
      (n) => n === 1,
    );
    cluster.process.kill('SIGTERM');
    // The primary joins the port, then each API server closes its own listener (and drains).
    await until(
      () => whoListens(cluster),
      (who) => who.join() === 'primary',
      { what: 'the primary alone to listen once the drain began' },
    );
    expect(settled).toBe(false);
    expect(await postOnNewConnection(cluster.port, body)).toEqual({ status: 503, retryAfter: '8' });
    // The request in flight completes.
    expect((await pending).choices[0]!.tokenIds.length).toBe(400);
    await until(
      async () => [...(await cluster.pids()).keys()].filter((t) => t.startsWith('ringserve-api')),
      (titles) => titles.length === 0,
      { what: 'the API servers to exit' },
    );
    expect(exited(cluster.process)).toBe(false);
    expect(await postOnNewConnection(cluster.port, body)).toEqual({ status: 503, retryAfter: '8' });
    await until(
      () => exited(cluster.process),
      (done) => done,
      { timeoutMs: 20_000, what: 'the primary to exit after the grace' },
    );
    expect(await postOnNewConnection(cluster.port, body)).toEqual({ error: 'ECONNREFUSED' });
  }, 90_000);
});
