import { EventEmitter } from 'node:events';
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { decodeGenerateBody, type GenerateResult } from '../../../src/client/decode.js';
import { checkInvariants } from '../../../src/client/invariants.js';
import { CONTENT_TYPE, type ResponseForm } from '../../../src/protocol/generate-response.js';
import type { PackTask } from '../../../src/server/cross-thread/pack-task.js';
import { ResponsePacker } from '../../../src/server/cross-thread/response-packer.js';
import { PackerPool, type PackerPoolOptions } from '../../../src/server/main/packer-pool.js';
import { releaseWhenSent } from '../../../src/server/main/sent-answers.js';
import { TINY_BYTES } from '../tiny-tokens.js';
import { events, type Harness, makeHarness, metaFields } from './harness.js';

const FORMS: readonly ResponseForm[] = ['packed', 'legacy', 'msgpack'];
const PROMPT = 6;
const WIDE = { layers: 2, topk: 3, idBytes: 2 as const };

/** Slot 2 (gen 8): a 300-token request with masks and uint16 routing; slot 5: a stop-id request. */
function finishedRequests(): {
  h: Harness;
  tokens: number[];
  logprobs: number[];
  masks: number[][];
  routing: number[];
} {
  const h = makeHarness();
  h.meta.write(2, 8, metaFields({ promptLen: PROMPT, routedExpertsPromptStart: 1 }));
  h.meta.write(
    5,
    4,
    metaFields({ promptLen: PROMPT, logprobs: false, samplingMask: false, routedExperts: false }),
  );
  const tokens: number[] = [];
  const logprobs: number[] = [];
  const masks: number[][] = [];
  const routing: number[] = [];
  const row = (pos: number) => [pos, 300 + pos, 7, 8, 9, (pos * 13) % 1000];
  // Prefill: rows for positions 1..5 (the engine skips position 0), then one row per decode step.
  h.feed([{ slot: 2, gen: 8, routingFirstPos: 1, routing: [1, 2, 3, 4, 5].flatMap(row) }], WIDE);
  for (let p = 1; p < PROMPT; p++) routing.push(...row(p));
  for (let i = 0; i < 300; i++) {
    const token = (i * 37) % 997;
    const lp = Math.fround(-(i % 17) / 4);
    const mask =
      i % 5 === 0 ? [] : [token, (token + 1) % 997, (token + 2) % 997].slice(0, 1 + (i % 3));
    const rows = i === 0 ? [] : row(PROMPT + i - 1);
    tokens.push(token);
    logprobs.push(lp);
    masks.push(mask);
    routing.push(...rows);
    h.feed(
      [
        {
          slot: 2,
          gen: 8,
          token,
          logprob: lp,
          maskIds: mask,
          routingFirstPos: PROMPT + i - 1,
          routing: rows,
          finish: i === 299 ? 2 : 0,
        },
        ...(i < 3
          ? [
              {
                slot: 5,
                gen: 4,
                token: 500 + i,
                finish: i === 2 ? 1 : 0,
                stopTokenId: i === 2 ? 502 : -1,
              },
            ]
          : []),
      ],
      WIDE,
    );
  }
  expect(events(h.scatter.finished)).toEqual([[2, 8]]);
  return { h, tokens, logprobs, masks, routing };
}

/** Slot 2's request (see finishedRequests) in one form. */
function taskFor(form: ResponseForm): PackTask {
  return {
    slots: [2],
    generations: [8],
    form,
    requestId: 'req-1',
    model: 'sim-tiny',
    created: 1_764_400_000,
  };
}

function expectDecoded(r: GenerateResult, want: ReturnType<typeof finishedRequests>): void {
  checkInvariants(r, PROMPT);
  const c = r.choices[0]!;
  expect(r.requestId).toBe('generate-tokens-req-1');
  expect(r.model).toBe('sim-tiny');
  expect(r.created).toBe(1_764_400_000);
  expect(c.finishReason).toBe('length');
  expect(c.stopReason).toBeNull();
  expect(Array.from(c.tokenIds)).toEqual(want.tokens);
  expect(Array.from(c.logprobs!)).toEqual(want.logprobs);
  expect(Array.from(c.mask!.counts)).toEqual(want.masks.map((m) => m.length));
  expect(Array.from(c.mask!.ids)).toEqual(want.masks.flat());
  expect(c.routedExperts!.data).toBeInstanceOf(Uint16Array);
  expect(c.routedExperts!.shape).toEqual([PROMPT - 1 + 299, 2, 3]);
  expect(c.routedExperts!.start).toBe(1);
  expect(Array.from(c.routedExperts!.data)).toEqual(want.routing);
  expect(r.usage).toEqual({
    promptTokens: PROMPT,
    completionTokens: 300,
    totalTokens: PROMPT + 300,
    cachedTokens: null,
  });
}

