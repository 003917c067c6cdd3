#!/usr/bin/env node
/**
 * `ringserve serve | router | engine | soak`. `serve` (what `npm start` runs) starts the supervisor, which
 * forks the engine core and the API servers; `engine --vllm-protocol` runs the simulator as a
 * headless vLLM engine. Flags are named like vLLM's (`--help` lists them).
 */
import { spawn } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { formatHelp, isHelpRequested, parseArgs } from './cli-args.js';
import { Supervisor } from './cluster/supervisor.js';
import { runEngineCommand } from './cluster/vllm-engine-command.js';
import type { RingserveConfig } from './config.js';
import { ExitCode, exitCodeFor, isRingserveError } from './errors.js';
import { createLogger } from './obs/log.js';
import { shareMemoryCollect } from './obs/memory-collect.js';
import { Router } from './router/router.js';
import { parseRouterArgs, routerHelp } from './router/router-config.js';
import { restartWithArenaCap } from './shm/malloc-trim.js';

const USAGE = `usage: ringserve <command> [flags]

commands:
  serve   run the API servers and the engine core (default)
  router  a prefill/decode proxy in front of --role prefill and --role decode instances
  engine  the simulator as a headless vLLM engine (--vllm-protocol) dialling a vLLM frontend
  soak    the long-running soak test under faults (ops/soak/; 'ringserve soak --help')

'ringserve serve --help' lists the server's flags; the before/after benchmark is\n'ringserve-bench' (npm run bench).`;

/** Resolves with the exit code, or null once the cluster serves (it runs until a signal stops it). */
async function serve(argv: readonly string[]): Promise<ExitCode | null> {
  if (isHelpRequested(argv)) {
    process.stdout.write(`${formatHelp('ringserve serve')}\n`);
    return ExitCode.Ok;
  }
  const config = parseArgs(argv);
  // Before anything is written or started: where it can, the process starts over with its glibc
  // arena limit (--malloc-arena-max) in its environment.
  restartWithArenaCap(config.mallocArenaMax);
  // Before any other thread starts (pino's): SIGUSR2 collects in every thread.
  const collect = shareMemoryCollect();
  const log = createLogger(config.logLevel, { name: 'ringserve' });
  collect.onSignal(log);
  log.info({ config: loggableConfig(config) }, 'ringserve configuration');
  const supervisor = new Supervisor(config, { logger: log });
  const stop = (signal: string): void => {
    log.info({ signal, drain_timeout_s: config.drainTimeoutS }, 'draining');
    supervisor.stop().then(
      () => process.exit(ExitCode.Ok),
      (error: unknown) => {
        log.error({ err: error }, 'shutdown failed');
        process.exit(ExitCode.Failure);
      },
    );
  };
  process.once('SIGTERM', () => stop('SIGTERM'));
  process.once('SIGINT', () => stop('SIGINT'));
  try {
    const port = await supervisor.start();
    log.info({ port, region: supervisor.regionName }, 'cluster ready');
    // Not a log record: scripts and test/cluster/harness.ts wait for this exact line on stderr.
    console.error(
      `ringserve: serving ${config.servedModelName} (${config.model}) on http://${config.host}:${port} ` +
        `with ${config.apiServerCount} API server(s)`,
    );
  } catch (error) {
    await supervisor.stop().catch(() => {});
    throw error;
  }
  return null;
}

/** `ringserve router`: resolves with the exit code, or null once it serves (until a signal). */
async function router(argv: readonly string[]): Promise<ExitCode | null> {
  if (isHelpRequested(argv)) {
    process.stdout.write(`${routerHelp()}\n`);
    return ExitCode.Ok;
  }
  const config = parseRouterArgs(argv);
  // As serve's: SIGUSR2 collects in every thread (it would end the process otherwise).
  const collect = shareMemoryCollect();
  const log = createLogger(config.logLevel, { name: 'ringserve-router' });
  collect.onSignal(log);
  const proxy = new Router(config, log);
  const stop = (): void => {
    proxy.drain(config.drainTimeoutS * 1000).then(
      () => process.exit(ExitCode.Ok),
      (error: unknown) => {
        log.error({ err: error }, 'shutdown failed');
        process.exit(ExitCode.Failure);
      },
    );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
  const port = await proxy.start();
  log.info({ port, prefill: config.prefill, decode: config.decode }, 'router ready');
  // Scripts and tests wait for this line on stderr, as for serve's.
  console.error(
    `ringserve: routing on http://${config.host}:${port} to ${config.prefill.length} prefill and ${config.decode.length} decode instance(s)`,
  );
  return null;
}

/** The configuration as logged at startup: keys are never written out, only whether one is set. */
function loggableConfig(config: RingserveConfig): Record<string, unknown> {
  return {
    ...config,
    apiKey: config.apiKey === null ? null : '<set>',
    adminApiKey: config.adminApiKey === null ? null : '<set>',
  };
}

/**
 * The soak is its own program (ops/soak/main.js): it starts a cluster, kills parts of it and judges
 * it, so it runs as a separate process beside the cluster, and src/ never imports ops/ (the layering
 * test). Its exit code is ours; SIGINT/SIGTERM reach it through the shared process group or are
 * passed on.
 */
function runSoak(argv: readonly string[]): Promise<ExitCode> {
  const entry = join(dirname(fileURLToPath(import.meta.url)), '..', 'ops', 'soak', 'main.js');
  const child = spawn(process.execPath, [entry, ...argv], { stdio: 'inherit' });
  const pass = (signal: NodeJS.Signals) => () => child.kill(signal);
  process.on('SIGTERM', pass('SIGTERM'));
  process.on('SIGINT', pass('SIGINT'));
  return new Promise((resolve) => {
    child.once('exit', (code) => resolve((code ?? ExitCode.Failure) as ExitCode));
  });
}

async function main(argv: readonly string[]): Promise<ExitCode | null> {
  const [command, ...rest] = argv;
  if (command === undefined || command.startsWith('--')) return serve(argv);
  if (command === 'serve') return serve(rest);
  if (command === 'router') return router(rest);
  if (command === 'engine') return runEngineCommand(rest);
  if (command === 'help' || command === '-h') {
    process.stdout.write(`${USAGE}\n`);
    return ExitCode.Ok;
  }
  if (command === 'bench') {
    console.error(
      'ringserve bench: the benchmark is its own program: `ringserve-bench` or `npm run bench`.',
    );
    return ExitCode.Usage;
  }
  if (command === 'soak') return runSoak(rest);
  console.error(`ringserve: unknown command '${command}'\n\n${USAGE}`);
  return ExitCode.Usage;
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== null) process.exit(code);
  },
  (error: unknown) => {
    if (isRingserveError(error)) console.error(`ringserve: ${error.code}: ${error.message}`);
    else console.error(`ringserve: ${(error as Error).stack ?? String(error)}`);
    process.exit(exitCodeFor(error));
  },
);
