/**
 * The evidence command: verifies raw hardware evidence that cmcp did not necessarily produce,
 * with the same checks, verdicts and output as the claim command. `cmcp-verify evidence` and the
 * gateway's `cmcp verify-evidence` are this one definition under two names.
 *
 * - TPM: `--tpm-quote <attest> --tpm-sig <sig> --ak <key>` [`--tpm-sig-format`, `--ak-cert <f>…`,
 *   `--pcrs-file <yaml|json>`, `--event-log <file>`]
 * - TCG2 event log alone: `--event-log <file>` (replayed PCRs are reported; nothing is signed)
 * - SEV-SNP: `--snp-report <report> --certs <f>…` [`--product`]
 * - TDX: `--tdx-quote <quote>` [`--tcb-info`, `--qe-identity`,
 *   `--tcb-signing-chain`, `--pck-crl`, `--root-crl`]
 * - all: `--trust-store`, `--reference-values`, `--at <RFC 3339>`, `--json`, `--require`;
 *   freshness: one of `--nonce`, `--nonce-text`, `--report-data` (./freshness.ts)
 *
 * Exit codes: 0 when the verdict is at least `--require` (default `hardware-attested`); 1 when
 * it is `invalid` or weaker; 2 for unreadable input or usage errors (one line on stderr, no
 * stack trace).
 */
import { createPublicKey, type KeyObject, X509Certificate } from 'node:crypto';
import type { Command } from 'commander';
import { parse as parseYaml } from 'yaml';
import {
  verifyEventLogEvidence,
  verifySnpEvidence,
  verifyTdxEvidence,
  verifyTpmEvidence,
} from '../evidence.js';
import { renderJson, renderText } from '../render.js';
import type { VerificationReport } from '../result.js';
import type { TdxCollateral } from '../tdx/collateral.js';
import { type PcrValue, TPM_ALG, TPM_GENERATED_VALUE, unwrapTpm2bAttest } from '../tpm/index.js';
import { SNP_PRODUCTS, type SnpProduct } from '../trust.js';
import { expectedFreshness, hexArg } from './freshness.js';
import {
  errorLine,
  loadPolicyOptions,
  processIo,
  readInputFile,
  VerifyInputError,
  type VerifyIo,
} from './input.js';
import { requiredVerdict, verdictExitCode } from './require.js';

const MAX_INPUT_BYTES = 16 * 1024 * 1024;

/** Options of `verify-evidence`, as commander parses them. */
export interface VerifyEvidenceCliOptions {
  tpmQuote?: string;
  tpmSig?: string;
  tpmSigFormat?: string;
  ak?: string;
  akCert?: string[];
  nonce?: string;
  nonceText?: string;
  pcrsFile?: string;
  eventLog?: string;
  snpReport?: string;
  certs?: string[];
  product?: string;
  reportData?: string;
  tdxQuote?: string;
  tcbInfo?: string;
  qeIdentity?: string;
  tcbSigningChain?: string;
  pckCrl?: string;
  rootCrl?: string;
  trustStore?: string;
  referenceValues?: string;
  at?: string;
  json?: boolean;
  /** Weakest acceptable verdict; default hardware-attested. */
  require?: string;
}

function readBytes(path: string, what: string): Promise<Buffer> {
  return readInputFile(path, what, MAX_INPUT_BYTES);
}

/** AK: PEM (SPKI or certificate), DER SPKI, or TPMT_PUBLIC wire bytes. */
function akFrom(bytes: Buffer): { public: Uint8Array } | { key: KeyObject } {
  const text = bytes.toString('latin1');
  try {
    if (text.startsWith('-----BEGIN CERTIFICATE-----')) {
      return { key: new X509Certificate(bytes).publicKey };
    }
    if (text.startsWith('-----BEGIN')) return { key: createPublicKey(text) };
    if (bytes[0] === 0x30) return { key: createPublicKey({ key: bytes, format: 'der', type: 'spki' }) };
  } catch {
    throw new VerifyInputError('--ak is not a usable public key');
  }
  return { public: bytes };
}

/** PCR values file: YAML/JSON map of SHA-256 PCR index → hex value. */
function pcrValuesFrom(bytes: Buffer): PcrValue[] {
  let doc: unknown;
  try {
    doc = parseYaml(bytes.toString('utf8'), { maxAliasCount: 0 });
  } catch {
    throw new VerifyInputError('--pcrs-file is not YAML/JSON (a map of PCR index to hex SHA-256 value)');
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) {
    throw new VerifyInputError('--pcrs-file must map PCR index to hex SHA-256 value');
  }
  return Object.entries(doc as Record<string, unknown>).map(([k, v]) => {
    if (!/^(0|[1-9]\d?)$/.test(k) || Number(k) > 23 || typeof v !== 'string') {
      throw new VerifyInputError('--pcrs-file must map PCR index (0-23) to a hex string');
    }
    return { hashAlg: TPM_ALG.SHA256, index: Number(k), value: hexArg(v, `--pcrs-file PCR ${k}`, 32) };
  });
}

