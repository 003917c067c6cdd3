import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * The layers of src/ and which others each may import (README, "How it is
 * built"). A layer is a folder of src/ or one of the root modules; a file may always import its own
 * layer. cluster/ and the CLI are the composition roots: they may import anything in src/.
 * Nothing in src/ imports bench/ or test/.
 */
const ALLOWED: Readonly<Record<string, readonly string[] | 'any'>> = {
  errors: [],
  shm: ['errors'],
  wire: ['shm', 'errors'],
  config: ['wire', 'errors'],
  obs: ['shm', 'wire', 'config', 'errors'],
  engine: ['wire', 'shm', 'errors'],
  sim: ['wire', 'engine', 'errors'],
  protocol: ['wire', 'errors'],
  server: ['wire', 'shm', 'protocol', 'obs', 'config', 'errors', 'tokenizer'],
  client: ['protocol', 'errors'],
  // shm: the merge threads' priority (thread-priority.ts), as the server's packers.
  router: ['protocol', 'client', 'obs', 'config', 'errors', 'shm'],
  tokenizer: ['errors'],
  cluster: 'any',
  cli: 'any',
};

/** The layer of a path relative to the repository root, or null outside src/. */
function layerOf(path: string): string | null {
  const parts = path.split('/');
  if (parts[0] !== 'src') return null;
  if (parts.length === 2) {
    const base = (parts[1] as string).replace(/\.(ts|js)$/, '');
    if (base === 'cli' || base === 'cli-args') return 'cli';
    return base;
  }
  return parts[1] as string;
}

interface Violation {
  file: string;
  imports: string;
  why: string;
}

/** The wrong-way imports of one file (`file` relative to the root, `text` its source). */
function violations(file: string, text: string): Violation[] {
  const from = layerOf(file);
  if (from === null) return [];
  const allowed = ALLOWED[from];
  const found: Violation[] = [];
  if (allowed === undefined) {
    return [{ file, imports: '', why: `layer "${from}" is not in the layering table` }];
  }
  for (const ref of ts.preProcessFile(text, true, true).importedFiles) {
    const spec = ref.fileName;
    if (!spec.startsWith('.')) continue;
    const target = posix.normalize(posix.join(posix.dirname(file), spec));
    const to = layerOf(target);
    if (to === null) {
      found.push({ file, imports: spec, why: `src/ may not import ${target.split('/')[0]}/` });
      continue;
    }
    if (to === from || allowed === 'any') continue;
    if (!allowed.includes(to)) {
      found.push({ file, imports: spec, why: `${from} may import only ${allowed.join(', ')}` });
    }
  }
  return found;
}

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) out.push(...sourceFiles(path));
    else if (/\.(ts|mts|js|mjs)$/.test(entry.name)) out.push(path);
  }
  return out;
}

describe('layering of src/', () => {
  it('every import points the way the layering table allows', () => {
    const files = sourceFiles(join(root, 'src'));
    expect(files.length).toBeGreaterThan(100);
    const found = files.flatMap((path) => {
      const file = relative(root, path).split('\\').join('/');
      return violations(file, readFileSync(path, 'utf8'));
    });
    expect(found).toEqual([]);
  });

  it('every folder of src/ has a row in the table', () => {
    const folders = readdirSync(join(root, 'src'), { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
    for (const folder of folders) expect(Object.keys(ALLOWED)).toContain(folder);
  });

  it('catches a wrong-way import, a type-only one, a re-export and a dynamic one', () => {
    expect(
      violations('src/engine/core-loop.ts', "import { SimEngine } from '../sim/sim-engine.js';"),
    ).toHaveLength(1);
    expect(violations('src/shm/ring.ts', "import type { X } from '../wire/messages.js';")).toEqual([
      {
        file: 'src/shm/ring.ts',
        imports: '../wire/messages.js',
        why: 'shm may import only errors',
      },
    ]);
    expect(violations('src/client/decode.ts', "export { a } from '../server/x.js';")).toHaveLength(
      1,
    );
    expect(
      violations('src/cli.ts', "const m = await import('../bench/rollout/main.js');"),
    ).toHaveLength(1);
    expect(
      violations('src/protocol/sse.ts', "import { x } from '../../test/helpers.js';"),
    ).toHaveLength(1);
  });

  it('lets a layer import itself, what it is allowed, and packages', () => {
    const text = [
      "import { a } from './fields.js';",
      "import { b } from '../wire/types.js';",
      "import { c } from '../errors.js';",
      "import { format } from 'node:util';",
    ].join('\n');
    expect(violations('src/protocol/generate-request.ts', text)).toEqual([]);
    expect(
      violations('src/cluster/supervisor.ts', "import { s } from '../sim/sim-engine.js';"),
    ).toEqual([]);
  });

  it('the vLLM protocol lives in src/engine/vllm: src/cluster holds only its composition roots', () => {
    // The bridge (frontend) and the headless engine (engine side) share the codec there; the
    // cluster keeps what starts them (vllm-bridge.ts, vllm-engine-command.ts) and nothing else.
    const cluster = readdirSync(join(root, 'src', 'cluster')).filter((f) => f.startsWith('vllm'));
    expect(cluster.sort()).toEqual(['vllm-bridge.ts', 'vllm-engine-command.ts']);
    const headless = readdirSync(join(root, 'src', 'engine', 'vllm', 'headless'));
    expect(headless).toEqual(expect.arrayContaining(['engine.ts', 'dial.ts', 'step-encoder.ts']));
  });
});
