import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { unpack } from 'msgpackr';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ClientHttpError,
  checkInvariants,
  generate,
  generateStream,
} from '../../src/client/index.js';
import { RS_ERR_ENGINE_DEAD, RS_ERR_MODEL_NOT_FOUND, toErrorBody } from '../../src/errors.js';
import { CONTENT_TYPE, encodeGenerateResponse } from '../../src/protocol/generate-response.js';
import { JsonWriter } from '../../src/protocol/json-writer.js';
import { writeStreamChunk, writeStreamDone, writeStreamError } from '../../src/protocol/sse.js';
import { makeChoice, makeResponse } from '../protocol/columns-fixture.js';
import { until } from '../until.js';

/**
 * The client against a small canned HTTP server (ephemeral port, closed after the file): real
 * undici requests, headers and bodies, without a ringserve cluster.
 */

const PROMPT = 16;
const choice = makeChoice({ promptLen: PROMPT, completion: 300, seed: 99 });
const response = makeResponse([choice], PROMPT);

interface Seen {
  headers: IncomingMessage['headers'];
  body: unknown;
}
const seen: Seen[] = [];
const closed: string[] = [];

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const part of req) parts.push(part as Buffer);
  return Buffer.concat(parts);
}

function streamChunks(res: ServerResponse, failMidway: boolean, finish: boolean): void {
  res.writeHead(200, { 'content-type': 'text/event-stream' });
  const w = new JsonWriter();
  const n = choice.tokenIds.length;
  for (let at = 0; at < n; at += 100) {
    const end = Math.min(n, at + 100);
    w.reset();
    writeStreamChunk(
      w,
      {
        requestId: 'abc',
        model: 'sim',
        created: 1,
        choices: [
          {
            ...choice,
            tokenIds: choice.tokenIds.subarray(at, end),
            logprobs: choice.logprobs!.subarray(at, end),
            maskCounts: null,
            maskIds: null,
            routing: null,
            finishReason: end === n ? 'length' : null,
          },
        ],
        usage: null,
      },
      false,
    );
    res.write(w.finish());
    if (failMidway && at === 100) {
      w.reset();
      writeStreamError(w, new RS_ERR_ENGINE_DEAD('gone'));
      writeStreamDone(w);
      res.end(w.finish());
      return;
    }
  }
  if (!finish) {
    res.end(); // a clean end of the body, but no [DONE]
    return;
  }
  w.reset();
  writeStreamDone(w);
  res.end(w.finish());
}

async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
  const raw = await readBody(req);
  const body = (
    req.headers['content-type'] === 'application/msgpack' ? unpack(raw) : JSON.parse(raw.toString())
  ) as Record<string, unknown>;
  seen.push({ headers: req.headers, body });
  const mode = String(body.mode ?? 'ok');
  if (mode === 'bad') {
    res
      .writeHead(404, { 'content-type': 'application/json' })
      .end(JSON.stringify(toErrorBody(new RS_ERR_MODEL_NOT_FOUND('gpt'))));
  } else if (mode === 'hang') {
    res.on('close', () => closed.push('hang'));
  } else if (body.stream === true) {
    res.on('close', () => closed.push(mode));
    if (mode === 'slow') {
      // One event, then nothing: only the client leaving closes this connection.
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const w = new JsonWriter();
      const first = {
        ...choice,
        tokenIds: choice.tokenIds.subarray(0, 1),
        logprobs: null,
        maskCounts: null,
        maskIds: null,
        routing: null,
        finishReason: null,
      };
      writeStreamChunk(
        w,
        { requestId: 'abc', model: 'sim', created: 1, choices: [first], usage: null },
        false,
      );
      res.write(w.finish());
      const safety = setTimeout(() => res.end(), 20_000);
      res.on('close', () => clearTimeout(safety));
      return;
    }
    streamChunks(res, mode === 'fail', mode !== 'cut');
  } else {
    const form =
      req.headers.accept === 'application/msgpack'
        ? 'msgpack'
        : body.packed === false
          ? 'legacy'
          : 'packed';
    res
      .writeHead(200, { 'content-type': CONTENT_TYPE[form] })
      .end(encodeGenerateResponse(response, form));
  }
}

let server: Server;
let baseUrl: string;

