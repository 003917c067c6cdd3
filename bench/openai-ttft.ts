/**
 * The OpenAI chat route against the token-in generate route, on one real cluster in one run:
 *   1. Time to first token for a 4k-token prompt, streamed: the chat route (messages -> chat
 *      template -> tokenizer pool -> engine -> output worker detokenizes -> SSE chunk) against
 *      /inference/v1/generate given the same prompt's token ids. Requests alternate, one at a time,
 *      each with its own cache_salt so no prefix-cache hit favours either; TTFT is send -> first
 *      body bytes holding a token (the chat route's role chunk comes in the same write).
 *   2. The API server's main-thread heap (as it publishes it in the region) idle, and with 100
 *      chat streams in flight, then with 100 generate streams for comparison.
 * Prints a table and, with --json, a last line of one JSON object.
 *
 *   npm run bench:openai-ttft -- [--json] [--requests 12] [--prompt-tokens 4096] [--streams 100]
 */
import { setMaxListeners } from 'node:events';
import { request } from 'undici';
import { ExitCode, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { HEALTH_HEAP_USED, healthIndex } from '../src/shm/layout.js';
import { openRegion, type Region } from '../src/shm/region.js';
import { tokenizerForModel } from '../src/tokenizer/presets.js';
import { type BenchCluster, startCluster } from './loadtest/cluster.js';

const MODEL = 'qwen3-30b-a3b';

interface Args {
  json: boolean;
  requests: number;
  promptTokens: number;
  streams: number;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { json: false, requests: 12, promptTokens: 4096, streams: 100 };
  const numeric: Record<string, keyof Args> = {
    '--requests': 'requests',
    '--prompt-tokens': 'promptTokens',
    '--streams': 'streams',
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const key = numeric[a];
    if (a === '--json') args.json = true;
    else if (key !== undefined) {
      const v = Number(argv[++i]);
      if (!(Number.isInteger(v) && v > 0))
        throw new RS_ERR_CONFIG_INVALID(a, 'must be an integer > 0');
      (args as unknown as Record<string, number>)[key] = v;
    } else throw new RS_ERR_CONFIG_INVALID(a, 'unknown argument');
  }
  return args;
}

/** A user message whose rendered chat prompt is `tokens` long, and that prompt's ids. */
async function fourKPrompt(tokens: number): Promise<{ content: string; ids: number[] }> {
  const tokenizer = await tokenizerForModel(MODEL);
  const words = 'the answer step result value check total number because therefore sum'.split(' ');
  const render = (content: string): Int32Array =>
    tokenizer.encode(tokenizer.applyChatTemplate([{ role: 'user', content }], {}), {
      addSpecialTokens: false,
    });
  let content = '';
  for (let i = 0; render(content).length < tokens; i++)
    content += ` ${words[(i * 7) % words.length]}${i % 97}`;
  while (render(content).length > tokens) content = content.slice(0, -1);
  return { content, ids: Array.from(render(content)) };
}

interface Route {
  path: string;
  body(salt: string, maxTokens: number): Record<string, unknown>;
}

function routes(prompt: { content: string; ids: number[] }): Record<'chat' | 'generate', Route> {
  return {
    chat: {
      path: '/v1/chat/completions',
      body: (salt, maxTokens) => ({
        model: MODEL,
        messages: [{ role: 'user', content: prompt.content }],
        max_completion_tokens: maxTokens,
        ignore_eos: true,
        stream: true,
        cache_salt: salt,
      }),
    },
    generate: {
      path: '/inference/v1/generate',
      body: (salt, maxTokens) => ({
        token_ids: prompt.ids,
        sampling_params: { max_tokens: maxTokens, ignore_eos: true },
        stream: true,
        cache_salt: salt,
      }),
    },
  };
}

/** Send -> first body bytes holding a token, ms; the rest of the stream is read and dropped. */
async function ttft(url: string, route: Route, salt: string): Promise<number> {
  const t0 = performance.now();
  const res = await request(url + route.path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(route.body(salt, 4)),
  });
  let first = -1;
  for await (const chunk of res.body) {
    if (first < 0 && (chunk as Buffer).includes('data: {')) first = performance.now() - t0;
  }
  if (res.statusCode !== 200 || first < 0)
    throw new Error(`${route.path} answered ${res.statusCode}`);
  return first;
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

function heapMb(region: Region): number {
  return region.f64[healthIndex(region.params, 0) + HEALTH_HEAP_USED]! / 1024 / 1024;
}

/** Opens `count` long streams on `route`, waits until each has a token, reads the heap, aborts. */
async function heapWithStreams(
  cluster: BenchCluster,
  region: Region,
  route: Route,
  count: number,
): Promise<{ heapMb: number; peakMb: number }> {
  const controller = new AbortController();
  // One signal for every stream: each request listens to it.
  setMaxListeners(count + 10, controller.signal);
  let started = 0;
  const streams = Array.from({ length: count }, async (_, i) => {
    const res = await request(cluster.url + route.path, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(route.body(`heap-${i}-${Math.random()}`, 4000)),
      signal: controller.signal,
    });
    let counted = false;
    for await (const chunk of res.body) {
      if (!counted && (chunk as Buffer).includes('data: {')) {
        counted = true;
        started++;
      }
    }
  });
  const deadline = performance.now() + 120_000;
  while (started < count && performance.now() < deadline) await sleep(50);
  // A few publishes of the heap (every 100 ms) with every stream flowing.
  let peak = 0;
  for (let k = 0; k < 20; k++) {
    await sleep(100);
    peak = Math.max(peak, heapMb(region));
  }
  const now = heapMb(region);
  controller.abort();
  await Promise.allSettled(streams);
  if (started < count) throw new Error(`only ${started} of ${count} streams started`);
  await sleep(1000);
  return { heapMb: now, peakMb: peak };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const prompt = await fourKPrompt(args.promptTokens);
  const cluster = await startCluster(['--model', MODEL, '--max-num-seqs', '256']);
  try {
    const region = openRegion(cluster.regionName()!);
    const r = routes(prompt);
    const times: Record<'chat' | 'generate', number[]> = { chat: [], generate: [] };
    // Two warm-up rounds (JIT, the tokenizer pool's first task), then alternate.
    for (let i = -2; i < args.requests; i++) {
      for (const name of ['chat', 'generate'] as const) {
        const ms = await ttft(cluster.url, r[name], `ttft-${name}-${i}`);
        if (i >= 0) times[name].push(ms);
      }
    }
    await sleep(1500);
    const idle = heapMb(region);
    const chat = await heapWithStreams(cluster, region, r.chat, args.streams);
    const generate = await heapWithStreams(cluster, region, r.generate, args.streams);
    const rows = (['chat', 'generate'] as const).map((name) => ({
      route: r[name].path,
      ttft_p50_ms: quantile(times[name], 0.5),
      ttft_p90_ms: quantile(times[name], 0.9),
      ttft_max_ms: Math.max(...times[name]),
      heap_idle_mb: idle,
      heap_in_flight_mb: name === 'chat' ? chat.heapMb : generate.heapMb,
      heap_peak_mb: name === 'chat' ? chat.peakMb : generate.peakMb,
    }));
    console.log(
      `prompt ${prompt.ids.length} tokens (${MODEL}), ${args.requests} requests per route, ` +
        `${args.streams} streams in flight for the heap`,
    );
    console.table(
      rows.map((row) =>
        Object.fromEntries(
          Object.entries(row).map(([k, v]) => [
            k,
            typeof v === 'number' ? Number(v.toFixed(1)) : v,
          ]),
        ),
      ),
    );
    if (args.json) {
      console.log(
        JSON.stringify({ prompt_tokens: prompt.ids.length, streams: args.streams, rows }),
      );
    }
  } finally {
    await cluster.stop();
  }
}

main().catch((error: unknown) => {
  console.error(`bench:openai-ttft failed: ${(error as Error).stack ?? String(error)}`);
  process.exit(ExitCode.Failure);
});
