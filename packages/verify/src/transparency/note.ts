/**
 * Signed notes (C2SP signed-note, https://c2sp.org/signed-note): a UTF-8 text ending in a
 * newline, a blank line, then signature lines `— <key name> base64(key ID ‖ signature)`.
 * Only Ed25519 (signature type 0x01) is produced and verified here: key ID = the first four bytes
 * of SHA-256(key name ‖ 0x0A ‖ 0x01 ‖ 32-byte public key), big-endian; the signature is RFC 8032
 * Ed25519 over the note text (final newline included). Verifier keys ("vkeys") are
 * `<name>+<hex key ID>+base64(0x01 ‖ public key)`.
 */
import { createPublicKey, type KeyObject, sign } from 'node:crypto';
import { digest } from '../crypto/hash.js';
import { jwkPublicKey } from '../crypto/keys.js';
import { verifyWithKey } from '../crypto/signatures.js';
import { clip } from '../errors/index.js';
import { TransparencyError } from './errors.js';

/** Signature type byte of Ed25519 note signatures (C2SP signed-note "Signature types"). */
export const NOTE_ED25519_TYPE = 0x01;

/** Signatures a note may carry before {@link openNote} refuses it (the spec asks for at least 16). */
export const NOTE_MAX_SIGNATURES = 64;

const SIG_PREFIX = '— ';
const B64 = /^[A-Za-z0-9+/]*={0,2}$/;

/** One signature line of a note: the key name, the key ID and the signature bytes after it. */
export interface NoteSignature {
  name: string;
  /** uint32 key ID (big-endian first four bytes of the decoded line). */
  keyId: number;
  signature: Buffer;
}

/** A note split into its text (final newline included) and its signature lines. */
export interface OpenedNote {
  text: string;
  signatures: NoteSignature[];
}

/** A key that verifies Ed25519 note signatures under a name. */
export interface NoteVerifier {
  name: string;
  keyId: number;
  /** The 32-byte Ed25519 public key (RFC 8032). */
  publicKey: Buffer;
}

/** Key names are non-empty, with no Unicode space and no plus (C2SP signed-note "Format"). */
function checkKeyName(name: string): void {
  if (name.length === 0 || /[\s+]/u.test(name) || hasControl(name, false))
    throw new TransparencyError(
      'NOTE_KEY_INVALID',
      `key name ${clip(name)} is empty or holds a space or plus`,
    );
}

/** Whether `text` holds an ASCII control character (below U+0020), a newline counting only when not allowed. */
function hasControl(text: string, newlineAllowed: boolean): boolean {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x20 && !(newlineAllowed && c === 0x0a)) return true;
  }
  return false;
}

/** Refuses control characters other than newline (C2SP signed-note "Format"). */
function checkNoteChars(text: string, what: string): void {
  if (hasControl(text, true))
    throw new TransparencyError(
      'NOTE_MALFORMED',
      `${what} holds an ASCII control character other than newline`,
    );
}

/**
 * Ed25519 key ID: SHA-256(name ‖ 0x0A ‖ 0x01 ‖ publicKey)[:4] as a big-endian uint32
 * (C2SP signed-note "Ed25519 signatures").
 * @throws TransparencyError NOTE_KEY_INVALID for a bad name or a key that is not 32 bytes.
 */
export function noteKeyId(name: string, publicKey: Uint8Array): number {
  checkKeyName(name);
  if (publicKey.length !== 32)
    throw new TransparencyError('NOTE_KEY_INVALID', 'an Ed25519 public key is 32 bytes');
  return digest(
    'sha256',
    Buffer.from(`${name}\n`, 'utf8'),
    Uint8Array.of(NOTE_ED25519_TYPE),
    publicKey,
  ).readUInt32BE(0);
}

/** The raw 32-byte public key of an Ed25519 KeyObject (public or private). */
export function ed25519RawPublicKey(key: KeyObject): Buffer {
  const pub = key.type === 'private' ? createPublicKey(key) : key;
  const jwk = pub.export({ format: 'jwk' }) as { crv?: string; x?: string };
  if (jwk.crv !== 'Ed25519' || typeof jwk.x !== 'string')
    throw new TransparencyError('NOTE_KEY_INVALID', 'not an Ed25519 key');
  return Buffer.from(jwk.x, 'base64url');
}

/** A {@link NoteVerifier} for a name and a 32-byte Ed25519 public key. */
export function noteVerifier(name: string, publicKey: Uint8Array): NoteVerifier {
  return { name, keyId: noteKeyId(name, publicKey), publicKey: Buffer.from(publicKey) };
}

/** The vkey text `<name>+<hex key ID>+base64(0x01 ‖ publicKey)` (C2SP signed-note "Verifier keys"). */
export function encodeVerifierKey(v: NoteVerifier): string {
  const id = v.keyId.toString(16).padStart(8, '0');
  return `${v.name}+${id}+${Buffer.concat([Uint8Array.of(NOTE_ED25519_TYPE), v.publicKey]).toString('base64')}`;
}

/**
 * Parses a vkey. Only Ed25519 (type 0x01) keys are accepted, and the key ID must be the one the
 * name and key give.
 * @throws TransparencyError NOTE_KEY_INVALID.
 */
