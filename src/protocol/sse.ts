import { RS_ERR_PROTOCOL_BAD_COLUMNS, toErrorBody } from '../errors.js';
import { writeChoiceJson, writeUsageJson } from './choice-json.js';
import type { JsonWriter } from './json-writer.js';
import { type ChoiceColumns, RESPONSE_ID_PREFIX, type UsageFigures } from './response-columns.js';

/**
 * Server-sent-event framing of a streamed /inference/v1/generate (docs/contract.md, Streaming): one
 * `data: {...}\n\n` event per delta carrying only the new positions, an optional usage-only last
 * event (`choices: []`), an error event, and always `data: [DONE]\n\n` at the end. Events are
 * appended to a JsonWriter, so a packer can put several events in one Buffer.
 */

export const SSE_CONTENT_TYPE = 'text/event-stream';

/** The stream's terminator, shared: it is never written into. */
export const SSE_DONE: Buffer = Buffer.from('data: [DONE]\n\n', 'latin1');

export interface StreamChunkColumns {
  requestId: string;
  model: string;
  created: number;
  /**
   * The choices with new positions since the last event; routing.start is the absolute position
   * of this chunk's first row. A choice may carry no tokens only when it carries its finish_reason.
   */
  choices: readonly ChoiceColumns[];
  /** Usage so far (stream_options.continuous_usage_stats), else null. */
  usage: UsageFigures | null;
}

function writeEventHead(w: JsonWriter, requestId: string, model: string, created: number): void {
  w.raw('data: {"request_id":').string(RESPONSE_ID_PREFIX + requestId);
  w.raw(',"model":').string(model);
  w.raw(',"created":').int(created);
}

/**
 * One event around JSON text made elsewhere (the inline baseline builds its legacy events with
 * JSON.stringify, as a per-token-object frontend does); the framing stays this module's.
 */
export function writeStreamEventText(w: JsonWriter, json: string): void {
  w.raw('data: ').bytes(Buffer.from(json)).raw('\n\n');
}

/** One delta event. Throws RS_ERR_PROTOCOL_BAD_COLUMNS for an event that would say nothing. */
export function writeStreamChunk(w: JsonWriter, chunk: StreamChunkColumns, legacy: boolean): void {
  if (chunk.choices.length === 0) {
    throw new RS_ERR_PROTOCOL_BAD_COLUMNS('a stream chunk needs at least one choice');
  }
  for (const c of chunk.choices) {
    if (c.tokenIds.length === 0 && c.finishReason === null) {
      throw new RS_ERR_PROTOCOL_BAD_COLUMNS(
        `choice ${c.index} has no new token and no finish reason`,
      );
    }
  }
  writeEventHead(w, chunk.requestId, chunk.model, chunk.created);
  w.raw(',"choices":[');
  for (let i = 0; i < chunk.choices.length; i++) {
    if (i > 0) w.raw(',');
    writeChoiceJson(w, chunk.choices[i] as ChoiceColumns, legacy);
  }
  w.raw('],"usage":');
  if (chunk.usage === null) w.null();
  else writeUsageJson(w, chunk.usage);
  w.raw('}\n\n');
}

/** The last event when stream_options.include_usage is set: no choices, the final usage. */
export function writeStreamUsageChunk(
  w: JsonWriter,
  requestId: string,
  model: string,
  created: number,
  usage: UsageFigures,
): void {
  writeEventHead(w, requestId, model, created);
  w.raw(',"choices":[],"usage":');
  writeUsageJson(w, usage);
  w.raw('}\n\n');
}

/** An error in the middle of a stream: `data: {"error": {...}}` (the caller then writes DONE). */
export function writeStreamError(w: JsonWriter, err: unknown): void {
  const { error } = toErrorBody(err);
  w.raw('data: {"error":{"message":').string(error.message);
  w.raw(',"type":').string(error.type);
  w.raw(',"param":');
  if (error.param === null) w.null();
  else w.string(error.param);
  w.raw(',"code":').int(error.code).raw('}}\n\n');
}

/** Append the terminator. */
export function writeStreamDone(w: JsonWriter): void {
  w.bytes(SSE_DONE);
}
