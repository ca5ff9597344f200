/**
 * The crash test's checks (testing/crash/check.ts) on a replicas' PostgreSQL database, read by
 * testing/crash/postgres-snapshot.ts, on a real throw-away PostgreSQL: three replicas (each its
 * own pool and lease, the store-level write and session commands) write a session used through
 * all of them and closed through another than the one that opened it, one call outliving the
 * close (its entry in the gateway chain, naming the session) — every rule holds; then
 * an attempt left open, a lease left live and an upstream run without its record are each
 * reported.
 */
import { generateKeyPairSync } from 'node:crypto';
import { ed25519PublicJwk, jcsDigest, jwkThumbprint } from '@cmcp/verify/formats';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SessionService } from '../src/session/service.js';
import type { GatewayKey } from '../src/session/types.js';
import { acquireLease, releaseLease } from '../src/store/postgres/leases.js';
import { PostgresSessionStore } from '../src/store/postgres/session-store.js';
import { PostgresWriteStore } from '../src/store/postgres/write-store.js';
import { SoftwareProvider } from '../src/tee/provider.js';
import { checkCrashSnapshot } from '../testing/crash/check.js';
import { readPostgresSnapshot } from '../testing/crash/postgres-snapshot.js';
import { type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { hasPostgres } from './harness/postgres.js';
import { type PgReplica, postgresEngine } from './harness/store-engines.js';

const withPostgres = hasPostgres();
const TOOL = 'up.work';
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
  engine = await postgresEngine(server, 'crash_check_1');
  sessions = engine.replicas.map(
    (r: PgReplica) =>
      new SessionService(
        new PostgresSessionStore(r.pool, r.fence),
        newKey(),
        FACTS,
        new SoftwareProvider(),
        pino({ level: 'silent' }),
        { limits: { defaultMaxCalls: 1000, defaultMaxAgeS: 3600 } },
      ),
  );
}, 60_000);
afterAll(async () => {
  await engine?.close();
  await server?.stop();
});

const replica = (i: number) => engine.replicas[i] as PgReplica;

function attemptOf(callId: string, sessionId: string, op: string) {
  return {
    callId,
    method: 'tools/call',
    upstream: 'up',
    agentId: 'alice',
    sessionId,
    executionId: null,
    toolName: TOOL,
    requestPayloadHash: jcsDigest({ name: TOOL, arguments: { op, ms: 1 } }),
    workflowId: null,
  };
}

/** One call through replica `i`: its attempt, then its completed terminal entry. @returns the entry's hash. */
async function call(
  i: number,
  sessionId: string,
  op: string,
): Promise<{ callId: string; entryHash: string }> {
  await begin(i, sessionId, op);
  return finish(i, sessionId, op);
}

async function begin(i: number, sessionId: string, op: string): Promise<void> {
  await replica(i).writes.write({
    kind: 'attempt',
    attempt: attemptOf(`call-${op}`, sessionId, op),
    raiseSensitivity: null,
  });
}

async function finish(
  i: number,
  sessionId: string,
  op: string,
): Promise<{ callId: string; entryHash: string }> {
  const callId = `call-${op}`;
  const entry = await replica(i).writes.write({
    kind: 'terminal',
    sessionId,
    entry: {
      entry_type: 'tool_call',
      call_id: callId,
      agent_id: 'alice',
      session_id: sessionId,
      tool_name: TOOL,
      request_payload_hash: jcsDigest({ name: TOOL, arguments: { op, ms: 1 } }),
    },
    disposition: 'completed',
    execution: null,
  });
  return { callId, entryHash: entry.entry_hash };
}

describe.skipIf(!withPostgres)('crash checks on a replicas’ PostgreSQL database', () => {
  it('hold for a session used through three replicas; an open attempt, a live lease and an unrecorded run are reported', async () => {
    const created = await (sessions[0] as SessionService).create('alice');
    const answered = [];
    for (const [i, op] of [
      [0, 'op-a'],
      [1, 'op-b'],
      [2, 'op-c'],
    ] as const)
      answered.push({ ...(await call(i, created.session_id, op)), errorCode: null });
    // op-d outlives the session's close (through another replica): its terminal entry goes to
    // the gateway chain, naming the session (docs/spec/audit-entries.md "Terminal entries").
    await begin(2, created.session_id, 'op-d');
    await (sessions[1] as SessionService).closeAwaited('alice', created.session_id);
    answered.push({ ...(await finish(2, created.session_id, 'op-d')), errorCode: null });
    const ran = ['op-a', 'op-b', 'op-c', 'op-d'].map((op) => ({ op, ms: 1 }));

    // Replicas 0 and 1 stop cleanly (their leases sealed); replica 2 is still live.
    for (const i of [0, 1]) await releaseLease(replica(i).pool, replica(i).fence);
    const live = checkCrashSnapshot(await readPostgresSnapshot(engine.url), TOOL, ran, answered);
    expect(live.violations).toEqual(['replica replica-2: lease left live']);

    await releaseLease(replica(2).pool, replica(2).fence);
    const clean = checkCrashSnapshot(await readPostgresSnapshot(engine.url), TOOL, ran, answered);
    expect(clean.violations).toEqual([]);
    expect(clean.counts).toMatchObject({
      chains: 2,
      claims: 1,
      claimVerdicts: { 'signed-only': 1 },
      answeredChecked: 4,
      upstreamRan: 4,
    });
    const snap = await readPostgresSnapshot(engine.url);
    const late = snap.entries.find((e) => JSON.parse(e.canonical).call_id === 'call-op-d');
    expect(late?.chain_id).toBe('gateway');
    // session_open, the binding's entry, three calls, session_close.
    expect(clean.counts.entries).toBeGreaterThanOrEqual(5);

    // What the rules catch: replica 2 back under a new lease, an attempt it leaves open, and an
    // upstream run no entry records.
    const { fence } = await acquireLease(replica(2).pool, {
      replicaId: 'replica-2',
      holder: 'test restart',
      keyThumbprint: 'thumb-2',
      ttlMs: 60_000,
    });
    await new PostgresWriteStore(replica(2).pool, fence).write({
      kind: 'attempt',
      attempt: attemptOf('left-open', created.session_id, 'op-left'),
      raiseSensitivity: null,
    });
    const broken = checkCrashSnapshot(
      await readPostgresSnapshot(engine.url),
      TOOL,
      [...ran, { op: 'never-recorded', ms: 1 }, { op: 'op-a', ms: 1 }],
      answered,
    );
    expect(broken.violations).toEqual(
      expect.arrayContaining([
        '1 call attempts left open',
        'replica replica-2: lease left live',
        'upstream ran never-recorded: 0 forwarded terminal entries',
        'op op-a reached the upstream 2 times',
      ]),
    );

    // The record-level rules on this engine too: the claim chain's first link, and an answer
    // whose entry says something else.
    const mutated = await readPostgresSnapshot(engine.url);
    const claim = mutated.claims[0] as { text: string };
    claim.text = JSON.stringify({ ...JSON.parse(claim.text), prev_claim_hash: 'a'.repeat(64) });
    const first = answered[0] as { callId: string; entryHash: string };
    expect(
      checkCrashSnapshot(mutated, TOOL, ran, [{ ...first, errorCode: 'CALL_INTERRUPTED', result: false }])
        .violations,
    ).toEqual(
      expect.arrayContaining([
        'claim_sequence 0: prev_claim_hash is not null',
        `answered call ${first.callId}: answer CALL_INTERRUPTED, entry completed/null: the error codes differ`,
      ]),
    );
  }, 60_000);
});
