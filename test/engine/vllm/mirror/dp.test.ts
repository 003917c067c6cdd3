import { afterEach, describe, expect, it } from 'vitest';
import { FinishReason, type SamplingParams } from './codec.js';
import {
  createMirrorDpRanks,
  type MirrorDpGroup,
  type MirrorDpRanksOptions,
  startMirrorDpRanks,
} from './dp-engine.js';
import { MirrorDpFrontend, type MirrorDpFrontendOptions } from './dp-frontend.js';
import { promptSum, tokenAt } from './formula.js';
import { MirrorTimeoutError } from './wait.js';

/**
 * The mirror DP frontend against mirror DP ranks (N = 2) over loopback ZMQ: vLLM's data-parallel
 * protocol without a coordinator (VDP §1-4), both ends written from the notes, not from ringserve.
 */

const VOCAB = 510;
const PROMPT = [2, 4, 6];
const opened: { close(): void }[] = [];

afterEach(() => {
  for (const o of opened.splice(0)) o.close();
});

async function openDp(
  n = 2,
  fe: Partial<MirrorDpFrontendOptions> = {},
  ranks: MirrorDpRanksOptions = {},
): Promise<{ frontend: MirrorDpFrontend; group: MirrorDpGroup }> {
  const frontend = await MirrorDpFrontend.open({ size: n, ...fe });
  opened.push(frontend);
  const group = createMirrorDpRanks(n, { era: '0.33', ...ranks });
  opened.push(group);
  await Promise.all([group.connect(frontend.handshakeAddress), frontend.runHandshake()]);
  return { frontend, group };
}

const sp = (max_tokens: number): SamplingParams => ({ max_tokens });
const input = (max_tokens: number, prompt = PROMPT) => ({
  prompt_token_ids: prompt,
  sampling_params: sp(max_tokens),
});
const settle = (ms = 30) => new Promise((r) => setTimeout(r, ms));

describe('mirror DP handshake', () => {
  it('one handshake ROUTER, identities = rank LE, the DP master keys in INIT, equal hashes', async () => {
    const { frontend, group } = await openDp();
    expect(frontend.readyRanks).toEqual([0, 1]);
    const pc = frontend.parallelConfig;
    expect(pc).toMatchObject({ data_parallel_master_ip: '127.0.0.1', data_parallel_size: 2 });
    expect(pc.data_parallel_master_port).toBeGreaterThan(0);
    expect(pc._data_parallel_master_port_list).toHaveLength(5);
    for (const r of group.ranks) {
      expect(r.parallelConfig).toEqual(pc);
      expect(r.engine.init?.addresses.inputs).toEqual([frontend.inputAddress]);
      expect(r.engine.init?.addresses.outputs).toEqual([frontend.outputAddress]);
      expect(frontend.registrations.get(r.rank)).toMatchObject({
        data_parallel_size: 2,
        data_parallel_rank: r.rank,
      });
    }
    expect(group.master).toEqual(pc);
    const hashes = frontend.readyRanks.map((r) => frontend.readies.get(r)!.parallel_config_hash);
    expect(hashes[0]).toMatch(/^[0-9a-f]{64}$/);
    expect(hashes[1]).toBe(hashes[0]);
    expect(frontend.wavesArmed).toBe(true);
    expect(frontend.era).toBe('0.33');
  });

  it('READYs with different parallel_config_hash fail the frontend handshake', async () => {
    const frontend = await MirrorDpFrontend.open({ size: 2 });
    opened.push(frontend);
    const group = createMirrorDpRanks(2, { parallelConfigHash: (r) => `h${r}` });
    opened.push(group);
    const [ranks, fe] = await Promise.allSettled([
      group.connect(frontend.handshakeAddress),
      frontend.runHandshake(),
    ]);
    expect(ranks.status).toBe('fulfilled');
    expect(String((fe as PromiseRejectedResult).reason)).toMatch(
      /parallel_config_hash differs across ranks: \["h0","h1"\]/,
    );
  });

  it("MoE ranks refuse an INIT without the DP master keys ('require'); 'ignore' forms anyway", async () => {
    const frontend = await MirrorDpFrontend.open({ size: 2, masterConfig: false });
    opened.push(frontend);
    expect(frontend.parallelConfig).toEqual({});
    const group = createMirrorDpRanks(2);
    opened.push(group);
    await expect(group.connect(frontend.handshakeAddress, 2000)).rejects.toThrow(
      /init parallel_config has no data_parallel_master_ip \(a torch DP group would not form\)/,
    );
    expect(frontend.readies.size).toBe(0);

    const lax = await MirrorDpFrontend.open({ size: 2, masterConfig: false, waves: true });
    opened.push(lax);
    const ok = createMirrorDpRanks(2, { masterConfig: 'ignore' });
    opened.push(ok);
    await Promise.all([ok.connect(lax.handshakeAddress), lax.runHandshake()]);
    const id = await lax.add(0, input(3));
    await lax.finished(id);
  });

  it('startMirrorDpRanks: ranks dial, register and READY; counters start at zero', async () => {
    const frontend = await MirrorDpFrontend.open({ size: 2 });
    opened.push(frontend);
    const [group] = await Promise.all([
      startMirrorDpRanks(frontend.handshakeAddress, 2, { era: '0.29' }),
      frontend.runHandshake(),
    ]);
    opened.push(group);
    expect(frontend.era).toBe('0.29');
    expect(group.counters()).toEqual(
      [0, 1].map((rank) =>
        expect.objectContaining({
          rank,
          requestsSeen: 0,
          startWavesSeen: 0,
          currentWave: 0,
          enginesRunning: false,
        }),
      ),
    );
  });
});