describe('ResponsePacker (in this thread)', () => {
  it('encodes a finished request in all three forms, which decode to the same arrays', () => {
    const want = finishedRequests();
    const packer = new ResponsePacker(
      want.h.meta.sab,
      want.h.acc.sab,
      want.h.arena.sab,
      want.h.tokens,
    );
    for (const form of FORMS) {
      const body = packer.pack(taskFor(form));
      expect(body.buffer.byteLength).toBe(body.length);
      expectDecoded(decodeGenerateBody(body, CONTENT_TYPE[form]), want);
    }
    const stopped = decodeGenerateBody(
      packer.pack({ slots: [5], form: 'packed', requestId: 'r5', model: 'm', created: 1 }),
      'application/json',
    );
    expect(stopped.choices[0]!.finishReason).toBe('stop');
    expect(stopped.choices[0]!.stopReason).toBe(502);
    expect(Array.from(stopped.choices[0]!.tokenIds)).toEqual([500, 501, 502]);
    expect(stopped.choices[0]!.logprobs).toBeNull();
    expect(stopped.choices[0]!.mask).toBeNull();
    expect(stopped.choices[0]!.routedExperts).toBeNull();
  });

  it('packs n choices from n slots, and refuses a slot that holds no finished response', () => {
    const want = finishedRequests();
    const packer = new ResponsePacker(
      want.h.meta.sab,
      want.h.acc.sab,
      want.h.arena.sab,
      want.h.tokens,
    );
    const both = decodeGenerateBody(
      packer.pack({ slots: [5, 2], form: 'msgpack', requestId: 'n2', model: 'm', created: 1 }),
      'application/msgpack',
    );
    expect(both.choices.map((c) => c.index)).toEqual([0, 1]);
    expect(both.usage?.completionTokens).toBe(303);
    expect(() =>
      packer.pack({
        slots: [2],
        generations: [7],
        form: 'packed',
        requestId: 'x',
        model: 'm',
        created: 1,
      }),
    ).toThrow(expect.objectContaining({ code: 'RS_ERR_OUTPUT_NOT_FINISHED' }));
    expect(() =>
      packer.pack({ slots: [0], form: 'packed', requestId: 'x', model: 'm', created: 1 }),
    ).toThrow(expect.objectContaining({ code: 'RS_ERR_OUTPUT_NOT_FINISHED' }));
  });
});

const SCHED_BATCH = 3;

/** Threads of this process whose scheduling policy is `policy`. */
function tasksWithPolicy(policy: number): number {
  return readdirSync('/proc/self/task').filter((tid) => {
    const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[41 - 3]) === policy;
  }).length;
}

describe('PackerPool (piscina threads running dist/workers/packer.js)', () => {
  const pools: PackerPool[] = [];
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.close()));
  });

  function startPool(
    want: ReturnType<typeof finishedRequests>,
    extra: Partial<PackerPoolOptions> = {},
  ): PackerPool {
    const h = want.h;
    const pool = new PackerPool({
      metaSab: h.meta.sab,
      accSab: h.acc.sab,
      arenaSab: h.arena.sab,
      threads: 2,
      tokenBytes: TINY_BYTES.shared,
      ...extra,
    });
    pools.push(pool);
    return pool;
  }

  it('returns transferred Buffers that decode to the accumulated arrays, in every form', async () => {
    const want = finishedRequests();
    const pool = startPool(want);
    const bodies = await Promise.all(FORMS.map((form) => pool.pack(taskFor(form))));
    FORMS.forEach((form, i) => {
      const body = bodies[i]!;
      expect(Buffer.isBuffer(body)).toBe(true);
      expectDecoded(decodeGenerateBody(body, CONTENT_TYPE[form]), want);
    });
    // A request that cannot be packed comes back as its coded error, not as a bare Error.
    await expect(
      pool.pack({ slots: [0], form: 'packed', requestId: 'x', model: 'm', created: 1 }),
    ).rejects.toMatchObject({
      code: 'RS_ERR_OUTPUT_NOT_FINISHED',
      statusCode: 500,
    });
  });

  it('answers many requests at once, in the pool while it has room, intact until released', async () => {
    const want = finishedRequests();
    // 4 chunks of 64 KiB: four answers fit at a time, the others get buffers of their own.
    const pool = startPool(want, {
      responsePoolBytes: 256 * 1024,
      priority: { nice: 1, policy: 'batch' },
    });
    const task = (i: number): PackTask => taskFor(FORMS[i % FORMS.length]!);
    const reference = new ResponsePacker(
      want.h.meta.sab,
      want.h.acc.sab,
      want.h.arena.sab,
      want.h.tokens,
    );
    const count = 24;
    const bodies = await Promise.all(Array.from({ length: count }, (_, i) => pool.pack(task(i))));
    // The two packer threads lowered themselves (kernel's view: policy is stat field 41).
    expect(tasksWithPolicy(SCHED_BATCH)).toBe(2);
    const stats = pool.poolStats()!;
    expect(stats.pooled).toBe(4);
    expect(stats.full).toBe(count - 4);
    // Every answer, pooled or not, holds its own bytes: no later answer wrote over an earlier one.
    bodies.forEach((body, i) => {
      expect(body.buffer).toBeInstanceOf(ArrayBuffer);
      expect(body.equals(reference.pack(task(i)))).toBe(true);
      expectDecoded(decodeGenerateBody(body, CONTENT_TYPE[task(i).form]), want);
    });
    // Sent: the runs go back, and the next answers are pooled again.
    for (const body of bodies) {
      const res = new EventEmitter();
      releaseWhenSent(res, body);
      res.emit('finish');
    }
    expect(pool.poolStats()!.inUseChunks).toBe(0);
    const next = await pool.pack(task(0));
    expect(pool.poolStats()!.pooled).toBe(5);
    expect(next.equals(reference.pack(task(0)))).toBe(true);
  });
});
