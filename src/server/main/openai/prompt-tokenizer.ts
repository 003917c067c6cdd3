/**
 * What the OpenAI routes need from a tokenizer, behind one small interface so the routes know
 * nothing of how it is done: text to ids (off the main thread for long prompts), a chat rendered
 * by the model's template to ids, and ids back to text (completions' echo of a token prompt).
 */
import type { ChatMessage } from '../../../protocol/openai-chat-request.js';

export interface ChatTemplateOptions {
  tools: readonly Readonly<Record<string, unknown>>[] | null;
  addGenerationPrompt: boolean;
  continueFinalMessage: boolean;
  chatTemplateKwargs: Readonly<Record<string, unknown>>;
  addSpecialTokens: boolean;
}

export interface PromptTokenizer {
  encode(text: string, addSpecialTokens: boolean): Promise<Int32Array>;
  encodeChat(messages: readonly ChatMessage[], options: ChatTemplateOptions): Promise<Int32Array>;
  decode(ids: Int32Array): Promise<string>;
}
