/**
 * `cmcp verify <claim> [--audit <bundle>] [--json] [--challenge <b64url>] [--pcrs 0,1,2,7]
 * [--previous-claim <file>] [--policy-hash <sha256:hex>] [--catalog-hash <sha256:hex>]
 * [--trust-store <file>] [--reference-values <file>] [--at <RFC 3339>]`: verifies a claim (and its
 * audit bundle) offline. The trust store defaults to the repository's attestation/trust-store.yaml.
 *
 * Exit codes: 0 when the verdict is not `invalid`; 1 when it is `invalid`; 2 for unreadable
 * input (missing file, not JSON) or usage errors. Messages never include stack traces.
 */
import { readFile, stat } from 'node:fs/promises';
import { type VerifyClaimOptions, verifyClaim } from '@cmcp/verify/claim';
import { CmcpError } from '@cmcp/verify/errors/index';
import { renderJson, renderText } from '@cmcp/verify/render';
import type { Verdict } from '@cmcp/verify/result';
import {
  defaultAttestationDir,
  loadReferenceValues,
  loadTrustStore,
  PolicyFileError,
  type ReferenceValues,
  type TrustStore,
} from '@cmcp/verify/trust';
import type { Command } from 'commander';

/** Largest input file accepted (bytes). */
const MAX_INPUT_BYTES = 64 * 1024 * 1024;

/** Options of the verify command, as commander parses them. */
export interface VerifyCliOptions {
  /** Weakest acceptable verdict (`--require`); default signed-only. */
  require?: string;
  audit?: string;
  json?: boolean;
  challenge?: string;
  pcrs?: string;
  previousClaim?: string;
  policyHash?: string;
  catalogHash?: string;
  /** Trust store YAML (default: the repository's attestation/trust-store.yaml). */
  trustStore?: string;
  /** Reference values YAML (default: none). */
  referenceValues?: string;
  /** Verification time (RFC 3339) for certificate and collateral validity (default: now). */
  at?: string;
}

/** Trust store, reference values and clock chosen by `--trust-store`, `--reference-values`, `--at`. */
export interface PolicyOptions {
  trustStore: TrustStore;
  trustStorePath: string | null;
  referenceValues?: ReferenceValues;
  now?: Date;
}

/**
 * Loads `--trust-store` (default: the repository's `attestation/trust-store.yaml`, or an empty
 * store when there is none), `--reference-values` and `--at`.
 * @throws VerifyInputError when a file is unreadable or invalid, or `--at` is not RFC 3339.
 */
export function loadPolicyOptions(opts: {
  trustStore?: string;
  referenceValues?: string;
  at?: string;
}): PolicyOptions {
  const load = <T>(path: string, what: string, fn: (p: string) => T): T => {
    try {
      return fn(path);
    } catch (err) {
      if (err instanceof PolicyFileError) throw new VerifyInputError(`${what} ${path}: ${err.message}`);
      const code = (err as { code?: string }).code;
      throw new VerifyInputError(`cannot read ${what} ${path}${code ? ` (${code})` : ''}`);
    }
  };
  const dir = defaultAttestationDir();
  const trustStorePath = opts.trustStore ?? (dir ? `${dir}/trust-store.yaml` : null);
  const out: PolicyOptions = {
    trustStore: trustStorePath
      ? load(trustStorePath, 'trust store', loadTrustStore)
      : { version: 1, roots: [] },
    trustStorePath,
  };
  if (opts.referenceValues !== undefined) {
    out.referenceValues = load(opts.referenceValues, 'reference values', loadReferenceValues);
  }
  if (opts.at !== undefined) {
    const d = new Date(opts.at);
    if (
      !/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/.test(opts.at) ||
      Number.isNaN(d.getTime())
    ) {
      throw new VerifyInputError('--at must be an RFC 3339 time, e.g. 2023-07-01T01:00:00Z');
    }
    out.now = d;
  }
  return out;
}

/** Output sinks (replaceable in tests). */
export interface VerifyIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

/** Verdicts from strongest to weakest (design §5). */
const VERDICT_ORDER: Verdict[] = ['hardware-attested', 'hardware-unanchored', 'signed-only', 'invalid'];

/** A usage or input error: reported as one line, exit code 2. */
export class VerifyInputError extends CmcpError {
  declare readonly code: 'VERIFY_INPUT_INVALID';
  constructor(message: string) {
    super('VERIFY_INPUT_INVALID', message);
    this.name = 'VerifyInputError';
  }
}

async function readJson(path: string, what: string): Promise<unknown> {
  let text: string;
  try {
    const st = await stat(path);
    if (!st.isFile()) throw new VerifyInputError(`${what} ${path} is not a file`);
    if (st.size > MAX_INPUT_BYTES)
      throw new VerifyInputError(`${what} ${path} is larger than ${MAX_INPUT_BYTES} bytes`);
    text = await readFile(path, 'utf8');
  } catch (err) {
    if (err instanceof VerifyInputError) throw err;
    const code = (err as { code?: string }).code;
    throw new VerifyInputError(`cannot read ${what} ${path}${code ? ` (${code})` : ''}`);
  }
  try {
    return JSON.parse(text);
  } catch {
    throw new VerifyInputError(`${what} ${path} is not JSON`);
  }
}

