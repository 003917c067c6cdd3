/**
 * Session affinity by rendezvous (highest-random-weight) hashing: a session goes to the eligible
 * instance whose hash with the session's key scores highest. Removing (or losing to a failed health
 * check) an instance moves only the sessions it held, each to its next choice; adding one moves
 * to it only the sessions it now outscores, about 1/(n+1) of them, and takes none from elsewhere
 * (Thaler & Ravishankar, 1998). With a handful of instances the O(n) scan per request is cheaper
 * than a hash ring's lookup plus its virtual nodes, and needs no rebuilding on a membership change.
 * A session whose instance comes back healthy returns to it: its prefix cache is there.
 */
import type { IncomingHttpHeaders } from 'node:http';

/** The request header naming a session (as SGLang's and llm-d's routers read it). */
export const SESSION_HEADER = 'x-session-id';
/** Longer keys are refused as no key at all: they cost a hash per instance per request. */
const MAX_SESSION_KEY = 1024;

/** The X-Session-ID of a request, or undefined when it has none (or an empty or oversized one). */
export function sessionKey(headers: IncomingHttpHeaders): string | undefined {
  const v = headers[SESSION_HEADER];
  const key = Array.isArray(v) ? v[0] : v;
  return key === undefined || key === '' || key.length > MAX_SESSION_KEY ? undefined : key;
}

/** FNV-1a over UTF-16 code units, then murmur3's finalizer: FNV's low bits alone mix poorly. */
export function hashKey(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 0x01000193);
  return mix32(h);
}

/** The rendezvous weight of an instance (its `hashKey(url)`) for a session (its `hashKey(key)`). */
export function rendezvousScore(sessionHash: number, instanceHash: number): number {
  // Multiplying before the xor keeps score(a, b) and score(b, a) apart, and the finalizer makes
  // the order of two instances for a key independent of how their own hashes compare.
  return mix32(Math.imul(sessionHash, 0x9e3779b1) ^ instanceHash);
}

/** murmur3's fmix32, as an unsigned 32-bit number. */
function mix32(x: number): number {
  let h = x;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
