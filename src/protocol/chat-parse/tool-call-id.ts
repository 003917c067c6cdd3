import { randomUUID } from 'node:crypto';

/** A tool call's id as vLLM makes it (`make_tool_call_id`): `chatcmpl-tool-` and 32 random hex digits. */
export function newToolCallId(): string {
  return `chatcmpl-tool-${randomUUID().replaceAll('-', '')}`;
}
