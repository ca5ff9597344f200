/**
 * TPM AK enrollment by credential activation (docs/spec/tpm.md#ek-and-ak-enrollment), `cmcp tpm enroll`:
 *
 *  1. TPM side: read the EK certificate from its NV index and recreate the EK from the TCG
 *     default template; the certificate's key must be the template EK's key.
 *  2. Enrollment side: the EK certificate must chain to a pinned manufacturer root.
 *  3. TPM side: create the AK as a child of the EK (restricted, sign-only, fixedTPM,
 *     fixedParent) and load it.
 *  4. Enrollment side: check the AK's attributes, then MakeCredential (in software, from the
 *     EK public area alone) for the AK's Name with a random secret.
 *  5. TPM side: ActivateCredential. Only the TPM holding this EK, with this exact AK loaded,
 *     recovers the secret.
 *  6. Enrollment side: on a match, issue the AK certificate from the operator's AK CA.
 *  7. TPM side: persist the AK (EvictControl) at the configured handle, and write the
 *     enrollment record the gateway reads at start-up.
 */
import { randomBytes, timingSafeEqual, X509Certificate } from 'node:crypto';
import { readFileSync, renameSync, writeFileSync } from 'node:fs';
import { b64u } from '@cmcp/verify/formats';
import { z } from 'zod';
import {
  type AkAlgorithm,
  akAttributeProblem,
  EK_PROFILES,
  type EkAlgorithm,
  ekTemplate,
  makeCredential,
  nameOfPublic,
  parsePublic,
  publicKeyOf,
  spkiDer,
  Tpm,
  type TpmAk,
  type TpmEk,
  TpmError,
} from '../../native/tpm/index.js';
import { CmcpError } from '../errors/index.js';
import { type AkCa, chainToRoots, issueAkCertificate, OID_TCG_KP_EK_CERTIFICATE, trimDer } from './x509.js';

/** Why enrollment refused (code TPM_ENROLLMENT_REFUSED); `reason` is a stable upper-snake word. */
export class EnrollmentError extends CmcpError {
  declare readonly code: 'TPM_ENROLLMENT_REFUSED';
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super('TPM_ENROLLMENT_REFUSED', message);
    this.name = 'EnrollmentError';
  }
}

const b64url = z.string().regex(/^[A-Za-z0-9_-]*$/);

/** The enrollment record `cmcp tpm enroll` writes and the gateway reads at start-up. */
export const enrollmentRecordSchema = z.object({
  record_version: z.literal(1),
  enrolled_at: z.string(),
  /** Persistent handle of the AK. */
  ak_handle: z.number().int().min(0x81000000).max(0x817fffff),
  ak_algorithm: z.enum(['rsa2048', 'ecc-p256']),
  /** TPMT_PUBLIC of the AK. */
  ak_public: b64url,
  /** TPM Name of the AK (hex). */
  ak_name: z.string(),
  /** QN of the AK's parent (the EK): nameAlg ‖ H(TPM_RH_ENDORSEMENT ‖ EK Name). */
  ak_parent_qualified_name: b64url,
  ek: z.object({
    algorithm: z.enum(['rsa2048', 'ecc-p256', 'ecc-p384']),
    public: b64url,
    certificate: b64url,
    /** The chain the EK certificate was checked against, leaf first (root last). */
    chain: z.array(b64url),
  }),
  /** AK certificate chain, leaf first, DER base64url: what every claim carries. */
  ak_cert_chain: z.array(b64url).min(1),
});
export type EnrollmentRecord = z.infer<typeof enrollmentRecordSchema>;

/** Reads and validates an enrollment record. @throws EnrollmentError AK_ENROLLMENT_INVALID. */
export function readEnrollmentRecord(path: string): EnrollmentRecord {
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch (e) {
    throw new EnrollmentError(
      'AK_ENROLLMENT_INVALID',
      `cannot read the enrollment record ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message.slice(0, 80)}`,
    );
  }
  const r = enrollmentRecordSchema.safeParse(raw);
  if (!r.success) {
    const i = r.error.issues[0];
    throw new EnrollmentError(
      'AK_ENROLLMENT_INVALID',
      `enrollment record ${path} is malformed: ${i ? `${i.path.join('.')}: ${i.message}` : 'invalid'}`,
    );
  }
  return r.data;
}

