import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';
import { RS_ERR_VLLM_HANDSHAKE } from '../../../errors.js';
import type { HeadlessLog } from './engine.js';

/**
 * vLLM's DP process group, modelled (docs/vllm-protocol.md, "Data parallelism"). vLLM's MoE DP
 * ranks form a gloo group at the DP master address (`ParallelConfig.stateless_init_dp_group`: a
 * TCPStore on rank 0, every rank blocking until all `data_parallel_size` have joined), and every
 * forward of every rank is a collective over the EP group, so the ranks step in lockstep. Here rank
 * 0 listens on TCP at that address and the other ranks connect to it (retrying until it is there,
 * within the group's init timeout); each step, every running rank reports (has unfinished
 * requests, its modelled step time) and waits until every rank of the group has reported: the
 * step then lasts the slowest rank's time (the all-to-all paces the group), and on the wave's sync
 * steps (step 1 and every dp_sync_interval-th, rank 0 counts them for the group) the OR of
 * "unfinished" is vLLM's `_has_global_unfinished_reqs`. A rank that has work while the others are
 * not stepping waits there, as a vLLM rank blocks in its first collective when the frontend does
 * not wake the others with START_DP_WAVE.
 *
 * Unlike a gloo group, this one survives a departure: a rank whose connection drops leaves (the
 * collective goes on with the others, logged), a restarted rank joins again, and while rank 0 is
 * gone the others reconnect to it and their collectives wait (logged). A rank that joins while the
 * group is in a wave is told to run, and one that joins running wakes the others, so that the
 * group's ranks are in the same wave again.
 *
 * A rank that joins while rank 0 still holds a connection of that rank replaces it (the newest
 * wins: a restarted rank must not wait for its dead predecessor's socket to time out), logged as an
 * error since two live processes of one rank are a misconfiguration; the replaced connection is
 * told so (REFUSE "replaced") and its rank stops reconnecting and closes its group: its pending
 * step settles with null (the engine then dies, as a vLLM rank whose collective fails).
 *
 * Frames are fixed-size binary, little-endian, one type byte first:
 *   JOIN   1  rank u16, size u16, sync interval u32, running u8      rank > 0 -> rank 0
 *   ACK    2  running u8                                            rank 0 -> rank (group formed)
 *   REFUSE 3  reason u8                                             rank 0 -> rank, then close
 *   REPORT 4  unfinished u8, step ms f64                            rank > 0 -> rank 0
 *   RESULT 5  any unfinished u8, sync u8, step ms f64               rank 0 -> every rank
 *   WAKE   6                                                        rank 0 -> rank
 * The per-step frames are written from buffers reused every step (a rank reports again only after
 * the previous round's RESULT, so a buffer is never rewritten while a socket still holds it).
 */

/** torch's default timeout for a gloo group (30 min): how long the group may take to form. */
export const DP_GROUP_INIT_TIMEOUT_MS = 30 * 60_000;
const RETRY_MS = 250;

const JOIN = 1;
const ACK = 2;
const REFUSE = 3;
const REPORT = 4;
const RESULT = 5;
const WAKE = 6;
/** Bytes of each frame, by type. */
const FRAME_BYTES = [0, 10, 2, 2, 10, 11, 1];

const REFUSALS = [
  '',
  'its data_parallel_size differs from rank 0',
  'its rank is not in [1, data_parallel_size)',
  'another process joined as this rank and replaced it',
];
/** REFUSE reason: a newer connection of the same rank took this one's place. */
const REPLACED = 3;

/** One step through the group, as every rank sees it. */
export interface DpStepResult {
  /** The OR over the ranks of "has unfinished requests" (meaningful on a sync step). */
  anyUnfinished: boolean;
  /** Whether this step was one of the wave's sync steps (the all-reduce ran). */
  sync: boolean;
  /** The step's time: the slowest rank's modelled ms. */
  ms: number;
}

