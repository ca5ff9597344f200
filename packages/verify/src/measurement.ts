/**
 * Gateway measurement checks for relying parties (docs/spec/measurement.md): a claim's
 * `evidence.measurement` is recomputed from its inputs, tied to the claim and binding preimage,
 * and — for TPM evidence — to the quoted measurement PCR.
 *
 * The digest is computed here by an implementation of the encoding written down in
 * docs/attestation.md ("Gateway measurement", encoding v1), independent of the gateway's
 * `src/measure/` (which the verifier must not import). All integers big-endian; lp(x) = u32
 * byte length of the UTF-8 text x ‖ the text:
 *
 *   digest = SHA-256( lp("cmcp.gateway-measurement") ‖ u32 1 ‖
 *                     lp("code") ‖ lp(code) ‖ lp("lockfile") ‖ lp(lockfile or "") ‖
 *                     lp("policy_bundle_hash") ‖ lp(value or "") ‖ lp("catalog_hash") ‖ lp(value or "") ‖
 *                     lp("config") ‖ lp(config) )
 *
 * and, for TPM evidence, PCR[pcr] = SHA-256(pcr_before ‖ digest bytes) in the sha256 bank — or,
 * with the event log `pcr_events` (docs/spec/measurement.md#event-log), the fold of
 * SHA-256(acc ‖ event digest) from pcr_before over the events, the first of which is this digest.
 */
import { z } from 'zod';
import { digest as hash } from './crypto/hash.js';
import { fromB64u } from './format/canonical.js';
import { type CheckResult, check, fail, pass, quoteUntrusted } from './result.js';

const sha256 = (...parts: Uint8Array[]): Buffer => hash('sha256', ...parts);

const tagged = z.string().regex(/^sha256:[0-9a-f]{64}$/, 'not sha256:<64 lowercase hex>');
const b64url = z.string().regex(/^[A-Za-z0-9_-]*$/, 'not unpadded base64url');

/** zod schema of `evidence.measurement` v1 (packages/verify/src/format/claim.ts `MeasurementJson`). */
export const measurementSchema = z
  .object({
    version: z.literal(1),
    digest: tagged,
    inputs: z
      .object({
        code: tagged,
        code_files: z.number().int().min(0),
        lockfile: tagged.nullable(),
        policy_bundle_hash: z.string().nullable(),
        catalog_hash: z.string().nullable(),
        config: tagged,
      })
      .strict(),
    pcr: z.number().int().min(0).max(23).optional(),
    pcr_before: b64url.optional(),
    pcr_events: z
      .array(z.object({ digest: tagged, event: z.string().max(200), instance: z.string().max(200) }).strict())
      .min(1)
      .max(1024)
      .optional(),
  })
  .strict();

export type MeasurementV1 = z.infer<typeof measurementSchema>;

function lp(text: string): Buffer {
  const b = Buffer.from(text, 'utf8');
  const n = Buffer.alloc(4);
  n.writeUInt32BE(b.length);
  return Buffer.concat([n, b]);
}

/** The measurement digest (32 bytes) of encoding v1 from its inputs. */
export function recomputeMeasurement(inputs: MeasurementV1['inputs']): Buffer {
  const version = Buffer.alloc(4);
  version.writeUInt32BE(1);
  const parts: Uint8Array[] = [lp('cmcp.gateway-measurement'), version];
  const fields: [string, string | null][] = [
    ['code', inputs.code],
    ['lockfile', inputs.lockfile],
    ['policy_bundle_hash', inputs.policy_bundle_hash],
    ['catalog_hash', inputs.catalog_hash],
    ['config', inputs.config],
  ];
  for (const [name, value] of fields) parts.push(lp(name), lp(value ?? ''));
  return sha256(...parts);
}

/** What the measurement checks need from the claim. */
export interface MeasurementCheckInput {
  /** `evidence.measurement` as found in the claim (unknown shape). */
  measurement: unknown;
  claimMeasurement: string | null;
  preimageMeasurement: string | null;
  /** The claim's policy_bundle_hash (a reload after start-up makes it differ: a note). */
  claimPolicyHash: string | null;
  /**
   * The TPM quote's sha256 selection and values, when the evidence is a bound TPM quote;
   * `quoted` is true when `tpm.pcr_digest` passed (the values are the signed ones).
   */
  tpm?: { pcrs: readonly number[]; values: ReadonlyMap<number, Buffer>; quoted: boolean };
  /** The evidence provider, to say why there is no PCR to check. */
  provider: string;
}

/**
 * Checks (ids stable): `measurement.digest` (inputs → digest: MEASUREMENT_INPUTS_MISMATCH),
 * `measurement.claim` (digest = claim and preimage gateway_measurement:
 * MEASUREMENT_CLAIM_MISMATCH), `measurement.pcr` (TPM: MEASUREMENT_PCR_NOT_QUOTED,
 * MEASUREMENT_PCR_MISMATCH). A malformed measurement fails all three (MEASUREMENT_MALFORMED).
 * Without `evidence.measurement` the three are `absent`. Never throws.
 */
