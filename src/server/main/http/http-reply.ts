/**
 * A request's answer written to its fastify reply (the coordinator's ReplySink): a finished body
 * with its content type, the contract's error body, or server-sent events. Every SSE byte the
 * server writes is framed by src/protocol/sse.ts, this end-of-stream error included. A stream whose
 * client leaves more than --max-unread-bytes unread is cut: its connection is destroyed (which
 * drops the bytes queued for it), and the close aborts the request in the engine as any
 * departed client's does.
 */
import type { FastifyReply } from 'fastify';
import { toErrorBody } from '../../../errors.js';
import { CONTENT_TYPE, type ResponseForm } from '../../../protocol/generate-response.js';
import { JsonWriter } from '../../../protocol/json-writer.js';
import { SSE_CONTENT_TYPE, writeStreamDone, writeStreamError } from '../../../protocol/sse.js';
import type { ReplySink } from '../reply-sink.js';
import { releaseWhenSent } from '../sent-answers.js';

export class HttpReply implements ReplySink {
  readonly #reply: FastifyReply;
  readonly #maxUnreadBytes: number;
  #streaming = false;

  constructor(reply: FastifyReply, maxUnreadBytes = Number.POSITIVE_INFINITY) {
    this.#reply = reply;
    this.#maxUnreadBytes = maxUnreadBytes;
  }

  send(body: Buffer, form: ResponseForm): void {
    this.#reply.header('content-type', CONTENT_TYPE[form]).send(body);
    // A pool-backed answer goes back to the response pool once the socket has taken it.
    releaseWhenSent(this.#reply.raw, body);
  }

  fail(error: unknown): void {
    if (!this.#streaming) {
      const body = toErrorBody(error);
      this.#reply.code(body.error.code).send(body);
      return;
    }
    const raw = this.#reply.raw;
    if (raw.writableEnded) return;
    const w = new JsonWriter(512);
    writeStreamError(w, error);
    writeStreamDone(w);
    raw.end(w.finish());
  }

  startStream(): void {
    this.#streaming = true;
    this.#reply.hijack();
    this.#reply.raw.writeHead(200, {
      'content-type': SSE_CONTENT_TYPE,
      'cache-control': 'no-cache',
      connection: 'keep-alive',
    });
  }

  write(bytes: Buffer, last: boolean): void {
    const raw = this.#reply.raw;
    if (raw.destroyed) return;
    if (last) {
      raw.end(bytes);
      return;
    }
    raw.write(bytes);
    if (raw.writableLength > this.#maxUnreadBytes) raw.destroy();
  }

  onClose(listener: () => void): void {
    this.#reply.raw.once('close', listener);
  }
}
