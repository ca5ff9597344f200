/**
 * The evidence command: verifies raw hardware evidence that cmcp did not necessarily produce,
 * with the same checks, verdicts and output as the claim command. `cmcp-verify evidence` and the
 * gateway's `cmcp verify-evidence` are this one definition under two names.
 *
 * - TPM: `--tpm-quote <attest> --tpm-sig <sig> --ak <key>` [`--tpm-sig-format`, `--ak-parent-name`
 *   | `--ak-parent`, `--ak-cert <f>…`, `--pcrs-file <file>`, `--event-log <file>`] — the files as
 *   tpm2-tools writes them (./tpm-files.ts)
 * - TCG2 event log alone: `--event-log <file>` (replayed PCRs are reported; nothing is signed)
 * - SEV-SNP: `--snp-report <report> --certs <f>…` [`--product`]
 * - TDX: `--tdx-quote <quote>` [`--tcb-info`, `--qe-identity`,
 *   `--tcb-signing-chain`, `--pck-crl`, `--root-crl`, `--ccel <log area>` [`--ccel-table
 *   <ACPI table>`], `--cel <canonical event log>`] — the event logs replayed to the quoted RTMRs
 *   (`--cel` also goes with `--tpm-quote`: its PCR records are compared with `--pcrs-file`)
 * - Azure CVM: `--azure-hcl-report <nv 0x01400001> --tpm-quote <attest> --tpm-sig <sig>` [`--ak
 *   <TPMT_PUBLIC>`, `--nonce`, `--pcrs-file`; SNP: `--certs`, `--product`; TDX: `--tdx-quote` and
 *   the collateral flags] (./azure.ts)
 * - all: `--trust-store`, `--reference-values`, `--at <RFC 3339>`, `--json`, `--require`;
 *   freshness: one of `--nonce`, `--nonce-text`, `--report-data` (./freshness.ts)
 *
 * Exit codes: 0 when the verdict is at least `--require` (default `hardware-attested`); 1 when
 * it is `invalid` or weaker; 2 for unreadable input or usage errors (one line on stderr, no
 * stack trace).
 */
import type { Command } from 'commander';
import {
  verifyAzureCvmEvidence,
  verifyEventLogEvidence,
  verifySnpEvidence,
  verifyTdxEvidence,
  verifyTpmEvidence,
} from '../evidence.js';
import { renderJson, renderText } from '../render.js';
import type { VerificationReport } from '../result.js';
import type { TdxCollateral } from '../tdx/collateral.js';
import type { RawTpmEvidence } from '../tpm/index.js';
import { SNP_PRODUCTS, type SnpProduct } from '../trust.js';
import { type AzureCliOptions, azureEvidenceFrom } from './azure.js';
import { expectedFreshness, hexArg } from './freshness.js';
import {
  errorLine,
  loadPolicyOptions,
  processIo,
  readCertificateFile,
  readInputFile,
  VerifyInputError,
  type VerifyIo,
} from './input.js';
import { requiredVerdict, verdictExitCode } from './require.js';
import {
  akFrom,
  parentNameFrom,
  parentQualifiedNameFrom,
  pcrValuesFrom,
  quoteFrom,
  signatureFormat,
  signatureFrom,
} from './tpm-files.js';

const MAX_INPUT_BYTES = 16 * 1024 * 1024;

/** The TPM part of the raw evidence from the TPM flags (./tpm-files.ts). */
async function tpmInputs(opts: VerifyEvidenceCliOptions, nonce: Buffer | undefined): Promise<RawTpmEvidence> {
  if (opts.akParentName !== undefined && opts.akParent !== undefined) {
    throw new VerifyInputError('give at most one of --ak-parent-name, --ak-parent');
  }
  const fmt = signatureFormat(opts.tpmSigFormat);
  const attest = quoteFrom(await readBytes(opts.tpmQuote as string, 'TPM quote'), opts.tpmQuote as string);
  const parent =
    opts.akParentName !== undefined
      ? parentNameFrom(
          opts.akParentName,
          opts.akParentName.startsWith('@')
            ? await readBytes(opts.akParentName.slice(1), 'AK parent name')
            : null,
        )
      : opts.akParent !== undefined
        ? parentQualifiedNameFrom(await readBytes(opts.akParent, 'AK parent public area'), opts.akParent)
        : undefined;
  return {
    attest,
    signature: signatureFrom(
      await readBytes(opts.tpmSig as string, 'TPM signature'),
      opts.tpmSig as string,
      fmt,
    ),
    signatureFormat: fmt,
    ak: akFrom(await readBytes(opts.ak as string, 'AK'), opts.ak as string),
    ...(parent ? { akParentQualifiedName: parent } : {}),
    ...(opts.previousQuote !== undefined
      ? {
          previousAttest: quoteFrom(
            await readBytes(opts.previousQuote, 'previous TPM quote'),
            opts.previousQuote,
            '--previous-quote',
          ),
        }
      : {}),
    akCertChain: await Promise.all((opts.akCert ?? []).map((f) => readBytes(f, 'AK certificate'))),
    ...(nonce ? { nonce } : {}),
    ...(opts.pcrsFile !== undefined
      ? { pcrValues: pcrValuesFrom(await readBytes(opts.pcrsFile, 'PCR values file'), opts.pcrsFile, attest) }
      : {}),
    ...(opts.eventLog !== undefined ? { eventLog: await readBytes(opts.eventLog, 'event log') } : {}),
    ...(opts.cel !== undefined ? { cel: await readBytes(opts.cel, 'canonical event log') } : {}),
  };
}

