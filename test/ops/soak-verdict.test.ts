/**
 * Which /health probes the soak's verdict judges (ops/soak/verdict.ts): none that started in the
 * warm-up (--health-warmup), none overlapping a fault's window (injection to recovery + grace, or to
 * the end of the run for a fault never recovered); every other one, however slow. And the RSS
 * slopes: at rest between two idle checkpoints, under load without the quiet spell's samples; the
 * turns faults and pause cycles take with a quiet spell; options, the fault schedule, and when a
 * fault counts as recovered (ops/soak/faults.ts recoveredAt).
 */
import { once } from 'node:events';
import { type AddressInfo, connect, createServer, type Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  engineKillsUntil,
  engineRestS,
  type Fault,
  faultTargets,
  recoveredAt,
  WITNESS_TITLE,
} from '../../ops/soak/faults.js';
import type { ProbeSample } from '../../ops/soak/health-probe.js';
import {
  collectRecords,
  type IdleCheckpoint,
  mallocAtRest,
  mallocGrowth,
  Turns,
} from '../../ops/soak/idle-memory.js';
import { parseSoakOptions } from '../../ops/soak/options.js';
import {
  type Mapping,
  openSockets,
  type ProcessInfo,
  pidOf,
  processKey,
  readMappings,
} from '../../ops/soak/processes.js';
import {
  buildVerdict,
  idleGrowth,
  idleSlopes,
  judgedGrowth,
  judgedProbes,
  judgedSlopes,
  outsideSpells,
  type RssSeries,
  restPairs,
} from '../../ops/soak/verdict.js';

const probe = (atMs: number, latencyMs = 1, server = 0): ProbeSample => ({
  atMs,
  latencyMs,
  status: 200,
  server,
});
const fault = (injectedAtMs: number, recoveredAtMs: number | null): Fault => ({
  kind: 'kill-api',
  title: 'ringserve-api-0',
  injectedAtMs,
  recoveredAtMs,
});

describe('judgedProbes', () => {
  const window = { warmupEndMs: 10_000, graceMs: 2_000, endMs: 100_000 };

  it('leaves out the warm-up and nothing else when there is no fault', () => {
    const probes = [probe(0, 750), probe(9_999), probe(10_000), probe(50_000, 300)];
    expect(judgedProbes(probes, [], window).map((p) => p.atMs)).toEqual([10_000, 50_000]);
  });

  it('leaves out a fault window up to recovery + grace, and a probe still in flight at injection', () => {
    const probes = [
      probe(19_000, 500), // in flight when the fault is injected at 19.4 s
      probe(18_000, 10), // answered before it
      probe(25_000, 200),
      probe(32_000, 211), // within recovery (30 s) + grace (2 s)
      probe(32_001, 71), // after it: judged
    ];
    expect(judgedProbes(probes, [fault(19_400, 30_000)], window).map((p) => p.atMs)).toEqual([
      18_000, 32_001,
    ]);
  });

  it('leaves out the collections asked for at rest, and a probe in flight when one began', () => {
    const probes = [probe(40_000, 20), probe(49_990, 150), probe(55_000), probe(57_001)];
    expect(judgedProbes(probes, [], window, [[50_000, 57_000]]).map((p) => p.atMs)).toEqual([
      40_000, 57_001,
    ]);
  });

  it('a fault never recovered covers the rest of the run', () => {
    const probes = [probe(40_000), probe(60_000), probe(99_000)];
    expect(judgedProbes(probes, [fault(50_000, null)], window).map((p) => p.atMs)).toEqual([
      40_000,
    ]);
  });
});

describe('buildVerdict /health figures', () => {
  const counts = {
    sent: 3,
    completed: 3,
    failed: {},
    lost: 0,
    left: 0,
    slowReaders: 0,
    inFlight: 0,
    lostDetails: [],
  };
  const leaks = { slots: 0, blocks: 0 };
  const probes = (ms: number[]) => ms.map((m, i) => probe(i * 200, m));

  it('judges the cluster probes; the floor probes are reported beside them, a miss counting as slowest', () => {
    const health = probes([1, 2, 40]);
    const floor = [...probes([0.5, 0.7]), { atMs: 400, latencyMs: 3, status: 0, server: -1 }];
    const v = buildVerdict(counts, leaks, new Map(), health, [], floor);
    expect(v.health_p99_ms).toBe(40);
    expect(v.health_max_ms).toBe(40);
    expect(v.floor_health_p99_ms).toBe(Number.POSITIVE_INFINITY);
    const fine = buildVerdict(counts, leaks, new Map(), health, [], probes([0.5, 0.7, 9]));
    expect(fine.floor_health_p99_ms).toBe(9);
    expect(fine.floor_health_max_ms).toBe(9);
    const none = buildVerdict(counts, leaks, new Map(), health, []);
    expect(none.floor_health_p99_ms).toBeNull();
    expect(none.floor_health_max_ms).toBeNull();
  });
});

