import { execFileSync } from 'node:child_process';
import { EventEmitter } from 'node:events';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { ResponsePool } from '../../../src/server/cross-thread/response-pool.js';
import { pooledAnswer, releaseWhenSent } from '../../../src/server/main/sent-answers.js';

const KIB = 1024;
const CHUNK = 64 * KIB;

/** 16 chunks of 64 KiB: answers up to 4 chunks (256 KiB) are pooled. */
const smallPool = (): ResponsePool => ResponsePool.create(16 * CHUNK, CHUNK);

describe('ResponsePool', () => {
  it('hands out whole chunks that never overlap, and takes answers up to a quarter of it', () => {
    const pool = smallPool();
    expect(pool.chunks).toBe(16);
    expect(pool.maxAnswerBytes).toBe(4 * CHUNK);
    const a = pool.acquire(100)!;
    const b = pool.acquire(CHUNK + 1)!;
    const c = pool.acquire(4 * CHUNK)!;
    expect(b.offset).toBe(a.offset + CHUNK);
    expect(c.offset).toBe(b.offset + 2 * CHUNK);
    expect(new Set([a.owner, b.owner, c.owner]).size).toBe(3);
    expect(pool.stats()).toMatchObject({ pooled: 3, inUseChunks: 7, oversize: 0, full: 0 });
    expect(c.offset + c.length).toBeLessThanOrEqual(pool.sab.byteLength);
  });

  it('reuses a run only after it is released', () => {
    const pool = smallPool();
    const runs = [];
    for (let i = 0; i < 8; i++) runs.push(pool.acquire(2 * CHUNK)!);
    expect(runs.every((r) => r !== null)).toBe(true);
    expect(pool.acquire(1)).toBeNull();
    expect(pool.stats().full).toBe(1);
    const third = runs[2]!;
    pool.release(third);
    // A 2-chunk hole: a 3-chunk answer does not fit it, a 2-chunk one gets exactly it.
    expect(pool.acquire(3 * CHUNK)).toBeNull();
    const again = pool.acquire(2 * CHUNK)!;
    expect(again.offset).toBe(third.offset);
    expect(again.owner).not.toBe(third.owner);
  });

  it('counts answers too large for it, which the caller sends in a buffer of their own', () => {
    const pool = smallPool();
    expect(pool.acquire(4 * CHUNK + 1)).toBeNull();
    expect(pool.acquire(50 * 1024 * KIB)).toBeNull();
    expect(pool.stats()).toMatchObject({ oversize: 2, full: 0, pooled: 0, inUseChunks: 0 });
  });

  it('refuses to release a run twice, or a run it handed to someone else since', () => {
    const pool = smallPool();
    const run = pool.acquire(10)!;
    pool.release(run);
    expect(() => pool.release(run)).toThrow(/not owned/);
    const next = pool.acquire(10)!;
    expect(next.offset).toBe(run.offset);
    expect(() => pool.release(run)).toThrow(/not owned/);
    pool.release(next);
    expect(pool.stats().inUseChunks).toBe(0);
  });

  it('trim() gives back the pages of touched chunks that are free, and leaves held ones alone', () => {
    const pool = smallPool();
    const held = pool.acquire(2 * CHUNK)!;
    const sent = pool.acquire(3 * CHUNK)!;
    pool.bytes.fill(5, held.offset, held.offset + held.length);
    pool.bytes.fill(7, sent.offset, sent.offset + sent.length);
    pool.release(sent);
    expect(pool.trim()).toBe(3 * CHUNK);
    const zeros = (run: typeof sent) =>
      pool.bytes.subarray(run.offset, run.offset + run.length).every((b) => b === 0);
    expect(zeros(sent)).toBe(true);
    expect(pool.bytes.subarray(held.offset, held.offset + held.length).every((b) => b === 5)).toBe(
      true,
    );
    // Nothing touched since: nothing to give back. Once the held answer is sent, its chunks go.
    expect(pool.trim()).toBe(0);
    pool.release(held);
    expect(pool.trim()).toBe(2 * CHUNK);
    expect(pool.stats()).toMatchObject({ inUseChunks: 0, releasedBytes: 5 * CHUNK });
    // Every chunk is free again.
    for (let i = 0; i < 4; i++) expect(pool.acquire(4 * CHUNK)).not.toBeNull();
    expect(pool.acquire(1)).toBeNull();
  });

  it('trim(n) gives back a chunk on the (n+1)th call it stayed free through; an answer makes it young again', () => {
    const pool = smallPool();
    const a = pool.acquire(2 * CHUNK)!;
    const b = pool.acquire(CHUNK)!;
    pool.release(a);
    pool.release(b);
    // Ticks 1 and 2 age both runs; a is used again before tick 3, so only b has aged past 2.
    expect(pool.trim(2)).toBe(0);
    expect(pool.trim(2)).toBe(0);
    const again = pool.acquire(2 * CHUNK)!;
    expect(again.offset).toBe(a.offset);
    pool.release(again);
    expect(pool.trim(2)).toBe(CHUNK);
    // a's chunks, young again: aged by ticks 3 and 4, given back at 5; nothing is left after.
    expect(pool.trim(2)).toBe(0);
    expect(pool.trim(2)).toBe(2 * CHUNK);
    expect(pool.trim(0)).toBe(0);
    expect(pool.stats()).toMatchObject({ inUseChunks: 0, releasedBytes: 3 * CHUNK });
  });

  it('threads claiming and releasing at once never get overlapping runs', async () => {
    const pool = ResponsePool.create(64 * CHUNK, CHUNK);
    const moduleUrl = new URL(
      '../../../dist/src/server/cross-thread/response-pool.js',
      import.meta.url,
    ).href;
    const threads = 4;
    const rounds = 3000;
    const workers = Array.from(
      { length: threads },
      (_, t) =>
        new Worker(
          `const { parentPort, workerData } = require('node:worker_threads');
           import(${JSON.stringify(moduleUrl)}).then(({ ResponsePool }) => {
             const pool = new ResponsePool(workerData.sab);
             let placed = 0, corrupt = 0, seed = ${t + 1};
             for (let i = 0; i < ${rounds}; i++) {
               seed = (seed * 1103515245 + 12345) & 0x7fffffff;
               const length = 1 + (seed % (5 * ${CHUNK}));
               const run = pool.acquire(length);
               if (run === null) continue;
               placed++;
               const tag = (${t} * 64 + (i & 63)) & 0xff;
               pool.bytes.fill(tag, run.offset, run.offset + run.length);
               for (let k = 0; k < 200; k++) Math.sqrt(k);
               for (let k = run.offset; k < run.offset + run.length; k += 997) {
                 if (pool.bytes[k] !== tag) { corrupt++; break; }
               }
               if (pool.bytes[run.offset + run.length - 1] !== tag) corrupt++;
               pool.release(run);
             }
             parentPort.postMessage({ placed, corrupt });
           });`,
          { eval: true, workerData: { sab: pool.sab } },
        ),
    );
    const results = await Promise.all(
      workers.map(
        (w) =>
          new Promise<{ placed: number; corrupt: number }>((resolve, reject) => {
            w.once('message', resolve);
            w.once('error', reject);
          }),
      ),
    );
    await Promise.all(workers.map((w) => w.terminate()));
    expect(results.map((r) => r.corrupt)).toEqual([0, 0, 0, 0]);
    const placed = results.reduce((n, r) => n + r.placed, 0);
    const stats = pool.stats();
    expect(placed).toBeGreaterThan(threads * rounds * 0.5);
    expect(stats.pooled).toBe(placed);
    expect(stats.pooled + stats.oversize + stats.full).toBe(threads * rounds);
    expect(stats.inUseChunks).toBe(0);
  });
});

