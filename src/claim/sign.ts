/**
 * Signing and hashing a claim without holding the event loop (issue 11 item 7): a claim of a
 * long session is ~1.5 MB of JCS, and Ed25519 over it (RFC 8032 §5.1.6: two SHA-512 passes over
 * the message) plus the SHA-256 of the stored text cost ~7–9 ms of CPU. WebCrypto's
 * `subtle.sign('Ed25519', …)` runs as a job on the libuv thread pool, so the main thread only
 * copies the bytes in; the SHA-256 runs on the loop in slices of {@link HASH_SLICE_BYTES}, one
 * per turn. The signature is the one
 * node:crypto `sign(null, …)` gives (Ed25519 is deterministic): the unchanged verifier
 * (@cmcp/verify/format/claim verifyClaimSignature) checks it.
 */
import { createHash, type KeyObject, webcrypto } from 'node:crypto';
import { setTimeout } from 'node:timers/promises';
import type { UnsignedClaim } from '@cmcp/verify/format/claim';
import { claimBytes, type SignedClaim, withSignature } from './build.js';

/** Lets I/O and timers run before going on (from an I/O callback, setImmediate would not). */
const turn = () => setTimeout(0);

/** The WebCrypto form of each gateway key, made once per key. */
const cryptoKeys = new WeakMap<KeyObject, Promise<webcrypto.CryptoKey>>();

/**
 * The WebCrypto form of an Ed25519 private key, imported once (pkcs8): importing the first key
 * loads WebCrypto's code, ~4 ms on the event loop, so the gateway does it at start-up.
 * @throws (rejects) when `key` is not an Ed25519 private key.
 */
export function signingKey(key: KeyObject): Promise<webcrypto.CryptoKey> {
  let k = cryptoKeys.get(key);
  if (!k) {
    const pkcs8 = key.export({ format: 'der', type: 'pkcs8' });
    k = webcrypto.subtle.importKey('pkcs8', pkcs8, { name: 'Ed25519' }, false, ['sign']);
    cryptoKeys.set(key, k);
  }
  return k;
}

/**
 * Signs `unsigned` (whose transcript's UTF-8 JCS is `transcript`, in the pieces of
 * ChainSummary.transcriptBytes) with the Ed25519 private `key` on the thread pool, and hashes
 * the signed claim's canonical text in slices on the loop (docs/spec/claims.md: signature over
 * UTF-8 JCS of the claim without `signature`; the stored text's SHA-256 is the next claim's
 * prev_claim_hash).
 * @throws (rejects) when `key` is not an Ed25519 private key.
 */
export async function signClaimOffLoop(
  unsigned: UnsignedClaim,
  transcript: readonly Buffer[],
  key: KeyObject,
): Promise<SignedClaim> {
  const cryptoKey = await signingKey(key);
  await turn(); // not in the turn that built the claim (a resolved key's await is no turn)
  const message = claimBytes(unsigned, transcript);
  await turn(); // each ~1.5 MB copy (building the text, handing it to the job) in its own turn of the loop
  const signature = Buffer.from(await webcrypto.subtle.sign({ name: 'Ed25519' }, cryptoKey, message));
  await turn(); // the signature's job resolves in a turn of its own; the ~1.5 MB text is built in the next
  const claim = withSignature(unsigned, signature);
  const canonical = claimBytes(claim, transcript);
  // SHA-256 on the loop in slices, one per turn: a digest job would first copy the whole text
  // (~1 ms for 1.5 MB, page faults of the copy included) in one turn.
  const hash = createHash('sha256');
  for (let at = 0; at < canonical.length; at += HASH_SLICE_BYTES) {
    await turn();
    hash.update(canonical.subarray(at, at + HASH_SLICE_BYTES));
  }
  return { claim, canonical, claimHash: hash.digest('hex') };
}

/** Bytes of the claim's text hashed per turn of the loop (~0.1–0.3 ms of SHA-256). */
const HASH_SLICE_BYTES = 256 * 1024;
