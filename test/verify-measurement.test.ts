/**
 * Gateway measurement checks in `verifyClaim` (docs/spec/measurement.md): `evidence.measurement` is
 * recomputed from its inputs (an encoder independent of the gateway's src/measure), tied to the
 * claim and the binding preimage, and for TPM evidence to the quoted measurement PCR. Claims are
 * built here from packages/verify/src/format with software TPM-format quotes (correct and tampered), plus one end
 * to end run on swtpm with a real gateway.
 */
import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VerificationReport } from '@cmcp/verify';
import { PolicyFileError, parseReferenceValues, verifyClaim } from '@cmcp/verify';
import type { Claim, MeasurementJson } from '@cmcp/verify/formats';
import { b64u, hashEntryBody, tpmQualifyingData } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recomputeMeasurement } from '../packages/verify/src/measurement.js';
import { measurementDigest } from '../src/measure/index.js';
import {
  bindSession,
  entryBody,
  type SoftTpm,
  signedClaim,
  softQuote,
  softTpm,
  softwareEvidence,
  tpmEvidence,
} from '../testing/evidence.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const sha256 = (...parts: (Buffer | string)[]) => {
  const h = createHash('sha256');
  for (const p of parts) h.update(p);
  return h.digest();
};
const tag = (b: Buffer) => `sha256:${b.toString('hex')}`;

/** Independent encoder of docs/attestation.md "Gateway measurement" v1 (test-side). */
function lp(s: string): Buffer {
  const b = Buffer.from(s, 'utf8');
  const n = Buffer.alloc(4);
  n.writeUInt32BE(b.length);
  return Buffer.concat([n, b]);
}
function encode(i: MeasurementJson['inputs']): Buffer {
  const v = Buffer.alloc(4);
  v.writeUInt32BE(1);
  const parts = [lp('cmcp.gateway-measurement'), v];
  for (const k of ['code', 'lockfile', 'policy_bundle_hash', 'catalog_hash', 'config'] as const) {
    parts.push(lp(k), lp((i[k] as string | null) ?? ''));
  }
  return sha256(Buffer.concat(parts));
}

const INPUTS: MeasurementJson['inputs'] = {
  code: tag(sha256('code')),
  code_files: 42,
  lockfile: tag(sha256('lock')),
  policy_bundle_hash: 'sha256:bb',
  catalog_hash: 'sha256:cc',
  config: tag(sha256('{"a":1}')),
};
const DIGEST = encode(INPUTS);
const ZERO = Buffer.alloc(32);

// ---------- software TPM-format quote over arbitrary sha256 PCRs ----------
function quote(tpm: SoftTpm, extraData: Buffer, pcrs: number[], values: Map<number, Buffer>) {
  const pcrDigest = sha256(Buffer.concat(pcrs.map((p) => values.get(p) ?? Buffer.alloc(0))));
  return softQuote(tpm, { extraData, pcrs, pcrDigest });
}

// ---------- claims ----------
interface BuildOpts {
  /** The measurement to carry; undefined ⇒ a genuine one (pcr 15, pcr_before zero, for TPM). */
  measurement?: unknown;
  /** No evidence.measurement at all. */
  noMeasurement?: boolean;
  tpm?: boolean;
  pcrs?: number[];
  pcrBefore?: Buffer;
  /** Overrides of the quoted values (quote and pcr_values agree). */
  quoted?: Record<number, Buffer>;
  /** Overrides of pcr_values only (the quote signs other values). */
  claimedOnly?: Record<number, Buffer>;
  gatewayMeasurement?: string | null;
  preimageMeasurement?: string | null;
  policyHash?: string;
}

