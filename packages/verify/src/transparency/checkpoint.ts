/**
 * Checkpoints (C2SP tlog-checkpoint, https://c2sp.org/tlog-checkpoint) of a chain's tree, signed
 * as C2SP signed notes by the gateway key (docs/spec/transparency.md#checkpoints). Note text:
 *
 *   cmcp.dev/session/<session_id>      origin (the gateway chain: cmcp.dev/gateway/<root hex>)
 *   <tree size, decimal>
 *   <root hash, base64, 32 bytes>
 *   time <RFC 3339 UTC>                one extension line: when the gateway signed it
 *
 * The key name of the signature is the origin (the spec's SHOULD), so the key ID is
 * SHA-256(origin ‖ 0x0A ‖ 0x01 ‖ gateway public key)[:4].
 */
import type { KeyObject } from 'node:crypto';
import { clip } from '../errors/index.js';
import type { Ed25519Jwk } from '../format/binding.js';
import { TransparencyError } from './errors.js';
import { type NoteVerifier, noteVerifier, openNote, signNote, verifyNote } from './note.js';

/** Origin prefix of a session chain's checkpoints: `cmcp.dev/session/<session_id>`. */
export const SESSION_ORIGIN_PREFIX = 'cmcp.dev/session/';
/** Origin prefix of the gateway chain's checkpoints: `cmcp.dev/gateway/<chain root hex>`. */
export const GATEWAY_ORIGIN_PREFIX = 'cmcp.dev/gateway/';
/** The extension line's keyword: `time <RFC 3339 UTC>`. */
export const CHECKPOINT_TIME_KEYWORD = 'time';

/** A checkpoint's note text, parsed (C2SP tlog-checkpoint "Note text"). */
export interface Checkpoint {
  origin: string;
  /** Leaves in the tree, a safe integer. */
  size: number;
  /** RFC 9162 root hash, 32 bytes. */
  root: Buffer;
  /** Extension lines, in order (non-empty, opaque to tlog tools). */
  extensions: string[];
}

/** A cmcp checkpoint: one chain's tree head with the time the gateway signed it. */
export interface ChainCheckpoint {
  /** The session id, or `gateway` for the gateway chain. */
  chain_id: string;
  /** The gateway chain's root entry hash (hex); only for chain_id `gateway`. */
  gateway_chain_root?: string;
  size: number;
  root: Buffer;
  /** RFC 3339 UTC. */
  time: string;
}

const IDENT = /^[A-Za-z0-9._:-]{1,128}$/;
const HEX64 = /^[0-9a-f]{64}$/;
const RFC3339_UTC = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;

/**
 * The origin (and key name) of a session chain's checkpoints: `cmcp.dev/session/<session_id>`.
 * @throws TransparencyError CHECKPOINT_MALFORMED when the id could not be one line of an origin.
 */
export function sessionOrigin(sessionId: string): string {
  if (!IDENT.test(sessionId) || sessionId === 'gateway')
    throw new TransparencyError(
      'CHECKPOINT_MALFORMED',
      `session id ${clip(sessionId)} cannot name an origin`,
    );
  return `${SESSION_ORIGIN_PREFIX}${sessionId}`;
}

/** The origin of the gateway chain's checkpoints: `cmcp.dev/gateway/<root entry hash hex>`. */
export function gatewayChainOrigin(chainRoot: string): string {
  if (!HEX64.test(chainRoot))
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'a gateway chain root is 64 lowercase hex');
  return `${GATEWAY_ORIGIN_PREFIX}${chainRoot}`;
}

/** The chain an origin names, or null when it is no cmcp origin. */
export function parseOrigin(origin: string): { chain_id: string; gateway_chain_root?: string } | null {
  if (origin.startsWith(SESSION_ORIGIN_PREFIX)) {
    const id = origin.slice(SESSION_ORIGIN_PREFIX.length);
    return IDENT.test(id) && id !== 'gateway' ? { chain_id: id } : null;
  }
  if (origin.startsWith(GATEWAY_ORIGIN_PREFIX)) {
    const root = origin.slice(GATEWAY_ORIGIN_PREFIX.length);
    return HEX64.test(root) ? { chain_id: 'gateway', gateway_chain_root: root } : null;
  }
  return null;
}

/** The origin of a chain checkpoint. */
export function chainOrigin(cp: Pick<ChainCheckpoint, 'chain_id' | 'gateway_chain_root'>): string {
  return cp.chain_id === 'gateway'
    ? gatewayChainOrigin(cp.gateway_chain_root ?? '')
    : sessionOrigin(cp.chain_id);
}

/**
 * The note text of a checkpoint (C2SP tlog-checkpoint): origin, size, base64 root, extension
 * lines, each ending in a newline.
 * @throws TransparencyError CHECKPOINT_MALFORMED for an empty or multi-line origin or extension,
 *   a size that is not a safe whole number, or a root that is not 32 bytes.
 */
