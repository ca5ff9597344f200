/**
 * The claim command: `<claim> [--audit <bundle>] [--json] [--challenge <b64url>] [--pcrs 0,1,2,7]
 * [--previous-claim <file>] [--policy-hash <sha256:hex>] [--catalog-hash <sha256:hex>]
 * [--trust-store <file>] [--reference-values <file>] [--at <RFC 3339>] [--require <verdict>]
 * [--key <jwk-file|thumbprint>]… [--format text|json|ear --ear-key <file> --ear-profile veraison|ietf-03]`:
 * verifies a claim (and its audit bundle) offline. `cmcp-verify claim` and the gateway's
 * `cmcp verify` are this one definition under two names. The trust store defaults to the
 * package's attestation/trust-store.yaml.
 *
 * Exit codes: 0 when the claim is accepted — not `invalid`, and at least `--require` (default
 * `hardware-attested`) or signed by a key pinned with `--key`; 1 otherwise (a self-asserted
 * signer is accepted only under an explicit `--require signed-only`); 2 for unreadable input (missing file, not JSON) or usage
 * errors (a `--key` that is a claim file or a private key: VERIFY_KEY_INVALID). Messages never
 * include stack traces.
 */
import { createHash } from 'node:crypto';
import type { Command } from 'commander';
import { type VerifyClaimOptions, verifyClaim } from '../claim.js';
import { jwkThumbprint } from '../format/binding.js';
import { b64u } from '../format/canonical.js';
import { renderJson, renderText } from '../render.js';
import { earOutput, earProfileOf } from './ear.js';
import {
  errorLine,
  loadPolicyOptions,
  processIo,
  readInputFile,
  VerifyInputError,
  type VerifyIo,
} from './input.js';
import { requiredVerdict } from './require.js';

/** Largest input file accepted (bytes). */
const MAX_INPUT_BYTES = 64 * 1024 * 1024;

/** Options of the claim command, as commander parses them. */
export interface VerifyCliOptions {
  /** Weakest verdict accepted from an unpinned signer (`--require`); default hardware-attested. */
  require?: string;
  /** Pinned claim signing keys (`--key`, repeatable): public JWK files or RFC 7638 thumbprints. */
  key?: string[];
  audit?: string;
  json?: boolean;
  challenge?: string;
  pcrs?: string;
  previousClaim?: string;
  policyHash?: string;
  catalogHash?: string;
  /** Trust store YAML (default: the package's attestation/trust-store.yaml). */
  trustStore?: string;
  /** Reference values YAML (default: none). */
  referenceValues?: string;
  /** Verification time (RFC 3339) for certificate and collateral validity (default: now). */
  at?: string;
  /** Output: `text` (default), `json` (as `--json`) or `ear` (a signed EAT Attestation Result). */
  format?: string;
  /** The verifier's private key (PEM or JWK file) that signs `--format ear`. */
  earKey?: string;
  /** EAR claim names and profile: `veraison` (default) or `ietf-03`. */
  earProfile?: string;
}

/** Reads a JSON file; records SHA-256 of its bytes under `digestAs` in `digests` when given. */
export async function readJson(
  path: string,
  what: string,
  digests?: Record<string, Uint8Array>,
  digestAs?: string,
): Promise<unknown> {
  const bytes = await readInputFile(path, what, MAX_INPUT_BYTES);
  if (digests && digestAs) digests[digestAs] = createHash('sha256').update(bytes).digest();
  const text = bytes.toString('utf8');
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

/** JWK members that only a private key carries (RFC 7517 §4, RFC 7518 §6, RFC 8037 §2). */
const PRIVATE_JWK_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'oth', 'k'] as const;

/** A `--key` value that cannot be pinned: exit 2, code `VERIFY_KEY_INVALID`, named in the line. */
function keyError(value: string, why: string): VerifyInputError {
  return new VerifyInputError(`--key ${value} ${why} (VERIFY_KEY_INVALID)`, 'VERIFY_KEY_INVALID');
}

/**
 * Reads one `--key` value: an RFC 7638 thumbprint (43 base64url characters), or a file holding
 * an Ed25519 public JWK. Returns the thumbprint. A claim file is refused: its `cnf.jwk` is
 * whatever key signed that claim, so pinning it would accept any forgery the attacker hands
 * over with it; the gateway's key must come from a trusted source. A JWK with private members
 * is refused too, so a signing key is not copied to relying parties by mistake.
 * @throws VerifyInputError (VERIFY_KEY_INVALID) when it is none of these.
 */
async function pinnedKey(value: string): Promise<string> {
  if (/^[A-Za-z0-9_-]{43}$/.test(value)) return value;
  const json = (await readJson(value, '--key')) as Record<string, unknown> | null;
  if (json !== null && typeof json === 'object' && ('cnf' in json || 'signature' in json))
    throw keyError(
      value,
      "is a claim, not a key (its cnf.jwk is whoever signed it): pin the gateway's public JWK or thumbprint from a trusted source",
    );
  if (json !== null && typeof json === 'object') {
    const priv = PRIVATE_JWK_MEMBERS.filter((m) => m in json);
    if (priv.length > 0)
      throw keyError(value, `holds private key members (${priv.join(', ')}): pin the public JWK only`);
  }
  const jwk = json as { kty?: unknown; crv?: unknown; x?: unknown } | null;
  if (
    jwk?.kty !== 'OKP' ||
    jwk.crv !== 'Ed25519' ||
    typeof jwk.x !== 'string' ||
    !/^[A-Za-z0-9_-]{43}$/.test(jwk.x)
  )
    throw keyError(value, 'is not an Ed25519 public JWK (kty OKP, crv Ed25519, x)');
  return b64u(jwkThumbprint({ kty: 'OKP', crv: 'Ed25519', x: jwk.x }));
}

