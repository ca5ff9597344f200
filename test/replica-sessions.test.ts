/**
 * A replica's sessions on PostgreSQL (src/session/service.ts over store/postgres/session-store.ts) with three replicas, each
 * its own lease, key and attestation provider (the software one: it binds nothing, so sessions
 * are signed-only), on a real throw-away PostgreSQL: a session opened through one replica is
 * resolved, used and closed through the others; its claim verifies with its bundle and the
 * verifier's challenge; a closed session's claim is the same through every replica.
 */
import { generateKeyPairSync } from 'node:crypto';
import { verifyClaim } from '@cmcp/verify';
import { ed25519PublicJwk, jwkThumbprint, sha256Hex } from '@cmcp/verify/formats';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SessionService } from '../src/session/service.js';
import type { GatewayKey } from '../src/session/types.js';
import { chainBundle } from '../src/store/postgres/chain.js';
import { PostgresSessionStore } from '../src/store/postgres/session-store.js';
import { SoftwareProvider } from '../src/tee/provider.js';
import { type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';
import { type PgReplica, postgresEngine } from './harness/store-engines.js';

const withPostgres = hasPostgres();
const log = pino({ level: 'silent' });
const FACTS = {
  gatewayMeasurement: null,
  policyBundleHash: null,
  catalogHash: null,
  enforcementMode: 'none',
};
let server: PostgresInstance | null = null;
let engine: Awaited<ReturnType<typeof postgresEngine>>;
let sessions: SessionService[] = [];

function newKey(): GatewayKey {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = ed25519PublicJwk(privateKey);
  return { privateKey, jwk, thumbprint: jwkThumbprint(jwk) };
}

beforeAll(async () => {
  if (!withPostgres) return;
  server = await startPostgres();
  engine = await postgresEngine(server, 'replica_sessions_1');
  sessions = engine.replicas.map(
    (r: PgReplica) =>
      new SessionService(
        new PostgresSessionStore(r.pool, r.fence),
        newKey(),
        FACTS,
        new SoftwareProvider(),
        log,
        { limits: { defaultMaxCalls: 1000, defaultMaxAgeS: 3600 } },
      ),
  );
}, 60_000);
afterAll(async () => {
  await engine?.close();
  await server?.stop();
});

const s = (i: number) => sessions[i] as SessionService;

let calls = 0;
async function call(i: number, sessionId: string, toolName = 'echo'): Promise<void> {
  const w = (engine.replicas[i] as PgReplica).writes;
  const callId = `call-${++calls}`;
  const attempt = {
    callId,
    method: 'tools/call',
    upstream: 'up',
    agentId: 'alice',
    sessionId,
    executionId: null,
    toolName,
    requestPayloadHash: null,
    workflowId: null,
  };
  await w.write({ kind: 'attempt', attempt, raiseSensitivity: null });
  await w.write({
    kind: 'terminal',
    sessionId,
    entry: {
      entry_type: 'tool_call',
      call_id: callId,
      agent_id: 'alice',
      session_id: sessionId,
      tool_name: toolName,
    },
    disposition: 'completed',
    execution: null,
  });
}

describe.skipIf(!withPostgres)("a replica's sessions", () => {
  it('opened through replica 0, used through all three, closed through replica 1: the claim verifies; every replica answers it', async () => {
    const created = await s(0).create('alice', { challenge: 'nonce-1' });
    expect(created.binding.status).toBe('absent');
    for (const i of [1, 2]) expect((await s(i).resolve('alice', created.session_id)).status).toBe('open');
    await Promise.all([0, 1, 2, 0, 1, 2].map((i) => call(i, created.session_id)));
    const claim = await s(1).closeAwaited('alice', created.session_id);
    const bundle = await chainBundle(engine.admin, created.session_id, created.session_id);
    const report = verifyClaim(claim, { bundle, expectedChallenge: 'nonce-1' });
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(report.verdict).toBe('signed-only');
    expect(claim.counters.tool_calls).toBe(6);
    expect(claim.binding.preimage.challenge).toBe('nonce-1');
    expect(claim.binding.preimage.chain_root).toBe(created.chain_root);
    const texts = await Promise.all(
      [0, 1, 2].map(async (i) => await s(i).claimText('alice', created.session_id)),
    );
    for (const t of texts) expect(JSON.parse(t.toString('utf8'))).toEqual(claim);
    expect(await s(2).closeAwaited('alice', created.session_id)).toEqual(claim);
    // Closed, it is still unknown to another agent through every replica.
    for (const i of [0, 1, 2])
      await expect(s(i).closeText('bob', created.session_id)).rejects.toMatchObject({
        code: 'UNKNOWN_SESSION',
      });
    // The close route's answer for the closed session: the stored text, byte for byte, through every replica.
    for (const i of [0, 1, 2])
      expect((await s(i).closeText('alice', created.session_id)).equals(texts[0] as Buffer)).toBe(true);
    await expect(s(2).resolve('alice', created.session_id)).rejects.toMatchObject({ code: 'SESSION_CLOSED' });
  }, 60_000);

  it('each preimage names the newest claim of the shared chain when its session opened, whichever replica issued it', async () => {
    const a = await s(0).create('alice');
    const b = await s(1).create('alice');
    const claimB = await s(2).closeAwaited('alice', b.session_id);
    const c = await s(2).create('alice');
    const claimA = await s(1).closeAwaited('alice', a.session_id);
    const claimC = await s(0).closeAwaited('alice', c.session_id);
    expect(claimB.binding.preimage.opened_after_claim).toBe(claimA.binding.preimage.opened_after_claim);
    expect(claimC.binding.preimage.opened_after_claim).toBe(claimB.claim_sequence);
    expect(claimA.claim_sequence).toBe(claimB.claim_sequence + 1);
    expect(claimC.claim_sequence).toBe(claimA.claim_sequence + 1);
    for (const x of [claimA, claimB, claimC])
      expect(verifyClaim(x).checks.filter((k) => k.status === 'fail')).toEqual([]);
  }, 60_000);

  it("another agent's session is unknown through every replica; an open one has no claim yet", async () => {
    const created = await s(2).create('alice');
    for (const i of [0, 1, 2]) {
      await expect(s(i).resolve('bob', created.session_id)).rejects.toMatchObject({
        code: 'UNKNOWN_SESSION',
      });
      await expect(s(i).closeAwaited('bob', created.session_id)).rejects.toMatchObject({
        code: 'UNKNOWN_SESSION',
      });
      await expect(s(i).closeText('bob', created.session_id)).rejects.toMatchObject({
        code: 'UNKNOWN_SESSION',
      });
      await expect(s(i).claimText('alice', created.session_id)).rejects.toMatchObject({
        code: 'SESSION_OPEN',
      });
    }
    await expect(s(0).resolve('alice', 'no-such-session')).rejects.toMatchObject({ code: 'UNKNOWN_SESSION' });
  }, 60_000);

  it("closed through the replica that opened it, the claim carries that replica's stored binding record", async () => {
    const created = await s(0).create('alice');
    const claim = await s(0).closeAwaited('alice', created.session_id);
    const row = await new PostgresSessionStore(
      (engine.replicas[0] as PgReplica).pool,
      (engine.replicas[0] as PgReplica).fence,
    ).session(created.session_id);
    expect(claim.evidence).toEqual(JSON.parse(row?.binding_json ?? '{}').evidence);
    expect(claim.evidence.reason).not.toBe('GATEWAY_KEY_ROTATED');
  }, 60_000);

  it("the close route's closeText of an open session issues its claim and answers the stored text; again, the same bytes", async () => {
    const created = await s(1).create('alice');
    // A name whose JCS holds escapes and multi-byte UTF-8 (in the bundle: a claim of version 2
    // carries the tree head and counters, not the transcript).
    const name = `é😀 "q" \\ tab\t nl\n \u2028 ${'long'.repeat(17_500)}`;
    await call(1, created.session_id, name);
    const issued = await s(1).closeText('alice', created.session_id);
    const stored = await s(0).claimText('alice', created.session_id);
    expect(issued.equals(stored)).toBe(true);
    const row = await engine.admin.query<{ canonical: string; claim_hash: string }>(
      'SELECT canonical, claim_hash FROM claims WHERE session_id = $1',
      [created.session_id],
    );
    expect(stored.equals(Buffer.from(row.rows[0]?.canonical ?? '', 'utf8'))).toBe(true);
    expect(sha256Hex(stored)).toBe(row.rows[0]?.claim_hash);
    const claim = JSON.parse(issued.toString('utf8'));
    expect(claim.audit_chain.chain_id).toBe(created.session_id);
    expect(claim.counters.tool_calls).toBe(1);
    expect(claim.tree_head.size).toBe(claim.audit_chain.length);
    expect((await s(2).closeText('alice', created.session_id)).equals(stored)).toBe(true);
  }, 60_000);
});