function build(o: BuildOpts = {}): Claim {
  const sessionId = randomUUID();
  const { entry_hash } = hashEntryBody(entryBody(sessionId, 0, 'genesis'));
  const gm = o.gatewayMeasurement === undefined ? tag(DIGEST) : o.gatewayMeasurement;
  const policy = o.policyHash ?? 'sha256:bb';
  const session = bindSession({
    sessionId,
    chainRoot: entry_hash,
    gatewayMeasurement: o.preimageMeasurement === undefined ? gm : o.preimageMeasurement,
    policyBundleHash: policy,
    catalogHash: 'sha256:cc',
    challenge: null,
  });
  const rd = session.reportData;
  const pcrBefore = o.pcrBefore ?? ZERO;
  const genuine: MeasurementJson = o.tpm
    ? { version: 1, digest: tag(DIGEST), inputs: INPUTS, pcr: 15, pcr_before: b64u(pcrBefore) }
    : { version: 1, digest: tag(DIGEST), inputs: INPUTS };
  const measurement = o.measurement === undefined ? genuine : o.measurement;
  let evidence: Claim['evidence'];
  if (o.tpm) {
    const tpm = softTpm();
    const pcrs = o.pcrs ?? [0, 7, 15];
    const values = new Map<number, Buffer>(pcrs.map((p) => [p, sha256(`boot-${p}`)]));
    values.set(15, sha256(pcrBefore, DIGEST));
    for (const [k, v] of Object.entries(o.quoted ?? {})) values.set(Number(k), v);
    const q = quote(tpm, tpmQualifyingData(rd), pcrs, values);
    const claimed = new Map(values);
    for (const [k, v] of Object.entries(o.claimedOnly ?? {})) claimed.set(Number(k), v);
    evidence = tpmEvidence({
      reportData: rd,
      attest: q.attest,
      signature: q.signature,
      akPublic: tpm.akPublic,
      pcrs,
      pcrValue: (p) => claimed.get(p) ?? Buffer.alloc(32),
    });
  } else {
    evidence = softwareEvidence(rd);
  }
  if (!o.noMeasurement) (evidence as { measurement?: unknown }).measurement = measurement;
  return signedClaim(session, {
    gateway_measurement: gm,
    audit_chain: { chain_id: sessionId, root: entry_hash, tip: entry_hash, length: 1 },
    evidence,
  });
}

const get = (r: VerificationReport, id: string) => {
  const c = r.checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
const failedCodes = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code);

describe('measurement encoding', () => {
  it('the verifier recomputes the documented encoding (test encoder) and agrees with the gateway encoder, nulls included', () => {
    const variants: MeasurementJson['inputs'][] = [
      INPUTS,
      { ...INPUTS, lockfile: null, policy_bundle_hash: null, catalog_hash: null },
      { ...INPUTS, policy_bundle_hash: 'sha256:é✓', code_files: 0 },
    ];
    for (const v of variants) {
      expect(recomputeMeasurement(v).equals(encode(v))).toBe(true);
      expect(recomputeMeasurement(v).equals(measurementDigest(v))).toBe(true);
    }
    // code_files is informational: not part of the digest
    expect(recomputeMeasurement({ ...INPUTS, code_files: 1 }).equals(DIGEST)).toBe(true);
  });
});

