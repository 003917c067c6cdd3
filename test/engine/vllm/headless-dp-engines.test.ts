/**
 * Headless engines as the ranks of one DP group (`ringserve engine --vllm-protocol
 * --data-parallel-size 2 --data-parallel-start-rank R`, in-process: the engine command's pieces
 * without its process), driven by a small vLLM frontend over real ZMQ on loopback (a handshake
 * ROUTER, an input ROUTER and an output PULL, as vLLM's frontend binds them, with no DP
 * coordinator). A MoE model (`tiny`): both ranks register with their identities, the DP size and
 * rank, and the same parallel_config_hash; a request on rank 0 does not finish until START_DP_WAVE
 * reaches rank 1 (vLLM's hang when a frontend does not wake the other ranks); then it finishes and
 * every rank sends wave_complete for the wave; with rank 1 gone, rank 0 goes on alone; a restarted
 * rank 1 joins again; a paused rank with requests keeps the group stepping dummy batches, paced,
 * until it resumes. A dense rank registers as vLLM's independent ranks do, and ignores
 * START_DP_WAVE.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { unpack } from 'msgpackr';
import { afterEach, describe, expect, it } from 'vitest';
import { Pull, Router } from 'zeromq';
import { dpGroupAddress } from '../../../src/cluster/vllm-engine-command.js';
import { dialFrontend } from '../../../src/engine/vllm/headless/dial.js';
import { type DpGroup, openDpGroup } from '../../../src/engine/vllm/headless/dp-group.js';
import { parallelConfigHash } from '../../../src/engine/vllm/headless/dp-wave.js';
import {
  PAUSED_DUMMY_STEP_MS,
  VllmHeadlessEngine,
} from '../../../src/engine/vllm/headless/engine.js';
import {
  type DpGroupConfig,
  decodeHandshake,
  decodeRegistration,
  encodeAdd,
  encodeInit,
  encodeStartDpWave,
  encodeUtility,
  engineIdentity,
  getVllmLayout,
  type HandshakeMessage,
  type Registration,
  RequestType,
} from '../../../src/engine/vllm/index.js';
import { SimEngine } from '../../../src/sim/sim-engine.js';
import { until } from '../../until.js';
import { freePort, RecordingLog as Log } from './headless-dp-helpers.js';

const LAYOUT = getVllmLayout('0.33');
const at = (field: string) => LAYOUT.outputs.indexOf(field as (typeof LAYOUT.outputs)[number]);

interface Seen {
  engine: number;
  /** [request id, token count, finish reason or null] per output. */
  outputs: [string, number, number | null][];
  waveComplete: number | null;
  startWave: number | null;
  /** utility_output's call id, or null. */
  utilityCallId: number | null;
}

/** vLLM's frontend sockets, no coordinator; every message kept. */
class Frontend {
  readonly handshake = new Router({ handover: true });
  readonly input = new Router({ handover: true, mandatory: true });
  readonly output = new Pull();
  readonly ready = new Map<number, HandshakeMessage>();
  readonly registrations = new Map<number, Registration>();
  readonly seen: Seen[] = [];
  parallelConfig: DpGroupConfig | null = null;
  #closed = false;

  async bind(): Promise<void> {
    await this.handshake.bind('tcp://127.0.0.1:0');
    await this.input.bind('tcp://127.0.0.1:0');
    await this.output.bind('tcp://127.0.0.1:0');
    void this.#serveHandshake();
    void this.#readRegistrations();
    void this.#readOutputs();
  }

  get handshakePort(): number {
    return Number(/:(\d+)$/.exec(this.handshake.lastEndpoint ?? '')?.[1]);
  }

  async #serveHandshake(): Promise<void> {
    try {
      for await (const [id, payload] of this.handshake) {
        const m = decodeHandshake(payload as Buffer);
        const rank = (id as Buffer).readUInt16LE(0);
        if (m.status === 'READY') this.ready.set(rank, m);
        else {
          const init = encodeInit({
            inputs: [this.input.lastEndpoint as string],
            outputs: [this.output.lastEndpoint as string],
            parallelConfig: this.parallelConfig,
          });
          await this.handshake.send([id as Buffer, init]);
        }
      }
    } catch (error) {
      if (!this.#closed) throw error;
    }
  }

  async #readRegistrations(): Promise<void> {
    try {
      for await (const [id, payload] of this.input) {
        this.registrations.set(
          (id as Buffer).readUInt16LE(0),
          decodeRegistration(payload as Buffer),
        );
      }
    } catch (error) {
      if (!this.#closed) throw error;
    }
  }

