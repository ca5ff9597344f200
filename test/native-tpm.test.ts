/**
 * Native TPM layer against a real swtpm (no mocks). Every quote is verified here independently,
 * with node:crypto only: TPMS_ATTEST fields (TPM 2.0 Part 2 §10.12.8), pcrDigest over the PCR
 * values in selection order, and the AK signature over the attest bytes.
 */
import { createHash, createPublicKey, type KeyObject, randomBytes, verify } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type AkAlgorithm, Tpm, type TpmAk, TpmError, type TpmQuote } from '../native/tpm/index.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';

// ---- Independent wire parsing (deliberately not reusing native/tpm/wire.ts) ----

class Reader {
  off = 0;
  constructor(readonly buf: Buffer) {}
  u8(): number {
    const v = this.buf.readUInt8(this.off);
    this.off += 1;
    return v;
  }
  u16(): number {
    const v = this.buf.readUInt16BE(this.off);
    this.off += 2;
    return v;
  }
  u32(): number {
    const v = this.buf.readUInt32BE(this.off);
    this.off += 4;
    return v;
  }
  bytes(n: number): Buffer {
    if (this.off + n > this.buf.length) throw new Error('truncated');
    const v = this.buf.subarray(this.off, this.off + n);
    this.off += n;
    return v;
  }
  b2(): Buffer {
    return this.bytes(this.u16());
  }
  get done(): boolean {
    return this.off === this.buf.length;
  }
}

interface PublicArea {
  type: number;
  nameAlg: number;
  attributes: number;
  authPolicy: Buffer;
  scheme: number;
  schemeHash: number;
  key: KeyObject;
}

const b64u = (b: Buffer) => b.toString('base64url');

/** TPMT_PUBLIC (Part 2 §12.2.4) for RSA and ECC signing keys → fields + a node KeyObject via JWK. */
function parsePublic(buf: Buffer): PublicArea {
  const r = new Reader(buf);
  const type = r.u16();
  const nameAlg = r.u16();
  const attributes = r.u32();
  const authPolicy = r.b2();
  const symAlg = r.u16();
  expect(symAlg).toBe(0x0010); // restricted signing keys have no symmetric algorithm
  const scheme = r.u16();
  const schemeHash = r.u16();
  let key: KeyObject;
  if (type === 0x0001) {
    const keyBits = r.u16();
    expect(keyBits).toBe(2048);
    const exponent = r.u32();
    const n = r.b2();
    expect(n.length).toBe(256);
    const e = Buffer.alloc(4);
    e.writeUInt32BE(exponent === 0 ? 65537 : exponent);
    key = createPublicKey({
      key: { kty: 'RSA', n: b64u(n), e: b64u(e.subarray(e.findIndex((x) => x !== 0))) },
      format: 'jwk',
    });
  } else if (type === 0x0023) {
    const curve = r.u16();
    expect(curve).toBe(0x0003);
    const kdf = r.u16();
    expect(kdf).toBe(0x0010);
    const x = r.b2();
    const y = r.b2();
    const pad = (b: Buffer) => Buffer.concat([Buffer.alloc(32 - b.length), b]);
    key = createPublicKey({
      key: { kty: 'EC', crv: 'P-256', x: b64u(pad(x)), y: b64u(pad(y)) },
      format: 'jwk',
    });
  } else {
    throw new Error(`unexpected key type ${type}`);
  }
  expect(r.done).toBe(true);
  return { type, nameAlg, attributes, authPolicy, scheme, schemeHash, key };
}

interface Attest {
  magic: number;
  type: number;
  qualifiedSigner: Buffer;
  extraData: Buffer;
  selection: { hash: number; bitmap: Buffer }[];
  pcrDigest: Buffer;
}

function parseAttest(buf: Buffer): Attest {
  const r = new Reader(buf);
  const magic = r.u32();
  const type = r.u16();
  const qualifiedSigner = r.b2();
  const extraData = r.b2();
  r.bytes(17); // clockInfo
  r.bytes(8); // firmwareVersion
  const count = r.u32();
  const selection: { hash: number; bitmap: Buffer }[] = [];
  for (let i = 0; i < count; i++) {
    const hash = r.u16();
    selection.push({ hash, bitmap: r.bytes(r.u8()) });
  }
  const pcrDigest = r.b2();
  expect(r.done).toBe(true);
  return { magic, type, qualifiedSigner, extraData, selection, pcrDigest };
}

