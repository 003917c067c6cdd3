/**
 * What the primary's listener answers while the node drains and for --drain-grace-s after: a 503
 * with the contract's error body (RS_ERR_SERVER_DRAINING), Retry-After and `Connection: close`, to
 * every request on every connection accepted from then on. A load balancer keeps sending a leaving
 * node requests for a few seconds (HAProxy's health checks); with the listener closed it gets a
 * refused or reset connection and answers its client 502, with this it gets a 503 it can retry
 * elsewhere. The API servers are not involved: they are draining or gone.
 */
import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { RS_ERR_SERVER_DRAINING, toErrorBody } from '../errors.js';

export class DrainingAnswer {
  readonly #http: Server;
  readonly #sockets = new Set<Socket>();

  constructor(retryAfterS: number) {
    const body = JSON.stringify(toErrorBody(new RS_ERR_SERVER_DRAINING()));
    const headers = {
      'content-type': 'application/json; charset=utf-8',
      'content-length': String(Buffer.byteLength(body)),
      'retry-after': String(retryAfterS),
      connection: 'close',
    };
    this.#http = createServer((request, response) => {
      // Read the body to its end, so closing the connection after the answer does not reset it.
      request.resume();
      response.writeHead(503, headers);
      response.end(body);
    });
  }

  /** Serves one accepted connection (paused on accept: nothing has been read from it). */
  take(socket: Socket): void {
    this.#sockets.add(socket);
    socket.once('close', () => this.#sockets.delete(socket));
    this.#http.emit('connection', socket);
    socket.resume();
  }

  /** The grace is over: connections still open (a client that never sent a request) are closed. */
  close(): void {
    for (const socket of this.#sockets) socket.destroy();
    this.#sockets.clear();
  }
}
