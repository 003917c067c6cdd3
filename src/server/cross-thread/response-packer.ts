// Encoding of a finished request from the shared tables: what a packer thread runs per task, and
// what the main thread runs for an answer small enough that the hand-off would cost more than the
// encoding (worker-output-path.ts, --inline-pack-values). The columns are views into the arena; the
// encoders write them into the packer's reused writer, and the result is copied out once: into a
// run of the response pool, or into a Buffer of its own when the pool has no room for it.

import type { ByteWriter, WriterScratch } from '../../protocol/byte-writer.js';
import { parseChatOutput } from '../../protocol/chat-parse/chat-output.js';
import { newToolCallId } from '../../protocol/chat-parse/tool-call-id.js';
import {
  writeGenerateResponseJson,
  writeGenerateResponseMsgpack,
} from '../../protocol/generate-response.js';
import { JsonWriter } from '../../protocol/json-writer.js';
import { MsgpackWriter } from '../../protocol/msgpack-writer.js';
import { LogprobsWriter } from '../../protocol/openai-logprobs.js';
import {
  type OpenAiChoice,
  type OpenAiResponseColumns,
  writeOpenAiResponse,
} from '../../protocol/openai-response.js';
import type { ChoiceColumns, GenerateResponseColumns } from '../../protocol/response-columns.js';
import type { TokenBytes } from '../../protocol/token-bytes.js';
import { AccumulatorTable, SlotState } from './accumulators.js';
import { RS_ERR_OUTPUT_BAD_SLOT, RS_ERR_OUTPUT_NOT_FINISHED } from './errors.js';
import type { PackTask } from './pack-task.js';
import type { PoolRun, ResponsePool } from './response-pool.js';
import { ResponseView, requestFailure } from './response-view.js';
import { SlotMetaTable } from './slot-meta.js';

const utf8 = new TextDecoder();

export class ResponsePacker {
  readonly view: ResponseView;
  readonly #json: JsonWriter;
  readonly #msgpack: MsgpackWriter;
  readonly #logprobs: LogprobsWriter;

  /**
   * `tokens`: the token bytes of the OpenAI answers' logprobs (the same as the output worker's);
   * `scratch`: memory for the JSON and msgpack writers that release() can give back (else the heap).
   */
  constructor(
    metaSab: SharedArrayBuffer,
    accSab: SharedArrayBuffer,
    arenaSab: SharedArrayBuffer,
    tokens: TokenBytes,
    scratch: { json: WriterScratch | null; msgpack: WriterScratch | null } = {
      json: null,
      msgpack: null,
    },
  ) {
    this.#json = new JsonWriter(undefined, scratch.json);
    this.#msgpack = new MsgpackWriter(undefined, scratch.msgpack);
    this.view = new ResponseView(
      new SlotMetaTable(metaSab),
      new AccumulatorTable(accSab),
      arenaSab,
    );
    this.#logprobs = new LogprobsWriter(tokens);
  }

  /** The OpenAI answer's columns: each choice's text up to where a stop string cut it. */
  openAiColumns(task: PackTask): OpenAiResponseColumns {
    const { view } = this;
    const o = task.openai;
    if (o === undefined || (task.form !== 'completion' && task.form !== 'chat')) {
      throw new RS_ERR_OUTPUT_BAD_SLOT('task', `form ${task.form} is not an OpenAI answer`);
    }
    const choices: OpenAiChoice[] = [];
    let completion = 0;
    for (let i = 0; i < task.slots.length; i++) {
      const slot = task.slots[i]!;
      this.#checkSlot(task, i, slot);
      const prompt = Math.floor(i / o.n);
      completion += view.acc.completionTokens(slot);
      const text = view.text(slot, 0, view.acc.textLength(slot));
      const parse = task.form === 'chat' ? (o.chatParse ?? null) : null;
      choices.push({
        columns: view.choice(slot, i),
        text,
        echo: o.echo?.[prompt] ?? null,
        promptTokenIds: o.promptTokenIds?.[prompt] ?? null,
        parsed: parse === null ? null : parseChatOutput(utf8.decode(text), parse, newToolCallId),
      });
    }
    let promptTokens = 0;
    for (const len of o.promptLens) promptTokens += len;
    return {
      kind: task.form,
      requestId: task.requestId,
      model: task.model,
      created: task.created,
      choices,
      usage: { promptTokens, completionTokens: completion, cachedTokens: null },
      topLogprobs: o.topLogprobs,
      returnTokenIds: o.returnTokenIds,
      kvTransferParams: task.kvTransferParams ?? null,
    };
  }

  /** The columns of the request made of `task.slots` (choice i is slot i). */
  columns(task: PackTask): GenerateResponseColumns {
    const { view } = this;
    const choices: ChoiceColumns[] = [];
    for (let i = 0; i < task.slots.length; i++) {
      const slot = task.slots[i]!;
      this.#checkSlot(task, i, slot);
      choices.push(view.choice(slot, i));
    }
    return {
      requestId: task.requestId,
      model: task.model,
      created: task.created,
      choices,
      usage: view.usage(task.slots),
      kvTransferParams: task.kvTransferParams ?? null,
      // The request's, computed by choice 0 alone (request-coordinator.ts).
      promptLogprobs: task.slots.length > 0 ? view.promptLogprobs(task.slots[0]!) : null,
    };
  }

  /** The whole response in `task.form`, in a Buffer with its own ArrayBuffer (transferable). */
  pack(task: PackTask): Buffer {
    return this.#encode(task).finish();
  }

  /** As pack(), for an answer sent from the encoding thread: a copy in Node's Buffer pool. */
  packLocal(task: PackTask): Buffer {
    return this.#encode(task).copy();
  }

  /** The response copied into a run of `pool`; a Buffer of its own when no run takes it. */
  packInto(task: PackTask, pool: ResponsePool | null): PoolRun | Buffer {
    const writer = this.#encode(task);
    const run = pool?.acquire(writer.length) ?? null;
    if (run === null) return writer.finish();
    pool!.bytes.set(writer.view(), run.offset);
    return run;
  }

  /** Between tasks: gives back what the writers hold beyond their initial size; returns the bytes. */
  release(): number {
    return this.#json.release() + this.#msgpack.release();
  }

  /** The writer holding the encoded response (until the next encode). */
  #encode(task: PackTask): ByteWriter {
    if (task.openai !== undefined) {
      writeOpenAiResponse(this.#json.reset(), this.openAiColumns(task), this.#logprobs);
      return this.#json;
    }
    const columns = this.columns(task);
    if (task.form === 'msgpack') {
      writeGenerateResponseMsgpack(this.#msgpack.reset(), columns);
      return this.#msgpack;
    }
    writeGenerateResponseJson(this.#json.reset(), columns, task.form === 'legacy');
    return this.#json;
  }

  /** A slot must hold a complete, successful response of the generation the task names. */
  #checkSlot(task: PackTask, i: number, slot: number): void {
    const acc = this.view.acc;
    if (!(slot >= 0 && slot < acc.slots))
      throw new RS_ERR_OUTPUT_BAD_SLOT(slot, `not in [0, ${acc.slots})`);
    const gen = task.generations?.[i];
    const state = acc.state(slot);
    if (
      (gen !== undefined && acc.generation(slot) !== gen) ||
      (state !== SlotState.Done && state !== SlotState.Finished)
    ) {
      throw new RS_ERR_OUTPUT_NOT_FINISHED(slot, gen ?? acc.generation(slot));
    }
    const failure = requestFailure(acc, slot, task.requestId);
    if (failure !== null) throw failure;
  }
}
