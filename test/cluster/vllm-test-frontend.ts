/**
 * A vLLM frontend for the headless engine's tests, over the independent mirror frontend
 * (test/engine/vllm/mirror/, written from vLLM's structs; nothing here imports src/engine/vllm):
 * it binds the handshake ROUTER, the input ROUTER and the output PULL on loopback (ephemeral
 * ports), runs the handshake with one headless engine, sends ADD / ABORT / UTILITY in one layout
 * (the newest unless told) and keeps every output in arrival order, so `ringserve engine
 * --vllm-protocol` is tested over real ZMQ against bytes it did not write itself. Also starts and
 * stops that engine process.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type {
  EngineCoreOutput,
  Registration,
  SamplingParams,
  UtilityOutput,
} from '../engine/vllm/mirror/codec.js';
import type { Era } from '../engine/vllm/mirror/eras.js';
import { MirrorFrontend } from '../engine/vllm/mirror/frontend.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));

/** One EngineCoreOutput as the tests read it. */
export interface SeenOutput {
  id: string;
  tokens: number[];
  /** Column 0 of LogprobsLists. */
  logprobs: number[] | null;
  /** The full LogprobsLists rows (column 0 the sampled token) and the ranks. */
  logprobRows: number[][] | null;
  ranks: number[] | null;
  finish: number;
  stop: number;
  prefill: { prompt: number; cached: number } | null;
  routedRows: number;
  routedLayers: number;
  routed: Uint8Array | null;
  masks: number[][] | null;
}

export interface UtilityAnswer {
  callId: bigint;
  failure: string | null;
  result: unknown;
}

export type Event =
  | { kind: 'output'; output: SeenOutput }
  | { kind: 'utility'; answer: UtilityAnswer }
  | { kind: 'dead' };

/** An ADD as the tests write it: ringserve's names for the SamplingParams keys they use. */
export interface TestAdd {
  requestId: string;
  promptTokenIds?: number[];
  params?: {
    maxTokens?: number;
    topP?: number;
    topK?: number;
    temperature?: number;
    seed?: number;
    ignoreEos?: boolean;
    logprobs?: number;
    eosTokenId?: number;
  };
}

export class TestFrontend {
  #mirror: MirrorFrontend | null = null;
  readonly era: Era;

  constructor(era: Era = '0.33') {
    this.era = era;
  }