describe('verifyClaim: evidence.measurement', () => {
  it('TPM claim, pcr_before zero: digest, claim and PCR checks pass; note says measured from reset', () => {
    const r = verifyClaim(build({ tpm: true }));
    expect(failedCodes(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-unanchored');
    expect(get(r, 'measurement.digest').status).toBe('pass');
    expect(get(r, 'measurement.claim').status).toBe('pass');
    expect(get(r, 'measurement.pcr')).toMatchObject({ status: 'pass', reason_code: 'OK' });
    expect(get(r, 'measurement.pcr').detail).toMatch(/measured from reset/);
    expect(r.notes.join('\n')).toMatch(/pcr_before is 32 zero bytes — measured from reset/);
  });

  it('TPM claim, pcr_before not zero: passes, and the note says earlier extends happened', () => {
    const r = verifyClaim(build({ tpm: true, pcrBefore: sha256('previous run') }));
    expect(failedCodes(r)).toEqual([]);
    expect(get(r, 'measurement.pcr').detail).toMatch(/earlier extends happened/);
    expect(r.notes.join('\n')).toMatch(/earlier extends happened/);
    expect(r.notes.join('\n')).not.toMatch(/measured from reset/);
  });

  it('tampered input (config) with the old digest → MEASUREMENT_INPUTS_MISMATCH (claim re-signed: only that is wrong)', () => {
    const m = {
      version: 1,
      digest: tag(DIGEST),
      inputs: { ...INPUTS, config: tag(sha256('{"a":2}')) },
      pcr: 15,
      pcr_before: b64u(ZERO),
    };
    const r = verifyClaim(build({ tpm: true, measurement: m }));
    expect(get(r, 'claim.signature').status).toBe('pass');
    expect(get(r, 'measurement.digest')).toMatchObject({
      status: 'fail',
      reason_code: 'MEASUREMENT_INPUTS_MISMATCH',
    });
    expect(get(r, 'measurement.claim').status).toBe('pass');
    // the PCR holds the stated digest, which is not what the inputs encode to
    expect(get(r, 'measurement.pcr')).toMatchObject({
      status: 'fail',
      reason_code: 'MEASUREMENT_PCR_MISMATCH',
    });
    expect(r.verdict).toBe('invalid');
    for (const k of ['code', 'lockfile', 'policy_bundle_hash', 'catalog_hash'] as const) {
      const mm = { version: 1, digest: tag(DIGEST), inputs: { ...INPUTS, [k]: tag(sha256('other')) } };
      expect(get(verifyClaim(build({ measurement: mm })), 'measurement.digest').reason_code, k).toBe(
        'MEASUREMENT_INPUTS_MISMATCH',
      );
    }
  });

  it('a consistent measurement that is not the claim / preimage gateway_measurement → MEASUREMENT_CLAIM_MISMATCH', () => {
    const other = tag(sha256('another gateway'));
    const r = verifyClaim(build({ tpm: true, gatewayMeasurement: other }));
    expect(get(r, 'measurement.digest').status).toBe('pass');
    expect(get(r, 'measurement.claim')).toMatchObject({
      status: 'fail',
      reason_code: 'MEASUREMENT_CLAIM_MISMATCH',
    });
    expect(get(r, 'measurement.claim').detail).toMatch(/claim gateway_measurement and binding preimage/);
    // only the preimage differs (the preimage check fails too, and the measurement check says which)
    const p = verifyClaim(build({ preimageMeasurement: other }));
    expect(get(p, 'measurement.claim').detail).toMatch(/^binding preimage gateway_measurement differs/);
    expect(failedCodes(p)).toEqual(
      expect.arrayContaining(['MEASUREMENT_CLAIM_MISMATCH', 'PREIMAGE_FIELD_MISMATCH']),
    );
    // and a null gateway_measurement with a measurement present
    const n = verifyClaim(build({ gatewayMeasurement: null }));
    expect(get(n, 'measurement.claim').reason_code).toBe('MEASUREMENT_CLAIM_MISMATCH');
  });

  it('the measurement PCR not in the quote selection → MEASUREMENT_PCR_NOT_QUOTED', () => {
    const r = verifyClaim(build({ tpm: true, pcrs: [0, 7] }));
    expect(get(r, 'tpm.pcr_digest').status).toBe('pass');
    expect(get(r, 'measurement.pcr')).toMatchObject({
      status: 'fail',
      reason_code: 'MEASUREMENT_PCR_NOT_QUOTED',
    });
    const m16 = { version: 1, digest: tag(DIGEST), inputs: INPUTS, pcr: 16, pcr_before: b64u(ZERO) };
    expect(get(verifyClaim(build({ tpm: true, measurement: m16 })), 'measurement.pcr').reason_code).toBe(
      'MEASUREMENT_PCR_NOT_QUOTED',
    );
  });

  it('the quoted PCR is not SHA-256(pcr_before ‖ digest) (extended after the gateway) → MEASUREMENT_PCR_MISMATCH', () => {
    const later = sha256(sha256(ZERO, DIGEST), sha256('someone else'));
    const r = verifyClaim(build({ tpm: true, quoted: { 15: later } }));
    expect(get(r, 'tpm.pcr_digest').status).toBe('pass');
    expect(get(r, 'measurement.pcr')).toMatchObject({
      status: 'fail',
      reason_code: 'MEASUREMENT_PCR_MISMATCH',
    });
    expect(r.verdict).toBe('invalid');
    // a wrong pcr_before is the same mismatch
    const wrongBefore = {
      version: 1,
      digest: tag(DIGEST),
      inputs: INPUTS,
      pcr: 15,
      pcr_before: b64u(sha256('x')),
    };
    expect(
      get(verifyClaim(build({ tpm: true, measurement: wrongBefore })), 'measurement.pcr').reason_code,
    ).toBe('MEASUREMENT_PCR_MISMATCH');
  });

  it('the event log (pcr_events) accounts for later extends by other gateways; a tampered log is rejected', () => {
    const other = sha256('the second gateway');
    const later = sha256(sha256(ZERO, DIGEST), other);
    const own = { digest: tag(DIGEST), event: 'cmcp.gateway_measurement', instance: 'gw-a' };
    const second = { digest: tag(other), event: 'cmcp.gateway_measurement', instance: 'gw-b' };
    const withLog = (events: unknown[]) => ({
      version: 1,
      digest: tag(DIGEST),
      inputs: INPUTS,
      pcr: 15,
      pcr_before: b64u(ZERO),
      pcr_events: events,
    });
    const ok = verifyClaim(build({ tpm: true, quoted: { 15: later }, measurement: withLog([own, second]) }));
    expect(failedCodes(ok)).toEqual([]);
    expect(get(ok, 'measurement.pcr').detail).toMatch(/replay of 2 pcr_events/);
    expect(ok.notes.join('\n')).toMatch(/extended 1 more time\(s\) after this gateway's measurement/);
    // a one-event log is the plain check
    expect(failedCodes(verifyClaim(build({ tpm: true, measurement: withLog([own]) })))).toEqual([]);
    // tampered: a changed digest, a dropped event, reordered events, a first event that is not this one
    const tampered: [unknown[], string][] = [
      [[own, { ...second, digest: tag(sha256('forged')) }], 'MEASUREMENT_PCR_MISMATCH'],
      [[own], 'MEASUREMENT_PCR_MISMATCH'],
      [[second, own], 'MEASUREMENT_EVENT_LOG_INVALID'],
      [[{ ...own, digest: tag(sha256('x')) }, second], 'MEASUREMENT_EVENT_LOG_INVALID'],
    ];
    for (const [events, code] of tampered) {
      const r = verifyClaim(build({ tpm: true, quoted: { 15: later }, measurement: withLog(events) }));
      expect(get(r, 'claim.signature').status).toBe('pass');
      expect(get(r, 'measurement.pcr')).toMatchObject({ status: 'fail', reason_code: code });
      expect(r.verdict).toBe('invalid');
    }
    // malformed event entries fail the shape
    const bad = verifyClaim(build({ tpm: true, measurement: withLog([{ digest: 'nope' }]) }));
    expect(failedCodes(bad)).toContain('MEASUREMENT_MALFORMED');
  });

  it('a PCR 15 value that matches but is not the quoted one → DEPENDENCY_FAILED (pcrDigest fails)', () => {
    const r = verifyClaim(
      build({ tpm: true, quoted: { 15: sha256('other') }, claimedOnly: { 15: sha256(ZERO, DIGEST) } }),
    );
    expect(get(r, 'tpm.pcr_digest').status).toBe('fail');
    expect(get(r, 'measurement.pcr')).toMatchObject({ status: 'fail', reason_code: 'DEPENDENCY_FAILED' });
  });

  it('malformed measurements fail MEASUREMENT_MALFORMED (never skipped); the claim shape still passes', () => {
    const bad: unknown[] = [
      { version: 2, digest: tag(DIGEST), inputs: INPUTS },
      { version: 1, digest: DIGEST.toString('hex'), inputs: INPUTS },
      { version: 1, digest: tag(DIGEST), inputs: { ...INPUTS, extra: 'x' } },
      { version: 1, digest: tag(DIGEST), inputs: INPUTS, unknown: 1 },
      { version: 1, digest: tag(DIGEST), inputs: { ...INPUTS, code: 'sha256:AB' } },
      'sha256:aa',
    ];
    for (const m of bad) {
      const r = verifyClaim(build({ measurement: m }));
      expect(get(r, 'claim.shape').status).toBe('pass');
      expect(get(r, 'measurement.digest'), JSON.stringify(m)).toMatchObject({
        status: 'fail',
        reason_code: 'MEASUREMENT_MALFORMED',
      });
      expect(get(r, 'measurement.claim').reason_code).toBe('DEPENDENCY_FAILED');
      expect(r.verdict).toBe('invalid');
    }
    const short = {
      version: 1,
      digest: tag(DIGEST),
      inputs: INPUTS,
      pcr: 15,
      pcr_before: b64u(Buffer.alloc(31)),
    };
    expect(get(verifyClaim(build({ tpm: true, measurement: short })), 'measurement.pcr').reason_code).toBe(
      'MEASUREMENT_MALFORMED',
    );
    const half = { version: 1, digest: tag(DIGEST), inputs: INPUTS, pcr: 15 };
    expect(get(verifyClaim(build({ tpm: true, measurement: half })), 'measurement.pcr').reason_code).toBe(
      'MEASUREMENT_MALFORMED',
    );
  });

  it('TPM evidence with no measurement PCR (measurement_pcr: null) → measurement.pcr absent with a note', () => {
    const noPcr = { version: 1, digest: tag(DIGEST), inputs: INPUTS };
    const r = verifyClaim(build({ tpm: true, measurement: noPcr }));
    expect(failedCodes(r)).toEqual([]);
    expect(get(r, 'measurement.pcr')).toMatchObject({ status: 'absent', reason_code: 'NOT_SUPPLIED' });
    expect(r.notes.join('\n')).toMatch(/does not cover the gateway measurement/);
  });

  it('signed-only claim with a measurement: digest and claim checked, no PCR (not-applicable); without one: absent', () => {
    const r = verifyClaim(build());
    expect(failedCodes(r)).toEqual([]);
    expect(r.verdict).toBe('signed-only');
    expect(get(r, 'measurement.digest').status).toBe('pass');
    expect(get(r, 'measurement.pcr').status).toBe('not-applicable');
    const none = verifyClaim(build({ noMeasurement: true }));
    expect(failedCodes(none)).toEqual([]);
    for (const id of ['measurement.digest', 'measurement.claim', 'measurement.pcr']) {
      expect(get(none, id)).toMatchObject({ status: 'absent', reason_code: 'NOT_SUPPLIED' });
    }
  });

  it('a policy reloaded after start-up is a note, not a failure', () => {
    const r = verifyClaim(build({ tpm: true, policyHash: 'sha256:reloaded' }));
    expect(failedCodes(r)).toEqual([]);
    expect(r.notes.join('\n')).toMatch(/policy was reloaded after start-up/);
  });
});

describe('reference values: gateway.measurements (measurement.reference)', () => {
  const rv = (digests: string[]) =>
    parseReferenceValues(
      `version: 1\ngateway:\n  measurements: [${digests.map((d) => `"${d}"`).join(', ')}]\n`,
    );

  it('the claim gateway_measurement among the accepted digests → pass; without the section the check is not made', () => {
    const r = verifyClaim(build({ tpm: true }), { referenceValues: rv([tag(sha256('other')), tag(DIGEST)]) });
    expect(failedCodes(r)).toEqual([]);
    expect(get(r, 'measurement.reference')).toMatchObject({ status: 'pass', reason_code: 'OK' });
    expect(verifyClaim(build({ tpm: true })).checks.map((c) => c.id)).not.toContain('measurement.reference');
  });

  it('another digest → MEASUREMENT_NOT_ALLOWED and invalid, although the claim is self-consistent', () => {
    const r = verifyClaim(build({ tpm: true }), { referenceValues: rv([tag(sha256('release'))]) });
    expect(failedCodes(r)).toEqual(['MEASUREMENT_NOT_ALLOWED']);
    expect(r.verdict).toBe('invalid');
    expect(get(r, 'measurement.reference').detail).toContain(tag(DIGEST));
    for (const id of ['measurement.digest', 'measurement.claim', 'measurement.pcr']) {
      expect(get(r, id).status, id).toBe('pass');
    }
  });

  it('a claim without a gateway measurement fails the reference (fails closed); a malformed digest is refused at load', () => {
    const r = verifyClaim(build({ gatewayMeasurement: null, noMeasurement: true }), {
      referenceValues: rv([tag(DIGEST)]),
    });
    expect(get(r, 'measurement.reference')).toMatchObject({
      status: 'fail',
      reason_code: 'MEASUREMENT_NOT_ALLOWED',
    });
    expect(() => rv(['sha256:ABC'])).toThrow(PolicyFileError);
    expect(() => parseReferenceValues('version: 1\ngateway: { measurements: [] }\n')).toThrow(
      /gateway\.measurements/,
    );
  });
});

describe('end to end on swtpm: a gateway measures itself into PCR 15; verifyClaim checks it', () => {
  let sw: Awaited<ReturnType<typeof startSwtpm>>;
  let cfg: TestConfig;
  let dir: string;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'cmcp-verify-measure-'));
    sw = await startSwtpm();
    cfg = await writeConfig({
      dir,
      attestation: { provider: 'tpm', tcti: sw.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
    });
  });
  afterAll(async () => {
    await sw?.stop();
    if (cfg) cleanup(cfg.dir);
    rmSync(dir, { recursive: true, force: true });
  });
  const claimOf = async (url: string): Promise<Claim> => {
    const s = await rest(url, 'alice-token', 'POST', '/sessions', {});
    expect(s.status).toBe(201);
    return (await rest(url, 'alice-token', 'POST', `/sessions/${s.body.session_id as string}/close`))
      .body as Claim;
  };

  it('first run: measured from reset; restart: earlier extends; tampered inputs and digest are caught', async () => {
    const gw = await startInProcess(cfg);
    let first: Claim;
    try {
      first = await claimOf(gw.url);
    } finally {
      await gw.close();
    }
    expect(first.evidence.status).toBe('bound');
    const r1 = verifyClaim(first);
    expect(failedCodes(r1)).toEqual([]);
    expect(r1.verdict).toBe('hardware-unanchored');
    for (const id of ['measurement.digest', 'measurement.claim', 'measurement.pcr'])
      expect(get(r1, id).status, id).toBe('pass');
    expect(get(r1, 'measurement.pcr').detail).toMatch(/^quoted PCR 15 .*measured from reset/);
    // the recomputation agrees with the independent test-side encoder
    const m = first.evidence.measurement as MeasurementJson;
    expect(m.digest).toBe(tag(encode(m.inputs)));

    const gw2 = await startInProcess(cfg);
    let second: Claim;
    try {
      second = await claimOf(gw2.url);
    } finally {
      await gw2.close();
    }
    const r2 = verifyClaim(second);
    expect(failedCodes(r2)).toEqual([]);
    expect(get(r2, 'measurement.pcr').detail).toMatch(/earlier extends happened/);

    // tampering (the gateway signature then fails too, but each measurement check says what is wrong)
    const t = JSON.parse(JSON.stringify(second)) as Claim;
    const tm = t.evidence.measurement as MeasurementJson;
    tm.inputs.config = tag(sha256('tampered'));
    expect(get(verifyClaim(t), 'measurement.digest').reason_code).toBe('MEASUREMENT_INPUTS_MISMATCH');
    const t2 = JSON.parse(JSON.stringify(second)) as Claim;
    (t2.evidence.measurement as MeasurementJson).pcr_before = b64u(ZERO);
    expect(get(verifyClaim(t2), 'measurement.pcr').reason_code).toBe('MEASUREMENT_PCR_MISMATCH');
    const t3 = JSON.parse(JSON.stringify(second)) as Claim;
    (t3.evidence.measurement as MeasurementJson).pcr = 0;
    expect(get(verifyClaim(t3), 'measurement.pcr').reason_code).toBe('MEASUREMENT_PCR_MISMATCH');
    (t3.evidence.measurement as MeasurementJson).pcr = 16;
    expect(get(verifyClaim(t3), 'measurement.pcr').reason_code).toBe('MEASUREMENT_PCR_NOT_QUOTED');
  });
});
