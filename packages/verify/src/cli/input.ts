/**
 * What the verify commands share: the input error class, bounded file reads, the output sinks,
 * and the trust store / reference values / clock options (`--trust-store`, `--reference-values`,
 * `--at`). Node-only (reads files); the verifier modules themselves never read files.
 */
import { readFile, stat } from 'node:fs/promises';
import { CmcpError } from '../errors/index.js';
import { PolicyFileError, type ReferenceValues, type TrustStore } from '../trust.js';
import { defaultAttestationDir, loadReferenceValues, loadTrustStore } from '../trust-files.js';
import { CertError, certsFromBytes } from '../x509.js';

/**
 * A usage or input error of a verify command (missing or oversized file, not JSON, a bad option
 * value): reported as one line on stderr, exit code 2. Code `VERIFY_INPUT_INVALID`, or a narrower
 * one (`VERIFY_KEY_INVALID`, `EAR_KEY_REQUIRED`, `EAR_KEY_INVALID`) that the line also names.
 */
export class VerifyInputError extends CmcpError {
  constructor(
    message: string,
    code:
      | 'VERIFY_INPUT_INVALID'
      | 'VERIFY_KEY_INVALID'
      | 'EAR_KEY_REQUIRED'
      | 'EAR_KEY_INVALID' = 'VERIFY_INPUT_INVALID',
  ) {
    super(code, message);
    this.name = 'VerifyInputError';
  }
}

/** Output sinks (replaceable in tests). */
export interface VerifyIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

/** The process's stdout and stderr. */
export const processIo = (): VerifyIo => ({
  stdout: (t) => process.stdout.write(t),
  stderr: (t) => process.stderr.write(t),
});

/**
 * Reads a regular file of at most `maxBytes` bytes.
 * @throws VerifyInputError naming `what` and the path when it is missing, not a file, too large
 *   or unreadable (with the errno code, never a stack trace).
 */
export async function readInputFile(path: string, what: string, maxBytes: number): Promise<Buffer> {
  try {
    const st = await stat(path);
    if (!st.isFile()) throw new VerifyInputError(`${what} ${path} is not a file`);
    if (st.size > maxBytes) throw new VerifyInputError(`${what} ${path} is larger than ${maxBytes} bytes`);
    return await readFile(path);
  } catch (err) {
    if (err instanceof VerifyInputError) throw err;
    const code = (err as { code?: string }).code;
    throw new VerifyInputError(`cannot read ${what} ${path}${code ? ` (${code})` : ''}`);
  }
}

/**
 * Reads a `--certs` file and checks that it holds X.509 certificates, DER (RFC 5280 §4.1) or PEM
 * (RFC 7468 §5): a file that is none — a binary blob, a report given in the wrong place — is the
 * caller's input error (exit 2, with what is wrong), not a verdict about the evidence.
 * @throws VerifyInputError as {@link readInputFile}, or naming the file and why it does not parse.
 */
export async function readCertificateFile(path: string, maxBytes: number): Promise<Buffer> {
  const bytes = await readInputFile(path, 'certificate', maxBytes);
  try {
    certsFromBytes(bytes);
  } catch (err) {
    const why = err instanceof CertError ? err.message : 'unparsable';
    throw new VerifyInputError(
      `--certs ${path} is not a DER or PEM X.509 certificate (${why}; CERT_MALFORMED)`,
    );
  }
  return bytes;
}

/** Trust store, reference values and clock chosen by `--trust-store`, `--reference-values`, `--at`. */
export interface PolicyOptions {
  trustStore: TrustStore;
  trustStorePath: string | null;
  referenceValues?: ReferenceValues;
  now?: Date;
}

/**
 * Loads `--trust-store` (default: the package's `attestation/trust-store.yaml`, or an empty
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

/**
 * The one stderr line for a failed command: `<label>: <message>` (clipped to 300 characters);
 * anything but a VerifyInputError is reported as an internal error, without its stack.
 */
export function errorLine(label: string, err: unknown): string {
  const msg =
    err instanceof VerifyInputError
      ? err.message
      : `internal error: ${err instanceof Error ? err.message : String(err)}`;
  return `${label}: ${msg.slice(0, 300)}\n`;
}
