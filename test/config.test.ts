import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { formatHelp, isHelpRequested, parseArgs } from '../src/cli-args.js';
import { buildConfig, CONFIG_FIELDS, configField, type RingserveConfig } from '../src/config.js';
import { RingserveError } from '../src/errors.js';
import { resolveEngineConfig } from '../src/sim/engine-config.js';
import { getPreset, PRESET_NAMES } from '../src/sim/presets.js';
import { committedTokenizersDir } from '../src/tokenizer/presets.js';
import { ENGINE_LIMITS, MAX_SLOTS_PER_SERVER } from '../src/wire/engine-defaults.js';
import { getModelCard } from '../src/wire/model-card.js';
import { GLM_46, modelDirs, TINY_GLM_SHAPE } from './wire/hf-fixtures.js';

const NO_ENV = {};

/** The coded error parseArgs throws, or a failure when it throws nothing. */
function configError(argv: string[], env: Record<string, string> = NO_ENV): RingserveError {
  try {
    parseArgs(argv, env);
  } catch (err) {
    expect(err).toBeInstanceOf(RingserveError);
    const e = err as RingserveError;
    expect(e.code).toBe('RS_ERR_CONFIG_INVALID');
    return e;
  }
  throw new Error(`parseArgs(${JSON.stringify(argv)}) did not throw`);
}

describe('config defaults', () => {
  it('fills every field, derived ones from the preset, and freezes', () => {
    const c = parseArgs([], NO_ENV);
    const qwen = getPreset('qwen3-30b-a3b');
    expect(c).toMatchObject({
      host: '127.0.0.1',
      port: 8000,
      apiServerCount: 1,
      model: 'qwen3-30b-a3b',
      servedModelName: 'sim-qwen3-30b-a3b',
      maxModelLen: qwen.maxModelLen,
      maxNumSeqs: 256,
      maxNumBatchedTokens: 8192,
      numGpuBlocks: qwen.defaultNumGpuBlocks,
      blockSize: 16,
      seed: 0,
      speedup: 1,
      maxSpeed: false,
      outputProcessing: 'workers',
      generateFormat: 'packed',
      returnSamplingMask: false,
      returnRoutedExperts: false,
      lengthProfile: 'rl',
      apiKey: null,
      adminApiKey: null,
      logLevel: 'info',
    });
    expect(c.packerThreads).toBeGreaterThanOrEqual(1);
    expect(Object.isFrozen(c)).toBe(true);
    for (const f of CONFIG_FIELDS) expect(c[f.key], f.flag).not.toBeUndefined();
    expect(Object.keys(c).sort()).toEqual(CONFIG_FIELDS.map((f) => f.key).sort());
  });

  it('offers every engine preset as --model and derives from the chosen one', () => {
    expect(PRESET_NAMES).toContain('tiny');
    const tiny = getPreset('tiny');
    const c = parseArgs(['--model', 'tiny', '--block-size', '32'], NO_ENV);
    expect(c.servedModelName).toBe('sim-tiny');
    expect(c.maxModelLen).toBe(tiny.maxModelLen);
    expect(c.numGpuBlocks).toBe(Math.floor((tiny.defaultNumGpuBlocks * 16) / 32));
  });

  it('gives every field a flag, a help line and a range or choices', () => {
    const flags = new Set<string>();
    for (const f of CONFIG_FIELDS) {
      expect(f.flag).toMatch(/^--[a-z][a-z0-9-]+$/);
      expect(flags.has(f.flag)).toBe(false);
      flags.add(f.flag);
      expect(f.help.length).toBeGreaterThan(5);
      if (f.kind === 'int' || f.kind === 'number') {
        expect(
          f.choices !== undefined || (f.min !== undefined && f.max !== undefined),
          f.flag,
        ).toBe(true);
      }
      if (f.kind === 'enum') expect(f.choices?.length, f.flag).toBeGreaterThan(0);
      if (f.default === null && f.kind !== 'string') expect(f.derived, f.flag).toBeDefined();
    }
  });
});

