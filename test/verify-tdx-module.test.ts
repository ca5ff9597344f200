/**
 * TDX module identities (TCB info v3 `tdxModuleIdentities`, Intel DCAP QVL TdxModuleCheck):
 * when TEE_TCB_SVN[1] (the TDX module major version) is > 0 the module is matched against the
 * identity `TDX_<version as 2 hex digits>`, its TCB level gives the module status, the TCB level
 * match skips TDX components 0–1, and the statuses converge. Exercised on the SPR E4 quote with
 * TEE_TCB_SVN modified in a copy (the quote signature then fails; the TCB logic is tested on
 * parsed values), on the real signed collateral, and end to end with a TCB info re-signed by a
 * throwaway "Intel SGX TCB Signing" chain pinned in a test trust store.
 */
import 'reflect-metadata';
import { createPrivateKey, sign as nodeSign, webcrypto } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type { CheckResult } from '@cmcp/verify';
import { loadTrustStore, parseReferenceValues, parseTrustStore, type TrustStore } from '@cmcp/verify';
import * as px from '@peculiar/x509';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  evaluateTdxTcb,
  matchTdxModule,
  type TdxCollateral,
  type TdxPlatformTcb,
  topLevelMembers,
  verifyTdxCollateral,
} from '../packages/verify/src/tdx/collateral.js';
import { parseTdxQuote, pckExtension, verifyTdxQuote } from '../packages/verify/src/tdx/index.js';
import { type Cert, parseCert, pemBlocks, validateChain } from '../packages/verify/src/x509.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

px.cryptoProvider.set(webcrypto as unknown as Parameters<typeof px.cryptoProvider.set>[0]);

const AT = new Date('2023-07-01T01:00:00Z');
const read = (...p: string[]) => readFileSync(vectorPath('tdx', ...p));
const quoteBytes = () => read('go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat');
const trust = (): TrustStore =>
  loadTrustStore(new URL('../attestation/trust-store.yaml', import.meta.url).pathname);
const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
/** TD report body at offset 48; TEE_TCB_SVN is its first 16 bytes. */
const TEE_TCB_SVN_OFFSET = 48;
/** A copy of the quote with TEE_TCB_SVN[0..2] replaced (the quote signature no longer verifies). */
const withTeeTcbSvn = (svn: [number, number, number]) => {
  const b = Buffer.from(quoteBytes());
  b[TEE_TCB_SVN_OFFSET] = svn[0];
  b[TEE_TCB_SVN_OFFSET + 1] = svn[1];
  b[TEE_TCB_SVN_OFFSET + 2] = svn[2];
  return b;
};
const realTcbInfo = () =>
  JSON.parse(
    (topLevelMembers(read('collateral', 'sample_tcbInfo_response')).get('tcbInfo') as Buffer).toString(
      'utf8',
    ),
  ) as Record<string, unknown>;
const pckPath = (): Cert[] => {
  const r = validateChain({
    certs: pemBlocks(parseTdxQuote(quoteBytes()).pckChainPem).map(parseCert),
    roots: trust().roots.filter((x) => x.purpose === 'intel-sgx-root'),
    at: AT,
    what: 'PCK',
    usedFor: 'tdx-pck',
  });
  if (r.status !== 'anchored') throw new Error('pck chain');
  return r.path;
};
const platform = (quote: Uint8Array, over: Partial<TdxPlatformTcb> = {}): TdxPlatformTcb => {
  const b = parseTdxQuote(quote).body;
  const ext = pckExtension(pckPath()[0] as Cert);
  return {
    teeTcbSvn: b.teeTcbSvn,
    mrSignerSeam: b.mrSignerSeam,
    seamAttributes: b.seamAttributes,
    sgxTcbComponents: ext.tcbComponents,
    pceSvn: ext.pceSvn,
    ...over,
  };
};

const ZERO48 = '00'.repeat(48);
const identity = (id: string, levels: [number, string][], over: Record<string, unknown> = {}) => ({
  id,
  mrsigner: ZERO48,
  attributes: '0000000000000000',
  attributesMask: 'FFFFFFFFFFFFFFFF',
  tcbLevels: levels.map(([isvsvn, tcbStatus]) => ({
    tcb: { isvsvn },
    tcbDate: '2023-02-15T00:00:00Z',
    tcbStatus,
  })),
  ...over,
});
const TDX_01 = identity('TDX_01', [
  [3, 'UpToDate'],
  [2, 'OutOfDate'],
  [1, 'Revoked'],
]);
/**
 * The real TCB info with its SGX components lowered to the SPR E4 PCK's (3,3,2,2,2,1,0,2,0…), so
 * that the TDX side decides; TDX components stay 3,0,5,0… (UpToDate, pcesvn 11; OutOfDate, pcesvn 5).
 */