describe('RSS over the judged span', () => {
  const o = parseSoakOptions(['--warmup', '10', '--slope-window', '60']);
  const MB = 1048576;
  // 2 s samples for 100 s: private memory flat at 150 MB, shared-region pages growing 50 -> 99 MB.
  const series = (key: string, seconds: number): RssSeries => {
    const s: RssSeries = { key, startedAtMs: 0, points: [], parts: [] };
    for (let t = 0; t <= seconds; t += 2) {
      const shmem = (50 + t / 2) * MB;
      s.points.push([t * 1000, 150 * MB + shmem]);
      s.parts.push({ anonBytes: 150 * MB, shmemBytes: shmem });
    }
    return s;
  };

  it('judges only series with the slope window after warm-up, and says which part grew', () => {
    const all = [series('api-0#1', 100), series('api-1#2', 60)];
    expect([...judgedSlopes(all, o).keys()]).toEqual(['api-0#1']);
    expect(judgedGrowth(all, o)).toEqual([
      'api-0#1 RSS 205 -> 250 MB (private 150 -> 150, shared region 55 -> 100)',
    ]);
  });
});

describe('RSS at rest', () => {
  const MB = 1048576;
  const at = (
    atMs: number,
    entries: [string, number][],
    mappings = new Map<string, Mapping[]>(),
    sockets = new Map<string, number>(),
  ): IdleCheckpoint => ({
    atMs,
    collectSpan: [atMs - 7_000, atMs - 5_000],
    memory: new Map(
      entries.map(([k, mb]) => [
        k,
        { rssBytes: mb * MB, anonBytes: (mb - 48) * MB, shmemBytes: 48 * MB },
      ]),
    ),
    mappings,
    sockets,
  });

  it('judges what a process present at both checkpoints kept, in % of the first per hour', () => {
    // 30 minutes apart: +3 MB of 300 is 1 % in half an hour, 2 %/h; the engine was restarted between.
    const first = at(0, [
      ['api-0#1', 300],
      ['engine#2', 100],
    ]);
    const last = at(1_800_000, [
      ['api-0#1', 303],
      ['engine#9', 100],
    ]);
    const born = new Map([
      ['api-0#1', 0],
      ['engine#2', 0],
      ['engine#9', 60_000],
    ]);
    const pairs = restPairs([first, last], born, 0);
    const slopes = idleSlopes(pairs);
    expect([...slopes.keys()]).toEqual(['api-0#1']);
    expect(slopes.get('api-0#1')).toBeCloseTo(2, 6);
    expect(idleGrowth(pairs)).toEqual([
      'api-0#1 RSS 300.0 -> 303.0 MB (private 252.0 -> 255.0, shared region 48.0 -> 48.0)',
    ]);
  });

  it("says where a process's glibc heap went between its collections at rest, from the cluster log", () => {
    const first = at(680_000, [['ringserve-api-0#41', 173]]);
    const last = at(3_680_000, [['ringserve-api-0#41', 177]]);
    const record = (pid: number, timeMs: number, malloc: number[], arenas: number[][]) =>
      JSON.stringify({
        level: 30,
        time: timeMs,
        pid,
        name: 'ringserve-api',
        malloc_mb: malloc,
        malloc_arenas_mb: arenas,
        msg: 'memory collected',
      });
    const log = [
      'ringserve: serving tiny (tiny) on http://127.0.0.1:1 with 2 API server(s)',
      record(
        41,
        673_500,
        [40, 60],
        [
          [20, 30],
          [10, 15.5],
          [10, 14.5],
        ],
      ),
      record(42, 673_600, [1, 2], [[1, 2]]), // another process
      '{"msg":"memory collected", truncated',
      record(
        41,
        3_673_400,
        [44.2, 64.5],
        [
          [20.1, 30],
          [13.7, 19.8],
          [10.4, 14.7],
        ],
      ),
    ].join('\n');
    const records = collectRecords(log);
    expect(records.map((r) => r.pid)).toEqual([41, 42, 41]);
    expect(pidOf(processKey({ title: 'ringserve-api-0', pid: 41 }))).toBe(41);
    expect(mallocGrowth(41, first, last, records)).toBe(
      'malloc allocated 40.0 -> 44.2 MB, held 60.0 -> 64.5 MB, 3 arenas; ' +
        'arena 1 allocated 10.0 -> 13.7, held 15.5 -> 19.8',
    );
    // Arenas are compared by position only when both readings have as many.
    const grown = record(
      41,
      3_673_400,
      [44, 64],
      [
        [20, 30],
        [14, 20],
        [10, 14],
        [0, 0.1],
      ],
    );
    expect(mallocGrowth(41, first, last, collectRecords(`${log.split('\n')[1]}\n${grown}`))).toBe(
      'malloc allocated 40.0 -> 44.0 MB, held 60.0 -> 64.0 MB, 4 arenas',
    );
    // No record at a reading (the process logged none in its collection span): nothing to say.
    expect(mallocGrowth(42, first, last, records)).toBeNull();
  });

  it("lists glibc's allocated memory at every reading at rest from the first to the last, with its parts", () => {
    const start = 1_000_000;
    const checkpoints = [
      at(start + 300_000, [['ringserve-api-0#41', 170]]), // in its warm-up: before `first`
      at(start + 680_000, [['ringserve-api-0#41', 173]]),
      at(start + 2_480_000, [['ringserve-api-0#41', 175]]),
      at(start + 3_680_000, [['ringserve-api-0#41', 177]]),
    ];
    const line = (pid: number, c: IdleCheckpoint, allocated: number, parts: boolean) =>
      JSON.stringify({
        time: c.collectSpan[0] + 500,
        pid,
        malloc_mb: [allocated, allocated + 20],
        malloc_arenas_mb: [[allocated, allocated + 20]],
        ...(parts
          ? {
              main_array_buffers_mb: allocated / 10,
              main_v8_malloced_mb: 1.5,
              threads_array_buffers_mb: allocated / 20,
              threads_v8_malloced_mb: 0.8,
            }
          : {}),
        msg: 'memory collected',
      });
    const [warm, first, middle, last] = checkpoints as [
      IdleCheckpoint,
      IdleCheckpoint,
      IdleCheckpoint,
      IdleCheckpoint,
    ];
    const log = [
      line(41, warm, 40, true),
      line(41, first, 44.7, true),
      line(42, middle, 9, true), // another process
      line(41, middle, 45.9, true),
      line(41, last, 46.5, true),
    ].join('\n');
    // The line's parts, as each kind of log has them.
    const totals = 'malloc allocated 44.7, 45.9, 46.5 MB at 680, 2480, 3680 s';
    const mainParts =
      "of it the main isolate's array buffers 4.5, 4.6, 4.7, V8's own 1.5, 1.5, 1.5";
    const threadParts = "the other threads' array buffers 2.2, 2.3, 2.3, V8's own 0.8, 0.8, 0.8";
    expect(mallocAtRest(41, checkpoints, first, last, collectRecords(log), start)).toBe(
      `${totals}; ${mainParts}; ${threadParts}`,
    );
    // A log from before the other threads' parts were logged, and from before any part was.
    const noThreads = log.replace(
      /,"threads_array_buffers_mb":[\d.]+,"threads_v8_malloced_mb":[\d.]+/g,
      '',
    );
    expect(mallocAtRest(41, checkpoints, first, last, collectRecords(noThreads), start)).toBe(
      `${totals}; ${mainParts}`,
    );
    const older = noThreads.replace(
      /,"main_array_buffers_mb":[\d.]+,"main_v8_malloced_mb":[\d.]+/g,
      '',
    );
    expect(mallocAtRest(41, checkpoints, first, last, collectRecords(older), start)).toBe(totals);
    // With the process's open sockets at each reading (another process's are not its own).
    const withSockets = checkpoints.map((c, i) => ({
      ...c,
      sockets: new Map([
        ['ringserve-api-0#41', 150 + 60 * i],
        ['ringserve-api-1#42', 9],
      ]),
    }));
    expect(
      mallocAtRest(41, withSockets, withSockets[1]!, withSockets[3]!, collectRecords(log), start),
    ).toBe(`${totals}; ${mainParts}; ${threadParts}; open sockets 210, 270, 330`);
    // Two readings say no more than mallocGrowth does.
    expect(mallocAtRest(41, checkpoints, middle, last, collectRecords(log), start)).toBeNull();
    // A reading missing in between: fewer than three left.
    const gap = [line(41, first, 44.7, true), line(41, last, 46.5, true)].join('\n');
    expect(mallocAtRest(41, checkpoints, first, last, collectRecords(gap), start)).toBeNull();
  });

  it('pairs each process at rest at the end with its earliest reading at rest past its warm-up', () => {
    const warmup = 600_000;
    const checkpoints = [
      at(680_000, [
        ['api-0#1', 300],
        ['engine#2', 180],
      ]),
      at(2_480_000, [
        ['api-0#1', 300],
        ['engine#9', 180],
        ['api-1#5', 250], // born at 2,000 s: still in its warm-up
      ]),
      at(3_680_000, [
        ['api-0#1', 300],
        ['engine#9', 181.8],
        ['api-1#5', 260],
      ]),
    ];
    const born = new Map([
      ['api-0#1', 0],
      ['engine#2', 0],
      ['engine#9', 1_740_000],
      ['api-1#5', 2_000_000],
    ]);
    const pairs = restPairs(checkpoints, born, warmup);
    expect(pairs.map((p) => [p.key, p.first.atMs, p.last.atMs])).toEqual([
      ['api-0#1', 680_000, 3_680_000],
      ['engine#9', 2_480_000, 3_680_000],
    ]);
    // +1.8 MB of 180 in 1,200 s: 1 % in a third of an hour, 3 %/h.
    expect(idleSlopes(pairs).get('engine#9')).toBeCloseTo(3, 6);
    expect(restPairs(checkpoints.slice(2), born, warmup)).toEqual([]);
    expect(restPairs([], born, warmup)).toEqual([]);
  });

  it('says in which mappings the private memory kept at rest is', () => {
    const arena = (anonMb: number): Mapping => ({
      start: '7f0000000000',
      sizeBytes: 64 * MB,
      anonBytes: anonMb * 1e6,
      name: '',
    });
    const heap: Mapping = {
      start: '5555000000',
      sizeBytes: 4 * MB,
      anonBytes: 3e6,
      name: '[heap]',
    };
    const page = (start: string): Mapping => ({
      start,
      sizeBytes: MB / 4,
      anonBytes: MB / 4,
      name: '',
    });
    const big: Mapping = {
      start: '7f1000000000',
      sizeBytes: 8 * MB + 4096,
      anonBytes: 4.2e6,
      name: '',
    };
    const gone: Mapping = { start: '7f2000000000', sizeBytes: 2 * MB, anonBytes: 1.9e6, name: '' };
    const first = at(
      0,
      [['api-0#1', 300]],
      new Map([['api-0#1', [arena(6.6), heap, gone, page('7f3000000000')]]]),
    );
    const last = at(
      1_800_000,
      [['api-0#1', 310]],
      new Map([
        [
          'api-0#1',
          [
            arena(14.3),
            { ...heap, anonBytes: 3.5e6 },
            big,
            page('7f4000000000'),
            page('7f5000000000'),
          ],
        ],
      ]),
    );
    expect(idleGrowth(restPairs([first, last], new Map([['api-0#1', 0]]), 0))).toEqual([
      'api-0#1 RSS 300.0 -> 310.0 MB (private 252.0 -> 262.0, shared region 48.0 -> 48.0); ' +
        '+7.7 MB in the 64.0 MiB mapping anon at 7f0000000000; ' +
        '+4.2 MB in a new 8.0 MiB mapping anon at 7f1000000000; ' +
        '-1.9 MB: the 2.0 MiB mapping anon at 7f2000000000 is gone; ' +
        'the rest: +0.8 MB over 4 mappings, 2 new, 1 gone, by mapping size: 4096 KiB x 1 +0.5 MB, 256 KiB x 3 +0.3 MB',
    ]);
  });

  it('reads the mappings holding private memory from /proc', async () => {
    const held = Buffer.alloc(8 * MB, 1); // written: 8 MiB of anonymous memory in one mapping
    const mappings = await readMappings(process.pid);
    expect(mappings.length).toBeGreaterThan(0);
    for (const m of mappings) expect(m.anonBytes).toBeGreaterThan(0);
    expect(mappings.some((m) => m.sizeBytes >= held.length && m.anonBytes >= held.length)).toBe(
      true,
    );
    expect(await readMappings(2 ** 22 + 1)).toEqual([]); // no such process
  });

  it("counts a process's open sockets from /proc", async () => {
    const before = (await openSockets(process.pid))!;
    const server = createServer().listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const client = connect(port, '127.0.0.1');
    const [accepted] = (await once(server, 'connection')) as [Socket];
    try {
      // The listener, the client's end and the accepted end.
      expect(await openSockets(process.pid)).toBe(before + 3);
    } finally {
      client.destroy();
      accepted.destroy();
      server.close();
    }
    expect(await openSockets(2 ** 22 + 1)).toBeNull(); // no such process
  });

  it('leaves the samples of a quiet spell out of the slope under load', () => {
    // Flat at 200 MB under load, 120 MB at rest from 60 to 100 s: the spell would tilt the line.
    const s: RssSeries = { key: 'api-0#1', startedAtMs: 0, points: [], parts: [] };
    for (let t = 0; t <= 300; t += 2) {
      const mb = t >= 60 && t <= 100 ? 120 : 200;
      s.points.push([t * 1000, mb * MB]);
      s.parts.push({ anonBytes: mb * MB, shmemBytes: 0 });
    }
    const o = parseSoakOptions(['--warmup', '50', '--slope-window', '100']);
    expect(Math.abs(judgedSlopes([s], o).get('api-0#1')!)).toBeGreaterThan(10);
    const [kept] = outsideSpells([s], [[60_000, 100_000]]);
    expect(kept!.points.length).toBe(s.points.length - 21);
    expect(kept!.parts.length).toBe(kept!.points.length);
    expect(judgedSlopes([kept!], o).get('api-0#1')).toBeCloseTo(0, 6);
  });
});

