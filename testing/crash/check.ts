/**
 * The crash test's checks, on a snapshot of the gateway's database (read after the last gateway
 * stopped: ./snapshot.ts for SQLite, ./postgres-snapshot.ts for a replicas' PostgreSQL), the
 * upstream's log and the answers the load received:
 *
 * - every chain verifies (`verifyBundle`), and every stored claim verifies with its bundle
 *   (`verifyClaim`): no failed check;
 * - every answered call has exactly one terminal `tool_call` entry, the one its answer names;
 * - every call that reached the upstream has exactly one forwarded terminal entry, in the chain
 *   of the session it ran in (or, when the call outlived its session's close, in a gateway chain
 *   naming that session);
 * - no execution reached the upstream twice;
 * - nothing is left in flight (attempts, execution rows; open sessions on SQLite, whose graceful
 *   stop closes them — replicas leave theirs open for the others), and every replica's lease is
 *   sealed;
 * - registry and audit agree: every execution row's terminal entry exists, names it and has
 *   the row's state as its disposition.
 */
import { verifyBundle } from '@cmcp/verify/bundle';
import { verifyClaim } from '@cmcp/verify/claim';
import { jcsDigest } from '@cmcp/verify/format/canonical';
import type { Answered } from './load.js';
import { type CrashSnapshot, readSqliteSnapshot } from './snapshot.js';
import type { WorkArgs } from './upstream.js';

export interface CheckCounts {
  chains: number;
  entries: number;
  claims: number;
  claimVerdicts: Record<string, number>;
  answeredChecked: number;
  upstreamRan: number;
  interruptedRecorded: number;
  /** The CALL_INTERRUPTED entries by `detail.reason` (`none` when an entry has no reason). */
  interruptedReasons: Record<string, number>;
  /** Sessions still open (a violation on SQLite; on replicas they stay open for the others). */
  sessionsOpenAtEnd: number;
  executions: number;
  executionStates: Record<string, number>;
}

export interface CheckResult {
  counts: CheckCounts;
  /** Each broken rule, one line each (empty: all rules hold). */
  violations: string[];
}

type Entry = Record<string, unknown> & { chain_id: string; entry_hash: string };

const tally = (m: Record<string, number>, k: string) => {
  m[k] = (m[k] ?? 0) + 1;
};

/** Runs every check on the SQLite database at `dbPath`. `tool` is the name the agent called (`<upstream>.work`). */
export function checkCrashRun(
  dbPath: string,
  tool: string,
  ran: WorkArgs[],
  answered: Answered[],
): CheckResult {
  return checkCrashSnapshot(readSqliteSnapshot(dbPath), tool, ran, answered);
}