/**
 * Runs the evidence command and returns its exit code (0, 1 or 2); writes the report to
 * `io.stdout` and errors to `io.stderr` as one line prefixed with `label`. Never throws.
 */
export async function runVerifyEvidence(
  opts: VerifyEvidenceCliOptions,
  io: VerifyIo = processIo(),
  label = 'cmcp-verify evidence',
): Promise<number> {
  try {
    const kinds = [opts.tpmQuote, opts.snpReport, opts.tdxQuote].filter((x) => x !== undefined);
    const logOnly = kinds.length === 0 && opts.eventLog !== undefined;
    if (kinds.length !== 1 && !logOnly) {
      throw new VerifyInputError(
        'give exactly one of --tpm-quote, --snp-report, --tdx-quote (or --event-log alone)',
      );
    }
    if (opts.eventLog !== undefined && opts.tpmQuote === undefined && !logOnly) {
      throw new VerifyInputError('--event-log goes with --tpm-quote (or alone)');
    }
    const minimum = requiredVerdict(opts.require, 'hardware-attested');
    const fresh = await expectedFreshness(opts, async (p, what) =>
      (await readBytes(p, what)).toString('utf8'),
    );
    const policy = loadPolicyOptions(opts);
    const common = {
      trustStore: policy.trustStore,
      ...(policy.referenceValues ? { referenceValues: policy.referenceValues } : {}),
      ...(policy.now ? { now: policy.now } : {}),
    };
    let report: VerificationReport;
    if (logOnly) {
      report = await verifyEventLogEvidence({ log: await readBytes(opts.eventLog as string, 'event log') });
    } else if (opts.tpmQuote !== undefined) {
      if (opts.tpmSig === undefined || opts.ak === undefined) {
        throw new VerifyInputError('--tpm-quote needs --tpm-sig and --ak');
      }
      const fmt = opts.tpmSigFormat ?? 'tpmt';
      if (fmt !== 'tpmt' && fmt !== 'raw-rsassa-sha256' && fmt !== 'raw-rsassa-sha384') {
        throw new VerifyInputError('--tpm-sig-format must be tpmt, raw-rsassa-sha256 or raw-rsassa-sha384');
      }
      const raw = await readBytes(opts.tpmQuote, 'TPM quote');
      // A bare TPMS_ATTEST starts with TPM_GENERATED_VALUE; otherwise it must be a TPM2B_ATTEST.
      let attest: Buffer = raw;
      if (raw.length >= 4 && raw.readUInt32BE(0) !== TPM_GENERATED_VALUE) {
        try {
          attest = unwrapTpm2bAttest(raw);
        } catch {
          attest = raw; // reported by the verifier as a parse failure
        }
      }
      report = await verifyTpmEvidence({
        ...common,
        attest,
        signature: await readBytes(opts.tpmSig, 'TPM signature'),
        signatureFormat: fmt,
        ak: akFrom(await readBytes(opts.ak, 'AK')),
        akCertChain: await Promise.all((opts.akCert ?? []).map((f) => readBytes(f, 'AK certificate'))),
        ...(fresh ? { nonce: fresh.bytes } : {}),
        ...(opts.pcrsFile !== undefined
          ? { pcrValues: pcrValuesFrom(await readBytes(opts.pcrsFile, 'PCR values file')) }
          : {}),
        ...(opts.eventLog !== undefined ? { eventLog: await readBytes(opts.eventLog, 'event log') } : {}),
      });
    } else if (opts.snpReport !== undefined) {
      if (!opts.certs?.length)
        throw new VerifyInputError('--snp-report needs --certs (VCEK/VLEK and ASK/ARK)');
      if (opts.product !== undefined && !(SNP_PRODUCTS as readonly string[]).includes(opts.product)) {
        throw new VerifyInputError(`--product must be one of ${SNP_PRODUCTS.join(', ')}`);
      }
      report = await verifySnpEvidence({
        ...common,
        report: await readBytes(opts.snpReport, 'SEV-SNP report'),
        certs: await Promise.all(opts.certs.map((f) => readBytes(f, 'certificate'))),
        ...(opts.product ? { product: opts.product as SnpProduct } : {}),
        ...(fresh ? { expectedReportData: fresh.bytes } : {}),
      });
    } else {
      const collateral: TdxCollateral = {};
      const parts: [keyof TdxCollateral, string | undefined, string][] = [
        ['tcbInfo', opts.tcbInfo, 'TCB info'],
        ['qeIdentity', opts.qeIdentity, 'QE identity'],
        ['tcbSigningChain', opts.tcbSigningChain, 'TCB signing chain'],
        ['pckCrl', opts.pckCrl, 'PCK CRL'],
        ['rootCrl', opts.rootCrl, 'Root CA CRL'],
      ];
      for (const [k, path, what] of parts)
        if (path !== undefined) collateral[k] = await readBytes(path, what);
      report = await verifyTdxEvidence({
        ...common,
        quote: await readBytes(opts.tdxQuote as string, 'TDX quote'),
        ...(Object.keys(collateral).length ? { collateral } : {}),
        ...(fresh ? { expectedReportData: fresh.bytes } : {}),
      });
    }
    io.stdout(opts.json ? renderJson(report) : renderText(report));
    return verdictExitCode(report.verdict, minimum);
  } catch (err) {
    io.stderr(errorLine(label, err));
    return 2;
  }
}

