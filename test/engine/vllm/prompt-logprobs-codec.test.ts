/**
 * new_prompt_logprobs_tensors (vLLM's LogprobsTensors of torch tensors) between ringserve's codec
 * and the independent mirror, every layout, both ways: the dtypes vLLM's model runners send (int32
 * ids and ranks from the default one, int64 ids from Model Runner V2), inline and in aux frames,
 * the 3-field form of older vLLM and the 4-field one; and a tensor vLLM would not send fails its
 * output alone, naming the field.
 */
import { describe, expect, it } from 'vitest';
import {
  getVllmLayout,
  OutputRecord,
  OutputsEncoder,
  type OutputView,
  readOutputs,
} from '../../../src/engine/vllm/index.js';
import * as m from './mirror/codec.js';

/** What the reader saw of one output's prompt logprobs, copied out of the reused view. */
interface SeenPrompt {
  id: string;
  rows: number[][];
  logprobs: number[][];
  ranks: number[];
}

function seenPrompt(o: OutputView): SeenPrompt | null {
  if (!o.hasPromptLogprobs) return null;
  const w = o.promptWidth;
  const rows = Array.from({ length: o.promptPositions }, (_, r) =>
    Array.from(o.promptIds.subarray(r * w, (r + 1) * w)),
  );
  const logprobs = Array.from({ length: o.promptPositions }, (_, r) =>
    Array.from(o.promptLogprobs.subarray(r * w, (r + 1) * w)),
  );
  const ranks = Array.from(o.promptRanks.subarray(0, o.promptPositions));
  return { id: o.requestId(), rows, logprobs, ranks };
}

/** Rows of `n` positions, `w` entries each, distinct and exact in float32. */
function promptTensor(n: number, w: number, idsDtype: string): m.PromptLogprobs {
  return {
    tokenIds: Array.from({ length: n }, (_, r) => Array.from({ length: w }, (_, e) => r * 10 + e)),
    logprobs: Array.from({ length: n }, (_, r) =>
      Array.from({ length: w }, (_, e) => -(r + e) / 8),
    ),
    ranks: Array.from({ length: n }, (_, r) => (r % 5) + 1),
    idsDtype,
    ranksDtype: idsDtype,
  };
}

/** Reads `frames`; every output's prompt logprobs, and every failure as [field, request id]. */
function read(era: m.Era, frames: Buffer[]) {
  const seen: (SeenPrompt | null)[] = [];
  const failed: [string | null, string][] = [];
  readOutputs(getVllmLayout(era), frames, {
    output: (o) => seen.push(seenPrompt(o)),
    outputFailed: (o, e) =>
      failed.push([(e as unknown as { param: string | null }).param, o.requestId()]),
  });
  return { seen, failed };
}

/** One EngineCoreOutput of `era` whose new_prompt_logprobs_tensors is `tensors` as given. */
function rawOutput(era: m.Era, id: string, tensors: unknown): unknown[] {
  const out: unknown[] = m.OUTPUT_FIELDS[era].map((f) => (f === 'num_nans_in_logits' ? 0 : null));
  out[0] = id;
  out[1] = [7];
  out[3] = tensors;
  return out;
}

function rawMessage(outputs: unknown[][], aux: Buffer[] = []): Buffer[] {
  return [m.pack([0, outputs, null, m.f64(1), null, null, null, null]), ...aux];
}

