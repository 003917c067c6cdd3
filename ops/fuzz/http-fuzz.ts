/**
 * Runs the route fuzz against a running server: data cases (generate, the read-only routes, unknown
 * routes) over one undici Pool, raw-socket cases, then control-route cases and a final /resume (a
 * fuzzed /pause must not outlive the run). Each phase is one fast-check run that stops at its first
 * failing case and shrinks it. After all of them the server must answer /health 200.
 */
import fc from 'fast-check';
import { Pool } from 'undici';
import { answerProblem } from './answer-check.js';
import { controlCase, dataCase, type HttpCase } from './http-cases.js';
import { type RawCase, rawCase, sendRawCase } from './raw-cases.js';

/** A generate case that should take a moment at --max-speed; a stuck answer is a failure. */
const ANSWER_TIMEOUT_MS = 60_000;
/** Shares of the cases: data routes, raw sockets, control routes. */
const SHARES = { data: 0.8, raw: 0.1, control: 0.1 } as const;

export interface HttpFuzzReport {
  cases: number;
  /** Answers by HTTP status ("none" for a raw case left unanswered by design). */
  statuses: Record<string, number>;
  failures: string[];
  healthyAfter: boolean;
}

export async function runHttpFuzz(
  url: string,
  port: number,
  cases: number,
  seed: number,
): Promise<HttpFuzzReport> {
  const pool = new Pool(url, {
    connections: 8,
    headersTimeout: ANSWER_TIMEOUT_MS,
    bodyTimeout: ANSWER_TIMEOUT_MS,
  });
  const statuses: Record<string, number> = {};
  const failures: string[] = [];
  const count = (status: number | string): void => {
    statuses[status] = (statuses[status] ?? 0) + 1;
  };
  const send = async (c: HttpCase): Promise<void> => {
    const problem = await sendCase(pool, c, count);
    if (problem !== null) throw new Error(`${c.method} ${c.path}: ${problem}`);
  };
  const phases: [string, fc.IAsyncPropertyWithHooks<[unknown]>, number][] = [
    ['data routes', fc.asyncProperty(dataCase, send as (c: unknown) => Promise<void>), SHARES.data],
    [
      'raw sockets',
      fc.asyncProperty(rawCase, async (c: RawCase) => {
        const problem = await sendRawCase(port, c);
        count(problem === null ? 'raw-ok' : 'raw-bad');
        if (problem !== null)
          throw new Error(
            `raw ${JSON.stringify(c.bytes.toString('latin1').slice(0, 200))}: ${problem}`,
          );
      }) as fc.IAsyncPropertyWithHooks<[unknown]>,
      SHARES.raw,
    ],
    [
      'control routes',
      fc.asyncProperty(controlCase, send as (c: unknown) => Promise<void>),
      SHARES.control,
    ],
  ];
  try {
    for (const [name, property, share] of phases) {
      const result = await fc.check(property, {
        numRuns: Math.max(1, Math.round(cases * share)),
        seed,
      });
      if (result.failed) failures.push(`${name}: ${errorText(result.errorInstance)}`);
    }
    const resume = await pool.request({ path: '/resume', method: 'POST' });
    await resume.body.dump();
    const health = await pool.request({ path: '/health', method: 'GET' });
    await health.body.dump();
    return { cases, statuses, failures, healthyAfter: health.statusCode === 200 };
  } finally {
    await pool.destroy();
  }
}

function errorText(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).slice(0, 1000);
}

async function sendCase(
  pool: Pool,
  c: HttpCase,
  count: (status: number) => void,
): Promise<string | null> {
  let res: Awaited<ReturnType<Pool['request']>>;
  try {
    res = await pool.request({
      method: c.method,
      path: c.path,
      headers: c.headers,
      body: c.body === null ? undefined : Buffer.from(c.body),
      signal: AbortSignal.timeout(ANSWER_TIMEOUT_MS),
    });
  } catch (error) {
    return `no answer: ${(error as Error).message}`;
  }
  const text = await res.body.text();
  count(res.statusCode);
  return answerProblem(res.statusCode, String(res.headers['content-type'] ?? ''), text);
}
