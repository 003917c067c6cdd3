import { describe, expect, it } from 'vitest';
import { SseParser } from '../../../src/client/stream.js';
import type { PackTask } from '../../../src/server/cross-thread/pack-task.js';
import { ResponsePacker } from '../../../src/server/cross-thread/response-packer.js';
import {
  ResponseFormCode,
  type SlotMetaFields,
} from '../../../src/server/cross-thread/slot-meta.js';
import { SlotEventList } from '../../../src/server/output-worker/slot-events.js';
import { StreamEncoder } from '../../../src/server/output-worker/stream-encoder.js';
import { tokenizerForModel } from '../../../src/tokenizer/presets.js';
import { FinishReason } from '../../../src/wire/types.js';
import { TINY_IM_END, tinyId, tinyIds } from '../tiny-tokens.js';
import { type Harness, makeHarness, metaFields } from './harness.js';

// The OpenAI answers' text as the output side builds it: detokenized into the text column by the
// scatter, cut at a stop string (across token boundaries, inside a token), held back while
// streaming, and the same text whether streamed or packed whole. The text is the committed tiny
// tokenizer's (the harness's), whose non-ASCII characters are always split over byte tokens.

function openAiMeta(o: Partial<SlotMetaFields> = {}): SlotMetaFields {
  return metaFields({
    samplingMask: false,
    routedExperts: false,
    logprobs: true,
    text: true,
    form: ResponseFormCode.Completion,
    topLogprobs: 0,
    ...o,
  });
}

function task(form: 'completion' | 'chat'): PackTask {
  return {
    slots: [0],
    generations: [1],
    form,
    requestId: 'r1',
    model: 'm',
    created: 1,
    openai: {
      n: 1,
      promptLens: [4],
      echo: null,
      promptTokenIds: null,
      topLogprobs: 0,
      returnTokenIds: false,
    },
  };
}

/** Feeds `tokens` one per step (the last with `finish`), streaming each pass; returns the SSE text. */
function run(
  h: Harness,
  tokens: readonly number[],
  finish: number,
  stream: boolean,
): { events: Record<string, unknown>[]; deltas: string[] } {
  const enc = new StreamEncoder(h.view, new SlotEventList(h.acc.slots), h.tokens);
  enc.setHeader(0, { generation: 1, requestId: 'r1', model: 'm', created: 1 });
  const events: Record<string, unknown>[] = [];
  tokens.forEach((token, i) => {
    const last = i === tokens.length - 1;
    h.feed([{ slot: 0, gen: 1, token, logprob: -0.5, finish: last ? finish : 0 }]);
    if (!stream) return;
    const out = enc.encode(h.scatter.streamed, () => {});
    if (out === null) return;
    for (const e of new SseParser().push(new Uint8Array(out.bytes))) {
      if (e.kind === 'data') events.push(e.json as Record<string, unknown>);
    }
  });
  const deltas = events.flatMap((e) => {
    const choices = e.choices as { text?: string; delta?: { content?: string } }[];
    return choices.map((c) => c.text ?? c.delta?.content ?? '');
  });
  return { events, deltas };
}

function packed(h: Harness, form: 'completion' | 'chat' = 'completion'): Record<string, unknown> {
  const packer = new ResponsePacker(h.meta.sab, h.acc.sab, h.arena.sab, h.tokens);
  return JSON.parse(packer.pack(task(form)).toString('utf8')) as Record<string, unknown>;
}

function choice0(res: Record<string, unknown>): Record<string, unknown> {
  return (res.choices as Record<string, unknown>[])[0]!;
}

