import { describe, expect, it } from 'vitest';
import { ARM_NAMES } from '../../bench/rollout/arms.js';
import { PROFILES, parseRolloutArgs } from '../../bench/rollout/options.js';
import { cpuTable, scalingJson, scalingTable } from '../../bench/scaling/table.js';

const ceiling = (): number => 1000;

describe('npm run bench flags', () => {
  it('runs the quick profile on every arm by default', () => {
    const o = parseRolloutArgs([], ceiling);
    expect(o.profile).toEqual(PROFILES.quick);
    expect(o.arms.map((a) => a.name)).toEqual(ARM_NAMES);
    expect(o.json).toBe(false);
    expect(o.html).toBe(true);
    expect(o.promptIdCeiling).toBe(992);
  });

  it('takes a profile, arms in the order given, and overrides of single figures', () => {
    const o = parseRolloutArgs(
      [
        '--profile',
        'rl',
        '--arms',
        'packed-mask,objects-mask',
        '--json',
        '--no-html',
        '--concurrency',
        '10',
        '--arm-seconds',
        '2.5',
        '--warmup-seconds',
        '0',
        '--max-speed',
      ],
      ceiling,
    );
    expect(o.profile.name).toBe('rl');
    expect(o.arms.map((a) => a.name)).toEqual(['packed-mask', 'objects-mask']);
    expect(o.profile.concurrency).toBe(10);
    expect(o.profile.armSeconds).toBe(2.5);
    expect(o.profile.warmupSeconds).toBe(0);
    expect(o.profile.speedup).toBeNull();
    expect(o.json && !o.html).toBe(true);
  });

  it('scales the length bounds with a new mean length', () => {
    const quick = PROFILES.quick!;
    const o = parseRolloutArgs(['--mean-tokens', String(quick.meanTokens / 4)], ceiling);
    expect(o.profile.meanTokens).toBe(quick.meanTokens / 4);
    expect(o.profile.minTokens).toBe(quick.minTokens / 4);
    expect(o.profile.maxTokens).toBe(quick.maxTokens / 4);
  });

  it('refuses unknown flags, arms and profiles and bad values, naming the flag', () => {
    const code = { code: 'RS_ERR_CONFIG_INVALID' };
    expect(() => parseRolloutArgs(['--fast'], ceiling)).toThrow(
      expect.objectContaining({ ...code, param: '--fast' }),
    );
    expect(() => parseRolloutArgs(['--arms', 'packed-mask,nope'], ceiling)).toThrow(
      /unknown arm "nope"/,
    );
    expect(() => parseRolloutArgs(['--profile', 'huge'], ceiling)).toThrow(
      /unknown profile "huge"/,
    );
    expect(() => parseRolloutArgs(['--concurrency', '2.5'], ceiling)).toThrow(
      /--concurrency: must be a positive integer/,
    );
    expect(() => parseRolloutArgs(['--speedup', '0'], ceiling)).toThrow(
      /--speedup: must be a number > 0/,
    );
    expect(() => parseRolloutArgs(['--arm-seconds'], ceiling)).toThrow(/--arm-seconds/);
    expect(() => parseRolloutArgs(['--out-dir'], ceiling)).toThrow(/--out-dir/);
  });
});

describe('the scaling table', () => {
  it('prints one row per cell and a JSON line of the same rows', () => {
    const rows = [
      {
        kind: 'short',
        target: 'ringserve',
        api_server_count: 1,
        concurrency: 64,
        req_s: 6000.4,
        tok_s: 96006,
        p50_ms: 8.5,
        p99_ms: 21.25,
        speedup_vs_1: 1,
        efficiency: 1,
        errors: 0,
      },
      {
        kind: 'short',
        target: 'ringserve',
        api_server_count: 2,
        concurrency: 64,
        req_s: 9000,
        tok_s: 144000,
        p50_ms: null,
        p99_ms: null,
        speedup_vs_1: 1.5,
        efficiency: 0.75,
        errors: 2,
      },
    ];
    const lines = scalingTable(rows).split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[2]).toMatch(
      /^\| short \| ringserve \| +1 \| +64 \| +6,000 \| +96,006 \| +8\.5 \| +21\.3 \| +1\.00 \| +1\.00 \| +0 \|$/,
    );
    expect(lines[3]).toMatch(/\| +n\/a \| +n\/a \| +1\.50 \| +0\.75 \| +2 \|$/);
    const json = JSON.parse(scalingJson(rows));
    expect(json.bench).toBe('scaling');
    expect(json.rows[0]).toMatchObject({ req_s: 6000, p99_ms: 21.25, api_server_count: 1 });
  });
});

describe('the scaling CPU table', () => {
  const base = {
    kind: 'short',
    api_server_count: 1,
    concurrency: 64,
    tok_s: 0,
    p50_ms: null,
    p99_ms: null,
    speedup_vs_1: 1,
    efficiency: 1,
    errors: 0,
  };

  it('lists the rows that have CPU figures, the bare route without an engine', () => {
    const rows = [
      {
        ...base,
        target: 'ringserve',
        listener: 'primary',
        req_s: 4000,
        server_cpu_us: 212.4,
        engine_cpu_us: 61.6,
        load_cpu_us: 118,
        idle_pct: 17.84,
      },
      { ...base, target: 'ringserve', listener: 'reuseport', req_s: 3900 },
      {
        ...base,
        target: 'bare fastify',
        listener: 'node:cluster',
        req_s: 9000,
        server_cpu_us: 47,
        engine_cpu_us: null,
        load_cpu_us: 101,
        idle_pct: 20,
      },
    ];
    const lines = cpuTable(rows).split('\n');
    expect(lines).toHaveLength(4);
    expect(lines[0]).toMatch(/server us\/req \| engine us\/req \| load us\/req \| idle % \|$/);
    expect(lines[2]).toMatch(
      /^\| short \| ringserve +\| primary +\| +1 \| +4,000 \| +212 \| +62 \| +118 \| +17\.8 \|$/,
    );
    expect(lines[3]).toMatch(
      /^\| short \| bare fastify \| node:cluster \| +1 \| +9,000 \| +47 \| +n\/a \| +101 \| +20\.0 \|$/,
    );
  });

  it('is empty when no row has CPU figures', () => {
    expect(cpuTable([{ ...base, target: 'ringserve', req_s: 1 }])).toBe('');
  });
});
