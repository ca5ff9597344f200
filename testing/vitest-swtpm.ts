/**
 * The vitest side of swtpm: a thin wrapper over ./swtpm.ts. The test run's global setup
 * (test/harness/global-setup.ts) provisions one TPM state folder + local CA per run and hands it to the test
 * workers with vitest `provide`/`inject` (key `cmcpSwtpm`); each test file then starts its own
 * swtpm on a copy with {@link startSwtpm}.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import {
  type ProvisionedSwtpm,
  provisionSwtpm,
  type SwtpmCa,
  type SwtpmInstance,
  startSwtpm as startSwtpmCore,
} from './swtpm.js';

/** What global setup provides to every test worker. */
export interface SwtpmRunContext {
  /** The run's temporary folder (removed by global teardown). */
  runDir: string;
  /** Provisioned TPM state to copy per swtpm instance. */
  templateStateDir: string;
  /** Local CA (root + issuer) that signed the EK / platform certificates. */
  ca: SwtpmCa;
  /** Folder of `<pid>` files of running swtpms; global teardown kills what is left. */
  pidRegistryDir: string;
  /** Folder under which instance state copies are made. */
  instancesDir: string;
}

declare module 'vitest' {
  export interface ProvidedContext {
    cmcpSwtpm: SwtpmRunContext;
  }
}

let fallback: Promise<SwtpmRunContext> | null = null;

/**
 * The run's provisioned swtpm template. Normally injected by global setup; when a file runs under
 * a config without that global setup, provisions once per worker in a temp folder instead.
 */
export function swtpmRunContext(): Promise<SwtpmRunContext> {
  const provided = inject('cmcpSwtpm');
  if (provided) return Promise.resolve(provided);
  fallback ??= (async () => {
    const runDir = mkdtempSync(join(tmpdir(), 'cmcp-swtpm-worker-'));
    process.once('exit', () => rmSync(runDir, { recursive: true, force: true }));
    const p: ProvisionedSwtpm = await provisionSwtpm(join(runDir, 'template'));
    return {
      runDir,
      templateStateDir: p.stateDir,
      ca: p.ca,
      pidRegistryDir: join(runDir, 'pids'),
      instancesDir: join(runDir, 'instances'),
    };
  })();
  return fallback;
}

/** The local CA folder of this run's swtpm (root + issuer certificates), for EK certificate work. */
export async function swtpmCa(): Promise<SwtpmCa> {
  return (await swtpmRunContext()).ca;
}

/**
 * Starts a fresh swtpm on a copy of the run's provisioned state, on free loopback ports.
 * `stop()` kills it and removes the copy; anything not stopped is killed when the worker exits,
 * and by global teardown if the worker died hard.
 */
export async function startSwtpm(): Promise<{
  tcti: string;
  port: number;
  stateDir: string;
  pid: number;
  stop(): Promise<void>;
}> {
  const ctx = await swtpmRunContext();
  const inst: SwtpmInstance = await startSwtpmCore({
    templateStateDir: ctx.templateStateDir,
    parentDir: ctx.instancesDir,
    pidRegistryDir: ctx.pidRegistryDir,
  });
  return inst;
}
