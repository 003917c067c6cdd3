/**
 * Engine core throughput at max speed, in one process: 256 running sequences on the qwen3-30b-a3b
 * preset, kept at 256 by replacing every finished request, sampling with temperature 1.0,
 * top_p 0.97, top_k 512 (the realism reference). Two modes:
 *   plain: no logprobs, no sampling mask, no routing rows requested;
 *   full:  logprobs + sampling masks + routing rows (48 layers x 8 experts per forwarded token).
 * Prints a table (fastest first, with the ratio to the slowest) and, with --json, a last line
 * {"tokens_per_s_plain", "tokens_per_s_full", ...}. Also prints the kept-set size distribution
 * measured in the full run (how peaked the simulated model is under top_p 0.97 / top_k 512).
 *
 *   npm run bench:engine -- [--json] [--seconds 3] [--preset qwen3-30b-a3b]
 */

import type { StepOutputs } from '../src/engine/step-outputs.js';
import { RS_ERR_CONFIG_INVALID } from '../src/errors.js';
import { SimEngine } from '../src/sim/sim-engine.js';
import type { EngineRequest, SamplingParams } from '../src/wire/types.js';

const RUNNING = 256;
const PROMPT_LEN = 512;
const MAX_TOKENS = 16_384;

interface Args {
  json: boolean;
  seconds: number;
  preset: string;
}

function parseArgs(argv: string[]): Args {
  const args: Args = { json: false, seconds: 3, preset: 'qwen3-30b-a3b' };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--json') args.json = true;
    else if (a === '--seconds') args.seconds = Number(argv[++i]);
    else if (a === '--preset') args.preset = String(argv[++i]);
    else
      throw new RS_ERR_CONFIG_INVALID(
        String(a),
        'unknown argument; use --json, --seconds N, --preset NAME',
      );
  }
  if (!(args.seconds > 0)) throw new RS_ERR_CONFIG_INVALID('--seconds', 'must be a number > 0');
  return args;
}

interface ModeResult {
  mode: string;
  tokensPerS: number;
  steps: number;
  tokens: number;
  maskIdsPerToken: number;
  routingRowsPerToken: number;
  /** Kept-set sizes seen: [1], [2-3], [4-10], [11-100], [101+]. */
  keptHistogram: number[];
}

function params(full: boolean, seed: number): SamplingParams {
  return {
    temperature: 1,
    topP: 0.97,
    topK: 512,
    minP: 0,
    seed,
    maxTokens: MAX_TOKENS,
    minTokens: 0,
    stopTokenIds: new Int32Array(0),
    ignoreEos: false,
    presencePenalty: 0,
    frequencyPenalty: 0,
    repetitionPenalty: 1,
    logprobs: full,
    topLogprobs: 0,
    promptLogprobs: -1,
    returnSamplingMask: full,
    returnRoutedExperts: full,
    routedExpertsPromptStart: 0,
  };
}

function request(slot: number, serial: number, full: boolean, vocab: number): EngineRequest {
  const prompt = new Int32Array(PROMPT_LEN);
  for (let i = 0; i < PROMPT_LEN; i++) prompt[i] = (serial * 7919 + i * 104729) % (vocab - 1000);
  return {
    server: 0,
    slot,
    promptTokenIds: prompt,
    params: params(full, serial),
    priority: 0,
    cacheSalt: null,
    arrivalTimeMs: serial,
  };
}

function histogramBucket(kept: number): number {
  if (kept <= 1) return 0;
  if (kept <= 3) return 1;
  if (kept <= 10) return 2;
  if (kept <= 100) return 3;
  return 4;
}