export interface EnrollOptions {
  tcti: string;
  ekAlgorithm: EkAlgorithm;
  akAlgorithm: AkAlgorithm;
  /** Persistent handle for the AK (owner range 0x81000000–0x817FFFFF). */
  akHandle: number;
  /** Pinned EK manufacturer roots and the intermediates between them and EK certificates (DER). */
  ekRoots: Buffer[];
  ekIntermediates: Buffer[];
  akCa: AkCa;
  akCertDays: number;
  /** Where to write the enrollment record (JSON). */
  recordPath: string;
  /** Replace an object already persisted at akHandle (re-enrollment). */
  replace?: boolean;
  now?: Date;
  /**
   * Test seam: transforms the AK public area the TPM side hands to the enrollment side, to show
   * that the enrollment side refuses a key that is not a restricted, fixed signing key.
   */
  tamperAkPublic?: (publicArea: Buffer) => Buffer;
}

/** Compares the non-unique fields of a public area with the template (the TPM must not pass another key as its EK). */
function sameTemplate(publicArea: Buffer, alg: EkAlgorithm): boolean {
  const a = parsePublic(publicArea);
  const t = parsePublic(ekTemplate(alg));
  return (
    a.type === t.type &&
    a.nameAlg === t.nameAlg &&
    a.attributes === t.attributes &&
    a.authPolicy.equals(t.authPolicy) &&
    JSON.stringify(a.symmetric) === JSON.stringify(t.symmetric) &&
    JSON.stringify(a.scheme) === JSON.stringify(t.scheme) &&
    (a.rsa?.keyBits ?? 0) === (t.rsa?.keyBits ?? 0) &&
    (a.ecc?.curve ?? 0) === (t.ecc?.curve ?? 0)
  );
}

/**
 * Step 1 on its own: the EK certificate from NV and the template EK, refused when they differ.
 * The caller must flush the returned EK.
 * @throws EnrollmentError EK_CERT_ABSENT | EK_TEMPLATE_NV_UNSUPPORTED | EK_CERT_MALFORMED | EK_CERT_KEY_MISMATCH
 */
export function readEk(tpm: Tpm, alg: EkAlgorithm): { ek: TpmEk; certificate: Buffer } {
  const profile = EK_PROFILES[alg];
  const certificate = tpm.readNv(profile.certIndex);
  if (!certificate) {
    throw new EnrollmentError(
      'EK_CERT_ABSENT',
      `no EK certificate at NV 0x${profile.certIndex.toString(16).padStart(8, '0')} (${alg})`,
    );
  }
  if (tpm.nvPublic(profile.templateIndex)) {
    throw new EnrollmentError(
      'EK_TEMPLATE_NV_UNSUPPORTED',
      `the TPM carries an EK template at NV 0x${profile.templateIndex.toString(16)}; non-default EK templates are not supported`,
    );
  }
  let cert: X509Certificate;
  try {
    cert = new X509Certificate(trimDer(certificate));
  } catch {
    throw new EnrollmentError('EK_CERT_MALFORMED', 'the EK certificate in NV does not parse as X.509');
  }
  const ek = tpm.createEk(alg);
  try {
    if (!spkiDer(cert.publicKey).equals(spkiDer(publicKeyOf(parsePublic(ek.publicArea))))) {
      throw new EnrollmentError(
        'EK_CERT_KEY_MISMATCH',
        `the EK certificate at NV 0x${profile.certIndex.toString(16)} certifies a different key than the ${alg} EK ` +
          'created from the TCG default template (was the TPM provisioned with a non-default EK, e.g. --allow-signing?)',
      );
    }
    return { ek, certificate: trimDer(certificate) };
  } catch (e) {
    ek.flush();
    throw e;
  }
}

/**
 * Runs the whole enrollment (see the module comment) and writes the record.
 * @throws EnrollmentError with a reason code; TPM failures surface as reason `TPM_<code>`.
 */
