/**
 * Verification speed per evidence format (verifications per second, and the mean time of one).
 *
 * - `tpm-quote`: the Azure vTPM quote (RSA-2048 PKCS#1, nonce, 8 PCRs) as raw evidence;
 * - `tpm-claim+chain`: a full claim (Ed25519 claim signature, binding, ECDSA TPM quote, PCRs)
 *   whose AK certificate chains (leaf ← CA ← root) to a pinned root — hardware-attested;
 * - `sev-snp`: the Milan report with VCEK ← ASK ← ARK;
 * - `tdx`: the SPR E4 quote with its PCK chain; `tdx+collateral`: plus TCB info, QE identity, CRLs.
 *
 * Uses ../shared/vectors (or CMCP_VECTORS_DIR); formats whose vectors are missing are skipped.
 * Run directly (`node dist/bench/verify.js`) or through `runVerifyBench()`.
 */
import 'reflect-metadata';
import {
  createHash,
  createPublicKey,
  generateKeyPairSync,
  KeyObject,
  randomUUID,
  sign,
  webcrypto,
} from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { verifyClaim } from '@cmcp/verify/claim';
import { verifySnpEvidence, verifyTdxEvidence, verifyTpmEvidence } from '@cmcp/verify/evidence';
import {
  bindingDigest,
  ed25519PublicJwk,
  jwkThumbprint,
  reportData,
  tpmQualifyingData,
} from '@cmcp/verify/format/binding';
import { b64u } from '@cmcp/verify/format/canonical';
import { CLAIM_PROFILE, type Claim, signClaim } from '@cmcp/verify/format/claim';
import type { VerificationReport } from '@cmcp/verify/result';
import { TPM_ALG } from '@cmcp/verify/tpm';
import {
  defaultAttestationDir,
  loadTrustStore,
  parseReferenceValues,
  type TrustStore,
} from '@cmcp/verify/trust';
import * as px from '@peculiar/x509';

/** One bench line. */
export interface VerifyBenchResult {
  format: string;
  verdict: string;
  perSecond: number;
  meanMs: number;
  n: number;
  /** What the row measures and which verdict to expect, printed under the table. */
  note: string;
  /** `check id: reason code` of every failed check of the measured report. */
  failed: string[];
}

function measure(
  format: string,
  fn: () => VerificationReport,
  budgetMs = 1000,
  note = '',
): VerifyBenchResult {
  const first = fn(); // warm caches (certificate parsing is cached by content hash)
  let n = 0;
  const t0 = performance.now();
  let t = t0;
  while (t - t0 < budgetMs) {
    fn();
    n++;
    t = performance.now();
  }
  const ms = (t - t0) / n;
  const failed = first.checks.filter((c) => c.status === 'fail').map((c) => `${c.id}: ${c.reason_code}`);
  return { format, verdict: first.verdict, perSecond: 1000 / ms, meanMs: ms, n, note, failed };
}

const u16 = (n: number) => Buffer.from([n >> 8, n & 0xff]);
const u32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
};
const tpm2b = (b: Uint8Array) => Buffer.concat([u16(b.length), b]);

