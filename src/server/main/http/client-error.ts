/**
 * What a client gets when Node's HTTP parser refuses its request before fastify routes it (a bad
 * request line or header, an invalid Content-Length, broken chunked framing, headers too large, a
 * request that never finished arriving): the contract's error body like every other answer, where
 * fastify's default handler writes a body of its own shape. The connection is closed after it.
 */
import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import {
  type RingserveError,
  RS_ERR_HTTP_CLIENT_TIMEOUT,
  RS_ERR_HTTP_HEADERS_TOO_LARGE,
  RS_ERR_HTTP_MALFORMED,
  toErrorBody,
} from '../../../errors.js';

function errorFor(error: Error & { code?: string }): RingserveError {
  if (error.code === 'ERR_HTTP_REQUEST_TIMEOUT') return new RS_ERR_HTTP_CLIENT_TIMEOUT();
  if (error.code === 'HPE_HEADER_OVERFLOW') return new RS_ERR_HTTP_HEADERS_TOO_LARGE();
  return new RS_ERR_HTTP_MALFORMED(error.code ?? error.message);
}

export function answerClientError(error: Error & { code?: string }, socket: Socket): void {
  // A reset connection is gone: there is nobody to answer.
  if (error.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writable) {
    const answer = toErrorBody(errorFor(error));
    const body = JSON.stringify(answer);
    const status = answer.error.code;
    socket.write(
      `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\n` +
        `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `Connection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy();
}
