/**
 * prime-rl's client against a real cluster: ops/prime_rl_client.py makes the calls of prime-rl's
 * `utils/client.py` (init_broadcaster, update_weights with a null weight_dir, load_lora_adapter
 * then generate by the adapter's name, prefill_logprobs, generate past the context, unload) with
 * its bodies and its reading of the answers, in Python's standard library alone, sharing no code
 * with ringserve. The server answers the legacy form by default, as prime-rl's parser needs.
 */
import { spawn } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type Cluster, startCluster } from './harness.js';

const MAX_MODEL_LEN = 1024;

let cluster: Cluster;
let root: string;

beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'rs-prime-rl-'));
  cluster = await startCluster([
    '--api-server-count',
    '2',
    '--max-model-len',
    String(MAX_MODEL_LEN),
    '--generate-format',
    'legacy',
  ]);
});
afterAll(async () => {
  await cluster?.stop();
  await rm(root, { recursive: true, force: true });
});

/** Runs the client to its end (killed after `limitMs`); its exit code and output. */
function runClient(args: string[], limitMs: number): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn('python3', ['ops/prime_rl_client.py', ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
    });
    child.stderr.on('data', (b: Buffer) => {
      out += b.toString();
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), limitMs);
    child.on('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

describe("prime-rl's client calls", () => {
  it('init_broadcaster, in-memory update, LoRA by name, prefill_logprobs, past the context', async () => {
    const adapter = join(root, 'policy');
    await mkdir(adapter, { recursive: true });
    await writeFile(join(adapter, 'adapter_config.json'), JSON.stringify({ r: 8, lora_alpha: 16 }));
    await writeFile(join(adapter, 'adapter_model.safetensors'), 'step-1 weights');
    const { code, out } = await runClient(
      ['--url', cluster.url, '--adapter-dir', adapter, '--max-model-len', String(MAX_MODEL_LEN)],
      60_000,
    );
    const last = out.trim().split('\n').at(-1) ?? '';
    expect(out).not.toContain('FAIL');
    expect(code, out).toBe(0);
    expect(JSON.parse(last)).toEqual({
      ok: true,
      prompt_logprobs: 64,
      completion_past_context: MAX_MODEL_LEN - 64,
    });
  }, 90_000);
});
