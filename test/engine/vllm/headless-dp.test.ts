/**
 * The headless engine's DP parts without an engine: the wave state machine (vLLM's
 * DPEngineCoreProc: START_DP_WAVE, the sync steps, the wave's end), the helpers the engine command
 * uses (which ranks wave, where the group forms, the READY hash), and the modelled DP group over
 * loopback TCP: it forms once every rank joined, each step meets every rank and takes the slowest
 * one's time, the sync steps follow dp_sync_interval, a rank that leaves lets the others go on, a
 * rank that joins mid-wave is told to run, a rank whose rank 0 restarts reconnects and carries
 * its waiting step over, close() settles a waiting step with null, and of two processes joined as
 * one rank the newer replaces the older, which leaves the group for good.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  type DpGroup,
  type DpStepResult,
  openDpGroup,
} from '../../../src/engine/vllm/headless/dp-group.js';
import {
  DEFAULT_DP_SYNC_INTERVAL,
  DpWaveState,
  dpGroupPort,
  dpModeOf,
  isSyncStep,
  modelKey,
  parallelConfigHash,
} from '../../../src/engine/vllm/headless/dp-wave.js';
import { getModelCard } from '../../../src/wire/model-card.js';
import { until } from '../../until.js';
import { freePort, RecordingLog as Log } from './headless-dp-helpers.js';

describe('the wave state machine', () => {
  it('START_DP_WAVE: runs unless excluded or stale; adopts a later wave', () => {
    const w = new DpWaveState(1);
    expect([w.currentWave, w.running]).toEqual([0, false]);
    expect(w.startWave(0, 1)).toBe(false); // excluded: the target starts on its own
    expect(w.running).toBe(false);
    expect(w.startWave(0, 0)).toBe(true);
    expect([w.currentWave, w.running]).toEqual([0, true]);
    expect(w.startWave(0, null)).toBe(false); // already running
    expect(w.startWave(3, null)).toBe(false); // adopts the wave, was running already
    expect(w.currentWave).toBe(3);
    expect(w.startWave(2, null)).toBe(false); // stale: ignored
    expect(w.currentWave).toBe(3);
  });

  it('sync steps: step 1 and every interval-th (#52957)', () => {
    expect(DEFAULT_DP_SYNC_INTERVAL).toBe(16);
    const steps = Array.from({ length: 40 }, (_, i) => i + 1).filter((s) => isSyncStep(s, 16));
    expect(steps).toEqual([1, 16, 32]);
    expect([1, 2, 3, 4].filter((s) => isSyncStep(s, 1))).toEqual([1, 2, 3, 4]);
  });

  it('a wave ends on a sync step that finds nothing unfinished: wave_complete, next wave', () => {
    const w = new DpWaveState(0);
    w.startWave(0, null);
    expect(w.afterStep(true, true)).toBeNull(); // step 1: still work somewhere
    expect(w.afterStep(false, false)).toBeNull(); // no sync: keeps running
    expect(w.running).toBe(true);
    expect(w.step).toBe(2);
    expect(w.afterStep(true, false)).toBe(0);
    expect([w.currentWave, w.running, w.step]).toEqual([1, false, 0]);
    // A START_DP_WAVE for the wave that just ended is stale now.
    expect(w.startWave(0, null)).toBe(false);
    expect(w.startWave(1, null)).toBe(true);
  });

  it('modes, the group port, the READY hash', () => {
    expect(dpModeOf(1, 3)).toBe('single');
    expect(dpModeOf(2, 3)).toBe('waves');
    expect(dpModeOf(2, 0)).toBe('independent');
    const pc = { masterIp: '10.0.0.1', masterPort: 29500, masterPortList: [1, 2, 3], size: 2 };
    expect(dpGroupPort(pc)).toBe(3); // vLLM pops the list's last port
    expect(dpGroupPort({ ...pc, masterPortList: [] })).toBe(29500);
    expect(modelKey(getModelCard('tiny'))).toMatch(/^tiny:\d+:\d+:\d+:\d+$/);
    const h = parallelConfigHash({ model: 'tiny', size: 2, syncInterval: 16, layout: '0.33' });
    expect(h).toMatch(/^[0-9a-f]{64}$/);
    expect(parallelConfigHash({ model: 'tiny', size: 2, syncInterval: 16, layout: '0.33' })).toBe(
      h,
    );
    expect(
      parallelConfigHash({ model: 'tiny', size: 4, syncInterval: 16, layout: '0.33' }),
    ).not.toBe(h);
    expect(
      parallelConfigHash({ model: 'tiny', size: 2, syncInterval: 8, layout: '0.33' }),
    ).not.toBe(h);
  });
});

// ---- the modelled DP group over loopback TCP --------------------------------------------------

/** Generous for a loaded 2-core CI machine: a wait that succeeds takes milliseconds. */
const WAIT = { timeoutMs: 30_000 };

const opened: DpGroup[] = [];

afterEach(() => {
  for (const g of opened.splice(0)) g.close();
});

