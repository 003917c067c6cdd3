/**
 * Opens MirrorFrontend <-> MirrorEngine pairs over loopback for the tests, and closes every one
 * of them (call `closePairs` in afterEach: it runs when a test fails too).
 */

import { MirrorEngine, type MirrorEngineOptions } from './engine.js';
import type { Era } from './eras.js';
import { MirrorFrontend, type MirrorFrontendOptions } from './frontend.js';

export interface Pair {
  engine: MirrorEngine;
  frontend: MirrorFrontend;
}

const opened: Pair[] = [];

/** A connected pair: the handshake done both ways. The engine steps every 2 ms unless told. */
export async function openPair(
  era: Era,
  options: Partial<MirrorEngineOptions> = {},
  frontendOptions: MirrorFrontendOptions = { era },
): Promise<Pair> {
  const p = await openUnconnected(era, options, frontendOptions);
  await Promise.all([p.engine.connect(p.frontend.handshakeAddress), p.frontend.runHandshake()]);
  return p;
}

/** Both ends, bound and built but not yet connected: for tests of the handshake itself. */
export async function openUnconnected(
  era: Era,
  options: Partial<MirrorEngineOptions> = {},
  frontendOptions: MirrorFrontendOptions = { era },
): Promise<Pair> {
  const frontend = await MirrorFrontend.open(frontendOptions);
  const engine = new MirrorEngine({ era, stepMs: 2, ...options });
  const p = { engine, frontend };
  opened.push(p);
  return p;
}

export function closePairs(): void {
  for (const { engine, frontend } of opened.splice(0)) {
    engine.close();
    frontend.close();
  }
}
