/**
 * Control commands (pause, resume, update weights, reset prefix cache) from any API server to the
 * engine, through the control block of the shared region (layout.ts). One command at a time: the
 * caller takes CTL_LOCK with a compare-and-swap, writes the command, bumps CTL_CMD_SEQ and rings the
 * engine's doorbell; the engine runs it between two steps and acknowledges by storing CTL_ACK_SEQ.
 * The caller polls the acknowledgement from its event loop (never blocks it) with a bound, and a lock
 * whose holder died is taken over rather than waited on forever.
 */

import { createError } from '../errors.js';
import {
  CTL_ACK_SEQ,
  CTL_ARG_COUNT,
  CTL_CMD_ARGS,
  CTL_CMD_CODE,
  CTL_CMD_SEQ,
  CTL_CMD_SERVER,
  CTL_CMD_TEXT,
  CTL_CMD_TEXT_BYTES,
  CTL_LOCK,
  CTL_RESULT_CODE,
  CTL_RESULT_VALUE,
  CTL_TEXT_CAPACITY,
} from '../shm/layout.js';
import { isProcessAlive } from '../shm/liveness.js';
import { shmAddon } from '../shm/native.js';
import type { Region } from '../shm/region.js';
import { engineDoorbell } from '../shm/region.js';

export const ControlCommand = {
  Pause: 1,
  Resume: 2,
  UpdateWeights: 3,
  ResetPrefixCache: 4,
} as const;
export type ControlCode = (typeof ControlCommand)[keyof typeof ControlCommand];

export const ControlResult = {
  Ok: 0,
  Failed: 1,
  UnknownCommand: 2,
} as const;

export const ControlTimeoutError = createError(
  'RS_ERR_CONTROL_TIMEOUT',
  'the engine did not acknowledge the %s command within %s ms',
  503,
);

const POLL_MS = 1;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export interface ControlReply {
  code: number;
  value: number;
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** API-server side. */
export class ControlClient {
  readonly #region: Region;
  readonly #server: number;

  constructor(region: Region, server: number) {
    this.#region = region;
    this.#server = server;
  }

  /** Runs one command; resolves with the engine's result once acknowledged, or rejects past `timeoutMs`. */
  async call(
    code: ControlCode,
    args: readonly number[],
    text: string | null,
    timeoutMs: number,
  ): Promise<ControlReply> {
    const { i32, f64 } = this.#region;
    const deadline = performance.now() + timeoutMs;
    await this.#lock(deadline, code);
    try {
      i32[CTL_CMD_CODE >> 2] = code;
      i32[CTL_CMD_SERVER >> 2] = this.#server;
      for (let a = 0; a < CTL_ARG_COUNT; a++) f64[(CTL_CMD_ARGS >> 3) + a] = args[a] ?? 0;
      const bytes = text === null ? new Uint8Array(0) : encoder.encode(text);
      if (bytes.length > CTL_TEXT_CAPACITY) throw new RangeError('control text too long');
      new Uint8Array(this.#region.sab, CTL_CMD_TEXT, bytes.length).set(bytes);
      i32[CTL_CMD_TEXT_BYTES >> 2] = bytes.length;
      const seq = (Atomics.load(i32, CTL_CMD_SEQ >> 2) + 1) | 0;
      Atomics.store(i32, CTL_CMD_SEQ >> 2, seq);
      engineDoorbell(this.#region).wake();
      while (Atomics.load(i32, CTL_ACK_SEQ >> 2) !== seq) {
        if (performance.now() >= deadline)
          throw new ControlTimeoutError(commandName(code), timeoutMs);
        await sleep(POLL_MS);
      }
      return { code: i32[CTL_RESULT_CODE >> 2]!, value: f64[CTL_RESULT_VALUE >> 3]! };
    } finally {
      Atomics.store(i32, CTL_LOCK >> 2, 0);
    }
  }

  async #lock(deadline: number, code: ControlCode): Promise<void> {
    const i32 = this.#region.i32;
    for (;;) {
      const holder = Atomics.compareExchange(i32, CTL_LOCK >> 2, 0, process.pid);
      if (holder === 0) return;
      // A holder that died mid-command would hold the lock forever: take it over.
      if (!isProcessAlive(holder)) {
        if (Atomics.compareExchange(i32, CTL_LOCK >> 2, holder, process.pid) === holder) return;
        continue;
      }
      if (performance.now() >= deadline) {
        throw new ControlTimeoutError(commandName(code), 'lock');
      }
      await sleep(POLL_MS);
    }
  }
}

export interface PendingCommand {
  code: number;
  server: number;
  args: Float64Array;
  text: string;
}

/** Engine side: polled once per loop turn; a pending command is run, then acknowledged. */
export class ControlServer {
  readonly #region: Region;
  readonly #args = new Float64Array(CTL_ARG_COUNT);

  constructor(region: Region) {
    this.#region = region;
    // A restarted engine must not re-run a command its predecessor acknowledged, nor hang a caller
    // waiting on one it never saw: it answers the pending one, if any, as failed.
    const i32 = region.i32;
    const seq = Atomics.load(i32, CTL_CMD_SEQ >> 2);
    if (Atomics.load(i32, CTL_ACK_SEQ >> 2) !== seq) this.#ack(seq, ControlResult.Failed, 0);
  }

  /** The command waiting to be run, or null. */
  pending(): PendingCommand | null {
    const { i32, f64 } = this.#region;
    const seq = Atomics.load(i32, CTL_CMD_SEQ >> 2);
    if (Atomics.load(i32, CTL_ACK_SEQ >> 2) === seq) return null;
    for (let a = 0; a < CTL_ARG_COUNT; a++) this.#args[a] = f64[(CTL_CMD_ARGS >> 3) + a]!;
    const length = Math.min(i32[CTL_CMD_TEXT_BYTES >> 2]!, CTL_TEXT_CAPACITY);
    return {
      code: i32[CTL_CMD_CODE >> 2]!,
      server: i32[CTL_CMD_SERVER >> 2]!,
      args: this.#args,
      text: decoder.decode(new Uint8Array(this.#region.sab, CTL_CMD_TEXT, length).slice()),
    };
  }

  /** Acknowledges the pending command with a result. */
  complete(code: number, value: number): void {
    this.#ack(Atomics.load(this.#region.i32, CTL_CMD_SEQ >> 2), code, value);
  }

  #ack(seq: number, code: number, value: number): void {
    const { i32, f64 } = this.#region;
    i32[CTL_RESULT_CODE >> 2] = code;
    f64[CTL_RESULT_VALUE >> 3] = value;
    Atomics.store(i32, CTL_ACK_SEQ >> 2, seq);
    shmAddon().futexWake(i32, CTL_ACK_SEQ >> 2, 0x7fffffff);
  }
}

function commandName(code: number): string {
  for (const [name, value] of Object.entries(ControlCommand)) if (value === code) return name;
  return `#${code}`;
}
