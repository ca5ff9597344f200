/**
 * `verify-evidence` freshness inputs and exit codes (issue 13 items 3 and 5): `--nonce`,
 * `--nonce-text` (its SHA-256) and `--report-data` are compared with extraData / REPORT_DATA /
 * REPORTDATA at exact length; evidence checked without one is "not fresh: no nonce given"; the
 * default `--require` is hardware-attested.
 */
import { createHash, createPublicKey } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runVerifyEvidence, type VerifyEvidenceCliOptions } from '@cmcp/verify/cli';
import { afterAll, describe, expect, it } from 'vitest';
import { softQuote, softTpm } from '../testing/evidence.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-verify-fresh-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const put = (name: string, data: Buffer | string) => {
  const p = join(dir, name);
  writeFileSync(p, data);
  return p;
};
const run = async (opts: VerifyEvidenceCliOptions) => {
  let out = '';
  let err = '';
  const code = await runVerifyEvidence(opts, { stdout: (t) => (out += t), stderr: (t) => (err += t) });
  return { code, out, err };
};
type Report = {
  verdict: string;
  notes: string[];
  checks: { id: string; status: string; reason_code: string; detail: string }[];
};
const json = (out: string) => JSON.parse(out) as Report;
const binding = (r: Report) => r.checks.find((c) => c.id === 'evidence.binding');

/** A software-AK quote whose extraData is `extra`, its files, and the AK as a bare PEM key. */
function tpmFiles(extra: Buffer, tag: string): VerifyEvidenceCliOptions {
  const tpm = softTpm();
  const q = softQuote(tpm, { extraData: extra, pcrs: [], pcrDigest: createHash('sha256').digest() });
  return {
    tpmQuote: put(`${tag}.msg`, q.attest),
    tpmSig: put(`${tag}.sig`, q.signature),
    ak: put(`${tag}.pem`, createPublicKey(tpm.priv).export({ format: 'pem', type: 'spki' }).toString()),
  };
}

