import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

// Processes and worker threads that tests start run the compiled code in dist/, so the build is
// brought up to date once before any test file runs (incremental: a no-op when nothing changed).
export default function setup(): void {
  const root = fileURLToPath(new URL('..', import.meta.url));
  execFileSync(
    process.execPath,
    [`${root}node_modules/typescript/bin/tsc`, '-p', 'tsconfig.build.json'],
    {
      cwd: root,
      stdio: 'inherit',
    },
  );
}
