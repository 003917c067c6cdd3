// Per-thread scheduling through the addon: each case runs in a worker thread of its own (a thread
// that lowers itself cannot raise itself back without privileges), and reads what the kernel says
// in /proc/self/task/<tid>/stat, not what the addon says.
import { readFileSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { shmAddon } from '../../src/shm/native.js';

const addonPath = new URL('../../build/Release/ringserve_shm.node', import.meta.url).pathname;
const priorityModule = new URL('../../dist/src/shm/thread-priority.js', import.meta.url).href;

/** nice (field 19) and policy (field 41) of a thread, from the kernel. */
function kernelView(tid: number): { nice: number; policy: number } {
  const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
  // Fields after the command name, which is in parentheses and may hold spaces.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return { nice: Number(fields[19 - 3]), policy: Number(fields[41 - 3]) };
}

const SCHED_OTHER = 0;
const SCHED_BATCH = 3;
const SCHED_IDLE = 5;

interface ThreadReport {
  tid: number;
  before: { nice: number; policy: number };
  after: { nice: number; policy: number };
  addonNice: number;
  addonPolicy: string;
  error: { code: string; message: string } | null;
}

/**
 * Runs `body` (a function of (addon, lowerThisThread) as source) in a new worker thread, then
 * reports the thread's kernel view before and after, read from the main thread while the worker
 * is still alive.
 */
async function inThread(body: string): Promise<ThreadReport> {
  const worker = new Worker(
    `const { parentPort } = require('node:worker_threads');
     const addon = require(${JSON.stringify(addonPath)});
     parentPort.once('message', async () => {
       const { lowerThisThread } = await import(${JSON.stringify(priorityModule)});
       const tid = addon.threadId();
       parentPort.postMessage({ step: 'tid', tid });
       await new Promise((r) => parentPort.once('message', r));
       let error = null;
       try { (${body})(addon, lowerThisThread); } catch (e) { error = { code: e.code, message: e.message }; }
       parentPort.postMessage({ step: 'done', nice: addon.threadNice(), policy: addon.threadSchedPolicy(), error });
       await new Promise((r) => parentPort.once('message', r));
     });`,
    { eval: true },
  );
  const next = (): Promise<Record<string, unknown>> =>
    new Promise((resolve, reject) => {
      worker.once('message', resolve);
      worker.once('error', reject);
    });
  try {
    worker.postMessage('go');
    const { tid } = (await next()) as { tid: number };
    const before = kernelView(tid);
    worker.postMessage('apply');
    const done = (await next()) as { nice: number; policy: string; error: ThreadReport['error'] };
    const after = kernelView(tid);
    worker.postMessage('exit');
    return {
      tid,
      before,
      after,
      addonNice: done.nice,
      addonPolicy: done.policy,
      error: done.error,
    };
  } finally {
    await worker.terminate();
  }
}

describe('thread scheduling (addon)', () => {
  it('threadId is this thread: the main thread of a process has the process id', () => {
    expect(shmAddon().threadId()).toBe(process.pid);
    expect(shmAddon().threadNice()).toBe(kernelView(process.pid).nice);
  });

  it('setThreadNice lowers the calling thread only', async () => {
    const main = kernelView(process.pid);
    const r = await inThread(
      '(addon) => addon.setThreadNice(Math.min(19, addon.threadNice() + 7))',
    );
    expect(r.error).toBeNull();
    expect(r.tid).not.toBe(process.pid);
    expect(r.after.nice).toBe(Math.min(19, r.before.nice + 7));
    expect(r.addonNice).toBe(r.after.nice);
    expect(kernelView(process.pid)).toEqual(main);
  });

  it('setThreadSchedPolicy switches the calling thread to SCHED_BATCH or SCHED_IDLE', async () => {
    const batch = await inThread("(addon) => addon.setThreadSchedPolicy('batch')");
    expect(batch.before.policy).toBe(SCHED_OTHER);
    expect(batch.after.policy).toBe(SCHED_BATCH);
    expect(batch.addonPolicy).toBe('batch');
    const idle = await inThread("(addon) => addon.setThreadSchedPolicy('idle')");
    expect(idle.after.policy).toBe(SCHED_IDLE);
    expect(idle.addonPolicy).toBe('idle');
    expect(kernelView(process.pid).policy).toBe(SCHED_OTHER);
  });

  it('lowerThisThread adds to the nice the thread started with, capped at 19', async () => {
    const r = await inThread("(_, lower) => lower({ nice: 4, policy: 'batch' })");
    expect(r.error).toBeNull();
    expect(r.after).toEqual({ nice: Math.min(19, r.before.nice + 4), policy: SCHED_BATCH });
    const capped = await inThread(
      "(_, lower) => { lower({ nice: 15, policy: 'other' }); lower({ nice: 15, policy: 'other' }); }",
    );
    expect(capped.after).toEqual({ nice: 19, policy: SCHED_OTHER });
    const same = await inThread("(_, lower) => lower({ nice: 0, policy: 'other' })");
    expect(same.after).toEqual(same.before);
  });

  it('refuses bad arguments with RS_ERR_SHM_BAD_ARGUMENT', async () => {
    const addon = shmAddon();
    const bad = { code: 'RS_ERR_SHM_BAD_ARGUMENT' };
    expect(() => addon.setThreadNice(20)).toThrow(expect.objectContaining(bad));
    expect(() => addon.setThreadNice(1.5)).toThrow(expect.objectContaining(bad));
    expect(() => addon.setThreadSchedPolicy('fifo' as 'idle')).toThrow(
      expect.objectContaining(bad),
    );
    // Nothing changed on the way.
    expect(kernelView(process.pid).policy).toBe(SCHED_OTHER);
  });

  it('raising a priority is done with privileges, else refused with RS_ERR_SHM_PRIORITY', async () => {
    const r = await inThread('(addon) => addon.setThreadNice(-20)');
    if (r.error === null) {
      // root or CAP_SYS_NICE (as in CI containers): the kernel applied it.
      expect(r.after.nice).toBe(-20);
    } else {
      expect(r.error.code).toBe('RS_ERR_SHM_PRIORITY');
      expect(r.error.message).toMatch(/setpriority\(thread \d+, nice -20\) failed/);
      expect(r.after.nice).toBe(r.before.nice);
    }
  });
});
