// Is a process still there? `kill(pid, 0)` answers for processes that have been reaped; a child that
// died but that its parent has not reaped yet (a zombie: its parent's event loop is blocked, say, in
// a bounded ring wait) still answers kill(), so on Linux /proc/<pid>/stat decides.
// Pids are only meaningful inside one pid namespace: all processes of a cluster must share one.
import { readFileSync } from 'node:fs';

function isZombie(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'latin1');
    // "<pid> (<comm>) <state> ..."; comm may contain spaces or parentheses, so search from the end.
    const state = stat.charAt(stat.lastIndexOf(')') + 2);
    return state === 'Z' || state === 'X';
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'ENOENT';
  }
}

/** True if `pid` names a running (not zombie) process. Slow path only: a syscall and maybe a read. */
export function isProcessAlive(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    process.kill(pid, 0);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
  return process.platform !== 'linux' || !isZombie(pid);
}
