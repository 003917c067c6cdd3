/**
 * The property every fuzzed answer must have: no 5xx, and a 4xx carries the contract's error body
 * `{"error": {"message", "type", "param", "code"}}` with `code` equal to the status. Returns what is
 * wrong, or null.
 */
export function answerProblem(status: number, contentType: string, text: string): string | null {
  if (status >= 500) return `HTTP ${status}: ${text.slice(0, 300)}`;
  if (status < 400) return null;
  if (!contentType.includes('application/json')) {
    return `HTTP ${status} with Content-Type ${contentType || '(none)'}: ${text.slice(0, 200)}`;
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return `HTTP ${status} body is not JSON: ${text.slice(0, 200)}`;
  }
  const error = (body as { error?: Record<string, unknown> } | null)?.error;
  if (
    typeof error !== 'object' ||
    error === null ||
    typeof error.message !== 'string' ||
    typeof error.type !== 'string' ||
    !(error.param === null || typeof error.param === 'string') ||
    error.code !== status
  ) {
    return `HTTP ${status} without the contract's error body: ${text.slice(0, 300)}`;
  }
  return null;
}
