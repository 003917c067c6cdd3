import { randomBytes } from 'node:crypto';
import type { LayoutParams } from '../../src/shm/layout.js';
import { createRegion, type Region, unlinkRegion } from '../../src/shm/region.js';

const made: Region[] = [];

/**
 * A fresh shared region for one test, named so that no other run (or worktree) collides with it;
 * unlinkTestRegions(), in afterEach, removes every one made.
 */
export function testRegion(params: Partial<LayoutParams>): Region {
  const name = `ringserve-test-${process.pid}-${randomBytes(4).toString('hex')}`;
  const region = createRegion(name, params);
  made.push(region);
  return region;
}

export function unlinkTestRegions(): void {
  for (const region of made.splice(0)) unlinkRegion(region.name);
}
