/**
 * The store worker (src/store/sqlite/write-worker.ts; config `store.worker`): the call path's writes
 * run in a worker thread behind a bounded queue. Real gateways, real SQLite, a real MCP
 * upstream. What it must keep: one terminal entry per call, no attempt left open, the session's
 * sensitivity raised with the attempt, a full queue refused with STORE_QUEUE_FULL (recorded),
 * and the event loop's own writes (sessions opened and closed on the main connection) neither
 * starving nor starved by it. The existing call-path, execution, group-commit, crash and shutdown
 * suites also run with the worker on (vitest.config.ts, project `store-worker`).
 */
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { AttemptStart } from '../src/store/port.js';
import { AttemptLog } from '../src/store/sqlite/attempts.js';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { immediate, openDatabase, openReadOnlyDatabase } from '../src/store/sqlite/db.js';
import { ExecutionRegistry } from '../src/store/sqlite/executions.js';
import { CallRecovery } from '../src/store/sqlite/recovery.js';
import { sqliteWriteContext } from '../src/store/sqlite/writes.js';
import { executeWrite } from '../src/store/writes.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  cleanup,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startChild,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

/** A tools/call attempt without execution_id in session s1, keyed by `callId`. */
const start = (callId: string): AttemptStart => ({
  callId,
  method: 'tools/call',
  upstream: 'c',
  agentId: 'alice',
  sessionId: 's1',
  executionId: null,
  toolName: 'c.record',
  requestPayloadHash: null,
  workflowId: null,
});

let up: CountingServer;
beforeAll(async () => {
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'store', 'sqlite', 'write-worker.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  up = await startCountingServer();
});
afterAll(async () => {
  await up?.close();
});

const LIMITS = { agent_requests_per_s: 100_000, agent_request_burst: 100_000, agent_max_in_flight: 10_000 };

async function config(store: Record<string, unknown>, port = 0, extra: Record<string, unknown> = {}) {
  return writeConfig({
    port,
    operators: [{ operator_id: 'ops', token: 'ops-token' }],
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    sessions: { default_max_calls: 100_000 },
    extra: { limits: LIMITS, store, ...extra },
  });
}

const call = (url: string, id: number, tool = 'c.record', extra: Record<string, unknown> = {}) =>
  rpc(url, 'alice-token', {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: tool, arguments: {}, ...extra },
  });

interface Terminal {
  call_id: string;
  disposition: string;
  error_code: string | null;
}

/** Every terminal tool_call entry in the database, by call_id. */
function terminals(dbPath: string): Map<string, Terminal[]> {
  const db = openReadOnlyDatabase(dbPath);
  try {
    const by = new Map<string, Terminal[]>();
    for (const { canonical } of db
      .prepare<[], { canonical: string }>(
        "SELECT canonical FROM audit_entries WHERE entry_type = 'tool_call'",
      )
      .all()) {
      const e = JSON.parse(canonical) as Terminal;
      by.set(e.call_id, [...(by.get(e.call_id) ?? []), e]);
    }
    return by;
  } finally {
    db.close();
  }
}

function count(dbPath: string, sql: string): number {
  const db = openReadOnlyDatabase(dbPath);
  try {
    return (db.prepare<[], { n: number }>(sql).get() as { n: number }).n;
  } finally {
    db.close();
  }
}

/** The call_id an answer names (result `_meta` evidence or error data). */
function answeredCallId(body: {
  result?: { _meta?: Record<string, { call_id?: string }> };
  error?: { data?: { call_id?: string } };
}): string | undefined {
  return body.result?._meta?.['dev.cmcp/evidence']?.call_id ?? body.error?.data?.call_id;
}