export interface DpGroup {
  readonly rank: number;
  readonly size: number;
  /**
   * Reports this rank's step and resolves when every rank of the group has reported; resolves
   * with null once the group is closed (a step pending at close() included, and any step after
   * it). The result object is reused: read it before the next step. One step at a time.
   */
  step(unfinished: boolean, ms: number): Promise<DpStepResult | null>;
  /** Whether this rank's step has reported and waits for the group's result. */
  readonly waiting: boolean;
  /**
   * Rank 0: the ranks (0 included) whose report the current round still lacks, in rank order;
   * another rank: null (only rank 0 knows). Rank 0 waiting for a rank that is not stepping is
   * the collective a vLLM rank blocks in.
   */
  waitingFor(): number[] | null;
  /** Whether this rank is in a wave, asked when a rank joins. */
  runningProbe: () => boolean;
  /** Called when the group asks this rank to run (a rank joined during a wave). */
  onWake: (() => void) | null;
  /** Whether close() ran, by this rank or because another process of this rank replaced it. */
  readonly closed: boolean;
  close(): void;
}

export interface DpGroupOptions {
  rank: number;
  size: number;
  /** The group's address (data_parallel_master_ip and the port vLLM pops, dp-wave.ts dpGroupPort). */
  host: string;
  port: number;
  /** dp_sync_interval: rank 0 counts the sync steps for the group. */
  syncInterval: number;
  log: HeadlessLog;
  /** How long the group may take to form (every rank joined); default torch's 30 min. */
  initTimeoutMs?: number;
  /** Between connection attempts of a rank > 0. */
  retryMs?: number;
}

/** Joins (rank > 0) or hosts (rank 0) the group; resolves once all `size` ranks are in it. */
export async function openDpGroup(o: DpGroupOptions): Promise<DpGroup> {
  if (o.rank === 0) {
    const hub = new DpGroupHub(o);
    await hub.formed;
    return hub;
  }
  const member = new DpGroupMember(o);
  await member.formed;
  return member;
}

/** Accumulates stream chunks into whole frames. */
class FrameReader {
  #buf = Buffer.alloc(64);
  #len = 0;