/** Runs every check on a snapshot of either engine (module doc). */
export function checkCrashSnapshot(
  snap: CrashSnapshot,
  tool: string,
  ran: WorkArgs[],
  answered: Answered[],
): CheckResult {
  const v: string[] = [];
  const rows = snap.entries;
  const chains = new Map<string, CrashSnapshot['entries']>();
  for (const r of rows) {
    const list = chains.get(r.chain_id);
    if (list) list.push(r);
    else chains.set(r.chain_id, [r]);
  }
  const sessionIds = new Set(snap.sessionIds);
  const bundles = new Map<string, unknown>();
  for (const [chainId, es] of chains) {
    const bundle = {
      bundle_version: 1,
      chain_id: chainId,
      session_id: sessionIds.has(chainId) ? chainId : null,
      exported_at: new Date().toISOString(),
      entries: es.map((e) => ({
        canonical: e.canonical,
        entry_hash: e.entry_hash,
        ...(e.writer_signature ? { writer_signature: e.writer_signature } : {}),
      })),
    };
    bundles.set(chainId, bundle);
    const isSession = sessionIds.has(chainId);
    // A gateway chain's entries name the sessions they could not be recorded in (a closed or
    // unknown session, a call that outlived its session's close: docs/spec/audit-entries.md
    // "Terminal entries"), so `audit.session` (one session or none) is for session chains.
    for (const c of verifyBundle(bundle).checks)
      if (c.status === 'fail' && (isSession || c.id !== 'audit.session'))
        v.push(`chain ${chainId}: ${c.id} ${c.reason_code}`);
  }
  const claimVerdicts: Record<string, number> = {};
  for (const c of snap.claims) {
    const r = verifyClaim(JSON.parse(c.text), { bundle: bundles.get(c.session_id) });
    tally(claimVerdicts, r.verdict);
    for (const x of r.checks)
      if (x.status === 'fail') v.push(`claim ${c.session_id}: ${x.id} ${x.reason_code}`);
  }

  const entries: Entry[] = rows.map((r) => ({ ...JSON.parse(r.canonical), entry_hash: r.entry_hash }));
  const calls = entries.filter((e) => e.entry_type === 'tool_call');
  const byCallId = new Map<string, Entry[]>();
  for (const e of calls) byCallId.set(String(e.call_id), [...(byCallId.get(String(e.call_id)) ?? []), e]);

  for (const a of answered) {
    const es = byCallId.get(a.callId) ?? [];
    if (es.length !== 1) v.push(`answered call ${a.callId}: ${es.length} terminal entries`);
    else if (es[0]?.entry_hash !== a.entryHash)
      v.push(`answered call ${a.callId}: its answer names another entry`);
  }

  // Forwarded terminal entries by request payload hash (each op is unique to one call).
  const forwarded = new Map<string, Entry[]>();
  for (const e of calls)
    if (e.disposition !== 'refused' && typeof e.request_payload_hash === 'string')
      forwarded.set(e.request_payload_hash, [...(forwarded.get(e.request_payload_hash) ?? []), e]);
  const closed = new Set(entries.filter((e) => e.entry_type === 'session_close').map((e) => e.chain_id));
  const runs = new Map<string, number>();
  for (const r of ran) runs.set(r.op, (runs.get(r.op) ?? 0) + 1);
  for (const r of ran) {
    const es = forwarded.get(jcsDigest({ name: tool, arguments: { op: r.op, ms: r.ms } })) ?? [];
    const e = es[0];
    if (es.length !== 1 || !e) v.push(`upstream ran ${r.op}: ${es.length} forwarded terminal entries`);
    else if (
      e.chain_id !== e.session_id &&
      !(closed.has(String(e.session_id)) && !sessionIds.has(e.chain_id))
    )
      // In its session's chain, or — a call that outlived its session's close (default-session
      // rotation, a close through another replica) — in a gateway chain, naming the closed session.
      v.push(`upstream ran ${r.op}: entry not in its session chain`);
  }
  for (const [op, n] of runs) if (n > 1) v.push(`op ${op} reached the upstream ${n} times`);

  const left = snap.left;
  if (left.attempts) v.push(`${left.attempts} call attempts left open`);
  if (left.inFlight) v.push(`${left.inFlight} executions left in flight`);
  if (left.openSessions && !snap.openSessionsStay) v.push(`${left.openSessions} sessions left open`);
  for (const l of snap.leases ?? [])
    if (l.state !== 'sealed') v.push(`replica ${l.replica_id}: lease left ${l.state}`);

  const byHash = new Map(entries.map((e) => [e.entry_hash, e]));
  const executionStates: Record<string, number> = {};
  const xs = snap.executions;
  for (const x of xs) {
    tally(executionStates, x.state);
    const e = x.terminal_entry_hash ? byHash.get(x.terminal_entry_hash) : undefined;
    if (!e) v.push(`execution ${x.execution_id}: terminal entry missing`);
    else if (e.execution_id !== x.execution_id || e.agent_id !== x.agent_id || e.disposition !== x.state)
      v.push(
        `execution ${x.execution_id}: registry (${x.state}) and audit (${String(e.disposition)}) disagree`,
      );
  }
  const byKey = new Map(xs.map((x) => [`${x.agent_id}\n${x.execution_id}`, x]));
  for (const e of calls)
    if (e.execution_id !== null && e.disposition !== 'refused') {
      const x = byKey.get(`${String(e.agent_id)}\n${String(e.execution_id)}`);
      if (x?.terminal_entry_hash !== e.entry_hash)
        v.push(`entry ${e.entry_hash}: execution ${String(e.execution_id)} does not name it as terminal`);
    }
  const interrupted = calls.filter((e) => e.error_code === 'CALL_INTERRUPTED');
  const interruptedReasons: Record<string, number> = {};
  for (const e of interrupted)
    tally(interruptedReasons, String((e.detail as { reason?: unknown } | undefined)?.reason ?? 'none'));
  return {
    counts: {
      chains: chains.size,
      entries: rows.length,
      claims: snap.claims.length,
      claimVerdicts,
      answeredChecked: answered.length,
      upstreamRan: ran.length,
      interruptedRecorded: interrupted.length,
      interruptedReasons,
      sessionsOpenAtEnd: left.openSessions,
      executions: xs.length,
      executionStates,
    },
    violations: v,
  };
}