describe('Turns', () => {
  it('a quiet spell waits for the action under way and holds the next until it ends', async () => {
    const turns = new Turns();
    const log: string[] = [];
    let finishFault!: () => void;
    const fault = turns.run(async () => {
      log.push('fault start');
      await new Promise<void>((r) => {
        finishFault = r;
      });
      log.push('fault end');
    });
    let next: Promise<unknown> | undefined;
    const spell = turns.quietly(async () => {
      log.push('quiet start');
      next = turns.run(async () => log.push('next fault'));
      await new Promise((r) => setTimeout(r, 20));
      log.push('quiet end');
    });
    await new Promise((r) => setTimeout(r, 10));
    expect(log).toEqual(['fault start']);
    finishFault();
    await Promise.all([fault, spell]);
    await next;
    expect(log).toEqual(['fault start', 'fault end', 'quiet start', 'quiet end', 'next fault']);
  });
});

describe('soak options', () => {
  it('takes a subset of fault kinds, in the order given, and refuses an unknown one naming the flag', () => {
    expect(parseSoakOptions([]).faultKinds).toEqual(['kill-api', 'kill-engine', 'stop-api']);
    expect(parseSoakOptions(['--faults', 'stop-api,kill-engine']).faultKinds).toEqual([
      'stop-api',
      'kill-engine',
    ]);
    expect(() => parseSoakOptions(['--faults', 'kill-api,reboot'])).toThrow(/--faults.*"reboot"/);
    expect(() => parseSoakOptions(['--faults', ''])).toThrow(/--faults/);
  });
});

