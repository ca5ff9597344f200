/**
 * A claim's stored text as the routes send it: its length and its pieces (store/port.ts
 * ClaimTextPieces; a long one is stored in parts, store/sqlite/claim-text.ts).
 */
import type { ClaimTextPieces } from '../store/port.js';

/** A claim's stored text as a route sends it (store/port.ts). */
export type { ClaimTextPieces };

/** A claim's text in one Buffer (a copy when it came in pieces): for callers that need the bytes whole. */
export function claimTextBytes(text: Buffer | ClaimTextPieces): Buffer {
  return Buffer.isBuffer(text) ? text : Buffer.concat([...text.pieces]);
}
