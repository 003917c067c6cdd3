/**
 * Closed-loop rollouts through the balancer, every request accounted for: the load side of the
 * network-namespace test (test/ops/netns.test.ts), run inside the balancer's namespace:
 *
 *   ip netns exec <lb ns> node dist/ops/netns/load.js --url http://10.x.y.1:8000 --api-key K \
 *     --out records.json [--concurrency 24] [--turns 4] [--max-tokens 128] [--deadline-ms 30000]
 *
 * Each of `concurrency` workers runs rollouts of `turns` requests; a rollout's requests carry one
 * X-Session-ID (every fourth worker sends none: plain least-connections traffic). Every request has
 * a deadline and ends as a record: when it started and ended, the status, the node HAProxy names
 * in X-Served-By, or the error. SIGTERM stops new requests; once those in flight have ended the
 * records go to --out and a one-line summary to stdout.
 */
import { writeFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';

export interface LoadRecord {
  /** Wall-clock ms (Date.now()) when the request was sent and when it ended. */
  start: number;
  end: number;
  /** X-Session-ID, or null for a request without one. */
  session: string | null;
  turn: number;
  /** HTTP status, 0 if none came. */
  status: number;
  /** X-Served-By (HAProxy's server name), null if absent. */
  servedBy: string | null;
  /** Why the request failed without an answer: 'deadline', or the socket error's code. */
  error: string | null;
  /** Generated tokens in a 200 answer. */
  tokens: number;
}

export interface LoadResult {
  sent: number;
  records: LoadRecord[];
}

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    'api-key': { type: 'string' },
    out: { type: 'string' },
    concurrency: { type: 'string', default: '24' },
    turns: { type: 'string', default: '4' },
    'max-tokens': { type: 'string', default: '128' },
    'deadline-ms': { type: 'string', default: '30000' },
  },
});
if (values.url === undefined || values.out === undefined) {
  throw new Error('load.js needs --url and --out');
}
const url = `${values.url}/inference/v1/generate`;
const maxTokens = Number(values['max-tokens']);
const deadlineMs = Number(values['deadline-ms']);
const turns = Number(values.turns);
const agent = new Agent({ connections: Number(values.concurrency) * 2 });
const records: LoadRecord[] = [];
let sent = 0;
let stopping = false;

async function send(session: string | null, turn: number, prompt: number[]): Promise<LoadRecord> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (values['api-key'] !== undefined) headers.authorization = `Bearer ${values['api-key']}`;
  if (session !== null) headers['x-session-id'] = session;
  const record: LoadRecord = {
    start: Date.now(),
    end: 0,
    session,
    turn,
    status: 0,
    servedBy: null,
    error: null,
    tokens: 0,
  };
  sent++;
  try {
    const res = await request(url, {
      method: 'POST',
      dispatcher: agent,
      headers,
      signal: AbortSignal.timeout(deadlineMs),
      body: JSON.stringify({
        token_ids: prompt,
        sampling_params: { max_tokens: maxTokens, ignore_eos: true },
      }),
    });
    record.status = res.statusCode;
    const served = res.headers['x-served-by'];
    record.servedBy = typeof served === 'string' ? served : null;
    const text = await res.body.text();
    if (res.statusCode === 200) {
      const body = JSON.parse(text) as { choices: { token_ids: number[] }[] };
      record.tokens = body.choices[0]?.token_ids.length ?? 0;
    }
  } catch (error) {
    const e = error as { name?: string; code?: string; message?: string };
    record.error = e.name === 'TimeoutError' ? 'deadline' : (e.code ?? e.message ?? String(error));
  }
  record.end = Date.now();
  records.push(record);
  return record;
}

/** One worker: rollouts of `turns` requests, each turn's prompt extending the one before. */
async function worker(index: number): Promise<void> {
  for (let rollout = 0; !stopping; rollout++) {
    const session = index % 4 === 3 ? null : `w${index}-r${rollout}`;
    const prompt = Array.from({ length: 64 }, (_, i) => (index * 131 + rollout * 17 + i) % 900);
    for (let turn = 0; turn < turns && !stopping; turn++) {
      const record = await send(session, turn, prompt);
      for (let i = 0; i < 16; i++) prompt.push((record.end + i) % 900);
    }
  }
}

process.once('SIGTERM', () => {
  stopping = true;
});
const workers = Array.from({ length: Number(values.concurrency) }, (_, i) => worker(i));
process.stdout.write('load: started\n');
await Promise.all(workers);
await agent.close();
const result: LoadResult = { sent, records };
writeFileSync(values.out, JSON.stringify(result));
const failed = records.filter((r) => r.status !== 200).length;
process.stdout.write(`load: sent ${sent}, answered ${records.length}, failed ${failed}\n`);
