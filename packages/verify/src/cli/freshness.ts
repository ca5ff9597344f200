/**
 * The relying party's freshness inputs of `verify-evidence`: `--nonce HEX`, `--nonce-text TEXT`
 * (checked as its SHA-256, the common convention of putting a hashed challenge into the
 * evidence) and `--report-data HEX`. Whichever is given is the exact byte string the evidence
 * must carry — TPM extraData (qualifyingData), SEV-SNP REPORT_DATA, TDX REPORTDATA — compared
 * at its own length: the verifier never pads or truncates it, so a nonce shorter than the
 * 64-byte REPORT_DATA fails `evidence.binding` instead of being zero-padded into a match.
 */
import { createHash } from 'node:crypto';
import { VerifyInputError } from './input.js';

/** The freshness options as commander parses them. */
export interface FreshnessOptions {
  nonce?: string;
  nonceText?: string;
  reportData?: string;
}

/** Hex text (even length, at least one byte) to bytes. @throws VerifyInputError */
export function hexArg(text: string, flag: string, len?: number): Buffer {
  const t = text.trim();
  if (!/^([0-9a-fA-F]{2})+$/.test(t) || (len !== undefined && t.length !== 2 * len)) {
    throw new VerifyInputError(`${flag} must be ${len === undefined ? '' : `${len} bytes of `}hex`);
  }
  return Buffer.from(t, 'hex');
}

/**
 * The expected bytes from `--nonce` (hex, or `@file` holding hex), `--nonce-text` (SHA-256 of
 * its UTF-8 bytes) or `--report-data` (hex or `@file`); undefined when none is given.
 * @throws VerifyInputError when more than one is given or the hex does not parse.
 */
export async function expectedFreshness(
  opts: FreshnessOptions,
  readText: (path: string, what: string) => Promise<string>,
): Promise<{ bytes: Buffer; label: string } | undefined> {
  const given = (['nonce', 'nonceText', 'reportData'] as const).filter((k) => opts[k] !== undefined);
  if (given.length > 1)
    throw new VerifyInputError('give at most one of --nonce, --nonce-text, --report-data');
  const hexOrFile = async (value: string, flag: string) =>
    hexArg(value.startsWith('@') ? await readText(value.slice(1), flag) : value, flag);
  if (opts.nonceText !== undefined) {
    return {
      bytes: createHash('sha256').update(opts.nonceText, 'utf8').digest(),
      label: 'SHA-256 of --nonce-text',
    };
  }
  if (opts.nonce !== undefined) return { bytes: await hexOrFile(opts.nonce, '--nonce'), label: '--nonce' };
  if (opts.reportData !== undefined) {
    // REPORT_DATA is 64 bytes by definition: any other length is a usage error, never padded.
    const bytes = await hexOrFile(opts.reportData, '--report-data');
    if (bytes.length !== 64) {
      throw new VerifyInputError(
        `--report-data must be 64 bytes of hex (got ${bytes.length}; it is never padded)`,
      );
    }
    return { bytes, label: '--report-data' };
  }
  return undefined;
}
