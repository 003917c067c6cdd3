// Scheduling the helper threads of a process below its event loop. On Linux, nice and the
// scheduling policy belong to a thread (native/ringserve_shm.cc), and a thread starts with its
// creator's: an API server's output worker and packer threads lower themselves once at start, so
// on a machine whose cores are all busy the main thread (/health, /metrics, control routes) wins
// the CPU when it wakes. Lowering needs no privilege; RS_ERR_SHM_PRIORITY means the kernel (or a
// seccomp filter) refused, and { nice: 0, policy: 'other' } makes no call at all.
import { shmAddon, type ThreadSchedPolicy } from './native.js';

export type { ThreadSchedPolicy } from './native.js';

export interface ThreadPriority {
  /** Added to the nice the thread started with (its creator's), capped at 19; 0 keeps it. */
  nice: number;
  /** 'other' keeps the default time-sharing policy. */
  policy: ThreadSchedPolicy;
}

export const SAME_PRIORITY: Readonly<ThreadPriority> = Object.freeze({ nice: 0, policy: 'other' });

/** Lowers the calling thread's priority as `priority` says; throws RS_ERR_SHM_PRIORITY if refused. */
export function lowerThisThread(priority: Readonly<ThreadPriority>): void {
  const addon = shmAddon();
  if (priority.nice > 0) addon.setThreadNice(Math.min(19, addon.threadNice() + priority.nice));
  if (priority.policy !== 'other') addon.setThreadSchedPolicy(priority.policy);
}
