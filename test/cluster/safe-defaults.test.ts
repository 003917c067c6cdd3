/**
 * Safe defaults on a real cluster: the shared region's name carries 128 random bits and its mode
 * is 0600; the logs of a run with keys and distinctive request bodies, at the most verbose level,
 * hold neither; a non-loopback --host without --api-key is refused at startup with a coded error
 * and the usage exit code.
 */
import { spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { pack } from 'msgpackr';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { ExitCode } from '../../src/errors.js';
import { call } from './control-helpers.js';
import { regionNameOf, startCluster } from './harness.js';

const CLI = join(import.meta.dirname, '..', '..', 'dist', 'src', 'cli.js');

describe('safe defaults', () => {
  it('names the region unguessably and creates it with mode 0600', async () => {
    const cluster = await startCluster(['--max-speed']);
    const name = regionNameOf(cluster.process.pid!);
    expect(name).toMatch(new RegExp(`^ringserve-${cluster.process.pid}-[0-9a-f]{32}$`));
    expect(statSync(join('/dev/shm', name)).mode & 0o777).toBe(0o600);
  });

  it('writes no key and no request body into the logs, even at --log-level trace', async () => {
    const API_KEY = 'sk-ringserve-secret-api-key-6f1e';
    const ADMIN_KEY = 'sk-ringserve-secret-admin-key-93ab';
    const WRONG_KEY = 'sk-ringserve-wrong-key-5d2c';
    const MARKER = 'zebra-quokka-marker';
    const cluster = await startCluster([
      '--max-speed',
      '--log-level',
      'trace',
      '--api-key',
      API_KEY,
      '--admin-api-key',
      ADMIN_KEY,
    ]);
    const body = {
      token_ids: [901, 902, 903, 904],
      sampling_params: { max_tokens: 6, stop: [`${MARKER}-stop`], seed: 1 },
      cache_salt: `${MARKER}-salt`,
    };
    expect(
      (await call(cluster.url, 'POST', '/inference/v1/generate', { body, key: API_KEY })).status,
    ).toBe(200);
    const res = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/msgpack', authorization: `Bearer ${API_KEY}` },
      body: pack({ ...body, stream: true }),
    });
    expect(res.statusCode).toBe(200);
    await res.body.dump();
    // Bad bodies (their answers may quote the field, the logs may not), and wrong keys.
    const bad = { token_ids: [`${MARKER}-bad`], sampling_params: {} };
    expect(
      (await call(cluster.url, 'POST', '/inference/v1/generate', { body: bad, key: API_KEY }))
        .status,
    ).toBe(400);
    const broken = await request(`${cluster.url}/inference/v1/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
      body: `{"token_ids": "${MARKER}-broken`,
    });
    expect(broken.statusCode).toBe(400);
    await broken.body.dump();
    expect(
      (await call(cluster.url, 'POST', '/inference/v1/generate', { body, key: WRONG_KEY })).status,
    ).toBe(401);
    expect((await call(cluster.url, 'POST', '/pause', { key: API_KEY })).status).toBe(401);
    expect(
      (await call(cluster.url, 'POST', '/reset_prefix_cache', { key: ADMIN_KEY })).status,
    ).toBe(200);
    await cluster.stop();
    const log = cluster.log();
    // The run did log (so the grep below searched something): the startup lines at least.
    expect(log).toContain('ringserve configuration');
    expect(log).toContain('"apiKey":"<set>"');
    expect(log).toContain('request finished');
    for (const secret of [API_KEY, ADMIN_KEY, WRONG_KEY, MARKER, '901,902,903']) {
      expect(log).not.toContain(secret);
    }
    expect(log.toLowerCase()).not.toContain('bearer');
  });

  it('refuses a non-loopback --host without --api-key at startup, with the usage exit code', () => {
    const run = spawnSync(process.execPath, [CLI, 'serve', '--host', '0.0.0.0', '--port', '0'], {
      encoding: 'utf8',
      timeout: 30_000,
      env: { ...process.env, VLLM_API_KEY: '' },
    });
    expect(run.status).toBe(ExitCode.Usage);
    expect(run.stderr).toContain('RS_ERR_CONFIG_INVALID');
    expect(run.stderr).toContain('--host');
    expect(run.stderr).toContain('--allow-unauthenticated');
  });
});
