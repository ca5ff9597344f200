/**
 * The TPM evidence entry, for claims and raw evidence: bytes → TPMS_ATTEST / TPMT_SIGNATURE /
 * TPMT_PUBLIC (abi) → quote signature → extraData binding → PCR appraisal → AK certificate
 * chain to a pinned root (`evidence.anchor`); raw evidence may add a TCG2 event log replay.
 */

import { AbiError } from '../abi/errors.js';
import { TPM_ALG } from '../abi/tpm/constants.js';
import { tpmFileLayout } from '../abi/tpm/files.js';
import type { PcrSelection } from '../abi/tpm/pcr.js';
import { parseTpmtPublic as parseAbiTpmtPublic } from '../abi/tpm/public.js';
import { isTpmtSignatureHeader } from '../abi/tpm/signature.js';
import { verifyAkCertChain } from '../akcert.js';
import { verifyCel } from '../cel.js';
import type { ClaimEvidence } from '../claim-schema.js';
import { tpmFields } from '../common/fields.js';
import {
  type ClaimKindContext,
  type EvidenceKind,
  type KindContext,
  type KindResult,
  replaceCheck,
  tryB64u,
} from '../common/kind.js';
import type { RawEvidenceOptions } from '../common/raw.js';
import type { KeyObject } from '../crypto/keys.js';
import { verifyEventLog } from '../eventlog.js';
import { tpmQualifyingData } from '../format/binding.js';
import {
  type CheckResult,
  check,
  fail,
  HARDWARE_ANCHOR_CHECK,
  HARDWARE_BINDING_CHECK,
  quoteUntrusted,
} from '../result.js';
import { type Cert, CertError, certsFromBytes, parseCert } from '../x509.js';
import { pcrPinsCheck } from './appraise.js';
import { clockCheck } from './clock.js';
import { akPlainScheme, plainSchemeByName, plainSignature } from './files.js';
import type { PcrValue } from './pcr.js';
import { type TpmQuoteInput, verifyTpmQuote } from './quote.js';

/** Raw TPM evidence. */
export interface RawTpmEvidence extends RawEvidenceOptions {
  attest: Uint8Array;
  /** TPMT_SIGNATURE bytes, or a plain signature (`tpm2_quote -f plain`). */
  signature: Uint8Array;
  /**
   * How `signature` is framed: `tpmt` (default), `plain` (scheme and hash from the AK's
   * TPMT_PUBLIC), `<scheme>-<hash>` (plain, e.g. `rsapss-sha256`, `ecdsa-sha384`; also the older
   * `raw-rsassa-sha256`), or `auto` (TPMT_SIGNATURE when it parses as one, else `plain`).
   */
  signatureFormat?: string;
  /** AK as TPMT_PUBLIC wire bytes or a node key (PEM SPKI or from a certificate). */
  ak: { public: Uint8Array } | { key: KeyObject };
  /**
   * The Qualified Name of the AK's parent (TPM 2.0 Part 1 §16; `tpm2_readpublic -q` of the EK for
   * a `tpm2_createak` AK, or a 4-byte hierarchy handle for a primary AK): qualifiedSigner is then
   * checked as the AK's Qualified Name.
   */
  akParentQualifiedName?: Uint8Array;
  /** TPMS_ATTEST of an earlier quote by the same AK: `tpm.clock` refuses a rollback. */
  previousAttest?: Uint8Array;
  /** AK certificate chain files (DER/PEM), leaf first. */
  akCertChain?: readonly Uint8Array[];
  /** Expected qualifyingData (exact bytes); undefined ⇒ not-applicable. */
  nonce?: Uint8Array;
  /** PCR values (SHA-256 bank). */
  pcrValues?: readonly PcrValue[];
  /**
   * A TCG2 crypto-agile event log (`binary_bios_measurements`): replayed and, for the PCRs it
   * covers, compared with `pcrValues` (checks `eventlog.parse`, `eventlog.pcrs`).
   */
  eventLog?: Uint8Array;
  /**
   * A canonical event log (TLV; Confidential Space's launcher log, PCR records): replayed from
   * zero and compared with `pcrValues` for the PCRs it extends (checks `cel.parse`,
   * `cel.digests`, `cel.replay`).
   */
  cel?: Uint8Array;
}

