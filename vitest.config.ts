import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const verifySrc = fileURLToPath(new URL('./packages/verify/src/', import.meta.url));

export default defineConfig({
  resolve: {
    // Tests run the workspace package from its TypeScript source, so they never see a stale dist/.
    alias: [
      { find: /^@cmcp\/verify$/, replacement: `${verifySrc}index.ts` },
      { find: /^@cmcp\/verify\/(.*)$/, replacement: `${verifySrc}$1.ts` },
    ],
  },
  test: {
    include: ['test/**/*.test.ts'],
    // swtpm, SQLite files and real MCP servers are slow to start on 2 cores.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    globalSetup: ['test/harness/global-setup.ts'],
  },
});
