import { defineConfig } from 'vitest/config';
import base from './vitest.config.js';

/** `npm run test:soak`: the CI share of the soak (test/soak/), which `npm test` leaves out. */
export default defineConfig({
  test: { ...base.test, include: ['test/soak/**/*.test.ts'], exclude: ['**/node_modules/**'] },
});
