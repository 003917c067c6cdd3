import { spawnSync } from 'node:child_process';
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { nodeGypEnv } from '../../scripts/node-gyp-env.mjs';

const root = fileURLToPath(new URL('../..', import.meta.url));
const script = join(root, 'scripts', 'build-addon.mjs');

/** Runs the build script with a controlled environment; the checks fail before anything is built. */
function runBuild(env: Record<string, string>): { status: number | null; stderr: string } {
  const result = spawnSync(process.execPath, [script], { env, encoding: 'utf8' });
  return { status: result.status, stderr: result.stderr };
}

const scratch: string[] = [];
afterAll(() => {
  for (const dir of scratch) rmSync(dir, { recursive: true, force: true });
});

/** A package root holding only what the build needs, so a build there leaves ours alone. */
function scratchPackage(): string {
  const dir = mkdtempSync(join(tmpdir(), 'ringserve-addon-build-'));
  scratch.push(dir);
  for (const file of ['package.json', 'binding.gyp', 'scripts', 'src/shm/native']) {
    mkdirSync(dirname(join(dir, file)), { recursive: true });
    cpSync(join(root, file), join(dir, file), { recursive: true });
  }
  return dir;
}

describe('scripts/build-addon.mjs', () => {
  it('fails with RS_ERR_ADDON_BUILD naming a missing compiler', () => {
    const { status, stderr } = runBuild({ PATH: '/nonexistent' });
    expect(status).toBe(1);
    expect(stderr).toMatch(/^RS_ERR_ADDON_BUILD: no C\+\+ compiler/);
  });

  it('fails with RS_ERR_ADDON_BUILD naming a compiler that $CXX points nowhere', () => {
    const { status, stderr } = runBuild({ PATH: process.env.PATH ?? '', CXX: '/nonexistent/c++' });
    expect(status).toBe(1);
    expect(stderr).toContain('RS_ERR_ADDON_BUILD: no C++ compiler: none of /nonexistent/c++');
  });

  it("gives node-gyp the running Node's headers whatever npm passed down", () => {
    const inherited = {
      PATH: '/bin',
      npm_config_nodedir: '/usr',
      NPM_CONFIG_TARGET: '18.0.0',
      npm_config_dist_url: 'https://example.invalid',
      'npm_config_target-arch': 'ia32',
      npm_package_config_node_gyp_nodedir: '/opt/node',
      npm_config_node_gyp: '/x/node-gyp.js',
      npm_config_cache: '/root/.npm',
    };
    expect(nodeGypEnv(inherited, '/opt/node24')).toEqual({
      PATH: '/bin',
      npm_config_node_gyp: '/x/node-gyp.js',
      npm_config_cache: '/root/.npm',
      npm_config_nodedir: '/opt/node24',
    });
  });

  it("builds for the running Node, and proves it loads, with npm's nodedir pointing elsewhere", () => {
    const dir = scratchPackage();
    const result = spawnSync(process.execPath, [join(dir, 'scripts', 'build-addon.mjs')], {
      encoding: 'utf8',
      env: {
        ...process.env,
        // What npm exports from an npmrc with `nodedir=...`; node-gyp would prefer it to --nodedir.
        npm_config_nodedir: join(dir, 'no-such-node'),
        npm_config_node_gyp: join(root, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'),
      },
    });
    expect(result.stderr).not.toContain('RS_ERR_ADDON_BUILD');
    expect(result.status).toBe(0);
    expect(result.stdout).toContain(
      `for Node ${process.version} (NODE_MODULE_VERSION ${process.versions.modules})`,
    );
    expect(result.stdout).toContain('it loads');
    const builtFor = JSON.parse(
      readFileSync(join(dir, 'build', 'Release', 'ringserve_shm.built-for.json'), 'utf8'),
    );
    expect(builtFor).toEqual({
      node: process.version,
      modules: process.versions.modules,
      execPath: process.execPath,
    });
    // A real compile against V8's headers: seconds alone, over a minute on a loaded 2-core machine.
  }, 240_000);
});
