/**
 * Python's idea of whitespace, which vLLM's parsers apply through str.strip() and regex `\s`: a
 * little wider than JS's trim() (the ASCII separators 0x1c-0x1f, U+0085) and without U+FEFF.
 */

/** str.isspace(): what Python's strip() removes (the ASCII separators 0x1c-0x1f included). */
export function pyIsSpace(c: number): boolean {
  if (c <= 0x20) return c === 0x20 || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f);
  if (c < 0x85) return false;
  return (
    c === 0x85 ||
    c === 0xa0 ||
    c === 0x1680 ||
    (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 ||
    c === 0x2029 ||
    c === 0x202f ||
    c === 0x205f ||
    c === 0x3000
  );
}

/** Python's str.strip() with no argument. */
export function pyStrip(s: string): string {
  let start = 0;
  let end = s.length;
  while (start < end && pyIsSpace(s.charCodeAt(start))) start++;
  while (end > start && pyIsSpace(s.charCodeAt(end - 1))) end--;
  return start === 0 && end === s.length ? s : s.slice(start, end);
}

export function isBlank(s: string): boolean {
  for (let i = 0; i < s.length; i++) if (!pyIsSpace(s.charCodeAt(i))) return false;
  return true;
}
