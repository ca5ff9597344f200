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
 *   the row's state as its disposition;
 * - a call the upstream ran is never recorded `not_attempted`;
 * - every answer names an entry that says what the answer said (docs/spec/audit-entries.md,
 *   execution.md "Terminal states"): a result names a `completed` entry without error code; an
 *   error names an entry with the same `error_code` — `refused` for a refusal,
 *   `outcome_unknown` for `CALL_INTERRUPTED` — and the answer's chain and sequence number;
 * - claims form one chain: `claim_sequence` 0…n-1, each `prev_claim_hash` the SHA-256 of the
 *   previous claim's stored text (docs/spec/claims.md), null for the first;
 * - an execution has at most one terminal entry that is not a refusal, and a retry of one that
 *   had ended is answered with a refusal (never a result);
 * - SQLite: `PRAGMA integrity_check` says `ok`. PostgreSQL has no such check here: its pages
 *   are the server's (WAL replay after each crash), and the record-level rules stand for it.
 *
 * Input the checker cannot parse (an entry's or claim's JSON) is itself a violation: it fails
 * closed.
 */
import { createHash } from 'node:crypto';
import { verifyBundle, verifyClaim } from '@cmcp/verify';
import { jcsDigest } from '@cmcp/verify/formats';
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

/** Error codes whose entry is a refusal (the call never reached an upstream). */
const REFUSAL_CODES = new Set([
  'EXECUTION_REPLAY_REFUSED',
  'EXECUTION_IN_FLIGHT',
  'EXECUTION_COLLISION',
  'GATEWAY_SHUTTING_DOWN',
]);

/** `JSON.parse`, or null (with a violation) when the text is not JSON: the checker fails closed. */
function parseOr(text: string, what: string, v: string[]): Record<string, unknown> | null {
  try {
    const x = JSON.parse(text) as unknown;
    if (x && typeof x === 'object' && !Array.isArray(x)) return x as Record<string, unknown>;
  } catch {
    // reported below
  }
  v.push(`${what}: cannot parse its JSON`);
  return null;
}

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
  let snap: CrashSnapshot;
  try {
    snap = readSqliteSnapshot(dbPath);
  } catch (e) {
    // A database the checker cannot read fails the check instead of passing it.
    return {
      counts: emptyCounts(ran, answered),
      violations: [`cannot read ${dbPath}: ${(e as Error).message}`],
    };
  }
  return checkCrashSnapshot(snap, tool, ran, answered);
}

function emptyCounts(ran: WorkArgs[], answered: Answered[]): CheckCounts {
  return {
    chains: 0,
    entries: 0,
    claims: 0,
    claimVerdicts: {},
    answeredChecked: answered.length,
    upstreamRan: ran.length,
    interruptedRecorded: 0,
    interruptedReasons: {},
    sessionsOpenAtEnd: 0,
    executions: 0,
    executionStates: {},
  };
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
  const claimBySeq = new Map<number, { text: string; claim: Record<string, unknown> }>();
  for (const c of snap.claims) {
    const claim = parseOr(c.text, `claim ${c.session_id}`, v);
    if (!claim) continue;
    const r = verifyClaim(claim, { bundle: bundles.get(c.session_id) });
    tally(claimVerdicts, r.verdict);
    for (const x of r.checks)
      if (x.status === 'fail') v.push(`claim ${c.session_id}: ${x.id} ${x.reason_code}`);
    const seq = claim.claim_sequence;
    if (typeof seq !== 'number' || !Number.isInteger(seq) || seq < 0)
      v.push(`claim ${c.session_id}: claim_sequence ${String(seq)} is not a sequence number`);
    else if (claimBySeq.has(seq)) v.push(`claim_sequence ${seq}: two claims`);
    else claimBySeq.set(seq, { text: c.text, claim });
  }
  // The claim chain: 0…n-1 without gaps, each linked to the previous one's stored text.
  for (let i = 0; i < claimBySeq.size; i++) {
    const c = claimBySeq.get(i);
    if (!c) {
      v.push(`claim_sequence ${i}: missing (claims are not numbered 0…${claimBySeq.size - 1})`);
      break;
    }
    const prev = claimBySeq.get(i - 1);
    const want = prev ? createHash('sha256').update(prev.text, 'utf8').digest('hex') : null;
    if (c.claim.prev_claim_hash !== want)
      v.push(
        i === 0
          ? 'claim_sequence 0: prev_claim_hash is not null'
          : `claim_sequence ${i}: prev_claim_hash does not link to claim ${i - 1}`,
      );
  }
  if (snap.integrity && (snap.integrity.length !== 1 || snap.integrity[0] !== 'ok'))
    v.push(`PRAGMA integrity_check: ${snap.integrity.slice(0, 5).join('; ')}`);

  const entries: Entry[] = [];
  for (const r of rows) {
    const e = parseOr(r.canonical, `entry ${r.entry_hash}`, v);
    if (e)
      entries.push({
        ...e,
        chain_id: r.chain_id,
        sequence_number: r.sequence_number,
        entry_hash: r.entry_hash,
      });
  }
  const calls = entries.filter((e) => e.entry_type === 'tool_call');
  const byCallId = new Map<string, Entry[]>();
  for (const e of calls) byCallId.set(String(e.call_id), [...(byCallId.get(String(e.call_id)) ?? []), e]);

  for (const a of answered) {
    const es = byCallId.get(a.callId) ?? [];
    if (es.length !== 1) v.push(`answered call ${a.callId}: ${es.length} terminal entries`);
    else if (es[0]?.entry_hash !== a.entryHash)
      v.push(`answered call ${a.callId}: its answer names another entry`);
    else {
      const e = es[0];
      const result = a.result ?? a.errorCode === null;
      const [disp, code] = [String(e.disposition), e.error_code ?? null];
      const say = `answered call ${a.callId}: answer ${result ? 'result' : String(a.errorCode)}, entry ${disp}/${String(code)}`;
      if (a.chainId !== undefined && (a.chainId !== e.chain_id || a.sequenceNumber !== e.sequence_number))
        v.push(
          `answered call ${a.callId}: its answer names chain ${a.chainId} #${String(a.sequenceNumber)}, the entry is ${e.chain_id} #${String(e.sequence_number)}`,
        );
      if (result) {
        if (disp !== 'completed' || code !== null) v.push(`${say}: a result names a completed entry`);
      } else if (code !== a.errorCode) v.push(`${say}: the error codes differ`);
      else if (REFUSAL_CODES.has(String(a.errorCode)) && disp !== 'refused')
        v.push(`${say}: a refusal names a refused entry`);
      else if (a.errorCode === 'CALL_INTERRUPTED' && disp !== 'outcome_unknown')
        v.push(`${say}: CALL_INTERRUPTED names an outcome_unknown entry`);
      if (a.retryOfEnded && (result || disp !== 'refused'))
        v.push(`${say}: a retry of an execution that had ended was not refused`);
    }
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
    else if (e.disposition === 'not_attempted') v.push(`upstream ran ${r.op}: its entry says not_attempted`);
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
  // An execution ends once: a retry after its end is refused, never a second terminal entry.
  const ends = new Map<string, number>();
  for (const e of calls)
    if (e.execution_id != null && e.disposition !== 'refused') {
      const k = `${String(e.agent_id)}\n${String(e.execution_id)}`;
      ends.set(k, (ends.get(k) ?? 0) + 1);
    }
  for (const [k, n] of ends)
    if (n > 1) v.push(`execution ${k.split('\n')[1]}: ${n} terminal entries that are not refusals`);
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