/** A claim bound to a software-made ECDSA TPM quote whose AK has a 3-certificate chain. */
async function claimWithChain(): Promise<{ claim: Claim; trust: TrustStore }> {
  px.cryptoProvider.set(webcrypto as unknown as Parameters<typeof px.cryptoProvider.set>[0]);
  const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' } as const;
  const gen = () =>
    webcrypto.subtle.generateKey(alg, true, ['sign', 'verify']) as Promise<webcrypto.CryptoKeyPair>;
  const [rk, ck, ak] = await Promise.all([gen(), gen(), gen()]);
  const nb = new Date('2026-01-01T00:00:00Z');
  const na = new Date('2036-01-01T00:00:00Z');
  const root = await px.X509CertificateGenerator.createSelfSigned({
    serialNumber: '01',
    name: 'CN=bench AK root',
    notBefore: nb,
    notAfter: na,
    keys: rk,
    signingAlgorithm: alg,
    extensions: [new px.BasicConstraintsExtension(true, undefined, true)],
  });
  const ca = await px.X509CertificateGenerator.create({
    serialNumber: '02',
    subject: 'CN=bench AK CA',
    issuer: root.subject,
    notBefore: nb,
    notAfter: na,
    publicKey: ck.publicKey,
    signingKey: rk.privateKey,
    signingAlgorithm: alg,
    extensions: [new px.BasicConstraintsExtension(true, 0, true)],
  });
  const leaf = await px.X509CertificateGenerator.create({
    serialNumber: '03',
    subject: 'CN=bench AK',
    issuer: ca.subject,
    notBefore: nb,
    notAfter: na,
    publicKey: ak.publicKey,
    signingKey: ck.privateKey,
    signingAlgorithm: alg,
    extensions: [
      new px.BasicConstraintsExtension(false, undefined, true),
      new px.ExtendedKeyUsageExtension(['2.23.133.8.3']),
    ],
  });
  const akPub = KeyObject.from(ak.publicKey);
  const akPriv = KeyObject.from(ak.privateKey);
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = ed25519PublicJwk(privateKey);
  const thumb = jwkThumbprint(jwk);
  const sessionId = randomUUID();
  const chainRoot = createHash('sha256').update('bench').digest('hex');
  const preimage = {
    domain: 'cmcp.session-binding' as const,
    version: 1 as const,
    session_id: sessionId,
    chain_root: chainRoot,
    key_thumbprint: b64u(thumb),
    gateway_measurement: null,
    policy_bundle_hash: null,
    catalog_hash: null,
    challenge: null,
  };
  const rd = reportData(thumb, bindingDigest(preimage));
  const xy = akPub.export({ format: 'jwk' }) as { x: string; y: string };
  const akPublic = Buffer.concat([
    u16(TPM_ALG.ECC),
    u16(TPM_ALG.SHA256),
    u32(0x00050072),
    tpm2b(Buffer.alloc(0)),
    u16(TPM_ALG.NULL),
    u16(TPM_ALG.ECDSA),
    u16(TPM_ALG.SHA256),
    u16(0x0003),
    u16(TPM_ALG.NULL),
    tpm2b(Buffer.from(xy.x, 'base64url')),
    tpm2b(Buffer.from(xy.y, 'base64url')),
  ]);
  const name = Buffer.concat([u16(TPM_ALG.SHA256), createHash('sha256').update(akPublic).digest()]);
  const parentQn = Buffer.from('4000000b', 'hex');
  const qn = Buffer.concat([
    u16(TPM_ALG.SHA256),
    createHash('sha256').update(parentQn).update(name).digest(),
  ]);
  const pcrs = [0, 1, 2, 3, 4, 5, 6, 7];
  const values = pcrs.map((i) => createHash('sha256').update(`pcr${i}`).digest());
  const attest = Buffer.concat([
    u32(0xff544347),
    u16(0x8018),
    tpm2b(qn),
    tpm2b(tpmQualifyingData(rd)),
    Buffer.alloc(8),
    u32(0),
    u32(0),
    Buffer.from([1]),
    Buffer.alloc(8),
    u32(1),
    u16(TPM_ALG.SHA256),
    Buffer.from([3, 0xff, 0, 0]),
    tpm2b(createHash('sha256').update(Buffer.concat(values)).digest()),
  ]);
  const p1363 = sign('sha256', attest, { key: akPriv, dsaEncoding: 'ieee-p1363' });
  const signature = Buffer.concat([
    u16(TPM_ALG.ECDSA),
    u16(TPM_ALG.SHA256),
    tpm2b(p1363.subarray(0, 32)),
    tpm2b(p1363.subarray(32)),
  ]);
  const claim = signClaim(
    {
      claim_version: 1,
      profile: CLAIM_PROFILE,
      issued_at: '2026-11-30T13:00:00Z',
      session_id: sessionId,
      agent_id: 'bench',
      gateway_measurement: null,
      policy_bundle_hash: null,
      enforcement_mode: 'enforce',
      catalog_hash: null,
      cnf: { jwk },
      audit_chain: { chain_id: sessionId, root: chainRoot, tip: chainRoot, length: 1 },
      transcript: [],
      counters: { tool_calls: 0, allowed: 0, refused: 0, faulted: 0 },
      binding: { preimage },
      evidence: {
        provider: 'tpm',
        status: 'bound',
        reason: null,
        report_data: b64u(rd),
        tpm: {
          attest: b64u(attest),
          signature: b64u(signature),
          ak_public: b64u(akPublic),
          pcr_selection: { hash: 'sha256', pcrs },
          pcr_values: Object.fromEntries(pcrs.map((i) => [String(i), b64u(values[i] as Buffer)])),
          ak_parent_qualified_name: b64u(parentQn),
          ak_cert_chain: [leaf, ca, root].map((c) => b64u(Buffer.from(c.rawData))),
        },
      },
      claim_sequence: 0,
      prev_claim_hash: null,
    },
    privateKey,
  );
  const trust: TrustStore = {
    version: 1,
    roots: [
      {
        name: 'bench AK root',
        purpose: 'tpm-ak-root',
        sha256: createHash('sha256').update(Buffer.from(root.rawData)).digest('hex'),
        source: 'generated by the bench',
      },
    ],
  };
  return { claim, trust };
}