  get mirror(): MirrorFrontend {
    if (this.#mirror === null) throw new Error('bind() first');
    return this.#mirror;
  }

  get handshakePort(): number {
    return Number(/:(\d+)$/.exec(this.mirror.handshakeAddress)?.[1]);
  }

  get hello() {
    return this.mirror.hello;
  }

  get helloIdentity(): Buffer | null {
    return this.mirror.engineIdentity;
  }

  get registration(): Registration | null {
    return this.mirror.registration;
  }

  get ready() {
    return this.mirror.ready;
  }

  async bind(): Promise<void> {
    this.#mirror = await MirrorFrontend.open({ era: this.era });
  }

  /** HELLO -> init -> registration -> READY, as vLLM's frontend runs it (one engine). */
  async runHandshake(): Promise<void> {
    await this.mirror.runHandshake(20_000);
  }

  /** Every message so far, in arrival order. */
  get events(): Event[] {
    const out: Event[] = [];
    for (const r of this.mirror.received) {
      const m = r.decoded.message;
      for (const o of m.outputs) out.push({ kind: 'output', output: seen(o) });
      const u = m.utility_output;
      if (u !== null) out.push({ kind: 'utility', answer: answerOf(u) });
    }
    if (this.mirror.dead) out.push({ kind: 'dead' });
    return out;
  }

  async add(req: TestAdd): Promise<void> {
    const p = req.params ?? {};
    const sampling: SamplingParams = { max_tokens: p.maxTokens ?? 8 };
    if (p.topP !== undefined) sampling.top_p = p.topP;
    if (p.topK !== undefined) sampling.top_k = p.topK;
    if (p.temperature !== undefined) sampling.temperature = p.temperature;
    if (p.seed !== undefined) sampling.seed = p.seed;
    if (p.ignoreEos !== undefined) sampling.ignore_eos = p.ignoreEos;
    if (p.logprobs !== undefined) sampling.logprobs = p.logprobs;
    if (p.eosTokenId !== undefined) sampling._eos_token_id = p.eosTokenId;
    await this.mirror.add(this.era, {
      request_id: req.requestId,
      prompt_token_ids: req.promptTokenIds ?? [1, 2, 3, 4, 5],
      sampling_params: sampling,
      arrival_time: 0,
    });
  }

  async sendRaw(type: number, payload: Buffer): Promise<void> {
    await this.mirror.sendRaw([Buffer.from([type]), payload]);
  }

  async abort(ids: string[]): Promise<void> {
    await this.mirror.abort(ids);
  }

  /** Calls a utility method (a call id >= 2^63, as Python's) and resolves with its answer. */
  async call(method: string, args: unknown[], timeoutMs = 20_000): Promise<UtilityAnswer> {
    return answerOf(await this.mirror.call(method, args, { timeoutMs }));
  }

  /** Resolves with the first event (already seen or to come) that matches. */
  async waitFor(match: (e: Event) => boolean, timeoutMs = 20_000): Promise<Event> {
    let found: Event | undefined;
    await this.mirror.until(
      () => {
        found = this.events.find(match);
        return found !== undefined;
      },
      'a matching event',
      timeoutMs,
    );
    return found!;
  }

  /** Waits until request `id` has finished; returns all its outputs. */
  async finished(id: string, timeoutMs = 20_000): Promise<SeenOutput[]> {
    return (await this.mirror.finished(id, timeoutMs)).map(seen);
  }

  outputsOf(id: string): SeenOutput[] {
    return this.mirror.outputsOf(id).map(seen);
  }

  close(): void {
    this.#mirror?.close();
  }
}

function answerOf(u: UtilityOutput): UtilityAnswer {
  return { callId: u.call_id, failure: u.failure_message, result: u.result?.value ?? null };
}

function seen(o: EngineCoreOutput): SeenOutput {
  const lp = o.new_logprobs ?? null;
  const routed = o.routed_experts ?? null;
  const prefill = o.prefill_stats ?? null;
  return {
    id: o.request_id,
    tokens: o.new_token_ids,
    logprobs: lp === null ? null : lp.logprobs.map((row) => row[0]!),
    logprobRows: lp === null ? null : lp.logprobs,
    ranks: lp === null ? null : lp.ranks,
    finish: o.finish_reason ?? -1,
    stop: typeof o.stop_reason === 'number' ? o.stop_reason : -1,
    prefill:
      prefill === null
        ? null
        : { prompt: Number(prefill.num_prompt_tokens), cached: Number(prefill.num_cached_tokens) },
    routedRows: routed?.rows ?? 0,
    routedLayers: routed?.layers ?? 0,
    routed: routed === null ? null : Uint8Array.from(routed.ids),
    masks: o.new_sampling_mask?.rows ?? null,
  };
}

/** A `ringserve engine --vllm-protocol` child process dialling `port`. */
export class EngineProcess {
  readonly child: ChildProcess;
  #log = '';
  readonly exited: Promise<number | null>;

  constructor(port: number, extra: string[] = []) {
    this.child = spawn(
      process.execPath,
      [
        CLI,
        'engine',
        '--vllm-protocol',
        '--data-parallel-address',
        '127.0.0.1',
        '--data-parallel-rpc-port',
        String(port),
        '--model',
        'tiny',
        '--log-level',
        'warn',
        ...extra,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], cwd: join(CLI, '..', '..', '..') },
    );
    this.child.stdout?.on('data', (d: Buffer) => {
      this.#log += d.toString();
    });
    this.child.stderr?.on('data', (d: Buffer) => {
      this.#log += d.toString();
    });
    this.exited = new Promise((resolve) => this.child.once('exit', (code) => resolve(code)));
  }

  log(): string {
    return this.#log;
  }

  /** SIGTERM, SIGKILL after a bound; resolves with the exit code. */
  async stop(timeoutMs = 10_000): Promise<number | null> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return this.child.exitCode;
    this.child.kill('SIGTERM');
    const timer = setTimeout(() => this.child.kill('SIGKILL'), timeoutMs);
    const code = await this.exited;
    clearTimeout(timer);
    return code;
  }
}
