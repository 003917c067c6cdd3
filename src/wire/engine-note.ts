import type { LoraAdapter } from './admin-args.js';

/**
 * The engine note's content (src/shm/engine-note.ts carries its text between processes): what the
 * API servers should know of the engine behind the core that no stats slot holds. The engine
 * writes it as JSON when it changes; API servers parse it on cold paths (/health, /metrics).
 */
export interface EngineNote {
  /** Why the engine cannot take requests now (/health answers 503 with it), else null. */
  reason: string | null;
  /** Labels of the engine behind the core, for /metrics' info gauge (e.g. the vLLM release). */
  info: Record<string, string>;
  /** The LoRA adapters loaded (the core loop's table): requests name them as their `model`. */
  adapters: LoraAdapter[];
}

export const EMPTY_NOTE: Readonly<EngineNote> = Object.freeze({
  reason: null,
  info: {},
  adapters: [],
});

/** The note a text holds; a text that is not one (none written yet, a foreign writer) is empty. */
export function parseEngineNote(text: string): EngineNote {
  if (text === '') return EMPTY_NOTE;
  try {
    const v = JSON.parse(text) as Partial<EngineNote> | null;
    const reason = typeof v?.reason === 'string' ? v.reason : null;
    const info: Record<string, string> = {};
    if (v?.info !== null && typeof v?.info === 'object') {
      for (const [k, value] of Object.entries(v.info))
        if (typeof value === 'string') info[k] = value;
    }
    const adapters = Array.isArray(v?.adapters) ? v.adapters.filter(isAdapter) : [];
    return { reason, info, adapters };
  } catch {
    return EMPTY_NOTE;
  }
}

function isAdapter(a: unknown): a is LoraAdapter {
  const x = a as LoraAdapter | null;
  return (
    typeof x === 'object' &&
    x !== null &&
    typeof x.id === 'number' &&
    typeof x.name === 'string' &&
    typeof x.path === 'string'
  );
}