describe('parseArgs forms', () => {
  it('accepts --flag value, --flag=value, and last occurrence wins', () => {
    const c = parseArgs(['--port', '9000', '--host=127.0.0.1', '--seed=7', '--port=9001'], NO_ENV);
    expect([c.port, c.host, c.seed]).toEqual([9001, '127.0.0.1', 7]);
  });

  it('accepts booleans as --flag, --no-flag and --flag=true|false', () => {
    expect(parseArgs(['--max-speed'], NO_ENV).maxSpeed).toBe(true);
    expect(parseArgs(['--max-speed', '--no-max-speed'], NO_ENV).maxSpeed).toBe(false);
    expect(parseArgs(['--return-sampling-mask=true'], NO_ENV).returnSamplingMask).toBe(true);
    expect(parseArgs(['--return-routed-experts=false'], NO_ENV).returnRoutedExperts).toBe(false);
  });

  it('parses every kind: ints, numbers, enums, strings', () => {
    const c = parseArgs(
      [
        '--api-server-count',
        '3',
        '--speedup',
        '2.5',
        '--output-processing',
        'inline',
        '--generate-format',
        'legacy',
        '--length-profile',
        'chat',
        '--api-key',
        'k1',
        '--served-model-name',
        'policy',
        '--max-model-len',
        '2048',
        '--drain-timeout-s',
        '1e1',
        '--scheduling-policy',
        'priority',
        '--log-level',
        'warn',
      ],
      NO_ENV,
    );
    expect(c).toMatchObject({
      apiServerCount: 3,
      speedup: 2.5,
      outputProcessing: 'inline',
      generateFormat: 'legacy',
      lengthProfile: 'chat',
      apiKey: 'k1',
      servedModelName: 'policy',
      maxModelLen: 2048,
      drainTimeoutS: 10,
      schedulingPolicy: 'priority',
      logLevel: 'warn',
    } satisfies Partial<RingserveConfig>);
  });

  it('reads keys from the environment, and the flag wins over it', () => {
    const env = { RINGSERVE_ADMIN_API_KEY: 'admin', VLLM_API_KEY: 'user' };
    expect(parseArgs([], env)).toMatchObject({ adminApiKey: 'admin', apiKey: 'user' });
    expect(parseArgs(['--admin-api-key', 'flag'], env).adminApiKey).toBe('flag');
    expect(parseArgs([], { RINGSERVE_ADMIN_API_KEY: '' }).adminApiKey).toBeNull();
  });

  it('detects --help and -h', () => {
    expect(isHelpRequested(['--port', '1', '--help'])).toBe(true);
    expect(isHelpRequested(['-h'])).toBe(true);
    expect(isHelpRequested(['--port', '1'])).toBe(false);
  });
});

