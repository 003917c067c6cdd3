/**
 * `ringserve router`'s flags: defaults, keys from flags or the environment, the refusal to route on
 * a network without a key, and errors that name the flag.
 */
import { describe, expect, it } from 'vitest';
import { RingserveError } from '../../src/errors.js';
import { parseRouterArgs, routerHelp } from '../../src/router/router-config.js';

const NO_ENV = {};
const PAIR = ['--prefill', 'http://127.0.0.1:8100', '--decode', 'http://127.0.0.1:8200'];

/** The coded error parseRouterArgs throws, or a failure when it throws nothing. */
function routerError(argv: string[], env: Record<string, string> = NO_ENV): RingserveError {
  try {
    parseRouterArgs(argv, env);
  } catch (err) {
    expect(err).toBeInstanceOf(RingserveError);
    expect((err as RingserveError).code).toBe('RS_ERR_CONFIG_INVALID');
    return err as RingserveError;
  }
  throw new Error(`parseRouterArgs(${JSON.stringify(argv)}) did not throw`);
}

describe('router flags', () => {
  it('listens on loopback, open, at info by default', () => {
    expect(parseRouterArgs(PAIR, NO_ENV)).toEqual({
      prefill: ['http://127.0.0.1:8100'],
      decode: ['http://127.0.0.1:8200'],
      host: '127.0.0.1',
      port: 8000,
      healthIntervalMs: 2000,
      bodyLimitMb: 32,
      apiKey: null,
      upstreamApiKey: null,
      adminApiKey: null,
      instanceDrainTimeoutS: 300,
      drainTimeoutS: 30,
      mergeThreads: 1,
      allowUnauthenticated: false,
      logLevel: 'info',
    });
  });

  it('refuses a non-loopback host without a key, unless told to route unauthenticated', () => {
    const e = routerError([...PAIR, '--host', '0.0.0.0']);
    expect(e.message).toMatch(/--host: 0\.0\.0\.0 is not a loopback address.*--api-key/);
    const open = parseRouterArgs([...PAIR, '--host', '0.0.0.0', '--allow-unauthenticated'], NO_ENV);
    expect(open).toMatchObject({ host: '0.0.0.0', apiKey: null, allowUnauthenticated: true });
    const keyed = parseRouterArgs([...PAIR, '--host=::', '--api-key', 'k'], NO_ENV);
    expect(keyed).toMatchObject({ host: '::', apiKey: 'k', upstreamApiKey: 'k' });
    for (const host of ['localhost', '127.0.0.2', '::1']) {
      expect(parseRouterArgs([...PAIR, '--host', host], NO_ENV).host).toBe(host);
    }
  });

  it('takes keys from flags before the environment; the upstream key defaults to its own', () => {
    const env = { VLLM_API_KEY: 'from-env', RINGSERVE_UPSTREAM_API_KEY: 'up-env' };
    expect(parseRouterArgs(PAIR, env)).toMatchObject({
      apiKey: 'from-env',
      upstreamApiKey: 'up-env',
    });
    expect(parseRouterArgs([...PAIR, '--api-key', 'flag'], { VLLM_API_KEY: 'x' })).toMatchObject({
      apiKey: 'flag',
      upstreamApiKey: 'flag',
    });
    const split = parseRouterArgs([...PAIR, '--upstream-api-key', 'inst'], NO_ENV);
    expect(split).toMatchObject({ apiKey: null, upstreamApiKey: 'inst' });
    expect(parseRouterArgs(PAIR, { VLLM_API_KEY: '' }).apiKey).toBeNull();
  });

  it('names the flag of a bad value', () => {
    expect(routerError([...PAIR, '--log-level', 'loud']).message).toMatch(
      /^--log-level: must be one of fatal, error, warn, info, debug, trace, silent, got "loud"/,
    );
    expect(routerError([...PAIR, '--allow-unauthenticated=yes']).message).toMatch(
      /^--allow-unauthenticated: must be true or false/,
    );
    expect(routerError([...PAIR, '--api-key=']).message).toMatch(/^--api-key: must not be empty/);
    expect(routerError(['--decode', 'http://a:1']).message).toMatch(/^--prefill: is required/);
    expect(routerError([...PAIR, '--port', '70000']).message).toMatch(
      /^--port: must be an integer/,
    );
    expect(routerError([...PAIR, '--tokenizer', 'x']).message).toMatch(/unknown flag/);
    expect(parseRouterArgs([...PAIR, '--log-level', 'warn'], NO_ENV).logLevel).toBe('warn');
  });

  it('lists every flag in --help with its default and environment variable', () => {
    const help = routerHelp();
    expect(help).toMatch(/--host +address to listen on.*\(default 127\.0\.0\.1\)/);
    expect(help).toMatch(/--api-key .*\(unset, env VLLM_API_KEY\)/);
    expect(help).toMatch(/--upstream-api-key .*\(unset, env RINGSERVE_UPSTREAM_API_KEY\)/);
    expect(help).toMatch(/--allow-unauthenticated .*\(off\)/);
    expect(help).toMatch(/--log-level +pino log level: fatal, .*silent \(default info\)/);
    expect(help).toMatch(/--prefill .*\(required\)/);
  });
});
