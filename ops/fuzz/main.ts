/**
 * `npm run fuzz -- [--cases N] [--seed S] [--json]`: the fuzz of issue 15 on a real cluster (tiny
 * model, --max-speed, two API servers) and in-process. N cases (default 100,000) of the route fuzz
 * (http-fuzz.ts: 80% data routes, 10% raw sockets, 10% control routes), N of each ring-record
 * property (ring-fuzz.ts) and N mutated vLLM engine messages read by the bridge (vllm-fuzz.ts).
 * Passes when every answer was a 2xx or a 4xx with the contract's error
 * body, no process crashed or restarted, and the cluster answered /health 200 afterwards. Prints a
 * summary and, with --json, a last line holding one JSON object; exits 1 on any failure.
 */
import { startCluster } from '../../bench/loadtest/cluster.js';
import { ExitCode } from '../../src/errors.js';
import { FUZZ_CLUSTER_FLAGS } from './flags.js';
import { runHttpFuzz } from './http-fuzz.js';
import { runRingFuzz } from './ring-fuzz.js';
import { runVllmFuzz } from './vllm-fuzz.js';

interface Options {
  cases: number;
  seed: number;
  json: boolean;
}

function parseOptions(argv: readonly string[]): Options {
  const o: Options = { cases: 100_000, seed: Date.now() % 2 ** 31, json: false };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === '--json') o.json = true;
    else if (flag === '--cases') o.cases = Number(argv[++i]);
    else if (flag === '--seed') o.seed = Number(argv[++i]);
    else throw usage(`unknown flag ${flag}`);
  }
  if (!(Number.isInteger(o.cases) && o.cases > 0))
    throw usage('--cases must be a positive integer');
  if (!Number.isInteger(o.seed)) throw usage('--seed must be an integer');
  return o;
}

function usage(why: string): Error {
  return new Error(`${why}\nusage: npm run fuzz -- [--cases N] [--seed S] [--json]`);
}

async function main(): Promise<ExitCode> {
  const o = parseOptions(process.argv.slice(2));
  const t0 = performance.now();
  const ring = runRingFuzz(o.cases, o.seed);
  const vllm = runVllmFuzz(o.cases, o.seed);
  const cluster = await startCluster([...FUZZ_CLUSTER_FLAGS]);
  let http: Awaited<ReturnType<typeof runHttpFuzz>>;
  try {
    http = await runHttpFuzz(cluster.url, cluster.port, o.cases, o.seed);
  } finally {
    await cluster.stop();
  }
  const events = cluster.events();
  const restarts = events.apiServerRestarts + events.engineRestarts;
  const failures = [...ring.failures, ...vllm.failures, ...http.failures];
  if (restarts > 0) failures.push(`${restarts} process restart(s) during the fuzz`);
  if (!http.healthyAfter) failures.push('/health did not answer 200 after the fuzz');
  const summary = {
    cases: o.cases,
    seed: o.seed,
    http_statuses: http.statuses,
    restarts,
    healthy_after: http.healthyAfter,
    failures,
    seconds: Math.round((performance.now() - t0) / 1000),
  };
  console.log(
    `fuzz: ${o.cases} route cases, ${o.cases} of each ring property and ${o.cases} vLLM engine messages, seed ${o.seed}`,
  );
  console.log(`answers by status: ${JSON.stringify(http.statuses)}`);
  console.log(`restarts ${restarts}, healthy after: ${http.healthyAfter}, ${summary.seconds} s`);
  for (const f of failures) console.log(`FAIL ${f}`);
  if (failures.length === 0) console.log('PASS');
  if (o.json) console.log(JSON.stringify(summary));
  return failures.length === 0 ? ExitCode.Ok : ExitCode.Failure;
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    console.error(`fuzz: ${(error as Error).message}`);
    process.exit(ExitCode.Failure);
  },
);
