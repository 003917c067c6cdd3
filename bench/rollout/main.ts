import { availableParallelism, cpus } from 'node:os';
import { ExitCode } from '../../src/errors.js';
import { getPreset } from '../../src/sim/presets.js';
import type { LoadProgress, ProbeProgress } from '../loadtest/messages.js';
import { ProgressBar } from '../loadtest/progress.js';
import { armFigures } from './figures.js';
import { writeHtmlReport } from './html-report.js';
import { parseRolloutArgs, type RolloutOptions, rolloutUsage } from './options.js';
import {
  type ArmRun,
  CYCLE_EVERY_MS,
  HEALTH_EVERY_MS,
  METRICS_EVERY_MS,
  runArm,
} from './run-arm.js';
import { armSeries } from './series.js';
import { jsonLine, markdownTable, RATIO_PAIRS, ratioLine } from './table.js';

/**
 * `npm run bench` / `ringserve-bench`: the before/after table of per-token objects vs ringserve,
 * every arm a fresh cluster under the identical load, in one run on one machine. Prints the setup,
 * the markdown table and the ratios on stdout (with --json, a last line `{"profile", "arms",
 * "ratios"}`), a progress bar on stderr, and writes the HTML report into bench/results/.
 */

/** Cluster start, client-parse and teardown per arm, for the progress bar's estimate. */
const ARM_OVERHEAD_MS = 6_000;

function setupLines(o: RolloutOptions): string[] {
  const p = o.profile;
  const engine = p.speedup === null ? 'max speed' : `--speedup ${p.speedup}`;
  return [
    `profile ${p.name}: ${p.concurrency} concurrent requests (closed loop), prompt ${p.promptTokens} tokens, ` +
      `responses log-normal mean ${p.meanTokens} tokens (sigma ${p.sigma}, ignore_eos), ${p.armSeconds} s per arm`,
    `engine: simulated ${p.model}, ${engine}; sampling temperature 1.0, top_p 0.97, top_k 512, logprobs 0`,
    `probes (own process): /health every ${HEALTH_EVERY_MS} ms, /metrics every ${METRICS_EVERY_MS} ms, ` +
      `pause -> update_weights -> resume every ${CYCLE_EVERY_MS / 1000} s; /health of a bare node:http ` +
      'server too (the floor)',
    `machine: ${availableParallelism()} cores (${cpus()[0]?.model.trim() ?? 'unknown cpu'}), Node ${process.version}; ` +
      'load generator, probes and floor server share these cores with the cluster',
  ];
}

function liveDetail(load: LoadProgress | null, probe: ProbeProgress | null): string {
  const done = load === null ? '-' : String(load.done);
  const mb = load === null ? '-' : (load.bytes / 1e6).toFixed(0);
  const health =
    probe === null
      ? '-'
      : `${probe.healthLastMs.toFixed(1)} ms (max ${probe.healthMaxMs.toFixed(0)})`;
  return `done ${done}, ${mb} MB in, /health ${health}`;
}

/** Runs the arms in order, each a fresh cluster, with a progress bar. */
async function runArms(options: RolloutOptions): Promise<ArmRun[]> {
  const { profile, arms } = options;
  const armMs = (profile.warmupSeconds + profile.armSeconds) * 1000;
  const bar = new ProgressBar(arms.length * (armMs + ARM_OVERHEAD_MS));
  const runs: ArmRun[] = [];
  for (const [i, arm] of arms.entries()) {
    const before = i * (armMs + ARM_OVERHEAD_MS);
    const label = `${arm.name} ${i + 1}/${arms.length}`;
    bar.update(before, label, 'starting a cluster');
    const run = await runArm(arm, options, (elapsed, load, probe) =>
      bar.update(before + elapsed, label, liveDetail(load, probe)),
    );
    runs.push(run);
    const f = armFigures(run);
    bar.note(
      `${arm.name}: ${f.done_reqs} done, /health p99 ${f.health_p99_ms ?? 'n/a'} ms max ${f.health_max_ms ?? 'n/a'} ms, ` +
        `GC ${f.gc_pct_wall ?? 'n/a'} % of wall, heap peak ${f.main_heap_peak_mb ?? 'n/a'} MiB`,
    );
  }
  bar.done();
  return runs;
}

/** The setup, the table, the ratios and notes, the report's path and the JSON line, on stdout. */
async function report(options: RolloutOptions, runs: ArmRun[]): Promise<void> {
  const figures = runs.map(armFigures);
  const setup = setupLines(options);
  const ratioLines = RATIO_PAIRS.map(([a, b]) => ratioLine(figures, a, b)).filter(
    (l): l is string => l !== null,
  );
  const out = [...setup.map((s) => `# ${s}`), '', markdownTable(figures), '', ...ratioLines];
  for (const f of figures) for (const note of f.notes) out.push(`note: ${f.name}: ${note}`);
  if (options.html) {
    const meta = { profile: options.profile.name, setup, ratioLines };
    const series = runs.map(armSeries);
    const path = await writeHtmlReport(options.outDir, meta, figures, series, { options, runs });
    out.push(`HTML report: ${path}`);
  }
  if (options.json) out.push(jsonLine(options.profile.name, figures));
  process.stdout.write(`${out.join('\n')}\n`);
}

export async function runRolloutBench(argv: readonly string[]): Promise<ExitCode> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(`${rolloutUsage()}\n`);
    return ExitCode.Ok;
  }
  const options = parseRolloutArgs(argv, (model) => Math.min(...getPreset(model).eosTokenIds));
  // Exit through process.exit, so the clusters this run started are stopped on the way out.
  process.once('SIGINT', () => process.exit(ExitCode.Interrupted));
  process.once('SIGTERM', () => process.exit(ExitCode.Terminated));
  await report(options, await runArms(options));
  return ExitCode.Ok;
}
