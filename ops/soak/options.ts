/**
 * The soak's command line: `npm run soak -- --duration 1h --concurrency 300 [--json]` and the knobs
 * a shorter or gentler run needs (CI runs 3 minutes at 64). Thresholds are flags so a run on a
 * loaded machine can say what it held itself to; the defaults are issue 15's.
 */
import { FAULT_KINDS, type FaultKind } from './faults.js';

export interface SoakOptions {
  durationS: number;
  concurrency: number;
  json: boolean;
  /** Completion lengths are drawn from [minTokens, maxTokens]. */
  minTokens: number;
  maxTokens: number;
  apiServers: number;
  /** Extra `ringserve serve` flags, e.g. "--speedup 4". */
  serverFlags: string[];
  /** Seconds between two faults (they rotate: API-server SIGKILL, engine SIGKILL, API-server SIGSTOP). */
  faultEveryS: number;
  /** The fault kinds the rotation takes, in this order (default: all three). */
  faultKinds: FaultKind[];
  /** Seconds between two pause -> update_weights -> resume cycles. */
  pauseEveryS: number;
  /** RSS samples before this are warm-up (also after each process's start). */
  warmupS: number;
  /** A fault window extends this long past its recovery. */
  graceS: number;
  maxRssSlopePctPerH: number;
  /** The RSS slope is judged only for processes with at least this many seconds after warm-up. */
  slopeWindowS: number;
  healthP99Ms: number;
  healthMaxMs: number;
  /** /health probes in the first S seconds of traffic (all clients connect at once) are not judged. */
  healthWarmupS: number;
  /** A request unanswered this long is lost; the final drain waits as long. */
  answerTimeoutS: number;
  seed: number;
  /** Where to write every process incarnation's memory samples as JSON, or null. */
  seriesFile: string | null;
}

const DEFAULTS: SoakOptions = {
  durationS: 3600,
  concurrency: 300,
  json: false,
  minTokens: 256,
  maxTokens: 4096,
  apiServers: 2,
  serverFlags: ['--speedup', '4'],
  faultEveryS: 45,
  faultKinds: [...FAULT_KINDS],
  pauseEveryS: 30,
  warmupS: 600,
  graceS: 2,
  maxRssSlopePctPerH: 1,
  slopeWindowS: 600,
  healthP99Ms: 50,
  healthMaxMs: 50,
  healthWarmupS: 10,
  answerTimeoutS: 300,
  seed: 15,
  seriesFile: null,
};

export const SOAK_USAGE = `usage: ringserve soak | npm run soak -- [flags]
  --duration D            1h, 10m, 180s (default 1h)
  --concurrency N         closed-loop clients (default 300)
  --json                  a last line holding one JSON object
  --min-tokens N --max-tokens N   completion lengths (default 256..4096)
  --api-servers N         API-server processes (default 2)
  --server-flags "..."    more 'ringserve serve' flags (default "--speedup 4")
  --fault-every S         seconds between faults (default 45)
  --faults K,K            the kinds they rotate through (default kill-api,kill-engine,stop-api);
                          with 2+ API servers, kill-api spares ringserve-api-0 (the witness, whose
                          RSS is judged over the whole run), and in a run of at least twice
                          (--warmup + --slope-window) the engine is not killed after 2 x
                          --slope-window + --warmup (+ 60 s) before the end, so its last
                          incarnation is read at rest (a second quiet spell, 2 x --slope-window
                          before the end) and judged too
  --pause-every S         seconds between pause/update_weights/resume cycles (default 30)
  --warmup S              RSS warm-up after start and after each restart (default 600: private
                          memory takes ~10 minutes to level off under load); at its end, in a run
                          of at least --warmup + --slope-window, a quiet spell (no new requests,
                          faults or pause cycles) reads every process's memory at rest, after
                          asking each to collect its garbage (SIGUSR2)
  --grace S               a fault window lasts until recovery + S (default 2)
  --max-rss-slope P       %/h allowed per process (default 1): for a process read at rest in a
                          quiet spell past its warm-up and after the final drain, what it kept
                          between the two; for any other, its least-squares slope under load if it
                          has --slope-window S after its own warm-up
  --slope-window S        post-warm-up seconds a process needs to be judged (default 600)
  --health-p99-ms M --health-max-ms M   /health bounds outside fault windows and those
                          collections (default 50, 50)
  --health-warmup S       /health is judged from S seconds after the clients start (default 10:
                          all of them connect, and run cold code, in the first seconds)
  --answer-timeout S      a request unanswered this long is lost (default 300)
  --seed S
  --series FILE           write every process's RSS samples (with private and shared-region
                          parts) to FILE as JSON`;

