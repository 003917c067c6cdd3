/**
 * A tokenizer.json split regex (written for Oniguruma, which the Rust tokenizers use) as a
 * JavaScript RegExp in `u` mode, or null when it uses syntax that cannot be carried over. The one
 * construct LLM tokenizers use that JavaScript (before ES2025) lacks is the scoped flag group
 * `(?i:'s|'t|...)`: its letters become two-case classes.
 */
export function splitPattern(pattern: string): RegExp | null {
  if (/\(\?i:[^()]*\\/.test(pattern)) return null;
  const translated = pattern.replace(/\(\?i:([^()]*)\)/g, (_, body: string) => {
    const cased = body.replace(/[A-Za-z]/g, (c) => `[${c.toLowerCase()}${c.toUpperCase()}]`);
    return `(?:${cased})`;
  });
  if (translated.includes('(?i')) return null;
  try {
    return new RegExp(translated, 'gu');
  } catch {
    return null;
  }
}
