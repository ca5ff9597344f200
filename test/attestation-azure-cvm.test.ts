/**
 * The azure-cvm provider end to end on swtpm (docs/spec/evidence-azure.md): the vTPM is staged
 * as an Azure CVM's — an RSA AK persisted at 0x81000003 and, at NV 0x01400001, an HCL report
 * built here whose runtime data names that AK as HCLAkPub and whose hardware report is signed
 * under a test root (SEV-SNP: ARK → ASK → VCEK; TDX: a TD report with a v4 quote under a test
 * PCK chain). `auto` detects it, sessions bind through a quote under HCLAkPub, the claim carries
 * the HCL report, and `cmcp verify` checks the whole chain. An AK that is not the report's
 * HCLAkPub is refused at start-up and never quoted with.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runVerify } from '@cmcp/verify/cli';
import type { Claim } from '@cmcp/verify/formats';
import { fromB64u } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parsePublic, publicKeyOf, Tpm } from '../native/tpm/index.js';
import {
  hclReport,
  hclReportData,
  runtimeDataJson,
  type SnpTestChain,
  snpReport,
  snpTestChain,
  type TdxTestChain,
  tdReport,
  tdxQuote,
  tdxTestChain,
} from '../testing/azure-cvm.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, rest, startInProcess, writeConfig } from './harness/gateway.js';

const NO_TSM = '/nonexistent/cmcp-test/tsm';
const NO_SEV = '/nonexistent/cmcp-test/sev-guest';
let dir: string;
let snp: SnpTestChain;
let tdx: TdxTestChain;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cmcp-azure-cvm-'));
  snp = await snpTestChain();
  tdx = await tdxTestChain();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const file = (name: string, data: Buffer | string) => {
  const p = join(dir, name);
  writeFileSync(p, data);
  return p;
};

/**
 * Stages the vTPM: an RSA AK persisted at 0x81000003 and the HCL report at NV 0x01400001 built
 * by `build` from the runtime data naming `hclKeyOf` (default: that AK) as HCLAkPub.
 */
async function stage(
  tcti: string,
  build: (runtimeData: Buffer) => { kind: 'sev-snp' | 'tdx'; hwReport: Buffer },
  opts: { otherHclKey?: boolean } = {},
): Promise<Buffer> {
  const tpm = Tpm.open(tcti);
  try {
    const ak = tpm.createAk('rsa2048');
    const akKey = publicKeyOf(parsePublic(ak.publicArea));
    tpm.persistAk(ak, 0x81000003).flush();
    ak.flush();
    let hclKey = akKey;
    if (opts.otherHclKey) {
      const other = tpm.createAk('ecc-p256');
      hclKey = publicKeyOf(parsePublic(other.publicArea));
      other.flush();
    }
    const rt = runtimeDataJson(hclKey);
    const hcl = hclReport({ ...build(rt), runtimeData: rt });
    tpm.writeNewNv(0x01400001, hcl);
    return hcl;
  } finally {
    tpm.close();
  }
}