const sha256 = (...b: Buffer[]) => createHash('sha256').update(Buffer.concat(b)).digest();

function bitmapPcrs(bitmap: Buffer): number[] {
  const out: number[] = [];
  bitmap.forEach((byte, i) => {
    for (let bit = 0; bit < 8; bit++) if (byte & (1 << bit)) out.push(i * 8 + bit);
  });
  return out;
}

/** TPMT_SIGNATURE (Part 2 §11.3.4) verified against the AK over `attest`. */
function verifyQuoteSignature(q: TpmQuote, attest = q.attest): boolean {
  const pub = parsePublic(q.akPublic);
  const r = new Reader(q.signature);
  const sigAlg = r.u16();
  const hash = r.u16();
  expect(hash).toBe(0x000b);
  if (sigAlg === 0x0014) {
    const sig = r.b2();
    expect(r.done).toBe(true);
    expect(sig.length).toBe(256);
    return verify('sha256', attest, { key: pub.key }, sig);
  }
  expect(sigAlg).toBe(0x0018);
  const rr = r.b2();
  const ss = r.b2();
  expect(r.done).toBe(true);
  // TPMs strip leading zeros of r and s: left-pad to the curve size.
  const pad = (b: Buffer) => Buffer.concat([Buffer.alloc(32 - b.length), b]);
  return verify(
    'sha256',
    attest,
    { key: pub.key, dsaEncoding: 'ieee-p1363' },
    Buffer.concat([pad(rr), pad(ss)]),
  );
}

/** Everything a verifier must check on a quote, done from the bytes alone. */
function checkQuote(q: TpmQuote, ak: TpmAk, nonce: Buffer, pcrs: number[]): void {
  expect(q.akPublic.equals(ak.publicArea)).toBe(true);
  const a = parseAttest(q.attest);
  expect(a.magic).toBe(0xff544347);
  expect(a.type).toBe(0x8018);
  expect(a.extraData.equals(nonce)).toBe(true);
  expect(a.extraData.length).toBe(nonce.length);
  // Qualified Name of a primary key: nameAlg || SHA-256(hierarchy handle || Name) (Part 1 §16).
  const hierarchy = Buffer.alloc(4);
  hierarchy.writeUInt32BE(0x4000000b);
  const qn = Buffer.concat([Buffer.from([0x00, 0x0b]), sha256(hierarchy, ak.name)]);
  expect(a.qualifiedSigner.toString('hex')).toBe(qn.toString('hex'));
  expect(ak.qualifiedName.equals(qn)).toBe(true);
  expect(a.selection).toHaveLength(1);
  expect(a.selection[0]!.hash).toBe(0x000b);
  expect(bitmapPcrs(a.selection[0]!.bitmap)).toEqual(pcrs);
  expect(q.pcrSelection).toEqual({ hash: 'sha256', pcrs });
  expect(Object.keys(q.pcrValues).map(Number)).toEqual(pcrs);
  for (const p of pcrs) expect(q.pcrValues[p]).toHaveLength(32);
  expect(a.pcrDigest.equals(sha256(...pcrs.map((p) => q.pcrValues[p]!)))).toBe(true);
  expect(verifyQuoteSignature(q)).toBe(true);
}

function expectTpmError(fn: () => unknown, code: string, text?: RegExp): TpmError {
  let caught: unknown;
  try {
    fn();
  } catch (e) {
    caught = e;
  }
  expect(caught).toBeInstanceOf(TpmError);
  const err = caught as TpmError;
  expect(err.code).toBe(code);
  if (text) expect(err.message).toMatch(text);
  return err;
}

// ---- Tests ----

