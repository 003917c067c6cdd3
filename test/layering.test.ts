import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/** What the main thread's side of src/server/ may import outside it. */
const SERVER_OUTSIDE = ['wire', 'shm', 'protocol', 'obs', 'config', 'errors', 'tokenizer'] as const;
/**
 * What the output worker and the code the threads share may import outside src/server/: not the
 * config (the threads start from their workerData).
 */
const THREAD_OUTSIDE = ['wire', 'shm', 'protocol', 'obs', 'errors', 'tokenizer'] as const;

/**
 * The layers of src/ and which others each may import (docs/design.md, "Source layout"). A
 * layer is a folder of src/ or one of the root modules; a file may always import its own layer. cluster/ and the CLI are the composition roots: they may import anything in src/.
 * Nothing in src/ imports bench/ or test/.
 *
 * src/server/ is split by the thread of an API-server process that runs each file, one layer per
 * folder:
 * - server/main: the main thread: HTTP (http/, its fastify routes), the request coordinator and its
 *   records, the engine client, reply sinks, the OpenAI routes' helpers (openai/), and the main
 *   thread's side of the other threads (output-worker-handle.ts, packer-pool.ts,
 *   worker-output-path.ts, sent-answers.ts);
 * - server/output-worker: the output worker thread (workers/output-worker.ts): its loop, the
 *   scatter and column writer, the stream encoder;
 * - server/cross-thread: what two or more threads use: the shared tables and their views (slot meta,
 *   accumulators, block arena, response pool, response view), the messages between threads
 *   (messages.ts, pack-task.ts), code that more than one thread runs (the response packer, which
 *   the packer threads run and the main thread runs for small answers; detokenizer, writer
 *   scratch, reject-error) and the output side's errors. It imports no thread's folder. The packer
 *   threads' entry point (workers/packer.ts) imports only this folder of src/server/;
 * - server/inline: the inline baseline (--output-processing inline), which runs on the main thread
 *   in place of the output worker and packers: it implements main's OutputPath and may import main;
 *   main does not import it;
 * - server: the files directly in src/server/ (only create-output-path.ts, which picks the worker
 *   path or the inline one): they may import main, inline and cross-thread.
 * The output worker and the packers import cross-thread only, never main nor each other, so neither
 * thread loads the main thread's modules (fastify, the coordinator).
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
  server: [...SERVER_OUTSIDE, 'server/main', 'server/inline', 'server/cross-thread'],
  'server/main': [...SERVER_OUTSIDE, 'server/cross-thread'],
  'server/inline': [...SERVER_OUTSIDE, 'server/main', 'server/cross-thread'],
  'server/output-worker': [...THREAD_OUTSIDE, 'server/cross-thread'],
  'server/cross-thread': ['wire', 'shm', 'protocol', 'errors', 'tokenizer'],
  client: ['protocol', 'errors'],
  // shm: the merge threads' priority (thread-priority.ts), as the server's packers; wire: ChurnMap.
  router: ['protocol', 'client', 'obs', 'config', 'errors', 'shm', 'wire'],
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
  // src/server/<thread>/...: the thread's folder; a file directly in src/server/: "server".
  if (parts[1] === 'server' && parts.length > 3) return `server/${parts[2]}`;
  return parts[1] as string;
}

/**
 * The entry points (workers/, outside src/) of the server's threads, each with its thread's layer:
 * of src/server/, an entry point may import only that folder and server/cross-thread.
 */
const THREAD_ENTRIES: Readonly<Record<string, string>> = {
  'workers/output-worker.ts': 'server/output-worker',
  'workers/packer.ts': 'server/cross-thread',
};

/** The imports of a thread's entry point into another thread's folder of src/server/. */
function entryViolations(file: string, thread: string, text: string): Violation[] {
  const found: Violation[] = [];
  for (const ref of ts.preProcessFile(text, true, true).importedFiles) {
    const spec = ref.fileName;
    if (!spec.startsWith('.')) continue;
    const to = layerOf(posix.normalize(posix.join(posix.dirname(file), spec)));
    if (to === null || !to.startsWith('server') || to === thread || to === 'server/cross-thread')
      continue;
    found.push({ file, imports: spec, why: `${thread}'s entry point may import only its folder` });
  }
  return found;
}

interface Violation {
  file: string;
  imports: string;
  why: string;
}

