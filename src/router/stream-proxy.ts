/**
 * A streamed generate through the P/D pair: the prefill call (not streamed, one token), then the
 * decode call's event stream, each chunk of it re-written for the client in the request's merge
 * thread (stream-merge.ts, run by merge-table.ts) and written to the client as soon as it comes
 * back, in order: one chunk at a time per request, on the one thread that holds its merger.
 *
 * Once the client has its 200, a failure is the contract's mid-stream error: an error event and
 * [DONE] (a decode stream cut before [DONE], a merge thread that died: RS_ERR_ROUTER_MERGE_WORKER).
 * A decode connection that fails, or a client that leaves, ends the client's connection.
 */
import type { FastifyReply } from 'fastify';
import { toRingserveError } from '../errors.js';
import type { Logger } from '../obs/log.js';
import { JsonWriter } from '../protocol/json-writer.js';
import { writeStreamDone, writeStreamError } from '../protocol/sse.js';
import type { ClientCall } from './client-call.js';
import type { MergeJob } from './merge-pool.js';
import {
  callInstance,
  decodeBody,
  mergeSpec,
  type PdPair,
  type PdWork,
  postGenerate,
  prefillBody,
} from './pd-proxy.js';
import type { TurnGate } from './turn-gate.js';

type Body = Record<string, unknown>;

export async function streamGenerate(
  pair: PdPair,
  work: PdWork,
  body: Body,
  call: ClientCall,
  reply: FastifyReply,
  signal: AbortSignal,
  log: Logger,
): Promise<FastifyReply> {
  const job = work.merge.open();
  try {
    return await streamMerged(pair, work.turns, job, body, call, reply, signal, log);
  } finally {
    job.close();
  }
}

async function streamMerged(
  pair: PdPair,
  turns: TurnGate,
  job: MergeJob,
  body: Body,
  call: ClientCall,
  reply: FastifyReply,
  signal: AbortSignal,
  log: Logger,
): Promise<FastifyReply> {
  const requestId = call.requestId;
  await turns.pass();
  const prefill = await callInstance(pair.prefill, prefillBody(body, requestId), signal, call);
  if (!prefill.ok) {
    pair.metrics.noteAnswer(prefill.status);
    return reply.code(prefill.status).type(prefill.contentType).send(prefill.body);
  }
  const form = body.packed === false ? 'legacy' : 'packed';
  const spec = mergeSpec(body, requestId, form, true);
  const handle = await job.prefill(prefill.bytes, prefill.contentType, prefill.url, spec);
  await turns.pass();
  const { upstream, res } = await postGenerate(
    pair.decode,
    decodeBody(body, requestId, handle, true),
    signal,
    call,
  );
  try {
    if (res.statusCode !== 200) {
      const bytes = Buffer.from(await res.body.arrayBuffer());
      pair.metrics.noteAnswer(res.statusCode);
      return reply.code(res.statusCode).type(String(res.headers['content-type'])).send(bytes);
    }
    reply.hijack();
    const raw = reply.raw;
    raw.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
    pair.metrics.noteAnswer(200);
    let done = false;
    try {
      for await (const chunk of res.body) {
        // A copy of its own to move: undici's chunk may be a view of a buffer it still uses.
        const merged = await job.chunk(new Uint8Array(chunk as Buffer));
        if (merged.out !== null) {
          await turns.pass();
          if (!raw.write(merged.out)) await onceDrained(raw, signal);
        }
        done = merged.done;
        if (done) break;
      }
      if (!done && !signal.aborted) {
        const out = await job.end(upstream.url);
        if (out !== null) raw.write(out);
      }
    } catch (error) {
      if (!isMergeFailure(error) || signal.aborted) throw error;
      log.warn({ request_id: requestId, code: error.code }, error.message);
      raw.write(streamFailure(error));
    }
    raw.end();
    return reply;
  } catch (error) {
    if (reply.sent) {
      reply.raw.destroy();
      return reply;
    }
    throw error;
  } finally {
    pair.decode.release(upstream);
  }
}

/** A merge thread's coded error (not a socket's): the client's stream can still say it. */
function isMergeFailure(error: unknown): error is { code: string; message: string } {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code.startsWith('RS_ERR_');
}

/** The error event and [DONE] (once per failed stream: a writer of its own is fine). */
function streamFailure(error: unknown): Buffer {
  const w = new JsonWriter(1024);
  writeStreamError(w, toRingserveError(error));
  writeStreamDone(w);
  return w.finish();
}

function onceDrained(raw: NodeJS.WritableStream, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      raw.off('drain', done);
      signal.removeEventListener('abort', done);
      resolve();
    };
    raw.on('drain', done);
    signal.addEventListener('abort', done);
  });
}
