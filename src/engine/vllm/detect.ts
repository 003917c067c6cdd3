import type { Registration } from './handshake.js';
import { getVllmLayout, NEWEST_VLLM_LAYOUT, VLLM_LAYOUTS, type VllmLayout } from './layouts.js';

/**
 * Which layout an engine speaks, from what it said at registration (docs/vllm-protocol.md,
 * "Telling the versions apart"). The first EngineCoreOutput confirms or corrects the guess
 * (outputs-reader.ts): until then only ADDs, ABORTs and utility calls go out, whose layouts
 * differ between series only in trailing defaulted fields that a Python engine fills or ignores.
 *
 * 1. `vllm_version` when it is a release number of a series a table covers (a source build
 *    reports "0.1.devN", which says nothing);
 * 2. else the keys: each series added some (0.23 block_size and world_size, 0.27 instance_id,
 *    0.29 supports_lora, 0.33 the attention and coordinator keys).
 */
export interface LayoutGuess {
  layout: VllmLayout;
  /** How it was picked, for the log. */
  why: string;
}

/** The registration keys that first appeared in each series, newest first. */
const KEYS_BY_SERIES: readonly (readonly [string, readonly string[]])[] = [
  ['0.33', ['mamba_block_size', 'effective_attention_block_size', 'coord_store_port']],
  ['0.29', ['supports_lora', 'max_loras']],
  ['0.28', ['instance_id', 'tensor_parallel_size']],
  ['0.26', ['world_size', 'block_size']],
];

export function guessLayout(reg: Registration): LayoutGuess {
  const release = parseRelease(reg.vllmVersion);
  if (release !== null && release.major === 0 && release.minor >= 22) {
    const layout = VLLM_LAYOUTS.find((l) => release.minor >= minorOf(l)) ?? NEWEST_VLLM_LAYOUT;
    const newer = release.minor > minorOf(NEWEST_VLLM_LAYOUT) ? ', newer than every table' : '';
    return { layout, why: `vllm_version ${reg.vllmVersion}${newer}` };
  }
  if (release !== null && release.major > 0) {
    return {
      layout: NEWEST_VLLM_LAYOUT,
      why: `vllm_version ${reg.vllmVersion}, newer than every table`,
    };
  }
  for (const [name, keys] of KEYS_BY_SERIES) {
    const key = keys.find((k) => reg.keys.includes(k));
    if (key !== undefined) {
      return { layout: getVllmLayout(name), why: `registration key ${key}` };
    }
  }
  return { layout: getVllmLayout('0.22'), why: 'the registration has only the 0.22 keys' };
}

/** major.minor of a PEP 440 version ("0.26.0", "0.27.2rc1.dev407+g..."), or null. */
export function parseRelease(version: string | null): { major: number; minor: number } | null {
  const m = version === null ? null : /^(\d+)\.(\d+)/.exec(version);
  if (m === null) return null;
  return { major: Number(m[1]), minor: Number(m[2]) };
}

function minorOf(layout: VllmLayout): number {
  return Number(layout.name.split('.')[1]);
}