describe('store worker: the call path writes in a worker thread', () => {
  let cfg: TestConfig;
  afterAll(() => cfg && cleanup(cfg.dir));

  it('concurrent calls with and without execution_id: one terminal entry each, no attempt open, sensitivity row raised', async () => {
    cfg = await config({ worker: true });
    const gw = await startInProcess(cfg);
    const before = up.invocations.length;
    try {
      const answers = await Promise.all(
        Array.from({ length: 48 }, (_, i) =>
          call(gw.url, i, 'c.record', i % 2 ? { _cmcp: { execution_id: `x-${i}` } } : {}),
        ),
      );
      for (const a of answers) expect(a.body.result?.isError ?? false).toBe(false);
      // A retried execution_id is refused from the worker's admission, with its entry.
      const again = await call(gw.url, 99, 'c.record', { _cmcp: { execution_id: 'x-1' } });
      expect(again.body.error?.data?.error_code).toBe('EXECUTION_REPLAY_REFUSED');
      expect(up.invocations.length - before).toBe(48);
      const t = terminals(cfg.dbPath);
      for (const a of answers) expect(t.get(answeredCallId(a.body) as string)).toHaveLength(1);
      expect(t.get(answeredCallId(again.body) as string)).toEqual([
        expect.objectContaining({ disposition: 'refused', error_code: 'EXECUTION_REPLAY_REFUSED' }),
      ]);
      expect(count(cfg.dbPath, 'SELECT count(*) AS n FROM call_attempts')).toBe(0);
      expect(count(cfg.dbPath, "SELECT count(*) AS n FROM executions WHERE state = 'in_flight'")).toBe(0);
      // The first attempt of the session wrote its durable sensitivity row (call/sensitivity.ts).
      expect(count(cfg.dbPath, 'SELECT count(*) AS n FROM session_sensitivity')).toBe(1);
    } finally {
      await gw.close();
    }
  });

  it('a full queue refuses new calls with STORE_QUEUE_FULL before their attempt; each refusal is recorded', async () => {
    const c = await config({ worker: true, max_queued_writes: 2 });
    const gw = await startInProcess(c);
    try {
      await call(gw.url, 0); // opens the default session
      // Another connection holds the write lock: the worker's writes wait, and its queue fills.
      const holder = openDatabase(c.dbPath, 100);
      holder.exec('BEGIN IMMEDIATE');
      const before = up.invocations.length;
      const pending = Array.from({ length: 16 }, (_, i) => call(gw.url, i + 1));
      await new Promise((r) => setTimeout(r, 500));
      holder.exec('COMMIT');
      holder.close();
      const answers = await Promise.all(pending);
      const full = answers.filter((a) => a.body.error?.data?.error_code === 'STORE_QUEUE_FULL');
      const ok = answers.filter((a) => a.body.result);
      expect(full.length).toBeGreaterThan(0);
      expect(ok.length).toBeGreaterThan(0);
      expect(full.length + ok.length).toBe(16);
      expect(full[0]?.status).toBe(200); // a JSON-RPC error in an HTTP 200, as every refusal
      // Only the admitted calls reached the upstream.
      expect(up.invocations.length - before).toBe(ok.length);
      const t = terminals(c.dbPath);
      for (const a of full)
        expect(t.get(answeredCallId(a.body) as string)).toEqual([
          expect.objectContaining({ disposition: 'refused', error_code: 'STORE_QUEUE_FULL' }),
        ]);
      expect(count(c.dbPath, 'SELECT count(*) AS n FROM call_attempts')).toBe(0);
      const metrics = await (
        await fetch(`${gw.url}/metrics`, { headers: { authorization: 'Bearer ops-token' } })
      ).text();
      expect(metrics).toMatch(new RegExp(`cmcp_refusals_total\\{code="STORE_QUEUE_FULL"\\} ${full.length}`));
    } finally {
      await gw.close();
      cleanup(c.dir);
    }
  });

  it('sessions opened and closed on the main connection while the worker writes under load: none fails, every call answered', async () => {
    const c = await config({ worker: true });
    const gw = await startInProcess(c);
    try {
      let stop = false;
      let n = 0;
      const answers: Awaited<ReturnType<typeof call>>[] = [];
      const loop = async () => {
        while (!stop) answers.push(await call(gw.url, n++));
      };
      const callers = Array.from({ length: 32 }, loop);
      const sessions: { open: number; close: number }[] = [];
      for (let i = 0; i < 12; i++) {
        const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
        const closed = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`);
        sessions.push({ open: s.status, close: closed.status });
      }
      stop = true;
      await Promise.all(callers);
      expect(sessions.every((s) => s.open === 201 || s.open === 200)).toBe(true);
      expect(sessions.every((s) => s.close === 200)).toBe(true);
      expect(answers.length).toBeGreaterThan(32);
      for (const a of answers) expect(a.body.result?.isError ?? false).toBe(false);
      const t = terminals(c.dbPath);
      for (const a of answers) expect(t.get(answeredCallId(a.body) as string)).toHaveLength(1);
    } finally {
      await gw.close();
      cleanup(c.dir);
    }
  });
});

describe('store worker: a SIGTERM under load', () => {
  it('every answered call has exactly one terminal entry; no attempt is left open or sealed twice', async () => {
    const c = await config({ worker: true }, await freePort(), { shutdown: { drain_ms: 300 } });
    const gw = await startChild(c);
    try {
      let stop = false;
      let n = 0;
      const answers: Awaited<ReturnType<typeof call>>[] = [];
      const loop = async () => {
        while (!stop) {
          try {
            // Every fourth call is held at the upstream past the drain time.
            answers.push(await call(gw.url, n, n++ % 4 === 0 ? 'c.hold' : 'c.record'));
          } catch {
            return; // the connection closed at shutdown
          }
        }
      };
      const callers = Array.from({ length: 24 }, loop);
      await new Promise((r) => setTimeout(r, 1500));
      const code = await gw.stop('SIGTERM');
      stop = true;
      up.release();
      await Promise.all(callers);
      expect(code).toBe(0);
      expect(answers.length).toBeGreaterThan(24);
      const t = terminals(c.dbPath);
      for (const a of answers) {
        const id = answeredCallId(a.body);
        if (id) expect(t.get(id)).toHaveLength(1);
      }
      for (const entries of t.values()) expect(entries).toHaveLength(1);
      expect(count(c.dbPath, 'SELECT count(*) AS n FROM call_attempts')).toBe(0);
      // The held calls were recorded outcome_unknown by the shutdown's recovery.
      expect([...t.values()].flat().some((e) => e.disposition === 'outcome_unknown')).toBe(true);
    } finally {
      await gw.stop('SIGKILL');
      up.release();
      cleanup(c.dir);
    }
  }, 60_000);
});

describe('shutdown recovery while another connection commits terminal entries', () => {
  it('an attempt the other connection ended after recovery read it is not sealed again; recovery goes on', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-recovery-race-'));
    const file = join(dir, 'store.db');
    const db = openDatabase(file, 2000);
    const other = openDatabase(file, 2000);
    try {
      const attempts = new AttemptLog(db, 'gateway');
      const chain = new AuditChain(db);
      const closed = { isOpen: () => false, countCall: () => undefined };
      const recovery = new CallRecovery(db, chain, attempts, new ExecutionRegistry(db, 'gateway'), closed);
      immediate(db, () => {
        attempts.begin(start('a'));
        attempts.begin(start('b'));
      });
      // The other connection (the store worker's) holds the write lock: recovery reads both
      // attempts, then waits; meanwhile the other connection commits call a's own end.
      other.exec('BEGIN IMMEDIATE');
      const recovered = recovery.runAwaited('in flight at shutdown');
      await new Promise((r) => setTimeout(r, 50));
      other.prepare('DELETE FROM call_attempts WHERE call_id = ?').run('a');
      other.exec('COMMIT');
      expect(await recovered).toEqual({ attempts: 1, executions: 0 });
      const sealed = chain
        .entries(GATEWAY_CHAIN_ID)
        .filter((e) => e.entry_type === 'tool_call')
        .map((e) => [e.call_id, e.disposition]);
      expect(sealed).toEqual([['b', 'outcome_unknown']]);
      expect(attempts.open()).toEqual([]);
    } finally {
      if (other.inTransaction) other.exec('ROLLBACK');
      other.close();
      db.close();
      cleanup(dir);
    }
  });
});

describe('write commands over a real SQLite connection (store/writes.ts)', () => {
  it("an attempt command's sensitivity raise commits with its attempt, or not at all", () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-writes-'));
    const db = openDatabase(join(dir, 'store.db'), 500);
    try {
      const ctx = sqliteWriteContext(db, 'gateway');
      const level = () =>
        (
          db.prepare("SELECT level FROM session_sensitivity WHERE session_id = 's1'").get() as
            | { level: number }
            | undefined
        )?.level;
      // The transaction that carries the command rolls back: neither the attempt nor the raise.
      expect(() =>
        immediate(db, () => {
          executeWrite(ctx, { kind: 'attempt', attempt: start('a'), raiseSensitivity: 3 });
          throw new Error('rolled back');
        }),
      ).toThrow('rolled back');
      expect(level()).toBeUndefined();
      expect(ctx.attempts.open()).toEqual([]);
      immediate(db, () => executeWrite(ctx, { kind: 'attempt', attempt: start('a'), raiseSensitivity: 3 }));
      expect(level()).toBe(3);
      expect(ctx.attempts.open().map((a) => a.call_id)).toEqual(['a']);
      // A lower raise never lowers the row; a command without one leaves it.
      immediate(db, () => executeWrite(ctx, { kind: 'attempt', attempt: start('b'), raiseSensitivity: 1 }));
      immediate(db, () =>
        executeWrite(ctx, { kind: 'attempt', attempt: start('c'), raiseSensitivity: null }),
      );
      expect(level()).toBe(3);
      // The commands are plain data: what the worker receives is what postMessage clones.
      const cmd = { kind: 'attempt' as const, attempt: start('d'), raiseSensitivity: 2 };
      expect(structuredClone(cmd)).toEqual(cmd);
    } finally {
      db.close();
      cleanup(dir);
    }
  });
});
