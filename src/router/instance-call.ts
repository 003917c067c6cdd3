/**
 * One JSON call to one instance, for the routes that do not merge (fan-out, /v1/models, the OpenAI
 * routes): the pool's dispatcher and its Bearer key, and the instance's answer read whole or handed
 * on as a stream. An instance that refuses the router's key is the operator's to mend, not the
 * client's: a 502 that says so (as pd-proxy.ts answers it on the generate route).
 */
import { request } from 'undici';
import { type ErrorBody, errorTypeForStatus, RS_ERR_ROUTER_UPSTREAM } from '../errors.js';
import type { UpstreamPool } from './upstreams.js';

export type InstanceResponse = Awaited<ReturnType<typeof request>>;

export interface CallOptions {
  method: 'GET' | 'POST';
  /** The path and query string, e.g. `/pause?mode=keep`. */
  path: string;
  /** Sent as JSON; undefined: no body. */
  body?: unknown;
  /** Extra request headers (x-request-id, ...). */
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/** Sends the call; the answer's body is the caller's to read or dump. */
export async function callRaw(
  pool: UpstreamPool,
  url: string,
  options: CallOptions,
): Promise<InstanceResponse> {
  const headers: Record<string, string> = { ...options.headers };
  if (pool.authorization !== null) headers.authorization = pool.authorization;
  let payload: string | undefined;
  if (options.body !== undefined) {
    headers['content-type'] = 'application/json';
    payload = JSON.stringify(options.body);
  }
  let res: InstanceResponse;
  try {
    res = await request(`${url}${options.path}`, {
      method: options.method,
      dispatcher: pool.dispatcher,
      headers,
      body: payload,
      signal: options.signal,
    });
  } catch (error) {
    throw new RS_ERR_ROUTER_UPSTREAM(pool.role, url, (error as Error).message);
  }
  if (res.statusCode === 401) {
    await res.body.dump();
    throw new RS_ERR_ROUTER_UPSTREAM(
      pool.role,
      url,
      pool.authorization === null
        ? 'it asks for an API key: give the router --upstream-api-key'
        : "it refused the router's key: its --api-key is not the router's --upstream-api-key",
    );
  }
  return res;
}

/** An instance's answer read whole: parsed when it says JSON, else its text. */
export interface InstanceAnswer {
  status: number;
  contentType: string;
  body: unknown;
  bytes: Buffer;
}

export async function callJson(
  pool: UpstreamPool,
  url: string,
  options: CallOptions,
): Promise<InstanceAnswer> {
  const res = await callRaw(pool, url, options);
  let bytes: Buffer;
  try {
    bytes = Buffer.from(await res.body.arrayBuffer());
  } catch (error) {
    throw new RS_ERR_ROUTER_UPSTREAM(pool.role, url, (error as Error).message);
  }
  const contentType = String(res.headers['content-type'] ?? 'application/json');
  let body: unknown = bytes.toString('utf8');
  if (contentType.includes('json')) {
    try {
      body = JSON.parse(body as string);
    } catch {
      // Kept as text: what the instance said is still worth showing.
    }
  }
  return { status: res.statusCode, contentType, body, bytes };
}

/**
 * The contract's error body for an answer the router composes from several instances' (fan-out,
 * drains), which no single coded error describes.
 */
export function errorBody(status: number, message: string, param: string | null = null): ErrorBody {
  return { error: { message, type: errorTypeForStatus(status), param, code: status } };
}
