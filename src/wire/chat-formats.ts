/**
 * The chat output formats ringserve parses (src/protocol/chat-parse) and the simulator writes
 * (src/server/main/openai/sim-answer.ts), named as vLLM's --reasoning-parser and --tool-call-parser
 * name them. Here, beside the other names the configuration and the API tier share.
 */
export type ReasoningParserName = 'qwen3' | 'glm45';
export type ToolParserName = 'hermes' | 'glm45';
export const REASONING_PARSERS: readonly ReasoningParserName[] = ['qwen3', 'glm45'];
export const TOOL_PARSERS: readonly ToolParserName[] = ['hermes', 'glm45'];
