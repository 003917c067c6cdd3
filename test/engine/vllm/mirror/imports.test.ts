import { readdirSync, readFileSync } from 'node:fs';
import { builtinModules } from 'node:module';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

/**
 * The mirror is an independent implementation of vLLM's protocol, so that ringserve is tested
 * against something it did not write: nothing here may import ringserve (src/ or any other folder
 * of the repository), only node builtins, the zeromq and msgpackr packages, vitest, and files of
 * this folder.
 */
const FOLDER = dirname(fileURLToPath(import.meta.url));
const PACKAGES = new Set(['zeromq', 'msgpackr', 'vitest']);

/** Every module a source text names: static, side-effect, re-export, dynamic and require forms. */
function specifiers(text: string): { found: string[]; opaque: number } {
  const found: string[] = [];
  const forms = [
    /\bfrom\s*['"]([^'"]+)['"]/g,
    /\bimport\s*['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"`]([^'"`]+)['"`]\s*\)/g,
    /\brequire\s*\(\s*['"`]([^'"`]+)['"`]\s*\)/g,
  ];
  for (const form of forms) for (const m of text.matchAll(form)) found.push(m[1]!);
  // A dynamic import or require of a computed name cannot be checked, so it counts as a violation;
  // comments are left out of this count only (an import in a comment is still found above).
  const code = text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  const opaque = [...code.matchAll(/\b(?:import|require)\s*\(\s*(?!['"`])[^)\s]/g)].length;
  return { found, opaque };
}

function allowed(file: string, spec: string): boolean {
  if (spec.startsWith('node:') || builtinModules.includes(spec)) return true;
  if (PACKAGES.has(spec)) return true;
  if (!spec.startsWith('.')) return false;
  const target = relative(FOLDER, resolve(dirname(file), spec));
  return !target.startsWith('..') && !target.startsWith('/');
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return /\.(ts|js|mjs|cjs|mts|cts)$/.test(e.name) ? [path] : [];
  });
}

describe('the mirror imports nothing of ringserve', () => {
  it('finds every import form (the scanner itself)', () => {
    const q = "'";
    const lines = [
      `imp${'ort'} { a } fr${'om'} ${q}../../../../src/a.js${q};`,
      `exp${'ort'} * fr${'om'} ${q}../b.js${q};`,
      `imp${'ort'} ${q}./side.js${q};`,
      `const m = await imp${'ort'}(${q}../../c.js${q});`,
      `const r = req${'uire'}(${q}d${q});`,
      `const x = imp${'ort'}(name);`,
    ];
    const { found, opaque } = specifiers(lines.join('\n'));
    expect(found.sort()).toEqual([
      '../../../../src/a.js',
      '../../c.js',
      '../b.js',
      './side.js',
      'd',
    ]);
    expect(opaque).toBe(1);
    const file = join(FOLDER, 'x.ts');
    expect(allowed(file, '../../../../src/a.js')).toBe(false);
    expect(allowed(file, '../hex.js')).toBe(false);
    expect(allowed(file, './codec.js')).toBe(true);
    expect(allowed(file, 'fastify')).toBe(false);
    expect(allowed(file, 'node:fs')).toBe(true);
  });

  it('holds for every file of test/engine/vllm/mirror/', () => {
    const files = sources(FOLDER);
    expect(files.length).toBeGreaterThan(10);
    const violations: string[] = [];
    for (const file of files) {
      const { found, opaque } = specifiers(readFileSync(file, 'utf8'));
      const name = relative(FOLDER, file);
      for (const spec of found)
        if (!allowed(file, spec)) violations.push(`${name} imports ${spec}`);
      if (opaque > 0) violations.push(`${name}: an import or require of a computed name`);
    }
    expect(violations).toEqual([]);
  });
});
