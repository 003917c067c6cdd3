/**
 * Helpers of the control-plane tests: JSON calls (optionally pinned to one connection, and so to
 * one API server), generate bodies and a generate call on a raw connection of its own, weight
 * manifests.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import { type Client, request } from 'undici';
import type { GenerateResult } from '../../src/client/index.js';
import type { Cluster } from './harness.js';

export interface Answer {
  status: number;
  body: unknown;
}

/** A JSON call; `via` pins it to one connection (and so to one API server). */
export async function call(
  base: string,
  method: 'GET' | 'POST',
  path: string,
  opts: { body?: unknown; key?: string; via?: Client } = {},
): Promise<Answer> {
  const headers: Record<string, string> = {};
  if (opts.body !== undefined) headers['content-type'] = 'application/json';
  if (opts.key !== undefined) headers.authorization = `Bearer ${opts.key}`;
  const res = await request(new URL(path, base), {
    method,
    headers,
    body: opts.body === undefined ? null : JSON.stringify(opts.body),
    ...(opts.via === undefined ? {} : { dispatcher: opts.via }),
  });
  const text = await res.body.text();
  let body: unknown = text;
  try {
    body = text === '' ? null : JSON.parse(text);
  } catch {}
  return { status: res.statusCode, body };
}

export const post = (c: Cluster, path: string, body?: unknown, key?: string): Promise<Answer> =>
  call(c.url, 'POST', path, { body, ...(key === undefined ? {} : { key }) });

/** A generate body that runs exactly `maxTokens` tokens (ignore_eos) with logprobs. */
export const genBody = (maxTokens: number, seed: number, tokenIds = [3, 1, 4, 1, 5, 9, 2, 6]) => ({
  token_ids: tokenIds,
  sampling_params: { max_tokens: maxTokens, ignore_eos: true, seed, logprobs: 1 },
});

export const choice = (r: GenerateResult) => r.choices[0]!;

/** `<parent>/<name>`, holding a weights manifest of `version` unless it is null. */
export async function weightDir(
  parent: string,
  name: string,
  version: number | null,
): Promise<string> {
  const dir = join(parent, name);
  await mkdir(dir);
  if (version !== null) {
    await writeFile(join(dir, 'ringserve-weights.json'), JSON.stringify({ version }));
  }
  return dir;
}

export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

export type Outcome = number | 'closed' | 'refused' | 'timeout';

/**
 * A generate call on a raw connection of its own: the status line's code, `closed` when the
 * connection ended (or was reset) without an answer, `refused`, or `timeout`. Raw, so no client
 * retries a request whose connection closed unanswered.
 */
export function generateOnNewConnection(
  port: number,
  seed = 1,
  timeoutMs = 15_000,
): Promise<Outcome> {
  const body = JSON.stringify(genBody(4, seed));
  return new Promise((resolve) => {
    let received = '';
    let refused = false;
    const socket = connect(port, '127.0.0.1', () => {
      socket.write(
        `POST /inference/v1/generate HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n` +
          `content-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
      );
    });
    const timer = setTimeout(() => {
      socket.destroy();
      resolve('timeout');
    }, timeoutMs);
    socket.on('data', (chunk) => {
      received += String(chunk);
    });
    socket.on('error', (error: NodeJS.ErrnoException) => {
      refused = error.code === 'ECONNREFUSED';
    });
    socket.on('close', () => {
      clearTimeout(timer);
      const status = /^HTTP\/1\.1 (\d{3})/.exec(received);
      resolve(status !== null ? Number(status[1]) : refused ? 'refused' : 'closed');
    });
  });
}
