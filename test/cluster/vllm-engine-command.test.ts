import { describe, expect, it } from 'vitest';
import { engineHelp, parseEngineArgs } from '../../src/cluster/vllm-engine-command.js';

function errorOf(argv: string[]): { code: string; param: string | null } {
  try {
    parseEngineArgs(argv);
  } catch (e) {
    return e as { code: string; param: string | null };
  }
  throw new Error('parsed');
}

describe('ringserve engine flags', () => {
  it('takes its own flags and the simulator flags', () => {
    const a = parseEngineArgs([
      '--vllm-protocol',
      '--data-parallel-address=::1',
      '--data-parallel-rpc-port',
      '4242',
      '--model',
      'tiny',
      '--max-speed',
      '--seed',
      '7',
      '--enable-return-routed-experts',
      '--enable-return-sampling-mask',
      '--vllm-version',
      '0.28',
    ]);
    expect(a).toMatchObject({
      host: '::1',
      port: 4242,
      returnRoutedExperts: true,
      returnSamplingMask: true,
    });
    expect(a.layout.name).toBe('0.28');
    expect(a.config).toMatchObject({ model: 'tiny', maxSpeed: true, seed: 7 });
  });

  it('defaults: 127.0.0.1:29550, the newest layout, no routing rows, no masks', () => {
    const a = parseEngineArgs(['--vllm-protocol']);
    expect(a).toMatchObject({ host: '127.0.0.1', port: 29550 });
    expect(a.layout.name).toBe('0.33');
    expect(a.returnRoutedExperts).toBe(false);
    expect(a.returnSamplingMask).toBe(false);
  });

  it('a bad flag is an error naming it', () => {
    expect(errorOf([])).toMatchObject({ code: 'RS_ERR_CONFIG_INVALID', param: '--vllm-protocol' });
    expect(errorOf(['--vllm-protocol', '--port', '1'])).toMatchObject({ param: '--port' });
    expect(errorOf(['--vllm-protocol', '--data-parallel-rpc-port', '0'])).toMatchObject({
      param: '--data-parallel-rpc-port',
    });
    expect(errorOf(['--vllm-protocol', '--vllm-version', '0.1'])).toMatchObject({
      param: '--vllm-version',
    });
    expect(errorOf(['--vllm-protocol', '--model', 'nope'])).toMatchObject({ param: '--model' });
    // vLLM's sampling masks came with 0.28: an older layout has no field for them.
    expect(
      errorOf(['--vllm-protocol', '--vllm-version', '0.26', '--enable-return-sampling-mask']),
    ).toMatchObject({ param: '--enable-return-sampling-mask' });
    expect(
      errorOf(['--vllm-protocol', '--kv-transfer-config', '{"kv_connector":"P2pNcclConnector"}']),
    ).toMatchObject({ param: '--kv-transfer-config' });
  });

  it("--kv-transfer-config: vLLM's NixlConnector JSON, and the modelled bandwidth", () => {
    const a = parseEngineArgs([
      '--vllm-protocol',
      '--kv-transfer-config',
      '{"kv_connector":"NixlConnector","kv_role":"kv_both","engine_id":"p-0"}',
      '--kv-transfer-bandwidth-gbs',
      '50',
    ]);
    expect(a.nixl).toMatchObject({ engineId: 'p-0', role: 'kv_both', failurePolicy: 'fail' });
    expect(a.config.kvTransferBandwidthGbs).toBe(50);
    expect(parseEngineArgs(['--vllm-protocol']).nixl).toBeNull();
  });

  it('--help lists both kinds of flags', () => {
    const help = engineHelp();
    for (const flag of [
      '--vllm-protocol',
      '--data-parallel-rpc-port',
      '--model',
      '--max-speed',
      '--kv-transfer-config',
    ]) {
      expect(help).toContain(flag);
    }
  });
});