export function verifyMeasurement(input: MeasurementCheckInput): { checks: CheckResult[]; notes: string[] } {
  const checks: CheckResult[] = [];
  const notes: string[] = [];
  if (input.measurement === undefined) {
    const why =
      input.claimMeasurement === null
        ? 'the claim carries no gateway measurement'
        : `the claim carries no evidence.measurement: gateway_measurement ${quoteUntrusted(input.claimMeasurement, 80)} cannot be recomputed from inputs`;
    for (const id of ['measurement.digest', 'measurement.claim', 'measurement.pcr']) {
      checks.push(check(id, 'absent', 'NOT_SUPPLIED', why));
    }
    return { checks, notes };
  }
  const parsed = measurementSchema.safeParse(input.measurement);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    const where = issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}`.slice(0, 120) : 'invalid';
    checks.push(fail('measurement.digest', 'MEASUREMENT_MALFORMED', `evidence.measurement ${where}`));
    checks.push(fail('measurement.claim', 'DEPENDENCY_FAILED', 'evidence.measurement does not parse'));
    checks.push(fail('measurement.pcr', 'DEPENDENCY_FAILED', 'evidence.measurement does not parse'));
    return { checks, notes };
  }
  const m = parsed.data;
  const digest = recomputeMeasurement(m.inputs);
  const recomputed = `sha256:${digest.toString('hex')}`;
  const digestOk = recomputed === m.digest;
  checks.push(
    digestOk
      ? pass(
          'measurement.digest',
          `digest ${m.digest} recomputed from the inputs (code over ${m.inputs.code_files} files, lockfile, policy, catalog, config)`,
        )
      : fail(
          'measurement.digest',
          'MEASUREMENT_INPUTS_MISMATCH',
          `the inputs encode to ${recomputed}, not the stated digest ${m.digest}`,
        ),
  );
  const differ: string[] = [];
  if (input.claimMeasurement !== m.digest) differ.push('claim gateway_measurement');
  if (input.preimageMeasurement !== m.digest) differ.push('binding preimage gateway_measurement');
  checks.push(
    differ.length
      ? fail(
          'measurement.claim',
          'MEASUREMENT_CLAIM_MISMATCH',
          `${differ.join(' and ')} ${differ.length > 1 ? 'differ' : 'differs'} from evidence.measurement.digest ${m.digest}`,
        )
      : pass(
          'measurement.claim',
          'evidence.measurement.digest = claim gateway_measurement = binding preimage gateway_measurement',
        ),
  );
  if (m.inputs.policy_bundle_hash !== input.claimPolicyHash) {
    notes.push(
      `The measurement covers policy ${quoteUntrusted(m.inputs.policy_bundle_hash ?? 'none', 80)} (at start-up); the claim binds policy ${quoteUntrusted(input.claimPolicyHash ?? 'none', 80)}: the policy was reloaded after start-up and the gateway did not measure itself again (the measurement does not name the policy that decided).`,
    );
  }

  measurementPcrCheck(input, m, digest, digestOk, checks, notes);
  return { checks, notes };
}

/**
 * `measurement.pcr` (TPM): the quoted measurement PCR equals SHA-256(pcr_before ‖ digest), with
 * `digest` the one the inputs encode to (TPM 2.0 Part 3 §22.2 TPM2_PCR_Extend).
 */
function measurementPcrCheck(
  input: MeasurementCheckInput,
  m: MeasurementV1,
  digest: Buffer,
  digestOk: boolean,
  checks: CheckResult[],
  notes: string[],
): void {
  const hasPcr = m.pcr !== undefined || m.pcr_before !== undefined;
  if (!input.tpm) {
    checks.push(
      hasPcr && input.provider === 'tpm'
        ? check(
            'measurement.pcr',
            'absent',
            'EVIDENCE_ABSENT',
            `measurement PCR ${m.pcr ?? '?'} stated, but there is no bound TPM quote to check it against`,
          )
        : check(
            'measurement.pcr',
            'not-applicable',
            'NOT_SUPPLIED',
            input.provider === 'tpm'
              ? 'no bound TPM quote'
              : `${quoteUntrusted(input.provider, 32)} evidence carries the measurement through REPORT_DATA (the preimage) only; no PCR`,
          ),
    );
    return;
  }
  if (m.pcr === undefined || m.pcr_before === undefined) {
    checks.push(
      hasPcr
        ? fail('measurement.pcr', 'MEASUREMENT_MALFORMED', 'pcr and pcr_before must be given together')
        : check(
            'measurement.pcr',
            'absent',
            'NOT_SUPPLIED',
            'the gateway extended no measurement PCR (measurement_pcr: null): the quote does not cover the measurement',
          ),
    );
    if (!hasPcr) {
      notes.push(
        'The TPM quote does not cover the gateway measurement (no measurement PCR): only the binding preimage carries it.',
      );
    }
    return;
  }
  let before: Buffer | null = null;
  try {
    before = fromB64u(m.pcr_before);
  } catch {
    before = null;
  }
  if (before?.length !== 32) {
    checks.push(fail('measurement.pcr', 'MEASUREMENT_MALFORMED', 'pcr_before is not 32 bytes of base64url'));
    return;
  }
  const quotedValue = input.tpm.values.get(m.pcr);
  if (!input.tpm.pcrs.includes(m.pcr) || !quotedValue) {
    checks.push(
      fail(
        'measurement.pcr',
        'MEASUREMENT_PCR_NOT_QUOTED',
        `measurement PCR ${m.pcr} is not in the quote selection [${input.tpm.pcrs.join(', ')}]${input.tpm.pcrs.includes(m.pcr) ? ' with a value' : ''}`,
      ),
    );
    return;
  }
  const events = eventLogReplay(m, digest);
  if (typeof events === 'string') {
    checks.push(fail('measurement.pcr', 'MEASUREMENT_EVENT_LOG_INVALID', events));
    return;
  }
  // The digest the inputs encode to (not the stated one): the PCR must hold the inputs' measurement.
  let expected = before;
  for (const d of events.digests) expected = sha256(expected, d);
  const fromReset = before.equals(Buffer.alloc(32));
  if (!quotedValue.equals(expected)) {
    checks.push(
      fail(
        'measurement.pcr',
        'MEASUREMENT_PCR_MISMATCH',
        `quoted PCR ${m.pcr} ${quotedValue.toString('hex')} ≠ ${events.logged ? `the replay of the ${events.digests.length} pcr_events from pcr_before` : 'SHA-256(pcr_before ‖ digest)'}${digestOk ? '' : ' (digest recomputed from the inputs)'} ${expected.toString('hex')}: the PCR was extended after the gateway without a logged event, the event log was altered, or the measurement is not what was extended`,
      ),
    );
  } else if (!input.tpm.quoted) {
    checks.push(fail('measurement.pcr', 'DEPENDENCY_FAILED', `PCR ${m.pcr} value is not the quoted one`));
  } else {
    checks.push(
      pass(
        'measurement.pcr',
        `quoted PCR ${m.pcr} = ${events.digests.length > 1 ? `the replay of ${events.digests.length} pcr_events from pcr_before (the first is this measurement)` : 'SHA-256(pcr_before ‖ digest)'}${fromReset ? '; pcr_before is zero: measured from reset' : '; pcr_before is not zero: earlier extends happened'}`,
      ),
    );
    if (events.later.length)
      notes.push(
        `Measurement PCR ${m.pcr} was extended ${events.later.length} more time(s) after this gateway's measurement, by the logged events ${events.later.map((e) => `${quoteUntrusted(e.event, 40)} ${quoteUntrusted(e.digest, 80)} (instance ${quoteUntrusted(e.instance, 64)}, unauthenticated text)`).join('; ')}: the replay accounts for them.`,
      );
    notes.push(
      fromReset
        ? `Measurement PCR ${m.pcr}: pcr_before is 32 zero bytes — measured from reset: nothing else was extended into PCR ${m.pcr} before the gateway since TPM reset.`
        : `Measurement PCR ${m.pcr}: pcr_before is not zero — earlier extends happened (a previous gateway run on this TPM boot, or other software); the quoted value shows only the last extend was this measurement.`,
    );
  }
}

