/**
 * The sampling rules a vLLM engine puts on requests that its own API server checks before they
 * reach it, checked here because ringserve is that API server (a request the engine refuses would
 * fail later, or, malformed, kill its input thread): with `--engine vllm`, sampling masks exist
 * only when the engine captures them (vLLM >= 0.28 with `--enable-return-sampling-mask`, which
 * ringserve's own flag of that name says), and while it does, every request must sample with
 * temperature > 0 and top_k > 0 (vLLM's docs, "Sampling Mask"). Each refusal is a 400 naming the
 * field in the route's own spelling (`prefix` is `sampling_params.` on /inference/v1/generate).
 */
import type { RingserveConfig } from '../../config.js';
import { RS_ERR_REQ_INVALID_FIELD } from '../../errors.js';
import { maskSamplingProblem } from '../../wire/sampling-check.js';
import type { SamplingParams } from '../../wire/types.js';

export interface MaskCapability {
  /** Whether the engine behind the core returns sampling masks now. */
  samplingMasks(): boolean;
}

export function checkVllmSampling(
  config: Pick<RingserveConfig, 'engine' | 'enableReturnSamplingMask'>,
  params: Pick<SamplingParams, 'temperature' | 'topK' | 'returnSamplingMask'>,
  prefix: string,
  engine: MaskCapability | undefined,
): void {
  if (config.engine !== 'vllm') return;
  if (params.returnSamplingMask && engine?.samplingMasks() !== true) {
    throw new RS_ERR_REQ_INVALID_FIELD(
      `${prefix}return_sampling_mask`,
      config.enableReturnSamplingMask
        ? 'the vLLM engine behind this server speaks a release without sampling masks (they came with vLLM 0.28)'
        : 'the vLLM engine behind this server returns no sampling masks: start it with --enable-return-sampling-mask (vLLM >= 0.28) and ringserve with the same flag',
    );
  }
  if (!config.enableReturnSamplingMask) return;
  const problem = maskSamplingProblem(params);
  if (problem !== null) {
    throw new RS_ERR_REQ_INVALID_FIELD(
      `${prefix}${problem}`,
      `must be > 0: the vLLM engine behind this server captures sampling masks (--enable-return-sampling-mask), and vLLM refuses ${problem === 'temperature' ? 'greedy sampling' : 'sampling without top_k'} then`,
    );
  }
}
