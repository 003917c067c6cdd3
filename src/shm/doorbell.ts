// A doorbell: one futex word and one "sleeping" flag in shared memory. One sleeper (a ring's consumer,
// or the engine, which drains several request rings and sleeps on one bell); any number of ringers
// (producers). Producers make the wake syscall only while the flag is set, so a busy consumer costs
// them one shared-cache load per commit and no syscall; and the producer that wakes the sleeper
// clears the flag as it claims the wake, so the commits that follow while the sleeper is still on
// its way up (a futex wake takes 50-100 us to run the sleeper on a loaded VM) make no syscall either.
//
//   +0  BELL_SEQ       i32  futex word; producers Atomics.add(+1) before waking (many writers, RMW only)
//   +4  BELL_SLEEPING  i32  the sleeper's flag: set by prepareSleep(), cleared by endSleep() or by
//                           the producer whose compare-exchange claims the wake
//
// No lost wake-up: the sleeper stores SLEEPING=1 and then re-checks its rings; a producer stores its
// ring head and then compare-exchanges SLEEPING 1 -> 0. Atomics are sequentially consistent, so
// either the sleeper sees the new head, or the exchange comes after the sleeper's re-check and one
// producer claims the wake, bumps SEQ and wakes; a sleeper that has not reached the futex yet then
// finds SEQ changed and returns at once. A producer whose exchange finds 0 has a sleeper that is
// awake (it re-checks its rings before it sleeps again) or one already being woken.
import { RS_ERR_SHM_BAD_LAYOUT } from '../errors.js';
import { BELL_SEQ, BELL_SLEEPING } from './layout.js';
import { FUTEX_TIMED_OUT, type FutexWaitResult, shmAddon } from './native.js';

const WAKE_ALL = 0x7fff_ffff;

export class Doorbell {
  /** The whole region as 32-bit words. */
  readonly i32: Int32Array;
  /** Byte offset of the doorbell in the region. */
  readonly byteOffset: number;
  readonly #seqIndex: number;
  readonly #sleepingIndex: number;

  constructor(sab: SharedArrayBuffer, byteOffset: number) {
    if (byteOffset % 8 !== 0 || byteOffset < 0 || byteOffset + 8 > sab.byteLength) {
      throw new RS_ERR_SHM_BAD_LAYOUT(
        `doorbell offset ${byteOffset} is not an 8-aligned offset in the buffer`,
      );
    }
    this.i32 = new Int32Array(sab, 0, sab.byteLength >> 2);
    this.byteOffset = byteOffset;
    this.#seqIndex = (byteOffset + BELL_SEQ) >> 2;
    this.#sleepingIndex = (byteOffset + BELL_SLEEPING) >> 2;
  }

  /**
   * Producer side, after publishing: wakes the sleeper only if it is (about to be) asleep and no
   * other producer has woken it since (see the header).
   */
  ring(): void {
    if (Atomics.load(this.i32, this.#sleepingIndex) === 0) return;
    if (Atomics.compareExchange(this.i32, this.#sleepingIndex, 1, 0) === 1) this.wake();
  }

  /** Unconditional wake (a command, shutdown): bumps the word so a sleeper on its way down returns. */
  wake(): void {
    Atomics.add(this.i32, this.#seqIndex, 1);
    shmAddon().futexWake(this.i32, this.#seqIndex, WAKE_ALL);
  }

  /** Sleeper: announces the intent to sleep; returns the word to pass to sleep(). Re-check, then sleep. */
  prepareSleep(): number {
    const seq = Atomics.load(this.i32, this.#seqIndex);
    Atomics.store(this.i32, this.#sleepingIndex, 1);
    return seq;
  }

  /** Sleeper: blocks until rung, or `timeoutMs` passes. Always follow with endSleep(). */
  sleep(seq: number, timeoutMs: number): FutexWaitResult {
    if (timeoutMs <= 0) return FUTEX_TIMED_OUT;
    return shmAddon().futexWait(this.i32, this.#seqIndex, seq, timeoutMs);
  }

  /** Sleeper: clears the flag, so producers stop making wake syscalls. */
  endSleep(): void {
    Atomics.store(this.i32, this.#sleepingIndex, 0);
  }

  /** True while the sleeper has announced it is asleep and no producer has claimed its wake. */
  isSleeping(): boolean {
    return Atomics.load(this.i32, this.#sleepingIndex) !== 0;
  }

  /** How many times the bell has been rung (for tests and diagnostics). */
  rings(): number {
    return Atomics.load(this.i32, this.#seqIndex);
  }
}