describe.each(m.ERAS)('layout %s', (era) => {
  it("reads the mirror's prompt logprobs: int32 inline, int64 in aux frames, zero rows", () => {
    const small = promptTensor(3, 2, 'int32');
    const big = promptTensor(40, 6, 'int64');
    const frames = m.encodeOutputs(era, {
      outputs: [
        { request_id: 'a', new_token_ids: [5], new_prompt_logprobs_tensors: small },
        { request_id: 'b', new_token_ids: [6], new_prompt_logprobs_tensors: big },
        {
          request_id: 'c',
          new_token_ids: [7],
          new_prompt_logprobs_tensors: promptTensor(0, 3, 'int32'),
        },
        { request_id: 'd', new_token_ids: [8] },
      ],
    });
    expect(frames.length).toBeGreaterThan(1);
    const { seen, failed } = read(era, frames);
    expect(failed).toEqual([]);
    expect(seen).toEqual([
      { id: 'a', rows: small.tokenIds, logprobs: small.logprobs, ranks: small.ranks },
      { id: 'b', rows: big.tokenIds, logprobs: big.logprobs, ranks: big.ranks },
      { id: 'c', rows: [], logprobs: [], ranks: [] },
      null,
    ]);
  });

  it('reads the 3-field LogprobsTensors of vLLM before cu_num_generated_tokens', () => {
    const t = promptTensor(2, 2, 'int64');
    const encoded = m.encodePromptLogprobs(t, { aux: [] }).slice(0, 3);
    const { seen } = read(era, rawMessage([rawOutput(era, 'a', encoded)]));
    expect(seen[0]).toEqual({ id: 'a', rows: t.tokenIds, logprobs: t.logprobs, ranks: t.ranks });
  });

  it('writes what the mirror reads: int32 ids and ranks, float32 logprobs, 4 fields', () => {
    const e = new OutputsEncoder(getVllmLayout(era));
    const o = new OutputRecord();
    o.requestId = 'r-1';
    o.tokenIds = Int32Array.from([21]);
    o.tokenCount = 1;
    // Two positions of width 3 from entry 3 of the arrays (position-major, as StepOutputs).
    o.promptIds = Int32Array.from([0, 0, 0, 4, 40, 41, 5, 50, 51]);
    o.promptLogprobs = Float32Array.from([0, 0, 0, -0.5, -0.25, -1, -2, -0.5, -0.75]);
    o.promptRanks = Int32Array.from([0, 0, 0, 3, 1, 2, 0, 1, 2]);
    o.promptStart = 3;
    o.promptPositions = 2;
    o.promptWidth = 3;
    e.begin(0, 1);
    e.output(o);
    const frames = e.end(null, 1, null);
    const out = m.decodeOutputs(frames, era).message.outputs[0]!;
    expect(out.new_prompt_logprobs_tensors).toEqual({
      tokenIds: [
        [4, 40, 41],
        [5, 50, 51],
      ],
      logprobs: [
        [-0.5, -0.25, -1],
        [-2, -0.5, -0.75],
      ],
      // A rank of 0 (an engine that did not rank) goes out as 1, as vLLM's Rust client needs.
      ranks: [3, 1],
      idsDtype: 'int32',
      ranksDtype: 'int32',
    });
    const raw = m.unpack(frames[0]!) as unknown[][][][];
    expect(raw[1]![0]![3]).toHaveLength(4);
    expect(raw[1]![0]![3]![3]).toBeNull();
  });

  it('a tensor vLLM would not send fails its output alone, naming the field', () => {
    const frames: m.Frames = { aux: [] };
    const tensor = (dtype: string, shape: number[], values: number[]) =>
      m.encodeTensor({ dtype, shape, values }, frames);
    const ids = tensor('int32', [2, 2], [1, 2, 3, 4]);
    const lps = tensor('float32', [2, 2], [-1, -2, -3, -4]);
    const ranks = tensor('int32', [2], [1, 2]);
    const cases: [unknown, string][] = [
      [[tensor('float32', [2, 2], [1, 2, 3, 4]), lps, ranks, null], 'logprob_token_ids'],
      [[tensor('int32', [4], [1, 2, 3, 4]), lps, ranks, null], 'logprob_token_ids'],
      [[ids, tensor('float32', [2, 1], [-1, -2]), ranks, null], 'logprobs'],
      [[ids, tensor('int32', [2, 2], [1, 2, 3, 4]), ranks, null], 'logprobs'],
      [[ids, lps, tensor('int32', [3], [1, 2, 3]), null], 'selected_token_ranks'],
      [[ids, lps, tensor('float32', [2], [1, 2]), null], 'selected_token_ranks'],
      [
        [tensor('int64', [1, 1], [2 ** 40]), tensor('float32', [1, 1], [-1]), ranks],
        'logprob_token_ids',
      ],
      [[ids, lps], ''],
      [7, ''],
    ];
    const good = rawOutput(era, 'ok', m.encodePromptLogprobs(promptTensor(1, 2, 'int32'), frames));
    for (const [bad, field] of cases) {
      const { seen, failed } = read(
        era,
        rawMessage([rawOutput(era, 'bad', bad), good], frames.aux),
      );
      const want =
        field === '' ? 'new_prompt_logprobs_tensors' : `new_prompt_logprobs_tensors.${field}`;
      expect(failed).toEqual([[want, 'bad']]);
      expect(seen.map((s) => s?.id)).toEqual(['ok']);
    }
  });
});
