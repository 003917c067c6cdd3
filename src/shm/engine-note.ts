import { NOTE_LENGTH, NOTE_SEQ, NOTE_TEXT, NOTE_TEXT_CAPACITY } from './layout.js';
import type { Region } from './region.js';

/**
 * The region's engine note (layout.ts, ENGINE NOTE): a short UTF-8 text the engine's main thread
 * publishes whenever it changes, under a seqlock, and API servers read: on their cold paths
 * (/health when the engine cannot take requests, /metrics) and, through the seqlock's word alone
 * unless it moved, for each request's `model` (the LoRA adapters loaded). The core loop writes JSON there (what
 * the engine is and why it cannot take requests); this module only moves the bytes. A text longer
 * than the area is cut at a character boundary.
 */

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function writeEngineNote(region: Region, text: string): void {
  const { i32, sab } = region;
  const bytes = new Uint8Array(sab, NOTE_TEXT, NOTE_TEXT_CAPACITY);
  Atomics.add(i32, NOTE_SEQ >> 2, 1);
  // encodeInto stops before a character that does not fit: `written` is a boundary already.
  const { written } = encoder.encodeInto(text, bytes);
  Atomics.store(i32, NOTE_LENGTH >> 2, Math.min(written ?? 0, NOTE_TEXT_CAPACITY));
  Atomics.add(i32, NOTE_SEQ >> 2, 1);
}

/** The note's version: it moves on every write, so a reader copies the text only when it has. */
export function engineNoteSeq(region: Region): number {
  return Atomics.load(region.i32, NOTE_SEQ >> 2);
}

/** The note's text ('' when none was written), read consistently; a bounded number of retries. */
export function readEngineNote(region: Region): string {
  const { i32, sab } = region;
  for (let attempt = 0; attempt < 100; attempt++) {
    const before = Atomics.load(i32, NOTE_SEQ >> 2);
    if ((before & 1) !== 0) continue;
    const n = Math.min(Atomics.load(i32, NOTE_LENGTH >> 2), NOTE_TEXT_CAPACITY);
    const text = decoder.decode(new Uint8Array(sab, NOTE_TEXT, n).slice());
    if (Atomics.load(i32, NOTE_SEQ >> 2) === before) return text;
  }
  return '';
}