async function closedSession(url: string): Promise<{ claim: Claim; bundle: unknown }> {
  const s = await rest(url, 'alice-token', 'POST', '/sessions', {});
  expect(s.status).toBe(201);
  const sid = s.body.session_id as string;
  const claim = (await rest(url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body as Claim;
  const bundle = (await rest(url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body;
  return { claim, bundle };
}

async function verifyCli(claim: Claim, bundle: unknown, trustStore: string) {
  const cp = file(`claim-${randomBytes(4).toString('hex')}.json`, JSON.stringify(claim));
  const bp = file(`${cp.split('/').pop()}.audit.json`, JSON.stringify(bundle));
  let out = '';
  let err = '';
  const code = await runVerify(
    cp,
    { audit: bp, json: true, trustStore },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, report: out ? JSON.parse(out) : null, err };
}

const status = (report: { checks: { id: string; status: string }[] }, id: string) =>
  report.checks.find((c) => c.id === id)?.status;

describe('azure-cvm provider on swtpm', () => {
  it('SEV-SNP: auto detects it, binds through HCLAkPub, cmcp verify says hardware-attested', async () => {
    const sw = await startSwtpm();
    const cdir = mkdtempSync(join(dir, 'snp-'));
    try {
      const hcl = await stage(sw.tcti, (rt) => ({
        kind: 'sev-snp',
        hwReport: snpReport(snp, hclReportData(rt)),
      }));
      const certs = [file('vcek.der', snp.vcek), file('ask.der', snp.ask), file('ark.der', snp.ark)];
      const cfg = await writeConfig({
        dir: cdir,
        attestation: {
          provider: 'auto',
          tsm_path: NO_TSM,
          sev_guest_device: NO_SEV,
          tcti: sw.tcti,
          vcek_chain: certs,
        },
      });
      const gw = await startInProcess(cfg);
      try {
        const sel = gw.chain.entries('gateway').find((e) => e.entry_type === 'attestation_provider');
        const started = gw.chain.entries('gateway').find((e) => e.entry_type === 'gateway_measurement');
        expect((started?.detail as { provider_start?: unknown } | undefined)?.provider_start).toMatchObject({
          ok: true,
          hcl_report: { kind: 'sev-snp' },
          vcek_chain_length: 3,
          notes: [],
        });
        expect(sel?.detail).toMatchObject({
          provider: 'azure-cvm',
          tier: 'tee',
          reason: expect.stringMatching(/HCL report/),
        });
        const { claim, bundle } = await closedSession(gw.url);
        expect(claim.evidence).toMatchObject({ provider: 'azure-cvm', status: 'bound' });
        const az = claim.evidence.azure_hcl!;
        expect(fromB64u(az.report).equals(hcl)).toBe(true);
        expect(az.certs.map((c) => c.kind)).toEqual(['vcek', 'ask', 'ark']);
        expect(claim.evidence.tpm?.ak_source).toBe('platform');
        const ok = await verifyCli(claim, bundle, file('ts-snp.yaml', snp.trustStoreYaml));
        expect(ok.err).toBe('');
        expect(ok.report.verdict).toBe('hardware-attested');
        for (const id of [
          'azure.report_data',
          'evidence.signature',
          'evidence.anchor',
          'azure.quote_signature',
          'evidence.binding',
          'azure.ak_match',
          'tpm.qualified_signer',
          'measurement.pcr',
        ])
          expect(status(ok.report, id), id).toBe('pass');
        // without the test ARK pinned the same claim is only hardware-unanchored
        const unpinned = await verifyCli(claim, bundle, file('ts-empty.yaml', 'version: 1\nroots: []\n'));
        expect(unpinned.report.verdict).toBe('hardware-unanchored');
        // a claim whose HCL report was swapped no longer verifies (signature, then the chain)
        const forged = structuredClone(claim);
        forged.evidence.azure_hcl!.report = az.report.replace(/^./, az.report[0] === 'A' ? 'B' : 'A');
        expect(
          (await verifyCli(forged, bundle, file('ts-snp2.yaml', snp.trustStoreYaml))).report.verdict,
        ).toBe('invalid');
      } finally {
        await gw.close();
      }
    } finally {
      cleanup(cdir);
      await sw.stop();
    }
  });

  it('TDX: the TD quote from the configuration; cmcp verify checks it against the HCL TD report', async () => {
    const sw = await startSwtpm();
    const cdir = mkdtempSync(join(dir, 'tdx-'));
    try {
      let td: Buffer = Buffer.alloc(0);
      await stage(sw.tcti, (rt) => {
        td = tdReport(hclReportData(rt), {
          mrTd: Buffer.alloc(48, 0x11),
          rtmr: [Buffer.alloc(48, 1), Buffer.alloc(48, 2), Buffer.alloc(48, 3), Buffer.alloc(48, 4)],
        });
        return { kind: 'tdx', hwReport: td };
      });
      const cfg = await writeConfig({
        dir: cdir,
        attestation: {
          provider: 'azure-cvm',
          tcti: sw.tcti,
          td_quote: file('td-quote.bin', tdxQuote(tdx, td)),
        },
      });
      const gw = await startInProcess(cfg);
      try {
        const { claim, bundle } = await closedSession(gw.url);
        expect(claim.evidence.azure_hcl?.td_quote).toBeDefined();
        const m = gw.chain.entries('gateway').find((e) => e.entry_type === 'gateway_measurement');
        expect((m?.detail as { provider_start?: unknown } | undefined)?.provider_start).toMatchObject({
          ok: true,
          hcl_report: { kind: 'tdx' },
          td_quote: true,
          notes: [],
        });
        const r = await verifyCli(claim, bundle, file('ts-tdx.yaml', tdx.trustStoreYaml));
        expect(r.report.verdict).toBe('hardware-attested');
        expect(status(r.report, 'azure.td_report')).toBe('pass');
      } finally {
        await gw.close();
      }
    } finally {
      cleanup(cdir);
      await sw.stop();
    }
  });

  it('configured on a vTPM without an HCL report: start refused; with serve_unbound binding absent (HCL_REPORT_ABSENT), never a plain quote', async () => {
    const sw = await startSwtpm();
    const cdir = mkdtempSync(join(dir, 'absent-'));
    try {
      // named and unable to start: the gateway refuses start-up unless told to serve unbound
      await expect(
        startInProcess(
          await writeConfig({ dir: cdir, attestation: { provider: 'azure-cvm', tcti: sw.tcti } }),
        ),
      ).rejects.toMatchObject({
        code: 'ATTESTATION_UNAVAILABLE',
        message: expect.stringContaining('HCL_REPORT_ABSENT'),
      });
      const cfg = await writeConfig({
        dir: cdir,
        attestation: { provider: 'azure-cvm', tcti: sw.tcti, on_unavailable: 'serve_unbound' },
      });
      const gw = await startInProcess(cfg);
      try {
        const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
        expect(s.body.binding).toMatchObject({ status: 'absent', reason: 'HCL_REPORT_ABSENT' });
      } finally {
        await gw.close();
      }
    } finally {
      cleanup(cdir);
      await sw.stop();
    }
  });

  it('an AK at 0x81000003 that is not the HCLAkPub of the report is refused, never quoted with', async () => {
    const sw = await startSwtpm();
    const cdir = mkdtempSync(join(dir, 'mismatch-'));
    try {
      await stage(sw.tcti, (rt) => ({ kind: 'sev-snp', hwReport: snpReport(snp, hclReportData(rt)) }), {
        otherHclKey: true,
      });
      await expect(
        startInProcess(
          await writeConfig({ dir: cdir, attestation: { provider: 'azure-cvm', tcti: sw.tcti } }),
        ),
      ).rejects.toMatchObject({
        code: 'ATTESTATION_UNAVAILABLE',
        message: expect.stringContaining('HCL_AK_MISMATCH'),
      });
      const cfg = await writeConfig({
        dir: cdir,
        attestation: { provider: 'azure-cvm', tcti: sw.tcti, on_unavailable: 'serve_unbound' },
      });
      const gw = await startInProcess(cfg);
      try {
        const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
        expect(s.body.binding).toMatchObject({ status: 'absent', reason: 'HCL_AK_MISMATCH' });
      } finally {
        await gw.close();
      }
    } finally {
      cleanup(cdir);
      await sw.stop();
    }
  });
});
