// The malloc trimmer (native/ringserve_shm.cc, src/shm/malloc-trim.ts) in a process of its own,
// since one trimmer serves a whole process: freed C-heap memory that glibc keeps (a chunk still in
// use above it stops the heap from shrinking at its top) goes back to the kernel within a few
// intervals, the trimmer is one thread at its starter's priority (a lower one made a SIGKILLed
// process slow to be gone: each thread must run its exit), and a second start reports the running
// one.
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { shmAddon } from '../../src/shm/native.js';

const addonPath = new URL('../../build/Release/ringserve_shm.node', import.meta.url).pathname;
const MIB = 1024 * 1024;

// 100 MiB in 8 KiB buffers (below malloc's mmap threshold: from the heap), the last kept alive so
// the freed ones sit below it; RssAnon after they are collected, then after the trimmer started.
const CHILD = `
const { readFileSync, readdirSync } = require('node:fs');
const addon = require(${JSON.stringify(addonPath)});
const anon = () => Number(/RssAnon:\\s+(\\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))[1]) * 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const niceOf = (tid) => {
  const stat = readFileSync('/proc/self/task/' + tid + '/stat', 'utf8');
  return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19 - 3]);
};
(async () => {
  let held = [];
  for (let i = 0; i < 12800; i++) held.push(Buffer.allocUnsafeSlow(8192).fill(1));
  const last = held[held.length - 1];
  held = null;
  for (let i = 0; i < 3; i++) { globalThis.gc(); await sleep(100); }
  const freed = anon();
  const tasksBefore = new Set(readdirSync('/proc/self/task'));
  const first = addon.startMallocTrimmer(50);
  const second = addon.startMallocTrimmer(50);
  await sleep(600);
  const trimmer = readdirSync('/proc/self/task').filter((t) => !tasksBefore.has(t));
  console.log(JSON.stringify({
    freed, trimmed: anon(), first, second, trims: addon.mallocTrims(),
    newThreads: trimmer.map(niceOf), mainNice: niceOf(process.pid), kept: last.length,
  }));
})();
`;

describe('malloc trimmer', () => {
  it("gives freed heap memory back to the kernel, from one thread per process at its starter's priority", async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ['--expose-gc', '-e', CHILD], {
      timeout: 30_000,
    });
    const r = JSON.parse(stdout);
    expect(r.first).toBe('started');
    expect(r.second).toBe('running');
    expect(r.newThreads).toEqual([r.mainNice]);
    // Every 50 ms for 600 ms; the first trims gave the freed pages back.
    expect(r.trims[0]).toBeGreaterThanOrEqual(5);
    expect(r.trims[1]).toBeGreaterThanOrEqual(1);
    expect(r.freed - r.trimmed).toBeGreaterThan(80 * MIB);
  });

  it('refuses an interval outside [10 ms, 1 day] naming its code', () => {
    for (const bad of [0, 9, 86_400_001, 1.5, Number.NaN]) {
      expect(() => shmAddon().startMallocTrimmer(bad)).toThrow(
        expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' }),
      );
    }
  });
});