  /** Calls `frame(type, buf, at)` for every whole frame; false on an unknown type. */
  push(chunk: Buffer, frame: (type: number, buf: Buffer, at: number) => void): boolean {
    let buf = chunk;
    let len = chunk.length;
    if (this.#len > 0) {
      if (this.#buf.length < this.#len + chunk.length) {
        const grown = Buffer.alloc(this.#len + chunk.length);
        this.#buf.copy(grown, 0, 0, this.#len);
        this.#buf = grown;
      }
      chunk.copy(this.#buf, this.#len);
      this.#len += chunk.length;
      buf = this.#buf;
      len = this.#len;
    }
    let at = 0;
    while (at < len) {
      const type = buf[at] as number;
      const n = FRAME_BYTES[type] ?? 0;
      if (n === 0) return false;
      if (at + n > len) break;
      frame(type, buf, at);
      at += n;
    }
    const rest = len - at;
    if (rest > 0) {
      if (buf === this.#buf) this.#buf.copy(this.#buf, 0, at, len);
      else {
        if (this.#buf.length < rest) this.#buf = Buffer.alloc(rest);
        chunk.copy(this.#buf, 0, at, len);
      }
    }
    this.#len = rest;
    return true;
  }
}

function tune(socket: Socket): void {
  socket.setNoDelay(true);
  socket.setKeepAlive(true, 5_000);
}

/**
 * What both sides share: the wake hand-off (a wake that comes before onWake is set is kept and
 * delivered when it is set) and the running probe.
 */
abstract class GroupSide {
  runningProbe: () => boolean = () => false;
  #onWake: (() => void) | null = null;
  #wakePending = false;

  get onWake(): (() => void) | null {
    return this.#onWake;
  }

  set onWake(fn: (() => void) | null) {
    this.#onWake = fn;
    if (fn !== null && this.#wakePending) {
      this.#wakePending = false;
      fn();
    }
  }

  /** The group asks this rank to run. */
  protected wake(): void {
    if (this.#onWake === null) this.#wakePending = true;
    else this.#onWake();
  }
}

interface Member {
  rank: number;
  socket: Socket;
  reported: boolean;
  unfinished: boolean;
  ms: number;
}

/** Rank 0: the group's rendezvous and the place each step's reports meet. */
class DpGroupHub extends GroupSide implements DpGroup {
  readonly rank = 0;
  readonly size: number;
  readonly formed: Promise<void>;
  readonly #o: DpGroupOptions;
  readonly #log: HeadlessLog;
  readonly #server: Server;
  readonly #members = new Map<number, Member>();
  readonly #result: DpStepResult = { anyUnfinished: false, sync: false, ms: 0 };
  readonly #resultFrame = Buffer.alloc(FRAME_BYTES[RESULT] as number);
  /** Connections replaced by a newer one of their rank, told so and closing. */
  readonly #replaced = new Set<Socket>();
  #isFormed = false;
  #closed = false;
  /** Steps of the current wave, counted for the group. */
  #round = 0;
  #local: {
    unfinished: boolean;
    ms: number;
    resolve: (r: DpStepResult | null) => void;
  } | null = null;
  /** Joiners that said they were running before the group formed. */
  #joinedRunning = false;
  #formedNow: () => void = () => {};

  constructor(o: DpGroupOptions) {
    super();
    this.#o = o;
    this.#log = o.log;
    this.size = o.size;
    this.#server = createServer((socket) => this.#accept(socket));
    const timeoutMs = o.initTimeoutMs ?? DP_GROUP_INIT_TIMEOUT_MS;
    this.formed = new Promise<void>((resolve, reject) => {
      const fail = (error: Error): void => {
        clearTimeout(timer);
        this.close();
        reject(error);
      };
      const timer = setTimeout(() => {
        fail(
          new RS_ERR_VLLM_HANDSHAKE(
            `the DP group did not form within ${timeoutMs} ms: ` +
              `${this.#members.size + 1} of ${o.size} ranks joined at ${o.host}:${o.port}`,
          ),
        );
      }, timeoutMs);
      timer.unref();
      this.#formedNow = () => {
        clearTimeout(timer);
        resolve();
      };
      // vLLM's rank 0 hosts a TCPStore on every interface; this listens on the master address
      // itself, or on every interface when that address is not this host's.
      const listen = (host: string | undefined): void => {
        const onError = (error: NodeJS.ErrnoException): void => {
          if (error.code === 'EADDRNOTAVAIL' && host !== undefined) {
            this.#log.warn(
              { address: o.host },
              'DP group: the master address is not on this host; rank 0 listens on every interface',
            );
            listen(undefined);
            return;
          }
          fail(
            new RS_ERR_VLLM_HANDSHAKE(
              `rank 0 cannot listen for the DP group at ${o.host}:${o.port} (${error.code ?? error.message})`,
            ),
          );
        };
        this.#server.once('error', onError);
        this.#server.listen({ host, port: o.port }, () => {
          this.#server.off('error', onError);
          this.#server.on('error', (error) =>
            this.#log.error({ err: error }, 'DP group: rank 0 socket failed'),
          );
          this.#log.info(
            { dp_size: o.size, address: `${o.host}:${o.port}` },
            'DP group: rank 0 waits for the other ranks',
          );
          if (o.size === 1) this.#form();
        });
      };
      listen(o.host);
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  get waiting(): boolean {
    return this.#local !== null;
  }

  waitingFor(): number[] {
    // A rank that left is not waited for: the collective goes on with the others.
    const missing = this.#local === null ? [0] : [];
    for (const m of this.#members.values()) if (!m.reported) missing.push(m.rank);
    return missing.sort((a, b) => a - b);
  }

  step(unfinished: boolean, ms: number): Promise<DpStepResult | null> {
    if (this.#closed) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.#local = { unfinished, ms, resolve };
      this.#complete();
    });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#server.close();
    for (const m of this.#members.values()) m.socket.destroy();
    this.#members.clear();
    for (const socket of this.#replaced) socket.destroy();
    this.#replaced.clear();
    const local = this.#local;
    this.#local = null;
    local?.resolve(null);
  }

  #accept(socket: Socket): void {
    tune(socket);
    const reader = new FrameReader();
    let member: Member | null = null;
    socket.on('data', (chunk: Buffer) => {
      const ok = reader.push(chunk, (type, buf, at) => {
        if (type === JOIN && member === null) member = this.#join(socket, buf, at);
        else if (this.#replaced.has(socket)) {
          // Replaced by a newer connection of its rank: told so, closing; what it sends is moot.
        } else if (
          type === REPORT &&
          member !== null &&
          this.#members.get(member.rank) === member
        ) {
          member.reported = true;
          member.unfinished = buf[at + 1] === 1;
          member.ms = buf.readDoubleLE(at + 2);
          this.#complete();
        } else socket.destroy();
      });
      if (!ok) socket.destroy();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      this.#replaced.delete(socket);
      const m = member as Member | null;
      if (m === null || this.#members.get(m.rank) !== m || this.#closed) return;
      this.#members.delete(m.rank);
      if (!this.#isFormed) {
        this.#log.info({ dp_rank: m.rank }, 'DP group: a rank left before the group formed');
        return;
      }
      this.#log.warn(
        { dp_rank: m.rank, dp_ranks_left: this.#members.size + 1 },
        'DP group: a rank left; the collectives go on with the others',
      );
      this.#complete();
    });
  }

  #join(socket: Socket, buf: Buffer, at: number): Member | null {
    const rank = buf.readUInt16LE(at + 1);
    const size = buf.readUInt16LE(at + 3);
    const interval = buf.readUInt32LE(at + 5);
    const running = buf[at + 9] === 1;
    const reason = size !== this.size ? 1 : rank < 1 || rank >= this.size ? 2 : 0;
    if (reason !== 0) {
      this.#log.error(
        { dp_rank: rank, dp_size: size, why: REFUSALS[reason] },
        'DP group: refused a rank',
      );
      socket.end(Buffer.from([REFUSE, reason]));
      return null;
    }
    if (interval !== this.#o.syncInterval) {
      this.#log.warn(
        { dp_rank: rank, its_interval: interval, dp_sync_interval: this.#o.syncInterval },
        "DP group: a rank's --dp-sync-interval differs; rank 0's decides the sync steps",
      );
    }
    const old = this.#members.get(rank);
    if (old !== undefined) {
      // The newest connection wins, so that a restarted rank replaces its predecessor even before
      // that one's socket closed (a crashed host sends no FIN). Two live processes of one rank are
      // a misconfiguration: the replaced one is told and stops (it reconnects no more).
      this.#log.error(
        { dp_rank: rank },
        `DP group: rank ${rank} joined again while a connection of that rank is still open; the new ` +
          'one replaces it (a restart before the old socket closed, or two processes started as ' +
          'the same rank: the replaced one stops)',
      );
      this.#members.delete(rank);
      this.#replaced.add(old.socket);
      old.socket.end(Buffer.from([REFUSE, REPLACED]));
      // A dead peer never answers the FIN: do not keep its socket for the keepalive to find.
      setTimeout(() => old.socket.destroy(), 1_000).unref();
    }
    const m: Member = { rank, socket, reported: false, unfinished: false, ms: 0 };
    this.#members.set(rank, m);
    if (!this.#isFormed) {
      this.#joinedRunning ||= running;
      this.#log.info(
        { dp_rank: rank, dp_ranks: this.#members.size + 1, dp_size: this.size },
        'DP group: a rank joined; the group forms once every rank has',
      );
      if (this.#members.size === this.size - 1) this.#form();
      return m;
    }
    this.#log.info({ dp_rank: rank, dp_ranks: this.#members.size + 1 }, 'DP group: a rank joined');
    const midWave = this.#round > 0 || this.#anyReported() || this.runningProbe();
    socket.write(Buffer.from([ACK, midWave || running ? 1 : 0]));
    if (running && !midWave) this.#wakeAll(m);
    return m;
  }

  #form(): void {
    this.#isFormed = true;
    this.#log.info({ dp_size: this.size }, 'DP group formed');
    const running = this.#joinedRunning;
    for (const m of this.#members.values()) m.socket.write(Buffer.from([ACK, running ? 1 : 0]));
    if (running) this.wake();
    this.#formedNow();
  }

  #anyReported(): boolean {
    if (this.#local !== null) return true;
    for (const m of this.#members.values()) if (m.reported) return true;
    return false;
  }

  /** A rank joined in a wave the group had left: every rank runs again. */
  #wakeAll(except: Member): void {
    for (const m of this.#members.values()) if (m !== except) m.socket.write(Buffer.from([WAKE]));
    this.wake();
  }

  /** Completes the round when every rank of the group has reported. */
  #complete(): void {
    const local = this.#local;
    if (local === null || !this.#isFormed) return;
    let any = local.unfinished;
    let ms = local.ms;
    for (const m of this.#members.values()) {
      if (!m.reported) return;
      any ||= m.unfinished;
      if (m.ms > ms) ms = m.ms;
    }
    this.#round++;
    const sync = this.#round === 1 || this.#round % this.#o.syncInterval === 0;
    if (sync && !any) this.#round = 0;
    const frame = this.#resultFrame;
    frame[0] = RESULT;
    frame[1] = any ? 1 : 0;
    frame[2] = sync ? 1 : 0;
    frame.writeDoubleLE(ms, 3);
    for (const m of this.#members.values()) {
      m.reported = false;
      m.socket.write(frame);
    }
    const r = this.#result;
    r.anyUnfinished = any;
    r.sync = sync;
    r.ms = ms;
    this.#local = null;
    local.resolve(r);
  }
}

/** A rank > 0: connects to rank 0, and again whenever the connection drops. */
class DpGroupMember extends GroupSide implements DpGroup {
  readonly rank: number;
  readonly size: number;
  readonly formed: Promise<void>;
  readonly #o: DpGroupOptions;
  readonly #log: HeadlessLog;
  readonly #result: DpStepResult = { anyUnfinished: false, sync: false, ms: 0 };
  readonly #report = Buffer.alloc(FRAME_BYTES[REPORT] as number);
  #socket: Socket | null = null;
  /** ACKed on the current connection: reports may go. */
  #acked = false;
  #everFormed = false;
  #closed = false;
  #timer: NodeJS.Timeout | null = null;
  /** The step waiting for its RESULT (re-sent to a new rank 0). */
  #pending: ((r: DpStepResult | null) => void) | null = null;
  #settle: { resolve: () => void; reject: (e: Error) => void } | null = null;
  #outageLogged = false;
  #refusedLogged = false;

  constructor(o: DpGroupOptions) {
    super();
    this.#o = o;
    this.#log = o.log;
    this.rank = o.rank;
    this.size = o.size;
    this.formed = new Promise<void>((resolve, reject) => {
      this.#settle = { resolve, reject };
    });
    const timeoutMs = o.initTimeoutMs ?? DP_GROUP_INIT_TIMEOUT_MS;
    const deadline = setTimeout(() => {
      this.#fail(
        new RS_ERR_VLLM_HANDSHAKE(
          `rank ${o.rank} did not join the DP group at ${o.host}:${o.port} within ${timeoutMs} ms`,
        ),
      );
    }, timeoutMs);
    deadline.unref();
    void this.formed.then(
      () => clearTimeout(deadline),
      () => clearTimeout(deadline),
    );
    this.#connect();
  }

  get closed(): boolean {
    return this.#closed;
  }

  get waiting(): boolean {
    return this.#pending !== null;
  }

  waitingFor(): null {
    return null;
  }

  step(unfinished: boolean, ms: number): Promise<DpStepResult | null> {
    if (this.#closed) return Promise.resolve(null);
    const r = this.#report;
    r[0] = REPORT;
    r[1] = unfinished ? 1 : 0;
    r.writeDoubleLE(ms, 2);
    return new Promise((resolve) => {
      this.#pending = resolve;
      if (this.#acked) this.#socket?.write(r);
    });
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#socket?.destroy();
    this.#socket = null;
    const pending = this.#pending;
    this.#pending = null;
    pending?.(null);
  }

  #fail(error: Error): void {
    if (this.#settle === null) return;
    this.#settle.reject(error);
    this.#settle = null;
    this.close();
  }

  #connect(): void {
    if (this.#closed) return;
    const o = this.#o;
    const socket = tcpConnect({ host: o.host, port: o.port });
    this.#socket = socket;
    this.#acked = false;
    const reader = new FrameReader();
    let up = false;
    socket.on('connect', () => {
      up = true;
      tune(socket);
      const join = Buffer.alloc(FRAME_BYTES[JOIN] as number);
      join[0] = JOIN;
      join.writeUInt16LE(o.rank, 1);
      join.writeUInt16LE(o.size, 3);
      join.writeUInt32LE(o.syncInterval, 5);
      join[9] = this.runningProbe() ? 1 : 0;
      socket.write(join);
    });
    socket.on('data', (chunk: Buffer) => {
      const ok = reader.push(chunk, (type, buf, at) => this.#frame(socket, type, buf, at));
      if (!ok) socket.destroy();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      if (this.#socket !== socket) return;
      this.#socket = null;
      const wasAcked = this.#acked;
      this.#acked = false;
      if (this.#closed) return;
      if (wasAcked || (up && !this.#outageLogged)) {
        this.#outageLogged = true;
        this.#log.warn(
          { dp_rank: o.rank, address: `${o.host}:${o.port}` },
          "DP group: lost rank 0; reconnecting (this rank's collectives wait meanwhile)",
        );
      }
      // Not unref'd: while it waits to reconnect, this timer may be all that keeps the process up.
      this.#timer = setTimeout(() => {
        this.#timer = null;
        this.#connect();
      }, o.retryMs ?? RETRY_MS);
    });
  }

  #frame(socket: Socket, type: number, buf: Buffer, at: number): void {
    if (socket !== this.#socket) return; // a connection already given up
    if (type === ACK) {
      this.#acked = true;
      if (this.#everFormed) {
        this.#log.info({ dp_rank: this.rank }, 'DP group: rejoined rank 0');
      } else {
        this.#everFormed = true;
        this.#log.info({ dp_rank: this.rank, dp_size: this.size }, 'DP group formed');
      }
      this.#outageLogged = false;
      this.#refusedLogged = false;
      if (buf[at + 1] === 1) this.wake();
      // A step that waited across the outage reports to the new rank 0.
      if (this.#pending !== null) socket.write(this.#report);
      if (this.#settle !== null) {
        this.#settle.resolve();
        this.#settle = null;
      }
    } else if (type === RESULT) {
      const pending = this.#pending;
      if (pending === null) return;
      this.#pending = null;
      const r = this.#result;
      r.anyUnfinished = buf[at + 1] === 1;
      r.sync = buf[at + 2] === 1;
      r.ms = buf.readDoubleLE(at + 3);
      pending(r);
    } else if (type === WAKE) {
      this.wake();
    } else if (type === REFUSE) {
      const reason = buf[at + 1] as number;
      const why = REFUSALS[reason] ?? 'refused';
      const error = new RS_ERR_VLLM_HANDSHAKE(`rank 0 refused DP rank ${this.rank}: ${why}`);
      if (this.#settle !== null) this.#fail(error);
      else if (reason === REPLACED) {
        // Another process of this rank took its place: reconnecting would evict that one in turn,
        // for ever. This one leaves the group for good (its pending step settles with null).
        this.#log.error(
          { err: error, dp_rank: this.rank },
          `DP group: another process joined as rank ${this.rank} and replaced this one; it leaves the group`,
        );
        this.close();
      } else if (!this.#refusedLogged) {
        this.#refusedLogged = true;
        this.#log.error({ err: error }, 'DP group: refused by rank 0; retrying');
      }
    }
  }
}