const sha256Selection = (pcrs: readonly number[]): PcrSelection[] => [
  { hashAlg: TPM_ALG.SHA256, pcrs: [...pcrs] },
];

/** The signature input for `signatureFormat` (see {@link RawTpmEvidence}); never guesses a scheme. */
function rawSignature(e: RawTpmEvidence): TpmQuoteInput['signature'] {
  const fmt = e.signatureFormat ?? 'tpmt';
  if (fmt === 'tpmt') return e.signature;
  const named = plainSchemeByName(fmt);
  if (named) return () => plainSignature(e.signature, named);
  if (fmt !== 'plain' && fmt !== 'auto') {
    return () => {
      throw new AbiError(
        'TPM_SIGNATURE_SCHEME_UNKNOWN',
        `signature format ${quoteUntrusted(fmt, 30)}`,
        'plain signature',
      );
    };
  }
  // a TPMT_SIGNATURE that does not parse (cut short) is reported as one, not read as plain
  if (
    fmt === 'auto' &&
    (tpmFileLayout(e.signature) === 'TPMT_SIGNATURE' || isTpmtSignatureHeader(e.signature))
  )
    return e.signature;
  return () => {
    if (!('public' in e.ak)) {
      throw new AbiError(
        'TPM_SIGNATURE_SCHEME_UNKNOWN',
        'a plain signature with a bare AK key: give the AK as TPM2B_PUBLIC / TPMT_PUBLIC or --tpm-sig-format <scheme>-<hash>',
        'plain signature',
      );
    }
    const scheme = akPlainScheme(parseAbiTpmtPublic(e.ak.public).scheme);
    if (scheme instanceof AbiError) throw scheme;
    return plainSignature(e.signature, scheme);
  };
}

/** `evidence.anchor` for raw evidence: the AK certificate files (DER/PEM, leaf first). */
function rawAnchor(
  files: readonly Uint8Array[],
  akKey: KeyObject | undefined,
  ctx: KindContext,
  out: KindResult,
): void {
  let certs: Cert[];
  try {
    certs = files.flatMap((c) => certsFromBytes(c));
  } catch (err) {
    out.checks.push(
      fail(
        HARDWARE_ANCHOR_CHECK,
        err instanceof CertError ? err.code : 'CERT_MALFORMED',
        (err as Error).message,
      ),
    );
    return;
  }
  const a = verifyAkCertChain({ certs, akKey, trustStore: ctx.trustStore, at: ctx.at });
  out.checks.push(a.check);
  if (a.anchor) out.anchors.push(a.anchor);
}

