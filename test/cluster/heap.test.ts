/**
 * The design's central promise: per-token data never becomes objects on the API server's main
 * thread. 100 in-flight 10k-token requests with sampling masks and routing rows (qwen3 preset:
 * 48 layers x 8 experts a row, ~3.8 MB of routing per request) raise the main thread's heap by
 * less than 32 MB. The heap figure is the one the API server publishes into its server block.
 */
import { request } from 'undici';
import { expect, it } from 'vitest';
import { startCluster } from './harness.js';

const REQUESTS = 100;
const TOKENS = 10_000;
const MB = 1024 * 1024;

it('100 in-flight 10k-token requests with masks and routing raise the main-thread heap by < 32 MB', async () => {
  const cluster = await startCluster([
    '--max-speed',
    '--api-server-count',
    '1',
    '--num-gpu-blocks',
    '200000',
  ]);
  try {
    const body = (seed: number, maxTokens: number) =>
      JSON.stringify({
        token_ids: Array.from({ length: 64 }, (_, i) => (i * 7919 + seed) % 151_000),
        sampling_params: {
          max_tokens: maxTokens,
          ignore_eos: true,
          seed,
          temperature: 1,
          top_p: 0.97,
          top_k: 512,
          logprobs: 1,
          return_sampling_mask: true,
          return_routed_experts: true,
        },
      });
    const send = async (seed: number, maxTokens: number): Promise<number> => {
      const res = await request(`${cluster.url}/inference/v1/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: body(seed, maxTokens),
      });
      expect(res.statusCode).toBe(200);
      let bytes = 0;
      for await (const chunk of res.body) bytes += (chunk as Buffer).length;
      return bytes;
    };
    for (let i = 0; i < 4; i++) await send(1000 + i, 200); // warm up every path
    await new Promise((r) => setTimeout(r, 300));
    const baseline = cluster.serverHeap(0);
    let peak = baseline;
    let peakInFlight = 0;
    const sampler = setInterval(() => {
      peak = Math.max(peak, cluster.serverHeap(0));
      peakInFlight = Math.max(peakInFlight, cluster.serverInFlight(0));
    }, 25);
    const sizes = await Promise.all(Array.from({ length: REQUESTS }, (_, i) => send(i, TOKENS)));
    clearInterval(sampler);
    // Every response really carried its payload: > 384 B/token of routing alone, base64-encoded.
    for (const size of sizes) expect(size).toBeGreaterThan(TOKENS * 384);
    expect(peakInFlight).toBe(REQUESTS);
    const rise = (peak - baseline) / MB;
    console.log(
      `main-thread heap: baseline ${(baseline / MB).toFixed(1)} MB, peak ${(peak / MB).toFixed(1)} MB, rise ${rise.toFixed(1)} MB`,
    );
    expect(rise).toBeLessThan(32);
  } finally {
    await cluster.stop();
  }
}, 180_000);
