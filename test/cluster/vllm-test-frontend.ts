/**
 * A minimal vLLM frontend for tests, written from the codec alone: it binds the handshake ROUTER,
 * the input ROUTER and the output PULL on loopback (ephemeral ports), runs the handshake with one
 * headless engine, sends ADD / ABORT / UTILITY and collects every EngineCoreOutputs message, so
 * the headless engine (`ringserve engine --vllm-protocol`) is tested over real ZMQ without the
 * bridge. Also starts and stops that engine process.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pull, Router } from 'zeromq';
import {
  decodeHandshake,
  decodeRegistration,
  encodeAbort,
  encodeAdd,
  encodeInit,
  encodeUtility,
  type HandshakeMessage,
  DEFAULT_VLLM_LAYOUT as L,
  OutputsReader,
  type OutputView,
  REQUEST_TYPE_FRAMES,
  type Registration,
  RequestType,
  type VllmAddRequest,
} from '../../src/engine/vllm/index.js';

const CLI = fileURLToPath(new URL('../../dist/src/cli.js', import.meta.url));

/** One EngineCoreOutput as copied out of the reused view. */
export interface SeenOutput {
  id: string;
  tokens: number[];
  logprobs: number[] | null;
  finish: number;
  stop: number;
  prefill: { prompt: number; cached: number } | null;
  routedRows: number;
  routedLayers: number;
  routed: Uint8Array | null;
  maskCounts: number[] | null;
  maskIds: number[] | null;
}

export interface UtilityAnswer {
  callId: number;
  failure: string | null;
  result: unknown;
}

export type Event =
  | { kind: 'output'; output: SeenOutput }
  | { kind: 'utility'; answer: UtilityAnswer }
  | { kind: 'dead' };

export class TestFrontend {
  readonly handshake = new Router({ linger: 0 });
  readonly input = new Router({ linger: 0, sendHighWaterMark: 0 });
  readonly output = new Pull({ linger: 0, receiveHighWaterMark: 0 });
  readonly events: Event[] = [];
  hello: HandshakeMessage | null = null;
  helloIdentity: Buffer | null = null;
  registration: Registration | null = null;
  ready: HandshakeMessage | null = null;
  #identity: Buffer = Buffer.alloc(2);
  #nextCall = 1;
  #waiters: (() => void)[] = [];
  #reader = new OutputsReader(L);
  handshakePort = 0;

  async bind(): Promise<void> {
    await this.handshake.bind('tcp://127.0.0.1:0');
    await this.input.bind('tcp://127.0.0.1:0');
    await this.output.bind('tcp://127.0.0.1:0');
    this.handshakePort = Number(/:(\d+)$/.exec(this.handshake.lastEndpoint ?? '')?.[1]);
  }

  /** HELLO -> init -> registration -> READY, as vLLM's frontend runs it (one engine). */
  async runHandshake(): Promise<void> {
    const [identity, hello] = (await this.handshake.receive()) as [Buffer, Buffer];
    this.helloIdentity = identity;
    this.hello = decodeHandshake(hello);
    this.#identity = identity;
    const init = encodeInit({
      inputs: [this.input.lastEndpoint as string],
      outputs: [this.output.lastEndpoint as string],
    });
    await this.handshake.send([identity, init]);
    const [, registration] = (await this.input.receive()) as [Buffer, Buffer];
    this.registration = decodeRegistration(L, registration);
    const [, ready] = (await this.handshake.receive()) as [Buffer, Buffer];
    this.ready = decodeHandshake(ready);
    this.handshake.close();
    void this.#collect();
  }

  async #collect(): Promise<void> {
    const sink = {
      output: (o: OutputView) => this.#push({ kind: 'output', output: copy(o) }),
      utility: (callId: number, failure: string | null, result: unknown) =>
        this.#push({ kind: 'utility', answer: { callId, failure, result } }),
      engineDead: () => this.#push({ kind: 'dead' }),
    };
    try {
      for await (const frames of this.output) this.#reader.read(frames, sink);
    } catch {
      // closed
    }
  }

  #push(e: Event): void {
    this.events.push(e);
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  async add(req: Partial<VllmAddRequest> & { requestId: string }): Promise<void> {
    const full: VllmAddRequest = {
      promptTokenIds: [1, 2, 3, 4, 5],
      params: { maxTokens: 8 },
      arrivalTime: 0,
      cacheSalt: null,
      priority: 0,
      clientIndex: 0,
      ...req,
    };
    await this.sendRaw(RequestType.Add, encodeAdd(L, full));
  }

  async sendRaw(type: number, payload: Buffer): Promise<void> {
    await this.input.send([this.#identity, REQUEST_TYPE_FRAMES[type] as Buffer, payload]);
  }

  async abort(ids: string[]): Promise<void> {
    await this.sendRaw(RequestType.Abort, encodeAbort(ids));
  }

  /** Calls a utility method and resolves with its answer. */
  async call(method: string, args: unknown[], timeoutMs = 20_000): Promise<UtilityAnswer> {
    const callId = this.#nextCall++;
    await this.sendRaw(
      RequestType.Utility,
      encodeUtility({ clientIndex: 0, callId, method, args }),
    );
    const e = await this.waitFor(
      (ev) => ev.kind === 'utility' && ev.answer.callId === callId,
      timeoutMs,
    );
    return (e as { answer: UtilityAnswer }).answer;
  }

  /** Resolves with the first event (already seen or to come) that matches. */
  async waitFor(match: (e: Event) => boolean, timeoutMs = 20_000): Promise<Event> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.events.find(match);
      if (found !== undefined) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching event within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Waits until request `id` has finished; returns all its outputs. */
  async finished(id: string, timeoutMs = 20_000): Promise<SeenOutput[]> {
    await this.waitFor(
      (e) => e.kind === 'output' && e.output.id === id && e.output.finish >= 0,
      timeoutMs,
    );
    return this.outputsOf(id);
  }

  outputsOf(id: string): SeenOutput[] {
    return this.events.flatMap((e) =>
      e.kind === 'output' && e.output.id === id ? [e.output] : [],
    );
  }

  close(): void {
    if (!this.handshake.closed) this.handshake.close();
    this.input.close();
    this.output.close();
  }
}

function copy(o: OutputView): SeenOutput {
  return {
    id: o.requestId(),
    tokens: Array.from(o.tokenIds.subarray(0, o.tokenCount)),
    logprobs: o.hasLogprobs ? Array.from(o.logprobs.subarray(0, o.tokenCount)) : null,
    finish: o.finishReason,
    stop: o.stopReason,
    prefill: o.hasPrefillStats ? { prompt: o.numPromptTokens, cached: o.numCachedTokens } : null,
    routedRows: o.hasRoutedExperts ? o.routedRows : 0,
    routedLayers: o.routedLayers,
    routed: o.hasRoutedExperts
      ? o.routedData.slice(o.routedOffset, o.routedOffset + o.routedLength)
      : null,
    maskCounts: o.hasMask ? Array.from(o.maskCounts.subarray(0, o.tokenCount)) : null,
    maskIds: o.hasMask ? Array.from(o.maskIds.subarray(0, o.maskIdCount)) : null,
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
