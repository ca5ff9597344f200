/**
 * `--format ear`: a verification report as an EAT Attestation Result (packages/verify/src/ear.ts,
 * ear-jwt.ts, cli/ear.ts). Checks that the claims-set validates against zod schemas written from
 * the draft's CDDL (which also accept the draft's and Veraison's own JSON examples), that the JWT
 * verifies under the verifier's public key, and — on claims built here with a software TPM, each
 * with exactly one input changed — that the right submodule's right vector claim moves, and
 * only that one.
 */
import { execFile } from 'node:child_process';
import { createHash, generateKeyPairSync, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { VerificationReport } from '@cmcp/verify';
import { parseReferenceValues, verifyClaim } from '@cmcp/verify';
import type { AuditBundle, Claim, MeasurementJson } from '@cmcp/verify/formats';
import { b64u, tpmQualifyingData } from '@cmcp/verify/formats';
import { calculateJwkThumbprint, decodeProtectedHeader, importJWK, type JWK, jwtVerify } from 'jose';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import {
  claimValue,
  earAppraisals,
  earClaimsSet,
  earTargetOf,
  TRUST_CLAIMS,
  tierOf,
} from '../packages/verify/src/ear.js';
import { parseEarKey, signEar } from '../packages/verify/src/ear-jwt.js';
import { recomputeMeasurement } from '../packages/verify/src/measurement.js';
import { check } from '../packages/verify/src/result.js';
import {
  bindSession,
  bundleOf,
  makeChain,
  signedClaim,
  softQuote,
  softTpm,
  tpmEvidence,
} from '../testing/evidence.js';

const sha256 = (...parts: (Buffer | string)[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};
const tag = (b: Buffer) => `sha256:${b.toString('hex')}`;

// ---------- schemas from the CDDL ----------
// draft-ietf-rats-ear-03 (github.com/ietf-rats-wg/draft-ietf-rats-ear, tag draft-ietf-rats-ear-03,
// commit 126b500b40999006702c8c008c8d265c052d71e6): cddl/ar4si.cddl, cddl/ear.cddl,
// cddl/ear-appraisal.cddl. JSON labels are the JC<"json", cbor> left-hand sides.

/** ar4si.cddl: trustworthiness-claim = -128 .. 127 */
const trustClaim = z.number().int().min(-128).max(127);
/** ar4si.cddl: trustworthiness-vector = non-empty<{ ? instance-identity … ? sourced-data }> */
const trustVector = z
  .strictObject(Object.fromEntries(TRUST_CLAIMS.map((c) => [c, trustClaim.optional()])))
  .refine((v) => Object.keys(v).length > 0, 'non-empty');
/** ar4si.cddl: trustworthiness-tier (JSON: the text labels) */
const trustTier = z.enum(['none', 'affirming', 'warning', 'contraindicated']);
/** ar4si.cddl: verifier-id = { developer: text, build: text } */
const verifierId = z.strictObject({ developer: z.string(), build: z.string() });
/** RFC 9711 binary-data in JSON: base64url without padding */
const b64url = z.string().regex(/^[A-Za-z0-9_-]*$/);
/** EAT time-int: an integer */
const timeInt = z.number().int();
/** eat.nonce-type in JSON (draft: 12 to 88 characters) */
const nonce = z.string().min(12).max(88);
const nonEmpty = <T extends z.ZodType>(s: T) =>
  z.record(z.string(), s).refine((m) => Object.keys(m).length > 0, 'at least one submod');

/** ear-appraisal.cddl (draft -03): EAR-appraisal, extensions allowed ($$ear-appraisal-extension) */
const appraisalIetf = z.looseObject({
  eat_profile: z.string().optional(),
  ear_status: trustTier,
  ear_trustworthiness_vector: trustVector.optional(),
  ear_appraisal_policy_ids: z.array(z.string()).min(1).optional(),
  eat_nonce: nonce.optional(),
});
/** ear.cddl (draft -03): EAR, extensions allowed ($$ear-extension) */
const earIetf = z.looseObject({
  eat_profile: z.literal('tag:ietf.org,2026:rats/ear#03'),
  ear_status: trustTier.optional(),
  iat: timeInt,
  exp: timeInt.optional(),
  ear_verifier_id: verifierId,
  ear_raw_evidence: b64url.optional(),
  submods: nonEmpty(appraisalIetf),
  eat_nonce: nonce.optional(),
});
/**
 * The same CDDL with the dotted names of draft-ietf-rats-ear-02 and of the profile Veraison's
 * `ear` library implements (github.com/veraison/ear, commit 961756edf6d7bc4792b428e2e506555f4c5976a9,
 * ear.go / ear_appraisal.go): `ear.appraisal-policy-id` is one text there.
 */
const appraisalVeraison = z.looseObject({
  eat_profile: z.string().optional(),
  'ear.status': trustTier,
  'ear.trustworthiness-vector': trustVector.optional(),
  'ear.appraisal-policy-id': z.string().optional(),
  eat_nonce: nonce.optional(),
});
const earVeraison = z.looseObject({
  eat_profile: z.literal('tag:github.com,2023:veraison/ear'),
  iat: timeInt,
  'ear.verifier-id': verifierId,
  'ear.raw-evidence': b64url.optional(),
  submods: nonEmpty(appraisalVeraison),
  eat_nonce: nonce.optional(),
});

/** draft-ietf-rats-ear-03 cddl/examples/ear-json-1.diag (verbatim). */
const DRAFT_EXAMPLE = {
  eat_profile: 'tag:ietf.org,2026:rats/ear#03',
  iat: 1666529184,
  ear_verifier_id: { developer: 'https://veraison-project.org', build: 'vts 0.0.1' },
  ear_raw_evidence: 'NzQ3MjY5NzM2NTYzNzQK',
  submods: {
    PSA: {
      ear_status: 'contraindicated',
      ear_trustworthiness_vector: { 'instance-identity': 2, executables: 96, hardware: 2 },
      ear_appraisal_policy_ids: ['https://veraison.example/policy/1/60a0068d'],
    },
  },
};
/** github.com/veraison/ear (commit above) arc/data/ear-claims-tv-ok.json (verbatim). */
const VERAISON_EXAMPLE = {
  'ear.raw-evidence': '3q2-7w',
  iat: 1666091373,
  'ear.verifier-id': { build: 'rrtrap-v1.0.0', developer: 'Acme Inc.' },
  eat_profile: 'tag:github.com,2023:veraison/ear',
  submods: {
    test: {
      'ear.status': 'affirming',
      'ear.trustworthiness-vector': {
        'instance-identity': 2,
        configuration: 2,
        executables: 3,
        'file-system': 2,
        hardware: 2,
        'runtime-opaque': 2,
        'storage-opaque': 2,
        'sourced-data': 2,
      },
      'ear.appraisal-policy-id': 'https://veraison.example/policy/1/60a0068d',
    },
  },
};

// ---------- claims with a software TPM ----------

const INPUTS: MeasurementJson['inputs'] = {
  code: tag(sha256('code')),
  code_files: 42,
  lockfile: tag(sha256('lock')),
  policy_bundle_hash: tag(sha256('policy')),
  catalog_hash: tag(sha256('catalog')),
  config: tag(sha256('{"a":1}')),
};
const DIGEST = recomputeMeasurement(INPUTS);
const ZERO = Buffer.alloc(32);

interface Built {
  claim: Claim;
  bundle: AuditBundle;
}

/**
 * A TPM-bound claim (software TPM, quote over PCRs 0, 7 and the measurement PCR 15) with its
 * gateway measurement and a 1-entry audit bundle. `tamperQuote` flips a byte of the quote
 * signature before the claim is signed, so the claim signature still holds.
 */
function build(o: { tamperQuote?: boolean } = {}): Built {
  const sessionId = randomUUID();
  const { entries } = makeChain(sessionId, 1);
  const root = entries[0]?.entry_hash as string;
  const session = bindSession({
    sessionId,
    chainRoot: root,
    gatewayMeasurement: tag(DIGEST),
    policyBundleHash: INPUTS.policy_bundle_hash,
    catalogHash: INPUTS.catalog_hash,
    challenge: null,
  });
  const tpm = softTpm();
  const pcrs = [0, 7, 15];
  const values = new Map<number, Buffer>([
    [0, sha256('boot-0')],
    [7, sha256('boot-7')],
    [15, sha256(ZERO, DIGEST)],
  ]);
  const pcrDigest = sha256(Buffer.concat(pcrs.map((p) => values.get(p) as Buffer)));
  const q = softQuote(tpm, { extraData: tpmQualifyingData(session.reportData), pcrs, pcrDigest });
  const signature = Buffer.from(q.signature);
  const at = signature.length - 5;
  if (o.tamperQuote) signature[at] = (signature[at] as number) ^ 0x01;
  const evidence = tpmEvidence({
    reportData: session.reportData,
    attest: q.attest,
    signature,
    akPublic: tpm.akPublic,
    pcrs,
    pcrValue: (p) => values.get(p) as Buffer,
  });
  (evidence as { measurement?: unknown }).measurement = {
    version: 1,
    digest: tag(DIGEST),
    inputs: INPUTS,
    pcr: 15,
    pcr_before: b64u(ZERO),
  } satisfies MeasurementJson;
  const claim = signedClaim(session, {
    gateway_measurement: tag(DIGEST),
    audit_chain: { chain_id: sessionId, root, tip: root, length: 1 },
    evidence,
  });
  return { claim, bundle: bundleOf(sessionId, entries) };
}

const refValues = (measurement: string) =>
  parseReferenceValues(`version: 1\ngateway:\n  measurements: ["${measurement}"]\n`);

/** The relying party's inputs: the claim, its bundle, the measurement and policy pins. */
function verify(b: Built, pins: { measurement?: string; policy?: string } = {}): VerificationReport {
  return verifyClaim(b.claim, {
    bundle: b.bundle,
    referenceValues: refValues(pins.measurement ?? tag(DIGEST)),
    expectedPolicyHash: pins.policy ?? (INPUTS.policy_bundle_hash as string),
  });
}

/** Every (submodule, claim) value of a report's EAR, as `submod/claim` → value. */
function vectorOf(r: VerificationReport): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [s, a] of Object.entries(earAppraisals(r))) {
    for (const [c, v] of Object.entries(a.vector)) out[`${s}/${c}`] = v as number;
  }
  return out;
}

