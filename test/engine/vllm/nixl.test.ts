/**
 * The headless engine's NIXL side (src/engine/vllm/headless/nixl-*.ts) without processes:
 * --kv-transfer-config parsing; what a request's kv_transfer_params ask (a prefill leg, a complete
 * decode handle, an incomplete one computed locally); the prefill's handle after its step; a
 * decode connector reading it over the side channel, the checks (engine id, request id, blocks,
 * lease) and the release once done.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StepOutputs } from '../../../src/engine/step-outputs.js';
import { LiveRequests } from '../../../src/engine/vllm/headless/live-requests.js';
import { parseKvTransferConfig } from '../../../src/engine/vllm/headless/nixl-config.js';
import {
  type HeldKv,
  type KvHolder,
  NixlConnector,
} from '../../../src/engine/vllm/headless/nixl-connector.js';
import { encodeKvParams } from '../../../src/engine/vllm/kv-params.js';
import { FinishReason } from '../../../src/wire/types.js';
import { until } from '../../until.js';

const LOG = { warn: () => {} };
const opened: NixlConnector[] = [];

afterEach(() => {
  for (const c of opened.splice(0)) c.close();
});

class FakeHolder implements KvHolder {
  held: HeldKv | null = null;
  released: number[] = [];
  heldKv(): HeldKv | null {
    return this.held;
  }
  releaseHeldKv(id: number): boolean {
    this.released.push(id);
    return true;
  }
}

async function connector(engineId: string, holder: KvHolder = new FakeHolder(), lease = 30) {
  const config = parseKvTransferConfig(
    JSON.stringify({
      kv_connector: 'NixlConnector',
      kv_role: 'kv_both',
      engine_id: engineId,
      kv_connector_extra_config: { side_channel_port: 0, kv_lease_s: lease },
    }),
    {},
  );
  const c = await NixlConnector.start(config, holder, LOG);
  opened.push(c);
  return c;
}

/** A prefill that finished LENGTH in slot 0 of `table`, after the connector's step hook. */
function finishPrefill(c: NixlConnector, table: LiveRequests, id: string) {
  const live = table.add(id, 40, false, false);
  live.remoteDecode = c.plan(encodeKvParams({ do_remote_decode: true }), id).remoteDecode;
  const out = new StepOutputs(2);
  const row = out.addRow(0, live.slot, 0);
  out.token[row] = 5;
  out.finish[row] = FinishReason.Length;
  c.afterStep(out, table);
  return live.kvTransferParams!;
}

describe('--kv-transfer-config', () => {
  it("reads vLLM's keys, defaults and variables; a bad value names the key", () => {
    const c = parseKvTransferConfig('{"kv_connector":"NixlConnector","kv_role":"kv_both"}', {
      VLLM_NIXL_SIDE_CHANNEL_PORT: '5700',
    });
    expect(c).toMatchObject({
      role: 'kv_both',
      failurePolicy: 'fail',
      leaseS: 30,
      sideChannelHost: '127.0.0.1',
      sideChannelPort: 5700,
    });
    expect(c.engineId.length).toBeGreaterThan(0);
    const r = parseKvTransferConfig(
      '{"kv_connector":"NixlConnector","kv_connector_extra_config":{"kv_load_failure_policy":"recompute"}}',
      {},
    );
    expect(r.failurePolicy).toBe('recompute');
    expect(r.sideChannelPort).toBe(5600);
    const bad = [
      ['{"kv_connector":"LMCacheConnectorV1"}', /kv_connector/],
      ['{"kv_connector":"NixlConnector","kv_role":"both"}', /kv_role/],
      [
        '{"kv_connector":"NixlConnector","kv_load_failure_policy":"retry"}',
        /kv_load_failure_policy/,
      ],
      [
        '{"kv_connector":"NixlConnector","kv_connector_extra_config":{"kv_lease_s":0}}',
        /kv_lease_s/,
      ],
      ['[1]', /JSON/],
    ] as const;
    for (const [json, why] of bad) {
      expect(() => parseKvTransferConfig(json, {})).toThrow(/--kv-transfer-config/);
      expect(() => parseKvTransferConfig(json, {})).toThrow(why);
    }
  });
});

describe('NixlConnector', () => {
  it('tells a prefill leg, a complete decode handle and an incomplete one apart', async () => {
    const c = await connector('e-1');
    expect(c.plan(null, 'r')).toEqual({ remoteDecode: false, handle: null });
    expect(c.plan(encodeKvParams({ do_remote_decode: true }), 'r').remoteDecode).toBe(true);
    const handle = {
      do_remote_prefill: true,
      remote_block_ids: [[1, 2]],
      remote_engine_id: 'p',
      remote_request_id: 'x',
      remote_host: '127.0.0.1',
      remote_port: 7,
    };
    expect(c.plan(encodeKvParams(handle), 'r').handle).toEqual({
      engineId: 'p',
      requestId: 'x',
      host: '127.0.0.1',
      port: 7,
      blockIds: [[1, 2]],
    });
    // vLLM's connector needs all five keys, else it computes the prompt itself.
    const { remote_port: _, ...incomplete } = handle;
    expect(c.plan(encodeKvParams(incomplete), 'r').handle).toBeNull();
  });

  it('a decode engine reads a prefill handle once, checked; done frees the blocks', async () => {
    const holder = new FakeHolder();
    holder.held = {
      id: 42,
      blockIds: [7, 8, 9],
      numTokens: 40,
      untilMs: performance.now() + 60_000,
    };
    const prefill = await connector('prefill-1', holder);
    const decode = await connector('decode-1');
    const handle = finishPrefill(prefill, new LiveRequests(8), 'req-1');
    expect(handle).toMatchObject({
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: [[7, 8, 9]],
      remote_engine_id: 'prefill-1',
      remote_request_id: 'req-1',
      remote_host: '127.0.0.1',
      remote_port: prefill.port,
      tp_size: 1,
    });
    const plan = decode.plan(encodeKvParams(handle), 'd-1').handle!;
    expect(await decode.load({ ...plan, engineId: 'other' })).toMatchObject({ ok: false });
    expect(await decode.load({ ...plan, requestId: 'req-2' })).toMatchObject({ ok: false });
    expect(await decode.load({ ...plan, blockIds: [[7, 8]] })).toMatchObject({ ok: false });
    expect(await decode.load(plan)).toEqual({ ok: true, numTokens: 40 });
    decode.done(plan);
    const released = await until(
      () => holder.released,
      (ids) => ids.length > 0,
      { what: 'the prefill blocks to be released' },
    );
    expect(released).toEqual([42]);
    const again = await decode.load(plan);
    expect(again).toMatchObject({ ok: false, why: expect.stringMatching(/holds no KV/) });
    // Nothing listens there: a failed load, well within its bound.
    expect(await decode.load({ ...plan, port: 1 })).toMatchObject({ ok: false });
  });

  it('a pin past its lease is refused and freed', async () => {
    const holder = new FakeHolder();
    holder.held = { id: 9, blockIds: [1], numTokens: 10, untilMs: performance.now() - 1 };
    const prefill = await connector('prefill-2', holder);
    const decode = await connector('decode-2');
    const handle = finishPrefill(prefill, new LiveRequests(8), 'req-9');
    const load = await decode.load(decode.plan(encodeKvParams(handle), 'd').handle!);
    expect(load).toMatchObject({ ok: false, why: expect.stringMatching(/expired/) });
    expect(holder.released).toEqual([9]);
  });
});
