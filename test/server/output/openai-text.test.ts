import { describe, expect, it } from 'vitest';
import { SseParser } from '../../../src/client/stream.js';
import { SlotEventList } from '../../../src/server/output-worker/slot-events.js';
import { StreamEncoder } from '../../../src/server/output-worker/stream-encoder.js';
import { ResponsePacker } from '../../../src/server/packer/pack.js';
import { type TokenByteSource, VocabTable } from '../../../src/server/shared/detokenizer.js';
import type { PackTask } from '../../../src/server/shared/pack-task.js';
import { ResponseFormCode, type SlotMetaFields } from '../../../src/server/shared/slot-meta.js';
import { TokenBytesTable } from '../../../src/tokenizer/token-bytes.js';
import { FinishReason } from '../../../src/wire/types.js';
import { type Harness, makeHarness, metaFields } from './harness.js';

// The OpenAI answers' text as the output side builds it: detokenized into the text column by the
// scatter, cut at a stop string (across token boundaries, inside a token), held back while
// streaming, and the same text whether streamed or packed whole.

/** Ids 0..255 are raw bytes (so a character can be split over tokens); 256.. are these words. */
const WORDS = ['hello', ' wor', 'ld!', ' end', 'é', '<eos>'];
const EOS = 256 + WORDS.length - 1;
function vocab(): TokenByteSource {
  const tokens: (string | Uint8Array)[] = [];
  for (let b = 0; b < 256; b++) tokens.push(Uint8Array.of(b));
  tokens.push(...WORDS.slice(0, -1), '');
  return new VocabTable(tokens);
}
const W = (word: string): number => 256 + WORDS.indexOf(word);
const B = (ch: string): number => ch.charCodeAt(0);

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
  const enc = new StreamEncoder(h.view, new SlotEventList(h.acc.slots), vocab());
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
  const packer = new ResponsePacker(h.meta.sab, h.acc.sab, h.arena.sab, vocab());
  return JSON.parse(packer.pack(task(form)).toString('utf8')) as Record<string, unknown>;
}

function choice0(res: Record<string, unknown>): Record<string, unknown> {
  return (res.choices as Record<string, unknown>[])[0]!;
}

describe('OpenAI text on the output side', () => {
  it('cuts the text before a stop string that spans two tokens, or after it when asked', () => {
    for (const include of [false, true]) {
      const h = makeHarness({ tokens: vocab() });
      h.meta.write(0, 1, openAiMeta({ stop: ['o w'], includeStopStrInOutput: include }));
      run(h, [W('hello'), W(' wor'), W('ld!')], FinishReason.Length, false);
      const c = choice0(packed(h));
      expect(c.text).toBe(include ? 'hello w' : 'hell');
      expect(c.finish_reason).toBe('stop');
      expect(c.stop_reason).toBe('o w');
      // Both tokens that reached the stop string were generated and are counted.
      expect(h.acc.completionTokens(0)).toBe(2);
    }
  });

  it('leaves the EOS token out of the text but counts it', () => {
    const h = makeHarness({ tokens: vocab() });
    h.meta.write(0, 1, openAiMeta());
    run(h, [W('hello'), W(' end'), EOS], FinishReason.Stop, false);
    const res = packed(h);
    expect(choice0(res).text).toBe('hello end');
    expect(res.usage).toEqual({
      prompt_tokens: 4,
      completion_tokens: 3,
      total_tokens: 7,
      prompt_tokens_details: null,
    });
  });

  it('streams the same text it packs, holding back a split character and a possible stop string', () => {
    const tokens = [W('hello'), 0xc3, 0xa9, W(' wor'), B('x'), W('ld!'), W(' end'), B('Q')];
    const stop = ['ld! e'];
    for (const include of [false, true]) {
      const h = makeHarness({ tokens: vocab() });
      h.meta.write(0, 1, openAiMeta({ stream: true, stop, includeStopStrInOutput: include }));
      const { deltas, events } = run(h, tokens, FinishReason.Length, true);
      const whole = makeHarness({ tokens: vocab() });
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
    const h = makeHarness({ tokens: vocab() });
    h.meta.write(0, 1, openAiMeta());
    run(h, [W('hello'), 0xc3, 0xa9, W(' end')], FinishReason.Length, false);
    const lp = choice0(packed(h)).logprobs as Record<string, unknown[]>;
    expect(lp.tokens).toEqual(['hello', '\ufffd', '\ufffd', ' end']);
    expect(lp.token_logprobs).toEqual([-0.5, -0.5, -0.5, -0.5]);
    expect(lp.text_offset).toEqual([0, 5, 6, 7]);
    expect(lp.top_logprobs).toEqual([
      { hello: -0.5 },
      { '\ufffd': -0.5 },
      { '\ufffd': -0.5 },
      { ' end': -0.5 },
    ]);
  });

  it('writes a chat message and chat logprobs with bytes', () => {
    const h = makeHarness({ tokens: vocab() });
    h.meta.write(0, 1, openAiMeta({ form: ResponseFormCode.Chat }));
    run(h, [W('é'), W(' end')], FinishReason.Length, false);
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

  it('streams chat as a role chunk, content deltas, then usage and [DONE]', () => {
    const h = makeHarness({ tokens: vocab() });
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
    const { events } = run(h, [W('hello'), W(' end'), EOS], FinishReason.Stop, true);
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
      completion_tokens: 3,
      total_tokens: 7,
      prompt_tokens_details: null,
    });
  });

  it('writes special tokens into the text only with skip_special_tokens false', () => {
    const enc = (t: string) => new TextEncoder().encode(t);
    const table = TokenBytesTable.build([
      { id: 0, bytes: enc('a'), special: false },
      { id: 1, bytes: enc('<|sep|>'), special: true },
      { id: 2, bytes: enc('b'), special: false },
    ]);
    for (const keep of [false, true]) {
      const h = makeHarness({ tokens: table });
      h.meta.write(0, 1, openAiMeta({ keepSpecialTokens: keep, logprobs: false, topLogprobs: -1 }));
      for (const [i, token] of [0, 1, 2].entries()) {
        h.feed([{ slot: 0, gen: 1, token, finish: i === 2 ? FinishReason.Length : 0 }]);
      }
      const packer = new ResponsePacker(h.meta.sab, h.acc.sab, h.arena.sab, table);
      const res = JSON.parse(packer.pack(task('completion')).toString('utf8'));
      expect(choice0(res).text).toBe(keep ? 'a<|sep|>b' : 'ab');
    }
  });
});
