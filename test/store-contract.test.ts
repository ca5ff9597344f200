/**
 * The storage contract (issue 15, docs/replicas.md), the same cases against both engines: SQLite
 * (three connections to one file) and PostgreSQL (three pools, each a replica with its own
 * fenced lease, on a real throw-away PostgreSQL from testing/postgres.ts). C-CHAIN-1 with
 * 3 × 50 concurrent appends; C-EXEC-1 and C-EXEC-2 with the racing admissions sent through
 * different replicas; the terminal entry, registry transition, call count and attempt end in
 * one transaction (a fault before the commit leaves nothing half-written). PostgreSQL only (a
 * SQLite gateway has one writer per file and the instance lock): fencing by lease token, a
 * takeover waiting for a write that passed the fence, sealing an expired replica's work and
 * not a live one's.
 */
import { generateKeyPairSync } from 'node:crypto';
import { verifyBundle } from '@cmcp/verify';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { toolCallBinding } from '../src/execution/binding.js';
import type { AdmissionResult, AttemptStart, WriteCommand } from '../src/store/port.js';
import { openAttempts } from '../src/store/postgres/attempts.js';
import { appendEntry } from '../src/store/postgres/chain.js';
import { acquireLease, checkFence, renewLease } from '../src/store/postgres/leases.js';
import { RESTART_REASON, ReplicaLease } from '../src/store/postgres/replica-lease.js';
import { LEASE_EXPIRED_REASON, sealExpiredReplica } from '../src/store/postgres/sealing.js';
import { fencedTransaction, openReplicaPool, replicaTimeouts } from '../src/store/postgres/transaction.js';
import { PostgresWriteStore } from '../src/store/postgres/write-store.js';
import { contractEngines, type Engine, type PgReplica, type Replica } from './harness/store-engines.js';

const { withPostgres, pgEngine, engines } = contractEngines('contract');

function verified(bundle: unknown) {
  const report = verifyBundle(bundle);
  return report.checks.filter((c) => c.status === 'fail');
}

let calls = 0;
function attempt(sessionId: string, executionId: string | null, tool = 'echo'): AttemptStart {
  return {
    callId: `call-${++calls}`,
    method: 'tools/call',
    upstream: 'upstream-a',
    agentId: 'agent-1',
    sessionId,
    executionId,
    toolName: tool,
    requestPayloadHash: null,
    workflowId: null,
  };
}

function admission(
  a: AttemptStart,
  args: Record<string, unknown>,
): Extract<WriteCommand, { kind: 'admission' }> {
  const binding = toolCallBinding({
    agentId: a.agentId,
    serverIdentity: a.upstream,
    toolName: a.toolName as string,
    arguments: args,
    actionTimestamp: null,
  });
  return {
    kind: 'admission',
    admission: {
      agentId: a.agentId,
      executionId: a.executionId as string,
      binding,
      callId: a.callId,
      sessionId: a.sessionId,
      toolName: a.toolName as string,
    },
    attempt: a,
    raiseSensitivity: null,
    refusalEntry: {
      entry_type: 'tool_call',
      call_id: a.callId,
      agent_id: a.agentId,
      session_id: a.sessionId,
      execution_id: a.executionId,
      tool_name: a.toolName,
    },
  };
}

function terminal(a: AttemptStart, disposition: 'completed' | 'not_attempted' = 'completed'): WriteCommand {
  return {
    kind: 'terminal',
    sessionId: a.sessionId,
    entry: {
      entry_type: 'tool_call',
      call_id: a.callId,
      agent_id: a.agentId,
      session_id: a.sessionId,
      execution_id: a.executionId,
      tool_name: a.toolName,
      server_identity: a.upstream,
    },
    disposition,
    execution: a.executionId ? { agentId: a.agentId, executionId: a.executionId, callId: a.callId } : null,
  };
}

const codeOf = (r: AdmissionResult) => (r.kind === 'admitted' ? 'admitted' : r.refusal.code);

/** An export's pieces (strings and bytes) as one text, decoded once: a piece may end inside a UTF-8 sequence. */
async function exportText(pieces: AsyncIterable<string | Buffer>): Promise<string> {
  const bytes: Buffer[] = [];
  for await (const p of pieces) bytes.push(typeof p === 'string' ? Buffer.from(p) : p);
  return Buffer.concat(bytes).toString('utf8');
}

