/**
 * `cmcp verify-evidence` on the real vectors, `cmcp verify --trust-store/--reference-values`,
 * and the trust store / reference values loaders.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  defaultAttestationDir,
  loadReferenceValues,
  loadTrustStore,
  parseReferenceValues,
  parseTrustStore,
} from '@cmcp/verify';
import {
  registerVerifyEvidenceCommand,
  runVerify,
  runVerifyEvidence,
  type VerifyEvidenceCliOptions,
} from '@cmcp/verify/cli';
import { Command } from 'commander';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { certsFromBytes } from '../packages/verify/src/x509.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-verify-evidence-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const write = (name: string, text: string) => {
  const p = join(dir, name);
  writeFileSync(p, text);
  return p;
};
const run = async (opts: VerifyEvidenceCliOptions) => {
  let out = '';
  let err = '';
  const code = await runVerifyEvidence(opts, { stdout: (t) => (out += t), stderr: (t) => (err += t) });
  return { code, out, err };
};
const v = (...p: string[]) => vectorPath(...p);

describe('attestation/ trust store and reference values', () => {
  it('the repository trust store validates: ARK per product, Intel SGX root, Azure vTPM root, TPM manufacturer roots', () => {
    const d = defaultAttestationDir();
    expect(d).not.toBeNull();
    const ts = loadTrustStore(join(d as string, 'trust-store.yaml'));
    const by = (p: string) => ts.roots.filter((r) => r.purpose === p);
    expect(
      by('amd-ark')
        .map((r) => r.product)
        .sort(),
    ).toEqual(['Genoa', 'Milan', 'Turin']);
    expect(by('intel-sgx-root')).toHaveLength(1);
    expect(by('cloud-vtpm').map((r) => r.name)).toContain(
      'Azure Virtual TPM Root Certificate Authority 2023',
    );
    expect(by('tpm-manufacturer').length).toBeGreaterThan(0);
    for (const r of ts.roots) {
      expect(r.sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(r.source.length).toBeGreaterThan(0);
    }
    expect(new Set(ts.roots.map((r) => r.sha256)).size).toBe(ts.roots.length);
  });

  it('the example reference values validate', () => {
    const d = defaultAttestationDir() as string;
    const rv = loadReferenceValues(join(d, 'reference-values.example.yaml'));
    expect(rv.allowed_tee_types).toEqual(['tpm', 'sev-snp', 'tdx']);
    expect(rv.sev_snp?.allow_debug).toBe(false);
    expect(rv.tdx?.accepted_tcb_status).toEqual(['UpToDate']);
  });

  it('invalid files are refused with a reason (zod): bad fingerprint, amd-ark without product, unknown key, YAML number for hex', () => {
    expect(() =>
      parseTrustStore('version: 1\nroots:\n  - {name: x, purpose: cloud-vtpm, sha256: abc, source: s}\n'),
    ).toThrow(/TRUST_STORE|fingerprint/);
    expect(() =>
      parseTrustStore(
        `version: 1\nroots:\n  - {name: x, purpose: amd-ark, sha256: "${'ab'.repeat(32)}", source: s}\n`,
      ),
    ).toThrow(/product/);
    expect(() => parseTrustStore('version: 1\nroots: []\nextra: 1\n')).toThrow();
    expect(() => parseReferenceValues('version: 1\nsev_snp:\n  measurements: [1234]\n')).toThrow(
      /expected string/,
    );
    expect(() => parseReferenceValues('version: 2\n')).toThrow();
    expect(() => parseReferenceValues('version: 1\ntdx:\n  accepted_tcb_status: [Fine]\n')).toThrow();
    expect(() => parseReferenceValues('a: [')).toThrow(/not YAML/);
  });
});

describe.skipIf(!hasVectors())('cmcp verify-evidence on the vectors', () => {
  const AZ = (f: string) => v('tpm', 'azure-vtpm-2026-07-27', f);
  const MS = (f: string) => v('tpm', 'ms-tpm-20-ref-v183', f);

  it('TPM (Azure, raw signature, nonce, PCR file) → exit 0 with --require hardware-unanchored, hardware-unanchored text report; exit 1 by default', async () => {
    const e = JSON.parse(readFileSync(AZ('expected.json'), 'utf8')) as {
      pcrs_bin: { sha256_bank: Record<string, string> };
    };
    const pcrs = write('pcrs.json', JSON.stringify(e.pcrs_bin.sha256_bank));
    const opts = {
      tpmQuote: AZ('quote.msg'),
      tpmSig: AZ('quote.sig'),
      tpmSigFormat: 'raw-rsassa-sha256',
      ak: AZ('ak.pub'),
      nonce: `@${AZ('nonce.hex')}`,
      pcrsFile: pcrs,
      at: '2026-11-30T00:00:00Z',
    };
    const strict = await run(opts);
    expect(strict.code).toBe(1);
    expect(strict.out).toMatch(/^Verdict: HARDWARE-UNANCHORED/);
    const r = await run({ ...opts, require: 'hardware-unanchored' });
    expect(r.err).toBe('');
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^Verdict: HARDWARE-UNANCHORED/);
    expect(r.out).toMatch(/PASS\s+tpm\.pcr_digest/);
  });

  it('TPM (Azure) with the pre-provisioned AK certificate → exit 1, AK_CERT_KEY_MISMATCH (refuses to bind)', async () => {
    const r = await run({
      tpmQuote: AZ('quote.msg'),
      tpmSig: AZ('quote.sig'),
      tpmSigFormat: 'raw-rsassa-sha256',
      ak: AZ('ak.pub'),
      akCert: [
        AZ('akcert_0x01C101D0.der'),
        AZ('issuer-certs/global-virtual-tpm-ca-03.pem'),
        AZ('issuer-certs/azure-virtual-tpm-root-ca-2023.pem'),
      ],
      at: '2026-11-30T00:00:00Z',
      json: true,
    });
    expect(r.code).toBe(1);
    const rep = JSON.parse(r.out) as { verdict: string; checks: { id: string; reason_code: string }[] };
    expect(rep.verdict).toBe('invalid');
    expect(rep.checks.find((c) => c.id === 'evidence.anchor')?.reason_code).toBe('AK_CERT_KEY_MISMATCH');
  });

  it('TPM (ms-tpm ecdsa-sha384, AK from its certificate, chain, pinned root in a trust store file) → hardware-attested', async () => {
    const root = certsFromBytes(readFileSync(MS('ecdsa-sha384-root.pem')))[0];
    const ts = write(
      'ts.yaml',
      `version: 1\nroots:\n  - name: synthetic AK root\n    purpose: tpm-ak-root\n    sha256: "${root?.sha256}"\n    source: test vector\n`,
    );
    const leafPem =
      readFileSync(MS('ecdsa-sha384-ak-chain.pem'), 'utf8').split(/(?<=-----END CERTIFICATE-----\n)/)[0] ??
      '';
    const r = await run({
      tpmQuote: MS('ecdsa-sha384-attest.bin'),
      tpmSig: MS('ecdsa-sha384-tpmt-signature.bin'),
      ak: write('leaf.pem', leafPem),
      akCert: [MS('ecdsa-sha384-ak-chain.pem')],
      nonce: readFileSync(MS('nonce.hex'), 'utf8'),
      trustStore: ts,
      at: '2030-01-01T00:00:00Z',
      json: true,
    });
    expect(r.err).toBe('');
    const rep = JSON.parse(r.out) as { verdict: string; anchors_used: { name: string }[] };
    expect(rep.verdict).toBe('hardware-attested');
    expect(rep.anchors_used[0]?.name).toBe('synthetic AK root');
    expect(r.code).toBe(0);
  });

  it('SEV-SNP (Milan): the default no-debug policy → exit 1; reference values allowing debug → exit 0, hardware-attested', async () => {
    const base = {
      snpReport: v('snp', 'go-sev-guest-milan', 'attestation.bin'),
      certs: [
        v('snp', 'go-sev-guest-milan', 'vcek.testcer'),
        v('snp', 'go-sev-guest-milan', 'ask_ark_milan.pem'),
      ],
      at: '2026-11-30T00:00:00Z',
      reportData: `0102030405${'00'.repeat(59)}`,
    };
    const bad = await run(base);
    expect(bad.code).toBe(1);
    expect(bad.out).toContain('SNP_DEBUG_ENABLED');
    const ok = await run({
      ...base,
      referenceValues: write('rv.yaml', 'version: 1\nsev_snp:\n  allow_debug: true\n'),
    });
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/^Verdict: HARDWARE-ATTESTED/);
    expect(ok.out).toContain('AMD ARK-Milan  SHA-256 69:D0:63:B4');
  });

  it('TDX (SPR E4) without collateral → exit 0; with collateral at 2023-07-01T01:00Z → exit 1 (no matching TCB level)', async () => {
    const quote = v('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat');
    const ok = await run({ tdxQuote: quote, at: '2023-07-01T01:00:00Z' });
    expect(ok.code).toBe(0);
    expect(ok.out).toMatch(/^Verdict: HARDWARE-ATTESTED/);
    expect(ok.out).toContain('COLLATERAL_NOT_SUPPLIED');
    const C = (f: string) => v('tdx', 'collateral', f);
    const withCol = await run({
      tdxQuote: quote,
      at: '2023-07-01T01:00:00Z',
      tcbInfo: C('sample_tcbInfo_response'),
      qeIdentity: C('sample_qeIdentity_response'),
      tcbSigningChain: C('tcb-signing-issuer-chain.pem'),
      pckCrl: C('pckcrl'),
      rootCrl: C('rootcrl.der'),
    });
    expect(withCol.code).toBe(1);
    expect(withCol.out).toMatch(/FAIL\s+tdx\.tcb_status\s+TCB_LEVEL_NOT_FOUND/);
    expect(withCol.out).toMatch(/PASS\s+tdx\.qe_identity/);
  });

  it('usage and input errors → exit 2 with one clean line', async () => {
    const quote = v('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat');
    for (const opts of [
      {},
      { tdxQuote: quote, snpReport: quote },
      { tdxQuote: join(dir, 'missing.dat') },
      { tdxQuote: quote, at: 'yesterday' },
      { tdxQuote: quote, trustStore: write('bad-ts.yaml', 'version: 1\nroots: [1]\n') },
      { tdxQuote: quote, referenceValues: join(dir, 'nope.yaml') },
      { tdxQuote: quote, reportData: 'abcd' },
      { tpmQuote: quote },
      { snpReport: quote },
      { snpReport: quote, certs: [quote], product: 'Naples' },
    ] as VerifyEvidenceCliOptions[]) {
      const r = await run(opts);
      expect(r.code, JSON.stringify(opts)).toBe(2);
      expect(r.err).toMatch(/^cmcp-verify evidence: [^\n]+\n$/);
      expect(r.out).toBe('');
    }
  });

  it('malformed evidence is a failed verification (exit 1), not a crash', async () => {
    const junk = write('junk.bin', 'not a quote');
    const r = await run({ tdxQuote: junk, json: true });
    expect(r.code).toBe(1);
    expect(JSON.parse(r.out).verdict).toBe('invalid');
  });

  it('registerVerifyEvidenceCommand: runs through commander', async () => {
    const program = new Command().name('cmcp');
    registerVerifyEvidenceCommand(program, 'verify-evidence');
    const stdout = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    const prev = process.exitCode;
    try {
      await program.parseAsync([
        'node',
        'cmcp',
        'verify-evidence',
        '--tdx-quote',
        v('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat'),
        '--at',
        '2023-07-01T01:00:00Z',
        '--json',
      ]);
      expect(process.exitCode).toBe(0);
      const printed = stdout.mock.calls.map((c) => String(c[0])).join('');
      expect(JSON.parse(printed).verdict).toBe('hardware-attested');
    } finally {
      stdout.mockRestore();
      process.exitCode = prev;
    }
  });
});

describe('cmcp verify --trust-store / --reference-values', () => {
  it('an unreadable or invalid trust store / reference values file → exit 2', async () => {
    const claim = write('claim.json', '{}');
    for (const opts of [
      { trustStore: join(dir, 'missing.yaml') },
      { trustStore: write('ts2.yaml', 'version: 9\n') },
      { referenceValues: write('rv2.yaml', 'version: 1\nbogus: true\n') },
      { at: '2026-13-40' },
    ]) {
      let err = '';
      const code = await runVerify(claim, opts, { stdout: () => {}, stderr: (t) => (err += t) });
      expect(code, JSON.stringify(opts)).toBe(2);
      expect(err).toMatch(/^cmcp-verify claim: [^\n]+\n$/);
    }
  });

  it('the default trust store is the repository file; a malformed claim still exits 1', async () => {
    let out = '';
    const code = await runVerify(
      write('claim2.json', '{}'),
      {},
      { stdout: (t) => (out += t), stderr: () => {} },
    );
    expect(code).toBe(1);
    expect(out).toContain('CLAIM_MALFORMED');
  });
});
