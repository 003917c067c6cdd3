/**
 * Response size per token for one long completion, in every form, from a running server:
 *
 *   node dist/ops/response-size.js [--url http://127.0.0.1:8000] [--tokens 12000] [--json]
 *
 * Start the server with a preset whose MoE shape you want (qwen3-30b-a3b by default) and
 * `--max-speed`, so a 12k-token response takes seconds. Prints a markdown table and, with --json, a
 * last line with bytes per token by form and payload.
 */
import { parseArgs } from 'node:util';
import { request } from 'undici';

const { values } = parseArgs({
  options: {
    url: { type: 'string', default: 'http://127.0.0.1:8000' },
    tokens: { type: 'string', default: '12000' },
    json: { type: 'boolean', default: false },
  },
});
const tokens = Number(values.tokens);

const PAYLOADS = {
  'token ids + logprobs': { logprobs: 1 },
  '+ sampling mask': { logprobs: 1, return_sampling_mask: true },
  '+ mask + routed experts': {
    logprobs: 1,
    return_sampling_mask: true,
    return_routed_experts: true,
  },
} as const;
const FORMS = ['packed JSON', 'legacy JSON', 'msgpack'] as const;

async function size(extra: object, form: (typeof FORMS)[number]): Promise<number> {
  const res = await request(`${values.url}/inference/v1/generate`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: form === 'msgpack' ? 'application/msgpack' : 'application/json',
    },
    body: JSON.stringify({
      token_ids: Array.from({ length: 512 }, (_, i) => (i * 7919) % 100_000),
      packed: form !== 'legacy JSON',
      sampling_params: {
        max_tokens: tokens,
        ignore_eos: true,
        seed: 7,
        temperature: 1,
        top_p: 0.97,
        top_k: 512,
        ...extra,
      },
    }),
  });
  if (res.statusCode !== 200) throw new Error(`HTTP ${res.statusCode}: ${await res.body.text()}`);
  let bytes = 0;
  for await (const chunk of res.body) bytes += (chunk as Buffer).length;
  return bytes;
}

const rows: Record<string, Record<string, number>> = {};
console.log(`| payload (${tokens} tokens) | ${FORMS.join(' | ')} |`);
console.log(`|---|${FORMS.map(() => '---|').join('')}`);
for (const [name, extra] of Object.entries(PAYLOADS)) {
  const row: Record<string, number> = {};
  for (const form of FORMS) row[form] = (await size(extra, form)) / tokens;
  rows[name] = row;
  const cells = FORMS.map((f) => `${row[f]!.toFixed(1)} B/token`);
  console.log(`| ${name} | ${cells.join(' | ')} |`);
}
if (values.json) console.log(JSON.stringify({ tokens, bytes_per_token: rows }));
