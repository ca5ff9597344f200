/**
 * A hardware provider named in the config must be reachable at start-up: with `provider: tpm`
 * and no TPM answering (a real swtpm, stopped), `cmcp start` refuses with exit 3 and one clear
 * line, `cmcp start --check` fails, on SQLite and as a PostgreSQL replica alike. With
 * `on_unavailable: serve_unbound` the gateway starts and serves signed-only; a TPM lost while
 * serving stays a recorded warning (sessions served with the binding absent).
 * Real swtpm, real `cmcp start` processes. Needs the build (dist/).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, freePort, REPO_ROOT, rest, startChild, writeConfig } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';
import { startReplicaBackend, stopReplicaBackend } from './harness/replicas.js';

const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');

function cmcp(...args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], {
    encoding: 'utf8',
    env: { ...process.env, CMCP_LOG_LEVEL: 'silent' },
    timeout: 60_000,
  });
}

/** The TCTI of a real swtpm that was started and stopped again: nothing answers there now. */
async function stoppedSwtpm(): Promise<string> {
  const sw = await startSwtpm();
  await sw.stop();
  return sw.tcti;
}

/** The refusal: exit 3, one line naming the provider, the TCTI and the way out; no stack trace. */
function expectRefused(r: ReturnType<typeof cmcp>, tcti: string): void {
  expect(r.status, r.stderr).toBe(3);
  expect(r.stderr).toMatch(
    /cmcp: cannot start \(ATTESTATION_UNAVAILABLE\): attestation provider tpm on swtpm:\S+ is configured but cannot be reached at start-up \(TCTI_INIT_FAILED/,
  );
  expect(r.stderr).toContain(tcti);
  expect(r.stderr).toContain('on_unavailable: serve_unbound');
  expect(r.stderr).not.toMatch(/\n\s+at /);
}

describe('provider: tpm with no TPM answering at start-up', () => {
  it('cmcp start refuses: exit 3; cmcp start --check fails with the same exit code', async () => {
    const tcti = await stoppedSwtpm();
    const cfg = await writeConfig({ port: await freePort(), attestation: { provider: 'tpm', tcti } });
    try {
      expectRefused(cmcp('start', '--config', cfg.file), tcti);
      const check = cmcp('start', '--check', '--config', cfg.file);
      expect(check.status, check.stdout + check.stderr).toBe(3);
      expect(check.stdout).toMatch(
        /FAIL\s+attestation \(tpm\)\s+tpm .*TCTI_INIT_FAILED.*a configured tpm provider that cannot be reached refuses start-up/,
      );
      expect(check.stdout).toContain('the gateway would not start');
    } finally {
      cleanup(cfg.dir);
    }
  });

  it('with on_unavailable: serve_unbound it starts and serves signed-only; --check warns', async () => {
    const tcti = await stoppedSwtpm();
    const cfg = await writeConfig({
      port: await freePort(),
      attestation: { provider: 'tpm', tcti, on_unavailable: 'serve_unbound' },
    });
    const check = cmcp('start', '--check', '--config', cfg.file);
    expect(check.status, check.stdout + check.stderr).toBe(0);
    expect(check.stdout).toMatch(/warn\s+attestation \(tpm\).*sessions would be served signed-only/);
    const gw = await startChild(cfg);
    try {
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      expect(s.body.binding).toMatchObject({ provider: 'tpm', status: 'absent', reason: 'TCTI_INIT_FAILED' });
    } finally {
      await gw.stop('SIGKILL');
      cleanup(cfg.dir);
    }
  });

  it('a TPM lost while serving stays a recorded warning: sessions are served, binding absent', async () => {
    const sw = await startSwtpm();
    const cfg = await writeConfig({
      port: await freePort(),
      attestation: { provider: 'tpm', tcti: sw.tcti },
    });
    const gw = await startChild(cfg);
    try {
      const bound = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(bound.body.binding.status).toBe('bound');
      await sw.stop();
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      expect(s.body.binding).toMatchObject({ provider: 'tpm', status: 'absent' });
      const claim = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`);
      expect(claim.body.evidence.status).toBe('absent');
      expect(gw.proc.exitCode).toBeNull();
    } finally {
      await gw.stop('SIGKILL');
      await sw.stop();
      cleanup(cfg.dir);
    }
  });
});

const withPostgres = hasPostgres();
describe.skipIf(!withPostgres)('a PostgreSQL replica with provider: tpm and no TPM answering', () => {
  it('refuses start-up the same way: exit 3', async () => {
    const backend = await startReplicaBackend('named_provider_1');
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-replica-named-'));
    try {
      const tcti = await stoppedSwtpm();
      const cfg = await writeConfig({
        dir,
        port: await freePort(),
        attestation: { provider: 'tpm', tcti },
        extra: {
          database: backend.url,
          instance_id: 'n0',
          replicas: { lease_ttl_ms: 2000, renew_every_ms: 400 },
        },
      });
      expectRefused(cmcp('start', '--config', cfg.file), tcti);
    } finally {
      await stopReplicaBackend(backend, [], [dir]);
    }
  }, 120_000);
});
