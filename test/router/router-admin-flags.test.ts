/**
 * The router's admin flags: --admin-api-key (flag or RINGSERVE_ADMIN_API_KEY, unset by default:
 * the admin routes then take the --api-key) and --instance-drain-timeout-s, with errors naming them.
 */
import { describe, expect, it } from 'vitest';
import { parseRouterArgs, routerHelp } from '../../src/router/router-config.js';

const PAIR = ['--prefill', 'http://127.0.0.1:8100', '--decode', 'http://127.0.0.1:8200'];

describe('router admin flags', () => {
  it('reads the admin key from the flag before the environment; unset by default', () => {
    expect(parseRouterArgs(PAIR, {}).adminApiKey).toBeNull();
    const env = { RINGSERVE_ADMIN_API_KEY: 'env-admin' };
    expect(parseRouterArgs(PAIR, env).adminApiKey).toBe('env-admin');
    expect(parseRouterArgs([...PAIR, '--admin-api-key', 'flag'], env).adminApiKey).toBe('flag');
    // It does not stand in for the client key on a network: generate would be open.
    expect(() =>
      parseRouterArgs([...PAIR, '--host', '0.0.0.0', '--admin-api-key', 'a'], {}),
    ).toThrow(/--host: 0\.0\.0\.0 is not a loopback address/);
  });

  it('bounds --instance-drain-timeout-s and names it', () => {
    expect(parseRouterArgs([...PAIR, '--instance-drain-timeout-s', '0'], {})).toMatchObject({
      instanceDrainTimeoutS: 0,
    });
    expect(() => parseRouterArgs([...PAIR, '--instance-drain-timeout-s', '-1'], {})).toThrow(
      /^--instance-drain-timeout-s: must be an integer in \[0, 86400\]/,
    );
    expect(routerHelp()).toMatch(/--admin-api-key .*env RINGSERVE_ADMIN_API_KEY/);
  });
});
