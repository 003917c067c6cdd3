/**
 * Which of the three answer forms a generate request gets (docs/contract.md): msgpack when the client
 * accepts it, else the body's `packed` switch, else the server's --generate-format.
 */
import type { ResponseForm } from '../../../protocol/generate-response.js';

export function responseForm(
  accept: string | undefined,
  packed: boolean | null,
  generateFormat: 'packed' | 'legacy',
): ResponseForm {
  if (accept?.includes('application/msgpack')) return 'msgpack';
  return (packed ?? generateFormat === 'packed') ? 'packed' : 'legacy';
}
