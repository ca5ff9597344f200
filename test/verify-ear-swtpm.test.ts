/**
 * `cmcp verify --format ear` end to end on swtpm: a gateway with an enrolled AK (test AK CA)
 * measures itself into PCR 15 and issues a real claim; its audit bundle is exported over REST.
 * The relying party's EAR for that claim is affirming in every submodule when everything holds;
 * then one input at a time changes (trust anchor dropped, quote tampered, measurement pin wrong,
 * bundle entry altered, policy pin wrong) and the EAR moves where the mapping says
 * (docs/verification.md, "EAR output").
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runVerify, type VerifyCliOptions } from '@cmcp/verify/cli';
import type { Claim } from '@cmcp/verify/formats';
import { b64u, fromB64u } from '@cmcp/verify/formats';
import { jwtVerify } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runEnroll } from '../src/cli/tpm.js';
import { enrollmentSection, makeAkCa, writeTrustStore } from '../testing/attestation-ca.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, REPO_ROOT, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

type Submods = Record<string, { 'ear.status': string; 'ear.trustworthiness-vector': Record<string, number> }>;

let dir: string;
let sw: Awaited<ReturnType<typeof startSwtpm>>;
let cfg: TestConfig;
let trustStore: string;
let claim: Claim;
let bundle: { entries: { canonical: string }[] };
const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
let keyPath: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'cmcp-ear-swtpm-'));
  const ca = await makeAkCa(dir);
  trustStore = writeTrustStore(dir, ca);
  keyPath = join(dir, 'verifier.pem');
  writeFileSync(keyPath, privateKey.export({ format: 'pem', type: 'pkcs8' }));
  sw = await startSwtpm();
  const cdir = mkdtempSync(join(dir, 'gw-'));
  cfg = await writeConfig({
    dir: cdir,
    attestation: {
      provider: 'tpm',
      tcti: sw.tcti,
      ak_algorithm: 'ecc-p256',
      pcrs: [0, 7],
      enrollment: await enrollmentSection(cdir, ca),
    },
    extra: { policy: { bundle: join(REPO_ROOT, 'examples', 'policy') } },
    agents: [{ agent_id: 'alice', token: 'alice-token', attributes: { team: 'eng', roles: ['writer'] } }],
  });
  let err = '';
  expect(await runEnroll({ config: cfg.file }, { stdout: () => {}, stderr: (t) => (err += t) })).toBe(0);
  expect(err).toBe('');
  const gw = await startInProcess(cfg);
  try {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    const sid = s.body.session_id as string;
    claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body as Claim;
    bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body as typeof bundle;
  } finally {
    await gw.close();
  }
});
afterAll(async () => {
  await sw?.stop();
  if (cfg) cleanup(cfg.dir);
  rmSync(dir, { recursive: true, force: true });
});

/** Runs `cmcp verify --format ear` on (claim, bundle) and returns the verified EAR payload. */
async function ear(
  c: Claim,
  b: unknown,
  extra: Partial<VerifyCliOptions> = {},
): Promise<{ code: number; payload: Record<string, unknown> }> {
  const cp = join(dir, `claim-${randomBytes(4).toString('hex')}.json`);
  writeFileSync(cp, JSON.stringify(c));
  writeFileSync(`${cp}.audit.json`, JSON.stringify(b));
  let out = '';
  let err = '';
  const code = await runVerify(
    cp,
    {
      audit: `${cp}.audit.json`,
      trustStore,
      policyHash: claim.policy_bundle_hash as string,
      format: 'ear',
      earKey: keyPath,
      ...extra,
    },
    { stdout: (t) => (out += t), stderr: (t) => (err += t) },
  );
  expect(err).toBe('');
  const { payload, protectedHeader } = await jwtVerify(out.trim(), publicKey);
  expect(protectedHeader).toMatchObject({ alg: 'ES256', typ: 'eat+jwt' });
  return { code, payload };
}

const vector = (p: Record<string, unknown>) => {
  const out: Record<string, number> = {};
  for (const [s, a] of Object.entries(p.submods as Submods)) {
    for (const [k, v] of Object.entries(a['ear.trustworthiness-vector'])) out[`${s}/${k}`] = v;
  }
  return out;
};
const moved = (a: Record<string, number>, b: Record<string, number>) =>
  Object.keys(b).filter((k) => a[k] !== b[k]);