beforeAll(async () => {
  server = createServer((req, res) => void handle(req, res));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('generate()', () => {
  it('decodes the packed, legacy and msgpack answers to identical arrays', async () => {
    const body = { token_ids: [1, 2], sampling_params: { max_tokens: 300 } };
    const packed = await generate(baseUrl, body);
    const legacy = await generate(baseUrl, { ...body, packed: false });
    const binary = await generate(baseUrl, body, { accept: 'msgpack', bodyEncoding: 'msgpack' });
    expect(packed.choices[0]!.tokenIds).toEqual(choice.tokenIds);
    expect(legacy).toEqual(packed);
    expect(binary).toEqual(packed);
    checkInvariants(packed, PROMPT);
    const last = seen.at(-1)!;
    expect(last.headers['content-type']).toBe('application/msgpack');
    expect(last.headers.accept).toBe('application/msgpack');
    expect(last.body).toMatchObject({ token_ids: [1, 2], stream: false });
  });

  it('sends token_ids given as a typed array as a plain array, in both encodings', async () => {
    for (const bodyEncoding of ['json', 'msgpack'] as const) {
      await generate(
        baseUrl,
        { token_ids: Int32Array.from([5, 6, 7]), sampling_params: {} },
        { bodyEncoding },
      );
      expect(seen.at(-1)!.body).toMatchObject({ token_ids: [5, 6, 7] });
    }
  });

  it('sends the API key and request id headers', async () => {
    await generate(
      baseUrl,
      { token_ids: [1], sampling_params: {} },
      { apiKey: 'k', requestId: 'r-1', headers: { 'x-extra': '1' } },
    );
    const last = seen.at(-1)!;
    expect(last.headers.authorization).toBe('Bearer k');
    expect(last.headers['x-request-id']).toBe('r-1');
    expect(last.headers['x-extra']).toBe('1');
  });

  it('turns a non-2xx answer into RS_ERR_CLIENT_HTTP with the status and error body', async () => {
    const err = (await generate(baseUrl, { mode: 'bad' }).catch(
      (e: unknown) => e,
    )) as ClientHttpError;
    expect(err.code).toBe('RS_ERR_CLIENT_HTTP');
    expect(err.status).toBe(404);
    expect(err.body).toEqual(toErrorBody(new RS_ERR_MODEL_NOT_FOUND('gpt')));
    expect(err.message).toBe('server answered 404: the model `gpt` does not exist');
  });

  it('ends a call that gets no answer within its bound with RS_ERR_CLIENT_TIMEOUT', async () => {
    const err = await generate(baseUrl, { mode: 'hang' }, { timeoutMs: 200 }).catch(
      (e: unknown) => e,
    );
    expect(err).toMatchObject({
      code: 'RS_ERR_CLIENT_TIMEOUT',
      message: 'no complete answer within 200 ms',
    });
  });

  it('lets the caller abort, without calling that a timeout', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const err = await generate(
      baseUrl,
      { mode: 'hang' },
      { signal: controller.signal, timeoutMs: 10_000 },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as { code?: string }).code).not.toBe('RS_ERR_CLIENT_TIMEOUT');
  });
});

describe('generateStream()', () => {
  it('yields deltas and concatenates them into the non-streamed arrays', async () => {
    const stream = generateStream(baseUrl, { mode: 'ok', token_ids: [1] });
    const sizes: number[] = [];
    for await (const delta of stream) sizes.push(delta.choices[0]!.tokenIds.length);
    expect(sizes).toEqual([100, 100, 100]);
    const result = stream.result();
    expect(result.choices[0]!.tokenIds).toEqual(choice.tokenIds);
    expect(result.choices[0]!.logprobs).toEqual(choice.logprobs);
    expect(result.choices[0]!.finishReason).toBe('length');
    expect(seen.at(-1)!.body).toMatchObject({ stream: true });
    expect(seen.at(-1)!.headers.accept).toBe('application/json');
  });

  it('collect() drains the stream', async () => {
    const result = await generateStream(baseUrl, { mode: 'ok' }).collect();
    expect(result.choices[0]!.tokenIds.length).toBe(300);
  });

  it('turns an error event into RS_ERR_CLIENT_HTTP with the error body', async () => {
    const err = (await generateStream(baseUrl, { mode: 'fail' })
      .collect()
      .catch((e: unknown) => e)) as ClientHttpError;
    expect(err.code).toBe('RS_ERR_CLIENT_HTTP');
    expect(err.status).toBe(503);
    expect(err.message).toContain('the engine core is not running: gone');
  });

  it('reports a stream cut before [DONE]', async () => {
    const err = await generateStream(baseUrl, { mode: 'cut' })
      .collect()
      .catch((e: unknown) => e);
    expect(err).toMatchObject({
      code: 'RS_ERR_CLIENT_DECODE',
      message: 'response could not be decoded: the stream ended without data: [DONE]',
    });
  });

  it('closes the connection when the consumer leaves early', async () => {
    let received = 0;
    for await (const delta of generateStream(baseUrl, { mode: 'slow' })) {
      received += delta.choices[0]!.tokenIds.length;
      break;
    }
    expect(received).toBe(1);
    await until(
      () => closed,
      (ids) => ids.includes('slow'),
      { what: "the server to see the 'slow' connection closed" },
    );
  });
});
