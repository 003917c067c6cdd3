/**
 * The side channel of the modelled NIXL pair: a prefill engine listens on TCP (vLLM's
 * VLLM_NIXL_SIDE_CHANNEL_PORT, where its NixlConnector answers handshakes), and a decode engine
 * asks it for a request's blocks and tells it when it is done with them. Messages are one JSON
 * object per line, one question and one answer per connection; the KV itself does not travel (its
 * transfer time is modelled by the decode engine's simulator, external-kv.ts). Every wait is bounded.
 *
 *   decode -> prefill  {"op": "read", "engine_id", "request_id", "block_ids"}
 *   prefill -> decode  {"ok": true, "num_tokens"}  |  {"ok": false, "error"}
 *   decode -> prefill  {"op": "done", "engine_id", "request_id"}
 *   prefill -> decode  {"ok": true}  (the blocks are freed)
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export type SideChannelMessage = Record<string, unknown>;

/** Answers one message (the prefill engine's connector). */
export type SideChannelHandler = (message: SideChannelMessage) => SideChannelMessage;

/** The longest line either side reads: a handle's block ids of a long prompt, with room. */
const MAX_LINE_BYTES = 1 << 20;
/** How long a connection may stay open on the prefill side without a complete question. */
const IDLE_MS = 10_000;

export class SideChannelServer {
  readonly #server: Server;
  readonly #sockets: Set<Socket>;
  readonly port: number;

  private constructor(server: Server, port: number, sockets: Set<Socket>) {
    this.#server = server;
    this.port = port;
    this.#sockets = sockets;
  }

  /** Listens on host:port (port 0: any free one, `port` says which). */
  static listen(
    host: string,
    port: number,
    handle: SideChannelHandler,
  ): Promise<SideChannelServer> {
    const sockets = new Set<Socket>();
    const server = createServer((socket) => serve(socket, handle, sockets));
    return new Promise((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        const address = server.address();
        const bound = typeof address === 'object' && address !== null ? address.port : port;
        resolve(new SideChannelServer(server, bound, sockets));
      });
    });
  }

  close(): void {
    this.#server.close();
    for (const socket of this.#sockets) socket.destroy();
  }
}

function serve(socket: Socket, handle: SideChannelHandler, open: Set<Socket>): void {
  open.add(socket);
  socket.setTimeout(IDLE_MS, () => socket.destroy());
  socket.on('close', () => open.delete(socket));
  socket.on('error', () => socket.destroy());
  readLines(socket, (line) => {
    let answer: SideChannelMessage;
    try {
      answer = handle(JSON.parse(line) as SideChannelMessage);
    } catch (error) {
      answer = { ok: false, error: `bad message: ${(error as Error).message}` };
    }
    socket.write(`${JSON.stringify(answer)}\n`);
  });
}

/** Calls `fn` with each complete line; a line past MAX_LINE_BYTES ends the connection. */
function readLines(socket: Socket, fn: (line: string) => void): void {
  let buffered = '';
  socket.setEncoding('utf8');
  socket.on('data', (chunk: string) => {
    buffered += chunk;
    for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
      fn(buffered.slice(0, nl));
      buffered = buffered.slice(nl + 1);
    }
    if (buffered.length > MAX_LINE_BYTES) socket.destroy();
  });
}

/**
 * Sends one message to host:port and resolves with the answer; rejects when nothing answers within
 * `timeoutMs` (refused, unreachable, silent) or the answer is not a JSON object.
 */
export function sideChannelCall(
  host: string,
  port: number,
  message: SideChannelMessage,
  timeoutMs: number,
): Promise<SideChannelMessage> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ host, port });
    let settled = false;
    const settle = (error: Error | null, answer?: SideChannelMessage): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      if (error === null) resolve(answer as SideChannelMessage);
      else reject(error);
    };
    const timer = setTimeout(
      () => settle(new Error(`no answer from ${host}:${port} within ${timeoutMs} ms`)),
      timeoutMs,
    );
    socket.on('error', (error) => settle(error));
    socket.on('close', () => settle(new Error(`${host}:${port} closed without an answer`)));
    socket.on('connect', () => socket.write(`${JSON.stringify(message)}\n`));
    readLines(socket, (line) => {
      try {
        const answer = JSON.parse(line) as unknown;
        if (typeof answer !== 'object' || answer === null || Array.isArray(answer))
          throw new Error('not an object');
        settle(null, answer as SideChannelMessage);
      } catch (error) {
        settle(
          new Error(`${host}:${port} answered ${line.slice(0, 80)}: ${(error as Error).message}`),
        );
      }
    });
  });
}