function lowered(identities: unknown[] | undefined, firstStatus = 'UpToDate'): Record<string, unknown> {
  const info = realTcbInfo();
  const levels = info.tcbLevels as { tcb: { sgxtcbcomponents: { svn: number }[] }; tcbStatus: string }[];
  const pck = [3, 3, 2, 2, 2, 1, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0];
  for (const l of levels)
    l.tcb.sgxtcbcomponents = l.tcb.sgxtcbcomponents.map((c, i) => ({ ...c, svn: pck[i] ?? 0 }));
  if (levels[0]) levels[0].tcbStatus = firstStatus;
  if (identities) info.tdxModuleIdentities = identities;
  return info;
}

describe.skipIf(!hasVectors())(
  'TDX module identity matching on parsed values (SPR E4 quote, modified copies)',
  () => {
    it('the copy really changes TEE_TCB_SVN (and only the quote signature depends on it)', () => {
      expect(parseTdxQuote(quoteBytes()).body.teeTcbSvn.subarray(0, 3).toString('hex')).toBe('030004');
      expect(
        parseTdxQuote(withTeeTcbSvn([3, 1, 5]))
          .body.teeTcbSvn.subarray(0, 3)
          .toString('hex'),
      ).toBe('030105');
    });

    it('module version 0 (the vector as is): matched against tdxModule; no TCB level → TCB_LEVEL_NOT_FOUND', () => {
      const m = matchTdxModule(realTcbInfo(), platform(quoteBytes()));
      expect(m).toMatchObject({ ok: true, id: 'tdxModule', version: 0, isvSvn: 3 });
      expect(evaluateTdxTcb(realTcbInfo(), platform(quoteBytes()))).toMatchObject({
        ok: false,
        code: 'TCB_LEVEL_NOT_FOUND',
      });
    });

    it('module version 1 without tdxModuleIdentities (the real TCB info) → TDX_MODULE_IDENTITY_NOT_FOUND for TDX_01', () => {
      const e = evaluateTdxTcb(realTcbInfo(), platform(withTeeTcbSvn([3, 1, 4])));
      expect(e).toMatchObject({ ok: false, code: 'TDX_MODULE_IDENTITY_NOT_FOUND' });
      expect(e.ok === false && e.detail).toMatch(/TDX_01/);
    });

    it('a module identity does not lift the SGX components: with TDX_01 but the real levels → still TCB_LEVEL_NOT_FOUND', () => {
      const info = { ...realTcbInfo(), tdxModuleIdentities: [TDX_01] };
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([3, 1, 5])))).toMatchObject({
        ok: false,
        code: 'TCB_LEVEL_NOT_FOUND',
      });
    });

    it('version 0 compares TDX components 0–1 against the levels; version > 0 skips them and uses the module identity', () => {
      const info = lowered([TDX_01]);
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([3, 0, 5])))).toEqual({
        ok: true,
        status: 'UpToDate',
        platformStatus: 'UpToDate',
        module: { id: 'tdxModule', version: 0, isvSvn: 3, status: null },
      });
      // module ISVSVN 2 < level component 0 (3): version 0 finds no level …
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([2, 0, 5])))).toMatchObject({
        ok: false,
        code: 'TCB_LEVEL_NOT_FOUND',
      });
      // … version 1 skips components 0–1; TDX_01 gives ISVSVN 2 → OutOfDate, which converges
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([2, 1, 5])))).toEqual({
        ok: true,
        status: 'OutOfDate',
        platformStatus: 'UpToDate',
        module: { id: 'TDX_01', version: 1, isvSvn: 2, status: 'OutOfDate' },
      });
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([3, 1, 5])))).toMatchObject({
        ok: true,
        status: 'UpToDate',
        module: { id: 'TDX_01', status: 'UpToDate' },
      });
      // component 2 (not the module) is still compared: 4 < 5
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([3, 1, 4])))).toMatchObject({
        ok: false,
        code: 'TCB_LEVEL_NOT_FOUND',
      });
    });

    it('module TCB levels: first level with isvsvn ≤ TEE_TCB_SVN[0]; Revoked wins; none → TDX_MODULE_TCB_LEVEL_NOT_FOUND', () => {
      const info = lowered([TDX_01]);
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([9, 1, 5])))).toMatchObject({
        ok: true,
        status: 'UpToDate',
      });
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([1, 1, 5])))).toMatchObject({
        ok: true,
        status: 'Revoked',
        module: { status: 'Revoked' },
      });
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([0, 1, 5])))).toMatchObject({
        ok: false,
        code: 'TDX_MODULE_TCB_LEVEL_NOT_FOUND',
      });
    });

    it('convergence: module OutOfDate + platform ConfigurationNeeded → OutOfDateConfigurationNeeded; platform OutOfDate (low PCESVN) stays OutOfDate', () => {
      expect(
        evaluateTdxTcb(lowered([TDX_01], 'ConfigurationNeeded'), platform(withTeeTcbSvn([2, 1, 5]))),
      ).toMatchObject({
        ok: true,
        status: 'OutOfDateConfigurationNeeded',
        platformStatus: 'ConfigurationNeeded',
      });
      expect(
        evaluateTdxTcb(lowered([TDX_01], 'SWHardeningNeeded'), platform(withTeeTcbSvn([2, 1, 5]))),
      ).toMatchObject({
        status: 'OutOfDate',
      });
      expect(
        evaluateTdxTcb(lowered([TDX_01], 'ConfigurationNeeded'), platform(withTeeTcbSvn([3, 1, 5]))),
      ).toMatchObject({
        status: 'ConfigurationNeeded',
      });
      // PCESVN 10 < 11: the first level fails, the second (pcesvn 5, OutOfDate) matches
      expect(
        evaluateTdxTcb(lowered([TDX_01]), platform(withTeeTcbSvn([3, 1, 5]), { pceSvn: 10 })),
      ).toMatchObject({
        ok: true,
        status: 'OutOfDate',
        platformStatus: 'OutOfDate',
        module: { status: 'UpToDate' },
      });
    });

    it('identity selection: TDX_<version as 2 hex digits>, case-insensitive; other versions → TDX_MODULE_IDENTITY_NOT_FOUND', () => {
      const info = lowered([TDX_01, identity('tdx_0a', [[1, 'UpToDate']])]);
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([3, 2, 5])))).toMatchObject({
        ok: false,
        code: 'TDX_MODULE_IDENTITY_NOT_FOUND',
      });
      expect(evaluateTdxTcb(info, platform(withTeeTcbSvn([1, 0x0a, 5])))).toMatchObject({
        ok: true,
        module: { id: 'TDX_0A', status: 'UpToDate' },
      });
    });

    it('the identity’s MRSIGNER / attributes must match MRSIGNERSEAM / SEAMATTRIBUTES (under its mask) → else COLLATERAL_MISMATCH', () => {
      const p = platform(withTeeTcbSvn([3, 1, 5]));
      const bad = [
        identity('TDX_01', [[3, 'UpToDate']], { mrsigner: 'AB'.repeat(48) }),
        identity('TDX_01', [[3, 'UpToDate']], { attributes: '0100000000000000' }),
      ];
      for (const id of bad)
        expect(matchTdxModule(lowered([id]), p)).toMatchObject({ ok: false, code: 'COLLATERAL_MISMATCH' });
      // a mask that ignores the differing bit makes it match
      const masked = identity('TDX_01', [[3, 'UpToDate']], {
        attributes: '0100000000000000',
        attributesMask: 'FEFFFFFFFFFFFFFF',
      });
      expect(matchTdxModule(lowered([masked]), p)).toMatchObject({ ok: true, id: 'TDX_01' });
      // the version-0 tdxModule is not used for a version-1 module, even if it would match
      expect(matchTdxModule(lowered(undefined), p)).toMatchObject({
        ok: false,
        code: 'TDX_MODULE_IDENTITY_NOT_FOUND',
      });
    });

    it('malformed identities are COLLATERAL_MALFORMED, never a pass', () => {
      const p = platform(withTeeTcbSvn([3, 1, 5]));
      for (const ids of [
        'x',
        [identity('TDX_01', [[3, 'UpToDate']], { mrsigner: 'zz' })],
        [{ ...TDX_01, tcbLevels: undefined }],
        [{ ...TDX_01, tcbLevels: [{ tcb: {}, tcbStatus: 'UpToDate' }] }],
      ]) {
        const info = { ...lowered(undefined), tdxModuleIdentities: ids };
        expect(evaluateTdxTcb(info, p), JSON.stringify(ids).slice(0, 80)).toMatchObject({
          ok: false,
          code: 'COLLATERAL_MALFORMED',
        });
      }
    });
  },
);