export async function enrollTpm(opts: EnrollOptions): Promise<EnrollmentRecord> {
  let tpm: Tpm;
  try {
    tpm = Tpm.open(opts.tcti);
  } catch (e) {
    throw tpmFailure(e, 'opening the TPM');
  }
  let ek: TpmEk | null = null;
  let ak: TpmAk | null = null;
  try {
    const existing = tpm.readPublic(opts.akHandle);
    if (existing && !opts.replace) {
      throw new EnrollmentError(
        'AK_HANDLE_OCCUPIED',
        `persistent handle 0x${opts.akHandle.toString(16)} is in use; pass --replace to re-enroll`,
      );
    }
    // 1. EK certificate and template EK
    const got = readEk(tpm, opts.ekAlgorithm);
    ek = got.ek;
    if (!sameTemplate(ek.publicArea, opts.ekAlgorithm)) {
      throw new EnrollmentError('EK_NOT_TEMPLATE', 'the EK public area is not the TCG default template');
    }
    // 2. EK certificate → pinned manufacturer root (enrollment side)
    const cert = new X509Certificate(got.certificate);
    if (cert.keyUsage && cert.keyUsage.length > 0 && !cert.keyUsage.includes(OID_TCG_KP_EK_CERTIFICATE)) {
      throw new EnrollmentError('EK_CERT_UNTRUSTED', 'the EK certificate lacks the tcg-kp-EKCertificate EKU');
    }
    const chain = chainToRoots(got.certificate, opts.ekIntermediates, opts.ekRoots, opts.now);
    if (!chain.ok) throw new EnrollmentError('EK_CERT_UNTRUSTED', `EK certificate: ${chain.reason}`);
    // 3. AK under the EK
    const blobs = tpm.createAkUnderEk(ek, opts.akAlgorithm);
    ak = tpm.loadAkUnderEk(ek, blobs);
    // 4. enrollment side: attributes, then MakeCredential for the AK Name it computes itself
    const akPublic = opts.tamperAkPublic ? opts.tamperAkPublic(Buffer.from(ak.publicArea)) : ak.publicArea;
    const problem = akAttributeProblem(parsePublic(akPublic).attributes);
    if (problem) throw new EnrollmentError('AK_ATTRIBUTES_REFUSED', problem);
    const akName = nameOfPublic(akPublic);
    const secret = randomBytes(32);
    const made = makeCredential(ek.publicArea, akName, secret);
    // 5. TPM side
    let recovered: Buffer;
    try {
      recovered = tpm.activateCredential(ak, ek, made.credentialBlob, made.secret);
    } catch (e) {
      throw tpmFailure(e, 'ActivateCredential', 'CREDENTIAL_ACTIVATION_FAILED');
    }
    if (recovered.length !== secret.length || !timingSafeEqual(recovered, secret)) {
      throw new EnrollmentError('CREDENTIAL_MISMATCH', 'ActivateCredential returned another secret');
    }
    // 6. AK certificate
    const leaf = await issueAkCertificate({
      ca: opts.akCa,
      akKey: publicKeyOf(parsePublic(akPublic)),
      akName,
      days: opts.akCertDays,
      ...(opts.now ? { now: opts.now } : {}),
    });
    // 7. persist and record
    if (existing) tpm.evictPersistent(opts.akHandle);
    const persisted = tpm.persistAk(ak, opts.akHandle);
    persisted.flush();
    const record: EnrollmentRecord = {
      record_version: 1,
      enrolled_at: (opts.now ?? new Date()).toISOString(),
      ak_handle: opts.akHandle,
      ak_algorithm: opts.akAlgorithm,
      ak_public: b64u(ak.publicArea),
      ak_name: ak.name.toString('hex'),
      ak_parent_qualified_name: b64u(ak.parentQualifiedName),
      ek: {
        algorithm: opts.ekAlgorithm,
        public: b64u(ek.publicArea),
        certificate: b64u(got.certificate),
        chain: chain.chain.map((c) => b64u(c.raw)),
      },
      ak_cert_chain: [leaf, opts.akCa.certDer, ...opts.akCa.chainDer].map((d) => b64u(d)),
    };
    const tmp = `${opts.recordPath}.tmp-${process.pid}`;
    writeFileSync(tmp, `${JSON.stringify(record, null, 2)}\n`, { mode: 0o644 });
    renameSync(tmp, opts.recordPath);
    return record;
  } catch (e) {
    if (e instanceof EnrollmentError) throw e;
    throw tpmFailure(e, 'enrollment');
  } finally {
    try {
      ak?.flush();
      ek?.flush();
    } catch {
      // the TPM is gone; close() below releases what it can
    }
    tpm.close();
  }
}

function tpmFailure(e: unknown, what: string, reason?: string): EnrollmentError {
  if (e instanceof EnrollmentError) return e;
  if (e instanceof TpmError)
    return new EnrollmentError(
      reason ?? `TPM_${e.code}`.replace('TPM_TPM_', 'TPM_'),
      `${what}: ${e.message}`,
    );
  return new EnrollmentError(reason ?? 'ENROLLMENT_FAILED', `${what}: ${(e as Error).message}`);
}
