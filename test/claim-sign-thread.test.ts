/**
 * Claims of long sessions are signed on the signing thread from one reused shared buffer
 * (src/claim/sign-thread.ts, issue 11 item 7): the signature is the one node:crypto gives over
 * the joined text (Ed25519 is deterministic, RFC 8032 §5.1.6), whatever the pieces, their
 * lengths across the copy's slices, and the order in which concurrent signings are asked for; a
 * key that is not an Ed25519 private key is refused before anything is copied.
 */
import { generateKeyPairSync, randomBytes, sign, verify } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { claimBytes } from '../src/claim/build.js';
import { signClaimOffLoop } from '../src/claim/sign.js';
import { COPY_SLICE_BYTES, signOnThread, terminateSignThread } from '../src/claim/sign-thread.js';

const { privateKey, publicKey } = generateKeyPairSync('ed25519');

/** Pieces of `total` random bytes, cut at uneven places (some pieces empty, some past a slice). */
function pieces(total: number): Buffer[] {
  const out: Buffer[] = [];
  let left = total;
  for (let i = 0; left > 0; i++) {
    const n = Math.min(left, [0, 7, COPY_SLICE_BYTES - 3, 1, COPY_SLICE_BYTES + 11, 4096][i % 6] ?? 1);
    out.push(randomBytes(n));
    left -= n;
  }
  return out;
}

/** Ref'd message ports of this process: a ref'd worker thread is one. */
const refdPorts = () => process.getActiveResourcesInfo().filter((r) => r === 'MessagePort').length;

describe('the claim signing thread', () => {
  it('keeps no process alive while idle, and is held while a signature is owed', async () => {
    const idle = refdPorts();
    const p = pieces(8_000_000);
    const signing = signOnThread(p, privateKey);
    let held = false;
    while (!held) {
      held = refdPorts() > idle;
      if (!held) await new Promise((r) => setImmediate(r));
    }
    expect((await signing).equals(sign(null, Buffer.concat(p), privateKey))).toBe(true);
    expect(refdPorts()).toBe(idle);
  });

  it('a thread that dies while a signature is owed: the signature is asked again of a new one', async () => {
    const idle = refdPorts();
    const p = pieces(8_000_000);
    const signing = signOnThread(p, privateKey);
    while (refdPorts() === idle) await new Promise((r) => setImmediate(r)); // posted: owed now
    await terminateSignThread();
    expect((await signing).equals(sign(null, Buffer.concat(p), privateKey))).toBe(true);
  });

  it('signs the joined pieces as node:crypto does, across slice boundaries, growing its buffer', async () => {
    for (const total of [1, 1000, COPY_SLICE_BYTES, 3 * COPY_SLICE_BYTES + 5, 1_600_000]) {
      const p = pieces(total);
      const sig = await signOnThread(p, privateKey);
      expect(sig.equals(sign(null, Buffer.concat(p), privateKey))).toBe(true);
    }
  });

  it('keeps concurrent signings apart: each gets the signature of its own text', async () => {
    const texts = [2_000_000, 10, 700_000, COPY_SLICE_BYTES * 2].map(pieces);
    const sigs = await Promise.all(texts.map((p) => signOnThread(p, privateKey)));
    sigs.forEach((s, i) => {
      expect(verify(null, Buffer.concat(texts[i] ?? []), publicKey, s)).toBe(true);
    });
  });

  it('a signed claim: the signature verifies over the unsigned text, the stored text is the signed claim', async () => {
    const transcript = [Buffer.from('['), Buffer.from('{"sequence_number":1}'), Buffer.from(']')];
    const unsigned = { claim_version: 1, session_id: 's', transcript: [] } as never;
    const signed = await signClaimOffLoop(unsigned, transcript, privateKey);
    expect(
      verify(
        null,
        claimBytes(unsigned, transcript),
        publicKey,
        Buffer.from(signed.claim.signature, 'base64url'),
      ),
    ).toBe(true);
    expect(signed.canonical.equals(claimBytes(signed.claim, transcript))).toBe(true);
  });

  it('refuses a key that is not an Ed25519 private key', async () => {
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    await expect(signClaimOffLoop({ transcript: [] } as never, [Buffer.from('[]')], rsa)).rejects.toThrow(
      /Ed25519/,
    );
    await expect(
      signClaimOffLoop({ transcript: [] } as never, [Buffer.from('[]')], publicKey),
    ).rejects.toThrow(/Ed25519/);
  });
});