describe.each(engines)('the storage contract on %s', (name, make) => {
  const skip = name === 'postgres' && !withPostgres;
  let engine: Engine;
  beforeAll(async () => {
    if (!skip) engine = await make();
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  it.skipIf(skip)(
    'C-CHAIN-1: 3 replicas × 50 concurrent appends, to an empty chain and to a non-empty one, make one linear chain',
    async () => {
      const chainId = 'chain-c1';
      for (const round of [0, 1]) {
        await Promise.all(
          Array.from({ length: 150 }, (_, i) =>
            (engine.replicas[i % 3] as (typeof engine.replicas)[number]).append(chainId, {
              entry_type: 'test_append',
              detail: { round, i },
            }),
          ),
        );
        const bundle = await engine.bundle(chainId, null);
        expect(bundle.entries).toHaveLength(150 * (round + 1));
        const bodies = bundle.entries.map(
          (e) => JSON.parse(e.canonical) as { sequence_number: number; prev_entry_hash: string },
        );
        expect(bodies.map((b) => b.sequence_number)).toEqual(bodies.map((_, i) => i));
        expect(new Set(bodies.map((b) => b.prev_entry_hash)).size).toBe(bodies.length);
        // every writer's appends made it (nothing lost)
        const seen = bodies.map((b) => JSON.stringify((b as { detail?: unknown }).detail));
        expect(new Set(seen).size).toBe(bodies.length);
        expect(verified(bundle)).toEqual([]);
      }
    },
    120_000,
  );

  it.skipIf(skip)(
    'refusal commands from 3 replicas into one session: one chain, every call counted',
    async () => {
      await engine.addSession('s-refusals', 'agent-1');
      await Promise.all(
        Array.from({ length: 60 }, (_, i) =>
          engine.replicas[i % 3]?.writes.write({
            kind: 'refusal',
            sessionId: 's-refusals',
            entry: { entry_type: 'tool_call', call_id: `r-${i}`, error_code: 'POLICY_DENIED' },
          }),
        ),
      );
      const bundle = await engine.bundle('s-refusals', 's-refusals');
      expect(bundle.entries).toHaveLength(60);
      expect(verified(bundle)).toEqual([]);
      expect(await engine.callCount('s-refusals')).toBe(60);
    },
    60_000,
  );

  it.skipIf(skip)(
    "the paged export (the audit route's JSON text) is the one-read bundle, writer signatures and hard-to-escape texts included",
    async () => {
      const chainId = 'chain-paged';
      // Texts the database must escape exactly as a JSON string: quotes, backslashes, control
      // characters, U+2028, a non-BMP character (the chain refuses lone surrogates).
      // The last: 18 KB of multi-byte characters, so that a boundary between the export's byte
      // chunks (PostgreSQL's COPY, cut where the socket's reads fall) may fall inside a UTF-8
      // sequence: the chunks are sent on undecoded, and exportText decodes them only whole.
      const tricky = [
        '"q" \\ back',
        'tab\t nl\n bel\u0007 del\u007f',
        '\u2028 \u00e9 😀',
        'é😀€'.repeat(2000),
      ];
      for (let i = 0; i < 130; i++)
        await (engine.replicas[i % 3] as (typeof engine.replicas)[number]).append(chainId, {
          entry_type: 'test_append',
          detail: { i, text: tricky[i % tricky.length] },
        });
      if (engine.name === 'postgres') {
        // Entries with a writer signature (a replica's, docs/spec/audit-entries.md#writers).
        const r = engine.replicas[0] as PgReplica;
        const writer = {
          replicaId: r.id,
          keyThumbprint: 'thumb-0',
          key: generateKeyPairSync('ed25519').privateKey,
        };
        for (let i = 0; i < 7; i++)
          await fencedTransaction(r.pool, r.fence, (cl) =>
            appendEntry(cl, chainId, { entry_type: 'test_append', detail: { signed: i } }, undefined, writer),
          );
      }
      const whole = await engine.bundle(chainId, chainId);
      expect(whole.entries.length).toBe(engine.name === 'postgres' ? 137 : 130);
      if (engine.name === 'postgres') expect(whole.entries.filter((e) => e.writer_signature)).toHaveLength(7);
      for (const pageSize of [1, 25, 200]) {
        const paged = JSON.parse(
          await exportText(engine.bundleJson(chainId, chainId, pageSize)),
        ) as typeof whole;
        expect({ ...paged, exported_at: null }).toEqual({ ...whole, exported_at: null });
      }
      // An empty chain exports as an empty bundle.
      expect(JSON.parse(await exportText(engine.bundleJson('chain-none', null, 25))).entries).toEqual([]);
    },
    60_000,
  );

  it.skipIf(skip)(
    'C-EXEC-1: 20 concurrent admissions of one key through 3 replicas admit exactly one; after its failure the key stays refused',
    async () => {
      await engine.addSession('s-exec1', 'agent-1');
      const tries = Array.from({ length: 20 }, () => attempt('s-exec1', 'x-exec1'));
      const results = await Promise.all(
        tries.map(
          (a, i) => engine.replicas[i % 3]?.writes.write(admission(a, { q: 1 })) as Promise<AdmissionResult>,
        ),
      );
      const codes = results.map(codeOf);
      expect(codes.filter((c) => c === 'admitted')).toHaveLength(1);
      expect(codes.filter((c) => c === 'EXECUTION_IN_FLIGHT')).toHaveLength(19);
      const winner = tries[codes.indexOf('admitted')] as AttemptStart;
      expect(await engine.openAttempts()).toEqual([winner.callId]);
      const row = await engine.execution('agent-1', 'x-exec1');
      expect(row).toMatchObject({ state: 'in_flight', call_id: winner.callId });

      // the upstream call failed: not_attempted is terminal, the key is never run again
      const e = await engine.replicas[1]?.writes.write(terminal(winner, 'not_attempted'));
      expect((await engine.execution('agent-1', 'x-exec1'))?.terminal_entry_hash).toBe(
        (e as { entry_hash: string }).entry_hash,
      );
      const again = (await engine.replicas[2]?.writes.write(
        admission(attempt('s-exec1', 'x-exec1'), { q: 1 }),
      )) as AdmissionResult;
      expect(codeOf(again)).toBe('EXECUTION_REPLAY_REFUSED');
      expect(await engine.openAttempts()).toEqual([]);
      const bundle = await engine.bundle('s-exec1', 's-exec1');
      expect(bundle.entries).toHaveLength(21); // 19 refusals, 1 terminal, 1 replay refusal
      expect(verified(bundle)).toEqual([]);
      expect(await engine.callCount('s-exec1')).toBe(21);
    },
    60_000,
  );

  it.skipIf(skip)(
    'C-EXEC-2: another request under the same key collides while the first runs; reordered arguments are the same request',
    async () => {
      await engine.addSession('s-exec2', 'agent-1');
      const first = attempt('s-exec2', 'x-exec2');
      const r0 = (await engine.replicas[0]?.writes.write(
        admission(first, { a: 1, b: 2 }),
      )) as AdmissionResult;
      expect(codeOf(r0)).toBe('admitted');
      const [other, otherTool, reordered] = (await Promise.all([
        engine.replicas[1]?.writes.write(admission(attempt('s-exec2', 'x-exec2'), { a: 2, b: 2 })),
        engine.replicas[2]?.writes.write(
          admission(attempt('s-exec2', 'x-exec2', 'other_tool'), { a: 1, b: 2 }),
        ),
        engine.replicas[1]?.writes.write(admission(attempt('s-exec2', 'x-exec2'), { b: 2, a: 1 })),
      ])) as AdmissionResult[];
      expect([other, otherTool, reordered].map((r) => codeOf(r as AdmissionResult))).toEqual([
        'EXECUTION_COLLISION',
        'EXECUTION_COLLISION',
        'EXECUTION_IN_FLIGHT',
      ]);
      expect(await engine.execution('agent-1', 'x-exec2')).toMatchObject({
        state: 'in_flight',
        call_id: first.callId,
      });
    },
    60_000,
  );

  it.skipIf(skip)(
    'the terminal entry, the registry transition, the call count and the attempt end commit together: a fault before the commit leaves nothing',
    async () => {
      await engine.addSession('s-term', 'agent-1');
      const a = attempt('s-term', 'x-term');
      expect(
        codeOf((await engine.replicas[0]?.writes.write(admission(a, { z: 1 }))) as AdmissionResult),
      ).toBe('admitted');
      // A fault after the entry and the registry transition: the attempt to end is not this call's.
      const broken = terminal(a);
      if (broken.kind !== 'terminal') throw new Error('unreachable');
      const faulty = { ...broken, entry: { ...broken.entry, call_id: 'not-an-open-attempt' } };
      await expect(engine.replicas[1]?.writes.write(faulty)).rejects.toThrow(/no open attempt/);
      expect((await engine.bundle('s-term', 's-term')).entries).toHaveLength(0);
      expect(await engine.execution('agent-1', 'x-term')).toMatchObject({
        state: 'in_flight',
        terminal_entry_hash: null,
      });
      expect(await engine.callCount('s-term')).toBe(0);
      expect(await engine.openAttempts()).toContain(a.callId);

      const e = (await engine.replicas[2]?.writes.write(terminal(a))) as { entry_hash: string };
      expect(await engine.execution('agent-1', 'x-term')).toMatchObject({
        state: 'completed',
        terminal_entry_hash: e.entry_hash,
      });
      // A second terminal for the same call fails at the registry (not in flight): nothing more written.
      await expect(engine.replicas[0]?.writes.write(terminal(a))).rejects.toThrow(/not in flight/);
      expect((await engine.bundle('s-term', 's-term')).entries).toHaveLength(1);
      expect(await engine.callCount('s-term')).toBe(1);
      expect(await engine.openAttempts()).not.toContain(a.callId);
    },
    60_000,
  );

  it.skipIf(skip)(
    'an agent block is recorded once whichever writer records it; every writer reads the same blocks and unblocks',
    async () => {
      const all = () =>
        Promise.all(
          engine.replicas.map((r) =>
            r.operator.recordAgentBlock('agent_blocked', 'agent-op', { reason: 'x' }),
          ),
        );
      const first = await all();
      expect(first.filter((x) => x !== null)).toHaveLength(1);
      expect(await engine.replicas[1]?.operator.recordAgentBlock('agent_blocked', 'agent-op', {})).toBeNull();
      const unblocked = await engine.replicas[2]?.operator.recordAgentBlock(
        'agent_unblocked',
        'agent-op',
        {},
      );
      expect(unblocked).not.toBeNull();
      expect(
        await engine.replicas[0]?.operator.recordAgentBlock('agent_unblocked', 'agent-op', {}),
      ).toBeNull();
      for (const r of engine.replicas) {
        const events = (await r.operator.blockEventsSince(-1)).filter((e) => e.agentId === 'agent-op');
        expect(events.map((e) => e.type)).toEqual(['agent_blocked', 'agent_unblocked']);
        expect(events[1]?.sequence).toBe(unblocked?.sequence);
        expect(await r.operator.blockEventsSince(unblocked?.sequence as number)).toEqual([]);
      }
      await engine.addSession('s-op', 'agent-op');
      expect(await engine.replicas[1]?.operator.openSessionsOf('agent-op')).toEqual(['s-op']);
      expect(await engine.replicas[2]?.operator.agentHasSessions('agent-op')).toBe(true);
      expect(await engine.replicas[2]?.operator.agentHasSessions('agent-none')).toBe(false);
      expect(verified(await engine.bundle(GATEWAY_CHAIN_ID, null))).toEqual([]);
    },
    60_000,
  );

  it.skipIf(skip)(
    'a policy reload is recorded only when its version is newer than every recorded one',
    async () => {
      const reload = (version: number) => ({
        entry_type: 'policy_reload',
        detail: { version, bundle_files: { 'policy.cedar': `sha256:${version}` } },
      });
      const r2 = await Promise.all(engine.replicas.map((r) => r.operator.recordReload(reload(2), 2)));
      expect(r2.filter((x) => x !== null)).toHaveLength(1);
      expect(await engine.replicas[1]?.operator.recordReload(reload(1), 1)).toBeNull();
      const r3 = await engine.replicas[2]?.operator.recordReload(reload(3), 3);
      expect(r3).not.toBeNull();
      for (const r of engine.replicas) {
        const all = await r.operator.reloadsSince(-1);
        expect(all.map((x) => x.detail.version)).toEqual([2, 3]);
        expect(all[1]?.sequence).toBe(r3?.sequence);
      }
      expect(verified(await engine.bundle(GATEWAY_CHAIN_ID, null))).toEqual([]);
    },
    60_000,
  );

  // Last of the engine's cases: replica 2 takes no new attempt after it.
  it.skipIf(skip)(
    'after closeAttempts no attempt or admission is written; a call already under way still ends with its terminal entry',
    async () => {
      await engine.addSession('s-closed', 'agent-1');
      const store = engine.replicas[2] as Replica;
      const running = attempt('s-closed', null);
      await store.writes.write({ kind: 'attempt', attempt: running, raiseSensitivity: null });
      await store.writes.closeAttempts();
      const late = attempt('s-closed', null);
      await expect(
        store.writes.write({ kind: 'attempt', attempt: late, raiseSensitivity: null }),
      ).rejects.toThrow(/no new attempt/);
      const admitted = attempt('s-closed', 'x-closed');
      await expect(store.writes.write(admission(admitted, { z: 1 }))).rejects.toThrow(/no new attempt/);
      expect(await engine.execution('agent-1', 'x-closed')).toBeUndefined();
      const open = await engine.openAttempts();
      expect(open).toContain(running.callId);
      expect(open).not.toContain(late.callId);
      await store.writes.write(terminal(running));
      expect(await engine.openAttempts()).not.toContain(running.callId);
      expect(await engine.callCount('s-closed')).toBe(1);
    },
    60_000,
  );
});

describe.skipIf(!withPostgres)('PostgreSQL leases: fencing and sealing', () => {
  it('a replica whose lease expired cannot write; a takeover under a new token fences the old one', async () => {
    const engine = await pgEngine({
      ttlMs: [60_000, 60_000, 1500],
    });
    try {
      const [, , stale] = engine.replicas;
      if (!stale) throw new Error('unreachable');
      await stale.append('chain-fence', { entry_type: 'test_append' });
      await new Promise((r) => setTimeout(r, 1800));
      await expect(stale.append('chain-fence', { entry_type: 'test_append' })).rejects.toMatchObject({
        code: 'LEASE_LOST',
      });
      await expect(renewLease(stale.pool, stale.fence, 1500)).rejects.toMatchObject({ code: 'LEASE_LOST' });

      // The replica restarts on another pool: a new token, one above the old.
      const pool = openReplicaPool(engine.url, { leaseTtlMs: 60_000, max: 2 });
      try {
        const taken = await acquireLease(pool, {
          replicaId: stale.id,
          holder: 'restarted',
          keyThumbprint: 'thumb-2b',
          ttlMs: 60_000,
        });
        expect(taken).toEqual({
          fence: { replicaId: stale.id, leaseToken: stale.fence.leaseToken + 1 },
          previous: 'expired',
        });
        // a live lease refuses a second holder
        await expect(
          acquireLease(pool, { replicaId: stale.id, holder: 'third', keyThumbprint: 'x', ttlMs: 60_000 }),
        ).rejects.toMatchObject({ code: 'INSTANCE_RUNNING' });
        // the old fence stays refused though the lease is live again
        await expect(
          stale.writes.write({ kind: 'refusal', sessionId: null, entry: { entry_type: 'tool_call' } }),
        ).rejects.toMatchObject({ code: 'LEASE_LOST' });
        await new PostgresWriteStore(pool, taken.fence).write({
          kind: 'refusal',
          sessionId: null,
          entry: { entry_type: 'tool_call' },
        });
        expect((await engine.bundle('chain-fence', null)).entries).toHaveLength(1);
        const gateway = await engine.bundle(GATEWAY_CHAIN_ID, null);
        expect(gateway.entries).toHaveLength(1);
        expect(verified(gateway)).toEqual([]);
      } finally {
        await pool.end();
      }
    } finally {
      await engine.close();
    }
  }, 60_000);

  it('a takeover waits for a write transaction that passed the fence: that write commits before it, none after', async () => {
    const engine = await pgEngine({
      ttlMs: [60_000, 60_000, 1500],
    });
    try {
      const stale = engine.replicas[2];
      if (!stale) throw new Error('unreachable');
      const client = await stale.pool.connect();
      await client.query('BEGIN');
      await checkFence(client, stale.fence);
      await appendEntry(client, 'chain-wait', { entry_type: 'test_append' });
      await new Promise((r) => setTimeout(r, 1800)); // the lease expires meanwhile
      const pool = openReplicaPool(engine.url, { leaseTtlMs: 60_000, max: 2 });
      let acquired = false;
      const takeover = acquireLease(pool, {
        replicaId: stale.id,
        holder: 'b',
        keyThumbprint: 'b',
        ttlMs: 60_000,
      }).then((l) => {
        acquired = true;
        return l;
      });
      await new Promise((r) => setTimeout(r, 500));
      expect(acquired).toBe(false); // waiting on the FOR KEY SHARE of the open write
      await client.query('COMMIT');
      client.release();
      const lease = await takeover;
      expect(lease.fence.leaseToken).toBe(stale.fence.leaseToken + 1);
      expect((await engine.bundle('chain-wait', null)).entries).toHaveLength(1);
      await expect(stale.append('chain-wait', { entry_type: 'test_append' })).rejects.toMatchObject({
        code: 'LEASE_LOST',
      });
      await pool.end();
    } finally {
      await engine.close();
    }
  }, 60_000);

  it('a paused replica cannot hold a chain: the server ends its idle transaction, another replica appends, the paused write never commits', async () => {
    const engine = await pgEngine();
    // ttl 1.5 s (renewed every 0.5 s): the paused replica's pool cuts idle transactions after 300 ms, statements after 600 ms.
    const pool = openReplicaPool(engine.url, { leaseTtlMs: 1500, max: 2 });
    try {
      const lease = await acquireLease(pool, {
        replicaId: 'paused',
        holder: 'p',
        keyThumbprint: 'p',
        ttlMs: 60_000,
      });
      const stalled = fencedTransaction(pool, lease.fence, async (client) => {
        await appendEntry(client, 'chain-pause', { entry_type: 'test_append', detail: { from: 'paused' } });
        await new Promise((r) => setTimeout(r, 1200)); // paused inside its transaction, holding the tip
        await appendEntry(client, 'chain-pause', { entry_type: 'test_append', detail: { from: 'paused' } });
      });
      const outcome = stalled.then(
        () => 'committed',
        (e: { code?: string; message?: string }) => e.code ?? `failed: ${e.message}`,
      );
      await new Promise((r) => setTimeout(r, 100));
      const other = engine.replicas[0];
      if (!other) throw new Error('unreachable');
      const e = await other.append('chain-pause', { entry_type: 'test_append', detail: { from: 'other' } });
      expect(e.sequence_number).toBe(0); // the paused transaction's entry was rolled back
      expect(await outcome).toBe('25P03'); // idle_in_transaction_session_timeout (PostgreSQL 15 Appendix A)
      const bundle = await engine.bundle('chain-pause', null);
      expect(bundle.entries.map((x) => JSON.parse(x.canonical).detail.from)).toEqual(['other']);
      expect(verified(bundle)).toEqual([]);
    } finally {
      await pool.end();
      await engine.close();
    }
  }, 60_000);

  it("a replica's statement waiting behind a paused replica's transaction outlasts the server's idle cut (same ttl): it appends, it is not cut with 57014", async () => {
    const engine = await pgEngine();
    const ttl = 3000;
    const renew = ttl / 3; // the pools' default renewal period
    const cuts = replicaTimeouts(ttl);
    // The waiter's tolerance beyond the idle cut, and every lock of a replica paused right
    // before a renewal released before its lease expires (a statement left running, then its
    // idle transaction); and so for any renewal the config allows (at most half the ttl).
    expect(cuts.statementMs).toBeGreaterThanOrEqual(2 * cuts.idleInTransactionMs);
    expect(renew + cuts.statementMs + cuts.idleInTransactionMs).toBeLessThanOrEqual(ttl);
    const slowest = replicaTimeouts(ttl, ttl / 2);
    expect(ttl / 2 + slowest.statementMs + slowest.idleInTransactionMs).toBeLessThanOrEqual(ttl);
    const pools = [
      openReplicaPool(engine.url, { leaseTtlMs: ttl, max: 2 }),
      openReplicaPool(engine.url, { leaseTtlMs: ttl, max: 2 }),
    ];
    try {
      const [pausedPool, waiterPool] = pools as [pg.Pool, pg.Pool];
      const shown = await waiterPool.query<{ statement_timeout: string }>('SHOW statement_timeout');
      expect(shown.rows[0]?.statement_timeout).toBe(`${cuts.statementMs}ms`);
      const lease = (replicaId: string, pool: pg.Pool) =>
        acquireLease(pool, { replicaId, holder: replicaId, keyThumbprint: replicaId, ttlMs: 60_000 });
      const paused = await lease('paused', pausedPool);
      const waiter = await lease('waiter', waiterPool);
      let holding!: () => void;
      const tipHeld = new Promise<void>((r) => {
        holding = r;
      });
      const stalled = fencedTransaction(pausedPool, paused.fence, async (client) => {
        await appendEntry(client, 'chain-race', { entry_type: 'test_append', detail: { from: 'paused' } });
        holding();
        // Its last statement before the pause runs a while: the waiter has been waiting that
        // long already when the idle cut's clock starts.
        await client.query('SELECT pg_sleep(0.3)');
        await new Promise((r) => setTimeout(r, 2000)); // paused inside its transaction, holding the tip
      });
      const outcome = stalled.then(
        () => 'committed',
        (e: { code?: string; message?: string }) => e.code ?? `failed: ${e.message}`,
      );
      await tipHeld;
      const appended = await fencedTransaction(waiterPool, waiter.fence, (client) =>
        appendEntry(client, 'chain-race', { entry_type: 'test_append', detail: { from: 'waiter' } }),
      ).then(
        (e) => e.sequence_number,
        (e: { code?: string; message?: string }) => e.code ?? `failed: ${e.message}`,
      );
      expect(appended).toBe(0); // not '57014' (statement_timeout, PostgreSQL 15 Appendix A)
      expect(await outcome).toBe('25P03');
      const bundle = await engine.bundle('chain-race', null);
      expect(bundle.entries.map((x) => JSON.parse(x.canonical).detail.from)).toEqual(['waiter']);
    } finally {
      for (const p of pools) await p.end();
      await engine.close();
    }
  }, 60_000);

  it("an expired replica's open attempts and in-flight executions are sealed outcome_unknown in their sessions' chains by another replica; a live replica's are not", async () => {
    const engine = await pgEngine({
      ttlMs: [60_000, 2000, 2000],
    });
    try {
      const [sealer, live, expired] = engine.replicas;
      if (!sealer || !live || !expired) throw new Error('unreachable');
      await engine.addSession('s-dead', 'agent-1');
      await engine.addSession('s-live', 'agent-1');
      const x = attempt('s-dead', 'x-dead');
      const plain = attempt('s-dead', null);
      const y = attempt('s-live', 'x-live');
      expect(codeOf((await expired.writes.write(admission(x, { k: 1 }))) as AdmissionResult)).toBe(
        'admitted',
      );
      await expired.writes.write({ kind: 'attempt', attempt: plain, raiseSensitivity: null });
      expect(codeOf((await live.writes.write(admission(y, { k: 2 }))) as AdmissionResult)).toBe('admitted');

      // `live` renews by heartbeat; `expired` stops (paused, partitioned).
      const beat = setInterval(
        () => void renewLease(live.pool, live.fence, 2000).catch(() => undefined),
        300,
      );
      try {
        await new Promise((r) => setTimeout(r, 2400));
        const sealed = await sealExpiredReplica(sealer.pool, sealer.fence, 60_000);
        expect(sealed).toEqual({ replicaId: expired.id, attempts: 2, executions: 0 });
        expect(await sealExpiredReplica(sealer.pool, sealer.fence, 60_000)).toBeNull();
      } finally {
        clearInterval(beat);
      }
      expect(await openAttempts(engine.admin, expired.id)).toEqual([]);
      expect((await openAttempts(engine.admin, live.id)).map((a) => a.call_id)).toEqual([y.callId]);
      expect(await engine.execution('agent-1', 'x-live')).toMatchObject({ state: 'in_flight' });

      const dead = await engine.bundle('s-dead', 's-dead');
      expect(verified(dead)).toEqual([]);
      const entries = dead.entries.map((e) => ({ ...JSON.parse(e.canonical), entry_hash: e.entry_hash }));
      expect(
        entries.map((e) => [e.call_id, e.disposition, e.error_code, e.detail.reason, e.detail.sealed_by]),
      ).toEqual([
        [x.callId, 'outcome_unknown', 'CALL_INTERRUPTED', LEASE_EXPIRED_REASON, sealer.id],
        [plain.callId, 'outcome_unknown', 'CALL_INTERRUPTED', LEASE_EXPIRED_REASON, sealer.id],
      ]);
      expect(await engine.execution('agent-1', 'x-dead')).toMatchObject({
        state: 'outcome_unknown',
        terminal_entry_hash: entries[0].entry_hash,
      });
      expect(await engine.callCount('s-dead')).toBe(2);
      const lease = await engine.admin.query('SELECT state FROM replica_leases WHERE replica_id = $1', [
        expired.id,
      ]);
      expect(lease.rows).toEqual([{ state: 'sealed' }]);

      // The expired replica wakes with the upstream's answer: its terminal is fenced off.
      await expect(expired.writes.write(terminal(x))).rejects.toMatchObject({ code: 'LEASE_LOST' });
      expect((await engine.bundle('s-dead', 's-dead')).entries).toHaveLength(2);
      // The live replica finishes its call as usual.
      await live.writes.write(terminal(y));
      expect(await engine.execution('agent-1', 'x-live')).toMatchObject({ state: 'completed' });
      // The sealed replica restarts at once under a new token, with nothing left to recover.
      const again = await acquireLease(expired.pool, {
        replicaId: expired.id,
        holder: 'restarted',
        keyThumbprint: 'thumb-2b',
        ttlMs: 60_000,
      });
      expect(again).toEqual({
        fence: { replicaId: expired.id, leaseToken: expired.fence.leaseToken + 2 },
        previous: 'sealed',
      });
    } finally {
      await engine.close();
    }
  }, 60_000);

  it('two replicas sweeping at once seal an expired replica once: one terminal entry per attempt and per in-flight row without one', async () => {
    const engine = await pgEngine({
      ttlMs: [60_000, 60_000, 2000],
    });
    try {
      const [s1, s2, expired] = engine.replicas;
      if (!s1 || !s2 || !expired) throw new Error('unreachable');
      await engine.addSession('s-race', 'agent-1');
      const open = Array.from({ length: 10 }, () => attempt('s-race', null));
      for (const a of open)
        await expired.writes.write({ kind: 'attempt', attempt: a, raiseSensitivity: null });
      // An in-flight row without an attempt, as a database from before attempts holds one.
      await engine.admin.query(
        `INSERT INTO executions (agent_id, execution_id, binding, state, call_id, session_id, tool_name, owner, created_at, updated_at)
         VALUES ('agent-1', 'x-legacy', 'sha256:00', 'in_flight', 'call-legacy', 's-race', 'echo', $1, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')`,
        [expired.id],
      );
      await new Promise((r) => setTimeout(r, 2300));
      const results = await Promise.allSettled([
        sealExpiredReplica(s1.pool, s1.fence, 60_000),
        sealExpiredReplica(s2.pool, s2.fence, 60_000),
      ]);
      // One sweeper takes the lease (the other skips the locked row or finds none expired).
      const sealed = results.map((r) => (r.status === 'fulfilled' ? r.value : r.reason));
      expect(sealed.filter((x) => x !== null)).toEqual([
        { replicaId: expired.id, attempts: 10, executions: 1 },
      ]);
      const chain = await engine.bundle('s-race', 's-race');
      expect(verified(chain)).toEqual([]);
      expect(chain.entries.map((e) => JSON.parse(e.canonical).call_id).sort()).toEqual(
        [...open.map((a) => a.callId), 'call-legacy'].sort(),
      );
      expect(await engine.openAttempts()).toEqual([]);
      expect(await engine.callCount('s-race')).toBe(11);
      expect(await engine.execution('agent-1', 'x-legacy')).toMatchObject({
        state: 'outcome_unknown',
        terminal_entry_hash: chain.entries.at(-1)?.entry_hash,
      });
    } finally {
      await engine.close();
    }
  }, 60_000);

  it('ReplicaLease: the heartbeat keeps a short lease live; a stalled one is lost (reported once) and swept by another; a restart after an unswept expiry recovers its own work', async () => {
    const engine = await pgEngine();
    const pools: ReturnType<typeof openReplicaPool>[] = [];
    const pool = () => {
      const p = openReplicaPool(engine.url, { leaseTtlMs: 60_000, max: 3 });
      pools.push(p);
      return p;
    };
    const leases: ReplicaLease[] = [];
    try {
      await engine.addSession('s-keep', 'agent-1');
      const lease = async (
        replicaId: string,
        ttlMs: number,
        renewEveryMs: number,
        onLost?: (e: Error) => void,
      ) => {
        const p = pool();
        const l = await ReplicaLease.start(p, {
          replicaId,
          holder: replicaId,
          keyThumbprint: replicaId,
          ttlMs,
          renewEveryMs,
          sweepEveryMs: 0,
          onLost,
        });
        leases.push(l);
        return { l, writes: new PostgresWriteStore(p, l.fence) };
      };
      const a = await lease('ra', 2000, 200);
      const b = await lease('rb', 2000, 200);
      const lost: Error[] = [];
      const c = await lease('rc', 1500, 2500, (e) => lost.push(e));
      const d = await lease('rd', 1500, 60_000);
      const [xa, xc, xd] = [attempt('s-keep', null), attempt('s-keep', null), attempt('s-keep', null)];
      await a.writes.write({ kind: 'attempt', attempt: xa, raiseSensitivity: null });
      await c.writes.write({ kind: 'attempt', attempt: xc, raiseSensitivity: null });
      await d.writes.write({ kind: 'attempt', attempt: xd, raiseSensitivity: null });
      await new Promise((r) => setTimeout(r, 1800)); // rc and rd stalled past their ttl; ra, rb renewed

      // rb's sweep seals both stalled replicas, never ra (live by heartbeat)
      const swept = await b.l.sweep();
      expect(swept.map((x) => [x.replicaId, x.attempts]).sort()).toEqual([
        ['rc', 1],
        ['rd', 1],
      ]);
      expect(await engine.openAttempts()).toEqual([xa.callId]);
      // rc's next renewal (2.5 s after its start, later on a loaded machine) finds its lease gone
      await vi.waitFor(() => expect(lost).toHaveLength(1), { timeout: 10_000, interval: 100 });
      expect(lost.map((e) => (e as { code?: string }).code)).toEqual(['LEASE_LOST']);
      expect(c.l.live).toBe(false);
      expect(a.l.live).toBe(true);

      // re (never swept) restarts after its lease expired: it recovers its own attempt itself
      const e1 = await lease('re', 1500, 60_000);
      const xe = attempt('s-keep', null);
      await e1.writes.write({ kind: 'attempt', attempt: xe, raiseSensitivity: null });
      await new Promise((r) => setTimeout(r, 1800));
      const e2 = await lease('re', 60_000, 20_000);
      expect(e2.l.acquired.previous).toBe('expired');
      expect(e2.l.recovered).toEqual({ replicaId: 're', attempts: 1, executions: 0 });
      const chain = await engine.bundle('s-keep', 's-keep');
      expect(verified(chain)).toEqual([]);
      const bodies = chain.entries.map((x) => JSON.parse(x.canonical));
      const summary = bodies.map((x) => [x.call_id, x.detail.reason, x.detail.sealed_by ?? null]);
      expect(summary.slice(0, 2).sort()).toEqual(
        [
          [xc.callId, LEASE_EXPIRED_REASON, 'rb'],
          [xd.callId, LEASE_EXPIRED_REASON, 'rb'],
        ].sort(),
      );
      expect(summary.slice(2)).toEqual([[xe.callId, RESTART_REASON, null]]);

      // A restart whose recovery outlasts its ttl (here: waiting on the session chain's tip lock)
      // keeps its lease: the heartbeat runs during the recovery.
      const f1 = await lease('rf', 1500, 60_000);
      const xf = attempt('s-keep', null);
      await f1.writes.write({ kind: 'attempt', attempt: xf, raiseSensitivity: null });
      await new Promise((r) => setTimeout(r, 1800));
      const holder = await engine.admin.connect();
      await holder.query('BEGIN');
      await holder.query("SELECT 1 FROM chain_tips WHERE chain_id = 's-keep' FOR UPDATE");
      const lostF: Error[] = [];
      const starting = lease('rf', 600, 150, (e) => lostF.push(e));
      await new Promise((r) => setTimeout(r, 1500));
      await holder.query('COMMIT');
      holder.release();
      const f2 = await starting;
      expect(f2.l.recovered).toEqual({ replicaId: 'rf', attempts: 1, executions: 0 });
      await new Promise((r) => setTimeout(r, 500));
      expect(lostF).toEqual([]);
      expect(f2.l.live).toBe(true);

      await a.l.stop();
      const rows = await engine.admin.query(
        'SELECT replica_id, state FROM replica_leases WHERE replica_id IN ($1, $2)',
        ['ra', 'rb'],
      );
      expect(Object.fromEntries(rows.rows.map((r) => [r.replica_id, r.state]))).toEqual({
        ra: 'sealed',
        rb: 'live',
      });
    } finally {
      for (const l of leases) await l.stop().catch(() => undefined);
      for (const p of pools) await p.end();
      await engine.close();
    }
  }, 60_000);
});
