/**
 * The optional keys: --api-key (or VLLM_API_KEY) guards the inference routes, --admin-api-key (or
 * RINGSERVE_ADMIN_API_KEY) the control routes, falling back to the API key when only that is set;
 * /health, /liveness, /metrics and /load stay open; a missing or wrong key is the contract's 401.
 */
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { STAT_PAUSED } from '../../src/shm/layout.js';
import { call, genBody, post } from './control-helpers.js';
import { type Cluster, startCluster } from './harness.js';

describe('API and admin keys', () => {
  const API_KEY = 'test-api-key-0123';
  const ADMIN_KEY = 'test-admin-key-4567';
  let cluster: Cluster;
  beforeAll(async () => {
    // The admin key comes from the environment, as an orchestrator would set it.
    const saved = process.env.RINGSERVE_ADMIN_API_KEY;
    process.env.RINGSERVE_ADMIN_API_KEY = ADMIN_KEY;
    try {
      cluster = await startCluster(['--api-key', API_KEY, '--max-speed']);
    } finally {
      if (saved === undefined) delete process.env.RINGSERVE_ADMIN_API_KEY;
      else process.env.RINGSERVE_ADMIN_API_KEY = saved;
    }
  });
  afterAll(async () => {
    await cluster?.stop();
  });

  const unauthorized = {
    status: 401,
    body: {
      error: {
        message: 'missing or wrong API key',
        type: 'AuthenticationError',
        param: null,
        code: 401,
      },
    },
  };

  it('leaves /health, /liveness, /metrics and /load open', async () => {
    expect((await call(cluster.url, 'GET', '/health')).status).toBe(200);
    expect((await call(cluster.url, 'GET', '/liveness')).status).toBe(200);
    expect((await call(cluster.url, 'GET', '/load')).status).toBe(200);
    expect((await call(cluster.url, 'GET', '/metrics')).status).not.toBe(401);
  });

  it('guards the inference routes with --api-key, and only that key', async () => {
    const body = genBody(5, 1);
    for (const key of [undefined, 'wrong', ADMIN_KEY, `${API_KEY}x`]) {
      const opts = key === undefined ? { body } : { body, key };
      expect(await call(cluster.url, 'POST', '/inference/v1/generate', opts)).toEqual(unauthorized);
      expect(
        await call(cluster.url, 'GET', '/v1/models', key === undefined ? {} : { key }),
      ).toEqual(unauthorized);
    }
    const ok = await call(cluster.url, 'POST', '/inference/v1/generate', { body, key: API_KEY });
    expect(ok.status).toBe(200);
    expect((await call(cluster.url, 'GET', '/v1/models', { key: API_KEY })).status).toBe(200);
    // The scheme is case-insensitive (RFC 7235).
    const res = await request(new URL('/v1/models', cluster.url), {
      headers: { authorization: `bearer ${API_KEY}` },
    });
    await res.body.dump();
    expect(res.statusCode).toBe(200);
  });

  it('guards the control routes with the admin key, and only that key', async () => {
    for (const path of ['/pause', '/resume', '/update_weights', '/reset_prefix_cache']) {
      expect(await post(cluster, path)).toEqual(unauthorized);
      expect(await post(cluster, path, undefined, API_KEY)).toEqual(unauthorized);
      expect(await post(cluster, `${path}?x=1`, undefined, 'wrong')).toEqual(unauthorized);
    }
    expect(await post(cluster, '/abort_requests', { request_ids: [] }, API_KEY)).toEqual(
      unauthorized,
    );
    expect(cluster.engineStat(STAT_PAUSED)).toBe(0);
    expect(await post(cluster, '/pause', undefined, ADMIN_KEY)).toEqual({
      status: 200,
      body: { status: 'paused' },
    });
    expect(cluster.engineStat(STAT_PAUSED)).toBe(1);
    expect((await post(cluster, '/resume', undefined, ADMIN_KEY)).status).toBe(200);
    expect((await post(cluster, '/abort_requests', { request_ids: [] }, ADMIN_KEY)).status).toBe(
      200,
    );
  });

  it('with only --api-key, the control routes take that key', async () => {
    const saved = process.env.RINGSERVE_ADMIN_API_KEY;
    delete process.env.RINGSERVE_ADMIN_API_KEY;
    const single = await startCluster(['--api-key', API_KEY, '--max-speed']);
    try {
      expect(await post(single, '/pause')).toEqual(unauthorized);
      expect((await post(single, '/pause', undefined, API_KEY)).status).toBe(200);
      expect((await post(single, '/resume', undefined, API_KEY)).status).toBe(200);
      expect((await call(single.url, 'GET', '/health')).status).toBe(200);
    } finally {
      if (saved !== undefined) process.env.RINGSERVE_ADMIN_API_KEY = saved;
      await single.stop();
    }
  });
});
