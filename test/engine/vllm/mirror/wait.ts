/** Bounded waits: every wait of the mirror ends, with an error naming what did not happen. */

export class MirrorTimeoutError extends Error {
  constructor(what: string, ms: number) {
    super(`mirror: no ${what} within ${ms} ms`);
    this.name = 'MirrorTimeoutError';
  }
}

/** `p`, or a MirrorTimeoutError after `ms`; a late rejection of `p` is not left unhandled. */
export async function withTimeout<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  p.catch(() => {});
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new MirrorTimeoutError(what, ms)), ms);
  });
  try {
    return await Promise.race([p, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Sends one at a time: a zeromq socket refuses a send while another is in flight. */
export class SendQueue {
  #tail: Promise<void> = Promise.resolve();

  constructor(readonly send: (frames: Buffer[]) => Promise<void>) {}

  push(frames: Buffer[]): Promise<void> {
    const next = this.#tail.then(() => this.send(frames));
    this.#tail = next.catch(() => {});
    return next;
  }
}
