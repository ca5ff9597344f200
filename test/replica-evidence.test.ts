/**
 * Every entry names its replica, and a claim carries every writer's evidence
 * (docs/replicas.md#replica-identity-in-entries, docs/spec/claims.md#replicas), on a real
 * throw-away PostgreSQL with three replicas, each its own lease, Ed25519 key and swtpm (the TPM
 * provider, ephemeral AK: evidence as strong as `hardware-unanchored`). Each replica binds its
 * key into its own quote at start; a session opened through one, written through all three and
 * closed through another yields a `/2` claim that verifies with every writer listed (a call
 * sealed by another replica after its replica's lease expired included: the sealer signs it); a tampered
 * writer signature, an entry by an unlisted replica, a replica whose evidence does not verify and
 * a `/2` claim presented as `/1` each fail with their own reason; `cmcp verify` agrees.
 */
import { execFile } from 'node:child_process';
import { generateKeyPairSync, sign } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import type { VerificationReport } from '@cmcp/verify';
import type { AuditBundle, AnyClaim as Claim } from '@cmcp/verify/formats';
import { canonicalJson, ed25519PublicJwk, jwkThumbprint } from '@cmcp/verify/formats';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyClaim } from '../packages/verify/src/claim.js';
import { treeHeadClaimSchema } from '../packages/verify/src/claim-schema.js';
import { attestReplica } from '../src/session/replica-start.js';
import { SessionService } from '../src/session/service.js';
import type { GatewayKey } from '../src/session/types.js';
import { migratePostgres } from '../src/store/migrations/postgres.js';
import { chainBundle } from '../src/store/postgres/chain.js';
import { acquireLease, type Fence } from '../src/store/postgres/leases.js';
import { recordReplicaStart } from '../src/store/postgres/replica-evidence.js';
import { sealExpiredReplica } from '../src/store/postgres/sealing.js';
import { PostgresSessionStore } from '../src/store/postgres/session-store.js';
import { openReplicaPool } from '../src/store/postgres/transaction.js';
import { PostgresWriteStore } from '../src/store/postgres/write-store.js';
import { TpmProvider } from '../src/tee/tpm-provider.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../testing/postgres.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { REPO_ROOT } from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';

const withPostgres = hasPostgres();
const log = pino({ level: 'silent' });
const FACTS = {
  gatewayMeasurement: null,
  policyBundleHash: null,
  catalogHash: null,
  enforcementMode: 'none',
};

interface TestReplica {
  id: string;
  key: GatewayKey;
  pool: pg.Pool;
  fence: Fence;
  writes: PostgresWriteStore;
  sessions: SessionService;
  provider: TpmProvider;
}

let server: PostgresInstance | null = null;
let admin: pg.Pool;
let url: string;
const tpms: Awaited<ReturnType<typeof startSwtpm>>[] = [];
const replicas: TestReplica[] = [];

function newKey(): GatewayKey {
  const { privateKey } = generateKeyPairSync('ed25519');
  const jwk = ed25519PublicJwk(privateKey);
  return { privateKey, jwk, thumbprint: jwkThumbprint(jwk) };
}

/** A replica with its own lease (its key the fence's writer) and swtpm; attested unless told not. */
async function startReplica(i: number, attest = true): Promise<TestReplica> {
  const key = newKey();
  const pool = openReplicaPool(url, { leaseTtlMs: 60_000, max: 6 });
  const id = `replica-${i}`;
  const { fence } = await acquireLease(pool, {
    replicaId: id,
    holder: `test ${i}`,
    keyThumbprint: key.thumbprint.toString('base64url'),
    ttlMs: 60_000,
    key: key.privateKey,
  });
  const tpm = await startSwtpm();
  tpms.push(tpm);
  const provider = new TpmProvider({ tcti: tpm.tcti, akAlgorithm: 'ecc-p256', pcrs: [0, 7] });
  await provider.start(null);
  if (attest)
    await attestReplica((m) => recordReplicaStart(pool, fence, m), fence, key, provider, FACTS, log);
  const store = new PostgresSessionStore(pool, fence);
  const r: TestReplica = {
    id,
    key,
    pool,
    fence,
    writes: new PostgresWriteStore(pool, fence),
    sessions: new SessionService(store, key, FACTS, provider, log, {
      limits: { defaultMaxCalls: 1000, defaultMaxAgeS: 3600 },
    }),
    provider,
  };
  replicas.push(r);
  return r;
}