export function encodeCheckpoint(cp: Checkpoint): string {
  const oneLine = (s: string) => s.length > 0 && !s.includes('\n');
  if (!oneLine(cp.origin) || !cp.extensions.every(oneLine))
    throw new TransparencyError(
      'CHECKPOINT_MALFORMED',
      'origin and extension lines are non-empty single lines',
    );
  if (!Number.isSafeInteger(cp.size) || cp.size < 0)
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'a checkpoint size is a whole number ≥ 0');
  if (cp.root.length !== 32)
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'a checkpoint root is 32 bytes');
  return [cp.origin, String(cp.size), cp.root.toString('base64'), ...cp.extensions]
    .map((l) => `${l}\n`)
    .join('');
}

/**
 * Parses a checkpoint's note text (C2SP tlog-checkpoint "Note text"): at least three non-empty
 * lines; the size decimal without leading zeros; the root base64 of 32 bytes (canonical
 * encoding only, so one root has one text).
 * @throws TransparencyError CHECKPOINT_MALFORMED.
 */
export function parseCheckpoint(text: string): Checkpoint {
  if (!text.endsWith('\n'))
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'a checkpoint text ends in a newline');
  const lines = text.slice(0, -1).split('\n');
  const [origin, size, root, ...extensions] = lines;
  if (lines.length < 3 || lines.some((l) => l.length === 0))
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'a checkpoint is at least three non-empty lines');
  if (!/^(0|[1-9][0-9]*)$/.test(size as string) || !Number.isSafeInteger(Number(size)))
    throw new TransparencyError(
      'CHECKPOINT_MALFORMED',
      'the size line is not a decimal without leading zeros',
    );
  const rootBytes = Buffer.from(root as string, 'base64');
  if (rootBytes.length !== 32 || rootBytes.toString('base64') !== root)
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'the root line is not the base64 of 32 bytes');
  return { origin: origin as string, size: Number(size), root: rootBytes, extensions };
}

/**
 * Signs a chain's checkpoint with the gateway key and returns the signed note (C2SP signed-note,
 * Ed25519, key name = origin).
 * @param key the gateway's Ed25519 private key (docs/spec/binding.md#gateway-key).
 * @throws TransparencyError CHECKPOINT_MALFORMED | NOTE_KEY_INVALID.
 */
export function signChainCheckpoint(cp: ChainCheckpoint, key: KeyObject): string {
  if (!RFC3339_UTC.test(cp.time))
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'a checkpoint time is RFC 3339 UTC');
  const origin = chainOrigin(cp);
  const text = encodeCheckpoint({
    origin,
    size: cp.size,
    root: cp.root,
    extensions: [`${CHECKPOINT_TIME_KEYWORD} ${cp.time}`],
  });
  return signNote(text, origin, key);
}

/** The note verifier of a gateway key for one chain's checkpoints (key name = the origin). */
export function checkpointVerifier(origin: string, jwk: Ed25519Jwk): NoteVerifier {
  return noteVerifier(origin, Buffer.from(jwk.x, 'base64url'));
}

/**
 * Reads a signed checkpoint note as a cmcp chain checkpoint, without checking its signature
 * (the note's text must still parse as one).
 * @throws TransparencyError NOTE_MALFORMED | CHECKPOINT_MALFORMED (not a cmcp origin, no time line).
 */
export function readChainCheckpoint(note: string): ChainCheckpoint {
  const cp = parseCheckpoint(openNote(note).text);
  const chain = parseOrigin(cp.origin);
  if (!chain)
    throw new TransparencyError('CHECKPOINT_MALFORMED', `origin ${clip(cp.origin)} names no cmcp chain`);
  const time = cp.extensions
    .find((l) => l.startsWith(`${CHECKPOINT_TIME_KEYWORD} `))
    ?.slice(CHECKPOINT_TIME_KEYWORD.length + 1);
  if (!time || !RFC3339_UTC.test(time))
    throw new TransparencyError('CHECKPOINT_MALFORMED', 'no "time <RFC 3339 UTC>" extension line');
  return { ...chain, size: cp.size, root: cp.root, time };
}

/**
 * Verifies a signed chain checkpoint under any of the given gateway keys (a session's checkpoints
 * may be signed by several replicas) and reads it.
 * @returns the checkpoint and the key that signed it, or null when none of the keys signed it
 *   (or one's signature does not verify).
 * @throws TransparencyError NOTE_MALFORMED | CHECKPOINT_MALFORMED.
 */
export function verifyChainCheckpoint(
  note: string,
  keys: readonly Ed25519Jwk[],
): { checkpoint: ChainCheckpoint; key: Ed25519Jwk } | null {
  const checkpoint = readChainCheckpoint(note);
  const origin = chainOrigin(checkpoint);
  const verifiers = keys.map((k) => checkpointVerifier(origin, k));
  const ok = verifyNote(note, verifiers);
  if (!ok) return null;
  const key = keys[verifiers.indexOf(ok.verifiedBy[0] as NoteVerifier)] as Ed25519Jwk;
  return { checkpoint, key };
}
