import { writeChoiceJson, writeUsageJson } from './choice-json.js';
import { JsonWriter } from './json-writer.js';
import { MsgpackWriter } from './msgpack-writer.js';
import {
  type ChoiceColumns,
  checkChoiceColumns,
  checkPromptLogprobColumns,
  floorLogprob,
  type GenerateResponseColumns,
  narrowRouting,
  type PromptLogprobColumns,
  promptTokenLogprobs,
  RESPONSE_ID_PREFIX,
  type UsageFigures,
} from './response-columns.js';

/**
 * The non-streaming /inference/v1/generate answer in its three forms (docs/contract.md), written from
 * the finished request's columns: packed JSON (the default), legacy JSON (`"packed": false`) and
 * msgpack (`Accept: application/msgpack`; packed arrays' data as bin, token_ids an int32 packed
 * array). Every field of the contract is present, nulls included.
 */

/** The generate route's three forms, and the OpenAI routes' answers (openai-response.ts). */
export type ResponseForm = 'packed' | 'legacy' | 'msgpack' | 'completion' | 'chat';

export const CONTENT_TYPE: Readonly<Record<ResponseForm, string>> = {
  packed: 'application/json',
  legacy: 'application/json',
  msgpack: 'application/msgpack',
  completion: 'application/json',
  chat: 'application/json',
};

/** Write the JSON response (packed or legacy) into `w` (the caller resets it and calls finish). */
export function writeGenerateResponseJson(
  w: JsonWriter,
  res: GenerateResponseColumns,
  legacy: boolean,
): void {
  w.raw('{"request_id":').string(RESPONSE_ID_PREFIX + res.requestId);
  w.raw(',"model":').string(res.model);
  w.raw(',"created":').int(res.created);
  w.raw(',"choices":[');
  for (let i = 0; i < res.choices.length; i++) {
    if (i > 0) w.raw(',');
    writeChoiceJson(w, res.choices[i] as ChoiceColumns, legacy);
  }
  w.raw('],"usage":');
  writeUsageJson(w, res.usage);
  w.raw(',"prompt_logprobs":');
  const prompt = res.promptLogprobs ?? null;
  if (prompt !== null) checkPromptLogprobColumns(prompt);
  if (prompt === null) w.null();
  else if (legacy) writePromptLogprobsList(w, prompt);
  else w.packedArray(promptTokenLogprobs(prompt), [prompt.promptLength], 'float32');
  w.raw(',"kv_transfer_params":').value(res.kvTransferParams ?? null);
  w.raw('}');
}

/** Write the msgpack response into `w` (the caller resets it and calls finish). */
export function writeGenerateResponseMsgpack(w: MsgpackWriter, res: GenerateResponseColumns): void {
  w.mapHeader(7);
  w.str('request_id').str(RESPONSE_ID_PREFIX + res.requestId);
  w.str('model').str(res.model);
  w.str('created').int(res.created);
  w.str('choices').arrayHeader(res.choices.length);
  for (const choice of res.choices) writeChoiceMsgpack(w, choice);
  w.str('usage');
  writeUsageMsgpack(w, res.usage);
  w.str('prompt_logprobs');
  const prompt = res.promptLogprobs ?? null;
  if (prompt === null) w.nil();
  else {
    checkPromptLogprobColumns(prompt);
    w.packedArray(promptTokenLogprobs(prompt), [prompt.promptLength], 'float32');
  }
  w.str('kv_transfer_params').value(res.kvTransferParams ?? null);
}

/**
 * vLLM's `prompt_logprobs` (GenerateResponse, clamp_prompt_logprobs): null for position 0, then per
 * position a dict built as Python builds it from the engine's row (token id -> Logprob): keys in
 * first-seen order, the prompt token first, each key's value from its last occurrence, logprobs
 * floored at -9999. `decoded_token` is null: this route is token-in/token-out.
 */