/** Waits until `log` has a line `line`. */
function logged(log: Log, line: string): Promise<unknown> {
  return until(
    () => log.lines.includes(line),
    (x) => x,
    { ...WAIT, what: `the log line "${line}"` },
  );
}

/** Waits until rank 0's current round lacks exactly the reports of `ranks`. */
function waitsFor(hub: DpGroup, ranks: number[]): Promise<unknown> {
  return until(
    () => hub.waitingFor(),
    (w) => w?.join() === ranks.join(),
    { ...WAIT, what: `rank 0 waiting for the reports of ranks [${ranks.join()}]` },
  );
}

function open(
  rank: number,
  size: number,
  port: number,
  log = new Log(),
  syncInterval = 4,
): Promise<DpGroup> {
  const p = openDpGroup({
    rank,
    size,
    host: '127.0.0.1',
    port,
    syncInterval,
    log,
    initTimeoutMs: 30_000,
    retryMs: 20,
  });
  p.then(
    (g) => opened.push(g),
    () => {},
  );
  return p;
}

/** One step of every group given; their results, copied. */
async function stepAll(
  groups: DpGroup[],
  reports: [boolean, number][],
): Promise<(DpStepResult | null)[]> {
  const results = await Promise.all(groups.map((g, i) => g.step(...(reports[i] ?? [false, 0]))));
  return results.map((r) => (r === null ? null : { ...r }));
}