beforeAll(async () => {
  if (!withPostgres) return;
  server = await startPostgres();
  url = await createDatabase(server, 'replica_evidence_1');
  admin = new pg.Pool({ connectionString: url, max: 2 });
  admin.on('error', () => undefined);
  const c = await admin.connect();
  try {
    await migratePostgres(c, 'replica_evidence_1');
  } finally {
    c.release();
  }
  for (const i of [0, 1, 2]) await startReplica(i);
}, 120_000);
afterAll(async () => {
  for (const r of replicas) {
    r.provider.close();
    await r.pool.end();
  }
  await admin?.end();
  for (const t of tpms) await t.stop();
  await server?.stop();
});

const rep = (i: number) => replicas[i] as TestReplica;
let calls = 0;

/** One call's attempt and terminal through replica `r` (the write commands a gateway issues). */
async function call(r: TestReplica, sessionId: string): Promise<void> {
  const callId = `call-${++calls}`;
  const attempt = {
    callId,
    method: 'tools/call',
    upstream: 'up',
    agentId: 'alice',
    sessionId,
    executionId: null,
    toolName: 'echo',
    requestPayloadHash: null,
    workflowId: null,
  };
  await r.writes.write({ kind: 'attempt', attempt, raiseSensitivity: null });
  await r.writes.write({
    kind: 'terminal',
    sessionId,
    entry: {
      entry_type: 'tool_call',
      call_id: callId,
      agent_id: 'alice',
      session_id: sessionId,
      tool_name: 'echo',
    },
    disposition: 'completed',
    execution: null,
  });
}

/** A session opened through `open`, one call through each of `writers`, closed through `close`. */
async function session(
  open: TestReplica,
  writers: TestReplica[],
  close: TestReplica,
): Promise<{ claim: Claim; bundle: AuditBundle }> {
  const created = await open.sessions.create('alice', { challenge: 'nonce-r' });
  await Promise.all(writers.map((w) => call(w, created.session_id)));
  const claim = await close.sessions.closeAwaited('alice', created.session_id);
  return { claim, bundle: await chainBundle(admin, created.session_id, created.session_id) };
}

const failed = (r: VerificationReport) =>
  r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code);
const detailOf = (r: VerificationReport, id: string) => r.checks.find((c) => c.id === id)?.detail ?? '';

/** `claim` changed by `edit` and signed again by `key` (what only its signer could do). */
function resigned(claim: Claim, key: GatewayKey, edit: (c: Claim) => void): Claim {
  const c = structuredClone(claim);
  edit(c);
  const { signature: _s, ...unsigned } = c;
  return {
    ...c,
    signature: sign(null, Buffer.from(canonicalJson(unsigned)), key.privateKey).toString('base64url'),
  };
}