function writePromptLogprobsList(w: JsonWriter, p: PromptLogprobColumns): void {
  const width = p.width;
  w.raw('[null');
  for (let i = 0; i < p.promptLength - 1; i++) {
    if (i >= p.positions) {
      w.raw(',null');
      continue;
    }
    const row = i * width;
    w.raw(',{');
    let written = 0;
    for (let j = 0; j < width; j++) {
      const id = p.ids[row + j] as number;
      if (id < 0 || seenBefore(p.ids, row, j, id)) continue;
      let last = j;
      for (let m = j + 1; m < width; m++) if (p.ids[row + m] === id) last = m;
      w.raw(written === 0 ? '"' : ',"')
        .int(id)
        .raw('":{"logprob":')
        .number(floorLogprob(p.logprobs[row + last] as number))
        .raw(',"rank":')
        .int(p.ranks[row + last] as number)
        .raw(',"decoded_token":null}');
      written++;
    }
    w.raw('}');
  }
  w.raw(']');
}

/** Whether `id` is among ids[row .. row + j). */
function seenBefore(ids: Int32Array, row: number, j: number, id: number): boolean {
  for (let m = 0; m < j; m++) if (ids[row + m] === id) return true;
  return false;
}

function writeChoiceMsgpack(w: MsgpackWriter, c: ChoiceColumns): void {
  checkChoiceColumns(c);
  const n = c.tokenIds.length;
  w.mapHeader(c.weightVersions === null ? 8 : 9);
  w.str('index').int(c.index);
  w.str('finish_reason');
  if (c.finishReason === null) w.nil();
  else w.str(c.finishReason);
  w.str('stop_reason');
  if (c.stopReason === null) w.nil();
  else if (typeof c.stopReason === 'number') w.int(c.stopReason);
  else w.str(c.stopReason);
  w.str('logprobs').nil();
  w.str('token_ids').packedArray(c.tokenIds, [n], 'int32');
  w.str('completion_logprobs');
  if (c.logprobs === null) w.nil();
  else w.packedArray(c.logprobs, [n], 'float32');
  w.str('sampling_mask');
  if (c.maskCounts === null || c.maskIds === null) w.nil();
  else {
    w.mapHeader(2);
    w.str('ids').packedArray(c.maskIds, [c.maskIds.length], 'int32');
    w.str('counts').packedArray(c.maskCounts, [n], 'int32');
  }
  w.str('routed_experts');
  const r = c.routing;
  if (r === null) w.nil();
  else {
    const data = narrowRouting(r.data);
    const dtype = data instanceof Uint8Array ? 'uint8' : 'uint16';
    w.packedArray(data, [r.rows, r.layers, r.topk], dtype, 1).str('start').int(r.start);
  }
  if (c.weightVersions !== null)
    w.str('weight_versions').packedArray(c.weightVersions, [n], 'int32');
}

function writeUsageMsgpack(w: MsgpackWriter, u: UsageFigures): void {
  w.mapHeader(4);
  w.str('prompt_tokens').int(u.promptTokens);
  w.str('completion_tokens').int(u.completionTokens);
  w.str('total_tokens').int(u.promptTokens + u.completionTokens);
  w.str('prompt_tokens_details');
  if (u.cachedTokens === null) w.nil();
  else w.mapHeader(1).str('cached_tokens').int(u.cachedTokens);
}

/**
 * Encoders that keep one writer of each kind between responses, as a packer thread should.
 * encode() returns a Buffer with its own ArrayBuffer, safe to transfer to another thread.
 */
export class GenerateResponseEncoder {
  readonly #json = new JsonWriter();
  readonly #msgpack = new MsgpackWriter();

  encode(res: GenerateResponseColumns, form: ResponseForm): Buffer {
    if (form === 'msgpack') {
      writeGenerateResponseMsgpack(this.#msgpack.reset(), res);
      return this.#msgpack.finish();
    }
    writeGenerateResponseJson(this.#json.reset(), res, form === 'legacy');
    return this.#json.finish();
  }
}

/** One-off encode with fresh writers (tests, tools); a packer keeps a GenerateResponseEncoder. */
export function encodeGenerateResponse(res: GenerateResponseColumns, form: ResponseForm): Buffer {
  return new GenerateResponseEncoder().encode(res, form);
}
