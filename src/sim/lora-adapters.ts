import { createHash } from 'node:crypto';
import { createReadStream } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { LoraAdapter } from '../wire/admin-args.js';
import { ControlRefusal, ControlResult } from '../wire/control-channel.js';

/**
 * The simulator's LoRA adapters: each loaded adapter is a 32-bit key, a digest of its files as they
 * were when loaded (`adapter_config.json` and the `adapter_model*` weights, as PEFT writes them).
 * A sequence that runs with an adapter starts its context hash and its block-hash salt from the key,
 * so its tokens, logprobs and routing are a deterministic function of the adapter's files, differ
 * from the base model's, change when the adapter is reloaded with other files, and never share
 * prefix-cache blocks with another adapter's (as vLLM hashes the LoRA into its block hashes).
 */
export class SimLoraAdapters {
  readonly #keys = new Map<number, number>();

  /**
   * Reads the adapter's files and (re)binds its id to their digest. A path with no
   * adapter_config.json is a NotFound refusal in vLLM's words.
   */
  async load(adapter: LoraAdapter): Promise<void> {
    this.#keys.set(adapter.id, await adapterKey(adapter));
  }

  unload(adapter: LoraAdapter): void {
    this.#keys.delete(adapter.id);
  }

  ids(): number[] {
    return [...this.#keys.keys()];
  }

  /** The key of a loaded adapter, or undefined. */
  key(id: number): number | undefined {
    return this.#keys.get(id);
  }
}

const CONFIG_FILE = 'adapter_config.json';

async function adapterKey(adapter: LoraAdapter): Promise<number> {
  const notFound = (): ControlRefusal =>
    new ControlRefusal(
      ControlResult.NotFound,
      `Loading lora ${adapter.name} failed: No adapter found for ${adapter.path}`,
    );
  const config = await stat(join(adapter.path, CONFIG_FILE)).catch(() => null);
  if (config === null || !config.isFile()) throw notFound();
  const names = (await readdir(adapter.path)).filter((n) => n.startsWith('adapter_model')).sort();
  const hash = createHash('sha256');
  for (const name of [CONFIG_FILE, ...names]) {
    const file = join(adapter.path, name);
    if (!(await stat(file)).isFile()) continue;
    hash.update(name);
    hash.update('\0');
    for await (const chunk of createReadStream(file)) {
      hash.update(chunk as Buffer);
    }
  }
  const key = hash.digest().readInt32LE(0);
  // 0 is "no adapter".
  return key === 0 ? 1 : key;
}