/**
 * Adds the evidence command to `program` as `name` (`evidence` in `cmcp-verify`,
 * `verify-evidence` in `cmcp`); usage errors exit 2, an invalid verdict exits 1.
 */
export function registerVerifyEvidenceCommand(program: Command, name = 'evidence'): Command {
  const collect = (v: string, prev: string[] = []) => [...prev, v];
  return program
    .command(name)
    .description(
      'verify raw TPM / SEV-SNP / TDX evidence offline; exit 1 if invalid or weaker than --require, 2 on unreadable input',
    )
    .option('--tpm-quote <file>', 'TPMS_ATTEST (or TPM2B_ATTEST) bytes of a TPM2_Quote')
    .option('--tpm-sig <file>', 'the quote signature (TPMT_SIGNATURE unless --tpm-sig-format says raw)')
    .option('--tpm-sig-format <fmt>', 'tpmt | raw-rsassa-sha256 | raw-rsassa-sha384 (tpm2_quote -f plain)')
    .option('--ak <file>', 'AK public key: PEM/DER SubjectPublicKeyInfo, PEM certificate, or TPMT_PUBLIC')
    .option('--ak-cert <file>', 'AK certificate chain, leaf first (DER or PEM; repeat)', collect)
    .option('--nonce <hex|@file>', 'expected extraData / REPORT_DATA / REPORTDATA, compared at exact length')
    .option('--nonce-text <text>', 'like --nonce, with the SHA-256 of this UTF-8 text as the expected value')
    .option('--pcrs-file <file>', 'YAML/JSON map of SHA-256 PCR index to hex value')
    .option(
      '--event-log <file>',
      'TCG2 crypto-agile event log (binary_bios_measurements): replayed; with --tpm-quote compared to the quoted PCRs',
    )
    .option('--snp-report <file>', 'SEV-SNP ATTESTATION_REPORT (1184 bytes)')
    .option('--certs <file>', 'VCEK/VLEK and ASK/ASVK+ARK certificates (DER or PEM; repeat)', collect)
    .option('--product <name>', 'SEV-SNP product: Milan, Genoa or Turin (else from the VCEK)')
    .option(
      '--report-data <hex|@file>',
      'expected REPORT_DATA / REPORTDATA (64 bytes; compared at exact length, never padded)',
    )
    .option('--tdx-quote <file>', 'TDX DCAP quote (v4 or v5)')
    .option('--tcb-info <file>', 'Intel PCS TCB info response body')
    .option('--qe-identity <file>', 'Intel PCS QE identity response body')
    .option('--tcb-signing-chain <file>', 'TCB-Info-Issuer-Chain (PEM)')
    .option('--pck-crl <file>', 'PCK CRL (DER or PEM)')
    .option('--root-crl <file>', 'Intel SGX Root CA CRL (DER or PEM)')
    .option('--trust-store <file>', "pinned roots (default: the package's attestation/trust-store.yaml)")
    .option('--reference-values <file>', 'reference values YAML')
    .option(
      '--at <time>',
      'verification time (RFC 3339) for certificate and collateral validity (default: now)',
    )
    .option('--json', 'print the report as JSON')
    .option(
      '--require <verdict>',
      'exit 1 unless the verdict is at least this: hardware-attested (default), hardware-unanchored or signed-only',
    )
    .exitOverride((err) => {
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (opts: VerifyEvidenceCliOptions) => {
      process.exitCode = await runVerifyEvidence(opts, processIo(), `${program.name()} ${name}`);
    });
}