describe('pooled answers on the main thread', () => {
  function answerOf(pool: ResponsePool, text: string): Buffer {
    const run = pool.acquire(text.length)!;
    pool.bytes.set(Buffer.from(text), run.offset);
    return pooledAnswer(pool, run);
  }

  it('are ArrayBuffer-backed views of the pool (fastify sends those as raw bytes)', () => {
    const pool = smallPool();
    const body = answerOf(pool, '{"ok":true}');
    expect(Buffer.isBuffer(body)).toBe(true);
    expect(body.buffer).toBeInstanceOf(ArrayBuffer);
    expect(body.toString()).toBe('{"ok":true}');
  });

  it("go back to the pool on the response's 'finish', not before", () => {
    const pool = ResponsePool.create(4 * CHUNK, CHUNK);
    const res = new EventEmitter();
    const body = answerOf(pool, 'x'.repeat(CHUNK));
    releaseWhenSent(res, body);
    expect(pool.stats().inUseChunks).toBe(1);
    // The only free chunks are the other three: none of them is the sent answer's.
    const others = [pool.acquire(1)!, pool.acquire(1)!, pool.acquire(1)!];
    expect(pool.acquire(1)).toBeNull();
    expect(body.toString()).toBe('x'.repeat(CHUNK));
    res.emit('finish');
    expect(pool.stats().inUseChunks).toBe(3);
    res.emit('close');
    expect(pool.stats().inUseChunks).toBe(3);
    for (const run of others) pool.release(run);
  });

  it("go back on 'close' when the connection ends first; other Buffers are left alone", () => {
    const pool = smallPool();
    const res = new EventEmitter();
    releaseWhenSent(res, answerOf(pool, 'abc'));
    releaseWhenSent(res, Buffer.from('not pooled'));
    expect(pool.stats().inUseChunks).toBe(1);
    res.emit('close');
    expect(pool.stats().inUseChunks).toBe(0);
    expect(res.listenerCount('finish')).toBe(1);
    res.emit('finish');
    expect(pool.stats().inUseChunks).toBe(0);
  });
});

describe('a pooled answer that is never sent', () => {
  it('goes back to the pool once its view is garbage-collected', () => {
    // A process of its own, for --expose-gc: the answer's view is dropped unsent (its client left).
    const dist = new URL('../../../dist/src/server/', import.meta.url).href;
    const script = `
      const { ResponsePool } = await import('${dist}cross-thread/response-pool.js');
      const { pooledAnswer } = await import('${dist}main/sent-answers.js');
      const pool = ResponsePool.create(${16 * CHUNK}, ${CHUNK});
      (() => { pooledAnswer(pool, pool.acquire(100)); })();
      const held = pool.stats().inUseChunks;
      for (let i = 0; i < 50 && pool.stats().inUseChunks > 0; i++) {
        globalThis.gc();
        await new Promise((r) => setTimeout(r, 10));
      }
      console.log(JSON.stringify({ held, after: pool.stats().inUseChunks }));`;
    const out = execFileSync(
      process.execPath,
      ['--expose-gc', '--input-type=module', '-e', script],
      { encoding: 'utf8' },
    );
    expect(JSON.parse(out)).toEqual({ held: 1, after: 0 });
  });
});
