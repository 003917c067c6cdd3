/**
 * ringserve's headless engines as two data-parallel ranks of a MoE model (`ringserve engine
 * --vllm-protocol --data-parallel-size 2 --data-parallel-start-rank 0|1`, real processes) under the
 * independent mirror's DP frontend (test/engine/vllm/mirror/dp-frontend.ts, written from vLLM's DP
 * code, not ringserve's): both register with their identities, size and rank and the same
 * parallel_config_hash; they form their group at the INIT's master address; a request on one rank
 * finishes because the frontend wakes the other, every rank reports wave_complete, outputs come
 * from the rank that holds the request, and a frontend that never wakes the other rank gets
 * nothing (the lockstep collective waits).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { MirrorDpFrontend } from '../engine/vllm/mirror/dp-frontend.js';
import { MirrorTimeoutError } from '../engine/vllm/mirror/wait.js';

const CLI = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli.js');
const PROMPT = [5, 17, 29, 41, 53];
const opened: { close(): unknown }[] = [];
const children: ChildProcess[] = [];

afterEach(async () => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill('SIGKILL');
  for (const o of opened.splice(0)) await o.close();
});

function engines(handshake: string, size: number): void {
  const url = new URL(handshake.replace('tcp://', 'http://'));
  for (let rank = 0; rank < size; rank++) {
    children.push(
      spawn(
        process.execPath,
        [
          CLI,
          'engine',
          '--vllm-protocol',
          '--data-parallel-address',
          url.hostname,
          '--data-parallel-rpc-port',
          url.port,
          '--data-parallel-size',
          String(size),
          '--data-parallel-start-rank',
          String(rank),
          '--model',
          'tiny',
          '--max-speed',
          '--log-level',
          'warn',
        ],
        { stdio: ['ignore', 'ignore', 'inherit'] },
      ),
    );
  }
}

async function frontendWithEngines(waves: boolean): Promise<MirrorDpFrontend> {
  const frontend = await MirrorDpFrontend.open({ size: 2, era: '0.33', waves });
  opened.push(frontend);
  engines(frontend.handshakeAddress, 2);
  await frontend.runHandshake(30_000);
  return frontend;
}

const input = (maxTokens: number) => ({
  prompt_token_ids: PROMPT,
  sampling_params: { max_tokens: maxTokens, temperature: 1, seed: 3, ignore_eos: true },
});

describe("an independent vLLM DP frontend drives ringserve's headless engines", () => {
  it('accepts both ranks and reads their outputs, waves included', {
    timeout: 120_000,
  }, async () => {
    const frontend = await frontendWithEngines(true);
    expect(frontend.readyRanks).toEqual([0, 1]);
    for (const rank of [0, 1]) {
      expect(frontend.registrations.get(rank)).toMatchObject({
        data_parallel_size: 2,
        data_parallel_rank: rank,
      });
    }
    const hashes = [0, 1].map((rank) => frontend.readies.get(rank)?.parallel_config_hash);
    expect(hashes[0]).toMatch(/^[0-9a-f]+$/);
    expect(hashes[1]).toBe(hashes[0]);
    // One request on rank 1 alone: rank 0 is woken for the wave.
    const lone = await frontend.add(1, input(6));
    await frontend.finished(lone, 10_000);
    expect(frontend.tokensOf(lone)).toHaveLength(6);
    expect(frontend.enginesOf(lone)).toEqual([1]);
    expect(frontend.wavesSent[0]).toMatchObject({ to: 0, wave: 0, exclude: 1 });
    // Every rank reports the end of wave 0 (a wake on the race of a wave_complete read before the
    // other rank's last output may add later waves).
    await frontend.until(
      () =>
        new Set(frontend.waveCompletes.filter((w) => w.wave === 0).map((w) => w.engine)).size === 2,
      'wave_complete 0 from both ranks',
      10_000,
    );
    // Then requests on both ranks, placed by the frontend: each answered by its own rank, the
    // same prompt and seed giving the same tokens on either.
    const ids = await Promise.all([0, 1, null, null].map((rank) => frontend.add(rank, input(5))));
    for (const id of ids) await frontend.finished(id, 10_000);
    for (const id of ids) expect(frontend.enginesOf(id)).toEqual([frontend.ownerOf(id)]);
    const first = frontend.tokensOf(ids[0]!);
    for (const id of ids) expect(frontend.tokensOf(id)).toEqual(first);
    const replies = await frontend.callAll('is_scheduler_paused');
    expect(replies).toHaveLength(2);
    expect(frontend.errors).toEqual([]);
  });

  it('a frontend that never wakes the other rank gets no output (the group waits for it)', {
    timeout: 90_000,
  }, async () => {
    const frontend = await frontendWithEngines(false);
    const id = await frontend.add(0, input(3));
    await expect(frontend.finished(id, 800)).rejects.toBeInstanceOf(MirrorTimeoutError);
    expect(frontend.outputsOf(id)).toEqual([]);
    await frontend.startDpWave(1, 0, 0);
    await frontend.finished(id, 10_000);
    expect(frontend.tokensOf(id)).toHaveLength(3);
  });
});
