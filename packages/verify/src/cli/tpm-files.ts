/**
 * The TPM files of `verify-evidence`, as tpm2-tools and others write them, each recognised by its
 * layout (abi/tpm/files.ts) and refused with TPM_FILE_LAYOUT_MISMATCH — naming what the file is —
 * when it is not what its flag takes:
 *
 * - `--tpm-quote`: TPMS_ATTEST (`tpm2_quote -m`) or TPM2B_ATTEST;
 * - `--tpm-sig`: TPMT_SIGNATURE (`tpm2_quote -s`) or plain (`-f plain`: RSA signature bytes,
 *   ECDSA DER), the scheme of a plain one from the AK's TPMT_PUBLIC or `--tpm-sig-format`;
 * - `--ak`: TPM2B_PUBLIC (`tpm2_createak -u`), TPMT_PUBLIC (`tpm2_readpublic -f tpmt`), PEM/DER
 *   SubjectPublicKeyInfo (`-f pem|der`) or a PEM certificate;
 * - `--ak-parent-name`: the parent's Qualified Name (`tpm2_readpublic -q`, binary or hex; a
 *   4-byte hierarchy handle for a primary AK); `--ak-parent`: the parent's public area
 *   (`tpm2_createek -u`), a primary key of the endorsement hierarchy, whose Qualified Name is
 *   nameAlg ‖ H(TPM_RH_ENDORSEMENT ‖ Name) (TPM 2.0 Part 1 §16);
 * - `--pcrs-file`: YAML/JSON (SHA-256 PCR index → hex), or tpm2-tools `-F serialized`
 *   (`tpm2_quote -o`) or `-F values` (`tpm2_pcrread -o`, read against the quote's selection),
 *   every bank the quote selects.
 */
import { createPublicKey, type KeyObject, X509Certificate } from 'node:crypto';
import { parse as parseYaml } from 'yaml';
import { AbiError } from '../abi/errors.js';
import { parseTpmsAttest, unwrapTpm2bAttest } from '../abi/tpm/attest.js';
import { TPM_GENERATED_VALUE } from '../abi/tpm/constants.js';
import {
  layoutMismatch,
  parseSerializedPcrs,
  readTpmPublicFile,
  splitPcrValues,
  tpmFileLayout,
} from '../abi/tpm/files.js';
import { digest, hashInfo } from '../crypto/hash.js';
import { parseTpmtPublic } from '../tpm/ak.js';
import { PLAIN_SIGNATURE_FORMATS, plainSchemeByName } from '../tpm/files.js';
import { TPM_ALG } from '../tpm/index.js';
import type { PcrValue } from '../tpm/pcr.js';
import { hexArg } from './freshness.js';
import { VerifyInputError } from './input.js';

/** TPM_RH_ENDORSEMENT, the hierarchy of a `tpm2_createek` EK (a `tpm2_createak` AK's parent). */
const TPM_RH_ENDORSEMENT = Buffer.from('4000000b', 'hex');

/** An AbiError of a file as the one usage-error line, code first. */
function refused(flag: string, path: string, err: unknown): never {
  if (err instanceof AbiError) throw new VerifyInputError(`${flag} ${path}: ${err.code}: ${err.message}`);
  throw err;
}

/** `--tpm-quote`: the TPMS_ATTEST bytes (unwrapped from a TPM2B_ATTEST). */
export function quoteFrom(bytes: Buffer, path: string, flag = '--tpm-quote'): Buffer {
  if (bytes.length >= 4 && bytes.readUInt32BE(0) === TPM_GENERATED_VALUE) return bytes;
  const layout = tpmFileLayout(bytes);
  if (layout === 'TPM2B_ATTEST') return unwrapTpm2bAttest(bytes);
  if (layout !== null)
    refused(flag, path, layoutMismatch(`the ${flag} file`, 'a TPMS_ATTEST or TPM2B_ATTEST', bytes));
  return bytes; // unknown: the verifier reports why TPMS_ATTEST does not parse
}

/** `--ak`: the AK as TPMT_PUBLIC bytes or a bare key. */
export function akFrom(bytes: Buffer, path: string): { public: Uint8Array } | { key: KeyObject } {
  const text = bytes.toString('latin1');
  try {
    if (text.startsWith('-----BEGIN CERTIFICATE-----')) return { key: new X509Certificate(bytes).publicKey };
    if (text.startsWith('-----BEGIN PUBLIC KEY-----')) return { key: createPublicKey(text) };
    if (bytes[0] === 0x30) return { key: createPublicKey({ key: bytes, format: 'der', type: 'spki' }) };
  } catch {
    throw new VerifyInputError(`--ak ${path}: not a usable public key (PEM/DER)`);
  }
  try {
    return { public: readTpmPublicFile(bytes, 'the --ak file').tpmtPublic };
  } catch (err) {
    return refused('--ak', path, err);
  }
}