/** The wrong-way imports of one file (`file` relative to the root, `text` its source). */
function violations(file: string, text: string): Violation[] {
  const thread = THREAD_ENTRIES[file];
  if (thread !== undefined) return entryViolations(file, thread, text);
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
    const files = [...sourceFiles(join(root, 'src')), ...sourceFiles(join(root, 'workers'))];
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

  it('every folder of src/server/ is a thread layer with a row; only the output path switch is not', () => {
    const entries = readdirSync(join(root, 'src', 'server'), { withFileTypes: true });
    const folders = entries.filter((e) => e.isDirectory()).map((e) => `server/${e.name}`);
    expect(folders.sort()).toEqual([
      'server/cross-thread',
      'server/inline',
      'server/main',
      'server/output-worker',
    ]);
    for (const folder of folders) expect(Object.keys(ALLOWED)).toContain(folder);
    const files = entries.filter((e) => e.isFile()).map((e) => e.name);
    expect(files).toEqual(['create-output-path.ts']);
    for (const entry of Object.keys(THREAD_ENTRIES)) {
      expect(readdirSync(join(root, 'workers'))).toContain(entry.slice('workers/'.length));
    }
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

  it("refuses a server thread's import of another thread's folder, and cross-thread's of any", () => {
    expect(
      violations(
        'src/server/cross-thread/response-packer.ts',
        "import type { PackTask } from '../main/packer-pool.js';",
      ),
    ).toEqual([
      {
        file: 'src/server/cross-thread/response-packer.ts',
        imports: '../main/packer-pool.js',
        why: 'server/cross-thread may import only wire, shm, protocol, errors, tokenizer',
      },
    ]);
    expect(
      violations(
        'src/server/cross-thread/response-packer.ts',
        "import { x } from '../output-worker/scatter.js';",
      ),
    ).toHaveLength(1);
    expect(
      violations(
        'src/server/output-worker/output-loop.ts',
        "import { d } from '../main/output-worker-handle.js';",
      ),
    ).toHaveLength(1);
    expect(
      violations(
        'src/server/output-worker/scatter.ts',
        "import { p } from '../main/packer-pool.js';",
      ),
    ).toHaveLength(1);
    expect(
      violations(
        'src/server/cross-thread/slot-meta.ts',
        "import type { R } from '../main/request-record.js';",
      ),
    ).toHaveLength(1);
    expect(
      violations(
        'src/server/cross-thread/messages.ts',
        "import { s } from '../output-worker/slot-events.js';",
      ),
    ).toHaveLength(1);
    expect(
      violations(
        'src/server/main/create.ts',
        "import { I } from '../inline/inline-output-path.js';",
      ),
    ).toHaveLength(1);
    expect(
      violations(
        'src/server/main/http/app.ts',
        "import { p } from '../../output-worker/scatter.js';",
      ),
    ).toHaveLength(1);
    expect(
      violations('src/server/output-worker/output-loop.ts', "import { c } from '../../config.js';"),
    ).toHaveLength(1);
    expect(violations('src/server/frontend/x.ts', "import { a } from './a.js';")).toEqual([
      {
        file: 'src/server/frontend/x.ts',
        imports: '',
        why: 'layer "server/frontend" is not in the layering table',
      },
    ]);
    // A thread's entry point: only its folder and cross-thread/ of src/server/.
    expect(
      violations(
        'workers/packer.ts',
        "import type { PackTask } from '../src/server/main/packer-pool.js';",
      ),
    ).toEqual([
      {
        file: 'workers/packer.ts',
        imports: '../src/server/main/packer-pool.js',
        why: "server/cross-thread's entry point may import only its folder",
      },
    ]);
    expect(
      violations(
        'workers/output-worker.ts',
        "import { P } from '../src/server/main/packer-pool.js';",
      ),
    ).toHaveLength(1);
  });

  it('lets the server threads import cross-thread/, inline import main, and the switch import both', () => {
    const shared = "import { AccumulatorTable } from '../cross-thread/accumulators.js';";
    expect(violations('src/server/main/worker-output-path.ts', shared)).toEqual([]);
    expect(violations('src/server/output-worker/output-loop.ts', shared)).toEqual([]);
    expect(violations('src/server/inline/inline-output-path.ts', shared)).toEqual([]);
    expect(
      violations(
        'src/server/inline/inline-output-path.ts',
        "import type { O } from '../main/output-path.js';",
      ),
    ).toEqual([]);
    expect(
      violations(
        'src/server/main/http/routes/health.ts',
        "import type { E } from '../../engine-client.js';",
      ),
    ).toEqual([]);
    expect(
      violations(
        'src/server/create-output-path.ts',
        "import { I } from './inline/inline-output-path.js';\nimport { W } from './main/worker-output-path.js';",
      ),
    ).toEqual([]);
    expect(
      violations(
        'workers/packer.ts',
        "import type { T } from '../src/server/cross-thread/pack-task.js';\nimport { P } from '../src/server/cross-thread/response-packer.js';\nimport { e } from '../src/errors.js';",
      ),
    ).toEqual([]);
    expect(
      violations(
        'src/cluster/api-process.ts',
        "import { c } from '../server/create-output-path.js';",
      ),
    ).toEqual([]);
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