/** Turns the command's options into verifier options (everything but the files to read). */
export function claimOptions(opts: VerifyCliOptions): VerifyClaimOptions {
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
  return vopts;
}

/**
 * `--format` (text, json or ear; `--json` is `--format json`). For `ear`, checks the EAR options
 * up front so a missing key is a usage error before any verification.
 * @throws VerifyInputError for another format, `--json` with another format, or bad EAR options.
 */
function outputFormat(opts: VerifyCliOptions): 'text' | 'json' | 'ear' {
  const f = opts.format ?? (opts.json ? 'json' : 'text');
  if (f !== 'text' && f !== 'json' && f !== 'ear')
    throw new VerifyInputError('--format must be text, json or ear');
  if (opts.json && f !== 'json') throw new VerifyInputError(`--json contradicts --format ${f}`);
  if (f === 'ear') earProfileOf(opts);
  return f;
}

/**
 * Runs the claim command and returns its exit code (0, 1 or 2); writes the report to
 * `io.stdout` and errors to `io.stderr` as one line prefixed with `label`. Never throws.
 */
export async function runVerify(
  claimPath: string,
  opts: VerifyCliOptions,
  io: VerifyIo = processIo(),
  label = 'cmcp-verify claim',
): Promise<number> {
  try {
    const vopts = claimOptions(opts);
    const format = outputFormat(opts);
    const digests: Record<string, Uint8Array> = {};
    const claim = await readJson(claimPath, 'claim', digests, 'claim');
    if (opts.audit !== undefined)
      vopts.bundle = await readJson(opts.audit, 'audit bundle', digests, 'audit-bundle');
    if (opts.previousClaim !== undefined)
      vopts.previousClaim = await readJson(opts.previousClaim, 'previous claim');
    const minimum = requiredVerdict(opts.require, 'hardware-attested');
    if (minimum !== 'invalid') vopts.require = minimum;
    vopts.trustedKeys = await Promise.all((opts.key ?? []).map(pinnedKey));
    const report = await verifyClaim(claim, vopts);
    if (format === 'ear') io.stdout(await earOutput(report, opts, digests));
    else io.stdout(format === 'json' ? renderJson(report) : renderText(report));
    // Exit 1 unless the policy accepts the claim: not `invalid`, and hardware-attested (or the
    // verdict the relying party lowered `--require` to) or signed by a pinned key.
    return report.accepted ? 0 : 1;
  } catch (err) {
    io.stderr(errorLine(label, err));
    return 2;
  }
}

/**
 * Adds the claim command to `program` as `name` (`claim` in `cmcp-verify`, `verify` in `cmcp`);
 * errors are prefixed with "<program name> <name>". Sets `process.exitCode` to the result of
 * {@link runVerify}; commander usage errors (missing argument, unknown option) exit with 2.
 */
export function registerVerifyCommand(program: Command, name = 'claim'): Command {
  return program
    .command(name)
    .description(
      'verify a claim (and its audit bundle) offline; exit 1 if invalid or not hardware-attested/pinned, 2 on unreadable input',
    )
    .argument('<claim>', 'claim JSON file')
    .option('--audit <bundle>', 'audit bundle JSON file of the claim chain')
    .option('--json', 'print the report as JSON')
    .option(
      '--format <format>',
      'text (default), json, or ear: a signed EAT Attestation Result (needs --ear-key)',
    )
    .option(
      '--ear-key <file>',
      'verifier private key (PEM or JWK; P-256, P-384 or Ed25519) that signs --format ear',
    )
    .option('--ear-profile <profile>', 'EAR claim names: veraison (default, Veraison/Trustee) or ietf-03')
    .option('--challenge <b64url>', 'the nonce the claim binding must carry')
    .option('--pcrs <list>', 'required PCR selection (SHA-256 bank), e.g. 0,1,2,7')
    .option('--previous-claim <file>', 'the claim issued before this one (checks the claim sequence)')
    .option('--policy-hash <sha256:hex>', 'pin: the claim must name this policy bundle hash')
    .option('--catalog-hash <sha256:hex>', 'pin: the claim must name this catalog hash')
    .option('--trust-store <file>', "pinned roots (default: the package's attestation/trust-store.yaml)")
    .option('--reference-values <file>', 'reference values YAML (allowed TEE types, PCRs)')
    .option('--at <time>', 'verification time (RFC 3339) for certificate validity (default: now)')
    .option(
      '--require <verdict>',
      'exit 1 unless the verdict is at least this (or the signer is pinned with --key): hardware-attested (default), hardware-unanchored or signed-only (accepts a self-asserted signer)',
    )
    .option(
      '--key <jwk-file|thumbprint>',
      "pin the gateway's claim signing key (repeatable; public JWK file or RFC 7638 thumbprint from a trusted source, never a claim file): a claim it signed is accepted without hardware evidence",
      (v: string, prev: string[] = []) => [...prev, v],
    )
    .exitOverride((err) => {
      // Help and version exit 0; every other commander error is a usage error: exit 2.
      process.exit(err.exitCode === 0 ? 0 : 2);
    })
    .action(async (claimPath: string, opts: VerifyCliOptions) => {
      process.exitCode = await runVerify(claimPath, opts, processIo(), `${program.name()} ${name}`);
    });
}
