import { RS_ERR_CONTROL_BAD_ARGUMENT } from '../errors.js';
import { type LoraAdapter, type LoraArgs, MAX_LORA_ADAPTERS } from '../wire/admin-args.js';
import { ControlRefusal, ControlResult } from '../wire/control-channel.js';

/**
 * The LoRA adapters of an engine core: name -> vLLM's lora_int_id and the path it was loaded
 * from. The core loop keeps it (the engine behind the core loads the files) and publishes it in the
 * engine note, where every API server reads the names a request's `model` may give. As vLLM's
 * serving layer: a name already loaded is refused unless the load is in place (prime-rl reloads
 * one name in place every step, keeping its id); ids are never reused within an engine's life.
 */
export class LoraTable {
  readonly #byName = new Map<string, LoraAdapter>();
  #nextId = 1;

  /** The adapter a load would make or replace (not yet registered: the engine loads it first). */
  prepare(args: LoraArgs): LoraAdapter {
    if (args.name === '' || args.path === '') {
      throw new RS_ERR_CONTROL_BAD_ARGUMENT('LoadLora', 'a LoRA adapter needs a name and a path');
    }
    const existing = this.#byName.get(args.name);
    if (existing !== undefined) {
      if (!args.inplace) {
        throw new ControlRefusal(
          ControlResult.Refused,
          `The lora adapter '${args.name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`,
        );
      }
      return { id: existing.id, name: args.name, path: args.path };
    }
    if (this.#byName.size >= MAX_LORA_ADAPTERS) {
      throw new ControlRefusal(
        ControlResult.Refused,
        `${MAX_LORA_ADAPTERS} LoRA adapters are loaded: unload one first`,
      );
    }
    return { id: this.#nextId, name: args.name, path: args.path };
  }

  /** Registers an adapter the engine has loaded. */
  commit(adapter: LoraAdapter): void {
    if (adapter.id === this.#nextId) this.#nextId++;
    this.#byName.set(adapter.name, adapter);
  }

  /** The adapter of that name, or a NotFound refusal (vLLM's 404). */
  get(name: string): LoraAdapter {
    const adapter = this.#byName.get(name);
    if (adapter === undefined) {
      throw new ControlRefusal(
        ControlResult.NotFound,
        `The lora adapter '${name}' cannot be found.`,
      );
    }
    return adapter;
  }

  remove(name: string): void {
    this.#byName.delete(name);
  }

  list(): LoraAdapter[] {
    return [...this.#byName.values()];
  }
}
