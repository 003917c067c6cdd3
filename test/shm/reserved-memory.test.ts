// Reserved memory from the addon: a SharedArrayBuffer whose pages can be given back (discard),
// and an ArrayBuffer alias of a SharedArrayBuffer's bytes.
import { Worker } from 'node:worker_threads';
import { describe, expect, it } from 'vitest';
import { shmAddon } from '../../src/shm/native.js';

const addon = shmAddon();
const PAGE = 4096;
const bad = expect.objectContaining({ code: 'RS_ERR_SHM_BAD_ARGUMENT' });

describe('reserve / discard', () => {
  it('reserves a zero-filled SharedArrayBuffer far larger than it touches', () => {
    const sab = addon.reserve(1024 * 1024 * 1024);
    expect(sab).toBeInstanceOf(SharedArrayBuffer);
    expect(sab.byteLength).toBe(1024 * 1024 * 1024);
    const bytes = new Uint8Array(sab);
    expect(bytes[0]).toBe(0);
    expect(bytes[sab.byteLength - 1]).toBe(0);
    bytes[123_456] = 7;
    expect(Atomics.add(new Int32Array(sab), 10, 5)).toBe(0);
  });

  it('gives back the whole pages inside a range: they read as zeros, the rest is kept', () => {
    const sab = addon.reserve(16 * PAGE);
    const bytes = new Uint8Array(sab);
    bytes.fill(9);
    // [PAGE + 100, 5 * PAGE + 100) holds whole pages 2, 3 and 4 only.
    expect(addon.discard(sab, PAGE + 100, 4 * PAGE)).toBe(3 * PAGE);
    expect(bytes[2 * PAGE - 1]).toBe(9);
    expect(bytes.subarray(2 * PAGE, 5 * PAGE).every((b) => b === 0)).toBe(true);
    expect(bytes[5 * PAGE]).toBe(9);
    expect(addon.discard(sab, 100, 200)).toBe(0);
    expect(addon.discard(sab, 0, 0)).toBe(0);
    // A discarded page is ordinary memory again on the next write.
    bytes[3 * PAGE] = 1;
    expect(bytes[3 * PAGE]).toBe(1);
  });

  it('a worker thread sees the same bytes, and the zeros after a discard', async () => {
    const sab = addon.reserve(4 * PAGE);
    const bytes = new Uint8Array(sab);
    bytes.fill(3);
    const worker = new Worker(
      `const { parentPort, workerData } = require('node:worker_threads');
       const view = new Uint8Array(workerData.sab);
       parentPort.on('message', (at) => parentPort.postMessage(view[at]));`,
      { eval: true, workerData: { sab } },
    );
    const ask = (at: number): Promise<number> =>
      new Promise((resolve) => {
        worker.once('message', resolve);
        worker.postMessage(at);
      });
    try {
      expect(await ask(PAGE)).toBe(3);
      addon.discard(sab, 0, 4 * PAGE);
      expect(await ask(PAGE)).toBe(0);
    } finally {
      await worker.terminate();
    }
  });

  it('refuses buffers it did not reserve, ranges outside the buffer, bad sizes', () => {
    const sab = addon.reserve(4 * PAGE);
    expect(() => addon.discard(new SharedArrayBuffer(4 * PAGE), 0, PAGE)).toThrow(bad);
    expect(() => addon.discard(sab, 0, 5 * PAGE)).toThrow(bad);
    expect(() => addon.discard(sab, -1, PAGE)).toThrow(bad);
    expect(() => addon.discard(sab, 0.5, PAGE)).toThrow(bad);
    expect(() => addon.reserve(0)).toThrow(bad);
    expect(() => addon.reserve(1.5)).toThrow(bad);
  });
});

describe('arrayBufferOf', () => {
  it('is an ArrayBuffer over the same bytes, not a copy', () => {
    const sab = addon.reserve(2 * PAGE);
    const alias = addon.arrayBufferOf(sab);
    expect(alias).toBeInstanceOf(ArrayBuffer);
    expect(alias.byteLength).toBe(sab.byteLength);
    new Uint8Array(sab)[100] = 42;
    expect(new Uint8Array(alias)[100]).toBe(42);
    const view = Buffer.from(alias, 100, 4);
    view[1] = 43;
    expect(new Uint8Array(sab)[101]).toBe(43);
    expect(view.buffer).toBeInstanceOf(ArrayBuffer);
    expect(() => addon.arrayBufferOf(new ArrayBuffer(8) as unknown as SharedArrayBuffer)).toThrow(
      bad,
    );
  });
});
