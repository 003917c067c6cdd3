/**
 * The load generator, a process of its own (forked by a benchmark, never sharing an event loop
 * with the probes or the cluster): a closed loop of `concurrency` workers over one undici Pool,
 * each sending its next request as soon as its previous answer has fully arrived. It does not
 * decode answers: it counts their bytes and reads `usage.completion_tokens` from the last bytes
 * (response-tail.ts). A few whole bodies are written to disk for the client-parse measurement,
 * which the benchmark makes afterwards on a quiet machine.
 */
import { readdirSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { getPriority, setPriority } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { serveChild } from './child.js';
import { requestBody, requestLength } from './load-plan.js';
import type { LoadProgress, LoadResult, LoadSpec } from './messages.js';
import { BodyTail, completionTokensJson, completionTokensMsgpack } from './response-tail.js';

const PROGRESS_EVERY_MS = 1_000;
/** After a failed request a worker waits this long, so a failing server is not hammered in a spin. */
const ERROR_BACKOFF_MS = 100;
const ERROR_SAMPLES = 5;
/** Bodies are sampled from every SAMPLE_STRIDE-th request, so samples spread over the run. */
const SAMPLE_STRIDE = 3;
/**
 * The generator shares the machine's cores with the cluster it loads, as a trainer's rollout
 * workers would not: it runs below the API servers' main threads (as their output workers and
 * packers do) so it does not delay the /health answers the probe times. Every thread of it: V8's
 * GC and compiler threads and libuv's pool start with the process and would stay at the cluster's
 * priority (a scheduler trace showed them running while a /health answer waited for a core);
 * threads made later inherit the main thread's. The probe keeps normal priority.
 * RINGSERVE_BENCH_LOAD_NICE=0 runs it at the cluster's priority.
 */
const LOAD_NICE = Number(process.env.RINGSERVE_BENCH_LOAD_NICE ?? 10);

/** Adds `nice` to every thread of this process (Linux: a thread id is a valid setpriority target). */
function lowerEveryThread(nice: number): void {
  if (nice <= 0) return;
  const tids = process.platform === 'linux' ? readdirSync('/proc/self/task').map(Number) : [0];
  for (const tid of tids) {
    try {
      setPriority(tid, Math.min(19, getPriority(tid) + nice));
    } catch (error) {
      // A thread that ended since the listing is not lowered; anything else is a real refusal.
      if ((error as { info?: { code?: string } }).info?.code !== 'ESRCH') throw error;
    }
  }
}

class LoadGenerator {
  readonly #spec: LoadSpec;
  readonly #pool: Pool;
  readonly #stop = new AbortController();
  readonly #result: LoadResult;
  readonly #workers: Promise<void>[] = [];
  readonly #headers: Record<string, string>;
  #serial = 0;
  #inFlight = 0;
  #progressTimer: NodeJS.Timeout | null = null;

  constructor(spec: LoadSpec) {
    this.#spec = spec;
    this.#pool = new Pool(spec.url, {
      connections: spec.concurrency,
      pipelining: 1,
      // A non-streamed answer's headers come when the whole rollout is done.
      headersTimeout: spec.requestTimeoutMs,
      bodyTimeout: spec.requestTimeoutMs,
    });
    this.#headers = {
      'content-type': 'application/json',
      accept: spec.accept === 'msgpack' ? 'application/msgpack' : 'application/json',
    };
    this.#result = {
      done: 0,
      errors: 0,
      bytes: 0,
      tokens: 0,
      startedAtMs: Date.now(),
      finishedAtMs: [],
      latencyMs: [],
      bodyBytes: [],
      completionTokens: [],
      lengthMismatches: 0,
      cut: 0,
      errorSamples: [],
      sampledBodies: [],
    };
  }

  start(progress: (p: LoadProgress) => void): void {
    this.#result.startedAtMs = Date.now();
    for (let w = 0; w < this.#spec.concurrency; w++) this.#workers.push(this.#worker());
    this.#progressTimer = setInterval(() => {
      const { done, errors, bytes, tokens } = this.#result;
      progress({ done, errors, bytes, tokens });
    }, PROGRESS_EVERY_MS);
  }

  async stop(): Promise<LoadResult> {
    if (this.#progressTimer !== null) clearInterval(this.#progressTimer);
    this.#result.cut = this.#inFlight;
    this.#stop.abort();
    await Promise.all(this.#workers);
    await this.#pool.destroy();
    return this.#result;
  }

  async #worker(): Promise<void> {
    const tail = new BodyTail();
    while (!this.#stop.signal.aborted) {
      const serial = this.#serial++;
      const ok = await this.#one(serial, tail);
      if (!ok && !this.#stop.signal.aborted) await sleep(ERROR_BACKOFF_MS);
    }
  }

  /** One request, start to last byte; false when it failed. */
  async #one(serial: number, tail: BodyTail): Promise<boolean> {
    const spec = this.#spec;
    const maxTokens = requestLength(spec, serial);
    const body = requestBody(spec, serial, maxTokens);
    const sample =
      spec.sampleDir !== null &&
      serial % SAMPLE_STRIDE === 1 &&
      this.#result.sampledBodies.length < spec.sampleBodies;
    const signal = AbortSignal.any([this.#stop.signal, AbortSignal.timeout(spec.requestTimeoutMs)]);
    const t0 = performance.now();
    this.#inFlight++;
    try {
      const res = await this.#pool.request({
        path: spec.path,
        method: 'POST',
        headers: this.#headers,
        body,
        signal,
      });
      tail.reset();
      const chunks: Buffer[] | null = sample || res.statusCode !== 200 ? [] : null;
      let bytes = 0;
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        bytes += chunk.length;
        tail.push(chunk);
        chunks?.push(chunk);
      }
      if (res.statusCode !== 200) {
        const text = Buffer.concat(chunks ?? []).toString('utf8', 0, 300);
        this.#error(`HTTP ${res.statusCode}: ${text}`);
        return false;
      }
      const contentType = String(res.headers['content-type'] ?? '');
      const msgpack = contentType.includes('msgpack');
      const tokens = msgpack
        ? completionTokensMsgpack(tail.bytes())
        : completionTokensJson(tail.bytes());
      this.#record(performance.now() - t0, bytes, tokens, maxTokens);
      if (chunks !== null) await this.#saveSample(Buffer.concat(chunks), contentType, tokens);
      return true;
    } catch (error) {
      if (!this.#stop.signal.aborted) this.#error((error as Error).message);
      return false;
    } finally {
      this.#inFlight--;
    }
  }

  #record(latencyMs: number, bytes: number, tokens: number, asked: number): void {
    const r = this.#result;
    r.done++;
    r.bytes += bytes;
    r.tokens += Math.max(0, tokens);
    r.finishedAtMs.push(Date.now());
    r.latencyMs.push(latencyMs);
    r.bodyBytes.push(bytes);
    r.completionTokens.push(tokens);
    if (tokens !== asked) r.lengthMismatches++;
  }

  #error(message: string): void {
    const r = this.#result;
    r.errors++;
    if (r.errorSamples.length < ERROR_SAMPLES) r.errorSamples.push(message);
  }

  async #saveSample(bytes: Buffer, contentType: string, tokens: number): Promise<void> {
    const dir = this.#spec.sampleDir;
    if (dir === null || this.#result.sampledBodies.length >= this.#spec.sampleBodies) return;
    const file = join(dir, `body-${this.#result.sampledBodies.length}.bin`);
    this.#result.sampledBodies.push({ file, contentType, tokens });
    await writeFile(file, bytes);
  }
}

let generator: LoadGenerator | null = null;

serveChild<LoadSpec, LoadResult>({
  start(spec, progress) {
    process.title = 'ringserve-bench-load';
    lowerEveryThread(LOAD_NICE);
    generator = new LoadGenerator(spec);
    generator.start(progress);
  },
  stop: async () => {
    if (generator === null) throw new Error('stop before start');
    return generator.stop();
  },
});
