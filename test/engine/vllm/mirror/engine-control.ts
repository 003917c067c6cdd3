/**
 * The mirror engine's scheduler state: waiting and running requests, pause modes, utility methods
 * (VH §5 method table; VE §4) and SchedulerStats. Sockets and encoding stay in engine.ts.
 */
import {
  type EngineCoreOutput,
  FinishReason,
  type SchedulerStats,
  type UtilityCall,
} from './codec.js';
import type { LiveRequest } from './engine-step.js';
import { type Era, eraAtLeast } from './eras.js';

/** pause_scheduler's modes: abort all, let running ones finish, or freeze (VE §4). */
export type PauseMode = 'abort' | 'wait' | 'keep';

/** An output and the client (output socket) it goes to. */
export interface Addressed {
  output: EngineCoreOutput;
  client: number;
}

export interface ControlHooks {
  era: Era;
  reply(call: UtilityCall, failure: string | null, value: unknown): void;
  emit(outputs: Addressed[]): void;
}

export class EngineControl {
  readonly running = new Map<string, LiveRequest>();
  readonly waiting: LiveRequest[] = [];
  paused: PauseMode | null = null;
  readonly #hooks: ControlHooks;
  /** pause_scheduler('wait') calls, answered once nothing runs. */
  #drainCalls: UtilityCall[] = [];
  #admitted = { requests: 0, tokens: 0 };

  constructor(hooks: ControlHooks) {
    this.#hooks = hooks;
  }

  /** Queues a request; a live request_id again is an error (vLLM's scheduler asserts on it). */
  add(live: LiveRequest): void {
    const id = live.request.request_id;
    if (this.running.has(id) || this.waiting.some((w) => w.request.request_id === id)) {
      throw new Error(`request ${id} is already live`);
    }
    this.waiting.push(live);
  }

  /** Aborted requests leave without an output (VE §4, core.py:374-380). */
  abort(ids: readonly string[]): void {
    for (const id of ids) {
      this.running.delete(id);
      const at = this.waiting.findIndex((w) => w.request.request_id === id);
      if (at >= 0) this.waiting.splice(at, 1);
    }
  }

  /** Starts waiting requests unless paused; false when this step has nothing to run. */
  admit(): boolean {
    if (this.paused === 'keep') return false;
    if (this.paused === null) {
      for (const live of this.waiting.splice(0)) {
        this.running.set(live.request.request_id, live);
        this.#admitted.requests++;
        this.#admitted.tokens += live.prompt.length;
      }
    }
    return this.running.size > 0;
  }

  finish(id: string): void {
    this.running.delete(id);
  }

  /** After a step: answers pause('wait') once the running requests are done. */
  drained(): void {
    if (this.running.size > 0 || this.#drainCalls.length === 0) return;
    for (const call of this.#drainCalls.splice(0)) this.#hooks.reply(call, null, null);
  }

  call(c: UtilityCall): void {
    if (c.method === 'pause_scheduler') {
      this.#pause(c);
      return;
    }
    if (c.method === 'resume_scheduler') this.paused = null;
    const answers: Readonly<Record<string, unknown>> = {
      resume_scheduler: null,
      is_scheduler_paused: this.paused !== null,
      reset_prefix_cache: true,
      collective_rpc: [null],
      is_sleeping: false,
      sleep: null,
      wake_up: null,
      get_supported_tasks: ['generate'],
    };
    if (Object.hasOwn(answers, c.method)) {
      this.#hooks.reply(c, null, answers[c.method]);
      return;
    }
    // core.py's getattr fails inside its try: the failure text is the AttributeError's.
    const why = `'EngineCoreProc' object has no attribute '${c.method}'`;
    this.#hooks.reply(c, `Call to ${c.method} method failed: ${why}`, null);
  }

  #pause(c: UtilityCall): void {
    const mode = c.args[0] ?? 'abort';
    if (mode !== 'abort' && mode !== 'wait' && mode !== 'keep') {
      this.#hooks.reply(c, `Call to pause_scheduler method failed: bad mode ${String(mode)}`, null);
      return;
    }
    this.paused = mode;
    if (mode === 'abort') {
      const all = [...this.running.values(), ...this.waiting.splice(0)];
      this.running.clear();
      const aborted = all.map((live) => ({
        output: {
          request_id: live.request.request_id,
          new_token_ids: [],
          finish_reason: FinishReason.ABORT,
        },
        client: live.clientIndex,
      }));
      if (aborted.length > 0) this.#hooks.emit(aborted);
    }
    if (mode === 'wait' && this.running.size > 0) this.#drainCalls.push(c);
    else this.#hooks.reply(c, null, null);
  }

  /**
   * Complete SchedulerStats: the keys vllm-rs requires (VH §4.2) and the others a Python engine's
   * dataclass carries at their idle values (VH §4.1), so a frontend meets them all.
   */
  stats(step: number, capacityTokens: number): SchedulerStats {
    let used = 0;
    for (const live of this.running.values()) used += live.prompt.length + live.emitted;
    const admitted = this.#admitted;
    this.#admitted = { requests: 0, tokens: 0 };
    const stats: SchedulerStats = {
      num_running_reqs: this.running.size,
      num_waiting_reqs: this.waiting.length,
      num_skipped_waiting_reqs: 0,
      step_counter: step,
      current_wave: 0,
      kv_cache_usage: Math.min(1, used / capacityTokens),
      iteration_details: null,
      prefix_cache_stats: {
        reset: false,
        requests: admitted.requests,
        queries: admitted.tokens,
        hits: 0,
        preempted_requests: 0,
        preempted_queries: 0,
        preempted_hits: 0,
      },
      connector_prefix_cache_stats: null,
      kv_cache_eviction_events: [],
      spec_decoding_stats: null,
      kv_connector_stats: null,
      waiting_lora_adapters: {},
      running_lora_adapters: {},
      cudagraph_stats: null,
      perf_stats: null,
    };
    if (eraAtLeast(this.#hooks.era, '0.33')) {
      stats.sleep_state = null;
      stats.sleep_state_only = false;
    }
    return stats;
  }
}