describe.skipIf(!hasVectors())('TDX module identities through the collateral checks', () => {
  const collateral = (over: Partial<TdxCollateral> = {}): TdxCollateral => ({
    tcbInfo: read('collateral', 'sample_tcbInfo_response'),
    qeIdentity: read('collateral', 'sample_qeIdentity_response'),
    tcbSigningChain: read('collateral', 'tcb-signing-issuer-chain.pem'),
    pckCrl: read('collateral', 'pckcrl'),
    rootCrl: read('collateral', 'rootcrl.der'),
    ...over,
  });
  const run = (quote: Uint8Array, col: TdxCollateral, ts: TrustStore, rv?: string) => {
    const path = pckPath();
    return verifyTdxCollateral({
      quote: parseTdxQuote(quote),
      pck: path[0],
      pckIssuer: path[1],
      pckRoot: path[2],
      collateral: col,
      trustStore: ts,
      at: AT,
      ...(rv ? { referenceValues: parseReferenceValues(rv) } : {}),
    });
  };

  it('real signed TCB info, module version 1 (modified quote copy): tdx.tcb_info fails TDX_MODULE_IDENTITY_NOT_FOUND, status not derived', () => {
    const r = run(withTeeTcbSvn([3, 1, 4]), collateral(), trust());
    expect(get(r.checks, 'tdx.collateral_signer').status).toBe('pass');
    expect(get(r.checks, 'tdx.tcb_info')).toMatchObject({
      status: 'fail',
      reason_code: 'TDX_MODULE_IDENTITY_NOT_FOUND',
    });
    expect(get(r.checks, 'tdx.tcb_status')).toMatchObject({
      status: 'fail',
      reason_code: 'DEPENDENCY_FAILED',
    });
    expect(r.tcbStatus).toBeUndefined();
    // the full quote verifier: the signature fails on the copy, the module check is still reported
    const q = verifyTdxQuote({
      quote: withTeeTcbSvn([3, 1, 4]),
      trustStore: trust(),
      at: AT,
      collateral: collateral(),
    });
    expect(get(q.checks, 'evidence.signature').status).toBe('fail');
    expect(get(q.checks, 'tdx.tcb_info').reason_code).toBe('TDX_MODULE_IDENTITY_NOT_FOUND');
    // and the unmodified quote matches tdxModule (version 0)
    expect(get(run(quoteBytes(), collateral(), trust()).checks, 'tdx.tcb_info').detail).toMatch(
      /tdxModule \(module version 0\)/,
    );
  });

  describe('a TCB info with tdxModuleIdentities, re-signed by a test TCB signing chain', () => {
    let signingPem: string;
    let signKey: ReturnType<typeof createPrivateKey>;
    let ts: TrustStore;
    beforeAll(async () => {
      const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
      const gen = () =>
        webcrypto.subtle.generateKey(alg, true, ['sign', 'verify']) as Promise<webcrypto.CryptoKeyPair>;
      const [rootKeys, leafKeys] = await Promise.all([gen(), gen()]);
      const nb = new Date('2023-01-01T00:00:00Z');
      const na = new Date('2030-01-01T00:00:00Z');
      const root = await px.X509CertificateGenerator.createSelfSigned({
        serialNumber: '01',
        name: 'CN=test SGX Root CA',
        notBefore: nb,
        notAfter: na,
        keys: rootKeys as never,
        signingAlgorithm: alg,
        extensions: [
          new px.BasicConstraintsExtension(true, undefined, true),
          new px.KeyUsagesExtension(px.KeyUsageFlags.keyCertSign | px.KeyUsageFlags.cRLSign, true),
          await px.SubjectKeyIdentifierExtension.create(rootKeys.publicKey as never),
        ],
      });
      const leaf = await px.X509CertificateGenerator.create({
        serialNumber: '02',
        subject: 'CN=Intel SGX TCB Signing, O=test',
        issuer: root.subject,
        notBefore: nb,
        notAfter: na,
        publicKey: leafKeys.publicKey as never,
        signingKey: rootKeys.privateKey as never,
        signingAlgorithm: alg,
        extensions: [
          new px.BasicConstraintsExtension(false, undefined, true),
          new px.KeyUsagesExtension(
            px.KeyUsageFlags.digitalSignature | px.KeyUsageFlags.nonRepudiation,
            true,
          ),
          await px.AuthorityKeyIdentifierExtension.create(rootKeys.publicKey as never),
        ],
      });
      signingPem = `${leaf.toString('pem')}\n${root.toString('pem')}\n`;
      signKey = createPrivateKey({
        key: Buffer.from(await webcrypto.subtle.exportKey('pkcs8', leafKeys.privateKey as never)),
        format: 'der',
        type: 'pkcs8',
      });
      const rootFp = parseCert(Buffer.from(root.rawData)).sha256;
      ts = parseTrustStore(
        `version: 1\nroots:\n  - {name: test SGX root, purpose: intel-sgx-root, sha256: "${rootFp}", source: test}\n  - ${JSON.stringify(trust().roots.find((r) => r.purpose === 'intel-sgx-root'))}\n`,
      );
    });
    const signed = (info: Record<string, unknown>): Buffer => {
      const body = JSON.stringify(info);
      const sig = nodeSign('sha256', Buffer.from(body), { key: signKey, dsaEncoding: 'ieee-p1363' });
      return Buffer.from(`{"tcbInfo":${body},"signature":"${sig.toString('hex')}"}`);
    };
    const col = (info: Record<string, unknown>) =>
      collateral({ tcbInfo: signed(info), tcbSigningChain: Buffer.from(signingPem), qeIdentity: undefined });

    it('module TDX_01 ISVSVN 3 → tdx.tcb_info names the identity, tdx.tcb_status UpToDate', () => {
      const r = run(withTeeTcbSvn([3, 1, 5]), col(lowered([TDX_01])), ts);
      expect(get(r.checks, 'tdx.collateral_signer').status).toBe('pass');
      expect(get(r.checks, 'tdx.tcb_info')).toMatchObject({ status: 'pass' });
      expect(get(r.checks, 'tdx.tcb_info').detail).toMatch(/tdxModuleIdentities TDX_01/);
      expect(get(r.checks, 'tdx.tcb_status')).toMatchObject({ status: 'pass' });
      expect(get(r.checks, 'tdx.tcb_status').detail).toMatch(
        /^TCB status UpToDate \(TCB level UpToDate; TDX module TDX_01 ISVSVN 3 → UpToDate\)/,
      );
      expect(r.tcbStatus).toBe('UpToDate');
    });

    it('module ISVSVN 2 → converged OutOfDate: refused by default, accepted when the reference values allow it', () => {
      const r = run(withTeeTcbSvn([2, 1, 5]), col(lowered([TDX_01])), ts);
      expect(get(r.checks, 'tdx.tcb_status')).toMatchObject({
        status: 'fail',
        reason_code: 'TCB_STATUS_NOT_ACCEPTED',
      });
      expect(get(r.checks, 'tdx.tcb_status').detail).toMatch(
        /OutOfDate \(TCB level UpToDate; TDX module TDX_01 ISVSVN 2 → OutOfDate\)/,
      );
      const ok = run(
        withTeeTcbSvn([2, 1, 5]),
        col(lowered([TDX_01])),
        ts,
        'version: 1\ntdx:\n  accepted_tcb_status: [UpToDate, OutOfDate]\n',
      );
      expect(get(ok.checks, 'tdx.tcb_status').status).toBe('pass');
      expect(ok.tcbStatus).toBe('OutOfDate');
    });

    it('module ISVSVN 0 → TDX_MODULE_TCB_LEVEL_NOT_FOUND; version 2 → tdx.tcb_info TDX_MODULE_IDENTITY_NOT_FOUND', () => {
      const r = run(withTeeTcbSvn([0, 1, 5]), col(lowered([TDX_01])), ts);
      expect(get(r.checks, 'tdx.tcb_info').status).toBe('pass');
      expect(get(r.checks, 'tdx.tcb_status').reason_code).toBe('TDX_MODULE_TCB_LEVEL_NOT_FOUND');
      const v2 = run(withTeeTcbSvn([3, 2, 5]), col(lowered([TDX_01])), ts);
      expect(get(v2.checks, 'tdx.tcb_info').reason_code).toBe('TDX_MODULE_IDENTITY_NOT_FOUND');
    });

    it('the re-signed collateral does not verify under the real Intel chain (the test signer is not Intel)', () => {
      const r = run(withTeeTcbSvn([3, 1, 5]), collateral({ tcbInfo: signed(lowered([TDX_01])) }), trust());
      expect(get(r.checks, 'tdx.tcb_info').reason_code).toBe('COLLATERAL_SIGNATURE_INVALID');
    });
  });
});
