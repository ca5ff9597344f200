/**
 * The browser bundle's stand-in for node:crypto (packages/verify/src/crypto/browser/: hashes,
 * public keys, ECDSA / RSA PKCS#1 v1.5 / RSA-PSS / Ed25519 verification, X.509 surface) must
 * answer as node:crypto does. Run here in Node against node:crypto itself: real vendor and
 * reference certificates from test/vectors (AMD, Intel, Azure, the TPM reference
 * implementation), fresh keys of every type the verifier meets, genuine and tampered
 * signatures. The in-page runs are in verify-browser.test.ts.
 */
import * as node from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import * as shim from '../packages/verify/src/crypto/browser/node-crypto.js';
import { certsFromBytes } from '../packages/verify/src/x509.js';
import { hasVectors, VECTORS_DIR } from './harness/vectors.js';

const data = node.randomBytes(300);
const flip = (b: Uint8Array, i = 5) => {
  const c = Buffer.from(b);
  c[i % c.length] = (c[i % c.length] ?? 0) ^ 0x01;
  return c;
};

describe('hashes', () => {
  it.each(['sha1', 'sha256', 'sha384', 'sha512'])('%s equals node:crypto', (alg) => {
    for (const len of [0, 1, 55, 64, 1000]) {
      const b = node.randomBytes(len);
      expect(shim.createHash(alg).update(b).digest('hex')).toBe(node.createHash(alg).update(b).digest('hex'));
      expect(Buffer.from(shim.createHash(alg).update(b).digest())).toEqual(
        node.createHash(alg).update(b).digest(),
      );
      expect(shim.hash(alg, b)).toBe(node.hash(alg, b));
      expect(Buffer.from(shim.hash(alg, b, 'buffer'))).toEqual(node.hash(alg, b, 'buffer'));
      const text = `é𝄞${b.toString('latin1')}`;
      expect(shim.hash(alg, text, 'base64')).toBe(node.hash(alg, text, 'base64'));
    }
  });
});

type Case = { name: string; pair: node.KeyPairKeyObjectResult; hash: string | null };
const cases: Case[] = [
  { name: 'EC P-256', pair: node.generateKeyPairSync('ec', { namedCurve: 'P-256' }), hash: 'sha256' },
  { name: 'EC P-384', pair: node.generateKeyPairSync('ec', { namedCurve: 'P-384' }), hash: 'sha384' },
  { name: 'EC P-521', pair: node.generateKeyPairSync('ec', { namedCurve: 'P-521' }), hash: 'sha512' },
  { name: 'RSA 2048', pair: node.generateKeyPairSync('rsa', { modulusLength: 2048 }), hash: 'sha256' },
  {
    name: 'RSA 3072 e=3',
    pair: node.generateKeyPairSync('rsa', { modulusLength: 3072, publicExponent: 3 }),
    hash: 'sha384',
  },
  { name: 'Ed25519', pair: node.generateKeyPairSync('ed25519'), hash: null },
];

