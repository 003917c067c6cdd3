import type { ReasoningParserName } from './chat-output.js';

/**
 * Where the thinking span ends, as vLLM's `qwen3` and `glm45` reasoning parsers decide
 * (docs/chat-parsing.md cites the versions). With thinking on, the output starts inside the span:
 * Qwen3's template opens `<think>` in the prompt, GLM-4.5 writes it itself, and either way a
 * `<think>` met before the end is dropped. `</think>` ends the span; for qwen3 a `<tool_call>` does
 * too (the newest engine parser treats it as an implicit end) and then belongs to the content. An
 * output that never ends the span is all reasoning (cut off by max_tokens). With thinking off the
 * template closed the span in the prompt: everything is content.
 */

export const THINK_START = '<think>';
export const THINK_END = '</think>';
export const TOOL_CALL_START = '<tool_call>';
export const TOOL_CALL_END = '</tool_call>';

const QWEN3_MARKERS: readonly string[] = [THINK_START, THINK_END, TOOL_CALL_START];
const GLM45_MARKERS: readonly string[] = [THINK_START, THINK_END];

/** The markers that matter while inside the thinking span. */
export function reasoningMarkers(parser: ReasoningParserName): readonly string[] {
  return parser === 'qwen3' ? QWEN3_MARKERS : GLM45_MARKERS;
}

export interface MarkerHit {
  at: number;
  marker: string;
}

/** The earliest of `markers` in `s` from `from`, or null. */
export function findFirstMarker(
  s: string,
  markers: readonly string[],
  from: number,
): MarkerHit | null {
  let best: MarkerHit | null = null;
  for (const marker of markers) {
    const at = s.indexOf(marker, from);
    if (at >= 0 && (best === null || at < best.at)) best = { at, marker };
  }
  return best;
}

/**
 * The length of the longest tail of `s` that is a proper prefix of `marker`: text a stream must
 * hold back until the next delta shows whether the marker is there.
 */
export function partialMarkerTail(s: string, marker: string): number {
  const max = Math.min(marker.length - 1, s.length);
  for (let k = max; k > 0; k--) {
    let i = 0;
    const base = s.length - k;
    while (i < k && s.charCodeAt(base + i) === marker.charCodeAt(i)) i++;
    if (i === k) return k;
  }
  return 0;
}

export function partialTailOfAny(s: string, markers: readonly string[]): number {
  let hold = 0;
  for (const marker of markers) hold = Math.max(hold, partialMarkerTail(s, marker));
  return hold;
}

export interface ReasoningSplit {
  reasoning: string | null;
  content: string | null;
}

/** The whole-output split: vLLM's extract_reasoning. */
export function splitReasoning(
  text: string,
  parser: ReasoningParserName | null,
  thinking: boolean,
): ReasoningSplit {
  if (parser === null || !thinking) return { reasoning: null, content: text };
  const markers = reasoningMarkers(parser);
  let reasoning = '';
  let pos = 0;
  for (;;) {
    const hit = findFirstMarker(text, markers, pos);
    if (hit === null) return { reasoning: reasoning + text.slice(pos), content: null };
    reasoning += text.slice(pos, hit.at);
    if (hit.marker === THINK_START) {
      pos = hit.at + THINK_START.length;
      continue;
    }
    if (hit.marker === THINK_END) {
      // `content or None`: an empty remainder is no content at all.
      const content = text.slice(hit.at + THINK_END.length);
      return { reasoning, content: content === '' ? null : content };
    }
    // The implicit end keeps `<tool_call>` in the content; `reasoning or None` there.
    return { reasoning: reasoning === '' ? null : reasoning, content: text.slice(hit.at) };
  }
}
