/**
 * The frontend's half of vLLM's DP waves (docs/vllm-protocol.md, "Data parallelism"). The ranks of
 * a MoE model step in lockstep (every forward is a collective over the DP group), so an idle rank
 * must step too while any rank has work: the group runs in numbered waves. A rank with nothing to
 * do and no wave running waits on its input socket, so a request sent to one rank of an idle group
 * would block in its first collective unless the other ranks are woken. vLLM's DP coordinator does
 * that for its Python frontend; the bridge runs without one (its init names no coordinator
 * sockets), and then, as vLLM's engine is written for that case, every rank reports the end of a
 * wave to client 0 and the frontend wakes the ranks itself with START_DP_WAVE on their input
 * sockets (SMG's engine client does the same, PR #2078):
 *
 * - a request sent while no wave runs starts one: START_DP_WAVE [wave, target] to every other
 *   rank (the target starts on its own when it gets the request);
 * - wave_complete W (from any rank; every rank sends it) at or past the current wave ends it: the
 *   next wave is W + 1. If requests are in flight then, one was sent as the wave ended and its
 *   rank would wait for the others: every rank is woken for wave W + 1 (exclude nil). A needless
 *   wake costs dummy steps until the group's next sync;
 * - start_wave W (an engine started a wave; vLLM sends it only to a coordinator, handled the way
 *   vLLM's coordinator does) past the current wave, or equal to it while none runs, wakes the
 *   others for W;
 * - a rank that attaches while a wave runs joins it.
 * Dense models' ranks run independently: they register data_parallel_size 1, and nothing here arms.
 */

/** What the waves need of a rank: its link while attached. */
export interface WaveRank {
  readonly rank: number;
  readonly link: { startDpWave(wave: number, exclude: number | null): void } | null;
}

export class DpWaves {
  #armed = false;
  #wave = 0;
  #running = false;
  #ranks: readonly WaveRank[];

  constructor(attached: readonly WaveRank[]) {
    this.#ranks = attached;
  }

  /** A rank registered as part of a DP group (data_parallel_size > 1): waves are kept from now on. */
  arm(): void {
    this.#armed = true;
  }

  ranksChanged(attached: readonly WaveRank[]): void {
    this.#ranks = attached;
  }

  /** The wave ADDs are stamped with (EngineCoreRequest.current_wave). */
  get wave(): number {
    return this.#wave;
  }

  get state(): { armed: boolean; wave: number; running: boolean } {
    return { armed: this.#armed, wave: this.#wave, running: this.#running };
  }

  /** A request went to rank `target`. */
  sent(target: number): void {
    if (!this.#armed || this.#running) return;
    this.#running = true;
    this.#wake(this.#wave, target);
  }

  /** Rank `r` attached. */
  joined(r: WaveRank): void {
    if (this.#armed && this.#running) r.link?.startDpWave(this.#wave, null);
  }

  /** wave_complete / start_wave of a message of rank `rank`; `outstanding`: requests in flight. */
  fromEngine(
    rank: number,
    complete: number | null,
    start: number | null,
    outstanding: boolean,
  ): void {
    if (!this.#armed) return;
    if (complete !== null && complete >= this.#wave) {
      this.#wave = complete + 1;
      this.#running = false;
      if (outstanding) {
        this.#running = true;
        this.#wake(this.#wave, null);
      }
    }
    if (start !== null && (start > this.#wave || (start === this.#wave && !this.#running))) {
      this.#wave = start;
      this.#running = true;
      this.#wake(start, rank);
    }
  }

  /** START_DP_WAVE [wave, exclude] to every attached rank but `exclude`. */
  #wake(wave: number, exclude: number | null): void {
    for (const r of this.#ranks) {
      if (r.rank === exclude || r.link === null) continue;
      try {
        r.link.startDpWave(wave, exclude);
      } catch {
        // The rank was lost meanwhile: its detach follows, and it joins the wave when it is back.
      }
    }
  }
}