describe('mirror DP waves', () => {
  it('requests on both ranks finish; outputs come from their rank; least in-flight routing', async () => {
    const { frontend, group } = await openDp();
    const a = await frontend.add(0, input(4));
    const b = await frontend.add(1, input(6, [1, 1]));
    const c = await frontend.add(null, input(2));
    const d = await frontend.add(null, input(2));
    for (const id of [a, b, c, d]) await frontend.finished(id);
    expect(frontend.tokensOf(a)).toEqual(
      [0, 1, 2, 3].map((i) => tokenAt(promptSum(PROMPT), i, VOCAB)),
    );
    expect(frontend.outputsOf(b).at(-1)?.finish_reason).toBe(FinishReason.LENGTH);
    for (const id of [a, b, c, d]) expect(frontend.enginesOf(id)).toEqual([frontend.ownerOf(id)]);
    expect(new Set([c, d].map((id) => frontend.ownerOf(id)))).toEqual(new Set([0, 1]));
    expect(group.ranks.map((r) => r.requestsSeen)).toEqual([2, 2]);
    expect(group.ranks.map((r) => r.misrouted)).toEqual([[], []]);
    expect(frontend.receivedFrom(0).length).toBeGreaterThan(0);
    expect(frontend.receivedFrom(1).length).toBeGreaterThan(0);
    expect(frontend.outstanding).toEqual([]);
    expect(frontend.errors).toEqual([]);
    expect(group.ranks.flatMap((r) => r.engine.errors)).toEqual([]);
  });

  it('a request to rank 0 finishes only because the frontend woke rank 1', async () => {
    // One PULL socket, two senders: a rank's wave_complete may be read before the other rank's
    // last output, and a frontend that wakes on that race (the next test) would add wakes here.
    const { frontend, group } = await openDp(2, { wakeOnRace: false });
    const [r0, r1] = group.ranks;
    const id = await frontend.add(0, input(5));
    await frontend.finished(id);
    expect(frontend.wavesSent).toEqual([{ to: 1, wave: 0, exclude: 0, why: 'add' }]);
    expect(r1!.engine.waves).toEqual([{ wave: 0, exclude: 0 }]);
    expect(r0!.startWavesSeen).toBe(0);
    expect(r1!.requestsSeen).toBe(0);
    // Rank 1 ran a dummy batch for every step of rank 0's request.
    expect(r0!.steps).toBe(5);
    expect(r1!.dummySteps).toBeGreaterThanOrEqual(5);
  });

  it('a frontend that never sends START_DP_WAVE leaves rank 0 blocked in the collective', async () => {
    const { frontend, group } = await openDp(2, { waves: false });
    const [r0, r1] = group.ranks;
    const id = await frontend.add(0, input(3));
    await expect(frontend.finished(id, 200)).rejects.toBeInstanceOf(MirrorTimeoutError);
    expect(frontend.outputsOf(id)).toEqual([]);
    expect(r0!.blocked).toBe(true);
    expect(r0!.blockedTicks).toBeGreaterThan(0);
    expect(r1!.enginesRunning).toBe(false);
    // Blocked, rank 0 reads no input: its utility reply waits for the step.
    const reply = frontend.callRank(0, 'is_scheduler_paused', [], { timeoutMs: 2000 });
    await settle();
    expect(r0!.engine.calls).toHaveLength(0);
    await frontend.startDpWave(1, 0, 0);
    expect((await reply).result).toEqual({ value: false });
    await frontend.finished(id);
  });

  it('wave_complete advances the wave on every rank and in the frontend', async () => {
    const { frontend, group } = await openDp(2, { wakeOnRace: false });
    const first = await frontend.add(1, input(2));
    await frontend.finished(first);
    await frontend.until(() => frontend.waveCompletes.length === 2, 'two wave_complete(0)');
    expect(frontend.waveCompletes.map((w) => w.wave)).toEqual([0, 0]);
    expect(new Set(frontend.waveCompletes.map((w) => w.engine))).toEqual(new Set([0, 1]));
    expect(frontend.currentWave).toBe(1);
    expect(frontend.running).toBe(false);
    expect(group.ranks.map((r) => [r.currentWave, r.enginesRunning])).toEqual([
      [1, false],
      [1, false],
    ]);
    const second = await frontend.add(1, input(2));
    await frontend.finished(second);
    expect(frontend.wavesSent.map((w) => [w.to, w.wave, w.exclude])).toEqual([
      [0, 0, 1],
      [0, 1, 1],
    ]);
    await frontend.until(() => frontend.currentWave === 2, 'wave 2');
    expect(group.ranks.map((r) => r.wavesCompleted)).toEqual([
      [0, 1],
      [0, 1],
    ]);
    // The wave each rank runs is in its SchedulerStats.
    expect(frontend.stats.get(1)?.at(-1)?.current_wave).toBe(1);
  });

  it('the race: an ADD the group missed is woken by wave_complete (and hangs without that)', async () => {
    for (const wakeOnRace of [true, false]) {
      const { frontend, group } = await openDp(2, { wakeOnRace });
      const [, r1] = group.ranks;
      const first = await frontend.add(0, input(2));
      // wave_complete(0) stays "on the wire" while the group finishes wave 0.
      frontend.holdOutputs();
      await frontend.until(() => group.ranks.every((r) => r.currentWave === 1), 'wave 0 over');
      expect(frontend.running).toBe(true);
      const late = await frontend.add(1, input(2));
      await frontend.until(() => r1!.blocked, 'rank 1 blocked');
      expect(frontend.wavesSent).toHaveLength(1);
      frontend.releaseOutputs();
      await frontend.finished(first);
      if (wakeOnRace) {
        await frontend.finished(late);
        // Both ranks woken for wave 1, in whichever order the sends went out. Each rank sends its
        // outputs on a connection of its own, so rank 0's wave_complete(1) may reach the frontend
        // before rank 1's output that finishes `late`; the frontend then sees the race again and
        // wakes both for wave 2 too (harmless: a wave with nothing to run ends at once).
        const wakes = frontend.wavesSent
          .slice(1)
          .filter((w) => w.wave === 1)
          .map((w) => [w.to, w.wave, w.exclude, w.why]);
        expect(wakes.sort((x, y) => (x[0] as number) - (y[0] as number))).toEqual([
          [0, 1, null, 'race'],
          [1, 1, null, 'race'],
        ]);
      } else {
        await expect(frontend.finished(late, 200)).rejects.toBeInstanceOf(MirrorTimeoutError);
        expect(frontend.running).toBe(false);
        expect(r1!.blocked).toBe(true);
      }
      frontend.close();
      group.close();
    }
  });

  it('ABORT goes to the owning rank only; the wave then ends', async () => {
    const { frontend, group } = await openDp();
    const long = await frontend.add(1, input(100_000));
    await frontend.until(() => frontend.outputsOf(long).length > 2, 'outputs of the long one');
    await frontend.abort([long, 'nobody']);
    await frontend.until(() => frontend.currentWave === 1, 'the wave ends');
    expect(group.ranks.map((r) => r.engine.aborts)).toEqual([[], [long]]);
    expect(frontend.droppedAborts).toEqual(['nobody']);
    expect(frontend.outstanding).toEqual([]);
  });

  it('utility calls reach every rank, each with its own call id', async () => {
    const { frontend, group } = await openDp();
    const replies = await frontend.callAll('reset_prefix_cache');
    expect(replies.map((r) => r.result)).toEqual([{ value: true }, { value: true }]);
    expect(group.ranks.map((r) => r.engine.calls.map((c) => c.method))).toEqual([
      ['reset_prefix_cache'],
      ['reset_prefix_cache'],
    ]);
    const [c0, c1] = group.ranks.map((r) => r.engine.calls[0]!.call_id);
    expect(c0).not.toBe(c1);
    expect((await frontend.call('is_scheduler_paused')).result).toEqual({ value: false });
    expect(group.counters().map((c) => c.utilityCalls)).toEqual([2, 2]);
  });

  it('syncInterval > 1: the group runs dummy steps until a sync step finds nothing left', async () => {
    const { frontend, group } = await openDp(2, {}, { syncInterval: 8 });
    const id = await frontend.add(0, input(3));
    await frontend.finished(id);
    await frontend.until(() => frontend.currentWave === 1, 'the wave ends');
    // Step 1 syncs (work left), then the next sync is step 8.
    expect(group.steps).toBe(8);
    expect(group.ranks[0]!.dummySteps).toBe(5);
  });
});

describe('mirror DP, dense model', () => {
  it('independent ranks: data_parallel_size 1, no hash, no waves; START_DP_WAVE is an error', async () => {
    const { frontend, group } = await openDp(2, { masterConfig: false }, { moe: false });
    expect(frontend.registrations.get(1)).toMatchObject({ data_parallel_size: 1 });
    expect(frontend.readies.get(0)!.parallel_config_hash).toBeUndefined();
    expect(frontend.wavesArmed).toBe(false);
    const id = await frontend.add(0, input(3));
    await frontend.finished(id);
    expect(frontend.wavesSent).toEqual([]);
    expect(frontend.waveCompletes).toEqual([]);
    await frontend.startDpWave(1, 0, 0);
    await frontend.until(() => group.ranks[1]!.engine.errors.length === 1, 'the error');
    expect(group.ranks[1]!.engine.errors[0]!.message).toMatch(
      /type byte 2 \(START_DP_WAVE\) on a dense rank/,
    );
  });
});
