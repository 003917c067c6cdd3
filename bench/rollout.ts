#!/usr/bin/env node
/**
 * Entry point of `npm run bench` (the before/after benchmark; also installed as the `ringserve-bench` bin):
 *
 *   npm run bench -- [--profile quick|rl] [--arms objects-mask,packed-mask] [--json]
 *
 * See bench/rollout/main.ts and docs/performance.md, "The rollout benchmark".
 */
import { exitCodeFor, isRingserveError } from '../src/errors.js';
import { runRolloutBench } from './rollout/main.js';

runRolloutBench(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (isRingserveError(error)) console.error(`bench: ${error.code}: ${error.message}`);
    else console.error(`bench: ${(error as Error).stack ?? String(error)}`);
    process.exit(exitCodeFor(error));
  },
);