describe('EAR mapping of a verification report', () => {
  const baseline = verify(build());

  it('the baseline claim (unanchored TPM, measured gateway, bundle, pins that hold) maps as documented', () => {
    expect(baseline.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(baseline.verdict).toBe('hardware-unanchored');
    // no AK certificate chain: the hardware is verified but not anchored → warning, not affirming
    expect(vectorOf(baseline)).toEqual({
      'platform/instance-identity': 2,
      'platform/configuration': 0,
      'platform/executables': 0,
      'platform/hardware': -33,
      'gateway/instance-identity': 2,
      'gateway/executables': 2,
      'audit/file-system': 2,
      'policy/configuration': 2,
    });
    const a = earAppraisals(baseline);
    expect([a.platform.status, a.gateway.status, a.audit.status, a.policy.status]).toEqual([
      'warning',
      'affirming',
      'affirming',
      'affirming',
    ]);
    expect(a.platform.reasons).toContain('evidence.anchor:AK_NOT_ENROLLED');
  });

  // Each row changes one input of the baseline; exactly one vector claim moves to contraindicated.
  // A check that fails only because of that one (DEPENDENCY_FAILED) takes its own claim to warning:
  // a tampered quote leaves the gateway measurement PCR unproven, but does not contraindicate it.
  const rows: {
    what: string;
    report: () => VerificationReport;
    moves: string;
    checkId: string;
    warns?: string;
  }[] = [
    {
      what: 'platform evidence tampered (quote signature byte)',
      report: () => verify(build({ tamperQuote: true })),
      moves: 'platform/hardware',
      checkId: 'evidence.signature',
      warns: 'gateway/executables',
    },
    {
      what: 'gateway measurement pin wrong (reference values)',
      report: () => verify(build(), { measurement: tag(sha256('release 1.2')) }),
      moves: 'gateway/executables',
      checkId: 'measurement.reference',
    },
    {
      what: 'audit chain broken (an entry of the bundle altered)',
      report: () => {
        const b = build();
        const e = b.bundle.entries[0] as { canonical: string };
        e.canonical = e.canonical.replace('"agent-a"', '"agent-b"');
        return verify(b);
      },
      moves: 'audit/file-system',
      checkId: 'audit.entry_hashes',
    },
    {
      what: 'policy hash pin wrong',
      report: () => verify(build(), { policy: tag(sha256('another policy')) }),
      moves: 'policy/configuration',
      checkId: 'claim.policy_hash',
    },
  ];

  it.each(rows)('$what → only $moves moves to contraindicated', ({ report, moves, checkId, warns }) => {
    const r = report();
    const failed = r.checks.filter((c) => c.status === 'fail');
    expect(failed.map((c) => c.id)).toContain(checkId);
    // every failed check lands on the claim that moved (or, failing by dependency, on the warned one)
    for (const c of failed) {
      const t = earTargetOf(c.id);
      expect(`${t.submod}/${t.claim}`, c.id).toBe(c.reason_code === 'DEPENDENCY_FAILED' ? warns : moves);
    }
    const before = vectorOf(baseline);
    const after = vectorOf(r);
    const moved = Object.keys(after).filter((k) => after[k] !== before[k]);
    expect(moved.sort()).toEqual([moves, ...(warns ? [warns] : [])].sort());
    expect(tierOf(after[moves] as number)).toBe('contraindicated');
    if (warns) expect(tierOf(after[warns] as number)).toBe('warning');
    const a = earAppraisals(r);
    const statusOfSubmod = (k: string) => k.split('/')[0] as keyof typeof a;
    expect(a[statusOfSubmod(moves)].status).toBe('contraindicated');
    for (const s of ['platform', 'gateway', 'audit', 'policy'] as const) {
      if (s === statusOfSubmod(moves)) continue;
      const expected = warns && s === statusOfSubmod(warns) ? 'warning' : earAppraisals(baseline)[s].status;
      expect(a[s].status, s).toBe(expected);
    }
  });

  it('a signature that does not verify is AR4SI 99 (cryptographic validation failed); a pin is 96', () => {
    expect(vectorOf(rows[0]?.report() as VerificationReport)['platform/hardware']).toBe(99);
    expect(vectorOf(rows[3]?.report() as VerificationReport)['policy/configuration']).toBe(96);
  });

  it('no bundle and no pins: those concerns make no claim (0, status none), they are not affirmed', () => {
    const r = verifyClaim(build().claim);
    const a = earAppraisals(r);
    expect(a.audit).toMatchObject({ status: 'none', vector: { 'file-system': 0 } });
    expect(a.policy).toMatchObject({ status: 'none', vector: { configuration: 0 } });
    expect(a.gateway.status).toBe('affirming');
  });
});

describe('AR4SI values and tiers', () => {
  it('tierOf follows "Enumeration Encoding" at every band edge', () => {
    const cases: [number, string][] = [
      [-1, 'none'],
      [0, 'none'],
      [1, 'none'],
      [2, 'affirming'],
      [31, 'affirming'],
      [-2, 'affirming'],
      [-32, 'affirming'],
      [32, 'warning'],
      [95, 'warning'],
      [-33, 'warning'],
      [-96, 'warning'],
      [96, 'contraindicated'],
      [127, 'contraindicated'],
      [-97, 'contraindicated'],
      [-128, 'contraindicated'],
    ];
    for (const [v, t] of cases) expect(tierOf(v), String(v)).toBe(t);
  });

  it('pass with absent: configuration 36 (its enumerated "unavailable"), other claims -33; dependency-only fail is not a contraindication', () => {
    const ok = check('x', 'pass', 'OK', '');
    const absent = check('y', 'absent', 'NOT_SUPPLIED', '');
    const dep = check('z', 'fail', 'DEPENDENCY_FAILED', '');
    expect(claimValue('configuration', [ok, absent])).toBe(36);
    expect(claimValue('hardware', [ok, absent])).toBe(-33);
    expect(claimValue('executables', [ok, dep])).toBe(-33);
    expect(claimValue('hardware', [absent])).toBe(0);
    expect(claimValue('hardware', [])).toBe(0);
    expect(claimValue('hardware', [ok, check('s', 'fail', 'QUOTE_SIGNATURE_INVALID', '')])).toBe(99);
    expect(claimValue('file-system', [ok, check('l', 'fail', 'LINK_BROKEN', '')])).toBe(96);
  });
});

describe('EAR claims-set and JWT', () => {
  const report = verify(build());
  const opts = {
    verifierId: { developer: '@cmcp/verify', build: 'cmcp-verify test' },
    issuedAt: 1_780_000_000,
    evidenceDigests: { claim: sha256('claim bytes') },
  };

  it('the schemas written from the CDDL accept the draft and Veraison examples, and reject a bad tier/value', () => {
    expect(earIetf.safeParse(DRAFT_EXAMPLE).success).toBe(true);
    expect(earVeraison.safeParse(VERAISON_EXAMPLE).success).toBe(true);
    const badTier = structuredClone(VERAISON_EXAMPLE);
    badTier.submods.test['ear.status'] = 'fine';
    expect(earVeraison.safeParse(badTier).success).toBe(false);
    const badValue = structuredClone(DRAFT_EXAMPLE);
    badValue.submods.PSA.ear_trustworthiness_vector.hardware = 128;
    expect(earIetf.safeParse(badValue).success).toBe(false);
  });

  it('veraison profile: validates, has the example structure, one submod per concern', () => {
    const c = earClaimsSet(report, opts);
    expect(earVeraison.parse(c)).toBeTruthy();
    expect(Object.keys(c).filter((k) => k in VERAISON_EXAMPLE)).toEqual(
      expect.arrayContaining(['iat', 'ear.verifier-id', 'eat_profile']),
    );
    const submods = c.submods as Record<string, Record<string, unknown>>;
    expect(Object.keys(submods)).toEqual(['platform', 'gateway', 'audit', 'policy']);
    const example = VERAISON_EXAMPLE.submods.test;
    for (const s of Object.values(submods)) {
      for (const k of Object.keys(example)) expect(s).toHaveProperty([k]);
    }
    // the raw evidence digest is an extension claim, not ear.raw-evidence (the unabridged evidence)
    expect(c['ear.raw-evidence']).toBeUndefined();
    expect(c['cmcp.raw-evidence-digest']).toEqual({ alg: 'sha-256', claim: b64u(sha256('claim bytes')) });
    expect(c['cmcp.verdict']).toBe('hardware-unanchored');
    // whose key signed it and whether the policy accepted it travel beside the vectors
    expect(c['cmcp.signer']).toBe(report.signer);
    expect(c['cmcp.accepted']).toBe(report.accepted);
    expect(report.signer).toBeDefined();
  });

  it('ietf-03 profile: validates against draft -03, underscore names, top-level ear_status the worst', () => {
    const c = earClaimsSet(report, { ...opts, profile: 'ietf-03' });
    expect(earIetf.parse(c)).toBeTruthy();
    expect(c.ear_status).toBe('warning');
    const platform = (c.submods as Record<string, Record<string, unknown>>).platform;
    expect(platform).toMatchObject({ ear_status: 'warning', ear_trustworthiness_vector: { hardware: -33 } });
    expect(c).not.toHaveProperty(['ear.verifier-id']);
  });

  it.each([
    ['ES256', () => generateKeyPairSync('ec', { namedCurve: 'P-256' })],
    ['ES384', () => generateKeyPairSync('ec', { namedCurve: 'P-384' })],
    ['EdDSA', () => generateKeyPairSync('ed25519')],
  ] as const)(
    '%s: the JWT verifies under the public key; typ eat+jwt; kid is the key thumbprint',
    async (alg, gen) => {
      const { privateKey, publicKey } = gen();
      for (const text of [
        privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
        JSON.stringify(privateKey.export({ format: 'jwk' })),
      ]) {
        const key = parseEarKey(text);
        expect(key.alg).toBe(alg);
        const jwt = await signEar(earClaimsSet(report, opts), key);
        const header = decodeProtectedHeader(jwt);
        expect(header).toMatchObject({ alg, typ: 'eat+jwt' });
        expect(header.kid).toBe(await calculateJwkThumbprint(publicKey.export({ format: 'jwk' }) as JWK));
        const { payload } = await jwtVerify(jwt, publicKey, { typ: 'eat+jwt' });
        expect(earVeraison.parse(payload)).toBeTruthy();
        expect(payload).toEqual(earClaimsSet(report, opts));
        // another key does not verify it
        const other = gen().publicKey;
        await expect(jwtVerify(jwt, other)).rejects.toThrow();
      }
    },
  );

  it('refuses a public key, an RSA key and junk', () => {
    const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    expect(() => parseEarKey(publicKey.export({ format: 'pem', type: 'spki' }).toString())).toThrow(
      /private/,
    );
    const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey;
    expect(() => parseEarKey(rsa.export({ format: 'pem', type: 'pkcs8' }).toString())).toThrow(/P-256/);
    expect(() => parseEarKey('not a key')).toThrow(/PEM or JWK/);
  });
});

describe('cmcp-verify claim --format ear (dist)', () => {
  const run = promisify(execFile);
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-ear-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const cli = async (args: string[]) => {
    try {
      const { stdout, stderr } = await run(process.execPath, [
        'packages/verify/dist/cli/main.js',
        'claim',
        ...args,
      ]);
      return { code: 0, stdout, stderr };
    } catch (err) {
      const e = err as { code: number; stdout: string; stderr: string };
      return { code: e.code, stdout: e.stdout, stderr: e.stderr };
    }
  };

  it('prints a JWT signed with --ear-key whose digest is of the file read; no key → exit 2 EAR_KEY_REQUIRED', async () => {
    const b = build();
    const claimText = JSON.stringify(b.claim);
    const claimPath = join(dir, 'claim.json');
    const bundlePath = join(dir, 'bundle.json');
    writeFileSync(claimPath, claimText);
    writeFileSync(bundlePath, JSON.stringify(b.bundle));
    const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    const keyPath = join(dir, 'key.jwk');
    writeFileSync(keyPath, JSON.stringify(privateKey.export({ format: 'jwk' })));

    // the claim here is hardware-unanchored; the acceptance level is explicit so that a stricter
    // default does not change what this test checks (a signed-only claim would need
    // --require signed-only)
    const ok = await cli([
      claimPath,
      '--audit',
      bundlePath,
      '--require',
      'hardware-unanchored',
      '--format',
      'ear',
      '--ear-key',
      keyPath,
    ]);
    expect(ok.stderr).toBe('');
    expect(ok.code).toBe(0);
    const jwt = ok.stdout.trim();
    const { payload } = await jwtVerify(jwt, await importJWK(publicKey.export({ format: 'jwk' }), 'ES256'));
    expect(earVeraison.parse(payload)).toBeTruthy();
    expect(payload['cmcp.raw-evidence-digest']).toEqual({
      alg: 'sha-256',
      claim: b64u(sha256(claimText)),
      'audit-bundle': b64u(sha256(JSON.stringify(b.bundle))),
    });
    expect((payload.submods as Record<string, Record<string, unknown>>).audit?.['ear.status']).toBe(
      'affirming',
    );

    // a wrong pin: still an EAR (contraindicated policy), exit 1
    const bad = await cli([
      claimPath,
      '--format',
      'ear',
      '--ear-key',
      keyPath,
      '--ear-profile',
      'ietf-03',
      '--policy-hash',
      tag(sha256('another policy')),
    ]);
    expect(bad.code).toBe(1);
    const p2 = (await jwtVerify(bad.stdout.trim(), publicKey)).payload;
    expect(earIetf.parse(p2)).toBeTruthy();
    expect(p2.ear_status).toBe('contraindicated');
    expect((p2.submods as Record<string, Record<string, unknown>>).policy?.ear_status).toBe(
      'contraindicated',
    );

    const noKey = await cli([claimPath, '--format', 'ear']);
    expect(noKey.code).toBe(2);
    expect(noKey.stdout).toBe('');
    expect(noKey.stderr).toMatch(/--ear-key.*EAR_KEY_REQUIRED/);
    const junkKey = join(dir, 'junk.pem');
    writeFileSync(junkKey, 'junk');
    const junk = await cli([claimPath, '--format', 'ear', '--ear-key', junkKey]);
    expect(junk.code).toBe(2);
    expect(junk.stderr).toMatch(/EAR_KEY_INVALID/);
    expect((await cli([claimPath, '--format', 'yaml'])).code).toBe(2);
    expect((await cli([claimPath, '--json', '--format', 'ear', '--ear-key', keyPath])).code).toBe(2);
  });
});