/** Options of `verify-evidence`, as commander parses them (the Azure path's, and these). */
export interface VerifyEvidenceCliOptions extends AzureCliOptions {
  akParentName?: string;
  akParent?: string;
  previousQuote?: string;
  nonceText?: string;
  tcbInfo?: string;
  qeIdentity?: string;
  tcbSigningChain?: string;
  pckCrl?: string;
  rootCrl?: string;
  ccel?: string;
  ccelTable?: string;
  cel?: string;
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
    if (opts.azureHclReport !== undefined && (opts.ccel ?? opts.ccelTable ?? opts.cel) !== undefined) {
      throw new VerifyInputError('--ccel, --ccel-table and --cel are not taken with --azure-hcl-report');
    }
    if (opts.ccel !== undefined && opts.tdxQuote === undefined) {
      throw new VerifyInputError('--ccel goes with --tdx-quote');
    }
    if (opts.cel !== undefined && opts.tdxQuote === undefined && opts.tpmQuote === undefined) {
      throw new VerifyInputError('--cel goes with --tdx-quote or --tpm-quote');
    }
    if (opts.ccelTable !== undefined && opts.ccel === undefined) {
      throw new VerifyInputError('--ccel-table goes with --ccel');
    }
    if (opts.azureHclReport !== undefined) return await runAzure(opts, io);
    const kinds = [opts.tpmQuote, opts.snpReport, opts.tdxQuote].filter((x) => x !== undefined);
    const logOnly = kinds.length === 0 && opts.eventLog !== undefined;
    if (kinds.length !== 1 && !logOnly) {
      throw new VerifyInputError(
        'give exactly one of --tpm-quote, --snp-report, --tdx-quote, --azure-hcl-report (with --tpm-quote) (or --event-log alone)',
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
      report = await verifyTpmEvidence({ ...common, ...(await tpmInputs(opts, fresh?.bytes)) });
    } else if (opts.snpReport !== undefined) {
      if (!opts.certs?.length)
        throw new VerifyInputError('--snp-report needs --certs (VCEK/VLEK and ASK/ARK)');
      if (opts.product !== undefined && !(SNP_PRODUCTS as readonly string[]).includes(opts.product)) {
        throw new VerifyInputError(`--product must be one of ${SNP_PRODUCTS.join(', ')}`);
      }
      report = await verifySnpEvidence({
        ...common,
        report: await readBytes(opts.snpReport, 'SEV-SNP report'),
        certs: await Promise.all(opts.certs.map((f) => readCertificateFile(f, MAX_INPUT_BYTES))),
        ...(opts.product ? { product: opts.product as SnpProduct } : {}),
        ...(fresh ? { expectedReportData: fresh.bytes } : {}),
      });
    } else {
      const collateral = await tdxCollateralFrom(opts);
      report = await verifyTdxEvidence({
        ...common,
        quote: await readBytes(opts.tdxQuote as string, 'TDX quote'),
        ...(collateral ? { collateral } : {}),
        ...(fresh ? { expectedReportData: fresh.bytes } : {}),
        ...(await tdxEventLogsFrom(opts)),
      });
    }
    io.stdout(opts.json ? renderJson(report) : renderText(report));
    return verdictExitCode(report.verdict, minimum);
  } catch (err) {
    io.stderr(errorLine(label, err));
    return 2;
  }
}

/** The TDX event-log flags' files (CC event log, its ACPI table, CEL). */
async function tdxEventLogsFrom(
  opts: VerifyEvidenceCliOptions,
): Promise<{ ccel?: Buffer; ccelTable?: Buffer; cel?: Buffer }> {
  return {
    ...(opts.ccel !== undefined ? { ccel: await readBytes(opts.ccel, 'CC event log') } : {}),
    ...(opts.ccelTable !== undefined
      ? { ccelTable: await readBytes(opts.ccelTable, 'ACPI CCEL table') }
      : {}),
    ...(opts.cel !== undefined ? { cel: await readBytes(opts.cel, 'canonical event log') } : {}),
  };
}

/** The TDX collateral flags' files, or undefined when none was given. */
async function tdxCollateralFrom(opts: VerifyEvidenceCliOptions): Promise<TdxCollateral | undefined> {
  const collateral: TdxCollateral = {};
  const parts: [keyof TdxCollateral, string | undefined, string][] = [
    ['tcbInfo', opts.tcbInfo, 'TCB info'],
    ['qeIdentity', opts.qeIdentity, 'QE identity'],
    ['tcbSigningChain', opts.tcbSigningChain, 'TCB signing chain'],
    ['pckCrl', opts.pckCrl, 'PCK CRL'],
    ['rootCrl', opts.rootCrl, 'Root CA CRL'],
  ];
  for (const [k, path, what] of parts) if (path !== undefined) collateral[k] = await readBytes(path, what);
  return Object.keys(collateral).length ? collateral : undefined;
}

