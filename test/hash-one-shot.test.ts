/**
 * The verifier's digests (packages/verify/src/crypto/hash.ts) go through node's one-shot
 * `crypto.hash` for a string or a single part: the same bytes as a Hash object fed the same
 * input — a string as its UTF-8 bytes (a lone surrogate as U+FFFD, as Buffer.from does).
 */
import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { digest, digestUtf8, sha256hex } from '../packages/verify/src/crypto/hash.js';

const STRINGS = [
  '',
  'a',
  '{}',
  'é',
  '𝄞',
  '\ud800',
  'x\udc00y',
  'ü'.repeat(40_000),
  randomBytes(999).toString('latin1'),
];

describe('one-shot digests', () => {
  it.each(['sha1', 'sha256', 'sha384', 'sha512'] as const)(
    '%s of a string equals a Hash object over its UTF-8',
    (alg) => {
      for (const s of STRINGS) {
        expect(digestUtf8(alg, s)).toEqual(createHash(alg).update(s, 'utf8').digest());
        expect(digestUtf8(alg, s)).toEqual(createHash(alg).update(Buffer.from(s, 'utf8')).digest());
      }
    },
  );

  it('of one part, of several parts and as hex equal a Hash object', () => {
    const a = randomBytes(100);
    const b = randomBytes(3).subarray(1); // a view with an offset
    expect(digest('sha256', a)).toEqual(createHash('sha256').update(a).digest());
    expect(digest('sha384', b)).toEqual(createHash('sha384').update(b).digest());
    expect(digest('sha256', a, b)).toEqual(createHash('sha256').update(a).update(b).digest());
    expect(digest('sha256')).toEqual(createHash('sha256').digest());
    expect(sha256hex(b)).toBe(createHash('sha256').update(b).digest('hex'));
  });
});