describe('OpenAI text on the output side', () => {
  it('cuts the text before a stop string that spans two tokens, or after it when asked', () => {
    // 'hel' 'lo' ' w' 'or' 'l' 'd' '!': the stop string ends in the third token.
    const tokens = tinyIds('hello world!');
    expect(tokens.slice(0, 3)).toEqual([tinyId('hel'), tinyId('lo'), tinyId(' w')]);
    for (const include of [false, true]) {
      const h = makeHarness();
      h.meta.write(0, 1, openAiMeta({ stop: ['o w'], includeStopStrInOutput: include }));
      run(h, tokens, FinishReason.Length, false);
      const c = choice0(packed(h));
      expect(c.text).toBe(include ? 'hello w' : 'hell');
      expect(c.finish_reason).toBe('stop');
      expect(c.stop_reason).toBe('o w');
      // The tokens up to the one that completed the stop string were generated and are counted.
      expect(h.acc.completionTokens(0)).toBe(3);
    }
  });

  it('leaves the EOS token out of the text but counts it', () => {
    const h = makeHarness();
    h.meta.write(0, 1, openAiMeta());
    const tokens = [...tinyIds('hello end'), TINY_IM_END];
    run(h, tokens, FinishReason.Stop, false);
    const res = packed(h);
    expect(choice0(res).text).toBe('hello end');
    expect(res.usage).toEqual({
      prompt_tokens: 4,
      completion_tokens: tokens.length,
      total_tokens: 4 + tokens.length,
      prompt_tokens_details: null,
    });
  });

  it('streams the same text it packs, holding back a split character and a possible stop string', () => {
    // 'é' is two byte tokens; the stop string ends inside the token 'end'.
    const tokens = ['hello', 'é', ' wor', 'x', 'ld!', ' end', 'Q'].flatMap(tinyIds);
    const stop = ['ld! e'];
    for (const include of [false, true]) {
      const h = makeHarness();
      h.meta.write(0, 1, openAiMeta({ stream: true, stop, includeStopStrInOutput: include }));
      const { deltas, events } = run(h, tokens, FinishReason.Length, true);
      const whole = makeHarness();
      whole.meta.write(0, 1, openAiMeta({ stop, includeStopStrInOutput: include }));
      run(whole, tokens, FinishReason.Length, false);
      const text = choice0(packed(whole)).text as string;
      expect(text).toBe(include ? 'helloé worxld! e' : 'helloé worx');
      expect(deltas.join('')).toBe(text);
      // No delta ends in half a character: every one decodes without U+FFFD.
      for (const d of deltas) expect(d).not.toContain('\ufffd');
      const last = (events.at(-1)!.choices as Record<string, unknown>[])[0]!;
      expect(last.finish_reason).toBe('stop');
      expect(last.stop_reason).toBe('ld! e');
    }
  });

  it('writes completions logprobs with token text, offsets and the sampled token as top entry', () => {
    const h = makeHarness();
    h.meta.write(0, 1, openAiMeta());
    // A split character's tokens show U+FFFD each; the EOS token, left out of the text, shows as
    // itself (vLLM decodes a logprob's token without skipping special tokens).
    const tokens = [tinyId(' The'), ...tinyIds('é'), tinyId(' answer'), TINY_IM_END];
    run(h, tokens, FinishReason.Stop, false);
    const c = choice0(packed(h));
    expect(c.text).toBe(' Theé answer');
    const lp = c.logprobs as Record<string, unknown[]>;
    expect(lp.tokens).toEqual([' The', '\ufffd', '\ufffd', ' answer', '<|im_end|>']);
    expect(lp.token_logprobs).toEqual([-0.5, -0.5, -0.5, -0.5, -0.5]);
    expect(lp.text_offset).toEqual([0, 4, 5, 6, 13]);
    expect(lp.top_logprobs).toEqual([
      { ' The': -0.5 },
      { '\ufffd': -0.5 },
      { '\ufffd': -0.5 },
      { ' answer': -0.5 },
      { '<|im_end|>': -0.5 },
    ]);
  });

  it('writes a chat message and chat logprobs with bytes', async () => {
    // A token that is a whole character of several bytes: the tiny vocabulary has none, Qwen3's
    // (the other committed preset) has 'é'.
    const qwen3 = await tokenizerForModel('qwen3-30b-a3b');
    const ids = (text: string) => Array.from(qwen3.encode(text, { addSpecialTokens: false }));
    expect(ids('é')).toHaveLength(1);
    const h = makeHarness({ tokens: qwen3.bytes });
    h.meta.write(0, 1, openAiMeta({ form: ResponseFormCode.Chat }));
    run(h, [...ids('é'), ...ids(' end')], FinishReason.Length, false);
    const res = packed(h, 'chat');
    expect(res.object).toBe('chat.completion');
    expect(String(res.id).startsWith('chatcmpl-')).toBe(true);
    const c = choice0(res);
    expect((c.message as Record<string, unknown>).content).toBe('é end');
    expect((c.message as Record<string, unknown>).role).toBe('assistant');
    const content = (c.logprobs as { content: Record<string, unknown>[] }).content;
    expect(content[0]).toEqual({
      token: 'é',
      logprob: -0.5,
      bytes: [0xc3, 0xa9],
      top_logprobs: [],
    });
    expect(c.finish_reason).toBe('length');
  });

  it("writes a split character's chat logprob as U+FFFD and its bytes", () => {
    const h = makeHarness();
    h.meta.write(0, 1, openAiMeta({ form: ResponseFormCode.Chat }));
    run(h, [tinyId(' The'), ...tinyIds('é')], FinishReason.Length, false);
    const c = choice0(packed(h, 'chat'));
    expect((c.message as Record<string, unknown>).content).toBe(' Theé');
    const content = (c.logprobs as { content: Record<string, unknown>[] }).content;
    expect(content.map((e) => [e.token, e.bytes])).toEqual([
      [' The', [0x20, 0x54, 0x68, 0x65]],
      ['\ufffd', [0xef, 0xbf, 0xbd]],
      ['\ufffd', [0xef, 0xbf, 0xbd]],
    ]);
  });

  it('streams chat as a role chunk, content deltas, then usage and [DONE]', () => {
    const h = makeHarness();
    h.meta.write(
      0,
      1,
      openAiMeta({
        stream: true,
        form: ResponseFormCode.Chat,
        logprobs: false,
        topLogprobs: -1,
        includeUsage: true,
      }),
    );
    const tokens = [...tinyIds('hello end'), TINY_IM_END];
    const { events } = run(h, tokens, FinishReason.Stop, true);
    expect(events[0]).toEqual({
      id: 'chatcmpl-r1',
      object: 'chat.completion.chunk',
      created: 1,
      model: 'm',
      choices: [
        {
          index: 0,
          delta: { role: 'assistant', content: '' },
          logprobs: null,
          finish_reason: null,
        },
      ],
    });
    const contents = events
      .slice(1, -1)
      .map((e) => (e.choices as { delta: { content: string } }[])[0]!.delta.content);
    expect(contents.join('')).toBe('hello end');
    const usage = events.at(-1)!;
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toEqual({
      prompt_tokens: 4,
      completion_tokens: tokens.length,
      total_tokens: 4 + tokens.length,
      prompt_tokens_details: null,
    });
  });

  it('writes special tokens into the text only with skip_special_tokens false', () => {
    const tokens = [tinyId('a'), tinyId('<|im_start|>'), tinyId('b')];
    for (const keep of [false, true]) {
      const h = makeHarness();
      h.meta.write(0, 1, openAiMeta({ keepSpecialTokens: keep, logprobs: false, topLogprobs: -1 }));
      for (const [i, token] of tokens.entries()) {
        h.feed([{ slot: 0, gen: 1, token, finish: i === 2 ? FinishReason.Length : 0 }]);
      }
      expect(choice0(packed(h)).text).toBe(keep ? 'a<|im_start|>b' : 'ab');
    }
  });
});