/** Runs the verification bench, prints a table and returns the results. */
export async function runVerifyBench(
  opts: { budgetMs?: number; log?: (line: string) => void } = {},
): Promise<VerifyBenchResult[]> {
  const log = opts.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const budget = opts.budgetMs ?? 1000;
  const attestationDir = defaultAttestationDir();
  const repo = attestationDir ? dirname(attestationDir) : process.cwd();
  const vectors = process.env.CMCP_VECTORS_DIR ?? resolve(repo, '..', 'shared', 'vectors');
  const trust = attestationDir
    ? loadTrustStore(join(attestationDir, 'trust-store.yaml'))
    : { version: 1 as const, roots: [] };
  const v = (...p: string[]) => readFileSync(join(vectors, ...p));
  const results: VerifyBenchResult[] = [];

  const { claim, trust: claimTrust } = await claimWithChain();
  const now = new Date('2026-11-30T00:00:00Z');
  results.push(
    measure(
      'tpm-claim+chain',
      () => verifyClaim(claim, { trustStore: claimTrust, now }),
      budget,
      'a synthetic claim with a TPM quote, its AK certificate chained to a root in the bench trust store: expect hardware-attested',
    ),
  );

  if (existsSync(vectors)) {
    const az = (f: string) => v('tpm', 'azure-vtpm-2026-07-27', f);
    const e = JSON.parse(az('expected.json').toString('utf8')) as {
      pcrs_bin: { sha256_bank: Record<string, string> };
    };
    const pcrValues = Object.entries(e.pcrs_bin.sha256_bank).map(([i, h]) => ({
      hashAlg: TPM_ALG.SHA256,
      index: Number(i),
      value: Buffer.from(h, 'hex'),
    }));
    const tpmIn = {
      attest: az('quote.msg'),
      signature: az('quote.sig'),
      signatureFormat: 'raw-rsassa-sha256' as const,
      ak: { key: createPublicKey(az('ak.pub')) },
      nonce: Buffer.from(az('nonce.hex').toString('utf8').trim(), 'hex'),
      pcrValues,
      trustStore: trust,
      now,
    };
    results.push(
      measure(
        'tpm-quote',
        () => verifyTpmEvidence(tpmIn),
        budget,
        'a raw Azure vTPM quote with its AK public key but no AK certificate: expect hardware-unanchored',
      ),
    );
    const snp = (f: string) => v('snp', 'go-sev-guest-milan', f);
    const rv = parseReferenceValues('version: 1\nsev_snp:\n  allow_debug: true\n');
    const snpIn = {
      report: snp('attestation.bin'),
      certs: [snp('vcek.testcer'), snp('ask_ark_milan.pem')],
      trustStore: trust,
      referenceValues: rv,
      now,
    };
    results.push(
      measure(
        'sev-snp',
        () => verifySnpEvidence(snpIn),
        budget,
        'a go-sev-guest Milan report with its VCEK and ASK/ARK (debug allowed): expect hardware-attested',
      ),
    );
    const tdxAt = new Date('2023-07-01T01:00:00Z');
    const quote = v('tdx', 'go-tdx-guest-spr-e4', 'tdx_prod_quote_SPR_E4.dat');
    results.push(
      measure(
        'tdx',
        () => verifyTdxEvidence({ quote, trustStore: trust, now: tdxAt }),
        budget,
        'a go-tdx-guest SPR E4 quote, PCK chain to the Intel root, no collateral: expect hardware-attested',
      ),
    );
    const c = (f: string) => v('tdx', 'collateral', f);
    const collateral = {
      tcbInfo: c('sample_tcbInfo_response'),
      qeIdentity: c('sample_qeIdentity_response'),
      tcbSigningChain: c('tcb-signing-issuer-chain.pem'),
      pckCrl: c('pckcrl'),
      rootCrl: c('rootcrl.der'),
    };
    results.push(
      measure(
        'tdx+collateral',
        () => verifyTdxEvidence({ quote, collateral, trustStore: trust, now: tdxAt }),
        budget,
        "the same quote with Intel's sample collateral, whose TCB levels do not cover this quote's " +
          'platform: expect invalid (the collateral path is timed in full; its TCB status check fails)',
      ),
    );
  } else {
    log(`(vectors not found at ${vectors}: only the synthetic claim is measured)`);
  }

  log('verification speed (one core, warm caches)');
  log(`${'format'.padEnd(18)}${'verdict'.padEnd(22)}${'per second'.padStart(12)}${'mean'.padStart(12)}`);
  for (const r of results) {
    log(
      `${r.format.padEnd(18)}${r.verdict.padEnd(22)}${r.perSecond.toFixed(0).padStart(12)}${`${r.meanMs.toFixed(3)} ms`.padStart(12)}`,
    );
  }
  log('rows:');
  for (const r of results) {
    log(`  ${r.format}: ${r.note}`);
    if (r.failed.length) log(`  ${' '.repeat(r.format.length)}  failed checks: ${r.failed.join('; ')}`);
  }
  return results;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  await runVerifyBench();
}
