/**
 * P/D with a preset of more than 256 experts (tiny-wide, 384): routing rows travel as uint16 from
 * both instances, and the router's merge keeps them uint16 and identical to a colocated run.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { generate } from '../../src/client/index.js';
import { startCluster } from './harness.js';
import { body, differences, firstChoice, promptOf, startRouter } from './pd-helpers.js';

const COMMON = ['--model', 'tiny-wide', '--max-speed', '--max-model-len', '8192'];

describe('ringserve router with more than 256 experts', () => {
  it('merges uint16 routing rows, identical to colocated', async () => {
    const [colocated, prefill, decode] = await Promise.all([
      startCluster(COMMON),
      startCluster([...COMMON, '--role', 'prefill']),
      startCluster([...COMMON, '--role', 'decode']),
    ]);
    const router = await startRouter([prefill.url], [decode.url]);
    const salt = randomUUID();
    for (const [i, length] of [64, 900, 3000].entries()) {
      const prompt = promptOf(length, 70 + i);
      const b = body(prompt, 3000 + i, `${salt}-${i}`);
      const [routed, colo] = await Promise.all([
        generate(router.url, b),
        generate(colocated.url, b),
      ]);
      const r = firstChoice(routed).routedExperts;
      expect(r?.data).toBeInstanceOf(Uint16Array);
      expect(Math.max(...(r?.data ?? []))).toBeGreaterThan(255);
      expect(differences(firstChoice(routed), firstChoice(colo), prompt.length)).toEqual([]);
    }
  });
});
