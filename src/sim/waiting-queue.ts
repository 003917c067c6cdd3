import type { SchedulingPolicy } from '../wire/engine-defaults.js';
import type { Sequence } from './sequence.js';

export type { SchedulingPolicy };

/**
 * Requests waiting to be scheduled, in the order they will be tried. FCFS: arrival order, a
 * preempted request goes back to the front (vLLM's prepend_request). Priority: ascending
 * (priority, arrival time, id), preempted ones rejoin at their place (vLLM's heap does the same).
 * Arrays with splice: the queue holds hundreds to a few thousand requests and changes once per
 * request event, never per token.
 */
export class WaitingQueue {
  readonly #policy: SchedulingPolicy;
  readonly #items: Sequence[] = [];

  constructor(policy: SchedulingPolicy) {
    this.#policy = policy;
  }

  get length(): number {
    return this.#items.length;
  }

  peek(): Sequence | undefined {
    return this.#items[0];
  }

  shift(): Sequence | undefined {
    return this.#items.shift();
  }

  /** The request `i` places from the front (the scheduler skips those of held API servers). */
  at(i: number): Sequence | undefined {
    return this.#items[i];
  }

  /** Takes out the request `i` places from the front. */
  removeAt(i: number): Sequence | undefined {
    return i === 0 ? this.#items.shift() : this.#items.splice(i, 1)[0];
  }

  /** A new request. */
  add(seq: Sequence): void {
    if (this.#policy === 'fcfs') this.#items.push(seq);
    else this.#insertByPriority(seq);
  }

  /** A preempted request. */
  addPreempted(seq: Sequence): void {
    if (this.#policy === 'fcfs') this.#items.unshift(seq);
    else this.#insertByPriority(seq);
  }

  /** Removes a request if present; returns whether it was. */
  remove(seq: Sequence): boolean {
    const i = this.#items.indexOf(seq);
    if (i < 0) return false;
    this.#items.splice(i, 1);
    return true;
  }

  /** Removes every request matching the predicate; returns them. */
  removeWhere(match: (seq: Sequence) => boolean): Sequence[] {
    const removed = this.#items.filter(match);
    if (removed.length > 0) {
      const kept = this.#items.filter((s) => !match(s));
      this.#items.length = 0;
      this.#items.push(...kept);
    }
    return removed;
  }

  #insertByPriority(seq: Sequence): void {
    const items = this.#items;
    let lo = 0;
    let hi = items.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (comesBefore(items[mid] as Sequence, seq)) lo = mid + 1;
      else hi = mid;
    }
    items.splice(lo, 0, seq);
  }
}

/** vLLM's priority order: lower priority value first, then earlier arrival. */
export function comesBefore(a: Sequence, b: Sequence): boolean {
  if (a.priority !== b.priority) return a.priority < b.priority;
  if (a.arrivalTimeMs !== b.arrivalTimeMs) return a.arrivalTimeMs < b.arrivalTimeMs;
  return a.id < b.id;
}
