/**
 * Vitest global setup (runs once per test run, in the main process): provisions one swtpm state
 * folder with a throwaway local CA and provides it to the test workers (`inject('cmcpSwtpm')`,
 * see testing/vitest-swtpm.ts). Teardown kills any swtpm a worker left behind and removes the folder.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { killRegisteredSwtpms, provisionSwtpm } from '../../testing/swtpm.js';
import type { SwtpmRunContext } from '../../testing/vitest-swtpm.js';

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const runDir = mkdtempSync(join(tmpdir(), 'cmcp-test-run-'));
  const pidRegistryDir = join(runDir, 'pids');
  try {
    const provisioned = await provisionSwtpm(join(runDir, 'template'));
    const ctx: SwtpmRunContext = {
      runDir,
      templateStateDir: provisioned.stateDir,
      ca: provisioned.ca,
      pidRegistryDir,
      instancesDir: join(runDir, 'instances'),
    };
    project.provide('cmcpSwtpm', ctx);
  } catch (err) {
    rmSync(runDir, { recursive: true, force: true });
    throw err;
  }
  return async () => {
    killRegisteredSwtpms(pidRegistryDir);
    rmSync(runDir, { recursive: true, force: true });
  };
}
