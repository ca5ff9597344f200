/**
 * A signed policy reload is measured again (docs/spec/measurement.md#after-a-policy-reload), end to end on
 * swtpm with a real gateway: the reload through the operator route recomputes the gateway
 * measurement with the new bundle hash, records a `gateway_measurement` entry (trigger
 * `policy_reload`) and extends the new digest into the measurement PCR; the next session's claim
 * names the new measurement and verifies with every measurement check passing
 * (PCR = SHA-256(pcr_before ‖ digest), pcr_before being the PCR value just before the reload's
 * extend). Claims of sessions bound before the reload still verify with their own evidence.
 */
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { VerificationReport } from '@cmcp/verify';
import { verifyClaim } from '@cmcp/verify';
import type { Claim, MeasurementJson } from '@cmcp/verify/formats';
import { b64u, fromB64u } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { measurementDigest, pcrExtend } from '../src/measure/index.js';
import { hashBundleDir, isBundleFile } from '../src/policy/bundle.js';
import { generatePolicyKey, signBundleHash } from '../src/policy/signature.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import {
  cleanup,
  everythingUpstream,
  REPO_ROOT,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const EXAMPLE = join(REPO_ROOT, 'examples', 'policy');
const OP = 'operator-token-1';
const MEASUREMENT_CHECKS = ['measurement.digest', 'measurement.claim', 'measurement.pcr'];
const key = generatePolicyKey();
const tmp: string[] = [];

/** The example bundle at `version`. */
function bundle(version: number): string {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-remeasure-'));
  tmp.push(dir);
  cpSync(EXAMPLE, dir, { recursive: true });
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version, description: `v${version}` }));
  return dir;
}

function reloadBody(dir: string): Record<string, unknown> {
  const files: Record<string, string> = {};
  for (const n of readdirSync(dir).filter(isBundleFile))
    files[n] = readFileSync(join(dir, n)).toString('base64url');
  return { files, signature: signBundleHash(hashBundleDir(dir), key.privatePem) };
}

const failed = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => `${c.id} ${c.reason_code}: ${c.detail}`);
const statusOf = (r: VerificationReport, id: string) => r.checks.find((c) => c.id === id)?.status;
const measurementOf = (c: Claim) => c.evidence.measurement as MeasurementJson;
const measurementEntries = (gw: Gateway) =>
  gw.chain.entries('gateway').filter((e) => e.entry_type === 'gateway_measurement');

let sw: Awaited<ReturnType<typeof startSwtpm>>;
let cfg: TestConfig;
let gw: Gateway;
const v1 = bundle(1);