  async #readOutputs(): Promise<void> {
    try {
      for await (const [body] of this.output) {
        const m = unpack(body as Buffer) as unknown[];
        const outputs = (m[at('outputs')] as unknown[][]).map(
          (o) =>
            [o[0] as string, (o[1] as number[]).length, o[5] as number | null] as [
              string,
              number,
              number | null,
            ],
        );
        this.seen.push({
          engine: m[at('engine_index')] as number,
          outputs,
          waveComplete: m[at('wave_complete')] as number | null,
          startWave: m[at('start_wave')] as number | null,
          utilityCallId: ((m[at('utility_output')] as unknown[] | null)?.[0] ?? null) as
            | number
            | null,
        });
      }
    } catch (error) {
      if (!this.#closed) throw error;
    }
  }

  async send(rank: number, type: number, payload: Buffer): Promise<void> {
    await this.input.send([engineIdentity(rank), Buffer.from([type]), payload]);
  }

  async add(rank: number, requestId: string, maxTokens = 4): Promise<void> {
    const payload = encodeAdd(LAYOUT, {
      requestId,
      promptTokenIds: [1, 2, 3, 4, 5],
      params: { maxTokens, ignoreEos: true },
      arrivalTime: 0,
      cacheSalt: null,
      priority: 0,
      clientIndex: 0,
    });
    await this.send(rank, RequestType.Add, payload);
  }

  async utility(rank: number, callId: number, method: string, args: unknown[]): Promise<void> {
    const payload = encodeUtility({ clientIndex: 0, callId, method, args });
    await this.send(rank, RequestType.Utility, payload);
  }

  answered(callId: number): boolean {
    return this.seen.some((s) => s.utilityCallId === callId);
  }

  finished(id: string): boolean {
    return this.seen.some((s) => s.outputs.some((o) => o[0] === id && o[2] !== null));
  }

  tokensOf(id: string): number {
    let n = 0;
    for (const s of this.seen) for (const o of s.outputs) if (o[0] === id) n += o[1];
    return n;
  }

  waveCompletes(): [number, number][] {
    return this.seen
      .filter((s) => s.waveComplete !== null)
      .map((s) => [s.engine, s.waveComplete as number]);
  }

  close(): void {
    this.#closed = true;
    this.handshake.close();
    this.input.close();
    this.output.close();
  }
}

interface Rank {
  engine: VllmHeadlessEngine;
  /** A MoE rank's DP group (the engine owns it), or null. */
  group: DpGroup | null;
  done: Promise<unknown>;
  log: Log;
}

const frontends: Frontend[] = [];
const ranks: Rank[] = [];
const children: ChildProcess[] = [];

afterEach(async () => {
  for (const c of children.splice(0)) {
    if (c.exitCode === null && c.signalCode === null) {
      const exited = new Promise((resolve) => c.once('exit', resolve));
      c.kill('SIGKILL');
      await exited;
    }
  }
  for (const r of ranks.splice(0)) {
    r.engine.stop();
    await r.done;
  }
  for (const f of frontends.splice(0)) f.close();
});

/** Waits until `probe` holds; generous for a loaded 2-core CI machine (it takes milliseconds). */
function holds(probe: () => boolean, what: string, timeoutMs = 30_000): Promise<unknown> {
  return until(probe, Boolean, { what, timeoutMs });
}

/**
 * Waits until rank `r` (rank 0) is blocked in the group's collective: its step reported, the
 * round waiting for the reports of `ranks` only.
 */
function blockedFor(r: Rank, ranks: number[]): Promise<unknown> {
  return holds(
    () => r.engine.waitingInGroup && r.group?.waitingFor()?.join() === ranks.join(),
    `rank 0 waiting in the group for ranks [${ranks.join()}]`,
  );
}

async function frontend(parallelConfig: DpGroupConfig | null): Promise<Frontend> {
  const f = new Frontend();
  f.parallelConfig = parallelConfig;
  frontends.push(f);
  await f.bind();
  return f;
}

/**
 * Rank `rank` of `size` as `ringserve engine` starts it (vllm-engine-command.ts runEngineCommand):
 * the DP group formed between the init message and the registration; `moe` false: a dense rank.
 */
