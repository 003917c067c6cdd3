/**
 * `Authorization: Bearer <key>` (RFC 6750), as the API servers and the router check it. Keys are
 * compared in constant time, over their SHA-256 so that unequal lengths take the same time too.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

/** What a configured key is compared as. */
export function keyDigest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

/** The key in an `Authorization: Bearer <key>` header (scheme case-insensitive, RFC 7235), or null. */
export function bearerKey(header: string | string[] | undefined): string | null {
  if (typeof header !== 'string' || header.length < 7) return null;
  if (header.slice(0, 7).toLowerCase() !== 'bearer ') return null;
  return header.slice(7).trim();
}

/** Whether `header` carries the key whose digest is `expected`. */
export function bearerMatches(header: string | string[] | undefined, expected: Buffer): boolean {
  const key = bearerKey(header);
  return key !== null && timingSafeEqual(keyDigest(key), expected);
}
