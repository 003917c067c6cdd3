/**
 * Where a request's answer goes: the HTTP reply, behind the few calls the coordinator makes, so the
 * coordinator knows nothing of fastify (src/server/main/http/http-reply.ts is the real one; tests use a
 * recording fake). One answer per request: a finished body, an error, or a stream of SSE bytes.
 */
import type { ResponseForm } from '../../protocol/generate-response.js';

export interface ReplySink {
  /** Non-streaming: the finished answer, encoded in `form`. */
  send(body: Buffer, form: ResponseForm): void;
  /**
   * The request failed: the contract's error body with its HTTP status or, once a stream has
   * started, a `data: {"error": ...}` event and `data: [DONE]`.
   */
  fail(error: unknown): void;
  /** Starts the `text/event-stream` answer (status 200, headers). */
  startStream(): void;
  /** Streaming: SSE bytes as the output side encoded them; `last` ends the answer after them. */
  write(bytes: Buffer, last: boolean): void;
  /** Calls `listener` once when the client's connection closes (answered or not). */
  onClose(listener: () => void): void;
}