export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(h|m|s)?$/.exec(text);
  if (m === null) throw new Error(`--duration: expected e.g. 1h, 10m or 180s, got "${text}"`);
  const n = Number(m[1]);
  return m[2] === 'h' ? n * 3600 : m[2] === 'm' ? n * 60 : n;
}

export function parseSoakOptions(argv: readonly string[]): SoakOptions {
  const o: SoakOptions = {
    ...DEFAULTS,
    serverFlags: [...DEFAULTS.serverFlags],
    faultKinds: [...DEFAULTS.faultKinds],
  };
  const num = (flag: string, value: string | undefined): number => {
    const n = Number(value);
    if (value === undefined || !Number.isFinite(n) || n < 0) {
      throw new Error(`${flag}: expected a non-negative number, got ${value}`);
    }
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = (): string | undefined => argv[++i];
    switch (flag) {
      case '--json':
        o.json = true;
        break;
      case '--duration':
        o.durationS = parseDuration(value() ?? '');
        break;
      case '--concurrency':
        o.concurrency = Math.max(1, Math.round(num(flag, value())));
        break;
      case '--min-tokens':
        o.minTokens = Math.max(1, Math.round(num(flag, value())));
        break;
      case '--max-tokens':
        o.maxTokens = Math.max(1, Math.round(num(flag, value())));
        break;
      case '--api-servers':
        o.apiServers = Math.max(1, Math.round(num(flag, value())));
        break;
      case '--server-flags':
        o.serverFlags = (value() ?? '').split(/\s+/).filter((s) => s !== '');
        break;
      case '--fault-every':
        o.faultEveryS = num(flag, value());
        break;
      case '--faults': {
        const kinds = (value() ?? '').split(',').filter((k) => k !== '');
        const bad = kinds.find((k) => !(FAULT_KINDS as readonly string[]).includes(k));
        if (kinds.length === 0 || bad !== undefined) {
          throw new Error(
            `--faults: expected a comma-separated list of ${FAULT_KINDS.join(', ')}, got "${bad ?? ''}"`,
          );
        }
        o.faultKinds = kinds as FaultKind[];
        break;
      }
      case '--series':
        o.seriesFile = value() ?? '';
        if (o.seriesFile === '') throw new Error('--series: expected a file path');
        break;
      case '--pause-every':
        o.pauseEveryS = num(flag, value());
        break;
      case '--warmup':
        o.warmupS = num(flag, value());
        break;
      case '--grace':
        o.graceS = num(flag, value());
        break;
      case '--max-rss-slope':
        o.maxRssSlopePctPerH = num(flag, value());
        break;
      case '--slope-window':
        o.slopeWindowS = num(flag, value());
        break;
      case '--health-p99-ms':
        o.healthP99Ms = num(flag, value());
        break;
      case '--health-max-ms':
        o.healthMaxMs = num(flag, value());
        break;
      case '--health-warmup':
        o.healthWarmupS = num(flag, value());
        break;
      case '--answer-timeout':
        o.answerTimeoutS = Math.max(1, num(flag, value()));
        break;
      case '--seed':
        o.seed = Math.round(num(flag, value()));
        break;
      default:
        throw new Error(`unknown flag ${flag}\n${SOAK_USAGE}`);
    }
  }
  if (o.minTokens > o.maxTokens) throw new Error('--min-tokens must be <= --max-tokens');
  return o;
}