describe('parseArgs errors name the flag', () => {
  it('rejects a non-integer with the exact message', () => {
    const e = configError(['--port', 'x']);
    expect(e.message).toBe('--port: must be an integer in [0, 65535], got "x"');
    expect(e.param).toBe('--port');
  });

  it('rejects out-of-range ints, and fractional ints', () => {
    expect(configError(['--port', '65536']).message).toBe(
      '--port: must be an integer in [0, 65535], got "65536"',
    );
    expect(configError(['--api-server-count', '0']).param).toBe('--api-server-count');
    expect(configError(['--api-server-count=33']).param).toBe('--api-server-count');
    expect(configError(['--max-num-seqs', '1.5']).param).toBe('--max-num-seqs');
    expect(configError(['--seed', '-1']).param).toBe('--seed');
  });

  it('rejects bad numbers, including an exclusive lower bound', () => {
    expect(configError(['--speedup', '0']).message).toBe(
      '--speedup: must be a number in (0, 1000000], got "0"',
    );
    expect(configError(['--speedup', 'fast']).param).toBe('--speedup');
    expect(configError(['--body-limit-mb', 'NaN']).param).toBe('--body-limit-mb');
    expect(configError(['--drain-timeout-s', '-1']).param).toBe('--drain-timeout-s');
  });

  it('rejects values outside an enum or a numeric choice list', () => {
    expect(configError(['--output-processing', 'threads']).message).toBe(
      '--output-processing: must be one of workers, inline, got "threads"',
    );
    expect(configError(['--model', 'llama']).message).toContain('--model: must be one of');
    expect(configError(['--block-size', '24']).message).toBe(
      '--block-size: must be one of 1, 8, 16, 32, 64, 128, got "24"',
    );
  });

  it('rejects unknown flags, positionals, missing values and valued negations', () => {
    expect(configError(['--tensor-parallel-size', '2']).message).toBe(
      '--tensor-parallel-size: unknown flag (see --help)',
    );
    expect(configError(['serve']).message).toBe('serve: unexpected argument');
    expect(configError(['--port']).message).toBe(
      '--port: expects a value (an integer in [0, 65535])',
    );
    expect(configError(['--port', '--seed', '1']).param).toBe('--port');
    expect(configError(['--no-max-speed=1']).param).toBe('--no-max-speed');
    expect(configError(['--no-port']).message).toBe('--no-port: unknown flag (see --help)');
    expect(configError(['--max-speed=yes']).param).toBe('--max-speed');
  });

  it('rejects an empty string', () => {
    expect(configError(['--host', '']).param).toBe('--host');
    expect(configError(['--served-model-name=']).param).toBe('--served-model-name');
  });

  it('rejects flags that contradict each other', () => {
    expect(configError(['--max-num-seqs', '512', '--max-num-batched-tokens', '256']).message).toBe(
      '--max-num-batched-tokens: must be >= --max-num-seqs (512), got 256',
    );
    const kv = configError([
      '--model',
      'tiny',
      '--num-gpu-blocks',
      '10',
      '--max-model-len',
      '4096',
    ]);
    expect(kv.param).toBe('--num-gpu-blocks');
    expect(kv.message).toContain('cannot hold one sequence');
  });
});

describe('buildConfig', () => {
  it('applies the same checks to programmatic values', () => {
    expect(buildConfig({ port: 0, model: 'tiny' }).port).toBe(0);
    expect(() => buildConfig({ port: 70000 })).toThrow(
      '--port: must be an integer in [0, 65535], got 70000',
    );
    expect(() => buildConfig({ maxSpeed: 'yes' as unknown as boolean })).toThrow(/--max-speed/);
    expect(() => buildConfig({ bogus: 1 } as never)).toThrow('bogus: unknown configuration field');
  });

  it('treats null as "use the default"', () => {
    expect(buildConfig({ seed: null, servedModelName: null }).servedModelName).toBe(
      'sim-qwen3-30b-a3b',
    );
  });
});

describe('one source for the engine defaults and ranges', () => {
  it('gives the simulator, left to its defaults, the configuration the CLI gets', () => {
    for (const model of PRESET_NAMES) {
      const c = buildConfig({ model });
      const e = resolveEngineConfig({ preset: model });
      expect(e, model).toMatchObject({
        maxNumSeqs: c.maxNumSeqs,
        maxNumBatchedTokens: c.maxNumBatchedTokens,
        numGpuBlocks: c.numGpuBlocks,
        blockSize: c.blockSize,
        seed: c.seed,
        policy: c.schedulingPolicy,
        speedup: c.speedup,
        maxSpeed: c.maxSpeed,
      });
      expect(e.lengthProfile.name).toBe(c.lengthProfile);
      // The CLI caps --max-model-len where the simulator takes the preset's whole.
      expect(Math.min(e.maxModelLen, configField('maxModelLen').max!)).toBe(c.maxModelLen);
    }
  });

  it('offers no flag value the engine does not run with', () => {
    for (const key of Object.keys(ENGINE_LIMITS) as Array<keyof typeof ENGINE_LIMITS>) {
      const range = ENGINE_LIMITS[key];
      const field = CONFIG_FIELDS.find((f) => f.key === key);
      if (field === undefined) continue;
      const values = field.choices ?? [field.min, field.max];
      for (const v of values) {
        expect(v, field.flag).toBeGreaterThanOrEqual(range.min);
        expect(v, field.flag).toBeLessThanOrEqual(range.max);
      }
    }
    expect(configField('maxQueueLen').max).toBe(MAX_SLOTS_PER_SERVER);
  });
});