async function startRank(
  f: Frontend,
  rank: number,
  size: number,
  { moe = true, syncInterval = 16 } = {},
): Promise<Rank> {
  const sim = new SimEngine({ preset: 'tiny', seed: 1, maxSpeed: true });
  const log = new Log();
  const dp = { rank, size, syncInterval };
  const joined: { group: Awaited<ReturnType<typeof openDpGroup>> | null } = { group: null };
  const c = sim.config;
  const sockets = await dialFrontend(
    '127.0.0.1',
    f.handshakePort,
    LAYOUT,
    {
      maxModelLen: c.maxModelLen,
      numGpuBlocks: c.numGpuBlocks,
      blockSize: c.blockSize,
      dpStatsAddress: null,
      dtype: 'bfloat16',
      vllmVersion: '0.33.0+ringserve',
      worldSize: 1,
      dataParallelSize: moe ? size : 1,
      dataParallelRank: moe ? rank : 0,
      maxNumSeqs: c.maxNumSeqs,
      maxNumBatchedTokens: c.maxNumBatchedTokens,
      supportsLora: false,
      maxLoras: 0,
      kvCacheSizeTokens: null,
      instanceId: `rank-${rank}`,
    },
    30_000,
    {
      rank,
      parallelConfigHash: moe
        ? parallelConfigHash({ model: 'tiny', size, syncInterval, layout: LAYOUT.name })
        : null,
      afterInit: moe
        ? async (init) => {
            joined.group = await openDpGroup({
              ...dpGroupAddress(init.parallelConfig ?? null, dp),
              rank,
              size,
              syncInterval,
              log,
              initTimeoutMs: 30_000,
              retryMs: 20,
            });
          }
        : undefined,
    },
  );
  const engine = new VllmHeadlessEngine({
    engine: sim,
    layout: LAYOUT,
    sockets,
    wide: { routedExperts: false, samplingMasks: false },
    rank,
    log,
    dp: joined.group === null ? null : { group: joined.group, dummyStepMs: 0 },
  });
  const r = { engine, group: joined.group, done: engine.run(), log };
  ranks.push(r);
  return r;
}

async function stopRank(r: Rank): Promise<void> {
  ranks.splice(ranks.indexOf(r), 1);
  r.engine.stop();
  await r.done;
}

async function group(size: number): Promise<{ f: Frontend; rs: Rank[] }> {
  const port = await freePort();
  const f = await frontend({
    masterIp: '127.0.0.1',
    masterPort: 1,
    masterPortList: [port],
    size,
  });
  const rs = await Promise.all(Array.from({ length: size }, (_, r) => startRank(f, r, size)));
  await holds(
    () => f.ready.size === size && f.registrations.size === size,
    `${size} ranks registered`,
  );
  return { f, rs };
}

