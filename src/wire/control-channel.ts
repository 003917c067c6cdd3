/**
 * Control commands (pause, resume, update weights, reset prefix cache) from any API server to the
 * engine, through the control block of the shared region (layout.ts). One command at a time: the
 * caller takes CTL_LOCK with a compare-and-swap, writes the command, bumps CTL_CMD_SEQ and rings the
 * engine's doorbell; the engine runs it between two steps and acknowledges by storing CTL_ACK_SEQ.
 * The caller polls the acknowledgement from its event loop (never blocks it) with a bound, and a lock
 * whose holder died is taken over rather than waited on forever.
 *
 * A caller that gives up must not have its command run later, when nobody waits for it (a pause
 * that lands seconds after the trainer was told it failed would stall generation for good). So the
 * caller writes its deadline (wall clock, shared by every process of the machine) into the last
 * argument, and the engine answers Expired, without running it, a command whose deadline has passed.
 * The engine acknowledges the sequence number it read, never a newer one, so a late acknowledgement
 * cannot be taken for the answer to the next caller's command.
 */

import { RS_ERR_CONTROL_BAD_ARGUMENT, RS_ERR_CONTROL_TIMEOUT } from '../errors.js';
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
  CTL_REPLY_CAPACITY,
  CTL_REPLY_TEXT,
  CTL_REPLY_TEXT_BYTES,
  CTL_RESULT_CODE,
  CTL_RESULT_VALUE,
  CTL_TEXT_CAPACITY,
} from '../shm/layout.js';
import { isProcessAlive } from '../shm/liveness.js';
import { shmAddon } from '../shm/native.js';
import type { Region } from '../shm/region.js';
import { engineDoorbell } from '../shm/region.js';
import {
  casWord,
  loadWord,
  readSlot,
  readWord,
  slotIndex,
  storeWord,
  wordIndex,
  writeSlot,
  writeWord,
} from '../shm/words.js';

export const ControlCommand = {
  Pause: 1,
  Resume: 2,
  UpdateWeights: 3,
  ResetPrefixCache: 4,
  /** The text: the JSON arguments of init_broadcaster (BroadcasterArgs). */
  InitBroadcaster: 5,
  /** The text: {"name", "path", "inplace"}; the value answered: the adapter's id. */
  LoadLora: 6,
  /** The text: the adapter's name. */
  UnloadLora: 7,
} as const;
export type ControlCode = (typeof ControlCommand)[keyof typeof ControlCommand];

export const ControlResult = {
  Ok: 0,
  Failed: 1,
  UnknownCommand: 2,
  /** The engine cannot do it in its present state (reset_prefix_cache while blocks are in use). */
  Refused: 3,
  /** The caller's deadline had passed when the engine saw the command: it was not run. */
  Expired: 4,
  /** What the command names does not exist (a LoRA adapter's files, an adapter not loaded). */
  NotFound: 5,
} as const;

/**
 * An engine's refusal of a command with a result other than Failed (NotFound, Refused) and the
 * reason, which the caller's error carries (the reply text).
 */
export class ControlRefusal extends Error {
  readonly result: number;

  constructor(result: number, message: string) {
    super(message);
    this.result = result;
  }
}

/** Arguments a command may carry; the last slot holds the caller's deadline. */
export const CONTROL_ARG_COUNT = CTL_ARG_COUNT - 1;
const DEADLINE_ARG = CTL_ARG_COUNT - 1;
/** f64 index of the command's argument 0 (argument a at FIRST_ARG + a). */
const FIRST_ARG = slotIndex(CTL_CMD_ARGS);
const POLL_MS = 1;
const encoder = new TextEncoder();
const decoder = new TextDecoder();

