/**
 * At most `perTurn` request steps per turn of the event loop, the rest in later turns, in order.
 *
 * Why: libuv accepts one connection per loop turn (Node 20: one accept4 per epoll wakeup, seen with
 * strace), so a burst of N new clients drains from the listen queue over N turns. With every step
 * of every request run as soon as its I/O completed, a turn of the 128-request burst in
 * bench/router.ts took ~5-9 ms (connecting to an instance costs ~0.6 ms of syscalls here, sending
 * the answer more), and a health checker's new connection waited ~600 ms behind the queue while
 * the loop itself never lagged more than 50 ms. Short turns drain the queue, and /health, at the
 * pace of the I/O alone.
 *
 * A step is a piece of the router's own work between two awaits (a call sent, an answer written);
 * reading sockets is not gated. A turn that accepted a connection (noteAccept) takes no step, up
 * to HOLD_TURNS turns in a row: while clients queue to connect, the loop takes them in first, as
 * nginx's multi_accept does, and a burst's queue drains in turns of a fraction of a millisecond. Waiters wait in a ring (a power-of-two array, doubled when full):
 *
 *   #ring: [ free | head → oldest waiter ... newest | free ]   count = waiters, wraps at the end
 */
/**
 * Turns in a row a stream of new connections may hold steps back: one turn in 9 still takes its
 * steps, so clients that connect for every request slow the steps, never stop them.
 */
const HOLD_TURNS = 8;

export class TurnGate {
  readonly #perTurn: number;
  #ring: ((() => void) | null)[] = new Array(64).fill(null);
  #head = 0;
  #count = 0;
  /** Steps taken in this turn. */
  #used = 0;
  #armed = false;
  /** A connection was accepted since the last turn. */
  #accepted = false;
  /** Turns in a row that took no step for accepting. */
  #held = 0;

  constructor(perTurn: number) {
    if (!Number.isInteger(perTurn) || perTurn < 1)
      throw new RangeError('steps per turn must be an integer >= 1');
    this.#perTurn = perTurn;
  }

  /** Resolves when this step may run: at once while this turn has room, else in a later turn. */
  pass(): Promise<void> | undefined {
    if (this.#used < this.#perTurn && this.#count === 0) {
      this.#used++;
      this.#arm();
      return undefined;
    }
    return new Promise<void>((resolve) => {
      this.#push(resolve);
      this.#arm();
    });
  }

  /** The server accepted a connection (its 'connection' event). */
  noteAccept(): void {
    this.#accepted = true;
    this.#arm();
  }

  /** Steps waiting for a turn. */
  get waiting(): number {
    return this.#count;
  }

  #push(release: () => void): void {
    let ring = this.#ring;
    if (this.#count === ring.length) {
      const grown: ((() => void) | null)[] = new Array(ring.length * 2).fill(null);
      for (let i = 0; i < this.#count; i++)
        grown[i] = ring[(this.#head + i) & (ring.length - 1)] ?? null;
      this.#ring = ring = grown;
      this.#head = 0;
    }
    ring[(this.#head + this.#count++) & (ring.length - 1)] = release;
  }

  #arm(): void {
    if (this.#armed) return;
    this.#armed = true;
    setImmediate(this.#turn);
  }

  /**
   * Runs in the check phase, once per turn while steps are counted or waiting: a new turn's room.
   * A released step's continuation runs right after (Node drains microtasks after each immediate).
   */
  readonly #turn = (): void => {
    this.#armed = false;
    if (this.#accepted && this.#held < HOLD_TURNS) {
      // No room until a turn without an accept, or HOLD_TURNS turns from now.
      this.#accepted = false;
      this.#held++;
      this.#used = this.#perTurn;
      this.#arm();
      return;
    }
    this.#accepted = false;
    this.#held = 0;
    this.#used = 0;
    const ring = this.#ring;
    while (this.#used < this.#perTurn && this.#count > 0) {
      const release = ring[this.#head] as () => void;
      ring[this.#head] = null;
      this.#head = (this.#head + 1) & (ring.length - 1);
      this.#count--;
      this.#used++;
      release();
    }
    if (this.#used > 0) this.#arm();
  };
}
