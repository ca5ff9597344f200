/**
 * `verify-evidence --azure-hcl-report FILE --tpm-quote … --tpm-sig …`: the Azure CVM chain
 * (HCL report → HCLAkPub → vTPM quote), with the SEV-SNP VCEK chain (`--certs`, `--product`) or
 * the TD quote and its collateral (`--tdx-quote`, `--tcb-info` …). Kept apart from
 * ./evidence.ts, which calls it; the file reading and hex helpers are passed in.
 */
import type { RawAzureEvidence } from '../azure/evidence.js';
import type { TdxCollateral } from '../tdx/collateral.js';
import { TPM_GENERATED_VALUE, unwrapTpm2bAttest } from '../tpm/index.js';
import type { PcrValue } from '../tpm/pcr.js';
import { SNP_PRODUCTS, type SnpProduct } from '../trust.js';
import { VerifyInputError } from './input.js';

/** The options the Azure path reads (a subset of the evidence command's). */
export interface AzureCliOptions {
  azureHclReport?: string;
  tpmQuote?: string;
  tpmSig?: string;
  tpmSigFormat?: string;
  ak?: string;
  akCert?: string[];
  nonce?: string;
  pcrsFile?: string;
  eventLog?: string;
  snpReport?: string;
  certs?: string[];
  product?: string;
  reportData?: string;
  tdxQuote?: string;
}

/** What the evidence command lends the Azure path. */
export interface AzureCliHelpers {
  read(path: string, what: string): Promise<Buffer>;
  hex(value: string, flag: string): Promise<Buffer>;
  pcrValues(bytes: Buffer): PcrValue[];
  collateral: TdxCollateral | undefined;
}

/** A bare TPMS_ATTEST, or the one inside a TPM2B_ATTEST (a bad one is left to the verifier). */
function attestOf(raw: Buffer): Buffer {
  if (raw.length < 4 || raw.readUInt32BE(0) === TPM_GENERATED_VALUE) return raw;
  try {
    return unwrapTpm2bAttest(raw);
  } catch {
    return raw;
  }
}

/**
 * Reads the Azure CVM inputs into {@link RawAzureEvidence} (without the policy options).
 * @throws VerifyInputError for a flag that does not belong to this chain or a missing one.
 */
export async function azureEvidenceFrom(
  opts: AzureCliOptions,
  h: AzureCliHelpers,
): Promise<Omit<RawAzureEvidence, 'trustStore' | 'referenceValues' | 'now'>> {
  const wrong = (
    [
      ['--snp-report', opts.snpReport],
      ['--ak-cert', opts.akCert],
      ['--event-log', opts.eventLog],
      ['--report-data', opts.reportData],
    ] as const
  ).filter(([, v]) => v !== undefined);
  if (wrong.length)
    throw new VerifyInputError(
      `${wrong.map(([f]) => f).join(', ')} do not go with --azure-hcl-report (the HCL report carries the hardware report; the AK is HCLAkPub)`,
    );
  if (opts.tpmQuote === undefined || opts.tpmSig === undefined)
    throw new VerifyInputError(
      '--azure-hcl-report needs --tpm-quote and --tpm-sig (the vTPM quote under HCLAkPub)',
    );
  if (opts.tpmSigFormat !== undefined && opts.tpmSigFormat !== 'tpmt')
    throw new VerifyInputError(
      '--azure-hcl-report takes the quote signature as TPMT_SIGNATURE (--tpm-sig-format tpmt)',
    );
  if (opts.product !== undefined && !(SNP_PRODUCTS as readonly string[]).includes(opts.product))
    throw new VerifyInputError(`--product must be one of ${SNP_PRODUCTS.join(', ')}`);
  const akPublic = opts.ak !== undefined ? await h.read(opts.ak, 'AK TPMT_PUBLIC') : undefined;
  // a PEM or DER key is not an AK public area: HCLAkPub itself is the key (omit --ak)
  if (akPublic && (akPublic.subarray(0, 5).toString('latin1') === '-----' || akPublic[0] === 0x30))
    throw new VerifyInputError(
      '--ak with --azure-hcl-report must be the AK TPMT_PUBLIC (tpm2_readpublic -f tss), or omitted',
    );
  return {
    hclReport: await h.read(opts.azureHclReport as string, 'HCL report'),
    attest: attestOf(await h.read(opts.tpmQuote, 'TPM quote')),
    signature: await h.read(opts.tpmSig, 'TPM signature'),
    ...(akPublic ? { akPublic } : {}),
    ...(opts.nonce !== undefined ? { nonce: await h.hex(opts.nonce, '--nonce') } : {}),
    ...(opts.pcrsFile !== undefined
      ? { pcrValues: h.pcrValues(await h.read(opts.pcrsFile, 'PCR values file')) }
      : {}),
    ...(opts.certs?.length
      ? { snpCerts: await Promise.all(opts.certs.map((f) => h.read(f, 'certificate'))) }
      : {}),
    ...(opts.product ? { snpProduct: opts.product as SnpProduct } : {}),
    ...(opts.tdxQuote !== undefined ? { tdxQuote: await h.read(opts.tdxQuote, 'TDX quote') } : {}),
    ...(h.collateral ? { tdxCollateral: h.collateral } : {}),
  };
}
