// Chat templates rendered as transformers' apply_chat_template renders them (and so vLLM's chat
// routes and /tokenize): the template from tokenizer_config.json (a string, or named templates of
// which "tool_use" is taken when tools are given) or chat_template.jinja, with `messages`, `tools`,
// `add_generation_prompt`, the special tokens' texts and the caller's chat_template_kwargs in scope.
// Rendered by @huggingface/jinja, the Jinja of transformers.js, parsed once per tokenizer.
import { Template } from '@huggingface/jinja';
import { RS_ERR_TOKENIZER_TEMPLATE } from './errors.js';

/** A chat message as OpenAI's API and the templates take it. */
export interface ChatMessage {
  role: string;
  /** A string, or content parts of which the text parts are kept (joined by newlines, as vLLM does). */
  content?: string | readonly ChatContentPart[] | null;
  [field: string]: unknown;
}

export interface ChatContentPart {
  type: string;
  text?: string;
  [field: string]: unknown;
}

export interface ChatTemplateOptions {
  /** Tool definitions (OpenAI's `tools`), rendered by the template. */
  tools?: readonly unknown[] | null;
  /** End with the assistant turn's opening (default true, as vLLM's chat routes). */
  addGenerationPrompt?: boolean;
  /**
   * Leave the last message open for the model to continue (no end-of-turn after it, no generation
   * prompt), as transformers' continue_final_message does; not with addGenerationPrompt.
   */
  continueFinalMessage?: boolean;
  /** Extra template variables (`enable_thinking`, ...), vLLM's chat_template_kwargs. */
  chatTemplateKwargs?: Readonly<Record<string, unknown>> | null;
}

/** The template source as tokenizer_config.json may hold it. */
export type ChatTemplateSource = string | readonly { name: string; template: string }[];

export class ChatTemplate {
  readonly #default: Template | null;
  readonly #toolUse: Template | null;
  /** Special tokens' texts (`bos_token`, `eos_token`, ...) in scope of every render. */
  readonly #specialTexts: Readonly<Record<string, string>>;

  constructor(source: ChatTemplateSource, specialTexts: Readonly<Record<string, string>>) {
    const named = typeof source === 'string' ? [{ name: 'default', template: source }] : source;
    const find = (name: string): Template | null => {
      const t = named.find((n) => n.name === name);
      return t === undefined ? null : compile(t.template, name);
    };
    this.#default = find('default');
    this.#toolUse = find('tool_use');
    this.#specialTexts = specialTexts;
  }

  render(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): string {
    const tools = opts.tools ?? null;
    const template = (tools !== null && this.#toolUse) || this.#default || this.#toolUse;
    if (template === null)
      throw new RS_ERR_TOKENIZER_TEMPLATE('the tokenizer has no default chat template');
    const flat = messages.map(flattenContent);
    const continueFinal = opts.continueFinalMessage ?? false;
    let text: string;
    try {
      text = template.render({
        ...this.#specialTexts,
        ...(opts.chatTemplateKwargs ?? {}),
        messages: flat,
        tools,
        add_generation_prompt: continueFinal ? false : (opts.addGenerationPrompt ?? true),
      });
    } catch (err) {
      throw new RS_ERR_TOKENIZER_TEMPLATE((err as Error).message);
    }
    return continueFinal ? cutAfterFinalMessage(text, flat[flat.length - 1]) : text;
  }
}

function compile(text: string, name: string): Template {
  try {
    return new Template(text);
  } catch (err) {
    throw new RS_ERR_TOKENIZER_TEMPLATE(`chat template "${name}": ${(err as Error).message}`);
  }
}

/** The rendered text up to the end of the last message's content (what the model continues). */
function cutAfterFinalMessage(text: string, last: ChatMessage | undefined): string {
  const content = typeof last?.content === 'string' ? last.content.trim() : '';
  const at = content === '' ? -1 : text.lastIndexOf(content);
  if (at < 0) {
    throw new RS_ERR_TOKENIZER_TEMPLATE(
      'continue_final_message: the last message is not in the rendered prompt',
    );
  }
  return text.slice(0, at + content.length);
}

/** Content parts to one string (text parts joined by "\n"), the form string-content templates take. */
function flattenContent(m: ChatMessage): ChatMessage {
  if (!Array.isArray(m.content)) return m;
  const parts = m.content as readonly ChatContentPart[];
  const text = parts.flatMap((p) =>
    p.type === 'text' && typeof p.text === 'string' ? [p.text] : [],
  );
  return { ...m, content: text.join('\n') };
}
