/**
 * `--format ear` of the claim command: the report as an EAT Attestation Result signed with the
 * verifier key of `--ear-key` (ear.ts maps, ear-jwt.ts signs). No key, no EAR: an unsigned result
 * would let anyone on the path rewrite the appraisal, so the command refuses (EAR_KEY_REQUIRED).
 */
import { readFileSync } from 'node:fs';
import { EAR_PROFILE_URI, type EarProfile, earClaimsSet } from '../ear.js';
import { EarKeyError, parseEarKey, signEar } from '../ear-jwt.js';
import type { VerificationReport } from '../result.js';
import { readInputFile, VerifyInputError } from './input.js';

/** Largest key file accepted (bytes). */
const MAX_KEY_BYTES = 64 * 1024;

const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as {
  name: string;
  version: string;
};

/** What `--format ear` needs besides the report. */
export interface EarCliOptions {
  earKey?: string;
  earProfile?: string;
}

/**
 * Checks the EAR options before anything is verified (a usage error exits 2 either way).
 * @throws VerifyInputError EAR_KEY_REQUIRED without `--ear-key`; VERIFY_INPUT_INVALID for an
 *   unknown `--ear-profile`.
 */
export function earProfileOf(opts: EarCliOptions): EarProfile {
  if (opts.earKey === undefined) {
    throw new VerifyInputError(
      '--format ear needs --ear-key <PEM or JWK file>: the verifier signs the attestation result (EAR_KEY_REQUIRED)',
      'EAR_KEY_REQUIRED',
    );
  }
  const p = opts.earProfile ?? 'veraison';
  if (!Object.hasOwn(EAR_PROFILE_URI, p)) {
    throw new VerifyInputError(`--ear-profile must be one of ${Object.keys(EAR_PROFILE_URI).join(', ')}`);
  }
  return p as EarProfile;
}

/**
 * The signed EAR (one line) of `report`.
 * @param digests SHA-256 of each input file as read (`claim`, `audit-bundle`)
 * @throws VerifyInputError EAR_KEY_INVALID when the key file is not a usable private key.
 */
export async function earOutput(
  report: VerificationReport,
  opts: EarCliOptions,
  digests: Record<string, Uint8Array>,
  now?: Date,
): Promise<string> {
  const profile = earProfileOf(opts);
  const path = opts.earKey as string;
  const text = (await readInputFile(path, 'EAR key', MAX_KEY_BYTES)).toString('utf8');
  let key: ReturnType<typeof parseEarKey>;
  try {
    key = parseEarKey(text);
  } catch (err) {
    const why = err instanceof EarKeyError ? err.message : 'unusable';
    throw new VerifyInputError(`--ear-key ${path}: ${why} (EAR_KEY_INVALID)`, 'EAR_KEY_INVALID');
  }
  const claims = earClaimsSet(report, {
    profile,
    verifierId: { developer: pkg.name, build: `cmcp-verify ${pkg.version}` },
    issuedAt: Math.floor((now ?? new Date()).getTime() / 1000),
    evidenceDigests: digests,
  });
  return `${await signEar(claims, key)}\n`;
}
