// What an OpenAI stream chunk of one slot says next: the new positions, and the text that may be
// sent. Text is held back, as vLLM's detokenizer holds it: the last (longest stop string - 1)
// bytes while they could still turn out to start a stop string (unless include_stop_str_in_output,
// where a match is sent anyway), and a character whose bytes have not all arrived. The last chunk
// sends the rest up to where a stop string cut the text (AccWord.TextEnd).

import type { ChoiceColumns } from '../../protocol/response-columns.js';
import { completeLength, countChars } from '../../protocol/utf8.js';
import { AccWord } from '../cross-thread/accumulators.js';
import type { ResponseView } from '../cross-thread/response-view.js';
import { SlotFlag } from '../cross-thread/slot-meta.js';

export interface OpenAiDelta {
  choice: ChoiceColumns;
  /** The text bytes to send now (a view into the arena). */
  text: Uint8Array;
  /** Characters of text sent before this delta (completions' logprobs text_offset start). */
  textOffset: number;
  /** Records the delta as sent. */
  commit(): void;
}

export function openAiDelta(view: ResponseView, slot: number, final: boolean): OpenAiDelta {
  const { acc, meta } = view;
  const words = acc.words;
  const base = acc.wordIndex(slot, 0);
  const sent = words[base + AccWord.StreamedText]!;
  let end: number;
  if (final) end = Math.max(sent, acc.textLength(slot));
  else {
    const flags = meta.flags(slot);
    const holdStops =
      (flags & SlotFlag.HasStopStrings) !== 0 && (flags & SlotFlag.IncludeStopStrInOutput) === 0;
    const held = holdStops ? meta.longestStop(slot) - 1 : 0;
    end = Math.max(sent, words[base + AccWord.TextBytes]! - held);
  }
  let text = view.text(slot, sent, end);
  if (!final) text = text.subarray(0, completeLength(text, 0, text.length));
  const from = { tokens: words[base + AccWord.StreamedTokens]!, maskIds: 0, routingRows: 0 };
  const choice = view.choice(slot, meta.choiceIndex(slot), from, final);
  const textOffset = words[base + AccWord.StreamedChars]!;
  return {
    choice,
    text,
    textOffset,
    commit(): void {
      words[base + AccWord.StreamedTokens] = acc.completionTokens(slot);
      words[base + AccWord.StreamedText] = sent + text.length;
      words[base + AccWord.StreamedChars] = textOffset + countChars(text, 0, text.length);
    },
  };
}