describe('headless engines as the ranks of a MoE DP group', () => {
  it('register with their identities, DP size and rank, and one parallel_config_hash', async () => {
    const { f } = await group(2);
    for (const rank of [0, 1]) {
      expect(f.registrations.get(rank)).toMatchObject({
        dataParallelSize: 2,
        dataParallelRank: rank,
      });
    }
    const h0 = f.ready.get(0)?.parallelConfigHash;
    expect(h0).toMatch(/^[0-9a-f]{64}$/);
    expect(f.ready.get(1)?.parallelConfigHash).toBe(h0);
  });

  it('a request on rank 0 waits for rank 1 until START_DP_WAVE wakes it; then every rank ends the wave', async () => {
    const { f, rs } = await group(2);
    const [r0, r1] = rs as [Rank, Rank];
    await f.add(0, 'a', 4);
    // Rank 0 stepped once and waits in the group's collective for rank 1, which is not in a wave
    // and does not step: no step of the wave completed, nothing goes out.
    await blockedFor(r0, [1]);
    const blocked = () => [
      r0.engine.dpWave?.running,
      r0.engine.dpWave?.step,
      r1.engine.dpWave?.running,
      r1.engine.waitingInGroup,
      f.tokensOf('a'),
    ];
    expect(blocked()).toEqual([true, 0, false, false, 0]);
    // And it stays so.
    await new Promise((r) => setTimeout(r, 100));
    expect(blocked()).toEqual([true, 0, false, false, 0]);
    expect(r0.group?.waitingFor()).toEqual([1]);
    expect(f.finished('a')).toBe(false);
    // The frontend's wake: every rank but the request's, for the current wave.
    await f.send(1, RequestType.StartDpWave, encodeStartDpWave(0, 0));
    await holds(() => f.finished('a'), "'a' finished");
    expect(f.tokensOf('a')).toBe(4);
    // Both ranks find nothing unfinished at the next sync step: both send wave_complete 0.
    await holds(() => f.waveCompletes().length === 2, 'two wave_complete');
    expect(f.waveCompletes().sort()).toEqual([
      [0, 0],
      [1, 0],
    ]);
    expect(f.seen.every((s) => s.startWave === null)).toBe(true);
    await holds(
      () => r0.engine.dpWave?.running === false && r1.engine.dpWave?.running === false,
      'both ranks idle',
    );
    expect([r0.engine.dpWave?.currentWave, r1.engine.dpWave?.currentWave]).toEqual([1, 1]);
    // Outputs carry each rank's engine_index.
    expect(f.seen.filter((s) => s.outputs.length > 0).every((s) => s.engine === 0)).toBe(true);

    // The next wave: a request on each rank, both run without a wake; wave 1 ends.
    await f.add(0, 'b', 3);
    await f.add(1, 'c', 5);
    await holds(() => f.finished('b') && f.finished('c'), "'b' and 'c' finished");
    await holds(() => f.waveCompletes().length === 4, 'four wave_complete');
    expect(f.waveCompletes().slice(2).sort()).toEqual([
      [0, 1],
      [1, 1],
    ]);
  });

  it('rank 1 gone: rank 0 goes on alone; a restarted rank 1 joins the group again', async () => {
    const { f, rs } = await group(2);
    const [r0, r1] = rs as [Rank, Rank];
    await stopRank(r1);
    expect(r1.group?.closed).toBe(true); // the engine closed its group when it stopped
    await holds(
      () => r0.log.lines.includes('DP group: a rank left; the collectives go on with the others'),
      'rank 0 seeing rank 1 leave',
    );
    await f.add(0, 'solo', 3);
    await holds(() => f.finished('solo'), "'solo' finished");
    expect(f.tokensOf('solo')).toBe(3);
    await holds(() => f.waveCompletes().length === 1, 'one wave_complete');
    expect(f.waveCompletes()).toEqual([[0, 0]]);

    // Rank 1 again: it joins, and rank 0's next request waits for its wake again.
    const again = await startRank(f, 1, 2);
    await holds(() => r0.log.lines.includes('DP group: a rank joined'), 'rank 1 joining again');
    await f.add(0, 'pair', 2);
    await blockedFor(r0, [1]);
    expect([r0.engine.dpWave?.step, again.engine.waitingInGroup, f.tokensOf('pair')]).toEqual([
      0,
      false,
      0,
    ]);
    await f.send(1, RequestType.StartDpWave, encodeStartDpWave(1, 0));
    await holds(() => f.finished('pair'), "'pair' finished");
    expect(again.engine.dpWave?.currentWave).toBeGreaterThanOrEqual(1);
  });

  it('a paused rank with requests keeps the group in its wave, dummy steps paced, until resumed', async () => {
    const { f, rs } = await group(2);
    const [r0, r1] = rs as [Rank, Rank];
    // pause_scheduler "keep" on rank 0, then an ADD: held there (vLLM queues it), a request all
    // the same (has_unfinished_requests), so the group steps dummy batches until the resume.
    await f.utility(0, 1, 'pause_scheduler', ['keep', false]);
    await holds(() => f.answered(1), 'the pause answered');
    await f.add(0, 'held', 3);
    await f.send(1, RequestType.StartDpWave, encodeStartDpWave(0, 0));
    await holds(() => (r1.engine.dpWave?.step ?? 0) >= 2, 'rank 1 stepping');
    // At max speed a dummy step is free: without the floor each rank would step thousands of
    // times in the window; with it, at most one step per PAUSED_DUMMY_STEP_MS (a loaded machine
    // steps fewer, never more).
    const windowMs = 300;
    const before = [r0.engine.dpWave?.step ?? 0, r1.engine.dpWave?.step ?? 0];
    const started = performance.now();
    await new Promise((r) => setTimeout(r, windowMs));
    const elapsed = performance.now() - started;
    const after = [r0.engine.dpWave?.step ?? 0, r1.engine.dpWave?.step ?? 0];
    const most = Math.ceil(elapsed / PAUSED_DUMMY_STEP_MS) + 2;
    for (const i of [0, 1]) {
      expect(after[i]! - before[i]!).toBeGreaterThan(0); // still stepping: the wave goes on
      expect(after[i]! - before[i]!).toBeLessThanOrEqual(most);
    }
    expect([r0.engine.dpWave?.running, r1.engine.dpWave?.running]).toEqual([true, true]);
    expect(f.tokensOf('held')).toBe(0);
    expect(f.waveCompletes()).toEqual([]);
    // Resumed: the held request runs, and the wave ends on both ranks.
    await f.utility(0, 2, 'resume_scheduler', []);
    await holds(() => f.finished('held'), "'held' finished");
    expect(f.tokensOf('held')).toBe(3);
    await holds(() => f.waveCompletes().length === 2, 'two wave_complete');
  });

  it('rank 0 fails its handshake without the DP master address (init parallel_config `{}`)', async () => {
    const f = await frontend(null);
    await expect(startRank(f, 0, 2)).rejects.toThrow(/no DP master address/);
  });
});

