/**
 * `ringserve engine`'s data-parallel flags (vLLM's names): --data-parallel-size,
 * --data-parallel-start-rank (alias --data-parallel-rank), --data-parallel-size-local (only 1),
 * --dp-sync-interval; and where a MoE rank's group forms from the init message.
 */
import { describe, expect, it } from 'vitest';
import {
  dpGroupAddress,
  engineHelp,
  nixlOfRank,
  parseEngineArgs,
} from '../../../src/cluster/vllm-engine-command.js';

function errorOf(fn: () => unknown): { code: string; param: string | null; message: string } {
  try {
    fn();
  } catch (e) {
    return e as { code: string; param: string | null; message: string };
  }
  throw new Error('no error');
}

describe('ringserve engine: data-parallel flags', () => {
  it('defaults: one rank, rank 0, the sync interval of vLLM (16)', () => {
    expect(parseEngineArgs(['--vllm-protocol']).dp).toEqual({ size: 1, rank: 0, syncInterval: 16 });
  });

  it("vLLM's names, the rank under either spelling", () => {
    const a = parseEngineArgs([
      '--vllm-protocol',
      '--data-parallel-size',
      '4',
      '--data-parallel-start-rank=2',
      '--data-parallel-size-local',
      '1',
      '--dp-sync-interval',
      '8',
      '--model',
      'tiny',
    ]);
    expect(a.dp).toEqual({ size: 4, rank: 2, syncInterval: 8 });
    expect(a.config.model).toBe('tiny');
    const b = parseEngineArgs([
      '--vllm-protocol',
      '--data-parallel-size=2',
      '--data-parallel-rank',
      '1',
    ]);
    expect(b.dp).toMatchObject({ size: 2, rank: 1 });
    // The same value under both spellings is fine; different ones are not.
    const c = parseEngineArgs([
      '--vllm-protocol',
      '--data-parallel-size=3',
      '--data-parallel-rank=2',
      '--data-parallel-start-rank=2',
    ]);
    expect(c.dp.rank).toBe(2);
    expect(
      errorOf(() =>
        parseEngineArgs([
          '--vllm-protocol',
          '--data-parallel-size=3',
          '--data-parallel-start-rank=1',
          '--data-parallel-rank=2',
        ]),
      ),
    ).toMatchObject({ code: 'RS_ERR_CONFIG_INVALID', param: '--data-parallel-rank' });
  });

  it('a bad value is RS_ERR_CONFIG_INVALID naming the flag', () => {
    const bad = (...argv: string[]) => errorOf(() => parseEngineArgs(['--vllm-protocol', ...argv]));
    expect(bad('--data-parallel-size', '0')).toMatchObject({
      code: 'RS_ERR_CONFIG_INVALID',
      param: '--data-parallel-size',
    });
    expect(bad('--data-parallel-size', 'two')).toMatchObject({ param: '--data-parallel-size' });
    expect(bad('--data-parallel-start-rank', '2', '--data-parallel-size', '2')).toMatchObject({
      param: '--data-parallel-start-rank',
    });
    expect(bad('--data-parallel-rank', '1')).toMatchObject({ param: '--data-parallel-rank' });
    expect(bad('--data-parallel-start-rank', '-1')).toMatchObject({
      param: '--data-parallel-start-rank',
    });
    expect(bad('--data-parallel-size-local', '2', '--data-parallel-size', '2')).toMatchObject({
      param: '--data-parallel-size-local',
    });
    expect(bad('--data-parallel-size-local', '0')).toMatchObject({
      param: '--data-parallel-size-local',
    });
    expect(bad('--dp-sync-interval', '0')).toMatchObject({ param: '--dp-sync-interval' });
    expect(bad('--dp-sync-interval')).toMatchObject({ param: '--dp-sync-interval' });
  });

  it('--help lists them', () => {
    const help = engineHelp();
    for (const flag of [
      '--data-parallel-size',
      '--data-parallel-start-rank',
      '--data-parallel-rank',
      '--data-parallel-size-local',
      '--dp-sync-interval',
    ]) {
      expect(help).toContain(flag);
    }
  });
});

describe("a MoE rank's group address", () => {
  const dp = { size: 2, rank: 1, syncInterval: 16 };
  const pc = { masterIp: '10.1.2.3', masterPort: 29500, masterPortList: [41000, 41001], size: 2 };

  it("the master ip, and the port vLLM pops from the list's end (else the master port)", () => {
    expect(dpGroupAddress(pc, dp)).toEqual({ host: '10.1.2.3', port: 41001 });
    expect(dpGroupAddress({ ...pc, masterPortList: [] }, dp)).toEqual({
      host: '10.1.2.3',
      port: 29500,
    });
    expect(dpGroupAddress({ ...pc, size: 0 }, dp).port).toBe(41001);
  });

  it('no address, another DP size, or no TCP port: a handshake error saying so', () => {
    expect(errorOf(() => dpGroupAddress(null, dp))).toMatchObject({
      code: 'RS_ERR_VLLM_HANDSHAKE',
    });
    expect(errorOf(() => dpGroupAddress(null, dp)).message).toMatch(/no DP master address/);
    expect(errorOf(() => dpGroupAddress({ ...pc, size: 4 }, dp)).message).toMatch(
      /data_parallel_size 4 differs from --data-parallel-size 2/,
    );
    expect(errorOf(() => dpGroupAddress({ ...pc, masterPortList: [70000] }, dp)).code).toBe(
      'RS_ERR_VLLM_HANDSHAKE',
    );
  });
});

describe("a DP rank's NIXL side (vLLM: engine_id + _dp<rank>, side channel port + rank)", () => {
  const nixl = parseEngineArgs([
    '--vllm-protocol',
    '--kv-transfer-config',
    '{"kv_connector":"NixlConnector","engine_id":"p","kv_connector_extra_config":{"side_channel_port":5600}}',
  ]).nixl!;

  it('unchanged for one rank; suffixed and offset for a DP rank, even rank 0', () => {
    expect(nixlOfRank(nixl, { size: 1, rank: 0, syncInterval: 16 })).toBe(nixl);
    expect(nixlOfRank(nixl, { size: 2, rank: 0, syncInterval: 16 })).toMatchObject({
      engineId: 'p_dp0',
      sideChannelPort: 5600,
    });
    expect(nixlOfRank(nixl, { size: 4, rank: 3, syncInterval: 16 })).toMatchObject({
      engineId: 'p_dp3',
      sideChannelPort: 5603,
    });
    expect(
      nixlOfRank({ ...nixl, sideChannelPort: 0 }, { size: 2, rank: 1, syncInterval: 16 })
        .sideChannelPort,
    ).toBe(0);
    expect(
      errorOf(() =>
        nixlOfRank({ ...nixl, sideChannelPort: 65535 }, { size: 2, rank: 1, syncInterval: 16 }),
      ),
    ).toMatchObject({ param: '--kv-transfer-config' });
  });
});