describe('fault schedule', () => {
  const proc = (pid: number, title: string): ProcessInfo => ({
    pid,
    title,
    rssBytes: 0,
    anonBytes: 0,
    fileBytes: 0,
    shmemBytes: 0,
    state: 'S',
  });
  const procs = [
    proc(1, 'ringserve-engine'),
    proc(2, 'ringserve-api-0'),
    proc(3, 'ringserve-api-1'),
    proc(4, 'ringserve-api-2'),
  ];
  const titles = (ps: ProcessInfo[]) => ps.map((p) => p.title);

  it('SIGKILL spares the witness API server; SIGSTOP and the engine kill do not care', () => {
    const w = WITNESS_TITLE;
    expect(titles(faultTargets('kill-api', procs, w))).toEqual([
      'ringserve-api-1',
      'ringserve-api-2',
    ]);
    expect(titles(faultTargets('stop-api', procs, w))).toEqual([
      'ringserve-api-0',
      'ringserve-api-1',
      'ringserve-api-2',
    ]);
    expect(titles(faultTargets('kill-engine', procs, w))).toEqual(['ringserve-engine']);
    expect(titles(faultTargets('kill-api', procs.slice(0, 2), null))).toEqual(['ringserve-api-0']);
  });

  it('in a long run only, stops killing the engine a warm-up (+ margin) before its second quiet spell', () => {
    const o = { durationS: 3600, warmupS: 600, slopeWindowS: 600 };
    // The spell 2 x 600 s before the end; the last kill a warm-up and a restart before it.
    expect(engineRestS(o)).toBe(2400);
    expect(engineKillsUntil(o, 1_000_000, 60_000)).toBe(1_000_000 + 1_800_000 - 60_000);
    expect(engineRestS({ ...o, durationS: 2400 })).toBe(1200);
    expect(engineRestS({ ...o, durationS: 2399 })).toBeNull();
    expect(engineKillsUntil({ ...o, durationS: 2399 }, 0)).toBe(Number.POSITIVE_INFINITY);
    expect(engineKillsUntil({ ...o, durationS: 180, warmupS: 60 }, 0)).toBe(
      Number.POSITIVE_INFINITY,
    );
  });
});