/** Raw TPM quote (+ PCR values, event log, AK certificate chain). */
function fromRaw(e: RawTpmEvidence, ctx: KindContext): KindResult {
  const rv = ctx.referenceValues;
  const out: KindResult = { checks: [], anchors: [], notes: [] };
  const required = rv?.tpm?.required_pcrs;
  const q = verifyTpmQuote({
    attest: e.attest,
    signature: rawSignature(e),
    ak: e.ak,
    ...(e.akParentQualifiedName ? { akParentQualifiedName: e.akParentQualifiedName } : {}),
    expectedExtraData: e.nonce ?? null,
    expectedExtraDataLabel: 'the expected nonce',
    ...(e.pcrValues ? { pcrValues: e.pcrValues } : {}),
    ...(required ? { requiredSelection: sha256Selection([...required].sort((a, b) => a - b)) } : {}),
  });
  const checks = out.checks;
  checks.push(...q.checks, clockCheck(q.attest, e.previousAttest, out.notes));
  const pins = rv?.tpm?.pcrs;
  if (!pins) checks.push(check('tpm.pcr_values', 'not-applicable', 'NO_POLICY', 'no expected PCR values'));
  else if (!e.pcrValues)
    checks.push(check('tpm.pcr_values', 'absent', 'NOT_SUPPLIED', 'no PCR values supplied'));
  else checks.push(pcrPinsCheck(pins, e.pcrValues, checks));
  if (e.eventLog) {
    const el = verifyEventLog({
      log: e.eventLog,
      ...(e.pcrValues ? { pcrValues: e.pcrValues } : {}),
      pcrValuesQuoted: checks.find((c) => c.id === 'tpm.pcr_digest')?.status === 'pass',
    });
    checks.push(...el.checks);
    out.notes.push(...el.notes);
    if (el.summary) out.eventLog = el.summary;
  }
  if (e.cel) {
    const c = verifyCel({
      log: e.cel,
      ...(e.pcrValues ? { pcrValues: e.pcrValues } : {}),
      quoted: checks.find((x) => x.id === 'tpm.pcr_digest')?.status === 'pass',
    });
    checks.push(...c.checks);
    out.notes.push(...c.notes);
  }
  rawAnchor(e.akCertChain ?? [], q.key, ctx, out);
  out.fields = tpmFields(q.attest, e.pcrValues ?? [], out.eventLog);
  return out;
}

type ClaimTpm = NonNullable<ClaimEvidence['tpm']>;

/** The claim's pcr_values as SHA-256 PCR values, or why they are not. */
function claimPcrValues(tpm: ClaimTpm): { values?: PcrValue[]; problem?: string } {
  const values: PcrValue[] = [];
  for (const [k, v] of Object.entries(tpm.pcr_values)) {
    const bytes = tryB64u(v);
    if (!/^(0|[1-9]\d?)$/.test(k) || Number(k) > 31 || !bytes) {
      return { problem: `pcr_values[${quoteUntrusted(k, 8)}] is not a PCR index with a base64url value` };
    }
    values.push({ hashAlg: TPM_ALG.SHA256, index: Number(k), value: bytes });
  }
  return { values };
}

/** `evidence.anchor` for a claim: `ak_cert_chain` (DER, base64url, leaf first). */
function claimAnchor(tpm: ClaimTpm, akKey: KeyObject | undefined, ctx: KindContext, out: KindResult): void {
  const certs: Cert[] = [];
  let malformed: CheckResult | null = null;
  for (const [i, text] of tpm.ak_cert_chain.entries()) {
    const der = tryB64u(text);
    try {
      if (!der) throw new CertError('AK_CHAIN_MALFORMED', 'not base64url');
      certs.push(parseCert(der));
    } catch (err) {
      malformed = fail(
        HARDWARE_ANCHOR_CHECK,
        'AK_CHAIN_MALFORMED',
        `ak_cert_chain[${i}] is not a DER certificate (${err instanceof Error ? err.message.slice(0, 80) : 'error'})`,
      );
      break;
    }
  }
  if (malformed) out.checks.push(malformed);
  else {
    const a = verifyAkCertChain({ certs, akKey, trustStore: ctx.trustStore, at: ctx.at });
    out.checks.push(a.check);
    if (a.anchor) out.anchors.push(a.anchor);
  }
  const anchor = out.checks[out.checks.length - 1];
  if (anchor && anchor.status !== 'pass') {
    out.notes.push(
      `The AK is NOT anchored to a pinned root (${anchor.reason_code}): ${
        certs.length === 0
          ? 'the claim carries no AK certificate chain, so no chain was validated and hardware-attested is not reachable. '
          : 'its certificate chain does not end at a root pinned in the trust store. '
      }A valid quote then yields hardware-unanchored: it shows a TPM-format key signed the binding, not which TPM or platform holds that key.`,
    );
  }
}

