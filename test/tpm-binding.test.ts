/**
 * The attested path end to end on swtpm: a gateway with the TPM provider binds each
 * session's chain root into a quote (qualifyingData = SHA-256(REPORT_DATA)), the closed
 * session yields a claim, and the offline verifier checks claim, quote and bundle. Tampering
 * each part fails with its own reason; a TPM that is gone at session creation leaves the
 * gateway serving and the claim signed-only.
 */

import type { VerificationReport } from '@cmcp/verify';
import { verifyClaim } from '@cmcp/verify';
import type { AuditBundle } from '@cmcp/verify/formats';
import { b64u, type Claim, fromB64u, signClaim } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let up: CountingServer;
let tpm: Awaited<ReturnType<typeof startSwtpm>>;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  up = await startCountingServer();
  tpm = await startSwtpm();
  cfg = await writeConfig({
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    attestation: { provider: 'tpm', tcti: tpm.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 1, 2, 7] },
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  await tpm?.stop();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

const failed = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code);

async function closedSession(
  token = 'alice-token',
): Promise<{ claim: Claim; bundle: AuditBundle; sid: string }> {
  const s = await rest(gw.url, token, 'POST', '/sessions', {});
  expect(s.status).toBe(201);
  const sid = s.body.session_id as string;
  await rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'c.record', arguments: { a: 1 }, _cmcp: { session_id: sid } },
  });
  await rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 2,
    method: 'tools/call',
    params: { name: 'c.nope', arguments: {}, _cmcp: { session_id: sid } },
  });
  const claim = (await rest(gw.url, token, 'POST', `/sessions/${sid}/close`)).body as Claim;
  const bundle = (await rest(gw.url, token, 'GET', `/sessions/${sid}/audit`)).body as AuditBundle;
  return { claim, bundle, sid };
}

describe('TPM-bound sessions', () => {
  let a: { claim: Claim; bundle: AuditBundle; sid: string };
  beforeAll(async () => {
    a = await closedSession();
  });

  it('outside dev mode a request without a token is refused', async () => {
    const r = await rpc(gw.url, null, { jsonrpc: '2.0', id: 1, method: 'ping' });
    expect(r.status).toBe(401);
    expect(r.headers.get('www-authenticate')).toMatch(/^Bearer/);
  });

  it('binds the chain root into a quote and verifies as hardware-unanchored', () => {
    expect(a.claim.evidence.status).toBe('bound');
    // PCR 15 carries the gateway measurement and is in every quote (docs/spec/measurement.md#pcr-extend-tpm).
    expect(a.claim.evidence.tpm?.pcr_selection).toEqual({ hash: 'sha256', pcrs: [0, 1, 2, 7, 15] });
    expect(a.claim.binding.preimage.chain_root).toBe(a.claim.audit_chain.root);
    const r = verifyClaim(a.claim, { bundle: a.bundle });
    expect(failed(r)).toEqual([]);
    expect(r.verdict).toBe('hardware-unanchored');
    const ids = r.checks.filter((c) => c.status === 'pass').map((c) => c.id);
    expect(ids).toContain('claim.signature');
    expect(r.checks.find((c) => c.id === 'evidence.anchor')?.status).toBe('absent');
  });

  it('the claim and bundle are served from the database after a restart', async () => {
    await gw.close();
    gw = await startInProcess(cfg);
    const claim = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${a.sid}/claim`)).body;
    const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${a.sid}/audit`)).body;
    expect(claim).toEqual(a.claim);
    expect(bundle.entries).toEqual(a.bundle.entries);
    expect(verifyClaim(claim, { bundle }).verdict).toBe('hardware-unanchored');
  });

  it('an edited audit entry fails with ENTRY_HASH_MISMATCH', () => {
    const b = structuredClone(a.bundle);
    const e = b.entries[2]!;
    e.canonical = e.canonical.replace('"c.record"', '"c.recorx"');
    const r = verifyClaim(a.claim, { bundle: b });
    expect(r.verdict).toBe('invalid');
    expect(failed(r)).toContain('ENTRY_HASH_MISMATCH');
  });

  it('a flipped quote byte fails the quote signature', () => {
    const c = structuredClone(a.claim);
    const attest = fromB64u(c.evidence.tpm!.attest);
    attest[attest.length - 5]! ^= 0x01;
    c.evidence.tpm!.attest = b64u(attest);
    const resigned = signClaim((({ signature: _s, ...u }) => u)(c), gw.key.privateKey);
    // Signed by a different key than the one the quote binds: re-derive thumbprint first.
    const r = verifyClaim(resigned, { bundle: a.bundle });
    expect(r.verdict).toBe('invalid');
    expect(failed(r)).toContain('QUOTE_SIGNATURE_INVALID');
  });

  it('a quote for another session fails with QUOTE_NONCE_MISMATCH', async () => {
    const other = await closedSession();
    // The gateway key is the same across both sessions in this process: re-sign the swapped claim
    // so that only the binding differs.
    const c = structuredClone(a.claim);
    c.evidence.tpm = other.claim.evidence.tpm;
    const resigned = signClaim((({ signature: _s, ...u }) => u)(c), gw.key.privateKey);
    const r = verifyClaim(resigned, { bundle: a.bundle });
    expect(r.verdict).toBe('invalid');
    expect(failed(r)).toContain('QUOTE_NONCE_MISMATCH');
    expect(failed(r)).not.toContain('QUOTE_SIGNATURE_INVALID');
  });

  it('a truncated bundle fails with BUNDLE_TRUNCATED', () => {
    const b = structuredClone(a.bundle);
    b.entries.pop();
    const r = verifyClaim(a.claim, { bundle: b });
    expect(r.verdict).toBe('invalid');
    expect(failed(r)).toContain('BUNDLE_TRUNCATED');
  });

  it('the four tamperings give four distinct reasons', () => {
    expect(
      new Set(['ENTRY_HASH_MISMATCH', 'QUOTE_SIGNATURE_INVALID', 'QUOTE_NONCE_MISMATCH', 'BUNDLE_TRUNCATED'])
        .size,
    ).toBe(4);
  });
});

describe('binding failure', () => {
  it('with swtpm stopped, the gateway keeps serving, records attestation_binding_failed, and verifies signed-only', async () => {
    const t2 = await startSwtpm();
    const c2 = await writeConfig({
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
      attestation: { provider: 'tpm', tcti: t2.tcti, ak_algorithm: 'rsa2048', pcrs: [0, 7] },
    });
    const g2 = await startInProcess(c2);
    try {
      await t2.stop();
      const s = await rest(g2.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.status).toBe(201);
      expect(s.body.binding.status).toBe('absent');
      const sid = s.body.session_id;
      const call = await rpc(g2.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: { name: 'c.record', arguments: { a: 'after-tpm-loss' }, _cmcp: { session_id: sid } },
      });
      expect(call.body.result.content[0].text).toMatch(/^count=/);
      const entries = g2.chain.entries(sid);
      const failedEntry = entries.find((e) => e.entry_type === 'attestation_binding_failed');
      expect(failedEntry?.detail?.reason).toBeTruthy();
      const claim = (await rest(g2.url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body;
      const bundle = (await rest(g2.url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body;
      expect(claim.evidence.status).toBe('absent');
      const r = verifyClaim(claim, { bundle });
      expect(r.verdict).toBe('signed-only');
      expect(failed(r)).toEqual([]);
    } finally {
      await g2.close();
      cleanup(c2.dir);
    }
  });
});
