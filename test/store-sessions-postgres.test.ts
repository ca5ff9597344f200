/**
 * The session commands on PostgreSQL (src/store/postgres/session-store.ts, docs/replicas.md):
 * three replicas, each its own pool and fenced lease, on a real throw-away PostgreSQL
 * (testing/postgres.ts). A session opened through one replica takes calls through all three and
 * is closed through another, whose claim verifies with its bundle (@cmcp/verify verifyClaim);
 * closes racing through different replicas make one claim chain; two closes of one session
 * issue one claim; a replica whose lease is lost writes nothing (LEASE_LOST).
 */
import { generateKeyPairSync, type KeyObject } from 'node:crypto';
import { verifyClaim } from '@cmcp/verify';
import {
  bindingDigest,
  ed25519PublicJwk,
  entryLeafHash,
  GATEWAY_CHAIN_ID,
  jwkThumbprint,
  reportData,
  type SessionBindingPreimage,
  sha256Hex,
  treeRoot,
} from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ClaimInputs, SessionBindingRecord } from '../src/claim/build.js';
import { claimIssuer } from '../src/claim/issuer.js';
import { claimBinding } from '../src/session/claim-binding.js';
import type { SessionRow } from '../src/session/types.js';
import type { AttemptStart } from '../src/store/port.js';
import { chainBundle, chainEntries } from '../src/store/postgres/chain.js';
import { PostgresSessionStore } from '../src/store/postgres/session-store.js';
import { type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';
import { type PgReplica, postgresEngine } from './harness/store-engines.js';

const withPostgres = hasPostgres();
const FACTS = {
  gatewayMeasurement: null,
  policyBundleHash: null,
  catalogHash: null,
  enforcementMode: 'enforcing',
};
let server: PostgresInstance | null = null;
let engine: Awaited<ReturnType<typeof postgresEngine>>;
let stores: PostgresSessionStore[] = [];

/** Closes through `store` with the claim the replica session service issues (claim/issuer.ts). */
const closeWith = (store: PostgresSessionStore, sid: string, inputs: (row: SessionRow) => ClaimInputs) =>
  store.closeSession(sid, 'requested', claimIssuer(inputs, store.fence));

/** Each replica's own Ed25519 gateway key (made at start, as a gateway does). */
const keys = [0, 1, 2].map(() => generateKeyPairSync('ed25519').privateKey);
const b64u = (b: Buffer) => b.toString('base64url');
const thumb = (i: number) => b64u(jwkThumbprint(ed25519PublicJwk(keys[i] as KeyObject)));

beforeAll(async () => {
  if (!withPostgres) return;
  server = await startPostgres();
  engine = await postgresEngine(server, 'sessions_1');
  stores = engine.replicas.map((r: PgReplica) => new PostgresSessionStore(r.pool, r.fence));
}, 60_000);
afterAll(async () => {
  await engine?.close();
  await server?.stop();
});

/**
 * A binding record as SessionService stores it, for replica `i`'s key: the chain root and the
 * verifier's challenge under that key, the evidence absent (the software provider binds nothing),
 * REPORT_DATA = thumbprint ‖ SHA-256(JCS(preimage)) (docs/spec/binding.md).
 */
function bindingOf(
  i: number,
  sessionId: string,
  chainRoot: string,
  challenge: string | null,
): SessionBindingRecord {
  const preimage: SessionBindingPreimage = {
    domain: 'cmcp.session-binding',
    version: 1,
    session_id: sessionId,
    chain_root: chainRoot,
    key_thumbprint: thumb(i),
    gateway_measurement: null,
    policy_bundle_hash: null,
    catalog_hash: null,
    challenge,
  };
  const rd = reportData(jwkThumbprint(ed25519PublicJwk(keys[i] as KeyObject)), bindingDigest(preimage));
  return {
    preimage,
    evidence: {
      provider: 'software',
      status: 'absent',
      reason: 'NO_HARDWARE',
      report_data: b64u(rd),
      tpm: null,
    },
  };
}

/**
 * The claim inputs a closing replica `i` gives for a row, as SessionService builds them: its own
 * key, and the binding section of session/claim-binding.ts — the stored binding when it names
 * this key, else the opening's preimage under this key with the evidence absent (the claim is
 * signed-only: this key's hardware evidence did not bind that chain root).
 */
function inputsOf(i: number) {
  return (row: SessionRow): ClaimInputs => {
    const jwk = ed25519PublicJwk(keys[i] as KeyObject);
    return {
      sessionId: row.session_id,
      agentId: row.agent_id,
      binding: claimBinding(row, jwkThumbprint(jwk), FACTS, 'software'),
      key: keys[i] as KeyObject,
      jwk,
      enforcementMode: 'enforce',
    };
  };
}

let n = 0;
/** A session opened through replica `i`, its (absent) binding recorded as SessionService records it. */
async function open(i: number, challenge: string | null = null): Promise<string> {
  const sessionId = `session-${++n}`;
  const store = stores[i] as PostgresSessionStore;
  const genesis = await store.openSession({
    sessionId,
    agentId: 'agent-1',
    isDefault: false,
    provider: 'software',
    keyThumbprint: thumb(i),
  });
  const record = bindingOf(i, sessionId, genesis.entry_hash, challenge);
  await store.recordBinding(
    sessionId,
    {
      entry_type: 'attestation_binding_failed',
      session_id: sessionId,
      agent_id: 'agent-1',
      detail: { provider: 'software', reason: 'NO_HARDWARE', report_data: record.evidence.report_data },
    },
    record,
  );
  return sessionId;
}

let calls = 0;
/** One forwarded call's attempt and terminal through replica `i`. */
async function call(
  i: number,
  sessionId: string,
  tool = 'echo',
  outcome: { denied?: boolean; rules?: string[] | null; error_code?: string } = {},
): Promise<void> {
  const r = engine.replicas[i] as PgReplica;
  const a: AttemptStart = {
    callId: `call-${++calls}`,
    method: 'tools/call',
    upstream: 'upstream-a',
    agentId: 'agent-1',
    sessionId,
    executionId: null,
    toolName: tool,
    requestPayloadHash: null,
    workflowId: null,
  };
  await r.writes.write({ kind: 'attempt', attempt: a, raiseSensitivity: null });
  await r.writes.write({
    kind: 'terminal',
    sessionId,
    entry: {
      entry_type: 'tool_call',
      call_id: a.callId,
      agent_id: 'agent-1',
      session_id: sessionId,
      tool_name: tool,
      server_identity: 'upstream-a',
      policy_decision: outcome.denied ? 'deny' : 'allow',
      ...(outcome.rules !== undefined ? { policy_rule_matched: outcome.rules } : {}),
      ...(outcome.error_code ? { error_code: outcome.error_code } : {}),
    },
    disposition: outcome.denied ? 'not_attempted' : 'completed',
    execution: null,
  });
}

describe.skipIf(!withPostgres)('sessions on PostgreSQL, through any replica', () => {
  it('a session opened through replica 0, 3 × 10 concurrent calls through all three, closed through replica 2: its claim verifies with its bundle', async () => {
    const sid = await open(0, 'verifier-challenge-1');
    await Promise.all(Array.from({ length: 30 }, (_, k) => call(k % 3, sid)));
    const closed = await closeWith(stores[2] as PostgresSessionStore, sid, inputsOf(2));
    expect(closed.issued).toBe(true);
    const bundle = await chainBundle(engine.admin, sid, sid);
    const report = verifyClaim(closed.claim, { bundle, expectedChallenge: 'verifier-challenge-1' });
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(report.checks.find((c) => c.id === 'claim.signature')?.status).toBe('pass');
    expect(report.checks.find((c) => c.id === 'binding.challenge')?.status).toBe('pass');
    // Replica 0 bound the chain root under its key; replica 2 signs: signed-only, with the reason.
    expect(report.verdict).toBe('signed-only');
    expect(closed.claim.evidence).toMatchObject({ status: 'absent', reason: 'GATEWAY_KEY_ROTATED' });
    expect(closed.claim.cnf.jwk).toEqual(ed25519PublicJwk(keys[2] as KeyObject));
    expect(closed.claim.binding.preimage.chain_root).toBe(closed.claim.audit_chain.root);
    expect(closed.claim.counters.tool_calls).toBe(30);
    expect(closed.claim.audit_chain.length).toBe(33); // open, binding record, 30 calls, close
    const entries = await chainEntries(engine.admin, sid);
    expect(entries.map((e) => e.sequence_number)).toEqual(Array.from({ length: 33 }, (_, k) => k));
    const row = await (stores[1] as PostgresSessionStore).session(sid);
    expect(row?.status).toBe('closed');
    expect(row?.call_count).toBe(30);
    expect(row?.owner).toBe('replica-0');
    const stored = await (stores[1] as PostgresSessionStore).claim(sid);
    expect(stored?.canonical.equals(closed.canonical)).toBe(true);
  }, 60_000);

  it('a close reads its chain in pages (more than one, texts with escapes among them): the claim is the one its bundle gives', async () => {
    const sid = await open(0, 'paged-challenge');
    // Names the database must not take apart itself (a control character makes the stored
    // text hold a \u escape), quotes, backslashes, non-BMP; rules absent, null, listed.
    const names = ['echo', 'bell\u0007tool', '"quoted" \\ name', 'emoji 😀 \u2028', 'unit\u001fsep'];
    for (let k = 0; k < 70; k++)
      await call(k % 3, sid, names[k % names.length], {
        denied: k % 4 === 0,
        rules: k % 3 === 0 ? undefined : k % 3 === 1 ? null : ['rule-a', `rule-${k}`],
        ...(k % 7 === 0 ? { error_code: 'UPSTREAM_ERROR' } : {}),
      });
    const closed = await closeWith(stores[1] as PostgresSessionStore, sid, inputsOf(1));
    const bundle = await chainBundle(engine.admin, sid, sid);
    const report = verifyClaim(closed.claim, { bundle, expectedChallenge: 'paged-challenge' });
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(closed.claim.counters.tool_calls).toBe(70);
    expect(closed.claim.audit_chain.length).toBe(bundle.entries.length);
    // Claim version 2: the tree head of every entry, session_close included (the bundle is the transcript).
    expect('tree_head' in closed.claim && closed.claim.tree_head).toEqual({
      size: bundle.entries.length,
      root: treeRoot(bundle.entries.map((e) => entryLeafHash(e.entry_hash))).toString('hex'),
    });
    // This file's replicas name no writer, so /1; the writers read from the pages (a /2 claim)
    // are test/replica-serving.test.ts's, through three replica processes.
    expect(closed.claim.profile).toBe('cmcp.trace-claim/1');
  }, 60_000);

  it("a call after another replica's close is recorded in the gateway chain, not the closed session's", async () => {
    const sid = await open(1);
    await closeWith(stores[0] as PostgresSessionStore, sid, inputsOf(0));
    const gatewayBefore = (await chainEntries(engine.admin, GATEWAY_CHAIN_ID)).length;
    await call(2, sid);
    expect(await chainEntries(engine.admin, sid)).toHaveLength(3);
    expect(await chainEntries(engine.admin, GATEWAY_CHAIN_ID)).toHaveLength(gatewayBefore + 1);
  }, 60_000);

  it("a close whose binding names another replica's key than the closing one is refused, and writes nothing", async () => {
    const sid = await open(0);
    const opener = (row: SessionRow): ClaimInputs => ({
      ...inputsOf(2)(row),
      binding: JSON.parse(row.binding_json),
    });
    await expect(closeWith(stores[2] as PostgresSessionStore, sid, opener)).rejects.toThrow(
      /its binding names key/,
    );
    expect((await (stores[2] as PostgresSessionStore).session(sid))?.status).toBe('open');
    expect(await chainEntries(engine.admin, sid)).toHaveLength(2);
  }, 60_000);

  it('two replicas closing one session at once issue one claim; the other answers the stored one', async () => {
    const sid = await open(0);
    await call(1, sid);
    const [a, b] = await Promise.all([
      closeWith(stores[1] as PostgresSessionStore, sid, inputsOf(1)),
      closeWith(stores[2] as PostgresSessionStore, sid, inputsOf(2)),
    ]);
    expect([a.issued, b.issued].sort()).toEqual([false, true]);
    expect(a.canonical.equals(b.canonical)).toBe(true);
    const closes = (await chainEntries(engine.admin, sid)).filter((e) => e.entry_type === 'session_close');
    expect(closes).toHaveLength(1);
  }, 60_000);

  it('a close racing 30 calls through three replicas: the claim covers exactly the session chain, later calls go to the gateway chain', async () => {
    const sid = await open(0);
    const gatewayBefore = (await chainEntries(engine.admin, GATEWAY_CHAIN_ID)).length;
    const racing = Array.from({ length: 30 }, (_, k) => call(k % 3, sid));
    await new Promise((r) => setTimeout(r, 5));
    const closed = await closeWith(stores[1] as PostgresSessionStore, sid, inputsOf(1));
    await Promise.all(racing);
    const entries = await chainEntries(engine.admin, sid);
    expect(entries.at(-1)?.entry_type).toBe('session_close');
    expect(closed.claim.audit_chain.tip).toBe(entries.at(-1)?.entry_hash);
    expect(closed.claim.audit_chain.length).toBe(entries.length);
    const inSession = entries.filter((e) => e.entry_type === 'tool_call').length;
    expect(closed.claim.counters.tool_calls).toBe(inSession);
    const toGateway = (await chainEntries(engine.admin, GATEWAY_CHAIN_ID)).length - gatewayBefore;
    expect(inSession + toGateway).toBe(30);
    const report = verifyClaim(closed.claim, { bundle: await chainBundle(engine.admin, sid, sid) });
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
  }, 60_000);

  it('closes racing through three replicas make one claim chain: consecutive claim_sequence, each prev_claim_hash the one before', async () => {
    const sids = await Promise.all(Array.from({ length: 9 }, (_, k) => open(k % 3)));
    await Promise.all(sids.map((sid, k) => call((k + 1) % 3, sid)));
    await Promise.all(
      sids.map((sid, k) => closeWith(stores[k % 3] as PostgresSessionStore, sid, inputsOf(k % 3))),
    );
    const rows = (
      await engine.admin.query<{ claim_sequence: string; claim_hash: string; canonical: string }>(
        'SELECT claim_sequence::text AS claim_sequence, claim_hash, canonical FROM claims ORDER BY claims.claim_sequence',
      )
    ).rows;
    rows.forEach((r, k) => {
      expect(Number(r.claim_sequence)).toBe(k);
      expect(r.claim_hash).toBe(sha256Hex(Buffer.from(r.canonical, 'utf8')));
      const claim = JSON.parse(r.canonical);
      expect(claim.prev_claim_hash).toBe(k === 0 ? null : rows[k - 1]?.claim_hash);
    });
    expect(rows.length).toBeGreaterThanOrEqual(9);
  }, 60_000);

  it('a replica whose lease was taken over opens, records and closes nothing (LEASE_LOST)', async () => {
    const sid = await open(0);
    const r = engine.replicas[0] as PgReplica;
    await engine.admin.query(
      'UPDATE replica_leases SET lease_token = lease_token + 1 WHERE replica_id = $1',
      [r.id],
    );
    const stale = stores[0] as PostgresSessionStore;
    await expect(
      stale.openSession({
        sessionId: 'never',
        agentId: 'agent-1',
        isDefault: false,
        provider: 'none',
        keyThumbprint: 't',
      }),
    ).rejects.toMatchObject({ code: 'LEASE_LOST' });
    await expect(
      stale.appendEntries(GATEWAY_CHAIN_ID, [{ entry_type: 'operator_note' }]),
    ).rejects.toMatchObject({
      code: 'LEASE_LOST',
    });
    await expect(closeWith(stale, sid, inputsOf(0))).rejects.toMatchObject({
      code: 'LEASE_LOST',
    });
    expect(await stale.session('never')).toBeUndefined();
    expect((await stale.session(sid))?.status).toBe('open');
    expect(await chainEntries(engine.admin, 'never')).toEqual([]);
  }, 60_000);
});
