/**
 * The names a request's `model` may give: the served model (its --served-model-name or its
 * --model) and every LoRA adapter the engine has loaded, which the engine publishes in its note
 * (engine-note.ts) so that every API server sees a load at once. /v1/models lists the same, in
 * vLLM's shape: an adapter's card has the adapter's path as `root`, the base model as `parent`
 * and `max_model_len` null (vLLM's OpenAIServingModels.show_available_models).
 */
import type { RingserveConfig } from '../../config.js';
import { RS_ERR_MODEL_NOT_FOUND } from '../../errors.js';
import type { EngineNote } from '../../wire/engine-note.js';

export interface ModelCardJson {
  id: string;
  object: 'model';
  created: number;
  owned_by: string;
  root: string;
  parent: string | null;
  max_model_len: number | null;
}

export class ServedModels {
  readonly #config: Pick<RingserveConfig, 'servedModelName' | 'model' | 'maxModelLen'>;
  readonly #note: () => EngineNote;
  readonly #created: number;

  constructor(
    config: Pick<RingserveConfig, 'servedModelName' | 'model' | 'maxModelLen'>,
    note: () => EngineNote,
    startedAtMs: number,
  ) {
    this.#config = config;
    this.#note = note;
    this.#created = Math.floor(startedAtMs / 1000);
  }

  /**
   * The LoRA adapter id a request runs with: 0 for no `model` or the base model's name (which
   * wins over an adapter of the same name), the adapter's id for an adapter's name; any other name
   * is a 404 naming `model`.
   */
  loraId(model: string | null): number {
    const config = this.#config;
    if (model === null || model === config.servedModelName || model === config.model) return 0;
    for (const adapter of this.#note().adapters) if (adapter.name === model) return adapter.id;
    throw new RS_ERR_MODEL_NOT_FOUND(model);
  }

  /** The /v1/models body. */
  list(): { object: 'list'; data: ModelCardJson[] } {
    const config = this.#config;
    const data: ModelCardJson[] = [
      {
        id: config.servedModelName,
        object: 'model',
        created: this.#created,
        owned_by: 'ringserve',
        root: config.model,
        parent: null,
        max_model_len: config.maxModelLen,
      },
    ];
    for (const adapter of this.#note().adapters) {
      data.push({
        id: adapter.name,
        object: 'model',
        created: this.#created,
        owned_by: 'ringserve',
        root: adapter.path,
        parent: config.servedModelName,
        max_model_len: null,
      });
    }
    return { object: 'list', data };
  }
}
