/**
 * Plain TPM quote signatures (`tpm2_quote -f plain`) as the verifier takes them: the bytes carry
 * no scheme or hash, so both come from the AK's TPMT_PUBLIC (a restricted signing key fixes its
 * scheme) or from the caller; they are never guessed. RSASSA / RSAPSS: the signature itself
 * (modulus-size bytes). ECDSA: tpm2-tools writes DER ECDSA-Sig-Value {r INTEGER, s INTEGER}
 * (RFC 3279 §2.2.3), read here exactly (no trailing bytes, minimal integers).
 */
import * as asn1js from 'asn1js';
import { AbiError } from '../abi/errors.js';
import { algName, TPM_ALG } from '../abi/tpm/constants.js';
import type { TpmtSignature } from '../abi/tpm/signature.js';
import { STRONG_HASHES } from './ak.js';

/** A scheme and hash for a plain signature. */
export interface PlainScheme {
  sigAlg: number;
  hashAlg: number;
}

const SCHEMES: Readonly<Record<string, number>> = {
  rsassa: TPM_ALG.RSASSA,
  rsapss: TPM_ALG.RSAPSS,
  ecdsa: TPM_ALG.ECDSA,
};
const HASHES: Readonly<Record<string, number>> = {
  sha256: TPM_ALG.SHA256,
  sha384: TPM_ALG.SHA384,
  sha512: TPM_ALG.SHA512,
};

/** The plain formats named as `<scheme>-<hash>`, e.g. `rsapss-sha256`, `ecdsa-sha384`. */
export const PLAIN_SIGNATURE_FORMATS: readonly string[] = Object.keys(SCHEMES).flatMap((s) =>
  Object.keys(HASHES).map((h) => `${s}-${h}`),
);

/** `rsapss-sha256` → its scheme, or undefined (also accepts the older `raw-rsassa-sha256`). */
export function plainSchemeByName(name: string): PlainScheme | undefined {
  const m = /^(?:raw-)?(rsassa|rsapss|ecdsa)-(sha256|sha384|sha512)$/.exec(name);
  if (!m || (name.startsWith('raw-') && m[1] !== 'rsassa')) return undefined;
  return { sigAlg: SCHEMES[m[1] as string] as number, hashAlg: HASHES[m[2] as string] as number };
}

const bad = (msg: string) =>
  new AbiError('TPM_SIGNATURE_MALFORMED', `plain signature: ${msg}`, 'plain signature');

function derInteger(x: asn1js.AsnType | undefined, name: string): Buffer {
  if (!(x instanceof asn1js.Integer)) throw bad(`${name} is not an INTEGER`);
  const v = Buffer.from(x.valueBlock.valueHexView);
  if (v.length === 0 || (v[0] as number) & 0x80) throw bad(`${name} is not a positive INTEGER`);
  if (v.length > 1 && v[0] === 0 && !((v[1] as number) & 0x80)) throw bad(`${name} is not minimally encoded`);
  return v[0] === 0 ? v.subarray(1) : v;
}

/**
 * A plain signature under `scheme` as a TPMT_SIGNATURE (for the same checks as a wire one).
 * @throws AbiError TPM_SIGNATURE_UNSUPPORTED (scheme or hash), TPM_SIGNATURE_MALFORMED (ECDSA
 *   bytes that are not exactly one DER ECDSA-Sig-Value)
 */
export function plainSignature(bytes: Uint8Array, scheme: PlainScheme): TpmtSignature {
  const { sigAlg, hashAlg } = scheme;
  if (!STRONG_HASHES.has(hashAlg)) {
    throw new AbiError(
      'TPM_SIGNATURE_UNSUPPORTED',
      `plain signature: hash ${algName(hashAlg)}`,
      'plain signature',
    );
  }
  if (sigAlg === TPM_ALG.RSASSA || sigAlg === TPM_ALG.RSAPSS)
    return { sigAlg, hashAlg, sig: Buffer.from(bytes) };
  if (sigAlg !== TPM_ALG.ECDSA) {
    throw new AbiError(
      'TPM_SIGNATURE_UNSUPPORTED',
      `plain signature: scheme ${algName(sigAlg)}`,
      'plain signature',
    );
  }
  const b = Buffer.from(bytes);
  if (b[0] !== 0x30) throw bad('an ECDSA plain signature is DER (SEQUENCE {r, s}), this is not');
  const parsed = asn1js.fromBER(new Uint8Array(b));
  if (parsed.offset !== b.length || !(parsed.result instanceof asn1js.Sequence))
    throw bad('not one DER SEQUENCE');
  const items = parsed.result.valueBlock.value as asn1js.AsnType[];
  if (items.length !== 2) throw bad('ECDSA-Sig-Value has not two INTEGERs');
  const r = derInteger(items[0], 'r');
  const s = derInteger(items[1], 's');
  if (!Buffer.from(parsed.result.toBER()).equals(b)) throw bad('not DER');
  return { sigAlg, hashAlg, r, s };
}

/** The plain scheme an AK's TPMT_PUBLIC fixes, or the reason there is none. */
export function akPlainScheme(scheme: { scheme: number; hashAlg: number | null }): PlainScheme | AbiError {
  if (
    (scheme.scheme === TPM_ALG.RSASSA ||
      scheme.scheme === TPM_ALG.RSAPSS ||
      scheme.scheme === TPM_ALG.ECDSA) &&
    scheme.hashAlg !== null
  ) {
    return { sigAlg: scheme.scheme, hashAlg: scheme.hashAlg };
  }
  return new AbiError(
    'TPM_SIGNATURE_SCHEME_UNKNOWN',
    `a plain signature needs a scheme: the AK's TPMT_PUBLIC has ${algName(scheme.scheme)}; give --tpm-sig-format <scheme>-<hash>`,
    'plain signature',
  );
}