/**
 * The Azure CVM chain (./azure.ts): HCL report → runtime data → HCLAkPub → vTPM quote, and the
 * hardware report under its chain. Exits as the other kinds do (`--require`, default hardware-attested).
 */
async function runAzure(opts: VerifyEvidenceCliOptions, io: VerifyIo): Promise<number> {
  const minimum = requiredVerdict(opts.require, 'hardware-attested');
  if (opts.tpmQuote === undefined || opts.tpmSig === undefined)
    throw new VerifyInputError(
      '--azure-hcl-report needs --tpm-quote and --tpm-sig (the vTPM quote under HCLAkPub)',
    );
  const quotePath = opts.tpmQuote;
  const attest = quoteFrom(await readBytes(quotePath, 'TPM quote'), quotePath);
  // --nonce-text is checked as its SHA-256, like every other kind (--report-data is refused by ./azure.ts).
  const az =
    opts.nonceText === undefined
      ? opts
      : {
          ...opts,
          nonceText: undefined,
          nonce: (await expectedFreshness(opts, async () => ''))?.bytes.toString('hex'),
        };
  const policy = loadPolicyOptions(opts);
  const report = verifyAzureCvmEvidence({
    trustStore: policy.trustStore,
    ...(policy.referenceValues ? { referenceValues: policy.referenceValues } : {}),
    ...(policy.now ? { now: policy.now } : {}),
    ...(await azureEvidenceFrom(az, {
      // `--certs` files are checked to be certificates, as for SEV-SNP alone.
      read: (path, what) =>
        what === 'certificate' ? readCertificateFile(path, MAX_INPUT_BYTES) : readBytes(path, what),
      hex: async (v, flag) =>
        hexArg(v.startsWith('@') ? (await readBytes(v.slice(1), flag)).toString('utf8') : v, flag),
      pcrValues: (bytes) => pcrValuesFrom(bytes, opts.pcrsFile as string, attest),
      collateral: await tdxCollateralFrom(opts),
    })),
  });
  io.stdout(opts.json ? renderJson(report) : renderText(report));
  return verdictExitCode(report.verdict, minimum);
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
      'verify raw TPM / SEV-SNP / TDX / Azure CVM evidence offline; exit 1 if invalid or weaker than --require, 2 on unreadable input',
    )
    .option('--tpm-quote <file>', 'TPMS_ATTEST (or TPM2B_ATTEST) bytes of a TPM2_Quote')
    .option('--tpm-sig <file>', 'the quote signature: TPMT_SIGNATURE or plain (tpm2_quote -f plain)')
    .option(
      '--tpm-sig-format <fmt>',
      'auto (default: TPMT_SIGNATURE, else plain under the AK scheme) | tpmt | plain | <rsassa|rsapss|ecdsa>-<sha256|sha384|sha512>',
    )
    .option(
      '--ak <file>',
      'AK public key: TPM2B_PUBLIC (tpm2_createak -u), TPMT_PUBLIC, PEM/DER SubjectPublicKeyInfo, or PEM certificate',
    )
    .option(
      '--ak-parent-name <hex|@file>',
      "the AK parent's qualified name (tpm2_readpublic -q of the EK; 4000000b for a primary AK)",
    )
    .option(
      '--ak-parent <file>',
      "the AK parent's public area (tpm2_createek -u): a primary key of the endorsement hierarchy",
    )
    .option(
      '--previous-quote <file>',
      'an earlier quote by the same AK (TPMS_ATTEST/TPM2B_ATTEST): a TPM clock rollback is refused',
    )
    .option('--ak-cert <file>', 'AK certificate chain, leaf first (DER or PEM; repeat)', collect)
    .option('--nonce <hex|@file>', 'expected extraData / REPORT_DATA / REPORTDATA, compared at exact length')
    .option('--nonce-text <text>', 'like --nonce, with the SHA-256 of this UTF-8 text as the expected value')
    .option(
      '--pcrs-file <file>',
      'PCR values: tpm2_quote -o / tpm2_pcrread -o (-F serialized or values, every bank), or YAML/JSON SHA-256 index → hex',
    )
    .option(
      '--event-log <file>',
      'TCG2 crypto-agile event log (binary_bios_measurements): replayed; with --tpm-quote compared to the quoted PCRs',
    )
    .option(
      '--azure-hcl-report <file>',
      'Azure CVM HCL report (vTPM NV 0x01400001), with --tpm-quote/--tpm-sig under its HCLAkPub',
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
    .option(
      '--ccel <file>',
      'TDX CC event log area (/sys/firmware/acpi/tables/data/CCEL): replayed to RTMR0..3 and compared to the quote',
    )
    .option('--ccel-table <file>', 'ACPI CCEL table (/sys/firmware/acpi/tables/CCEL), with --ccel')
    .option(
      '--cel <file>',
      'canonical event log (TLV; Confidential Space launcher): replayed (RTMRs on top of --ccel) and compared to the quoted RTMRs or PCRs',
    )
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