describe('the DP group', () => {
  it('forms once every rank joined; a step meets every rank and takes the slowest one', async () => {
    const port = await freePort();
    const log0 = new Log();
    let formed = false;
    const hub = open(0, 3, port, log0);
    void hub.then(() => {
      formed = true;
    });
    const one = open(1, 3, port);
    // Rank 1 joined and waits with rank 0 until rank 2 is there (vLLM's group init blocks all ranks).
    await logged(log0, 'DP group: a rank joined; the group forms once every rank has');
    expect(formed).toBe(false);
    const groups = await Promise.all([hub, one, open(2, 3, port)]);
    const r = await stepAll(groups, [
      [true, 5],
      [false, 12.5],
      [false, 1],
    ]);
    expect(r).toEqual(Array(3).fill({ anyUnfinished: true, sync: true, ms: 12.5 }));
    expect(groups.map((g) => g.waiting)).toEqual([false, false, false]);
    // Until every rank has reported, nobody's step is done: rank 0 holds two reports and waits for
    // rank 2's.
    let done = false;
    const waiting = groups[0]!.step(false, 0).then(() => {
      done = true;
    });
    const second = groups[1]!.step(false, 0);
    await waitsFor(groups[0]!, [2]);
    expect(done).toBe(false);
    expect([groups[0]!.waiting, groups[1]!.waiting, groups[2]!.waiting]).toEqual([
      true,
      true,
      false,
    ]);
    expect(groups[1]!.waitingFor()).toBeNull(); // only rank 0 knows
    await Promise.all([groups[2]!.step(false, 0), second, waiting]);
  });

  it('sync steps follow the interval; a sync with nothing unfinished ends the wave', async () => {
    const port = await freePort();
    const groups = await Promise.all([open(0, 2, port), open(1, 2, port)]);
    const syncs: boolean[] = [];
    for (let i = 0; i < 9; i++) {
      const [a] = await stepAll(groups, [
        [true, 0],
        [false, 0],
      ]);
      syncs.push(a!.sync);
    }
    // Steps 1..9 of a wave with interval 4: 1, 4, 8.
    expect(syncs).toEqual([true, false, false, true, false, false, false, true, false]);
    const [ends] = await stepAll(groups, [
      [false, 0],
      [false, 0],
    ]);
    expect(ends).toMatchObject({ sync: false, anyUnfinished: false }); // step 10: no sync
    await stepAll(groups, [
      [false, 0],
      [false, 0],
    ]); // 11
    const [twelve] = await stepAll(groups, [
      [false, 0],
      [false, 0],
    ]);
    expect(twelve).toMatchObject({ sync: true, anyUnfinished: false }); // the wave ends
    const [first] = await stepAll(groups, [
      [false, 0],
      [false, 0],
    ]);
    expect(first?.sync).toBe(true); // step 1 of the next wave
  });

  it('a rank that leaves: the others go on; it joins again and is told the group runs', async () => {
    const port = await freePort();
    const log0 = new Log();
    const [g0, g1] = await Promise.all([open(0, 2, port, log0), open(1, 2, port)]);
    await stepAll(
      [g0, g1],
      [
        [true, 0],
        [true, 0],
      ],
    );
    let done = false;
    const alone = g0.step(true, 3).then((r) => {
      done = true;
      return r === null ? null : { ...r };
    });
    // Rank 0 waits in the collective for rank 1, which does not step.
    await waitsFor(g0, [1]);
    expect(done).toBe(false);
    expect(g0.waiting).toBe(true);
    g1.close();
    expect(await alone).toEqual({ anyUnfinished: true, sync: false, ms: 3 });
    await logged(log0, 'DP group: a rank left; the collectives go on with the others');
    expect(g0.waitingFor()).toEqual([0]); // nobody else to wait for
    // Restarted: joins the group mid-wave, and is asked to run.
    const again = await open(1, 2, port);
    let woken = false;
    again.onWake = () => {
      woken = true;
    };
    expect(woken).toBe(true);
    await stepAll(
      [g0, again],
      [
        [false, 0],
        [false, 0],
      ],
    );
    expect(log0.lines).toContain('DP group: a rank joined');
  });

  it('rank 0 restarts: the others reconnect and their waiting step goes to the new rank 0', async () => {
    const port = await freePort();
    const log1 = new Log();
    const [g0, g1] = await Promise.all([open(0, 2, port), open(1, 2, port, log1)]);
    let result: DpStepResult | null | undefined;
    const waiting = g1.step(true, 7).then((r) => {
      result = r === null ? null : { ...r };
    });
    g0.close();
    await until(
      () => log1.lines.some((l) => l.startsWith('DP group: lost rank 0')),
      (x) => x,
      { ...WAIT, what: 'rank 1 losing rank 0' },
    );
    // Its step still waits, across the outage (the group is not closed: it reconnects).
    expect(g1.waiting).toBe(true);
    expect(g1.closed).toBe(false);
    expect(result).toBeUndefined();
    const restarted = await open(0, 2, port);
    const mine = await restarted.step(false, 2);
    await waiting;
    expect({ ...mine }).toEqual({ anyUnfinished: true, sync: true, ms: 7 });
    expect(result).toEqual({ anyUnfinished: true, sync: true, ms: 7 });
    expect(log1.lines).toContain('DP group: rejoined rank 0');
  });

  it('close() settles a waiting step with null, on rank 0 and on the others; later steps too', async () => {
    const port = await freePort();
    const [g0, g1, g2] = await Promise.all([open(0, 3, port), open(1, 3, port), open(2, 3, port)]);
    // Rank 0 and rank 1 wait for rank 2.
    const hubStep = g0.step(true, 1);
    const memberStep = g1.step(true, 1);
    await waitsFor(g0, [2]);
    expect(g1.waiting).toBe(true);
    g1.close();
    expect(await memberStep).toBeNull();
    expect(g1.waiting).toBe(false);
    expect(await g1.step(false, 0)).toBeNull();
    g0.close();
    expect(await hubStep).toBeNull();
    expect(g0.waiting).toBe(false);
    expect(await g0.step(false, 0)).toBeNull();
    expect([g0.closed, g1.closed, g2.closed]).toEqual([true, true, false]);
    // Rank 2 loses rank 0 and waits to reconnect; its own close() ends that too.
    const orphan = g2.step(false, 0);
    g2.close();
    expect(await orphan).toBeNull();
  });

  it('two processes as one rank: the newer replaces the older, which stops reconnecting', async () => {
    const port = await freePort();
    const log0 = new Log();
    const logOld = new Log();
    const [g0, old] = await Promise.all([open(0, 2, port, log0), open(1, 2, port, logOld)]);
    const oldStep = old.step(true, 1);
    // Another process started as rank 1: it joins, the older one is told and leaves for good.
    const newer = await open(1, 2, port);
    expect(await oldStep).toBeNull();
    expect(old.closed).toBe(true);
    expect(
      log0.lines.some((l) => l.startsWith('DP group: rank 1 joined again while a connection')),
    ).toBe(true);
    expect(logOld.lines).toContain(
      'DP group: another process joined as rank 1 and replaced this one; it leaves the group',
    );
    // The group goes on with the newer one; the older, closed, does not come back (no eviction
    // ping-pong: a closed group never reconnects).
    for (let i = 0; i < 3; i++) {
      const r = await stepAll(
        [g0, newer],
        [
          [true, 1],
          [false, 2],
        ],
      );
      expect(r[1]).toMatchObject({ anyUnfinished: true, ms: 2 });
    }
    expect(newer.closed).toBe(false);
    expect(log0.lines.filter((l) => l.startsWith('DP group: rank 1 joined again'))).toHaveLength(1);
  });

  it('a rank of another size is refused; a rank with no rank 0 gives up after the timeout', async () => {
    const port = await freePort();
    const hub = open(0, 2, port);
    void hub.catch(() => {});
    await expect(open(1, 3, port)).rejects.toMatchObject({ code: 'RS_ERR_VLLM_HANDSHAKE' });
    const lonely = openDpGroup({
      rank: 1,
      size: 2,
      host: '127.0.0.1',
      port: await freePort(),
      syncInterval: 4,
      log: new Log(),
      initTimeoutMs: 300,
      retryMs: 20,
    });
    await expect(lonely).rejects.toThrow(/did not join the DP group/);
    const g1 = await open(1, 2, port);
    await hub;
    expect(g1.rank).toBe(1);
  });
});
