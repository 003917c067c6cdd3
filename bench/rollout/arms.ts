/**
 * The arms of the before/after benchmark: each a cluster configuration, run under the identical
 * load. "objects" is the per-token-object frontend (`--output-processing inline`: output processing
 * on the main thread, one object per token, responses in the legacy form, as stock vLLM answers);
 * "packed" is ringserve's own path (output worker, packer threads, packed arrays). "mask" turns on
 * sampling masks and routed experts, the per-token payload an RL trainer asks for.
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
    summary: 'per-token objects on the main thread, legacy JSON, logprobs only',
  },
  {
    name: 'packed-nomask',
    flags: [],
    accept: 'json',
    legacy: false,
    summary: 'ringserve: output worker + packers, packed JSON, logprobs only',
  },
  {
    name: 'objects-mask',
    flags: [...OBJECTS, ...MASK],
    accept: 'json',
    legacy: true,
    summary: 'per-token objects, legacy JSON, logprobs + sampling masks + routed experts',
  },
  {
    name: 'packed-mask',
    flags: MASK,
    accept: 'json',
    legacy: false,
    summary: 'ringserve, packed JSON, logprobs + sampling masks + routed experts',
  },
  {
    name: 'packed-mask-msgpack',
    flags: MASK,
    accept: 'msgpack',
    legacy: false,
    summary: 'ringserve, msgpack with raw binary arrays, logprobs + masks + routed experts',
  },
];

export const ARM_NAMES: readonly string[] = ARMS.map((a) => a.name);

export function armByName(name: string): ArmDef | undefined {
  return ARMS.find((a) => a.name === name);
}