describe('verify-evidence: --nonce, --nonce-text, --report-data', () => {
  const challenge = 'relying party challenge 42';
  const digest = createHash('sha256').update(challenge, 'utf8').digest();

  it('--nonce-text is checked as SHA-256 of its UTF-8 bytes; another text or the raw text as --nonce fails', async () => {
    const f = tpmFiles(digest, 'text');
    const ok = json(
      (await run({ ...f, nonceText: challenge, require: 'hardware-unanchored', json: true })).out,
    );
    expect(binding(ok)?.status).toBe('pass');
    expect(ok.verdict).toBe('hardware-unanchored');
    const other = await run({ ...f, nonceText: `${challenge}!`, json: true });
    expect(other.code).toBe(1);
    expect(binding(json(other.out))?.reason_code).toBe('QUOTE_NONCE_MISMATCH');
    const rawText = await run({ ...f, nonce: Buffer.from(challenge).toString('hex'), json: true });
    expect(binding(json(rawText.out))?.reason_code).toBe('QUOTE_NONCE_MISMATCH');
  });

  it('--nonce is compared at exact length: zero-padded, truncated or extended values are refused', async () => {
    const f = tpmFiles(digest, 'exact');
    const hex = digest.toString('hex');
    expect((await run({ ...f, nonce: hex, require: 'hardware-unanchored' })).code).toBe(0);
    for (const bad of [`${hex}00`, hex.slice(0, -2), `${hex}${'00'.repeat(32)}`, `00${hex.slice(2)}`]) {
      const r = await run({ ...f, nonce: bad, require: 'signed-only', json: true });
      expect(r.code, bad).toBe(1);
      expect(binding(json(r.out))?.reason_code).toBe('QUOTE_NONCE_MISMATCH');
    }
    // a nonce file holds hex too
    expect(
      (await run({ ...f, nonce: `@${put('n.hex', `${hex}\n`)}`, require: 'hardware-unanchored' })).code,
    ).toBe(0);
  });

  it('without a nonce the binding is "not fresh: no nonce given" (check, note, verdict line), never "bound to the claim"', async () => {
    const f = tpmFiles(digest, 'none');
    const t = await run({ ...f, require: 'hardware-unanchored' });
    expect(t.code).toBe(0);
    expect(t.out).toMatch(/^Verdict: HARDWARE-UNANCHORED \([^\n]*not fresh: no nonce given\)/);
    expect(t.out).toMatch(/N\/A\s+evidence\.binding\s+NOT_SUPPLIED: not fresh: no nonce given/);
    expect(t.out).not.toMatch(/bound to the claim/);
    const j = json((await run({ ...f, json: true, require: 'signed-only' })).out);
    expect(binding(j)?.detail).toBe('not fresh: no nonce given');
    expect(j.notes.some((n) => n.startsWith('Not fresh: no nonce given'))).toBe(true);
    // with the nonce the verdict line says so
    const fresh = await run({ ...f, nonceText: challenge, require: 'hardware-unanchored' });
    expect(fresh.out).toMatch(/^Verdict: HARDWARE-UNANCHORED \([^\n]*carries the expected nonce/);
  });

  it('--pcrs-file: YAML with a UTF-8 comment is read as YAML (not as a tpm2-tools binary file)', async () => {
    const f = tpmFiles(digest, 'yaml');
    const r = await run({
      ...f,
      nonceText: challenge,
      pcrsFile: put('pcrs.yaml', '# valeurs mesurées — aucune\n{}\n'),
      require: 'hardware-unanchored',
      json: true,
    });
    expect(r.err).toBe('');
    expect(json(r.out).checks.find((c) => c.id === 'tpm.pcr_digest')?.status).toBe('pass');
  });

  it('more than one freshness input, or a --report-data that is not 64 bytes → exit 2', async () => {
    const f = tpmFiles(digest, 'usage');
    for (const opts of [
      { ...f, nonce: '00', nonceText: 'x' },
      { ...f, nonce: '00', reportData: '00'.repeat(64) },
      { ...f, reportData: '00'.repeat(63) },
      { ...f, reportData: '00'.repeat(65) },
      { ...f, nonce: 'xyz' },
    ]) {
      const r = await run(opts);
      expect(r.code, JSON.stringify(opts)).toBe(2);
      expect(r.err).toMatch(/^cmcp-verify evidence: [^\n]+\n$/);
    }
  });
});

describe('verify-evidence --require (default hardware-attested)', () => {
  it('unanchored raw evidence exits 1 by default, 0 when the caller asks for less; a bad --require exits 2', async () => {
    const f = tpmFiles(Buffer.alloc(32, 1), 'req');
    const nonce = '01'.repeat(32);
    const def = await run({ ...f, nonce });
    expect(def.code).toBe(1);
    expect(def.out).toMatch(/^Verdict: HARDWARE-UNANCHORED/);
    expect((await run({ ...f, nonce, require: 'hardware-attested' })).code).toBe(1);
    expect((await run({ ...f, nonce, require: 'hardware-unanchored' })).code).toBe(0);
    expect((await run({ ...f, nonce, require: 'signed-only' })).code).toBe(0);
    for (const bad of ['invalid', 'attested', '']) {
      const r = await run({ ...f, nonce, require: bad });
      expect(r.code, bad).toBe(2);
      expect(r.err).toMatch(/--require must be one of hardware-attested, hardware-unanchored, signed-only/);
    }
    // an invalid verdict exits 1 whatever is required
    const broken = await run({ ...f, nonce: '02'.repeat(32), require: 'signed-only' });
    expect(broken.code).toBe(1);
  });

  it.skipIf(!hasVectors())(
    'SEV-SNP: a 32-byte nonce is not zero-padded into the 64-byte REPORT_DATA; the exact 64 bytes pass',
    async () => {
      const d = (f: string) => vectorPath('snp', 'go-sev-guest-milan', f);
      const base = {
        snpReport: d('attestation.bin'),
        certs: [d('vcek.testcer'), d('ask_ark_milan.pem')],
        at: '2026-11-30T00:00:00Z',
        referenceValues: put('rv.yaml', 'version: 1\nsev_snp:\n  allow_debug: true\n'),
        json: true,
      };
      const full = `0102030405${'00'.repeat(59)}`;
      const ok = await run({ ...base, reportData: full });
      expect(ok.code).toBe(0);
      expect(json(ok.out).verdict).toBe('hardware-attested');
      const short = await run({ ...base, nonce: `0102030405${'00'.repeat(27)}` });
      expect(short.code).toBe(1);
      expect(binding(json(short.out))?.reason_code).toBe('EVIDENCE_BINDING_MISMATCH');
      expect(binding(json(short.out))?.detail).toMatch(/32-byte/);
      // no nonce: hardware-attested but labelled not fresh
      const none = await run({ ...base });
      expect(none.code).toBe(0);
      expect(binding(json(none.out))?.detail).toBe('not fresh: no nonce given');
      expect(readFileSync(d('attestation.bin')).length).toBe(1184);
    },
  );
});
