#!/usr/bin/env node
// Builds the `tiny` preset's tokenizer (tokenizers/tiny/): a byte-level BPE of exactly the preset's
// 1000 ids, in Hugging Face's tokenizer.json format, so the tests' model has a real tokenizer that
// every code path (templates, byte-level detokenization, characters split across tokens) runs on.
//   ids 0..255    the 256 bytes, spelled in GPT-2's byte alphabet
//   ids 256..996  741 merges learned here, most frequent pair first, on the corpus below
//   ids 997..999  <|im_start|>, <|endoftext|>, <|im_end|> (the preset's EOS ids are 999 and 998)
// The pre-tokenizer (Qwen2's split regex, then ByteLevel), decoder and ChatML template are
// Qwen's, written out here. Usage: node scripts/build-tiny-tokenizer.mjs <corpus files...>;
// the committed files were trained on README.md. Retraining changes the merges and so the ids.
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const VOCAB = 1000;
const SPECIALS = ['<|im_start|>', '<|endoftext|>', '<|im_end|>'];
const MERGES = VOCAB - 256 - SPECIALS.length;
const SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The same split for JavaScript (no inline (?i:)).
const SPLIT_JS = new RegExp(
  SPLIT.replace(
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)",
    "'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]",
  ),
  'gu',
);

const byteChars = [];
for (let b = 0, next = 256; b < 256; b++) {
  const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
  byteChars.push(String.fromCodePoint(printable ? b : next++));
}

/** Pre-token (as byte-level symbols) -> count. */
function words(text) {
  const counts = new Map();
  for (const [piece] of text.normalize('NFC').matchAll(SPLIT_JS)) {
    const symbols = [...Buffer.from(piece, 'utf8')].map((b) => byteChars[b]).join(' ');
    counts.set(symbols, (counts.get(symbols) ?? 0) + 1);
  }
  return [...counts].map(([w, n]) => ({ symbols: w.split(' '), n }));
}

function train(corpus) {
  const ws = words(corpus);
  const merges = [];
  while (merges.length < MERGES) {
    const pairs = new Map();
    for (const { symbols, n } of ws) {
      for (let i = 0; i + 1 < symbols.length; i++) {
        const key = `${symbols[i]} ${symbols[i + 1]}`;
        pairs.set(key, (pairs.get(key) ?? 0) + n);
      }
    }
    let best = null;
    for (const [key, n] of pairs)
      if (best === null || n > best[1] || (n === best[1] && key < best[0])) best = [key, n];
    if (best === null) break;
    merges.push(best[0]);
    const [a, b] = best[0].split(' ');
    for (const w of ws) {
      const out = [];
      for (let i = 0; i < w.symbols.length; i++) {
        if (i + 1 < w.symbols.length && w.symbols[i] === a && w.symbols[i + 1] === b) {
          out.push(a + b);
          i++;
        } else out.push(w.symbols[i]);
      }
      w.symbols = out;
    }
  }
  if (merges.length < MERGES) throw new Error(`corpus too small: ${merges.length} merges`);
  return merges;
}

const CHAT_TEMPLATE = `{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions. Their signatures:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nCall one as <tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content + '\\n</tool_response><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') }}
{%- for call in message.tool_calls or [] %}
{%- set f = call.function or call %}
{{- '\\n<tool_call>\\n{"name": "' + f.name + '", "arguments": ' }}
{%- if f.arguments is string %}{{- f.arguments }}{%- else %}{{- f.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}`;

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const files = process.argv.slice(2);
if (files.length === 0) throw new Error('usage: build-tiny-tokenizer.mjs <corpus files...>');
const merges = train(files.map((f) => readFileSync(f, 'utf8')).join('\n'));
const vocab = {};
byteChars.forEach((c, id) => {
  vocab[c] = id;
});
merges.forEach((m, i) => {
  vocab[m.replace(' ', '')] = 256 + i;
});
if (Object.keys(vocab).length !== 256 + MERGES) throw new Error('a merge repeats a token');
const specialIds = SPECIALS.map((_, i) => 256 + MERGES + i);
const added = SPECIALS.map((content, i) => ({
  id: specialIds[i],
  content,
  single_word: false,
  lstrip: false,
  rstrip: false,
  normalized: false,
  special: true,
}));
const byteLevel = {
  type: 'ByteLevel',
  add_prefix_space: false,
  trim_offsets: false,
  use_regex: false,
};
const tokenizer = {
  version: '1.0',
  truncation: null,
  padding: null,
  added_tokens: added,
  normalizer: { type: 'NFC' },
  pre_tokenizer: {
    type: 'Sequence',
    pretokenizers: [
      { type: 'Split', pattern: { Regex: SPLIT }, behavior: 'Isolated', invert: false },
      byteLevel,
    ],
  },
  post_processor: byteLevel,
  decoder: byteLevel,
  model: {
    type: 'BPE',
    dropout: null,
    unk_token: null,
    continuing_subword_prefix: '',
    end_of_word_suffix: '',
    fuse_unk: false,
    byte_fallback: false,
    ignore_merges: false,
    vocab,
    merges: merges.map((m) => m.split(' ')),
  },
};
const config = {
  add_bos_token: false,
  add_prefix_space: false,
  added_tokens_decoder: Object.fromEntries(added.map(({ id, ...t }) => [String(id), t])),
  bos_token: null,
  eos_token: '<|im_end|>',
  pad_token: '<|endoftext|>',
  unk_token: null,
  clean_up_tokenization_spaces: false,
  model_max_length: 4096,
  tokenizer_class: 'Qwen2Tokenizer',
  chat_template: CHAT_TEMPLATE,
};
const generation = { eos_token_id: [specialIds[2], specialIds[1]], pad_token_id: specialIds[1] };
const out = join(root, 'tokenizers', 'tiny');
mkdirSync(out, { recursive: true });
writeFileSync(join(out, 'tokenizer.json'), `${JSON.stringify(tokenizer)}\n`);
writeFileSync(join(out, 'tokenizer_config.json'), `${JSON.stringify(config, null, 2)}\n`);
writeFileSync(join(out, 'generation_config.json'), `${JSON.stringify(generation, null, 2)}\n`);
console.log(`wrote ${out}: ${256 + MERGES} tokens + ${SPECIALS.length} special`);
