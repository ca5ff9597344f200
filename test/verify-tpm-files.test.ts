/**
 * TPM files as tpm2-tools writes them, built with the real binaries against
 * swtpm with the SHA-1/256/384/512 banks allocated: the AK as TPM2B_PUBLIC / TPMT_PUBLIC / PEM /
 * DER, its parent as the EK's qualified name or public area, TPMT_SIGNATURE and `-f plain`
 * signatures (ECDSA, RSASSA, RSAPSS), and PCR values from `tpm2_quote -o` and `tpm2_pcrread -o`
 * over every bank the quote selects. For each: the good file, a truncated file, a flipped byte
 * in each signed region, the file under the wrong flag, a TPMT_SIGNATURE cut at every length, and
 * a mutation property run.
 */
import { createPublicKey } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyTpmEvidence } from '@cmcp/verify';
import { runVerifyEvidence, type VerifyEvidenceCliOptions } from '@cmcp/verify/cli';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  parseSerializedPcrs,
  parseTpmsAttest,
  splitPcrValues,
  TPM_ALG,
} from '../packages/verify/src/tpm/index.js';
import { allocateAllBanks, readTool, type ToolsQuote, toolsQuote } from '../testing/tpm2-tools.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';

type Report = {
  verdict: string;
  checks: { id: string; status: string; reason_code: string; detail: string }[];
};
const NONCE = '5eed0f00d1e5c0de5eed0f00d1e5c0de5eed0f00d1e5c0de5eed0f00d1e5c0de';

const root = mkdtempSync(join(tmpdir(), 'cmcp-tpm-files-'));
let sw: Awaited<ReturnType<typeof startSwtpm>>;
const q: Record<string, ToolsQuote> = {};
beforeAll(async () => {
  sw = await startSwtpm();
  allocateAllBanks(sw, root);
  q.ecdsa = toolsQuote(sw, root, 'ecdsa', { alg: 'ecc', hash: 'sha256', scheme: 'ecdsa' }, NONCE);
  q.rsassa = toolsQuote(sw, root, 'rsassa', { alg: 'rsa', hash: 'sha256', scheme: 'rsassa' }, NONCE);
  q.rsapss = toolsQuote(sw, root, 'rsapss', { alg: 'rsa', hash: 'sha384', scheme: 'rsapss' }, NONCE);
}, 120_000);
afterAll(async () => {
  await sw?.stop();
  rmSync(root, { recursive: true, force: true });
});

