import { createHash } from 'node:crypto';
import type { ModelCard } from '../../../wire/model-card.js';
import type { DpGroupConfig } from '../handshake.js';

/**
 * The headless engine as one rank of a vLLM data-parallel group (docs/vllm-protocol.md, "Data
 * parallelism"), the engine side of vLLM's DP waves as `DPEngineCoreProc` (vllm/v1/engine/core.py)
 * runs them without a DP coordinator:
 *
 * - A MoE model's ranks step in lockstep: every forward is a collective over the group (the MoE
 *   all-to-all), so while any rank has work, every rank steps, idle ones with a dummy batch. The
 *   group runs in numbered waves; `current_wave` starts at 0, `engines_running` false.
 * - START_DP_WAVE `[wave, exclude]` from the frontend: a rank other than `exclude` whose current
 *   wave is at or below `wave` adopts it and starts running (`_handle_client_request`).
 * - On step 1 of a wave and every `dp_sync_interval` steps (#52957, `--dp-sync-interval`, default
 *   16) the ranks all-reduce "has unfinished requests" (`_has_global_unfinished_reqs`); when no
 *   rank has any, the wave ends: every rank (no coordinator) sends `wave_complete = current_wave`
 *   to client 0, then `current_wave += 1`, the step counter restarts.
 * - `current_wave` in ADDs is read only with a coordinator (`add_request`): ignored here.
 * - A dense model's ranks are independent `EngineCoreProc`s (`run_engine_core`,
 *   `reconfigure_for_independent_dp_rank`): no group, no waves, START_DP_WAVE an unknown request.
 */

/** vLLM's ParallelConfig.dp_sync_interval default (`Field(default=16, ge=1)`, #52957). */
export const DEFAULT_DP_SYNC_INTERVAL = 16;

/**
 * Whether the all-reduce runs on step `step` (1-based) of a wave: step 1 ("an idle pause needs one
 * dummy batch, not a full interval") and every `interval`-th.
 */
export function isSyncStep(step: number, interval: number): boolean {
  return step === 1 || step % interval === 0;
}

/** How a rank of `size` runs: alone (1), in lockstep waves (MoE), or independently (dense). */
export type DpMode = 'single' | 'waves' | 'independent';

export function dpModeOf(size: number, routingLayers: number): DpMode {
  if (size <= 1) return 'single';
  return routingLayers > 0 ? 'waves' : 'independent';
}

/**
 * The TCP port the group forms at: vLLM's `stateless_init_dp_group` takes
 * `ParallelConfig.get_next_dp_init_port()`, which pops the last entry of
 * `_data_parallel_master_port_list` when the list has any, else uses `data_parallel_master_port`.
 */
export function dpGroupPort(config: DpGroupConfig): number {
  const list = config.masterPortList;
  return list.length > 0 ? (list[list.length - 1] as number) : config.masterPort;
}

/**
 * What of the model the hash covers: its name and the shape its collectives follow (layers, routed
 * layers, experts, experts per token), not the path it was read from (that differs between hosts).
 */
export function modelKey(card: ModelCard): string {
  return [
    card.name,
    card.numHiddenLayers,
    card.routingLayers,
    card.numExperts,
    card.expertsPerToken,
  ].join(':');
}

/**
 * READY's parallel_config_hash: the same hex string for every rank started with the same model
 * (modelKey), DP size, sync interval and message layout (vLLM hashes its ParallelConfig, ranks and addresses
 * left out, so that ranks whose collectives would not match are refused).
 */
export function parallelConfigHash(p: {
  model: string;
  size: number;
  syncInterval: number;
  layout: string;
}): string {
  const factors = JSON.stringify([p.model, p.size, p.syncInterval, p.layout]);
  return createHash('sha256').update(factors).digest('hex');
}

/** The wave state of one MoE DP rank (DPEngineCoreProc's current_wave, engines_running, step_counter). */
export class DpWaveState {
  readonly rank: number;
  currentWave = 0;
  /** engines_running: the group is in a wave, so this rank steps (a dummy batch when idle). */
  running = false;
  /** Steps of the current wave (vLLM's step_counter). */
  step = 0;

  constructor(rank: number) {
    this.rank = rank;
  }

  /** START_DP_WAVE [wave, exclude]; true when this rank started running because of it. */
  startWave(wave: number, exclude: number | null): boolean {
    if (exclude === this.rank || wave < this.currentWave) return false;
    this.currentWave = wave;
    if (this.running) return false;
    this.running = true;
    return true;
  }

  /**
   * After one step through the group: `sync` whether this step was a sync point, `anyUnfinished`
   * the all-reduce's answer. Returns the wave that ended (its wave_complete is due), or null.
   */
  afterStep(sync: boolean, anyUnfinished: boolean): number | null {
    this.step++;
    if (!sync || anyUnfinished) {
      this.running = true;
      return null;
    }
    const ended = this.currentWave;
    this.running = false;
    this.currentWave++;
    this.step = 0;
    return ended;
  }
}
