// Cross-process ring benchmark: `npm run bench:ring` (add `-- --json` for a last line of JSON).
//
//   16-byte records   producer process -> consumer process, one commit per 1024 records
//   4 KiB records     the producer writes every byte, the consumer copies every payload out
//   wake latency      consumer asleep on the futex doorbell; every 20 ms the producer publishes
//                     130 records (one commit each, each stamped as it is published); a burst's
//                     latency = the largest publish -> seen delay of its records, so it includes
//                     the wake-up of the sleeping consumer but not the producer's own writing time
//
// The consumer is this same file, forked with `--consumer <scenario> <region>`. Throughput is timed
// in the consumer after a warm-up share of the records, both ends on CLOCK_MONOTONIC.
import { type ChildProcess, fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { loadavg } from 'node:os';
import { fileURLToPath } from 'node:url';
import { ExitCode } from '../src/errors.js';
import {
  createRegion,
  openRegion,
  outputRingConsumer,
  outputRingProducer,
  type Region,
  unlinkRegion,
} from '../src/shm/region.js';
import type { RingConsumer, RingProducer } from '../src/shm/ring.js';

type Scenario = 'small' | 'large' | 'wake';

interface ConsumerReport {
  received: number;
  timedRecords: number;
  startNs: number;
  endNs: number;
  checksum: number;
  latenciesMs: number[];
}

const SMALL_COUNT = 60_000_000;
const LARGE_COUNT = 1_500_000;
const WARMUP_SHARE = 0.2;
const LARGE_BYTES = 4096;
const SMALL_BATCH = 1024;
const BURSTS = 300;
const BURST_RECORDS = 130;
const BURST_PERIOD_MS = 20;
const RING_BYTES: Record<Scenario, number> = { small: 1 << 20, large: 4 << 20, wake: 1 << 20 };
const WAIT_MS = 10_000;

const nowNs = (): number => Number(process.hrtime.bigint());

function countOf(scenario: Scenario): number {
  if (scenario === 'small') return SMALL_COUNT;
  if (scenario === 'large') return LARGE_COUNT;
  return BURSTS * BURST_RECORDS;
}

// ---------------------------------------------------------------- consumer process

function waitOrFail(consumer: RingConsumer, received: number): void {
  consumer.release();
  if (!consumer.waitForData(WAIT_MS)) throw new Error(`consumer starved after ${received} records`);
}

function consume(scenario: Scenario, consumer: RingConsumer): ConsumerReport {
  const count = countOf(scenario);
  const warmup = scenario === 'wake' ? 0 : Math.floor(count * WARMUP_SHARE);
  const sink = new Uint8Array(LARGE_BYTES);
  const latenciesMs: number[] = [];
  const { i32, f64, bytes } = consumer;
  let received = 0;
  let checksum = 0;
  let startNs = nowNs();
  let burstWorstMs = 0;
  while (received < count) {
    if (!consumer.next()) {
      waitOrFail(consumer, received);
      continue;
    }
    const at = consumer.offset;
    checksum = (checksum + i32[at >> 2]!) | 0;
    if (scenario === 'large') sink.set(bytes.subarray(at, at + LARGE_BYTES));
    received++;
    if (received === warmup) startNs = nowNs();
    if (scenario === 'wake') {
      burstWorstMs = Math.max(burstWorstMs, (nowNs() - f64[(at >> 3) + 1]!) / 1e6);
      if (i32[(at >> 2) + 1] === BURST_RECORDS - 1) {
        latenciesMs.push(burstWorstMs);
        burstWorstMs = 0;
      }
    }
    if ((received & 1023) === 0) consumer.release();
  }
  consumer.release();
  const endNs = nowNs();
  return { received, timedRecords: count - warmup, startNs, endNs, checksum, latenciesMs };
}

function runConsumer(scenario: Scenario, regionName: string): void {
  const consumer = outputRingConsumer(openRegion(regionName), 0);
  process.send?.({ ready: true });
  // Stays alive on its IPC channel once it has reported; the producer kills it.
  process.send?.(consume(scenario, consumer));
}

// ---------------------------------------------------------------- producer (main process)

function reserveOrWait(producer: RingProducer, payloadBytes: number): number {
  const at = producer.tryReserve(1, payloadBytes);
  if (at >= 0) return at;
  producer.commit();
  return producer.reserve(1, payloadBytes, WAIT_MS);
}

function produceSmall(producer: RingProducer): number {
  const { i32 } = producer;
  let checksum = 0;
  for (let seq = 0; seq < SMALL_COUNT; seq++) {
    const at = reserveOrWait(producer, 16);
    i32[at >> 2] = seq;
    i32[(at >> 2) + 1] = seq ^ 0x5bd1e995;
    i32[(at >> 2) + 2] = seq + 1;
    i32[(at >> 2) + 3] = seq + 2;
    checksum = (checksum + seq) | 0;
    if (seq % SMALL_BATCH === SMALL_BATCH - 1) producer.commit();
  }
  producer.commit();
  return checksum;
}

function produceLarge(producer: RingProducer): number {
  const source = new Uint8Array(LARGE_BYTES);
  for (let i = 0; i < LARGE_BYTES; i++) source[i] = (i * 131) & 0xff;
  const { i32, bytes } = producer;
  let checksum = 0;
  for (let seq = 0; seq < LARGE_COUNT; seq++) {
    const at = reserveOrWait(producer, LARGE_BYTES);
    bytes.set(source, at);
    i32[at >> 2] = seq;
    checksum = (checksum + seq) | 0;
    if ((seq & 15) === 15) producer.commit();
  }
  producer.commit();
  return checksum;
}

async function produceBursts(producer: RingProducer): Promise<number> {
  const { i32, f64 } = producer;
  let checksum = 0;
  let seq = 0;
  for (let burst = 0; burst < BURSTS; burst++) {
    await new Promise((resolve) => setTimeout(resolve, BURST_PERIOD_MS));
    for (let index = 0; index < BURST_RECORDS; index++) {
      const at = reserveOrWait(producer, 16);
      i32[at >> 2] = seq;
      i32[(at >> 2) + 1] = index;
      f64[(at >> 3) + 1] = nowNs();
      checksum = (checksum + seq) | 0;
      seq++;
      producer.commit();
    }
  }
  return checksum;
}

function startConsumer(
  scenario: Scenario,
  region: Region,
): Promise<[ChildProcess, Promise<ConsumerReport>]> {
  const child = fork(fileURLToPath(import.meta.url), ['--consumer', scenario, region.name]);
  return new Promise((resolve, reject) => {
    const report = new Promise<ConsumerReport>((done, fail) => {
      child.on('message', (message: { ready?: boolean } & ConsumerReport) => {
        if (message.ready) resolve([child, report]);
        else done(message);
      });
      child.once('exit', (code, signal) => fail(new Error(`consumer exited (${code ?? signal})`)));
    });
    report.catch(reject);
  });
}

async function runScenario(scenario: Scenario): Promise<ConsumerReport> {
  const name = `ringserve-bench-${process.pid}-${randomBytes(4).toString('hex')}`;
  const region = createRegion(name, {
    requestRingBytes: 4096,
    outputRingBytes: RING_BYTES[scenario],
  });
  let child: ChildProcess | undefined;
  try {
    const [started, report] = await startConsumer(scenario, region);
    child = started;
    const producer = outputRingProducer(region, 0);
    let checksum: number;
    if (scenario === 'small') checksum = produceSmall(producer);
    else if (scenario === 'large') checksum = produceLarge(producer);
    else checksum = await produceBursts(producer);
    const result = await report;
    if (result.checksum !== checksum) throw new Error(`${scenario}: checksum mismatch`);
    return result;
  } finally {
    child?.kill('SIGKILL');
    unlinkRegion(name);
  }
}

function percentile(sorted: number[], p: number): number {
  return (
    sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? Number.NaN
  );
}

async function main(): Promise<void> {
  const json = process.argv.includes('--json');
  const small = await runScenario('small');
  const large = await runScenario('large');
  const wake = await runScenario('wake');
  const seconds = (r: ConsumerReport) => (r.endNs - r.startNs) / 1e9;
  const latencies = wake.latenciesMs.slice().sort((a, b) => a - b);
  const result = {
    records_per_s_16b: Math.round(small.timedRecords / seconds(small)),
    gb_per_s_4k: (large.timedRecords * LARGE_BYTES) / seconds(large) / 1e9,
    records_per_s_4k: Math.round(large.timedRecords / seconds(large)),
    wake_p50_ms: percentile(latencies, 50),
    wake_p99_ms: percentile(latencies, 99),
    wake_max_ms: latencies[latencies.length - 1] ?? Number.NaN,
    wake_bursts: latencies.length,
    load_avg_1m: loadavg()[0],
    node: process.version,
  };
  const rows: Array<[string, string, string, boolean]> = [
    [
      '16-byte records, batched, cross-process',
      `${(result.records_per_s_16b / 1e6).toFixed(1)} M rec/s`,
      '>= 20 M rec/s',
      result.records_per_s_16b >= 20e6,
    ],
    [
      '4 KiB records, cross-process',
      `${result.gb_per_s_4k.toFixed(2)} GB/s`,
      '>= 5 GB/s',
      result.gb_per_s_4k >= 5,
    ],
    ['wake latency p50 (130 rec / 20 ms)', `${result.wake_p50_ms.toFixed(3)} ms`, '', true],
    ['wake latency p99', `${result.wake_p99_ms.toFixed(3)} ms`, '<= 3 ms', result.wake_p99_ms <= 3],
    [
      `wake latency max (${result.wake_bursts} bursts)`,
      `${result.wake_max_ms.toFixed(3)} ms`,
      '',
      true,
    ],
  ];
  console.log('| case | result | target | ok |\n|---|---|---|---|');
  for (const [label, value, target, ok] of rows) {
    console.log(`| ${label} | ${value} | ${target} | ${target ? (ok ? 'yes' : 'NO') : ''} |`);
  }
  if (json) console.log(JSON.stringify(result));
}

const consumerAt = process.argv.indexOf('--consumer');
if (consumerAt >= 0) {
  runConsumer(process.argv[consumerAt + 1] as Scenario, process.argv[consumerAt + 2] ?? '');
} else {
  main().catch((err) => {
    console.error(err);
    process.exit(ExitCode.Failure);
  });
}