/** `--ak-parent-name` (hex, or @file: binary as tpm2_readpublic -q writes it, or hex text). */
export function parentNameFrom(value: string, fileBytes: Buffer | null): Buffer {
  if (fileBytes === null) return hexArg(value, '--ak-parent-name');
  const text = fileBytes.toString('latin1').trim();
  return /^([0-9a-fA-F]{2})+$/.test(text) ? Buffer.from(text, 'hex') : fileBytes;
}

/** `--ak-parent`: the Qualified Name of a primary parent in the endorsement hierarchy. */
export function parentQualifiedNameFrom(bytes: Buffer, path: string): Buffer {
  let name: Buffer;
  try {
    name = parseTpmtPublic(readTpmPublicFile(bytes, 'the --ak-parent file').tpmtPublic).name;
  } catch (err) {
    return refused('--ak-parent', path, err);
  }
  const h = hashInfo(name.readUInt16BE(0));
  if (!h) throw new VerifyInputError(`--ak-parent ${path}: unsupported nameAlg`);
  return Buffer.concat([name.subarray(0, 2), digest(h.node, TPM_RH_ENDORSEMENT, name)]);
}

/** `--tpm-sig-format`: auto (default), tpmt, plain or `<scheme>-<hash>`. */
export function signatureFormat(value: string | undefined): string {
  const fmt = value ?? 'auto';
  if (fmt === 'auto' || fmt === 'tpmt' || fmt === 'plain' || plainSchemeByName(fmt)) return fmt;
  throw new VerifyInputError(
    `--tpm-sig-format must be auto, tpmt, plain or one of ${PLAIN_SIGNATURE_FORMATS.join(', ')}`,
  );
}

/** `--tpm-sig`: refuses a file that is recognisably something other than a signature. */
export function signatureFrom(bytes: Buffer, path: string, fmt: string): Buffer {
  const layout = tpmFileLayout(bytes);
  const wrong = layout !== null && layout !== 'TPMT_SIGNATURE' && layout !== 'DER';
  if (wrong || (fmt === 'tpmt' && layout !== 'TPMT_SIGNATURE')) {
    refused(
      '--tpm-sig',
      path,
      layoutMismatch(
        'the --tpm-sig file',
        fmt === 'tpmt' ? 'a TPMT_SIGNATURE' : 'a TPMT_SIGNATURE or plain signature',
        bytes,
      ),
    );
  }
  return bytes;
}

function yamlPcrs(bytes: Buffer): PcrValue[] {
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
 * `--pcrs-file`: YAML/JSON text, or a tpm2-tools binary file (serialized, else values against
 * the selection of `attest`, the TPMS_ATTEST bytes).
 */
export function pcrValuesFrom(bytes: Buffer, path: string, attest: Buffer): PcrValue[] {
  // Text (YAML/JSON, UTF-8 without control characters) goes to the YAML reader; anything else is
  // a tpm2-tools binary file.
  const control = bytes.some((b) => b === 0x7f || (b < 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09));
  let text = false;
  try {
    text = !control && new TextDecoder('utf-8', { fatal: true }).decode(bytes).length > 0;
  } catch {
    text = false;
  }
  if (text) return yamlPcrs(bytes);
  try {
    if (tpmFileLayout(bytes) === 'tpm2-tools serialized PCR values') return parseSerializedPcrs(bytes).values;
    const layout = tpmFileLayout(bytes);
    if (layout !== null)
      throw layoutMismatch(
        'the --pcrs-file file',
        'PCR values (YAML/JSON, tpm2-tools -F serialized or -F values)',
        bytes,
      );
    let selection: ReturnType<typeof parseTpmsAttest>['pcrSelect'];
    try {
      selection = parseTpmsAttest(attest).pcrSelect;
    } catch {
      throw new AbiError(
        'PCR_FILE_MALFORMED',
        'PCR values in tpm2-tools -F values form are read against the quote selection, and the quote does not parse',
        'tpm2-tools PCR values',
      );
    }
    return splitPcrValues(bytes, selection);
  } catch (err) {
    return refused('--pcrs-file', path, err);
  }
}
