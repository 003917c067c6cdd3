import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';

// The whole benchmark on its smallest profile: real clusters (tiny preset), a forked load
// generator and probe, /metrics, the report. Figures are not checked against any speed, only that
// every stage produced them.
const run = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
const outDir = mkdtempSync(join(tmpdir(), `ringserve-test-${process.pid}-bench-`));

afterAll(() => rmSync(outDir, { recursive: true, force: true }));

describe('npm run bench (smoke profile)', () => {
  it('runs the arms asked, prints the table and the JSON line, and writes the HTML report', async () => {
    const { stdout } = await run(
      process.execPath,
      [
        'dist/bench/rollout.js',
        '--profile',
        'smoke',
        '--arms',
        'objects-nomask,packed-mask',
        '--json',
        '--out-dir',
        outDir,
      ],
      { cwd: root, timeout: 90_000 },
    );
    const lines = stdout.trim().split('\n');
    const result = JSON.parse(lines[lines.length - 1] as string);
    expect(result.profile).toBe('smoke');
    expect(result.arms.map((a: { name: string }) => a.name)).toEqual([
      'objects-nomask',
      'packed-mask',
    ]);
    for (const arm of result.arms) {
      expect(arm.done_reqs, arm.name).toBeGreaterThan(0);
      expect(arm.error_reqs, arm.name).toBe(0);
      expect(arm.length_mismatches, arm.name).toBe(0);
      expect(arm.health_probes, arm.name).toBeGreaterThan(0);
      expect(arm.health_failures, arm.name).toBe(0);
      // The floor server was probed alongside, and answered.
      expect(arm.floor_health_p99_ms, arm.name).toBeGreaterThan(0);
      expect(arm.notes.join(), arm.name).not.toMatch(/floor/);
      expect(arm.gen_tok_s, arm.name).toBeGreaterThan(0);
      expect(arm.gc_pct_wall, arm.name).not.toBeNull();
      expect(arm.main_heap_peak_mb, arm.name).toBeGreaterThan(0);
      expect(arm.rss_peak_mb, arm.name).toBeGreaterThan(0);
      expect(arm.tokens_per_resp, arm.name).toBeGreaterThan(0);
      expect(arm.client_parse_ms_mean, arm.name).toBeGreaterThan(0);
      // The whole process: every thread's GC and heap, its CPU, RSS once the load has gone.
      expect(arm.failed_reqs, arm.name).toBe(0);
      expect(arm.gc_pct_wall_all_threads, arm.name).toBeGreaterThanOrEqual(arm.gc_pct_wall);
      expect(arm.heap_peak_mb_all_threads, arm.name).toBeGreaterThan(arm.main_heap_peak_mb);
      expect(arm.max_gc_pause_ms_all_threads, arm.name).not.toBeNull();
      expect(arm.cpu_ms_per_1k_tokens, arm.name).toBeGreaterThan(0);
      expect(arm.rss_after_drain_mb, arm.name).toBeGreaterThan(0);
    }
    expect(result.ratios['objects-mask/packed-mask']).toBeUndefined();
    expect(stdout).toMatch(/^\| objects-nomask +\|/m);
    expect(stdout).toMatch(/^\| packed-mask +\|/m);
    const html = readdirSync(outDir).filter((f) => f.endsWith('.html'));
    expect(html).toHaveLength(1);
    const page = readFileSync(join(outDir, html[0] as string), 'utf8');
    expect(page).toContain('<svg');
    expect(page).not.toMatch(/<script|src="http/);
    expect(readdirSync(outDir).filter((f) => f.endsWith('.raw.json'))).toHaveLength(1);
  }, 120_000);

  it('is the `ringserve-bench` bin, and refuses an unknown arm naming the flag', async () => {
    const help = await run(process.execPath, ['dist/bench/rollout.js', '--help'], { cwd: root });
    expect(help.stdout).toMatch(/--profile quick\|rl/);
    const bad = await run(process.execPath, ['dist/bench/rollout.js', '--arms', 'nope'], {
      cwd: root,
    }).catch((error: { code: number; stderr: string }) => error);
    expect((bad as { code: number }).code).toBe(2);
    expect((bad as { stderr: string }).stderr).toMatch(
      /RS_ERR_CONFIG_INVALID.*--arms.*unknown arm "nope"/,
    );
  });
});
