/**
 * The DP parts of the vLLM protocol codec: the init message's parallel_config (vLLM's four DP keys
 * for a MoE group, `{}` otherwise), START_DP_WAVE's `[wave, exclude | nil]`, and the
 * EngineCoreOutputs that carry wave_complete / start_wave. Bytes are checked with msgpackr (an
 * independent decoder), decoding with the codec's own readers.
 */
import { unpack } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import {
  decodeInit,
  decodeStartDpWave,
  encodeInit,
  encodeStartDpWave,
  encodeWaveMessage,
  VLLM_LAYOUTS,
} from '../../../src/engine/vllm/index.js';
import { MsgWriter } from '../../../src/engine/vllm/msgpack-writer.js';
import { writeAny } from '../../../src/engine/vllm/values.js';

const ADDRESSES = { inputs: ['tcp://127.0.0.1:1'], outputs: ['tcp://127.0.0.1:2'] };
const GROUP = {
  masterIp: '10.0.0.1',
  masterPort: 29501,
  masterPortList: [40001, 40002, 40003, 40004],
  size: 4,
};

/** An init message written by hand: `parallel_config` as given. */
function initWith(parallelConfig: unknown): Buffer {
  const w = new MsgWriter(256);
  writeAny(
    w,
    {
      addresses: {
        inputs: ADDRESSES.inputs,
        outputs: ADDRESSES.outputs,
        coordinator_input: null,
        coordinator_output: null,
        frontend_stats_publish_address: null,
      },
      parallel_config: parallelConfig,
    },
    'init',
  );
  return w.toBuffer();
}

function errorOf(fn: () => unknown): { code: string; param: string | null; message: string } {
  try {
    fn();
  } catch (e) {
    return e as { code: string; param: string | null; message: string };
  }
  throw new Error('no error');
}

describe('init parallel_config', () => {
  it('absent or null: `{}` on the wire, null back', () => {
    for (const parallelConfig of [undefined, null]) {
      const bytes = encodeInit({ ...ADDRESSES, parallelConfig });
      expect((unpack(bytes) as { parallel_config: unknown }).parallel_config).toEqual({});
      expect(decodeInit(bytes)).toEqual({ ...ADDRESSES, parallelConfig: null });
    }
  });

  it("a DP group: vLLM's four keys, and back", () => {
    const bytes = encodeInit({ ...ADDRESSES, parallelConfig: GROUP });
    expect((unpack(bytes) as { parallel_config: unknown }).parallel_config).toEqual({
      data_parallel_master_ip: '10.0.0.1',
      data_parallel_master_port: 29501,
      _data_parallel_master_port_list: [40001, 40002, 40003, 40004],
      data_parallel_size: 4,
    });
    expect(decodeInit(bytes).parallelConfig).toEqual(GROUP);
    const empty = encodeInit({ ...ADDRESSES, parallelConfig: { ...GROUP, masterPortList: [] } });
    expect(decodeInit(empty).parallelConfig).toEqual({ ...GROUP, masterPortList: [] });
  });

  it('unknown keys are skipped; no master port: null; missing keys: their defaults', () => {
    const decoded = decodeInit(
      initWith({
        data_parallel_master_port: 5000,
        enable_expert_parallel: true,
        data_parallel_rpc_port: 29550,
        odd: [1, { a: 2 }],
      }),
    );
    expect(decoded.parallelConfig).toEqual({
      masterIp: '127.0.0.1',
      masterPort: 5000,
      masterPortList: [],
      size: 0,
    });
    expect(decodeInit(initWith({ data_parallel_size: 2 })).parallelConfig).toBeNull();
    expect(decodeInit(initWith({})).parallelConfig).toBeNull();
  });

  it('a key of the wrong type is RS_ERR_VLLM_DECODE naming it', () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ data_parallel_master_port: '29501' }, 'data_parallel_master_port'],
      [{ data_parallel_master_port: 1, data_parallel_master_ip: 7 }, 'data_parallel_master_ip'],
      [{ data_parallel_master_port: 1, data_parallel_size: 2.5 }, 'data_parallel_size'],
      [{ data_parallel_master_port: 1, data_parallel_size: true }, 'data_parallel_size'],
      [
        { data_parallel_master_port: 1, _data_parallel_master_port_list: [1, 'x'] },
        '_data_parallel_master_port_list',
      ],
      [
        { data_parallel_master_port: 1, _data_parallel_master_port_list: 5 },
        '_data_parallel_master_port_list',
      ],
    ];
    for (const [pc, key] of cases) {
      const e = errorOf(() => decodeInit(initWith(pc)));
      expect(e.code).toBe('RS_ERR_VLLM_DECODE');
      expect(e.param).toBe(`init.parallel_config.${key}`);
    }
    expect(errorOf(() => decodeInit(initWith([1, 2]))).code).toBe('RS_ERR_VLLM_DECODE');
  });
});