beforeAll(async () => {
  sw = await startSwtpm();
  cfg = await writeConfig({
    upstreams: [everythingUpstream('everything')],
    agents: [{ agent_id: 'alice', token: 'alice-token', attributes: { team: 'eng', roles: ['writer'] } }],
    operators: [{ operator_id: 'root', token: OP }],
    attestation: { provider: 'tpm', tcti: sw.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
    extra: {
      policy: { bundle: v1, signing_key: key.publicRaw },
      catalog: { file: join(REPO_ROOT, 'examples', 'catalog.json'), relist_interval_s: 0 },
    },
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  await sw?.stop();
  if (cfg) cleanup(cfg.dir);
  for (const d of tmp) rmSync(d, { recursive: true, force: true });
});

const openSession = async (): Promise<string> => {
  const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
  expect(s.status).toBe(201);
  expect(s.body.binding.status).toBe('bound');
  const echo = await rpc(gw.url, 'alice-token', {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: {
      name: 'everything.echo',
      arguments: { message: 'hi' },
      _cmcp: { session_id: s.body.session_id },
    },
  });
  expect(echo.body.result.content[0].text).toContain('hi');
  return s.body.session_id as string;
};
const claimOf = async (sessionId: string): Promise<Claim> =>
  (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sessionId}/claim`)).body as Claim;

/** Verifies a claim: no failed check, all three measurement checks pass, hardware-unanchored. */
function expectVerified(claim: Claim, policyHash: string): VerificationReport {
  const r = verifyClaim(claim, { expectedPolicyHash: policyHash });
  expect(failed(r)).toEqual([]);
  expect(r.verdict).toBe('hardware-unanchored');
  for (const id of MEASUREMENT_CHECKS) expect(statusOf(r, id), id).toBe('pass');
  expect(measurementOf(claim).inputs.policy_bundle_hash).toBe(policyHash);
  expect(claim.policy_bundle_hash).toBe(policyHash);
  expect(r.notes.join('\n')).not.toMatch(/reloaded after start-up/);
  return r;
}

describe('a signed policy reload re-measures the gateway into the measurement PCR (swtpm)', () => {
  it('the next session binds the new measurement; sessions bound before the reload still verify', async () => {
    const startUp = measurementEntries(gw);
    expect(startUp).toHaveLength(1);
    expect(startUp[0]?.detail).toMatchObject({
      trigger: 'start-up',
      inputs: { policy_bundle_hash: hashBundleDir(v1) },
    });
    const firstDigest = gw.facts.gatewayMeasurement as string;

    // A session bound (and closed) before the reload, and one still open when the reload comes.
    const before = await openSession();
    await rest(gw.url, 'alice-token', 'POST', `/sessions/${before}/close`);
    const open = await openSession();

    const v2 = bundle(2);
    const r = await rest(gw.url, OP, 'POST', '/operator/policy/reload', reloadBody(v2));
    expect(r.status).toBe(200);
    expect(r.body.bundle_hash).toBe(hashBundleDir(v2));
    expect(r.body.sessions_closed.map((s: { session_id: string }) => s.session_id)).toEqual([open]);
    const secondDigest = r.body.gateway_measurement as string;
    expect(secondDigest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(secondDigest).not.toBe(firstDigest);
    expect(gw.facts.gatewayMeasurement).toBe(secondDigest);

    // Claims of sessions bound before the reload: their own (v1) measurement and PCR state.
    const c0 = await claimOf(before);
    const c1 = await claimOf(open);
    for (const c of [c0, c1]) {
      expectVerified(c, hashBundleDir(v1));
      expect(c.gateway_measurement).toBe(firstDigest);
    }

    // The next session: the re-measured gateway, extended on top of the start-up measurement.
    const after = await openSession();
    await rest(gw.url, 'alice-token', 'POST', `/sessions/${after}/close`);
    const c2 = await claimOf(after);
    expectVerified(c2, hashBundleDir(v2));
    const m1 = measurementOf(c1);
    const m2 = measurementOf(c2);
    expect(c2.gateway_measurement).toBe(secondDigest);
    expect(c2.binding.preimage.gateway_measurement).toBe(secondDigest);
    expect(m2.digest).toBe(secondDigest);
    // Only the policy input changed: code, lockfile, catalog and config are what the process started with.
    expect({ ...m2.inputs, policy_bundle_hash: null }).toEqual({ ...m1.inputs, policy_bundle_hash: null });
    expect(m2.pcr).toBe(15);
    // pcr_before of the reload's extend = the PCR after the start-up extend.
    const startUpAfter = pcrExtend(fromB64u(m1.pcr_before as string), measurementDigest(m1.inputs));
    expect(m2.pcr_before).toBe(b64u(startUpAfter));
    expect(c2.evidence.tpm?.pcr_values['15']).toBe(
      b64u(pcrExtend(startUpAfter, measurementDigest(m2.inputs))),
    );

    // Recorded in the gateway chain, with the provider's extend.
    const entries = measurementEntries(gw);
    expect(entries).toHaveLength(2);
    expect(entries[1]?.detail).toMatchObject({
      trigger: 'policy_reload',
      digest: secondDigest,
      previous_digest: firstDigest,
      policy_version: 2,
      inputs: { policy_bundle_hash: hashBundleDir(v2) },
      provider: 'tpm',
      provider_remeasure: { ok: true, measurement_pcr: 15, pcr_before: m2.pcr_before },
    });
  });

  it('a second reload is extended again; the next claim verifies against the new PCR value', async () => {
    const previous = gw.facts.gatewayMeasurement as string;
    const prevEntry = measurementEntries(gw).at(-1);
    const v3 = bundle(3);
    const r = await rest(gw.url, OP, 'POST', '/operator/policy/reload', reloadBody(v3));
    expect(r.status).toBe(200);
    const s = await openSession();
    await rest(gw.url, 'alice-token', 'POST', `/sessions/${s}/close`);
    const c = await claimOf(s);
    expectVerified(c, hashBundleDir(v3));
    expect(c.gateway_measurement).toBe(r.body.gateway_measurement);
    expect(c.gateway_measurement).not.toBe(previous);
    expect(measurementOf(c).pcr_before).toBe(
      (prevEntry?.detail?.provider_remeasure as { pcr_after?: string } | undefined)?.pcr_after,
    );
    expect(measurementEntries(gw).at(-1)?.detail).toMatchObject({
      trigger: 'policy_reload',
      previous_digest: previous,
      policy_version: 3,
    });
  });
});