describe('fault recovery', () => {
  // Probes every 200 ms from 1,000 ms, answered by API servers 0 and 1 as `servers` says.
  const answered = (servers: number[], latencyMs = 1) =>
    servers.map((server, i) => probe(1_000 + i * 200, latencyMs, server));

  it('needs five healthy probes in a row, all started since the process was back', () => {
    const ps = answered([0, 1, 0, 1, 0, 1]);
    expect(recoveredAt(ps, 1_000, 50, null)).toBe(1_200);
    expect(recoveredAt(ps, 1_300, 50, null)).toBeNull();
    expect(recoveredAt(ps.slice(0, 4), 1_000, 50, null)).toBeNull();
    const slow = [...ps.slice(0, 5), probe(2_200, 51, 1)];
    expect(recoveredAt(slow, 1_000, 50, null)).toBeNull();
    const failed = [...ps, { ...probe(2_200, 1, -1), status: 0 }];
    expect(recoveredAt(failed, 1_000, 50, null)).toBeNull();
  });

  it('an API server hit must itself have answered one of them: its siblings answering is not enough', () => {
    // Under reuseport the kernel may give every probe to the survivor for a while.
    const survivorOnly = answered([0, 0, 0, 0, 0, 0, 0]);
    expect(recoveredAt(survivorOnly, 1_000, 50, 1)).toBeNull();
    expect(recoveredAt(survivorOnly, 1_000, 50, 0)).toBe(1_400);
    // Its answer before it was back (the old process, or the probe that SIGSTOP held) does not count.
    const early = answered([1, 0, 0, 0, 0, 0, 0]);
    expect(recoveredAt(early, 1_100, 50, 1)).toBeNull();
    // Once it answers, the last five in a row date the recovery, wherever its answer fell.
    expect(recoveredAt([...survivorOnly, probe(2_400, 1, 1)], 1_000, 50, 1)).toBe(1_600);
    expect(recoveredAt(answered([0, 1, 0, 0, 0, 0, 0, 0]), 1_000, 50, 1)).toBe(1_600);
    // A slow answer from it is not one.
    const slowHit = [probe(1_000, 60, 1), ...answered([0, 0, 0, 0, 0, 0]).slice(1)];
    expect(recoveredAt(slowHit, 1_000, 50, 1)).toBeNull();
    expect(recoveredAt(slowHit, 1_000, 50, 0)).toBe(1_200);
  });
});