/**
 * Parses `--pcrs` ("0,1,2,7"): distinct decimal PCR indices 0–23, returned ascending.
 * @throws VerifyInputError on any other text.
 */
export function parsePcrList(text: string): number[] {
  const parts = text.split(',').map((p) => p.trim());
  const out: number[] = [];
  for (const p of parts) {
    if (!/^(0|[1-9]\d?)$/.test(p) || Number(p) > 23) {
      throw new VerifyInputError(`--pcrs: ${JSON.stringify(p.slice(0, 10))} is not a PCR index 0-23`);
    }
    if (out.includes(Number(p))) throw new VerifyInputError(`--pcrs: PCR ${p} listed twice`);
    out.push(Number(p));
  }
  return out.sort((a, b) => a - b);
}

/**
 * Runs the verify command and returns its exit code (0, 1 or 2); writes the report to
 * `io.stdout` and errors to `io.stderr`. Never throws.
 */
export async function runVerify(
  claimPath: string,
  opts: VerifyCliOptions,
  io: VerifyIo = { stdout: (t) => process.stdout.write(t), stderr: (t) => process.stderr.write(t) },
): Promise<number> {
  try {
    const vopts: VerifyClaimOptions = {};
    if (opts.challenge !== undefined) {
      if (!/^[A-Za-z0-9_-]+$/.test(opts.challenge) || opts.challenge.length % 4 === 1) {
        throw new VerifyInputError('--challenge must be unpadded base64url');
      }
      vopts.expectedChallenge = opts.challenge;
    }
    if (opts.pcrs !== undefined) vopts.requiredPcrs = parsePcrList(opts.pcrs);
    const policy = loadPolicyOptions(opts);
    vopts.trustStore = policy.trustStore;
    if (policy.referenceValues) vopts.referenceValues = policy.referenceValues;
    if (policy.now) vopts.now = policy.now;
    for (const [flag, v] of [
      ['--policy-hash', opts.policyHash],
      ['--catalog-hash', opts.catalogHash],
    ] as const) {
      if (v !== undefined && !/^sha256:[0-9a-f]{64}$/.test(v))
        throw new VerifyInputError(`${flag} must be sha256:<64 lowercase hex>`);
    }
    if (opts.policyHash !== undefined) vopts.expectedPolicyHash = opts.policyHash;
    if (opts.catalogHash !== undefined) vopts.expectedCatalogHash = opts.catalogHash;
    const claim = await readJson(claimPath, 'claim');
    if (opts.audit !== undefined) vopts.bundle = await readJson(opts.audit, 'audit bundle');
    if (opts.previousClaim !== undefined)
      vopts.previousClaim = await readJson(opts.previousClaim, 'previous claim');
    const minimum = opts.require ?? 'signed-only';
    if (!VERDICT_ORDER.includes(minimum as Verdict) || minimum === 'invalid')
      throw new VerifyInputError(`--require must be one of ${VERDICT_ORDER.slice(0, 3).join(', ')}`);
    const report = verifyClaim(claim, vopts);
    io.stdout(opts.json ? renderJson(report) : renderText(report));
    // Exit 1 for `invalid`, and for any verdict weaker than the one the relying party requires.
    return VERDICT_ORDER.indexOf(report.verdict) > VERDICT_ORDER.indexOf(minimum as Verdict) ? 1 : 0;
  } catch (err) {
    const msg =
      err instanceof VerifyInputError
        ? err.message
        : `internal error: ${err instanceof Error ? err.message : String(err)}`;
    io.stderr(`cmcp verify: ${msg.slice(0, 300)}\n`);
    return 2;
  }
}

/**
 * Adds `verify <claim> [--audit <bundle>] [--json] [--challenge <b64url>] [--pcrs 0,1,2,7]
 * [--previous-claim <file>]` to `program`. Sets `process.exitCode` to the result of
 * {@link runVerify}; commander usage errors (missing argument, unknown option) exit with 2.
 */
export function registerVerifyCommand(program: Command): void {
  program
    .command('verify')
    .description('verify a claim (and its audit bundle) offline; exit 1 if invalid, 2 on unreadable input')
    .argument('<claim>', 'claim JSON file')
    .option('--audit <bundle>', 'audit bundle JSON file of the claim chain')
    .option('--json', 'print the report as JSON')
    .option('--challenge <b64url>', 'the nonce the claim binding must carry')
    .option('--pcrs <list>', 'required PCR selection (SHA-256 bank), e.g. 0,1,2,7')
    .option('--previous-claim <file>', 'the claim issued before this one (checks the claim sequence)')
    .option('--policy-hash <sha256:hex>', 'pin: the claim must name this policy bundle hash')
    .option('--catalog-hash <sha256:hex>', 'pin: the claim must name this catalog hash')
    .option('--trust-store <file>', "pinned roots (default: the repository's attestation/trust-store.yaml)")
    .option('--reference-values <file>', 'reference values YAML (allowed TEE types, PCRs)')
    .option('--at <time>', 'verification time (RFC 3339) for certificate validity (default: now)')
    .option(
      '--require <verdict>',
      'exit 1 unless the verdict is at least this: hardware-attested, hardware-unanchored or signed-only (default)',
    )
    .exitOverride((err) => {
      // Help and version exit 0; every other commander error is a usage error: exit 2.
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (claimPath: string, opts: VerifyCliOptions) => {
      process.exitCode = await runVerify(claimPath, opts);
    });
}
