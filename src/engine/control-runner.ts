import { NOTE_TEXT_CAPACITY } from '../shm/layout.js';
import { type LoraAdapter, readBroadcasterArgs, readLoraArgs } from '../wire/admin-args.js';
import {
  ControlCommand,
  ControlRefusal,
  ControlResult,
  type ControlServer,
} from '../wire/control-channel.js';
import type { EngineCore } from './engine-core.js';
import { LoraTable } from './lora-table.js';

/**
 * The engine side of the control plane, for the core loop: runs the pending command on the
 * engine (pause, resume, weights, prefix cache, the weight broadcaster, LoRA adapters) and
 * acknowledges it, now or once the engine's promise settles; the loop goes on stepping meanwhile
 * and takes no other command. It keeps the LoRA table (lora-table.ts) and makes the engine note the
 * API servers read from the engine's own note and that table.
 */

/** #execute's answers that are not a weight version. */
const REFUSED = -1;
const UNKNOWN = -2;

export interface ControlRunnerEvents {
  /** A command was answered: the core loop publishes its stats first. */
  answered(): void;
  /** A command threw (it was answered Failed; the engine goes on). */
  failed(code: number, error: Error): void;
}

export class ControlRunner {
  readonly #server: ControlServer;
  readonly #engine: EngineCore;
  readonly #events: ControlRunnerEvents;
  readonly #lora = new LoraTable();
  /** Bumped on every change of the LoRA table (the note is remade then). */
  #loraVersion = 0;
  /** A command the engine answers later (a bridge's utility call) is being carried out. */
  #inFlight = false;
  /** The note last made, and what it was made from. */
  #note = '';
  #engineNote: string | undefined = undefined;
  #noteVersion = -1;

  constructor(server: ControlServer, engine: EngineCore, events: ControlRunnerEvents) {
    this.#server = server;
    this.#engine = engine;
    this.#events = events;
  }

  /** A command waits and none is being carried out. */
  waiting(): boolean {
    return !this.#inFlight && this.#server.hasPending();
  }

  /** Runs the pending command, if any, and acknowledges it; nothing it does throws out. */
  run(): void {
    if (this.#inFlight) return;
    const command = this.#server.pending();
    if (command === null) return;
    const code = command.code;
    let answer: number | Promise<number>;
    try {
      answer = this.#execute(code, command.args, command.text);
    } catch (error) {
      this.#complete(code, error as Error, 0);
      return;
    }
    if (typeof answer === 'number') {
      this.#complete(code, null, answer);
      return;
    }
    this.#inFlight = true;
    answer.then(
      (value) => this.#complete(code, null, value),
      (error: unknown) => this.#complete(code, error as Error, 0),
    );
  }

  /** The engine note: the engine's own, with the LoRA table; remade only when either changed. */
  noteText(): string {
    const own = this.#engine.note;
    if (own === this.#engineNote && this.#noteVersion === this.#loraVersion) return this.#note;
    this.#engineNote = own;
    this.#noteVersion = this.#loraVersion;
    this.#note = makeNote(own, this.#lora.list());
    return this.#note;
  }

  #complete(code: number, error: Error | null, value: number): void {
    this.#inFlight = false;
    let result: number = ControlResult.Ok;
    if (error instanceof ControlRefusal) result = error.result;
    else if (error !== null) {
      result = ControlResult.Failed;
      this.#events.failed(code, error);
    } else if (value < 0) {
      result = value === REFUSED ? ControlResult.Refused : ControlResult.UnknownCommand;
    }
    // Stats first: a caller that reads the stats block once answered sees the command's effect.
    this.#events.answered();
    this.#server.complete(result, Math.max(value, 0), error?.message ?? '');
  }

  /**
   * Carries out one command; returns (or resolves to) the weight version now live (an adapter's id
   * for LoadLora), or REFUSED / UNKNOWN.
   */
  #execute(code: number, args: Float64Array, text: string): number | Promise<number> {
    const engine = this.#engine;
    const live = (): number => engine.weightVersion;
    switch (code) {
      case ControlCommand.Pause:
        return after(engine.pause(), live);
      case ControlCommand.Resume:
        return after(engine.resume(), live);
      case ControlCommand.UpdateWeights:
        // args[0]: the version to load, or -1 for "the live one + 1" (no manifest); the text: the
        // weight directory, for an engine that reads it itself.
        return engine.updateWeights(
          args[0]! >= 0 ? args[0]! : undefined,
          text === '' ? undefined : text,
        );
      case ControlCommand.ResetPrefixCache:
        return after(engine.resetPrefixCache(), (done) => (done ? live() : REFUSED));
      case ControlCommand.InitBroadcaster:
        if (engine.initBroadcaster === undefined) return UNKNOWN;
        return after(engine.initBroadcaster(readBroadcasterArgs(text)), live);
      case ControlCommand.LoadLora:
        return this.#loadLora(text);
      case ControlCommand.UnloadLora:
        return this.#unloadLora(text);
      default:
        return UNKNOWN;
    }
  }

  /** Loads an adapter through the engine and registers it; answers its id. */
  #loadLora(text: string): number | Promise<number> {
    const engine = this.#engine;
    if (engine.loadLora === undefined) {
      throw new ControlRefusal(ControlResult.Refused, 'this engine does not serve LoRA adapters');
    }
    const args = readLoraArgs(text);
    const adapter = this.#lora.prepare(args);
    const adapters = this.#lora.list().filter((a) => a.name !== adapter.name);
    adapters.push(adapter);
    if (Buffer.byteLength(makeNote(engine.note, adapters)) > NOTE_TEXT_CAPACITY) {
      throw new ControlRefusal(
        ControlResult.Refused,
        `the loaded adapters' names and paths would not fit the engine note (${NOTE_TEXT_CAPACITY} bytes): unload one first`,
      );
    }
    return after(engine.loadLora(adapter, args.inplace), () => {
      this.#lora.commit(adapter);
      this.#loraVersion++;
      return adapter.id;
    });
  }

  #unloadLora(name: string): number | Promise<number> {
    const adapter = this.#lora.get(name);
    return after(this.#engine.unloadLora?.(adapter), () => {
      this.#lora.remove(name);
      this.#loraVersion++;
      return adapter.id;
    });
  }
}

/** The engine's own note (JSON, or none) with the LoRA adapters; '' when there is nothing to say. */
function makeNote(own: string | undefined, adapters: readonly LoraAdapter[]): string {
  const said = own !== undefined && own !== '';
  if (!said && adapters.length === 0) return '';
  const base = said ? (JSON.parse(own) as object) : {};
  return JSON.stringify({ ...base, adapters });
}

/** `then(value)` now for a plain value, once settled for a promise. */
function after<T>(value: T | Promise<T>, then: (v: T) => number): number | Promise<number> {
  return value instanceof Promise ? value.then(then) : then(value);
}
