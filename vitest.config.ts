import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vitest/config';

const verifySrc = fileURLToPath(new URL('./packages/verify/src/', import.meta.url));
/** The package's entry points (package.json `exports`), each mapped to its TypeScript source. */
const verifyExports = (
  JSON.parse(readFileSync(new URL('./packages/verify/package.json', import.meta.url), 'utf8')) as {
    exports: Record<string, string | { default: string }>;
  }
).exports;
const verifyAliases = Object.entries(verifyExports).flatMap(([sub, target]) =>
  typeof target === 'string'
    ? []
    : [
        {
          find: new RegExp(`^@cmcp/verify${sub.slice(1).replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}$`),
          replacement: `${verifySrc}${target.default.replace(/^\.\/dist\//, '').replace(/\.js$/, '.ts')}`,
        },
      ],
);

const STORE_WORKER_SUITES = [
  'test/gateway-mcp.test.ts',
  'test/execution-processes.test.ts',
  'test/group-commit.test.ts',
  'test/upstream-dies-mid-call.test.ts',
  'test/gateway-shutdown.test.ts',
  'test/crash.test.ts',
  'test/disk-full.test.ts',
];

export default defineConfig({
  resolve: {
    // Tests run the workspace package from its TypeScript source, so they never see a stale dist/.
    // Only the entry points are aliased: a deep import fails here as it does for a user.
    alias: verifyAliases,
  },
  test: {
    // swtpm, SQLite files and real MCP servers are slow to start on 2 cores.
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: 'forks',
    maxWorkers: 2,
    globalSetup: ['test/harness/global-setup.ts'],
    projects: [
      // Each project names its files (a root `include` would be merged into both).
      { extends: true, test: { name: 'default', include: ['test/**/*.test.ts'] } },
      // The call path, execution_id, group commit, crash and shutdown suites again with the
      // call path's writes in the store worker: the harness then writes `store.worker: true` into
      // every config (test/harness/gateway.ts; src/store/write-worker.ts).
      {
        extends: true,
        test: { name: 'store-worker', include: STORE_WORKER_SUITES, env: { CMCP_TEST_STORE_WORKER: 'on' } },
      },
    ],
  },
});