describe('public keys and signatures', () => {
  it.each(cases)('$name: JWK import, SPKI export and key details equal node:crypto', ({ pair }) => {
    const jwk = pair.publicKey.export({ format: 'jwk' }) as Record<string, unknown>;
    const k = shim.createPublicKey({ key: jwk, format: 'jwk' });
    expect(k.asymmetricKeyType).toBe(pair.publicKey.asymmetricKeyType);
    const want = pair.publicKey.asymmetricKeyDetails ?? {};
    const got = k.asymmetricKeyDetails;
    if (want.namedCurve) expect(got.namedCurve).toBe(want.namedCurve);
    if (want.modulusLength) expect(got.modulusLength).toBe(want.modulusLength);
    const spki = pair.publicKey.export({ format: 'der', type: 'spki' });
    expect(Buffer.from(k.export({ format: 'der', type: 'spki' }) as Uint8Array)).toEqual(spki);
    expect(k.export({ format: 'jwk' })).toEqual(jwk);
    const fromSpki = shim.createPublicKey({ key: spki, format: 'der', type: 'spki' });
    expect(fromSpki.export({ format: 'jwk' })).toEqual(jwk);
  });

  it.each(cases)(
    '$name: genuine, tampered and misaddressed signatures verify as in node:crypto',
    ({ pair, hash }) => {
      const key = shim.createPublicKey({ key: pair.publicKey.export({ format: 'jwk' }), format: 'jwk' });
      const type = pair.publicKey.asymmetricKeyType;
      const variants: { opts: Record<string, unknown> }[] =
        type === 'ec'
          ? [{ opts: {} }, { opts: { dsaEncoding: 'ieee-p1363' } }]
          : type === 'rsa'
            ? [
                { opts: { padding: node.constants.RSA_PKCS1_PADDING } },
                { opts: { padding: node.constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 } },
                { opts: { padding: node.constants.RSA_PKCS1_PSS_PADDING, saltLength: 20 } },
              ]
            : [{ opts: {} }];
      for (const { opts } of variants) {
        const sig = node.sign(hash, data, { key: pair.privateKey, ...opts });
        const both = (d: Uint8Array, s: Uint8Array, h = hash) => {
          const want = node.verify(h, d, { key: pair.publicKey, ...opts }, s);
          const got = shim.verify(h, d, { key, ...opts } as never, s);
          expect({ opts, h, got }).toEqual({ opts, h, got: want });
          return got;
        };
        expect(both(data, sig)).toBe(true);
        expect(both(flip(data), sig)).toBe(false);
        expect(both(data, flip(sig))).toBe(false);
        expect(both(data, flip(sig, sig.length - 1))).toBe(false);
        // RFC 8017 §8.1.2/§8.2.2 step 1: an RSA signature of other than k octets is invalid. A
        // genuine one that starts with 0x00 (1 in 256) is, cut by its first byte, the same
        // integer, and OpenSSL takes it: node is not the reference for that case.
        if (type === 'rsa' && sig[0] === 0)
          expect(shim.verify(hash, data, { key, ...opts } as never, sig.subarray(1))).toBe(false);
        else expect(both(data, sig.subarray(1))).toBe(false);
        if (hash) expect(both(data, sig, hash === 'sha256' ? 'sha384' : 'sha256')).toBe(false);
        if ('saltLength' in opts) {
          const other = { ...opts, saltLength: (opts.saltLength as number) + 1 };
          expect(shim.verify(hash, data, { key, ...other } as never, sig)).toBe(
            node.verify(hash, data, { key: pair.publicKey, ...other }, sig),
          );
        }
      }
    },
  );

  it('RSA-PSS with saltLength 0 is refused with a reason (node-forge cannot check it), not answered wrongly', () => {
    const pair = cases.find((c) => c.name === 'RSA 2048')?.pair as node.KeyPairKeyObjectResult;
    const key = shim.createPublicKey({ key: pair.publicKey.export({ format: 'jwk' }), format: 'jwk' });
    const opts = { padding: node.constants.RSA_PKCS1_PSS_PADDING, saltLength: 0 };
    const sig = node.sign('sha256', data, { key: pair.privateKey, ...opts });
    expect(node.verify('sha256', data, { key: pair.publicKey, ...opts }, sig)).toBe(true);
    expect(() => shim.verify('sha256', data, { key, ...opts }, sig)).toThrow(/saltLength 0 is not supported/);
  });

  it('an RSA signature s + n (the same value mod n, not below n) is refused as OpenSSL refuses it', () => {
    // 2049-bit modulus: n's top byte is 0x01, so s + n still fits in the signature's 257 bytes.
    const pair = node.generateKeyPairSync('rsa', { modulusLength: 2049 });
    const jwk = pair.publicKey.export({ format: 'jwk' });
    const key = shim.createPublicKey({ key: jwk, format: 'jwk' });
    const n = Buffer.from(jwk.n as string, 'base64url');
    const sig = node.sign('sha256', data, pair.privateKey);
    expect(sig.length).toBe(n.length);
    const big = (b: Uint8Array) => BigInt(`0x${Buffer.from(b).toString('hex')}`);
    const sPlusN = Buffer.from((big(sig) + big(n)).toString(16).padStart(n.length * 2, '0'), 'hex');
    expect(sPlusN.length).toBe(n.length);
    expect(shim.verify('sha256', data, key, sig)).toBe(true);
    expect(node.verify('sha256', data, pair.publicKey, sPlusN)).toBe(false);
    expect(shim.verify('sha256', data, key, sPlusN)).toBe(false);
  });

  it('signing is refused', () => {
    expect(() => shim.sign()).toThrow(/not available in the browser/);
  });
});

