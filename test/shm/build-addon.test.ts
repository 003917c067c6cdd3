import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const script = fileURLToPath(new URL('../../scripts/build-addon.mjs', import.meta.url));

/** Runs the build script with a controlled environment; the checks fail before anything is built. */
function runBuild(env: Record<string, string>): { status: number | null; stderr: string } {
  const result = spawnSync(process.execPath, [script], { env, encoding: 'utf8' });
  return { status: result.status, stderr: result.stderr };
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
});