describe('a dense model: independent ranks', () => {
  it("registers as vLLM's independent ranks (size 1, rank 0; identity R), logs and drops START_DP_WAVE", async () => {
    const f = await frontend(null);
    const r1 = await startRank(f, 1, 2, { moe: false });
    await holds(() => f.registrations.has(1) && f.ready.has(1), 'rank 1 registered');
    expect(f.registrations.get(1)).toMatchObject({ dataParallelSize: 1, dataParallelRank: 0 });
    expect(f.ready.get(1)?.parallelConfigHash).toBeNull();
    expect(r1.engine.dpWave).toBeNull();
    await f.send(1, RequestType.StartDpWave, encodeStartDpWave(0, null));
    await f.add(1, 'd', 3);
    await holds(() => f.finished('d'), "'d' finished");
    expect(f.tokensOf('d')).toBe(3);
    expect(r1.log.lines).toContain('dropped an undecodable message from the frontend');
    expect(f.seen.every((s) => s.waveComplete === null && s.engine === 1)).toBe(true);
  });
});

describe('`ringserve engine --data-parallel-size 2` processes', () => {
  const cli = fileURLToPath(new URL('../../../dist/src/cli.js', import.meta.url));

  function engineProcess(port: number, rank: number): { child: ChildProcess; log: () => string } {
    const child = spawn(
      process.execPath,
      [
        cli,
        'engine',
        '--vllm-protocol',
        '--data-parallel-address',
        '127.0.0.1',
        '--data-parallel-rpc-port',
        String(port),
        '--data-parallel-size',
        '2',
        '--data-parallel-rank',
        String(rank),
        '--data-parallel-size-local',
        '1',
        '--dp-sync-interval',
        '4',
        '--model',
        'tiny',
        '--max-speed',
        '--log-level',
        'warn',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(child);
    let log = '';
    child.stdout?.on('data', (d: Buffer) => {
      log += d.toString();
    });
    child.stderr?.on('data', (d: Buffer) => {
      log += d.toString();
    });
    return { child, log: () => log };
  }

  it('both ranks register; a request on rank 1 finishes once rank 0 is woken; SIGTERM exits 0', async () => {
    const f = await frontend({
      masterIp: '127.0.0.1',
      masterPort: await freePort(),
      masterPortList: [],
      size: 2,
    });
    const procs = [0, 1].map((r) => engineProcess(f.handshakePort, r));
    await holds(
      () => f.ready.size === 2 && f.registrations.size === 2,
      'both processes registered',
      60_000,
    ).catch((e) => {
      throw new Error(`${(e as Error).message}: ${procs.map((p) => p.log()).join('\n')}`);
    });
    expect(f.registrations.get(1)).toMatchObject({ dataParallelSize: 2, dataParallelRank: 1 });
    expect(f.ready.get(0)?.parallelConfigHash).toBe(f.ready.get(1)?.parallelConfigHash);
    await f.add(1, 'p', 3);
    // Another process: no view of its group, so only "nothing came back for a while" shows that
    // rank 1 waits (the in-process tests above assert the wait itself).
    await new Promise((r) => setTimeout(r, 300));
    expect(f.finished('p')).toBe(false);
    await f.send(0, RequestType.StartDpWave, encodeStartDpWave(0, 1));
    await holds(
      () => f.finished('p') && f.waveCompletes().length === 2,
      "'p' finished and two wave_complete",
    );
    expect(f.tokensOf('p')).toBe(3);
    expect(f.waveCompletes().sort()).toEqual([
      [0, 0],
      [1, 0],
    ]);
    const codes = await Promise.all(
      procs.map(
        (p) =>
          new Promise<number | null>((resolve) => {
            p.child.once('exit', (code) => resolve(code));
            p.child.kill('SIGTERM');
          }),
      ),
    );
    expect(codes, procs.map((p) => p.log()).join('\n')).toEqual([0, 0]);
  });
});
