/**
 * Provider detection and minimum tier (docs/spec/attestation.md#selection-and-tiers), and the
 * TPM failure classes (docs/spec/attestation.md#failure-classes: device absent, TPM return
 * code): `auto` tries sev-snp, tdx, then tpm, never software; the choice and the reason are
 * logged and recorded in the gateway chain; below `minimum_tier` the gateway refuses to start;
 * binding failures leave the gateway serving.
 */
import { describe, expect, it } from 'vitest';
import { parseConfig } from '../src/config/index.js';
import { selectProvider } from '../src/tee/detect.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { startFakeTsm } from './harness/fake-tsm.js';
import { cleanup, freePort, rest, rpc, startInProcess, writeConfig } from './harness/gateway.js';
import { hasVectors } from './harness/vectors.js';

const base = { database: '/tmp/x.db', dev_mode: true };
const att = (a: Record<string, unknown>) => parseConfig({ ...base, attestation: a }).attestation;
const NO_TSM = '/nonexistent/cmcp/tsm/report';
const NO_SEV = '/nonexistent/cmcp/sev-guest';

describe('provider: auto', () => {
  it.skipIf(!hasVectors())('prefers SEV-SNP, then TDX, from the configfs-tsm provider', async () => {
    const snp = await startFakeTsm({ kind: 'sev-snp' });
    const tdx = await startFakeTsm({ kind: 'tdx' });
    try {
      const s = await selectProvider(att({ provider: 'auto', tsm_path: snp.root, sev_guest_device: NO_SEV }));
      expect(s.provider.name).toBe('sev-snp');
      expect(s.detail.reason).toMatch(/auto-detected: configfs-tsm at .* reports provider "sev_guest"/);
      expect(s.detail.candidates?.map((c) => [c.provider, c.available])).toEqual([
        ['sev-snp', true],
        ['tdx', false],
        ['tpm', false],
      ]);
      const t = await selectProvider(att({ provider: 'auto', tsm_path: tdx.root, sev_guest_device: NO_SEV }));
      expect(t.provider.name).toBe('tdx');
      expect(t.detail.tier).toBe('tee');
    } finally {
      await snp.stop();
      await tdx.stop();
    }
  });

  it('falls to the TPM when there is no confidential-VM interface', async () => {
    const sw = await startSwtpm();
    try {
      const s = await selectProvider(
        att({ provider: 'auto', tsm_path: NO_TSM, sev_guest_device: NO_SEV, tcti: sw.tcti }),
      );
      expect(s.provider.name).toBe('tpm');
      expect(s.detail.reason).toMatch(/a TPM answers/);
      s.provider.close();
    } finally {
      await sw.stop();
    }
  });

  it('never falls back to software: nothing found → ATTESTATION_UNAVAILABLE', async () => {
    const port = await freePort();
    await expect(
      selectProvider(
        att({
          provider: 'auto',
          tsm_path: NO_TSM,
          sev_guest_device: NO_SEV,
          tcti: `swtpm:host=127.0.0.1,port=${port}`,
        }),
      ),
    ).rejects.toMatchObject({
      code: 'ATTESTATION_UNAVAILABLE',
      message: expect.stringMatching(/never falls back/),
    });
  });

  it('minimum_tier refuses to start below the configured tier', async () => {
    await expect(selectProvider(att({ provider: 'software', minimum_tier: 'tpm' }))).rejects.toMatchObject({
      code: 'ATTESTATION_TIER_TOO_LOW',
    });
    const sw = await startSwtpm();
    try {
      await expect(
        selectProvider(
          att({
            provider: 'auto',
            tsm_path: NO_TSM,
            sev_guest_device: NO_SEV,
            tcti: sw.tcti,
            minimum_tier: 'tee',
          }),
        ),
      ).rejects.toMatchObject({
        code: 'ATTESTATION_TIER_TOO_LOW',
        message: expect.stringMatching(/tier tpm.*minimum_tier tee/),
      });
      const ok = await selectProvider(att({ provider: 'tpm', tcti: sw.tcti, minimum_tier: 'tpm' }));
      expect(ok.provider.name).toBe('tpm');
      ok.provider.close();
      // a gateway with such a config does not start
      const cfg = await writeConfig({
        attestation: {
          provider: 'auto',
          tsm_path: NO_TSM,
          sev_guest_device: NO_SEV,
          tcti: sw.tcti,
          minimum_tier: 'tee',
        },
      });
      await expect(startInProcess(cfg)).rejects.toMatchObject({ code: 'ATTESTATION_TIER_TOO_LOW' });
      cleanup(cfg.dir);
    } finally {
      await sw.stop();
    }
  });

  it('a gateway on auto records the choice and why in the gateway chain', async () => {
    const sw = await startSwtpm();
    const cfg = await writeConfig({
      attestation: { provider: 'auto', tsm_path: NO_TSM, sev_guest_device: NO_SEV, tcti: sw.tcti },
    });
    const gw = await startInProcess(cfg);
    try {
      const e = gw.chain.entries('gateway').find((x) => x.entry_type === 'attestation_provider');
      expect(e?.detail).toMatchObject({
        provider: 'tpm',
        tier: 'tpm',
        reason: expect.stringMatching(/^auto-detected/),
      });
      expect((e?.detail as { candidates?: unknown[] } | undefined)?.candidates).toHaveLength(3);
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.body.binding.status).toBe('bound');
    } finally {
      await gw.close();
      cleanup(cfg.dir);
      await sw.stop();
    }
  });
});

describe('TPM failure classes keep the gateway serving', () => {
  it('device absent with serve_unbound: nothing on the TCTI → TCTI_INIT_FAILED at start-up and per session', async () => {
    const port = await freePort();
    // without serve_unbound a named provider absent at start-up refuses start (attestation-named-provider.test.ts)
    const cfg = await writeConfig({
      attestation: {
        provider: 'tpm',
        tcti: `swtpm:host=127.0.0.1,port=${port}`,
        on_unavailable: 'serve_unbound',
      },
    });
    const gw = await startInProcess(cfg);
    try {
      const g = gw.chain.entries('gateway');
      expect(g.find((e) => e.entry_type === 'attestation_binding_failed')?.detail).toMatchObject({
        phase: 'start-up',
        reason: 'TCTI_INIT_FAILED',
      });
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      expect(s.body.binding).toMatchObject({ status: 'absent', reason: 'TCTI_INIT_FAILED' });
      const entry = gw.chain
        .entries(s.body.session_id)
        .find((e) => e.entry_type === 'attestation_binding_failed');
      expect(entry?.detail).toMatchObject({ reason: 'TCTI_INIT_FAILED' });
      const ping = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 1, method: 'ping' });
      expect(ping.status).toBe(200);
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('TPM return code: a measurement PCR the TPM refuses to extend (PCR 17, locality) → TPM_RC', async () => {
    const sw = await startSwtpm();
    const cfg = await writeConfig({ attestation: { provider: 'tpm', tcti: sw.tcti, measurement_pcr: 17 } });
    const gw = await startInProcess(cfg);
    try {
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      expect(s.body.binding).toMatchObject({ status: 'absent', reason: 'TPM_RC' });
      const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`)).body;
      expect(claim.evidence.reason).toBe('TPM_RC');
      // the measurement is still reported, without a PCR (it was never extended)
      expect(claim.evidence.measurement.digest).toBe(claim.gateway_measurement);
      expect(claim.evidence.measurement.pcr).toBeUndefined();
    } finally {
      await gw.close();
      cleanup(cfg.dir);
      await sw.stop();
    }
  });
});
