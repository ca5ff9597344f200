/**
 * Signing and hashing a claim without holding the event loop: a claim of a
 * long session is ~1.5 MB of JCS, and Ed25519 over it (RFC 8032 §5.1.6: two SHA-512 passes over
 * the message) plus the SHA-256 of the stored text cost ~7–9 ms of CPU, and each copy of the
 * text into fresh memory ~1.2–2 ms of page faults. The message is signed on the signing thread
 * from a reused shared buffer, copied there a slice per turn (claim/sign-thread.ts); the stored
 * text is assembled and hashed on the loop a slice per turn. The signature is the one
 * node:crypto `sign(null, …)` gives (Ed25519 is deterministic): the unchanged verifier
 * (@cmcp/verify/format/claim verifyClaimSignature) checks it.
 */
import { createHash, type KeyObject } from 'node:crypto';
import { setTimeout } from 'node:timers/promises';
import type { UnsignedClaim } from '@cmcp/verify/formats';
import { claimPieces, type SignedClaim, withSignature } from './build.js';
import { COPY_SLICE_BYTES, signOnThread, startSignThread } from './sign-thread.js';

/** Lets I/O and timers run before going on (from an I/O callback, setImmediate would not). */
const turn = () => setTimeout(0);

/** Starts the signing thread now rather than at the first close (its start costs the loop a few ms). */
export const warmClaimSigning = startSignThread;

/**
 * Signs `unsigned` (whose transcript's UTF-8 JCS is `transcript`, in the pieces of
 * ChainSummary.transcriptBytes) with the Ed25519 private `key` on the signing thread, and
 * assembles and hashes the signed claim's canonical text in slices on the loop
 * (docs/spec/claims.md: signature over UTF-8 JCS of the claim without `signature`; the stored
 * text's SHA-256 is the next claim's prev_claim_hash).
 * @throws (rejects) Error when `key` is not an Ed25519 private key, or the signing thread failed.
 */
export async function signClaimOffLoop(
  unsigned: UnsignedClaim,
  transcript: readonly Buffer[],
  key: KeyObject,
): Promise<SignedClaim> {
  if (key.type !== 'private' || key.asymmetricKeyType !== 'ed25519')
    throw new Error('the gateway key is not an Ed25519 private key');
  await turn(); // not in the turn that built the claim
  const signature = await signOnThread(claimPieces(unsigned, transcript), key);
  await turn(); // the signature's message resolves in a turn of its own; the text is built in the next
  const claim = withSignature(unsigned, signature);
  const pieces = claimPieces(claim, transcript);
  // One allocation, its pages touched a slice per turn (as the copy and the hash go).
  const canonical = Buffer.allocUnsafeSlow(pieces.reduce((n, p) => n + p.length, 0));
  const hash = createHash('sha256');
  let at = 0;
  let sliceStart = 0;
  for (const piece of pieces) {
    piece.copy(canonical, at);
    at += piece.length;
    if (at - sliceStart >= COPY_SLICE_BYTES) {
      hash.update(canonical.subarray(sliceStart, at));
      sliceStart = at;
      await turn();
    }
  }
  hash.update(canonical.subarray(sliceStart, at));
  return { claim, canonical, claimHash: hash.digest('hex') };
}
