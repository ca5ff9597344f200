/**
 * PCR values and selections as the verifier compares them: the pcrDigest recomputation of
 * TPM2_Quote (TPM 2.0 Part 3 §18.4; Part 1 §17.5.2) and exact selection comparison.
 */
import { algName } from '../abi/tpm/constants.js';
import type { PcrSelection } from '../abi/tpm/pcr.js';
import { digest, hashInfo } from '../crypto/hash.js';
import type { ReasonCode } from '../result.js';

/** One supplied PCR value. */
export interface PcrValue {
  /** TPM_ALG_ID of the bank. */
  hashAlg: number;
  index: number;
  value: Uint8Array;
}

/** A digest, or why it could not be computed. */
export type PcrDigestResult =
  | { ok: true; digest: Buffer }
  | {
      ok: false;
      code: Extract<ReasonCode, 'PCR_VALUES_MALFORMED' | 'PCR_VALUE_MISSING' | 'PCR_VALUE_UNSELECTED'>;
      detail: string;
    };

function valuesByKey(values: readonly PcrValue[]): Map<string, Uint8Array> | PcrDigestResult {
  const byKey = new Map<string, Uint8Array>();
  for (const v of values) {
    const k = `${v.hashAlg}:${v.index}`;
    if (byKey.has(k))
      return {
        ok: false,
        code: 'PCR_VALUES_MALFORMED',
        detail: `PCR ${algName(v.hashAlg)}:${v.index} twice`,
      };
    const bank = hashInfo(v.hashAlg);
    if (!bank)
      return {
        ok: false,
        code: 'PCR_VALUES_MALFORMED',
        detail: `unsupported PCR bank ${algName(v.hashAlg)}`,
      };
    if (v.value.length !== bank.size) {
      return {
        ok: false,
        code: 'PCR_VALUES_MALFORMED',
        detail: `PCR ${algName(v.hashAlg)}:${v.index} is ${v.value.length} bytes, expected ${bank.size}`,
      };
    }
    byKey.set(k, v.value);
  }
  return byKey;
}

/**
 * Recomputes a quote's pcrDigest: H_digestAlg(concatenation of the selected PCR values), banks in
 * the selection's marshalled order and PCRs ascending within each bank (Part 3 §18.4 TPM2_Quote,
 * Part 1 §17.5.2). `digestAlg` is the hash of the quote's signing scheme, which may differ from the
 * bank hash (e.g. a SHA-384-signed quote over SHA-256 PCRs carries a 48-byte digest).
 * Supplied values may be listed in any order; each (bank, index) may appear once.
 * @returns the digest, or PCR_VALUE_MISSING, PCR_VALUES_MALFORMED (duplicate, wrong length,
 *   unsupported bank) or PCR_VALUE_UNSELECTED (a supplied value the selection does not cover).
 */
export function pcrDigest(
  selection: readonly PcrSelection[],
  values: readonly PcrValue[],
  digestAlg: number,
): PcrDigestResult {
  const alg = hashInfo(digestAlg);
  if (!alg)
    return {
      ok: false,
      code: 'PCR_VALUES_MALFORMED',
      detail: `unsupported digest hash ${algName(digestAlg)}`,
    };
  const byKey = valuesByKey(values);
  if (!(byKey instanceof Map)) return byKey;
  const parts: Uint8Array[] = [];
  const used = new Set<string>();
  for (const sel of selection) {
    for (const index of sel.pcrs) {
      const k = `${sel.hashAlg}:${index}`;
      const v = byKey.get(k);
      if (!v)
        return {
          ok: false,
          code: 'PCR_VALUE_MISSING',
          detail: `no value for PCR ${algName(sel.hashAlg)}:${index}`,
        };
      used.add(k);
      parts.push(v);
    }
  }
  for (const k of byKey.keys()) {
    if (!used.has(k)) {
      const [a, index] = k.split(':');
      return {
        ok: false,
        code: 'PCR_VALUE_UNSELECTED',
        detail: `PCR ${algName(Number(a))}:${index} is not selected`,
      };
    }
  }
  return { ok: true, digest: digest(alg.node, ...parts) };
}

/** {@link pcrDigest} for tools and tests. @throws Error with the reason code and detail */
export function computePcrDigest(
  selection: readonly PcrSelection[],
  values: readonly PcrValue[],
  digestAlg: number,
): Buffer {
  const r = pcrDigest(selection, values, digestAlg);
  if (!r.ok) throw new Error(`${r.code}: ${r.detail}`);
  return r.digest;
}

/** Non-empty banks of a selection as `alg:[i,j]` strings, sorted, for exact set comparison. */
function selectionKey(sel: readonly PcrSelection[]): string {
  return sel
    .filter((s) => s.pcrs.length > 0)
    .map((s) => `${algName(s.hashAlg)}:[${[...s.pcrs].sort((a, b) => a - b).join(',')}]`)
    .sort()
    .join(' ');
}

/**
 * True when two selections cover exactly the same (bank, PCR) set (banks without PCRs ignored,
 * duplicate banks never equal to a single bank).
 */
export function sameSelection(a: readonly PcrSelection[], b: readonly PcrSelection[]): boolean {
  return selectionKey(a) === selectionKey(b);
}

/** Printable form of a selection, e.g. `sha256:[0,1,2,7]`. */
export function describeSelection(sel: readonly PcrSelection[]): string {
  return selectionKey(sel) || '(empty)';
}