describe('native TPM layer (swtpm)', () => {
  let sw: Awaited<ReturnType<typeof startSwtpm>>;
  let tpm: Tpm;

  beforeAll(async () => {
    sw = await startSwtpm();
    tpm = Tpm.open(sw.tcti);
  });

  afterAll(async () => {
    tpm?.close();
    await sw?.stop();
  });

  for (const alg of ['rsa2048', 'ecc-p256'] as AkAlgorithm[]) {
    it(`creates a restricted signing ${alg} AK and quotes PCRs 0,1,2,7 verifiably`, () => {
      const ak = tpm.createAk(alg);
      try {
        expect(ak.algorithm).toBe(alg);
        const pub = parsePublic(ak.publicArea);
        expect(pub.type).toBe(alg === 'rsa2048' ? 0x0001 : 0x0023);
        expect(pub.nameAlg).toBe(0x000b);
        expect(pub.attributes & 0x10000).toBe(0x10000); // restricted
        expect(pub.attributes & 0x40000).toBe(0x40000); // sign
        expect(pub.attributes & 0x2).toBe(0x2); // fixedTPM
        expect(pub.attributes & 0x10).toBe(0x10); // fixedParent
        expect(pub.attributes & 0x20).toBe(0x20); // sensitiveDataOrigin
        expect(pub.attributes & 0x40).toBe(0x40); // userWithAuth
        expect(pub.attributes & 0x20000).toBe(0); // decrypt NOT set
        expect(pub.scheme).toBe(alg === 'rsa2048' ? 0x0014 : 0x0018);
        expect(pub.schemeHash).toBe(0x000b);
        expect(pub.authPolicy).toHaveLength(0);
        expect(ak.name.toString('hex')).toBe(`000b${sha256(ak.publicArea).toString('hex')}`);

        const nonce = randomBytes(32);
        const q = tpm.quote(ak, nonce, [7, 0, 2, 1]);
        checkQuote(q, ak, nonce, [0, 1, 2, 7]);
        expect(q.pcrValues).toEqual(tpm.readPcrs([0, 1, 2, 7]));

        // The verification above can fail: a flipped attest byte or another nonce must not pass.
        const tampered = Buffer.from(q.attest);
        tampered[tampered.length - 1]! ^= 1;
        expect(verifyQuoteSignature(q, tampered)).toBe(false);
        expect(parseAttest(q.attest).extraData.equals(randomBytes(32))).toBe(false);
      } finally {
        ak.flush();
      }
    });
  }

  it('extends PCR 15 and quotes the new value', () => {
    const before = tpm.readPcrs([15])[15]!;
    const digest = sha256(Buffer.from('cmcp gateway measurement'));
    tpm.extendPcr(15, digest);
    const after = tpm.readPcrs([15])[15]!;
    expect(after.equals(sha256(before, digest))).toBe(true);

    for (const alg of ['ecc-p256', 'rsa2048'] as AkAlgorithm[]) {
      const ak = tpm.createAk(alg);
      try {
        const nonce = randomBytes(32);
        const q = tpm.quote(ak, nonce, [0, 1, 2, 7, 15]);
        checkQuote(q, ak, nonce, [0, 1, 2, 7, 15]);
        expect(q.pcrValues[15]!.equals(after)).toBe(true);
      } finally {
        ak.flush();
      }
    }
  });

  it('reads more than 8 PCRs (several TPM2_PCR_Read round trips)', () => {
    const all = Array.from({ length: 24 }, (_, i) => i);
    const v = tpm.readPcrs(all);
    expect(Object.keys(v).map(Number)).toEqual(all);
  });

  it('does not leak transient objects: 15 create/quote/flush cycles, then 15 quotes with one AK', () => {
    // swtpm holds 3 transient objects; a missing flush fails with TPM_RC_OBJECT_MEMORY by cycle 4.
    for (let i = 0; i < 15; i++) {
      const ak = tpm.createAk(i % 5 === 0 ? 'rsa2048' : 'ecc-p256');
      try {
        const nonce = randomBytes(32);
        checkQuote(tpm.quote(ak, nonce, [0, 7]), ak, nonce, [0, 7]);
      } finally {
        ak.flush();
      }
    }
    const ak = tpm.createAk('ecc-p256');
    try {
      for (let i = 0; i < 15; i++) {
        const nonce = randomBytes(32);
        checkQuote(tpm.quote(ak, nonce, [0, 1, 2, 7]), ak, nonce, [0, 1, 2, 7]);
      }
    } finally {
      ak.flush();
      ak.flush(); // idempotent
    }
    expectTpmError(() => tpm.quote(ak, randomBytes(32), [0]), 'TPM_CLOSED');
  });

  it('close() flushes AKs left loaded', () => {
    const other = Tpm.open(sw.tcti);
    for (let i = 0; i < 3; i++) other.createAk('ecc-p256'); // fills all 3 slots
    expectTpmError(() => other.createAk('ecc-p256'), 'TPM_RC', /0x00000902/);
    other.close();
    other.close(); // idempotent
    expectTpmError(() => other.readPcrs([0]), 'TPM_CLOSED');
    const ak = tpm.createAk('ecc-p256'); // would fail with OBJECT_MEMORY had close() not flushed
    ak.flush();
  });

  it('refuses bad input before talking to the TPM', () => {
    const ak = tpm.createAk('ecc-p256');
    try {
      expectTpmError(() => tpm.quote(ak, Buffer.alloc(33), [0]), 'TPM_BAD_INPUT', /32 bytes/);
      expectTpmError(() => tpm.quote(ak, Buffer.alloc(32), []), 'TPM_BAD_INPUT');
      expectTpmError(() => tpm.quote(ak, Buffer.alloc(32), [-1]), 'TPM_BAD_INPUT');
      expectTpmError(() => tpm.readPcrs([1.5]), 'TPM_BAD_INPUT');
      expectTpmError(() => tpm.extendPcr(16, Buffer.alloc(20)), 'TPM_BAD_INPUT');
      // A 32-byte nonce still works after the refusals: nothing was left half-done.
      const nonce = randomBytes(32);
      checkQuote(tpm.quote(ak, nonce, [0]), ak, nonce, [0]);
    } finally {
      ak.flush();
    }
  });

  it('decodes TPM return codes into readable errors', () => {
    // PCR 24 does not exist on a 24-PCR TPM: TPM_RC_VALUE on parameter 1.
    const e1 = expectTpmError(() => tpm.readPcrs([24]), 'TPM_RC', /tpm:parameter\(1\):value is out of range/);
    expect(e1.rc).toBe(0x1c4);
    expect(e1.message).toContain('0x000001c4');
    const ak = tpm.createAk('ecc-p256');
    try {
      expectTpmError(() => tpm.quote(ak, randomBytes(32), [0, 31]), 'TPM_RC', /value is out of range/);
    } finally {
      ak.flush();
    }
    // PCR 17 is only extendable from locality 4.
    const e2 = expectTpmError(() => tpm.extendPcr(17, Buffer.alloc(32)), 'TPM_RC', /bad locality/);
    expect(e2.rc).toBe(0x907);
  });

  it('fails TCTI initialisation with TCTI_INIT_FAILED when nothing listens', async () => {
    const probe = await startSwtpm();
    await probe.stop(); // its port is now free
    expectTpmError(
      () => Tpm.open(`swtpm:host=127.0.0.1,port=${probe.port}`),
      'TCTI_INIT_FAILED',
      /IO failure/,
    );
  });
});

describe('native TPM layer when swtpm dies', () => {
  it('throws TpmError (no crash, no hang) after the swtpm process is killed', async () => {
    const sw = await startSwtpm();
    const tpm = Tpm.open(sw.tcti);
    try {
      const ak = tpm.createAk('ecc-p256');
      const nonce = randomBytes(32);
      checkQuote(tpm.quote(ak, nonce, [0]), ak, nonce, [0]);

      process.kill(sw.pid, 'SIGKILL');
      await new Promise((r) => setTimeout(r, 100));

      const t0 = Date.now();
      expectTpmError(() => tpm.quote(ak, randomBytes(32), [0, 7]), 'TPM_UNREACHABLE', /IO failure|0x000a/);
      expectTpmError(() => tpm.readPcrs([0]), 'TPM_UNREACHABLE');
      expectTpmError(() => tpm.createAk('rsa2048'), 'TPM_UNREACHABLE');
      expect(tpm.unreachable).toBe(true);
      expect(Date.now() - t0).toBeLessThan(5000);
      ak.flush(); // no TPM to talk to: dropped silently
    } finally {
      tpm.close();
      await sw.stop();
    }
    expect(tpm.closed).toBe(true);
  });
});
