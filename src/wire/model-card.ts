import { statSync } from 'node:fs';
import { basename, resolve } from 'node:path';
import { RS_ERR_CONFIG_INVALID } from '../errors.js';
import { ENGINE_LIMITS } from './engine-defaults.js';
import { readHfModelConfig } from './hf-config.js';
import { referenceDeployment, referenceKvBlocks } from './reference-deployment.js';

/**
 * What the API tier must know of the model behind the engine: the vocabulary, the shape of a
 * routing row, the end-of-sequence ids and the longest sequence. Both sides of the rings read it
 * (the engine to emit rows of that shape, the API servers to size accumulators and detokenize);
 * the simulator's presets (src/sim/presets.ts) add how fast each model runs.
 */
export interface ModelCard {
  name: string;
  vocabSize: number;
  /**
   * Ids below this are the tokenizer's ordinary text tokens (special and added tokens, and the
   * padding rows of the embedding, come after): the simulated model samples only these, and EOS.
   * Absent: the whole vocabulary.
   */
  textVocabSize?: number;
  numHiddenLayers: number;
  /** Layers that route to experts, i.e. routing-row layers (hidden layers minus dense ones). */
  routingLayers: number;
  numExperts: number;
  expertsPerToken: number;
  /** End-of-sequence ids; the first is the one the simulated model emits to end a response. */
  eosTokenIds: readonly number[];
  maxModelLen: number;
  /** KV blocks of CARD_BLOCK_TOKENS tokens in the reference deployment noted on each card. */
  defaultNumGpuBlocks: number;
}

/** The block size the cards count their reference KV pools in. */
export const CARD_BLOCK_TOKENS = 16;

/** The card's reference KV pool in blocks of `blockSize` tokens (at least one). */
export function defaultNumGpuBlocks(card: ModelCard, blockSize: number): number {
  return Math.max(1, Math.floor((card.defaultNumGpuBlocks * CARD_BLOCK_TOKENS) / blockSize));
}

/**
 * Qwen/Qwen3-30B-A3B, figures from its config.json on the Hugging Face hub: vocab_size 151936,
 * num_hidden_layers 48, num_experts 128, num_experts_per_tok 8, decoder_sparse_step 1 and
 * mlp_only_layers [] (every layer is MoE, so 48 routing layers), eos_token_id 151645 (<|im_end|>;
 * generation_config.json adds 151643 <|endoftext|>), max_position_embeddings 40960.
 * Reference deployment: 2 x H100-80GB, tensor parallel 2, gpu_memory_utilization 0.9.
 *   KV per token per GPU = 2 (K,V) * 2 kv heads (4 / TP2) * 128 head_dim * 48 layers * 2 B = 49,152 B.
 *   KV memory per GPU = 72 GB - 30.5 GB weights (30.5B params bf16 / 2) - ~4 GB activations = 37.5 GB
 *   -> 763k tokens -> ~47,000 blocks of 16.
 */
const QWEN3_30B_A3B: ModelCard = {
  name: 'qwen3-30b-a3b',
  vocabSize: 151936,
  // Qwen3's tokenizer: 151643 BPE tokens, then <|endoftext|> (151643) and 25 more added tokens.
  textVocabSize: 151643,
  numHiddenLayers: 48,
  routingLayers: 48,
  numExperts: 128,
  expertsPerToken: 8,
  eosTokenIds: [151645, 151643],
  maxModelLen: 40960,
  defaultNumGpuBlocks: 47_000,
};

/**
 * zai-org/GLM-4.5-Air, figures from its config.json on the Hugging Face hub: vocab_size 151552,
 * num_hidden_layers 46 with first_k_dense_replace 1, so layer 0 is dense and layers 1..45 are MoE:
 * 45 routing layers (routing rows carry those 45, layer 1 first); n_routed_experts 128 (plus
 * n_shared_experts 1, which is not routed), num_experts_per_tok 8, eos_token_id
 * [151329, 151336, 151338] (<|endoftext|>, <|user|>, <|observation|>; the model emits <|user|>
 * to end an assistant turn, so that one comes first here), max_position_embeddings 131072.
 * Reference deployment: one node of 8 x H100-80GB, tensor parallel 8, gpu_memory_utilization 0.9.
 *   KV per token per GPU = 2 * 1 kv head (8 / TP8) * 128 * 46 layers * 2 B = 23,552 B.
 *   KV memory per GPU = 72 GB - 27.5 GB weights (~110B params bf16 / 8) - ~4 GB = 40.5 GB
 *   -> 1.72M tokens -> ~107,000 blocks of 16.
 */
const GLM_45_AIR: ModelCard = {
  name: 'glm-4.5-air',
  vocabSize: 151552,
  // GLM-4.5's tokenizer: BPE tokens below <|endoftext|> (151329), its first special token.
  textVocabSize: 151329,
  numHiddenLayers: 46,
  routingLayers: 45,
  numExperts: 128,
  expertsPerToken: 8,
  eosTokenIds: [151336, 151329, 151338],
  maxModelLen: 131072,
  defaultNumGpuBlocks: 107_000,
};

/**
 * A small model for tests: a vocabulary small enough to enumerate in a test, a dense first layer
 * like GLM's, and few experts, so that every code path runs fast.
 */
const TINY: ModelCard = {
  name: 'tiny',
  vocabSize: 1000,
  // tokenizers/tiny: 997 byte-level BPE tokens, then <|im_start|>, <|endoftext|>, <|im_end|>.
  textVocabSize: 997,
  numHiddenLayers: 4,
  routingLayers: 3,
  numExperts: 16,
  expertsPerToken: 4,
  eosTokenIds: [999, 998],
  maxModelLen: 4096,
  defaultNumGpuBlocks: 2048,
};

