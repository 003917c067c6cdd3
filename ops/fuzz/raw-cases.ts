/**
 * Fuzz cases that only a raw socket can send: absurd, negative, non-numeric and duplicated
 * Content-Length headers, broken chunked framing, header lines with control bytes, a request line
 * that is not HTTP. Each case goes on a new connection that is half-closed after the bytes; the
 * answer must pass answerProblem, and silence is allowed only where the framing still promises
 * bytes the client never sent (the server is right to wait, then drop the connection).
 */
import { connect } from 'node:net';
import fc from 'fast-check';
import { answerProblem } from './answer-check.js';
import { GENERATE_PATH } from './http-cases.js';

export interface RawCase {
  bytes: Buffer;
  /** The framing promises more body than was sent: no answer is a right answer. */
  incomplete: boolean;
}

const LENGTHS = [
  '-1',
  'abc',
  '1e3',
  '0x10',
  '+5',
  ' 5 ',
  '99999999999999999999',
  '4294967296',
  '18446744073709551616',
  '',
  '5, 6',
] as const;

const framing = fc.oneof(
  fc.constantFrom(...LENGTHS).map((v) => ({ header: `Content-Length: ${v}\r\n`, promise: -1 })),
  fc.nat({ max: 100_000 }).map((n) => ({ header: `Content-Length: ${n}\r\n`, promise: n })),
  fc
    .tuple(fc.nat({ max: 64 }), fc.nat({ max: 64 }))
    .map(([a, b]) => ({ header: `Content-Length: ${a}\r\nContent-Length: ${b}\r\n`, promise: -1 })),
  fc.constant({ header: 'Transfer-Encoding: chunked\r\n', promise: -2 }),
  fc.constant({ header: 'Transfer-Encoding: chunked\r\nContent-Length: 3\r\n', promise: -1 }),
  fc.constant({ header: '', promise: 0 }),
);

const requestLine = fc.oneof(
  { weight: 6, arbitrary: fc.constant(`POST ${GENERATE_PATH} HTTP/1.1\r\n`) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      'GET /health HTTP/1.1\r\n',
      `POST ${GENERATE_PATH} HTTP/1.0\r\n`,
      `POST ${GENERATE_PATH} HTTP/9.9\r\n`,
      'NOT HTTP AT ALL\r\n',
      `POST ${GENERATE_PATH}\r\n`,
      `POST /\u00ff HTTP/1.1\r\n`,
    ),
  },
);

const junkHeader = fc.oneof(
  fc.constant(''),
  fc.constantFrom(
    'X-Junk: \u0001\u0002\r\n',
    'Bad Header\r\n',
    ': empty-name\r\n',
    `X-Long: ${'a'.repeat(20_000)}\r\n`,
    'Content-Type: application/msgpack\r\n',
    'Expect: 100-continue\r\n',
  ),
);

export const rawCase: fc.Arbitrary<RawCase> = fc
  .tuple(requestLine, framing, junkHeader, fc.uint8Array({ maxLength: 300 }))
  .map(([line, frame, junk, body]) => {
    const head = `${line}Host: fuzz\r\nContent-Type: application/json\r\n${junk}${frame.header}\r\n`;
    const incomplete = frame.promise === -2 || frame.promise > body.length;
    return { bytes: Buffer.concat([Buffer.from(head, 'latin1'), body]), incomplete };
  });

/** Sends one raw case; resolves with what is wrong with the answer, or null. */
export function sendRawCase(port: number, c: RawCase, timeoutMs = 10_000): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    let settled = false;
    const done = (problem: string | null): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      socket.destroy();
      resolve(problem);
    };
    const timer = setTimeout(() => {
      done(c.incomplete && chunks.length === 0 ? null : judge());
    }, timeoutMs);
    const judge = (): string | null => {
      const text = Buffer.concat(chunks).toString('latin1');
      if (text === '') return c.incomplete ? null : 'the connection closed without an answer';
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(text)?.[1] ?? Number.NaN);
      if (Number.isNaN(status)) return `not an HTTP answer: ${text.slice(0, 120)}`;
      const split = text.indexOf('\r\n\r\n');
      const head = text.slice(0, split).toLowerCase();
      if (status < 400 || split < 0) return status >= 500 ? `HTTP ${status}` : null;
      const contentType = /\r\ncontent-type: ([^\r\n]*)/.exec(head)?.[1] ?? '';
      const length = Number(/\r\ncontent-length: (\d+)/.exec(head)?.[1] ?? Number.NaN);
      const body = Number.isNaN(length)
        ? text.slice(split + 4)
        : text.slice(split + 4, split + 4 + length);
      return answerProblem(status, contentType, body);
    };
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      // One answer is all this judges: once a whole one arrived, stop waiting for the close.
      const text = Buffer.concat(chunks).toString('latin1');
      const split = text.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length: (\d+)/i.exec(text.slice(0, split))?.[1];
      if (split >= 0 && length !== undefined && text.length >= split + 4 + Number(length)) {
        done(judge());
      }
    });
    socket.on('error', () => {});
    socket.on('close', () => done(judge()));
    socket.end(c.bytes);
  });
}