describe('a model directory as --model', () => {
  const dirs = modelDirs();

  it("derives from the directory's card and serves under the path, as vLLM does", () => {
    const dir = dirs.tiny('tiny-moe', TINY_GLM_SHAPE);
    const card = getModelCard(dir);
    const c = parseArgs(['--model', dir, '--block-size', '32'], NO_ENV);
    expect(c.model).toBe(dir);
    expect(c.servedModelName).toBe(dir);
    expect(c.maxModelLen).toBe(4096);
    expect(c.numGpuBlocks).toBe(Math.floor((card.defaultNumGpuBlocks * 16) / 32));
    expect(buildConfig({ model: dir, servedModelName: 'tiny-moe' }).servedModelName).toBe(
      'tiny-moe',
    );
  });

  it('takes max_position_embeddings, capped as for a preset', () => {
    const tokenizer = join(committedTokenizersDir(), 'tiny');
    const glm = dirs.write('GLM-4.6', { 'config.json': GLM_46 });
    expect(buildConfig({ model: glm, tokenizer }).maxModelLen).toBe(202_752);
    // A 1M-token context (Qwen2.5-7B-Instruct-1M has 1,010,000): the card keeps it, the flag caps it.
    const long = dirs.write('long', {
      'config.json': { ...GLM_46, max_position_embeddings: 1_010_000 },
    });
    expect(getModelCard(long).maxModelLen).toBe(1_010_000);
    expect(buildConfig({ model: long, tokenizer }).maxModelLen).toBe(
      configField('maxModelLen').max,
    );
  });

  it('refuses what is neither a preset nor a model directory, naming --model', () => {
    const none = configError(['--model', '/no/such/model-dir']);
    expect(none.param).toBe('--model');
    expect(none.message).toContain('no such directory');
    const empty = dirs.write('empty', {});
    expect(configError(['--model', empty]).message).toContain('config.json does not exist');
  });

  it('needs the tokenizer files in the directory, or --tokenizer DIR', () => {
    const dir = dirs.write('no-tokenizer', { 'config.json': TINY_GLM_SHAPE });
    const e = configError(['--model', dir]);
    expect(e.param).toBe('--model');
    expect(e.message).toContain('has no tokenizer.json');
    const tokenizer = join(committedTokenizersDir(), 'tiny');
    expect(parseArgs(['--model', dir, '--tokenizer', tokenizer], NO_ENV).tokenizer).toBe(tokenizer);
  });

  it('says in --help that --model takes a directory', () => {
    expect(formatHelp()).toContain(
      'default: qwen3-30b-a3b; one of qwen3-30b-a3b, glm-4.5-air, tiny, tiny-wide, or a local Hugging Face model directory',
    );
  });
});

describe('formatHelp', () => {
  it('lists every flag with its help, default and range', () => {
    const help = formatHelp();
    expect(help.startsWith('usage: ringserve serve [flags]')).toBe(true);
    for (const f of CONFIG_FIELDS) {
      expect(help).toContain(f.flag);
      expect(help).toContain(f.help);
    }
    expect(help).toContain('--max-speed, --no-max-speed');
    expect(help).toMatch(/--port <int>\s+TCP port/);
    expect(help).toContain('default: 8000; an integer in [0, 65535]');
    expect(help).toContain('default: sim-<model>');
    expect(help).toContain('env RINGSERVE_ADMIN_API_KEY');
    expect(help).toContain('--help, -h');
  });
});

