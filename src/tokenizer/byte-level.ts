// GPT-2's byte-level alphabet: byte-level BPE vocabularies (Qwen, GLM, Llama 3, GPT-2) spell every
// byte as one printable character (bytes_to_unicode in openai/gpt-2's encoder.py, and the
// ByteLevel decoder of Hugging Face tokenizers), so a token's string maps back to raw bytes
// character by character, and a character split over two tokens splits its bytes, not its text.

/** The printable character GPT-2 uses for each byte 0..255. */
export const BYTE_TO_CHAR: readonly string[] = buildByteToChar();

/** Code point of a byte-level character -> its byte, or -1 for a character outside the alphabet. */
const CHAR_TO_BYTE = buildCharToByte();

function buildByteToChar(): string[] {
  const chars: string[] = new Array(256);
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
    chars[b] = String.fromCodePoint(printable ? b : next++);
  }
  return chars;
}

function buildCharToByte(): Int16Array {
  const map = new Int16Array(512).fill(-1);
  BYTE_TO_CHAR.forEach((c, b) => {
    map[c.codePointAt(0)!] = b;
  });
  return map;
}

/**
 * The bytes a byte-level token string stands for, or null when a character is outside the
 * alphabet (the string is not a byte-level token, e.g. an added token's plain text).
 */
export function byteLevelBytes(token: string): Uint8Array | null {
  const out = new Uint8Array(token.length);
  return writeByteLevel(token, out, 0) < 0 ? null : out;
}

/**
 * As byteLevelBytes, written at `out[at..]` (room for token.length bytes): the byte count, or -1
 * when a character is outside the alphabet. Every alphabet character is one UTF-16 unit.
 */
export function writeByteLevel(token: string, out: Uint8Array, at: number): number {
  for (let i = 0; i < token.length; i++) {
    const unit = token.charCodeAt(i);
    const b = unit < 512 ? CHAR_TO_BYTE[unit]! : -1;
    if (b < 0) return -1;
    out[at + i] = b;
  }
  return token.length;
}
