import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // The 3-minute soak runs once per CI run, as its own step (`npm run test:soak`, .ci/run), not
    // in every `npm test`: it would add its 3 minutes to each Node version's pass.
    exclude: ['**/node_modules/**', 'test/soak/**'],
    globalSetup: ['test/global-setup.ts'],
    // What a worker that died mid-file ran: the file (a reporter beside vitest's own) and, for a
    // catchable signal, the signal (test/run/).
    setupFiles: ['test/run/worker-signals.ts'],
    reporters: ['default', './test/run/unreported-files.ts'],
    // Integration tests start real processes; two cores are shared between them.
    fileParallelism: true,
    maxWorkers: 2,
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