describe('START_DP_WAVE', () => {
  it('[wave, exclude | nil], both ways', () => {
    for (const [wave, exclude] of [
      [0, null],
      [0, 1],
      [7, 0],
      [123456, 65535],
    ] as [number, number | null][]) {
      const bytes = encodeStartDpWave(wave, exclude);
      expect(unpack(bytes)).toEqual([wave, exclude]);
      expect(decodeStartDpWave(bytes)).toEqual({ wave, exclude });
    }
  });

  it('refuses what vLLM would not unpack', () => {
    expect(errorOf(() => encodeStartDpWave(-1, null)).code).toBe('RS_ERR_VLLM_BAD_FIELD');
    expect(errorOf(() => encodeStartDpWave(1.5, null)).code).toBe('RS_ERR_VLLM_BAD_FIELD');
    expect(errorOf(() => encodeStartDpWave(0, -2)).code).toBe('RS_ERR_VLLM_BAD_FIELD');
    const bad = (v: unknown) => {
      const w = new MsgWriter(32);
      writeAny(w, v, 'v');
      return errorOf(() => decodeStartDpWave(w.toBuffer()));
    };
    expect(bad([1])).toMatchObject({ code: 'RS_ERR_VLLM_DECODE', param: 'start_dp_wave' });
    expect(bad([1, 2, 3])).toMatchObject({ code: 'RS_ERR_VLLM_DECODE' });
    expect(bad(['1', null])).toMatchObject({ param: 'start_dp_wave.wave' });
    expect(bad([1, 'x'])).toMatchObject({ param: 'start_dp_wave.exclude_engine_index' });
  });
});

describe('wave messages', () => {
  it.each(VLLM_LAYOUTS.map((l) => [l.name, l] as const))(
    'layout %s: an EngineCoreOutputs of no outputs with wave_complete / start_wave',
    (_name, layout) => {
      const complete = unpack(
        encodeWaveMessage(layout, 3, { complete: 5, start: null }, 12.5)[0] as Buffer,
      ) as unknown[];
      expect(complete).toHaveLength(layout.outputs.length);
      const at = (f: string) => layout.outputs.indexOf(f as (typeof layout.outputs)[number]);
      expect(complete[at('engine_index')]).toBe(3);
      expect(complete[at('outputs')]).toEqual([]);
      expect(complete[at('timestamp')]).toBe(12.5);
      expect(complete[at('wave_complete')]).toBe(5);
      expect(complete[at('start_wave')]).toBeNull();
      expect(complete[at('scheduler_stats')]).toBeNull();
      expect(complete[at('utility_output')]).toBeNull();
      expect(complete[at('finished_requests')]).toBeNull();
      const both = unpack(
        encodeWaveMessage(layout, 0, { complete: 0, start: 1 }, 1)[0] as Buffer,
      ) as unknown[];
      expect([both[at('wave_complete')], both[at('start_wave')]]).toEqual([0, 1]);
      const frames = encodeWaveMessage(layout, 0, { complete: null, start: 9 }, 1);
      expect(frames).toHaveLength(1);
      const start = unpack(frames[0] as Buffer) as unknown[];
      expect([start[at('wave_complete')], start[at('start_wave')]]).toEqual([null, 9]);
    },
  );
});
