import { RS_ERR_VLLM_BAD_FIELD } from '../../../errors.js';
import { HeldPrompt } from './held-prompt.js';

/**
 * The headless engine's live requests: vLLM request ids (strings the frontend picks) mapped to the
 * (server 0, slot) pairs an EngineCore works with, and the little per-request state the vLLM
 * output rules need (was the first output with tokens sent, did the frontend abort it, the routing
 * rows and prompt logprobs of prompt chunks held back until that first output).
 */
export class LiveRequest {
  id = '';
  slot = 0;
  promptLength = 0;
  logprobs = false;
  mask = false;
  /** The first output with tokens (prompt routing rows, prefill_stats) has gone out. */
  started = false;
  /** Aborted by an ABORT message: vLLM sends nothing more for it. */
  clientAborted = false;
  /** Expanded routing rows of prompt chunks not sent yet (bytes, rows). */
  pendingRouting = new Uint8Array(0);
  pendingBytes = 0;
  pendingRows = 0;
  /** Prompt logprobs asked (prompt_logprobs k >= 0), held until the first output; null: none. */
  prompt: HeldPrompt | null = null;
  /** P/D prefill (do_remote_decode): its final output answers a handle (nixl-connector.ts). */
  remoteDecode = false;
  /** The handle its final output carries, once made; null: none. */
  kvTransferParams: Record<string, unknown> | null = null;
  /** P/D decode: prompt tokens imported from a prefill engine (prefill_stats' external ones). */
  importedTokens = 0;
  /** P/D decode: tells the prefill engine its blocks were read; null once called (or none). */
  kvDone: (() => void) | null = null;
}

export class LiveRequests {
  /**
   * Id -> slot, not -> request: a Map that churns leaves replaced tables behind that keep what
   * they held through young-generation collections (src/wire/churn-map.ts); small integers keep
   * nothing alive. The requests themselves are in #bySlot.
   */
  readonly #byId = new Map<string, number>();
  readonly #bySlot: (LiveRequest | undefined)[] = [];
  readonly #free: number[] = [];
  readonly #capacity: number;

  /** `capacity`: most live requests (the slot space of one API server). */
  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  get size(): number {
    return this.#byId.size;
  }

  get(id: string): LiveRequest | undefined {
    const slot = this.#byId.get(id);
    return slot === undefined ? undefined : this.#bySlot[slot];
  }

  atSlot(slot: number): LiveRequest | undefined {
    return this.#bySlot[slot];
  }

  /**
   * A slot for a new request id. A live duplicate id is refused (vLLM's engine would die of it;
   * the frontend guarantees uniqueness, so it is a caller bug here). `promptLogprobs`: the k of
   * the prompt logprobs the engine computes for it (-1: none).
   */
  add(
    id: string,
    promptLength: number,
    logprobs: boolean,
    mask: boolean,
    promptLogprobs = -1,
  ): LiveRequest {
    if (this.#byId.has(id)) throw new RS_ERR_VLLM_BAD_FIELD('request_id', `${id} is already live`);
    let slot = this.#free.pop();
    if (slot === undefined) {
      if (this.#bySlot.length >= this.#capacity) {
        throw new RS_ERR_VLLM_BAD_FIELD('request_id', `more than ${this.#capacity} live requests`);
      }
      slot = this.#bySlot.length;
      this.#bySlot.push(undefined);
    }
    const r = new LiveRequest();
    r.id = id;
    r.slot = slot;
    r.promptLength = promptLength;
    r.logprobs = logprobs;
    r.mask = mask;
    if (promptLogprobs >= 0) r.prompt = new HeldPrompt(promptLogprobs);
    this.#bySlot[slot] = r;
    this.#byId.set(id, slot);
    return r;
  }

  release(r: LiveRequest): void {
    if (this.#bySlot[r.slot] !== r) return;
    this.#bySlot[r.slot] = undefined;
    this.#byId.delete(r.id);
    this.#free.push(r.slot);
  }

  ids(): string[] {
    return [...this.#byId.keys()];
  }

  *values(): IterableIterator<LiveRequest> {
    for (const slot of this.#byId.values()) yield this.#bySlot[slot] as LiveRequest;
  }
}
