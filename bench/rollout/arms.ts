/**
 * The arms of the before/after benchmark: each a cluster configuration, run under the identical
 * load. "objects" is the per-token-object frontend (`--output-processing inline`: output processing
 * on the main thread holding what vLLM's Python frontend holds, responses in the legacy form built
 * by one JSON.stringify, as stock vLLM answers); "packed" is ringserve's own path (output worker,
 * packer threads, packed arrays). "mask" turns on sampling masks and routed experts, the per-token
 * payload an RL trainer asks for. `summary` says what the API server holds per request.
 *
 * There is no arm with routing kept as one JS array per sequence position (what the objects arms
 * held before issue 11): no frontend keeps routing that way (vLLM's capturer keeps a numpy buffer,
 * and the legacy form carries routing packed), so it would measure a strawman, not a design.
 *
 * There is no `packed-mask-v8default` arm: it is the counterpart of the reference's "no GC tuning"
 * ablation, and ringserve starts its processes with V8's default flags, so it would equal
 * packed-mask. Add it here if ringserve ever tunes V8 flags by default.
 */

export interface ArmDef {
  name: string;
  /** Flags added to `ringserve serve` for this arm. */
  flags: readonly string[];
  /** How the load generator asks for answers. */
  accept: 'json' | 'msgpack';
  /** Answers are in the legacy form (client parse means JSON.parse into the legacy objects). */
  legacy: boolean;
  summary: string;
}

const OBJECTS = ['--output-processing', 'inline', '--generate-format', 'legacy'];
const MASK = ['--return-sampling-mask', '--return-routed-experts'];

export const ARMS: readonly ArmDef[] = [
  {
    name: 'objects-nomask',
    flags: OBJECTS,
    accept: 'json',
    legacy: true,
    summary:
      'main thread: token ids and weight versions as number[], one {tokenId, logprob} object per token; legacy JSON',
  },
  {
    name: 'packed-nomask',
    flags: [],
    accept: 'json',
    legacy: false,
    summary: 'ringserve: token ids and logprobs in shared-memory arenas, packed JSON by packers',
  },
  {
    name: 'objects-mask',
    flags: [...OBJECTS, ...MASK],
    accept: 'json',
    legacy: true,
    summary:
      'objects-nomask plus a number[] of kept ids per position and routed experts in one growing Uint8Array; legacy JSON',
  },
  {
    name: 'packed-mask',
    flags: MASK,
    accept: 'json',
    legacy: false,
    summary: 'ringserve: tokens, logprobs, mask CSR and routing rows in arenas; packed JSON',
  },
  {
    name: 'packed-mask-msgpack',
    flags: MASK,
    accept: 'msgpack',
    legacy: false,
    summary: 'packed-mask, answered as msgpack with raw binary arrays',
  },
];

export const ARM_NAMES: readonly string[] = ARMS.map((a) => a.name);

export function armByName(name: string): ArmDef | undefined {
  return ARMS.find((a) => a.name === name);
}