const status = (p: Record<string, unknown>, s: string) => (p.submods as Submods)[s]?.['ear.status'];

describe('EAR of a real claim (swtpm, enrolled AK, measured gateway)', () => {
  let base: Record<string, unknown>;
  beforeAll(async () => {
    const r = await ear(claim, bundle, {
      referenceValues: writeRv(claim.gateway_measurement as string),
    });
    expect(r.code).toBe(0);
    base = r.payload;
  });
  const writeRv = (m: string) => {
    const p = join(dir, `rv-${randomBytes(4).toString('hex')}.yaml`);
    writeFileSync(p, `version: 1\ngateway:\n  measurements: ["${m}"]\n`);
    return p;
  };

  it('everything holds: hardware-attested, every submodule affirming', () => {
    expect(base['cmcp.verdict']).toBe('hardware-attested');
    expect(base['cmcp.signer']).toBe('hardware-attested');
    expect(base['cmcp.accepted']).toBe(true);
    for (const s of ['platform', 'gateway', 'audit', 'policy']) expect(status(base, s), s).toBe('affirming');
    expect(vector(base)).toMatchObject({
      'platform/hardware': 2,
      'platform/instance-identity': 2,
      'gateway/instance-identity': 2,
      'gateway/executables': 2,
      'audit/file-system': 2,
      'policy/configuration': 2,
    });
  });

  it('no pinned root: only platform/hardware moves, to warning (-33)', async () => {
    const empty = join(dir, 'empty-trust.yaml');
    writeFileSync(empty, 'version: 1\nroots: []\n');
    const { payload } = await ear(claim, bundle, {
      trustStore: empty,
      referenceValues: writeRv(claim.gateway_measurement as string),
    });
    expect(moved(vector(base), vector(payload))).toEqual(['platform/hardware']);
    expect(vector(payload)['platform/hardware']).toBe(-33);
    expect(status(payload, 'platform')).toBe('warning');
  });

  it('gateway measurement pin wrong: only gateway/executables moves, to contraindicated', async () => {
    const { code, payload } = await ear(claim, bundle, {
      referenceValues: writeRv(`sha256:${'ab'.repeat(32)}`),
    });
    expect(code).toBe(1);
    expect(moved(vector(base), vector(payload))).toEqual(['gateway/executables']);
    expect(status(payload, 'gateway')).toBe('contraindicated');
  });

  it('an audit entry altered in the bundle: only audit/file-system moves, to contraindicated', async () => {
    const b = structuredClone(bundle);
    const e = b.entries[0] as { canonical: string };
    e.canonical = e.canonical.replace('"alice"', '"mallory"');
    expect(e.canonical).not.toBe(bundle.entries[0]?.canonical);
    const { payload } = await ear(claim, b, {
      referenceValues: writeRv(claim.gateway_measurement as string),
    });
    expect(moved(vector(base), vector(payload))).toEqual(['audit/file-system']);
    expect(status(payload, 'audit')).toBe('contraindicated');
  });

  it('policy hash pin wrong: only policy/configuration moves, to contraindicated', async () => {
    const { payload } = await ear(claim, bundle, {
      referenceValues: writeRv(claim.gateway_measurement as string),
      policyHash: `sha256:${'cd'.repeat(32)}`,
    });
    expect(moved(vector(base), vector(payload))).toEqual(['policy/configuration']);
    expect(vector(payload)['policy/configuration']).toBe(96);
  });

  it('the quote signature tampered: platform/hardware is 99, and so is gateway/instance-identity (the claim signature covers the evidence)', async () => {
    const t = structuredClone(claim);
    const tpm = t.evidence.tpm as { signature: string };
    const sig = fromB64u(tpm.signature);
    sig[sig.length - 3] = (sig[sig.length - 3] as number) ^ 0x01;
    tpm.signature = b64u(sig);
    const { payload } = await ear(t, bundle, {
      referenceValues: writeRv(claim.gateway_measurement as string),
    });
    const v = vector(payload);
    expect(v['platform/hardware']).toBe(99);
    expect(v['gateway/instance-identity']).toBe(99);
    const contra = Object.keys(v).filter((k) => (v[k] as number) >= 96);
    expect(contra.sort()).toEqual(['gateway/instance-identity', 'platform/hardware']);
    expect(status(payload, 'audit')).toBe('affirming');
    expect(status(payload, 'policy')).toBe('affirming');
  });
});