let n = 0;
const put = (data: Buffer) => {
  const p = join(root, `f${n++}.bin`);
  writeFileSync(p, data);
  return p;
};
const run = async (opts: VerifyEvidenceCliOptions) => {
  let out = '';
  let err = '';
  const code = await runVerifyEvidence(
    { json: true, require: 'hardware-unanchored', nonce: NONCE, ...opts },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  return { code, err, report: out ? (JSON.parse(out) as Report) : null };
};
const get = (r: Report | null, id: string) => r?.checks.find((c) => c.id === id);
const failed = (r: Report | null) =>
  (r?.checks ?? []).filter((c) => c.status === 'fail').map((c) => `${c.id} ${c.reason_code}`);
const base = (x: ToolsQuote): VerifyEvidenceCliOptions => ({
  tpmQuote: x.msg,
  tpmSig: x.sig,
  ak: x.akTss,
  akParentName: `@${x.ekQname}`,
  pcrsFile: x.pcrs,
});
const plain = (x: ToolsQuote): VerifyEvidenceCliOptions => ({
  ...base(x),
  tpmQuote: x.plainMsg,
  tpmSig: x.plainSig,
  pcrsFile: x.plainPcrs,
});

describe('tpm2-tools files (swtpm, every bank)', () => {
  it('the quotes select sha1, sha256, sha384 and sha512; -o serialized and pcrread values/serialized carry the same values', () => {
    for (const x of Object.values(q)) {
      const attest = parseTpmsAttest(readTool(x.msg));
      expect(attest.pcrSelect.map((s) => s.hashAlg)).toEqual([
        TPM_ALG.SHA1,
        TPM_ALG.SHA256,
        TPM_ALG.SHA384,
        TPM_ALG.SHA512,
      ]);
      const fromQuote = parseSerializedPcrs(readTool(x.pcrs));
      expect(fromQuote.values).toHaveLength(11);
      expect(fromQuote.values.find((v) => v.hashAlg === TPM_ALG.SHA512 && v.index === 16)?.value.length).toBe(
        64,
      );
      expect(parseSerializedPcrs(readTool(x.pcrreadSerialized)).values).toEqual(fromQuote.values);
      expect(splitPcrValues(readTool(x.pcrreadValues), attest.pcrSelect)).toEqual(fromQuote.values);
    }
  });

  for (const scheme of ['ecdsa', 'rsassa', 'rsapss'] as const) {
    it(`${scheme}: every AK layout × TPMT_SIGNATURE and -f plain × every PCR file verifies, qualifiedSigner checked`, async () => {
      const x = q[scheme] as ToolsQuote;
      const cases: VerifyEvidenceCliOptions[] = [
        base(x),
        { ...base(x), ak: x.akTpmt },
        { ...base(x), akParentName: undefined, akParent: x.ekPub },
        { ...base(x), pcrsFile: x.pcrreadValues },
        { ...base(x), pcrsFile: x.pcrreadSerialized },
        plain(x),
        { ...plain(x), ak: x.akTpmt, tpmSigFormat: 'plain' },
        { ...plain(x), tpmSigFormat: `${scheme}-${scheme === 'rsapss' ? 'sha384' : 'sha256'}` },
      ];
      for (const c of cases) {
        const r = await run(c);
        expect(r.err, JSON.stringify(c)).toBe('');
        expect(failed(r.report), JSON.stringify(c)).toEqual([]);
        expect(get(r.report, 'tpm.qualified_signer')?.status).toBe('pass');
        expect(get(r.report, 'tpm.pcr_digest')?.status).toBe('pass');
        expect(get(r.report, 'evidence.binding')?.status).toBe('pass');
        expect(r.report?.verdict).toBe('hardware-unanchored');
        expect(r.code).toBe(0);
      }
      // PEM / DER AKs are bare keys: the signature verifies, the name cannot be checked
      for (const ak of [x.akPem, x.akDer]) {
        const r = await run({ ...base(x), ak });
        expect(failed(r.report)).toEqual([]);
        expect(get(r.report, 'tpm.qualified_signer')?.status).toBe('absent');
        // a plain signature with a bare key names no scheme: refused, never guessed
        const p = await run({ ...plain(x), ak });
        expect(get(p.report, 'tpm.signature_parse')?.reason_code).toBe('TPM_SIGNATURE_SCHEME_UNKNOWN');
        expect(p.code).toBe(1);
      }
      // without the parent name the qualified signer is not the AK name: refused with a hint
      const np = await run({ ...base(x), akParentName: undefined });
      expect(get(np.report, 'tpm.qualified_signer')?.reason_code).toBe('QUALIFIED_SIGNER_MISMATCH');
      expect(get(np.report, 'tpm.qualified_signer')?.detail).toMatch(/--ak-parent-name/);
    });
  }

  it('RSAPSS with a plain signature is never checked as PKCS#1 v1.5, nor RSASSA as PSS', async () => {
    const r = await run({ ...plain(q.rsapss as ToolsQuote), tpmSigFormat: 'rsassa-sha384' });
    expect(get(r.report, 'evidence.signature')?.status).toBe('fail');
    const s = await run({ ...plain(q.rsassa as ToolsQuote), tpmSigFormat: 'rsapss-sha256' });
    expect(get(s.report, 'evidence.signature')?.status).toBe('fail');
  });

  it('truncated files are refused: AK and PCR files as usage errors with a code, quote and signature as failed checks', async () => {
    const x = q.ecdsa as ToolsQuote;
    const cut = (p: string) => put(readTool(p).subarray(0, readTool(p).length - 1));
    const ak = await run({ ...base(x), ak: cut(x.akTss) });
    expect(ak.code).toBe(2);
    expect(ak.err).toMatch(/--ak .*: TPM_FILE_LAYOUT_MISMATCH: the --ak file is not a layout/);
    expect((await run({ ...base(x), ak: cut(x.akTpmt) })).code).toBe(2);
    for (const pcrs of [x.pcrs, x.pcrreadValues]) {
      const r = await run({ ...base(x), pcrsFile: cut(pcrs) });
      expect(r.code).toBe(2);
      expect(r.err).toMatch(/PCR_FILE_MALFORMED/);
    }
    expect(
      get((await run({ ...base(x), tpmQuote: cut(x.msg) })).report, 'tpm.attest_parse')?.reason_code,
    ).toBe('TPM_ATTEST_TRUNCATED');
    const sig = await run({ ...base(x), tpmSig: cut(x.sig) });
    expect(sig.code).toBe(1);
    expect(get(sig.report, 'tpm.signature_parse')?.status).toBe('fail');
    const psig = await run({ ...plain(x), tpmSig: cut(x.plainSig) });
    expect(get(psig.report, 'tpm.signature_parse')?.reason_code).toBe('TPM_SIGNATURE_MALFORMED');
    const rsa = await run({
      ...plain(q.rsassa as ToolsQuote),
      tpmSig: cut((q.rsassa as ToolsQuote).plainSig),
    });
    expect(get(rsa.report, 'evidence.signature')?.reason_code).toBe('TPM_SIGNATURE_LENGTH_INVALID');
    expect((await run({ ...base(x), akParentName: undefined, akParent: cut(x.ekPub) })).code).toBe(2);
  });

  it('a TPMT_SIGNATURE cut short at any length is TPM_SIGNATURE_MALFORMED, with the AK as TPM2B_PUBLIC or as a bare key', async () => {
    const seen = new Set<string>();
    for (const x of Object.values(q)) {
      const sig = readTool(x.sig);
      for (const ak of [
        { public: readTool(x.akTss).subarray(2) },
        { key: createPublicKey(readTool(x.akPem)) },
      ]) {
        for (let len = 1; len < sig.length; len++) {
          const r = verifyTpmEvidence({
            attest: readTool(x.msg),
            signature: sig.subarray(0, len),
            signatureFormat: 'auto',
            ak,
          });
          const c = r.checks.find((k) => k.id === 'tpm.signature_parse');
          seen.add(`${c?.status} ${c?.reason_code}`);
          expect(r.verdict).toBe('invalid');
          expect(c, `${x.dir} cut to ${len} of ${sig.length}`).toMatchObject({
            status: 'fail',
            reason_code: 'TPM_SIGNATURE_MALFORMED',
          });
        }
      }
    }
    expect([...seen]).toEqual(['fail TPM_SIGNATURE_MALFORMED']);
    // through the CLI (auto is its default), as a failed check
    const x = q.rsassa as ToolsQuote;
    const cut = await run({ ...base(x), tpmSig: put(readTool(x.sig).subarray(0, 40)) });
    expect(cut.code).toBe(1);
    expect(get(cut.report, 'tpm.signature_parse')?.reason_code).toBe('TPM_SIGNATURE_MALFORMED');
  });

  it('a flipped byte in each signed region of the quote, in the signature, the AK, the parent name and every PCR value is refused', async () => {
    const x = q.rsapss as ToolsQuote;
    const msg = readTool(x.msg);
    const a = parseTpmsAttest(msg);
    // offsets: magic 0, type 4, qualifiedSigner 8, extraData, clockInfo, firmwareVersion, pcrSelect, pcrDigest
    const qs = 6 + 2;
    const ed = qs + a.qualifiedSigner.length + 2;
    const clock = ed + a.extraData.length;
    const fw = clock + 17;
    const sel = fw + 8;
    const regions = {
      magic: 0,
      type: 4,
      qualifiedSigner: qs + 5,
      extraData: ed + 3,
      clock: clock + 7,
      resetCount: clock + 11,
      firmwareVersion: fw + 2,
      pcrSelect: sel + 7,
      pcrDigest: msg.length - 1,
    };
    for (const [what, at] of Object.entries(regions)) {
      const b = Buffer.from(msg);
      b[at] = (b[at] ?? 0) ^ 0x01;
      const r = await run({ ...base(x), tpmQuote: put(b) });
      expect(r.code, what).toBe(1);
      expect(r.report?.verdict, what).toBe('invalid');
    }
    for (const [flag, file] of [
      ['tpmSig', x.sig],
      ['ak', x.akTss],
      ['akParentName', x.ekQname],
    ] as const) {
      const b = Buffer.from(readTool(file));
      b[b.length - 3] = (b[b.length - 3] ?? 0) ^ 0x01;
      const path = put(b);
      const r = await run({ ...base(x), [flag]: flag === 'akParentName' ? `@${path}` : path });
      expect(r.code, flag).toBe(1);
    }
    const vals = parseSerializedPcrs(readTool(x.pcrs)).values;
    const flat = readTool(x.pcrreadValues);
    let off = 0;
    for (const v of vals) {
      const b = Buffer.from(flat);
      b[off] = (b[off] ?? 0) ^ 0x80;
      off += v.value.length;
      const r = await run({ ...base(x), pcrsFile: put(b) });
      expect(get(r.report, 'tpm.pcr_digest')?.reason_code, `${v.hashAlg}:${v.index}`).toBe(
        'PCR_DIGEST_MISMATCH',
      );
    }
  });

  it('a file under the wrong flag is refused with TPM_FILE_LAYOUT_MISMATCH naming what it is', async () => {
    const x = q.ecdsa as ToolsQuote;
    const cases: [VerifyEvidenceCliOptions, RegExp][] = [
      [{ ...base(x), ak: x.sig }, /--ak .*is a TPMT_SIGNATURE, not a TPM2B_PUBLIC or TPMT_PUBLIC/],
      [{ ...base(x), ak: x.msg }, /--ak .*is a TPMS_ATTEST/],
      [{ ...base(x), ak: x.pcrs }, /--ak .*is a tpm2-tools serialized PCR values/],
      [{ ...base(x), tpmSig: x.akTss }, /--tpm-sig .*is a TPM2B_PUBLIC/],
      [{ ...base(x), tpmSig: x.msg }, /--tpm-sig .*is a TPMS_ATTEST/],
      [{ ...base(x), tpmSig: x.plainSig, tpmSigFormat: 'tpmt' }, /--tpm-sig .*not a TPMT_SIGNATURE/],
      [{ ...base(x), tpmQuote: x.sig }, /--tpm-quote .*is a TPMT_SIGNATURE, not a TPMS_ATTEST/],
      [{ ...base(x), tpmQuote: x.akTpmt }, /--tpm-quote .*is a TPMT_PUBLIC/],
      [{ ...base(x), tpmQuote: x.pcrs }, /--tpm-quote .*serialized PCR values/],
      [{ ...base(x), pcrsFile: x.msg }, /--pcrs-file .*is a TPMS_ATTEST/],
      [{ ...base(x), pcrsFile: x.akTss }, /--pcrs-file .*is a TPM2B_PUBLIC/],
      [{ ...base(x), akParentName: undefined, akParent: x.sig }, /--ak-parent .*is a TPMT_SIGNATURE/],
    ];
    for (const [opts, re] of cases) {
      const r = await run(opts);
      expect(r.code, JSON.stringify(opts)).toBe(2);
      expect(r.err).toMatch(/TPM_FILE_LAYOUT_MISMATCH/);
      expect(r.err).toMatch(re);
    }
  });
});

/** A seeded PRNG (mulberry32), as in verify-property.test.ts. */
function prng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

describe('mutation property: tpm2-tools files (no false accept, no crash)', () => {
  const N = Number(process.env.CMCP_PROPERTY_N_FILES ?? 300);
  it(`${N} random mutations of each file (TPM2B_PUBLIC, TPMT_PUBLIC, -o serialized, -F values, plain DER, TPMT_SIGNATURE): refused or a check fails`, async () => {
    const rnd = prng(Number(process.env.CMCP_PROPERTY_SEED ?? 0x7f11e5));
    const int = (k: number) => Math.floor(rnd() * k);
    const x = q.ecdsa as ToolsQuote;
    const targets: [keyof VerifyEvidenceCliOptions, string, VerifyEvidenceCliOptions][] = [
      ['ak', x.akTss, base(x)],
      ['ak', x.akTpmt, base(x)],
      ['pcrsFile', x.pcrs, base(x)],
      ['pcrsFile', x.pcrreadValues, base(x)],
      ['tpmSig', x.plainSig, plain(x)],
      ['tpmSig', x.sig, base(x)],
    ];
    for (const [flag, file, opts] of targets) {
      const good = readTool(file);
      for (let i = 0; i < N; i++) {
        const b = Buffer.from(good);
        const r0 = rnd();
        let m: Buffer;
        if (r0 < 0.05) m = b.subarray(0, int(b.length));
        else if (r0 < 0.1) m = Buffer.concat([b, Buffer.from([int(256)])]);
        else {
          for (let k = 1 + int(3); k > 0; k--) {
            const at = int(b.length);
            b[at] = (b[at] ?? 0) ^ (1 + int(255));
          }
          m = b;
        }
        if (m.equals(good)) continue;
        const r = await run({ ...opts, [flag]: put(m) });
        const what = `${file} mutation ${i}`;
        expect([1, 2], what).toContain(r.code);
        if (r.code === 2) expect(r.err, what).toMatch(/^cmcp-verify evidence: [^\n]+\n$/);
        else expect(failed(r.report).length, what).toBeGreaterThan(0);
      }
    }
  }, 120_000);

  it('the library takes the parsed files the same way (verifyTpmEvidence with every bank)', () => {
    const x = q.rsassa as ToolsQuote;
    const r = verifyTpmEvidence({
      attest: readTool(x.plainMsg),
      signature: readTool(x.plainSig),
      signatureFormat: 'plain',
      ak: { public: readTool(x.akTpmt) },
      akParentQualifiedName: readTool(x.ekQname),
      pcrValues: parseSerializedPcrs(readTool(x.plainPcrs)).values,
      nonce: Buffer.from(NONCE, 'hex'),
    });
    expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(r.verdict).toBe('hardware-unanchored');
  });
});