describe('safe defaults: binding a network address', () => {
  it('listens on loopback by default', () => {
    expect(parseArgs([], NO_ENV).host).toBe('127.0.0.1');
  });

  it('refuses a non-loopback --host without --api-key, naming --host', () => {
    for (const host of ['0.0.0.0', '::', '10.1.2.3', 'example.com']) {
      const e = configError(['--host', host]);
      expect(e.param).toBe('--host');
      expect(e.message).toContain('--api-key');
      expect(e.message).toContain('--allow-unauthenticated');
    }
  });

  it('accepts a non-loopback --host with a key (flag or env) or with --allow-unauthenticated', () => {
    expect(parseArgs(['--host', '0.0.0.0', '--api-key', 'k'], NO_ENV).host).toBe('0.0.0.0');
    expect(parseArgs(['--host', '0.0.0.0'], { VLLM_API_KEY: 'k' }).host).toBe('0.0.0.0');
    expect(parseArgs(['--host', '::', '--allow-unauthenticated'], NO_ENV).host).toBe('::');
  });

  it('takes every loopback spelling as loopback', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '::ffff:127.0.0.1']) {
      expect(parseArgs(['--host', host], NO_ENV).host).toBe(host);
    }
  });
});

describe('failure injection flags', () => {
  it('defaults to no injection, every kind listed, the header off', () => {
    const c = parseArgs([], NO_ENV);
    expect(c.failureRate).toBe(0);
    expect(c.failureKinds).toBe('rate_limit,unavailable,context_length,abort');
    expect(c.allowFailureHeader).toBe(false);
  });

  it('rejects a rate outside [0, 1] and an unknown kind, naming the flag', () => {
    expect(configError(['--failure-rate', '1.5']).param).toBe('--failure-rate');
    expect(configError(['--failure-rate', '-0.1']).param).toBe('--failure-rate');
    const e = configError(['--failure-kinds', 'rate_limit,teapot']);
    expect(e.param).toBe('--failure-kinds');
    expect(e.message).toContain('teapot');
  });
});

describe('--data-parallel-size', () => {
  it('defaults to 1 and takes [1, 256] with --engine vllm', () => {
    expect(parseArgs([], NO_ENV).dataParallelSize).toBe(1);
    expect(parseArgs(['--data-parallel-size', '1'], NO_ENV).dataParallelSize).toBe(1);
    for (const n of ['2', '256']) {
      expect(
        parseArgs(['--engine', 'vllm', '--data-parallel-size', n], NO_ENV).dataParallelSize,
      ).toBe(Number(n));
    }
    expect(buildConfig({ engine: 'vllm', dataParallelSize: 8 }).dataParallelSize).toBe(8);
  });

  it('rejects 0, 257 and a fraction, naming the flag', () => {
    for (const n of ['0', '257', '1.5', 'two']) {
      const e = configError(['--engine', 'vllm', '--data-parallel-size', n]);
      expect(e.param).toBe('--data-parallel-size');
      expect(e.message).toContain('must be an integer in [1, 256]');
    }
  });

  it('refuses more than one rank with the simulator, naming the flag', () => {
    const e = configError(['--data-parallel-size', '2']);
    expect(e.param).toBe('--data-parallel-size');
    expect(e.message).toBe(
      '--data-parallel-size: must be 1 with --engine sim (the simulator is one engine rank); more ranks need --engine vllm, got 2',
    );
    expect(configError(['--engine', 'sim', '--data-parallel-size=4']).param).toBe(
      '--data-parallel-size',
    );
    expect(() => buildConfig({ dataParallelSize: 2 })).toThrow(/--data-parallel-size/);
  });

  it('says in --help what it is', () => {
    expect(formatHelp()).toContain(
      'data-parallel engine ranks behind this cluster (with --engine vllm: headless vLLM engines dialling the handshake port); 1 with the simulator',
    );
  });
});
