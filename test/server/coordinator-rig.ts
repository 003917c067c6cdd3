// The request coordinator with everything below it faked or in memory: the fake engine
// (fake-engine-client.ts), the inline output path draining the fake engine's output ring, and
// replies that record what the client would have received. No threads, no region, no cluster;
// the test drives every step, and `settle()` lets promise callbacks (the answer's encode) run.

import { expect } from 'vitest';
import { buildConfig, type RingserveConfig } from '../../src/config.js';
import { RingserveError } from '../../src/errors.js';
import type { GenerateRequest } from '../../src/protocol/generate-request.js';
import { parseGenerateRequest } from '../../src/protocol/generate-request.js';
import type { ResponseForm } from '../../src/protocol/generate-response.js';
import { InlineOutputPath } from '../../src/server/inline/inline-output-path.js';
import type { ReplySink } from '../../src/server/main/reply-sink.js';
import {
  type CompletedRequest,
  RequestCoordinator,
} from '../../src/server/main/request-coordinator.js';
import { FakeEngineClient, type Output } from './fake-engine-client.js';
import type { StepRow } from './output/step-records.js';
import { TINY_BYTES } from './tiny-tokens.js';

/** What the client of one request received. */
export class FakeReply implements ReplySink {
  body: Buffer | null = null;
  form: ResponseForm | null = null;
  error: unknown = null;
  streaming = false;
  ended = false;
  readonly chunks: Buffer[] = [];
  readonly #onClose: (() => void)[] = [];

  /** Answered: a body, an error, or the end of its stream. */
  get answered(): boolean {
    return this.body !== null || this.error !== null || this.ended;
  }

  send(body: Buffer, form: ResponseForm): void {
    this.#once();
    this.body = body;
    this.form = form;
  }

  fail(error: unknown): void {
    this.#once();
    this.error = error;
    if (this.streaming) this.ended = true;
  }

  startStream(): void {
    this.streaming = true;
  }

  write(bytes: Buffer, last: boolean): void {
    if (this.ended) throw new Error('bytes written after the end of the stream');
    this.chunks.push(bytes);
    if (last) this.ended = true;
  }

  onClose(listener: () => void): void {
    this.#onClose.push(listener);
  }

  /** The client's connection closes. */
  close(): void {
    for (const listener of this.#onClose.splice(0)) listener();
  }

  /** The answer's JSON body. */
  json(): { choices: { index: number; token_ids: number[]; finish_reason: string | null }[] } {
    if (this.body === null) throw new Error('no body was sent');
    return JSON.parse(this.body.toString('utf8'));
  }

  /** Everything streamed, as text. */
  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }

  #once(): void {
    if (this.answered) throw new Error('a request was answered twice');
  }
}

export interface CoordinatorRig {
  config: RingserveConfig;
  engine: FakeEngineClient;
  output: InlineOutputPath;
  coordinator: RequestCoordinator;
  done: CompletedRequest[];
  /** Submits a generate body (parsed as the route does), returns its reply. */
  submit(body: Record<string, unknown>, headerId?: string): FakeReply;
  /** Slots of the request's choices, choice order, from the ADDs written for it. */
  slotsOf(requestId: string): number[];
  /** The engine runs: a STEP record, then the output path drains it. */
  step(rows: readonly StepRow[]): void;
  emit(slot: number, output: Output): void;
  generate(slot: number, tokens: readonly number[], finish?: number): void;
  confirmAborts(): void;
  /** Lets pending promise callbacks run (an answer being encoded). */
  settle(): Promise<void>;
  close(): Promise<void>;
}

const REQUEST_OPTIONS = {
  vocabSize: 1000,
  maxModelLen: 4096,
  defaultReturnSamplingMask: false,
  defaultReturnRoutedExperts: false,
};

/** A generate body for the tiny preset: `max_tokens` 8, seeded, with extra fields merged in. */
export function generateBody(
  params: Record<string, unknown> = {},
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    token_ids: [5, 17, 300],
    sampling_params: { max_tokens: 8, seed: 7, logprobs: 1, ...params },
    ...extra,
  };
}

export function startCoordinatorRig(maxQueueLen = 8): CoordinatorRig {
  const config = buildConfig({ model: 'tiny', maxQueueLen, outputProcessing: 'inline' });
  const engine = new FakeEngineClient();
  const done: CompletedRequest[] = [];
  const coordinator = new RequestCoordinator(config, engine, { onDone: (d) => done.push(d) });
  // Stop strings are matched in the tiny tokenizer's bytes, as a server serving it matches them.
  const output = new InlineOutputPath(
    engine.outputRing,
    coordinator,
    'tiny',
    maxQueueLen,
    TINY_BYTES,
  );
  coordinator.attach(output);
  const drained = <T extends unknown[]>(run: (...args: T) => void) => {
    return (...args: T): void => {
      run(...args);
      output.poll();
    };
  };
  return {
    config,
    engine,
    output,
    coordinator,
    done,
    submit(body, headerId) {
      const request: GenerateRequest = parseGenerateRequest(body, REQUEST_OPTIONS);
      const reply = new FakeReply();
      coordinator.submit(request, reply, 'packed', headerId);
      return reply;
    },
    slotsOf(requestId) {
      const record = coordinator.table.byId(requestId);
      if (record === undefined) throw new Error(`request ${requestId} is not in flight`);
      return [...record.group.slots];
    },
    step: drained((rows: readonly StepRow[]) => engine.step(rows)),
    emit: drained((slot: number, out: Output) => engine.emit(slot, out)),
    generate: drained((slot: number, tokens: readonly number[], finish?: number) =>
      engine.generate(slot, tokens, finish),
    ),
    confirmAborts: drained(() => engine.confirmAborts()),
    settle: () => new Promise((resolve) => setImmediate(resolve)),
    async close() {
      coordinator.table.slots.close();
      await output.close();
    },
  };
}

/** The coded error `run` throws (a refused submit). */
export function thrown(run: () => unknown): RingserveError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(RingserveError);
    return error as RingserveError;
  }
  throw new Error('nothing was thrown');
}
