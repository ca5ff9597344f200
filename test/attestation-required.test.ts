/**
 * Issue 16 item 2: `minimum_tier` requires a hardware binding. At start-up an unreachable TPM
 * refuses start (exit 3, message naming the provider and the reason); at run time a session that
 * cannot be bound is refused with SESSION_BINDING_REQUIRED. `on_unavailable: serve_unbound` keeps
 * the older behaviour (serve signed-only). Real swtpm, real gateway, real `cmcp start`.
 */
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, freePort, REPO_ROOT, rest, rpc, startInProcess, writeConfig } from './harness/gateway.js';

const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');

describe('minimum_tier at start-up', () => {
  it('a TPM that cannot be reached refuses start: exit 3, provider and reason named', async () => {
    const port = await freePort();
    const tcti = `swtpm:host=127.0.0.1,port=${port}`;
    const cfg = await writeConfig({ attestation: { provider: 'tpm', tcti, minimum_tier: 'tpm' } });
    try {
      await expect(startInProcess(cfg)).rejects.toMatchObject({
        code: 'ATTESTATION_UNAVAILABLE',
        message: expect.stringMatching(
          new RegExp(
            `^attestation provider tpm on ${tcti} cannot reach minimum_tier tpm at start-up \\(TCTI_INIT_FAILED`,
          ),
        ),
      });
      const r = spawnSync(process.execPath, [CLI, 'start', '--config', cfg.file], {
        encoding: 'utf8',
        env: { ...process.env, CMCP_LOG_LEVEL: 'silent' },
        timeout: 60_000,
      });
      expect(r.status).toBe(3);
      expect(r.stderr).toMatch(
        /cmcp: cannot start \(ATTESTATION_UNAVAILABLE\): attestation provider tpm on swtpm:/,
      );
      expect(r.stderr).toContain('TCTI_INIT_FAILED');
      expect(r.stderr).toContain('on_unavailable: serve_unbound');
      expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    } finally {
      cleanup(cfg.dir);
    }
  });

  it('on_unavailable: serve_unbound keeps serving signed-only', async () => {
    const port = await freePort();
    const cfg = await writeConfig({
      attestation: {
        provider: 'tpm',
        tcti: `swtpm:host=127.0.0.1,port=${port}`,
        minimum_tier: 'tpm',
        on_unavailable: 'serve_unbound',
      },
    });
    const gw = await startInProcess(cfg);
    try {
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      expect(s.body.binding).toMatchObject({ status: 'absent', reason: 'TCTI_INIT_FAILED' });
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});

describe('minimum_tier while running', () => {
  it('a session that cannot be bound is refused with SESSION_BINDING_REQUIRED (REST and the default session)', async () => {
    const sw = await startSwtpm();
    const cfg = await writeConfig({ attestation: { provider: 'tpm', tcti: sw.tcti, minimum_tier: 'tpm' } });
    const gw = await startInProcess(cfg);
    try {
      const ok = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(ok.status).toBe(201);
      expect(ok.body.binding.status).toBe('bound');
      await sw.stop(); // the provider fails from now on
      const refused = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(refused.status).toBe(503);
      expect(refused.body.error).toMatchObject({
        error_code: 'SESSION_BINDING_REQUIRED',
        provider: 'tpm',
        minimum_tier: 'tpm',
      });
      expect(refused.body.error.message).toMatch(/attestation provider tpm could not bind it/);
      // the refused session was closed honestly: its claim says the binding is absent
      const claim = await rest(
        gw.url,
        'alice-token',
        'GET',
        `/sessions/${refused.body.error.session_id}/claim`,
      );
      expect(claim.status).toBe(200);
      expect(claim.body.evidence.status).toBe('absent');
      const close = gw.chain
        .entries(refused.body.error.session_id)
        .find((e) => e.entry_type === 'session_close');
      expect(close?.detail).toMatchObject({ reason: 'binding_required' });
      // a tools/call on the default session is refused the same way
      const call = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 9,
        method: 'tools/call',
        params: { name: 'x.y', arguments: {} },
      });
      expect(call.body.error.data.error_code).toBe('SESSION_BINDING_REQUIRED');
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('with serve_unbound the session is served signed-only', async () => {
    const sw = await startSwtpm();
    const cfg = await writeConfig({
      attestation: { provider: 'tpm', tcti: sw.tcti, minimum_tier: 'tpm', on_unavailable: 'serve_unbound' },
    });
    const gw = await startInProcess(cfg);
    try {
      await sw.stop();
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      expect(s.body.binding.status).toBe('absent');
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});