/** Marks claim fields that were not base64url (or otherwise unusable) on the quote's checks. */
function markClaimInputs(qc: CheckResult[], flags: Record<string, string | null>): void {
  for (const [id, problem] of Object.entries(flags)) {
    if (!problem) continue;
    const code =
      id === HARDWARE_BINDING_CHECK
        ? 'DEPENDENCY_FAILED'
        : id === 'tpm.pcr_selection'
          ? 'PCR_SELECTION_MALFORMED'
          : id === 'tpm.pcr_digest'
            ? 'PCR_VALUES_MALFORMED'
            : 'EVIDENCE_MALFORMED';
    replaceCheck(qc, id, fail(id, code, problem));
  }
}

/** A claim's `evidence.tpm`: the quote must carry qualifyingData = SHA-256(REPORT_DATA). */
function fromClaim(ev: ClaimEvidence, expectedReportData: Buffer | null, ctx: ClaimKindContext): KindResult {
  const tpm = ev.tpm as ClaimTpm;
  const out: KindResult = { checks: [], anchors: [], notes: [] };
  const attest = tryB64u(tpm.attest);
  const signature = tryB64u(tpm.signature);
  const akPublic = tryB64u(tpm.ak_public);
  const pv = claimPcrValues(tpm);
  const pcrs = tpm.pcr_selection.pcrs;
  const rvPcrs = ctx.referenceValues?.tpm?.required_pcrs;
  const requiredPcrs = ctx.requiredPcrs ?? (rvPcrs ? [...rvPcrs].sort((a, b) => a - b) : undefined);
  const q = verifyTpmQuote({
    attest: attest ?? Buffer.alloc(0),
    signature: signature ?? Buffer.alloc(0),
    ak: { public: akPublic ?? Buffer.alloc(0) },
    akParentQualifiedName: tryB64u(tpm.ak_parent_qualified_name) ?? Buffer.alloc(0),
    expectedExtraData: expectedReportData ? tpmQualifyingData(expectedReportData) : Buffer.alloc(0),
    expectedExtraDataLabel: 'SHA-256(REPORT_DATA) of this claim',
    pcrValues: pv.values ?? [],
    declaredSelection: sha256Selection(pcrs),
    ...(requiredPcrs ? { requiredSelection: sha256Selection(requiredPcrs) } : {}),
  });
  markClaimInputs(q.checks, {
    'tpm.attest_parse': attest ? null : 'attest is not base64url',
    'tpm.signature_parse': signature ? null : 'signature is not base64url',
    'tpm.ak_public': akPublic ? null : 'ak_public is not base64url',
    [HARDWARE_BINDING_CHECK]: expectedReportData ? null : 'REPORT_DATA could not be computed from the claim',
    'tpm.pcr_selection': pcrs.every((p, i) => i === 0 || p > (pcrs[i - 1] ?? -1))
      ? null
      : 'pcr_selection.pcrs is not strictly ascending',
    'tpm.pcr_digest': pv.problem ?? null,
  });
  out.checks.push(...q.checks);
  if (ctx.previousTpmAttest)
    out.checks.push(
      clockCheck(
        q.attest,
        ctx.previousTpmAttest,
        out.notes,
        ctx.previousTpmAttestOrder ?? 'close-order',
        true,
      ),
    );
  const pins = ctx.referenceValues?.tpm?.pcrs;
  if (pins) out.checks.push(pcrPinsCheck(pins, pv.values ?? [], out.checks));
  claimAnchor(tpm, q.akPublic?.key, ctx, out);
  out.fields = tpmFields(q.attest, pv.values ?? []);
  return out;
}

/** The TPM evidence kind. */
export const TPM_KIND: EvidenceKind<RawTpmEvidence> = {
  tee: 'tpm',
  inClaim: (ev) => ev.provider === 'tpm' && ev.tpm !== null,
  fromClaim,
  fromRaw,
};