export function parseVerifierKey(vkey: string): NoteVerifier {
  // The name and the key ID hold no plus; the base64 may.
  const a = vkey.indexOf('+');
  const b = vkey.indexOf('+', a + 1);
  const [name, hexId, b64] = [vkey.slice(0, a), vkey.slice(a + 1, b), vkey.slice(b + 1)];
  if (a < 0 || b < 0 || !name || !/^[0-9a-f]{8}$/.test(hexId ?? '') || !B64.test(b64 ?? ''))
    throw new TransparencyError('NOTE_KEY_INVALID', 'a vkey is <name>+<8 hex>+<base64>');
  const material = Buffer.from(b64 as string, 'base64');
  if (material.length !== 33 || material[0] !== NOTE_ED25519_TYPE)
    throw new TransparencyError('NOTE_KEY_INVALID', 'the vkey is not an Ed25519 (type 0x01) key');
  const v = noteVerifier(name, material.subarray(1));
  if (v.keyId !== Number.parseInt(hexId as string, 16))
    throw new TransparencyError(
      'NOTE_KEY_INVALID',
      'the vkey key ID is not SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key)[:4]',
    );
  return v;
}

/**
 * Signs a note text with Ed25519 under `name` and returns the whole note: text, blank line,
 * one signature line (C2SP signed-note "Format").
 * @param text UTF-8 text ending in a newline, no control characters but newlines.
 * @param key the Ed25519 private key.
 * @throws TransparencyError NOTE_MALFORMED | NOTE_KEY_INVALID.
 */
export function signNote(text: string, name: string, key: KeyObject): string {
  if (!text.endsWith('\n')) throw new TransparencyError('NOTE_MALFORMED', 'a note text ends in a newline');
  checkNoteChars(text, 'the note text');
  if (key.type !== 'private')
    throw new TransparencyError('NOTE_KEY_INVALID', 'a note is signed with a private key');
  const id = Buffer.alloc(4);
  id.writeUInt32BE(noteKeyId(name, ed25519RawPublicKey(key)), 0);
  const sig = sign(null, Buffer.from(text, 'utf8'), key);
  return `${text}\n${SIG_PREFIX}${name} ${Buffer.concat([id, sig]).toString('base64')}\n`;
}

/**
 * Splits a note into its text and signature lines without checking any signature: the text is
 * everything up to the last blank line (C2SP signed-note "Format").
 * @throws TransparencyError NOTE_MALFORMED.
 */
export function openNote(note: string): OpenedNote {
  checkNoteChars(note, 'the note');
  if (!note.endsWith('\n')) throw new TransparencyError('NOTE_MALFORMED', 'a note ends in a newline');
  const split = note.lastIndexOf('\n\n');
  if (split < 0) throw new TransparencyError('NOTE_MALFORMED', 'no blank line before the signatures');
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2, -1).split('\n');
  if (lines.length > NOTE_MAX_SIGNATURES)
    throw new TransparencyError('NOTE_MALFORMED', `more than ${NOTE_MAX_SIGNATURES} signatures`);
  const signatures = lines.map((line): NoteSignature => {
    if (!line.startsWith(SIG_PREFIX))
      throw new TransparencyError(
        'NOTE_MALFORMED',
        'a signature line does not start with an em dash and a space',
      );
    const rest = line.slice(SIG_PREFIX.length);
    const sp = rest.lastIndexOf(' ');
    const name = rest.slice(0, sp);
    const b64 = rest.slice(sp + 1);
    if (sp <= 0 || /\s/u.test(name) || name.includes('+') || !B64.test(b64))
      throw new TransparencyError('NOTE_MALFORMED', 'a signature line is not "— <name> <base64>"');
    const raw = Buffer.from(b64, 'base64');
    if (raw.length < 5)
      throw new TransparencyError('NOTE_MALFORMED', 'a signature is shorter than its key ID');
    return { name, keyId: raw.readUInt32BE(0), signature: raw.subarray(4) };
  });
  return { text, signatures };
}

/** What {@link verifyNote} found: the text and the verifiers whose signatures verified. */
export interface VerifiedNote {
  text: string;
  verifiedBy: NoteVerifier[];
}

/**
 * Verifies a note against known keys (C2SP signed-note "Signatures"): signatures of unknown keys
 * (name and key ID not both matching) are ignored; a known key's signature must verify.
 * @returns the text and the keys that verified it, or null when no known key signed it or a known
 *   key's signature does not verify (the note is then to be rejected whole).
 * @throws TransparencyError NOTE_MALFORMED when the note does not parse.
 */
export function verifyNote(note: string, verifiers: readonly NoteVerifier[]): VerifiedNote | null {
  const { text, signatures } = openNote(note);
  const verifiedBy: NoteVerifier[] = [];
  for (const s of signatures) {
    const v = verifiers.find((k) => k.name === s.name && k.keyId === s.keyId);
    if (!v) continue;
    const pub = jwkPublicKey({ kty: 'OKP', crv: 'Ed25519', x: v.publicKey.toString('base64url') });
    if (!verifyWithKey(null, Buffer.from(text, 'utf8'), pub, s.signature)) return null;
    if (!verifiedBy.includes(v)) verifiedBy.push(v);
  }
  return verifiedBy.length > 0 ? { text, verifiedBy } : null;
}
