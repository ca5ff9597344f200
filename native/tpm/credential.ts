/**
 * TPM2_MakeCredential in software (TPM 2.0 Part 1 §24 "Credential Protection", Part 3 §12.6,
 * Part 1 Annex B.10.4 (RSA) / C.6.4 (ECC)). The enrollment side only needs the EK's public area
 * and the AK's Name; only the TPM that holds the EK private key (and has the AK loaded) can
 * recover the credential with TPM2_ActivateCredential.
 *
 *  - seed: RSA EK → random, RSA-OAEP(EK, nameAlg, label "IDENTITY\0");
 *          ECC EK → ECDH with an ephemeral key, seed = KDFe(nameAlg, Z, "IDENTITY", Qe.x, Qek.x)
 *  - symKey  = KDFa(nameAlg, seed, "STORAGE", AK Name, ∅, EK symmetric key bits)
 *  - encIdentity = AES-CFB(symKey, IV 0, TPM2B_DIGEST(credential))
 *  - hmacKey = KDFa(nameAlg, seed, "INTEGRITY", ∅, ∅, digest bits)
 *  - outerHMAC = HMAC(hmacKey, encIdentity ‖ AK Name)
 *  - credentialBlob (TPM2B_ID_OBJECT) = TPM2B(outerHMAC) ‖ encIdentity
 */
import {
  createCipheriv,
  createECDH,
  createHash,
  createHmac,
  constants as cryptoConstants,
  publicEncrypt,
  randomBytes,
} from 'node:crypto';
import { TpmError } from './errors.js';
import { curveInfo, NAME_HASHES, parsePublic, publicKeyOf } from './public.js';
import { TPM2_ALG_RSA, WireWriter } from './wire.js';

const u32 = (v: number) => new WireWriter().u32(v).done();
/** Labels are hashed with their terminating NUL (Part 1 §11.4.10). */
const label = (s: string) => Buffer.from(`${s}\0`, 'latin1');

/** The first `bits` bits of block(1) ‖ block(2) ‖ …, each block given its 32-bit big-endian counter. */
function counterKdf(bits: number, block: (counter: Buffer) => Buffer): Buffer {
  const out: Buffer[] = [];
  let have = 0;
  for (let i = 1; have * 8 < bits; i++) {
    const b = block(u32(i));
    out.push(b);
    have += b.length;
  }
  return Buffer.concat(out).subarray(0, bits / 8);
}

/** KDFa (Part 1 §11.4.10.2): SP800-108 counter-mode HMAC KDF. */
export function kdfa(
  hash: string,
  key: Buffer,
  use: string,
  contextU: Buffer,
  contextV: Buffer,
  bits: number,
): Buffer {
  return counterKdf(bits, (counter) =>
    createHmac(hash, key)
      .update(counter)
      .update(label(use))
      .update(contextU)
      .update(contextV)
      .update(u32(bits))
      .digest(),
  );
}

/** KDFe (Part 1 §11.4.10.3): SP800-56A concatenation KDF. */
export function kdfe(
  hash: string,
  z: Buffer,
  use: string,
  partyU: Buffer,
  partyV: Buffer,
  bits: number,
): Buffer {
  return counterKdf(bits, (counter) =>
    createHash(hash).update(counter).update(z).update(label(use)).update(partyU).update(partyV).digest(),
  );
}

export interface MadeCredential {
  /** TPM2B_ID_OBJECT wire bytes (with size prefix). */
  credentialBlob: Buffer;
  /** TPM2B_ENCRYPTED_SECRET wire bytes (with size prefix). */
  secret: Buffer;
}

/**
 * MakeCredential for `objectName` (the AK's Name) under the EK public area `ekPublic`
 * (TPMT_PUBLIC wire bytes). `credential` must be at most the EK nameAlg's digest size.
 */
export function makeCredential(ekPublic: Buffer, objectName: Buffer, credential: Buffer): MadeCredential {
  const ek = parsePublic(ekPublic);
  const h = NAME_HASHES[ek.nameAlg];
  if (!h) throw new TpmError('TPM_BAD_INPUT', 'EK nameAlg not supported');
  if (credential.length === 0 || credential.length > h.size) {
    throw new TpmError('TPM_BAD_INPUT', `credential must be 1..${h.size} bytes`);
  }
  if (ek.symmetric?.alg !== 0x0006 || ek.symmetric.mode !== 0x0043) {
    throw new TpmError('TPM_BAD_INPUT', 'EK is not a storage key with AES-CFB (not an EK template key)');
  }
  let seed: Buffer;
  let secretBytes: Buffer;
  if (ek.type === TPM2_ALG_RSA) {
    seed = randomBytes(h.size);
    secretBytes = publicEncrypt(
      {
        key: publicKeyOf(ek),
        padding: cryptoConstants.RSA_PKCS1_OAEP_PADDING,
        oaepHash: h.node,
        oaepLabel: label('IDENTITY'),
      },
      seed,
    );
  } else {
    const ecc = ek.ecc!;
    const c = curveInfo(ecc.curve);
    if (!c) throw new TpmError('TPM_BAD_INPUT', 'EK curve not supported');
    const pad = (b: Buffer) => Buffer.concat([Buffer.alloc(c.size - b.length), b]);
    const ekX = pad(ecc.x);
    const ekY = pad(ecc.y);
    const eph = createECDH(c.node);
    const ephPoint = eph.generateKeys(); // 04 ‖ x ‖ y
    const ephX = ephPoint.subarray(1, 1 + c.size);
    const ephY = ephPoint.subarray(1 + c.size);
    const z = eph.computeSecret(Buffer.concat([Buffer.from([4]), ekX, ekY]));
    seed = kdfe(h.node, z, 'IDENTITY', ephX, ekX, h.size * 8);
    secretBytes = new WireWriter().tpm2b(ephX).tpm2b(ephY).done();
  }
  const symKey = kdfa(h.node, seed, 'STORAGE', objectName, Buffer.alloc(0), ek.symmetric.keyBits);
  const cipher = createCipheriv(`aes-${ek.symmetric.keyBits}-cfb`, symKey, Buffer.alloc(16));
  const plain = new WireWriter().tpm2b(credential).done();
  const encIdentity = Buffer.concat([cipher.update(plain), cipher.final()]);
  const hmacKey = kdfa(h.node, seed, 'INTEGRITY', Buffer.alloc(0), Buffer.alloc(0), h.size * 8);
  const outerHmac = createHmac(h.node, hmacKey).update(encIdentity).update(objectName).digest();
  const idObject = Buffer.concat([new WireWriter().tpm2b(outerHmac).done(), encIdentity]);
  return {
    credentialBlob: new WireWriter().tpm2b(idObject).done(),
    secret: new WireWriter().tpm2b(secretBytes).done(),
  };
}