function runMode(preset: string, full: boolean, seconds: number): ModeResult {
  const engine = new SimEngine({
    preset,
    maxSpeed: true,
    maxNumSeqs: RUNNING,
    maxNumBatchedTokens: 8192,
    // Room for every sequence at full length: this measures the engine, not preemption.
    numGpuBlocks: Math.ceil((RUNNING * (PROMPT_LEN + MAX_TOKENS)) / 16) + 1024,
    lengthProfile: 'rl',
  });
  const vocab = engine.preset.vocabSize;
  const out = engine.newStepOutputs(1024);
  let serial = 0;
  for (let slot = 0; slot < RUNNING; slot++) engine.add(request(slot, serial++, full, vocab));
  const step = (): void => {
    out.clear();
    engine.step(out);
    replaceFinished(engine, out, () => serial++, full, vocab);
  };
  // Warm up: every prompt prefilled, then enough decode steps for the JIT to settle.
  while (engine.stats().running < RUNNING || engine.stats().waiting > 0) step();
  for (let i = 0; i < 300; i++) step();
  const keptHistogram = [0, 0, 0, 0, 0];
  let maskIds = 0;
  let routingRows = 0;
  let steps = 0;
  const tokens0 = engine.stats().generationTokens;
  const t0 = performance.now();
  const deadline = t0 + seconds * 1000;
  while (performance.now() < deadline) {
    for (let k = 0; k < 20; k++) {
      step();
      steps++;
      maskIds += out.maskLength;
      routingRows += out.routingRowCount;
      if (full) {
        for (let j = 0; j < out.count; j++) {
          const b = histogramBucket(out.maskCount[j] as number);
          keptHistogram[b] = (keptHistogram[b] as number) + 1;
        }
      }
    }
  }
  const elapsed = (performance.now() - t0) / 1000;
  const tokens = engine.stats().generationTokens - tokens0;
  return {
    mode: full ? 'full' : 'plain',
    tokensPerS: tokens / elapsed,
    steps,
    tokens,
    maskIdsPerToken: maskIds / tokens,
    routingRowsPerToken: routingRows / tokens,
    keptHistogram,
  };
}

function replaceFinished(
  engine: SimEngine,
  out: StepOutputs,
  nextSerial: () => number,
  full: boolean,
  vocab: number,
): void {
  for (let j = 0; j < out.count; j++) {
    if (out.finish[j] !== 0) engine.add(request(out.slot[j] as number, nextSerial(), full, vocab));
  }
}

function main(): void {
  const args = parseArgs(process.argv.slice(2));
  const results = [
    runMode(args.preset, false, args.seconds),
    runMode(args.preset, true, args.seconds),
  ];
  const slowest = Math.min(...results.map((r) => r.tokensPerS));
  const sorted = [...results].sort((a, b) => b.tokensPerS - a.tokensPerS);
  console.log(`engine bench: ${args.preset}, ${RUNNING} running sequences, max speed, one process`);
  console.log('sampling: temperature 1.0, top_p 0.97, top_k 512; prompt 512 tokens; lengths: rl');
  console.log('');
  console.log('mode    tokens/s     x slowest  steps  mask ids/token  routing rows/token');
  for (const r of sorted) {
    console.log(
      `${r.mode.padEnd(6)}  ${Math.round(r.tokensPerS).toString().padStart(10)}  ${(r.tokensPerS / slowest).toFixed(2).padStart(9)}  ${r.steps.toString().padStart(5)}  ${r.maskIdsPerToken.toFixed(2).padStart(14)}  ${r.routingRowsPerToken.toFixed(3).padStart(18)}`,
    );
  }
  const full = results[1] as ModeResult;
  const positions = full.keptHistogram.reduce((a, b) => a + b, 0);
  const pct = (n: number): string => `${((100 * n) / positions).toFixed(1)}%`;
  const [k1, k23, k410, k11100, k101] = full.keptHistogram as [
    number,
    number,
    number,
    number,
    number,
  ];
  console.log('');
  console.log(
    `kept-set sizes (full run, ${positions} positions): 1: ${pct(k1)}  2-3: ${pct(k23)}  ` +
      `4-10: ${pct(k410)}  11-100: ${pct(k11100)}  101+: ${pct(k101)}`,
  );
  if (args.json) {
    console.log(
      JSON.stringify({
        preset: args.preset,
        running: RUNNING,
        tokens_per_s_plain: Math.round((results[0] as ModeResult).tokensPerS),
        tokens_per_s_full: Math.round(full.tokensPerS),
        mask_ids_per_token_full: Number(full.maskIdsPerToken.toFixed(3)),
        kept_1_to_3_fraction: Number(((k1 + k23) / positions).toFixed(4)),
        kept_over_100_fraction: Number((k101 / positions).toFixed(4)),
      }),
    );
  }
}

main();
