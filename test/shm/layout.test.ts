import { describe, expect, it } from 'vitest';
import * as layout from '../../src/shm/layout.js';

const {
  CACHE_LINE_BYTES,
  DEFAULT_LAYOUT_PARAMS,
  outputRingOffset,
  regionBytes,
  requestRingOffset,
  resolveLayoutParams,
  serverBlockOffset,
  serverMetricsOffset,
} = layout;

describe('layout', () => {
  it('starts every block on a cache line, in order, without overlap', () => {
    const params = resolveLayoutParams({
      apiServerCount: 3,
      requestRingBytes: 4096,
      outputRingBytes: 65536,
    });
    const fixed = [
      layout.ENGINE_BLOCK,
      layout.ENGINE_DOORBELL,
      layout.ENGINE_STATS,
      layout.CONTROL_BLOCK,
      layout.ENGINE_HEALTH,
      layout.ENGINE_NOTE,
      layout.DP_RANK_BLOCK,
      layout.DP_RANK_STATS,
      layout.SERVERS_START,
    ];
    const blocks: Array<[number, number]> = [
      [0, layout.HEADER_BYTES],
      [layout.ENGINE_BLOCK, 64],
      [layout.ENGINE_DOORBELL, 64],
      [layout.ENGINE_STATS, layout.STATS_SLOT_COUNT * 8],
      [layout.CONTROL_BLOCK, layout.CONTROL_BYTES],
      [layout.ENGINE_HEALTH, layout.HEALTH_SLOT_COUNT * 8],
      [layout.ENGINE_NOTE, layout.ENGINE_NOTE_BYTES],
      [layout.DP_RANK_BLOCK, layout.DP_RANK_BLOCK_BYTES],
    ];
    for (let k = 0; k < params.apiServerCount; k++) {
      blocks.push([serverBlockOffset(params, k), layout.SERVER_BLOCK_BYTES]);
      blocks.push([
        requestRingOffset(params, k),
        layout.RING_HEADER_BYTES + params.requestRingBytes,
      ]);
      blocks.push([outputRingOffset(params, k), layout.RING_HEADER_BYTES + params.outputRingBytes]);
      fixed.push(serverMetricsOffset(params, k));
    }
    let end = 0;
    for (const [start, bytes] of blocks) {
      expect(start % CACHE_LINE_BYTES).toBe(0);
      expect(start).toBe(end); // contiguous and in order: no overlap, no hole
      end = start + bytes;
    }
    expect(end).toBe(regionBytes(params));
    for (const offset of fixed) expect(offset % CACHE_LINE_BYTES).toBe(0);
  });

  it('puts ring head, tail and doorbell on separate cache lines', () => {
    const line = (offset: number) => Math.floor(offset / CACHE_LINE_BYTES);
    const lines = new Set([
      line(layout.RING_HEAD),
      line(layout.RING_TAIL),
      line(layout.RING_DOORBELL),
    ]);
    expect(lines.size).toBe(3);
    expect(line(layout.RING_PRODUCER_WAITING)).toBe(line(layout.RING_HEAD));
    expect(line(layout.RING_CONSUMER_PID)).toBe(line(layout.RING_TAIL));
    expect(line(layout.CTL_ACK_SEQ)).not.toBe(line(layout.CTL_CMD_SEQ));
    expect(layout.CTL_CMD_TEXT + layout.CTL_TEXT_CAPACITY).toBeLessThanOrEqual(layout.CTL_ACK_SEQ);
  });

  it('names distinct stats slots inside the 64-slot block', () => {
    const slots = Object.entries(layout)
      .filter(([key]) => key.startsWith('STAT_'))
      .map(([, value]) => value as number);
    expect(new Set(slots).size).toBe(slots.length);
    for (const slot of slots) expect(slot >= 0 && slot < layout.STATS_SLOT_COUNT).toBe(true);
    expect(layout.engineStatOffset(layout.STAT_STEP_COUNT)).toBe(layout.ENGINE_STATS + 9 * 8);
  });

  it('holds MAX_DP_RANKS rows of RANK_STAT_SLOTS distinct named slots, one cache line each', () => {
    expect(layout.MAX_DP_RANKS).toBe(256);
    expect(layout.RANK_STAT_SLOTS).toBe(8);
    expect(layout.RANK_STAT_SLOTS * 8).toBe(CACHE_LINE_BYTES);
    const named = [
      layout.RANK_UP,
      layout.RANK_RUNNING,
      layout.RANK_WAITING,
      layout.RANK_KV_USAGE,
      layout.RANK_PROMPT_TOKENS,
      layout.RANK_GENERATION_TOKENS,
      layout.RANK_PREFIX_QUERIES,
      layout.RANK_PREFIX_HITS,
    ];
    expect(named).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    const rows = layout.MAX_DP_RANKS * layout.RANK_STAT_SLOTS * 8;
    expect(layout.DP_RANK_STATS + rows).toBe(layout.DP_RANK_BLOCK + layout.DP_RANK_BLOCK_BYTES);
    expect(layout.DP_RANK_COUNT).toBe(layout.DP_RANK_BLOCK);
    expect(layout.DP_RANK_STATS_INDEX).toBe(layout.DP_RANK_STATS >> 3);
  });

  it('defaults to one server with 4 MiB request and 64 MiB output rings, and validates', () => {
    expect(resolveLayoutParams()).toEqual(DEFAULT_LAYOUT_PARAMS);
    expect(DEFAULT_LAYOUT_PARAMS.requestRingBytes).toBe(4 * 1024 * 1024);
    expect(DEFAULT_LAYOUT_PARAMS.outputRingBytes).toBe(64 * 1024 * 1024);
    const bad = expect.objectContaining({ code: 'RS_ERR_SHM_BAD_LAYOUT' });
    expect(() => resolveLayoutParams({ apiServerCount: 0 })).toThrow(bad);
    expect(() => resolveLayoutParams({ requestRingBytes: 5000 })).toThrow(bad);
    expect(() => resolveLayoutParams({ outputRingBytes: 2 ** 31 })).toThrow(bad);
    expect(() => serverBlockOffset(DEFAULT_LAYOUT_PARAMS, 1)).toThrow(bad);
  });
});