describe.skipIf(!withPostgres)("replicas' evidence", () => {
  let multi: { claim: Claim; bundle: AuditBundle };
  beforeAll(async () => {
    if (!withPostgres) return;
    multi = await session(rep(0), [rep(0), rep(1), rep(2), rep(1)], rep(2));
  }, 120_000);

  it('three replicas write one session, another closes it: a /2 claim lists every writer and verifies', () => {
    const { claim, bundle } = multi;
    expect(claim.profile).toBe('cmcp.trace-claim/2');
    expect(claim.replicas?.map((m) => m.replica_id).sort()).toEqual(['replica-0', 'replica-1', 'replica-2']);
    expect(claim.cnf.jwk).toEqual(rep(2).key.jwk);
    // the session binding is the opener's, under its key and the verifier's challenge
    expect(claim.binding.preimage.key_thumbprint).toBe(rep(0).key.thumbprint.toString('base64url'));
    expect(claim.evidence.status).toBe('bound');
    for (const e of bundle.entries) {
      expect(JSON.parse(e.canonical).replica.replica_id).toMatch(/^replica-[012]$/);
      expect(e.writer_signature).toMatch(/^[A-Za-z0-9_-]{86}$/);
    }
    const report = verifyClaim(claim, { bundle, expectedChallenge: 'nonce-r' });
    expect(failed(report)).toEqual([]);
    expect(report.verdict).toBe('hardware-unanchored');
    for (const id of ['replicas.binding', 'replicas.evidence', 'replicas.signer', 'audit.writers'])
      expect(report.checks.find((c) => c.id === id)?.status, id).toBe('pass');
    // replica 0: session_open, attestation_bound, one call; 1: two calls; 2: one call, session_close
    for (const n of ['"replica-0" 3', '"replica-1" 2', '"replica-2" 2'])
      expect(detailOf(report, 'audit.writers')).toContain(n);
  });

  it('a session written and closed by one replica keeps its /1 claim', async () => {
    const { claim, bundle } = await session(rep(1), [rep(1)], rep(1));
    expect(claim.profile).toBe('cmcp.trace-claim/1');
    expect(claim).not.toHaveProperty('replicas');
    const report = verifyClaim(claim, { bundle, expectedChallenge: 'nonce-r' });
    expect(failed(report)).toEqual([]);
    expect(report.verdict).toBe('hardware-unanchored');
    expect(report.checks.map((c) => c.id)).not.toContain('audit.writers');
  });

  it('an entry whose writer signature was swapped for another entry’s fails ENTRY_WRITER_SIGNATURE_INVALID', () => {
    const bundle = structuredClone(multi.bundle);
    const [a, b] = [bundle.entries[1], bundle.entries[2]];
    if (!a || !b) throw new Error('short bundle');
    a.writer_signature = b.writer_signature as string;
    const report = verifyClaim(multi.claim, { bundle });
    expect(failed(report)).toEqual(['ENTRY_WRITER_SIGNATURE_INVALID']);
    expect(detailOf(report, 'audit.writers')).toContain('entry 1');
    delete bundle.entries[1]?.writer_signature;
    expect(failed(verifyClaim(multi.claim, { bundle }))).toEqual(['ENTRY_WRITER_SIGNATURE_INVALID']);
  });

  it('an entry by a replica without start-up evidence fails ENTRY_WRITER_NOT_ATTESTED, naming it', async () => {
    const stranger = await startReplica(3, false);
    const { claim, bundle } = await session(rep(0), [stranger], rep(1));
    expect(claim.replicas?.map((m) => m.replica_id)).not.toContain('replica-3');
    const report = verifyClaim(claim, { bundle });
    expect(failed(report)).toEqual(['ENTRY_WRITER_NOT_ATTESTED']);
    expect(detailOf(report, 'audit.writers')).toContain('"replica-3"');
    // closed through it, the claim is also signed by a key it does not list
    const own = await session(rep(0), [rep(0)], stranger);
    expect(failed(verifyClaim(own.claim, { bundle: own.bundle }))).toEqual([
      'CLAIM_SIGNER_NOT_LISTED',
      'ENTRY_WRITER_NOT_ATTESTED',
    ]);
  });

  it('a listed replica whose quote does not verify fails REPLICA_EVIDENCE_INVALID; a bad binding REPLICA_BINDING_INVALID', () => {
    const quote = resigned(multi.claim, rep(2).key, (c) => {
      const tpm = c.replicas?.[1]?.evidence.tpm;
      if (!tpm) throw new Error('no quote');
      const sig = Buffer.from(tpm.signature, 'base64url');
      sig[sig.length - 1] = (sig[sig.length - 1] as number) ^ 1;
      tpm.signature = sig.toString('base64url');
    });
    const r1 = verifyClaim(quote, { bundle: multi.bundle });
    expect(failed(r1)).toEqual(['REPLICA_EVIDENCE_INVALID']);
    expect(detailOf(r1, 'replicas.evidence')).toContain(`"${multi.claim.replicas?.[1]?.replica_id}"`);
    expect(r1.verdict).toBe('invalid');
    const token = resigned(multi.claim, rep(2).key, (c) => {
      const m = c.replicas?.[0];
      if (!m) throw new Error('no member');
      m.lease_token += 1;
      m.binding.preimage.lease_token += 1;
    });
    expect(failed(verifyClaim(token, { bundle: multi.bundle }))).toEqual(['REPLICA_BINDING_INVALID']);
  });

  it("a call sealed by another replica after its replica's lease expired is signed by the sealer; the claim verifies", async () => {
    const lost = await startReplica(4);
    const created = await rep(0).sessions.create('alice');
    await call(lost, created.session_id);
    const attempt = {
      callId: `call-${++calls}`,
      method: 'tools/call',
      upstream: 'up',
      agentId: 'alice',
      sessionId: created.session_id,
      executionId: null,
      toolName: 'echo',
      requestPayloadHash: null,
      workflowId: null,
    };
    await lost.writes.write({ kind: 'attempt', attempt, raiseSensitivity: null });
    // Its lease ends (as after a SIGKILL once the ttl passed); replica 1's sweep seals the attempt.
    await admin.query("UPDATE replica_leases SET expires_ms = 0 WHERE replica_id = 'replica-4'");
    expect(await sealExpiredReplica(rep(1).pool, rep(1).fence, 60_000)).toMatchObject({ attempts: 1 });
    const claim = await rep(0).sessions.closeAwaited('alice', created.session_id);
    const bundle = await chainBundle(admin, created.session_id, created.session_id);
    const sealed = bundle.entries
      .map((e) => JSON.parse(e.canonical))
      .find((e) => e.disposition === 'outcome_unknown');
    expect(sealed?.replica.replica_id).toBe('replica-1');
    expect(claim.replicas?.map((m) => m.replica_id)).toEqual(['replica-0', 'replica-4', 'replica-1']);
    const report = verifyClaim(claim, { bundle });
    expect(failed(report)).toEqual([]);
    expect(report.verdict).toBe('hardware-unanchored');
  });

  it('reference gateway measurements hold for every listed replica (replicas.measurement)', () => {
    const referenceValues = { version: 1 as const, gateway: { measurements: [`sha256:${'ab'.repeat(32)}`] } };
    const r = verifyClaim(multi.claim, { bundle: multi.bundle, referenceValues });
    expect(r.checks.find((c) => c.id === 'replicas.measurement')).toMatchObject({
      status: 'fail',
      reason_code: 'MEASUREMENT_NOT_ALLOWED',
    });
    expect(detailOf(r, 'replicas.measurement')).toContain('"replica-1"');
  });

  it('a /2 claim is refused by the /1 shape, and a /2 claim relabelled /1 fails CLAIM_PROFILE_MISMATCH', () => {
    const one = treeHeadClaimSchema.safeParse(multi.claim);
    expect(one.success).toBe(false);
    expect(one.error?.issues[0]?.path).toEqual(['profile']);
    const relabelled = resigned(multi.claim, rep(2).key, (c) => {
      c.profile = 'cmcp.trace-claim/1';
    });
    expect(failed(verifyClaim(relabelled, { bundle: multi.bundle }))).toEqual([
      'CLAIM_PROFILE_MISMATCH',
      'DEPENDENCY_FAILED',
    ]);
    const stripped = resigned(multi.claim, rep(2).key, (c) => {
      delete c.replicas;
    });
    expect(failed(verifyClaim(stripped, { bundle: multi.bundle }))[0]).toBe('CLAIM_MALFORMED');
  });

  it('cmcp verify checks a /2 claim with its bundle; a swapped writer signature fails it (exit 1)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-replica-verify-'));
    try {
      writeFileSync(join(dir, 'claim.json'), JSON.stringify(multi.claim));
      writeFileSync(join(dir, 'bundle.json'), JSON.stringify(multi.bundle));
      const ok = await cli(
        'verify',
        join(dir, 'claim.json'),
        '--audit',
        join(dir, 'bundle.json'),
        '--require',
        'hardware-unanchored',
        '--json',
      );
      expect(ok.code).toBe(0);
      const report = JSON.parse(ok.stdout) as VerificationReport;
      expect(report.verdict).toBe('hardware-unanchored');
      expect(report.checks.find((c) => c.id === 'audit.writers')?.status).toBe('pass');
      const bundle = structuredClone(multi.bundle);
      const e = bundle.entries[2];
      if (!e) throw new Error('short bundle');
      e.writer_signature = multi.bundle.entries[0]?.writer_signature as string;
      writeFileSync(join(dir, 'bad.json'), JSON.stringify(bundle));
      const bad = await cli('verify', join(dir, 'claim.json'), '--audit', join(dir, 'bad.json'));
      expect(bad.code).toBe(1);
      expect(bad.stdout).toContain('ENTRY_WRITER_SIGNATURE_INVALID');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const run = promisify(execFile);
const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
async function cli(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [CLI, ...args]);
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}
