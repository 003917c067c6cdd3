import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { BenchChild } from '../../bench/loadtest/child.js';

const EARLY = fileURLToPath(new URL('../fixtures/bench-child-early.mjs', import.meta.url));

describe('BenchChild', () => {
  it("keeps a 'ready' that arrived before the parent waited for it", async () => {
    const child = new BenchChild(EARLY, 'early helper');
    try {
      // IPC keeps order: once the progress has arrived, so has the 'ready' sent before it.
      await new Promise<void>((resolve) => child.onProgress(() => resolve()));
      await expect(child.next('ready', 1_000)).resolves.toEqual({ type: 'ready' });
      // Taken once: a second wait is for a second message.
      await expect(child.next('ready', 200)).rejects.toThrow(/RS_ERR_BENCH_TIMEOUT|did not happen/);
    } finally {
      await child.stop();
    }
  });
});
