/**
 * Verification speed per evidence format (verifications per second, and the mean time of one).
 *
 * - `tpm-quote`: the Azure vTPM quote (RSA-2048 PKCS#1, nonce, 8 PCRs) as raw evidence;
 * - `tpm-claim+chain`: a full claim (Ed25519 claim signature, binding, ECDSA TPM quote, PCRs)
 *   whose AK certificate chains (leaf ← CA ← root) to a pinned root — hardware-attested;
 * - `sev-snp`: the Milan report with VCEK ← ASK ← ARK;
 * - `tdx`: the SPR E4 quote with its PCK chain; `tdx+collateral`: plus TCB info, QE identity, CRLs.
 *
 * Uses the repository's test/vectors; formats whose vectors are missing are skipped.
 * Run directly (`node dist/bench/verify.js`) or through `runVerifyBench()`.
 */

import { createPublicKey } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { VerificationReport } from '@cmcp/verify';
import {
  defaultAttestationDir,
  loadTrustStore,
  parseReferenceValues,
  type TrustStore,
  verifyClaim,
  verifySnpEvidence,
  verifyTdxEvidence,
  verifyTpmEvidence,
} from '@cmcp/verify';
import { TPM_ALG } from '@cmcp/verify/abi';
import type { Claim } from '@cmcp/verify/formats';
import { certDer, claimWithAkChain, makeAkPki, pinnedAkRoot } from '../testing/ak-pki.js';
import { REPO_ROOT } from './load/profile.js';

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

/** A claim bound to a software-made ECDSA TPM quote over PCRs 0–7 whose AK has a 3-certificate chain. */
async function claimWithChain(): Promise<{ claim: Claim; trust: TrustStore }> {
  const pki = await makeAkPki();
  const chain = [pki.leaf, pki.ca, pki.root].map(certDer);
  return { claim: claimWithAkChain(pki, chain, [0, 1, 2, 3, 4, 5, 6, 7]), trust: pinnedAkRoot(pki.root) };
}

/** Runs the verification bench, prints a table and returns the results. */
export async function runVerifyBench(
  opts: { budgetMs?: number; log?: (line: string) => void } = {},
): Promise<VerifyBenchResult[]> {
  const log = opts.log ?? ((l: string) => process.stdout.write(`${l}\n`));
  const budget = opts.budgetMs ?? 1000;
  const attestationDir = defaultAttestationDir();
  // The vectors are the repository's (test/vectors), not the verify package's.
  const vectors = join(REPO_ROOT, 'test', 'vectors');
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