export interface ControlReply {
  code: number;
  value: number;
  /** The engine's words about the result: why it failed (empty when it said nothing). */
  text: string;
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
    if (args.length > CONTROL_ARG_COUNT) {
      throw new RS_ERR_CONTROL_BAD_ARGUMENT(
        commandName(code),
        `${args.length} arguments, at most ${CONTROL_ARG_COUNT}`,
      );
    }
    const bytes = text === null ? new Uint8Array(0) : encoder.encode(text);
    if (bytes.length > CTL_TEXT_CAPACITY) {
      throw new RS_ERR_CONTROL_BAD_ARGUMENT(
        commandName(code),
        `a ${bytes.length}-byte text, at most ${CTL_TEXT_CAPACITY}`,
      );
    }
    const { i32, f64 } = this.#region;
    const deadline = performance.now() + timeoutMs;
    await this.#lock(deadline, code, timeoutMs);
    try {
      // A caller that gave up left its command unacknowledged: the engine may be reading its fields
      // right now, so they are not overwritten before the engine has answered it (Expired).
      await this.#waitForAck(loadWord(i32, CTL_CMD_SEQ), deadline, code, timeoutMs);
      writeWord(i32, CTL_CMD_CODE, code);
      writeWord(i32, CTL_CMD_SERVER, this.#server);
      for (let a = 0; a < CONTROL_ARG_COUNT; a++) f64[FIRST_ARG + a] = args[a] ?? 0;
      f64[FIRST_ARG + DEADLINE_ARG] = Date.now() + (deadline - performance.now());
      new Uint8Array(this.#region.sab, CTL_CMD_TEXT, bytes.length).set(bytes);
      writeWord(i32, CTL_CMD_TEXT_BYTES, bytes.length);
      const seq = (loadWord(i32, CTL_CMD_SEQ) + 1) | 0;
      storeWord(i32, CTL_CMD_SEQ, seq);
      engineDoorbell(this.#region).wake();
      await this.#waitForAck(seq, deadline, code, timeoutMs);
      const length = Math.min(readWord(i32, CTL_REPLY_TEXT_BYTES), CTL_REPLY_CAPACITY);
      const reply = new Uint8Array(this.#region.sab, CTL_REPLY_TEXT, length).slice();
      return {
        code: readWord(i32, CTL_RESULT_CODE),
        value: readSlot(f64, CTL_RESULT_VALUE),
        text: decoder.decode(reply),
      };
    } finally {
      storeWord(i32, CTL_LOCK, 0);
    }
  }

  async #waitForAck(seq: number, deadline: number, code: number, timeoutMs: number): Promise<void> {
    const i32 = this.#region.i32;
    while (loadWord(i32, CTL_ACK_SEQ) !== seq) {
      if (performance.now() >= deadline)
        throw new RS_ERR_CONTROL_TIMEOUT(commandName(code), timeoutMs);
      await sleep(POLL_MS);
    }
  }

  async #lock(deadline: number, code: ControlCode, timeoutMs: number): Promise<void> {
    const i32 = this.#region.i32;
    for (;;) {
      const holder = casWord(i32, CTL_LOCK, 0, process.pid);
      if (holder === 0) return;
      // A holder that died mid-command would hold the lock forever: take it over.
      if (!isProcessAlive(holder)) {
        if (casWord(i32, CTL_LOCK, holder, process.pid) === holder) return;
        continue;
      }
      if (performance.now() >= deadline) {
        throw new RS_ERR_CONTROL_TIMEOUT(`${commandName(code)} (waiting for the lock)`, timeoutMs);
      }
      await sleep(POLL_MS);
    }
  }
}

export interface PendingCommand {
  code: number;
  server: number;
  /** The caller's arguments (CONTROL_ARG_COUNT of them; missing ones are 0). */
  args: Float64Array;
  text: string;
}

/** Engine side: polled once per loop turn; a pending command is run, then acknowledged. */
export class ControlServer {
  readonly #region: Region;
  readonly #args = new Float64Array(CONTROL_ARG_COUNT);
  readonly #command: PendingCommand = { code: 0, server: 0, args: this.#args, text: '' };
  /** The sequence number of the command pending() handed out, acknowledged by complete(). */
  #taken = 0;

  constructor(region: Region) {
    this.#region = region;
    // A restarted engine must not re-run a command its predecessor acknowledged, nor hang a caller
    // waiting on one it never saw: it answers the pending one, if any, as failed.
    const i32 = region.i32;
    const seq = loadWord(i32, CTL_CMD_SEQ);
    if (loadWord(i32, CTL_ACK_SEQ) !== seq) this.#ack(seq, ControlResult.Failed, 0);
  }

  /** Whether a command waits to be run (cheap: two loads, no object). */
  hasPending(): boolean {
    const i32 = this.#region.i32;
    return loadWord(i32, CTL_ACK_SEQ) !== loadWord(i32, CTL_CMD_SEQ);
  }

  /**
   * The command waiting to be run, or null. One whose caller's deadline has passed is answered
   * Expired here, and null returned. The returned object is reused by the next call.
   */
  pending(): PendingCommand | null {
    const { i32, f64 } = this.#region;
    const seq = loadWord(i32, CTL_CMD_SEQ);
    if (loadWord(i32, CTL_ACK_SEQ) === seq) return null;
    if (f64[FIRST_ARG + DEADLINE_ARG]! < Date.now()) {
      this.#ack(seq, ControlResult.Expired, 0);
      return null;
    }
    this.#taken = seq;
    for (let a = 0; a < CONTROL_ARG_COUNT; a++) this.#args[a] = f64[FIRST_ARG + a]!;
    const length = Math.min(readWord(i32, CTL_CMD_TEXT_BYTES), CTL_TEXT_CAPACITY);
    const command = this.#command;
    command.code = readWord(i32, CTL_CMD_CODE);
    command.server = readWord(i32, CTL_CMD_SERVER);
    command.text =
      length === 0
        ? ''
        : decoder.decode(new Uint8Array(this.#region.sab, CTL_CMD_TEXT, length).slice());
    return command;
  }

  /** Acknowledges the command pending() returned last, with a result (and why, for a failure). */
  complete(code: number, value: number, text = ''): void {
    this.#ack(this.#taken, code, value, text);
  }

  #ack(seq: number, code: number, value: number, text = ''): void {
    const { i32, f64 } = this.#region;
    writeWord(i32, CTL_RESULT_CODE, code);
    writeSlot(f64, CTL_RESULT_VALUE, value);
    const bytes = new Uint8Array(this.#region.sab, CTL_REPLY_TEXT, CTL_REPLY_CAPACITY);
    // encodeInto stops before a character that does not fit: a long reason is cut, never torn.
    writeWord(i32, CTL_REPLY_TEXT_BYTES, encoder.encodeInto(text, bytes).written ?? 0);
    storeWord(i32, CTL_ACK_SEQ, seq);
    shmAddon().futexWake(i32, wordIndex(CTL_ACK_SEQ), 0x7fffffff);
  }
}

export function commandName(code: number): string {
  for (const [name, value] of Object.entries(ControlCommand)) if (value === code) return name;
  return `#${code}`;
}