/**
 * The digests to fold into pcr_before: the event log's (its first event must be this measurement,
 * `digest` recomputed from the inputs) or, without a log, the measurement alone. A string says
 * why the log is unusable.
 */
function eventLogReplay(
  m: MeasurementV1,
  digest: Buffer,
): { digests: Buffer[]; later: NonNullable<MeasurementV1['pcr_events']>; logged: boolean } | string {
  if (!m.pcr_events) return { digests: [digest], later: [], logged: false };
  const [first, ...later] = m.pcr_events;
  if (!first || first.digest !== `sha256:${digest.toString('hex')}`)
    return 'the first pcr_events entry is not this measurement (the digest its inputs encode to)';
  return {
    digests: [digest, ...later.map((e) => Buffer.from(e.digest.slice('sha256:'.length), 'hex'))],
    later,
    logged: true,
  };
}

/**
 * The `measurement.reference` check: the claim's `gateway_measurement` (which the binding
 * preimage, and so REPORT_DATA / the quote's qualifyingData, covers; `measurement.claim` ties it
 * to `evidence.measurement`) is one of the digests the reference values accept
 * (`gateway.measurements`, written by `cmcp measure` from a release and a config). Else
 * MEASUREMENT_NOT_ALLOWED — also when the claim carries no measurement. Never throws.
 */
export function gatewayReferenceCheck(
  claimMeasurement: string | null,
  accepted: readonly string[],
): CheckResult {
  if (claimMeasurement === null) {
    return fail(
      'measurement.reference',
      'MEASUREMENT_NOT_ALLOWED',
      'the reference values require a gateway measurement; the claim carries none',
    );
  }
  return accepted.includes(claimMeasurement)
    ? pass('measurement.reference', `gateway_measurement ${claimMeasurement} is one of the reference values`)
    : fail(
        'measurement.reference',
        'MEASUREMENT_NOT_ALLOWED',
        `gateway_measurement ${quoteUntrusted(claimMeasurement, 80)} is not one of the ${accepted.length} reference value${accepted.length === 1 ? '' : 's'} (other code, config, policy or catalog than the release measured)`,
      );
}