/** The tiny model with more than 256 experts, so routing rows are uint16 (tests, benchmarks). */
const TINY_WIDE: ModelCard = { ...TINY, name: 'tiny-wide', numExperts: 384, expertsPerToken: 8 };

const CARDS: readonly ModelCard[] = [QWEN3_30B_A3B, GLM_45_AIR, TINY, TINY_WIDE];

export const MODEL_NAMES: readonly string[] = CARDS.map((c) => c.name);

/** A preset's name (a `--model` that is one is the preset, even if a directory has that name). */
export function isPresetName(model: string): boolean {
  return MODEL_NAMES.includes(model);
}

/**
 * The card of a preset, or of a local Hugging Face model directory (read once per path:
 * hf-config.ts, reference-deployment.ts); anything else is a config error naming `--model`.
 */
export function getModelCard(model: string): ModelCard {
  const card = CARDS.find((c) => c.name === model);
  if (card !== undefined) return card;
  if (!isDirectory(model)) {
    throw new RS_ERR_CONFIG_INVALID(
      '--model',
      `must be one of ${MODEL_NAMES.join(', ')}, or a local Hugging Face model directory ` +
        `(config.json, tokenizer.json, tokenizer_config.json, generation_config.json); ` +
        `got "${model}": unknown model preset, and no such directory`,
    );
  }
  const key = resolve(model);
  let built = DIRECTORY_CARDS.get(key);
  if (built === undefined) {
    built = directoryCard(model);
    DIRECTORY_CARDS.set(key, built);
  }
  return built;
}

const DIRECTORY_CARDS = new Map<string, ModelCard>();

function isDirectory(path: string): boolean {
  try {
    return statSync(path, { throwIfNoEntry: false })?.isDirectory() === true;
  } catch {
    // EACCES, ENOTDIR on the way: not a directory ringserve can read either.
    return false;
  }
}

/**
 * A model directory's card: the figures of its config.json; a dense model has no routing rows
 * (routingLayers 0, one "expert"). The KV pool is reference-deployment.ts's estimate.
 */
function directoryCard(dir: string): ModelCard {
  const m = readHfModelConfig(dir);
  const maxModelLen = Math.min(m.maxPositionEmbeddings, ENGINE_LIMITS.maxModelLen.max);
  const text = m.textVocabSize === undefined ? {} : { textVocabSize: m.textVocabSize };
  return validateModelCard({
    name: basename(resolve(dir)),
    vocabSize: m.vocabSize,
    ...text,
    numHiddenLayers: m.numHiddenLayers,
    routingLayers: m.moe === null ? 0 : m.numHiddenLayers - m.moe.denseLayers,
    numExperts: m.moe?.numExperts ?? 1,
    expertsPerToken: m.moe?.expertsPerToken ?? 1,
    eosTokenIds: m.eosTokenIds,
    maxModelLen,
    defaultNumGpuBlocks: referenceKvBlocks(referenceDeployment(m), maxModelLen, CARD_BLOCK_TOKENS),
  });
}

/** Bytes per expert id in a routing row: uint8 up to 256 experts, uint16 above. */
export function idBytesForExperts(numExperts: number): 1 | 2 {
  return numExperts > 256 ? 2 : 1;
}

/** Bytes per expert id in this model's routing rows. */
export function expertIdBytes(card: ModelCard): 1 | 2 {
  return idBytesForExperts(card.numExperts);
}

/**
 * Checks a card built by hand (tests, or a variant such as one with more than 256 experts).
 * Throws RS_ERR_CONFIG_INVALID naming `--model` when a figure is out of range.
 */
export function validateModelCard<T extends ModelCard>(c: T): T {
  const fail = (what: string): never => {
    throw new RS_ERR_CONFIG_INVALID('--model', `preset "${c.name}": ${what}`);
  };
  const isInt = (v: number, min: number, max: number): boolean =>
    Number.isInteger(v) && v >= min && v <= max;
  if (!isInt(c.vocabSize, 16, 1 << 24)) fail('vocabSize must be an integer in [16, 2^24]');
  if (!isInt(c.numExperts, 1, 65536)) fail('numExperts must be an integer in [1, 65536]');
  if (!isInt(c.expertsPerToken, 1, c.numExperts))
    fail('expertsPerToken must be in [1, numExperts]');
  if (!isInt(c.routingLayers, 0, c.numHiddenLayers))
    fail('routingLayers must be in [0, numHiddenLayers]');
  if (c.textVocabSize !== undefined && !isInt(c.textVocabSize, 1, c.vocabSize))
    fail('textVocabSize must be an integer in [1, vocabSize]');
  if (c.eosTokenIds.length === 0) fail('eosTokenIds is empty');
  for (const id of c.eosTokenIds)
    if (!isInt(id, 0, c.vocabSize - 1)) fail(`eos id ${id} not in vocab`);
  if (new Set(c.eosTokenIds).size !== c.eosTokenIds.length) fail('eosTokenIds has duplicates');
  const len = ENGINE_LIMITS.maxModelLen;
  if (!isInt(c.maxModelLen, len.min, len.max))
    fail(`maxModelLen must be an integer in [${len.min}, ${len.max}]`);
  const blocks = ENGINE_LIMITS.numGpuBlocks;
  if (!isInt(c.defaultNumGpuBlocks, blocks.min, blocks.max))
    fail('defaultNumGpuBlocks out of range');
  return c;
}