/** Every certificate in the vectors (PEM or DER files). */
function vectorCerts(): { file: string; der: Buffer }[] {
  const out: { file: string; der: Buffer }[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (/\.(pem|der|testcer)$/.test(e.name) && !/crl/.test(e.name) && !/akpub/.test(e.name)) {
        for (const c of certsFromBytes(readFileSync(p)))
          out.push({ file: p.slice(VECTORS_DIR.length + 1), der: c.der });
      }
    }
  };
  walk(VECTORS_DIR);
  return out;
}

describe.skipIf(!hasVectors())('X.509 surface on the real certificates of test/vectors', () => {
  const certs = vectorCerts();
  const nodeCerts = certs.map((c) => new node.X509Certificate(c.der));
  const shimCerts = certs.map((c) => new shim.X509Certificate(c.der));

  it('subject, validity, CA flag, serial number and public key equal node:crypto', () => {
    expect(certs.length).toBeGreaterThan(20);
    certs.forEach((c, i) => {
      const n = nodeCerts[i] as node.X509Certificate;
      const s = shimCerts[i] as shim.X509Certificate;
      expect({ file: c.file, subject: s.subject }).toEqual({ file: c.file, subject: n.subject });
      expect(s.issuer).toBe(n.issuer);
      expect(new Date(s.validFrom).getTime()).toBe(new Date(n.validFrom).getTime());
      expect(new Date(s.validTo).getTime()).toBe(new Date(n.validTo).getTime());
      expect(s.ca).toBe(n.ca);
      expect(s.serialNumber).toBe(n.serialNumber);
      expect(Buffer.from(s.publicKey.export({ format: 'der', type: 'spki' }) as Uint8Array)).toEqual(
        n.publicKey.export({ format: 'der', type: 'spki' }),
      );
    });
  });

  it('checkIssued and verify agree with node:crypto on every ordered pair', () => {
    const safe = (f: () => boolean) => {
      try {
        return f();
      } catch {
        return false;
      }
    };
    let links = 0;
    certs.forEach((_, i) => {
      certs.forEach((__, j) => {
        const [nc, ni, sc, si] = [nodeCerts[i], nodeCerts[j], shimCerts[i], shimCerts[j]] as [
          node.X509Certificate,
          node.X509Certificate,
          shim.X509Certificate,
          shim.X509Certificate,
        ];
        const want = safe(() => nc.checkIssued(ni));
        expect([certs[i]?.file, certs[j]?.file, safe(() => sc.checkIssued(si))]).toEqual([
          certs[i]?.file,
          certs[j]?.file,
          want,
        ]);
        const verified = safe(() => nc.verify(ni.publicKey));
        expect([certs[i]?.file, certs[j]?.file, safe(() => sc.verify(si.publicKey))]).toEqual([
          certs[i]?.file,
          certs[j]?.file,
          verified,
        ]);
        if (verified) links++;
      });
    });
    expect(links).toBeGreaterThan(10);
  });
});
