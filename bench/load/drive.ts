/**
 * A bounded load driver for the gateway's `POST /mcp` (docs/testing.md, Node.js; test/load-stability.test.ts): `tools/call` requests at a fixed
 * concurrency, alternating the stdio upstream (`fs.read_text_file`) and the Streamable HTTP one
 * (`everything.echo`), each carrying a fresh `params._cmcp.execution_id`. Every request is
 * recorded with what came back; {@link checkAudit} then holds each answered call against the
 * gateway's SQLite audit log and execution registry.
 *
 * Bounded twice: a call count and a wall-clock limit, whichever comes first. A connection failure
 * (refused or reset: the gateway is gone) ends the run at once instead of spinning on refused
 * connections; a request that times out (60 s) is recorded and the run goes on.
 */
import Database from 'better-sqlite3';

export interface LoadTarget {
  url: string;
  token: string;
  /** Path that `fs.read_text_file` reads (inside the fs upstream's allowed folder). */
  readableFile: string;
}

export interface LoadOptions {
  concurrency: number;
  /** At most this many calls. */
  maxCalls: number;
  /** And for at most this long (ms). */
  maxMs: number;
  /** Prefix of this run's execution ids (unique per phase). */
  tag: string;
}

/** What one request got back. `answered`: a JSON-RPC result or error carrying audit evidence. */
export interface CallRecord {
  executionId: string;
  upstream: 'stdio' | 'http';
  answered: boolean;
  /** JSON-RPC error's `data.error_code`, null for a result. */
  errorCode: string | null;
  callId: string | null;
  entryHash: string | null;
  /** Why a request got no answer (HTTP status, body, transport error). */
  failure: string | null;
  /** `connection`: refused/reset; `timeout`: no answer in 60 s; `http`: an answer without evidence. */
  failureKind: 'connection' | 'timeout' | 'http' | null;
}

export interface LoadResult {
  records: CallRecord[];
  elapsedMs: number;
  callsPerSecond: number;
  /** The first connection failure, which ended the run early; null if none. */
  transportFailure: string | null;
}

interface Evidence {
  entry_hash?: string;
  call_id?: string;
}

function parseAnswer(
  text: string,
): { callId: string | null; entryHash: string | null; errorCode: string | null } | null {
  let body: {
    result?: { _meta?: Record<string, Evidence> };
    error?: { data?: { error_code?: string; call_id?: string; evidence?: Evidence } };
  };
  try {
    body = JSON.parse(text);
  } catch {
    return null;
  }
  if (body.result) {
    const ev = body.result._meta?.['dev.cmcp/evidence'];
    return ev ? { callId: ev.call_id ?? null, entryHash: ev.entry_hash ?? null, errorCode: null } : null;
  }
  const data = body.error?.data;
  if (!data?.evidence) return null;
  return {
    callId: data.call_id ?? data.evidence.call_id ?? null,
    entryHash: data.evidence.entry_hash ?? null,
    errorCode: data.error_code ?? null,
  };
}

/** One `tools/call`; never throws (a failure is recorded). */
async function oneCall(t: LoadTarget, i: number, tag: string): Promise<CallRecord> {
  const executionId = `${tag}-${i}`;
  const stdio = i % 2 === 0;
  const params = stdio
    ? { name: 'fs.read_text_file', arguments: { path: t.readableFile } }
    : { name: 'everything.echo', arguments: { message: `load ${executionId}` } };
  const rec: CallRecord = {
    executionId,
    upstream: stdio ? 'stdio' : 'http',
    answered: false,
    errorCode: null,
    callId: null,
    entryHash: null,
    failure: null,
    failureKind: null,
  };
  let status = 0;
  let text = '';
  try {
    const r = await fetch(`${t.url}/mcp`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        authorization: `Bearer ${t.token}`,
      },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: i,
        method: 'tools/call',
        params: { ...params, _cmcp: { execution_id: executionId } },
      }),
      signal: AbortSignal.timeout(60_000),
    });
    status = r.status;
    text = await r.text();
  } catch (e) {
    const cause = (e as { cause?: { code?: string } }).cause?.code;
    rec.failure = `transport: ${(e as Error).message}${cause ? ` (${cause})` : ''}`;
    rec.failureKind = (e as Error).name === 'TimeoutError' ? 'timeout' : 'connection';
    return rec;
  }
  const a = parseAnswer(text);
  if (!a?.callId || !a.entryHash) {
    rec.failure = `HTTP ${status}: ${text.slice(0, 300)}`;
    rec.failureKind = 'http';
    return rec;
  }
  Object.assign(rec, a, { answered: true });
  return rec;
}

/** Runs the load (module doc). */
export async function runLoad(t: LoadTarget, o: LoadOptions): Promise<LoadResult> {
  const records: CallRecord[] = [];
  const t0 = Date.now();
  const deadline = t0 + o.maxMs;
  let next = 0;
  let transportFailure: string | null = null;
  const worker = async () => {
    while (next < o.maxCalls && Date.now() < deadline && transportFailure === null) {
      const rec = await oneCall(t, next++, o.tag);
      records.push(rec);
      if (rec.failureKind === 'connection') transportFailure ??= rec.failure;
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, worker));
  const elapsedMs = Date.now() - t0;
  return { records, elapsedMs, callsPerSecond: (records.length * 1000) / elapsedMs, transportFailure };
}

export interface AuditCheck {
  answered: number;
  /** Answered calls with no terminal `tool_call` entry for their call_id. */
  missing: string[];
  /** Answered calls with more than one. */
  duplicated: string[];
  /** Answered calls whose entry hash differs from the evidence they were answered with. */
  mismatched: string[];
  /** Answered calls whose execution_id is not terminal in the registry at that entry. */
  registryMismatch: string[];
  /** Audit entries that count the calls: `tool_call` entries in the database. */
  toolCallEntries: number;
}

/**
 * Holds each answered call against the audit log: exactly one `tool_call` entry with its
 * call_id, whose entry_hash is the one in the call's evidence, and (execution_id) a registry row
 * in a terminal state pointing at that entry. Opens the database read-only.
 */
export function checkAudit(dbPath: string, records: CallRecord[]): AuditCheck {
  const db = new Database(dbPath, { readonly: true, fileMustExist: true });
  try {
    const byCall = new Map<string, string[]>();
    const rows = db
      .prepare("SELECT entry_hash, canonical FROM audit_entries WHERE entry_type = 'tool_call'")
      .all() as { entry_hash: string; canonical: string }[];
    for (const r of rows) {
      const callId = (JSON.parse(r.canonical) as { call_id?: string | null }).call_id;
      if (!callId) continue;
      const list = byCall.get(callId) ?? [];
      list.push(r.entry_hash);
      byCall.set(callId, list);
    }
    const exec = db.prepare(
      'SELECT state, call_id, terminal_entry_hash FROM executions WHERE agent_id = ? AND execution_id = ?',
    );
    const out: AuditCheck = {
      answered: 0,
      missing: [],
      duplicated: [],
      mismatched: [],
      registryMismatch: [],
      toolCallEntries: rows.length,
    };
    for (const rec of records) {
      if (!rec.answered || !rec.callId) continue;
      out.answered += 1;
      const hashes = byCall.get(rec.callId) ?? [];
      if (hashes.length === 0) out.missing.push(rec.callId);
      else if (hashes.length > 1) out.duplicated.push(rec.callId);
      else if (hashes[0] !== rec.entryHash) out.mismatched.push(rec.callId);
      if (rec.errorCode === null) {
        const x = exec.get('load-agent', rec.executionId) as
          | { state: string; call_id: string; terminal_entry_hash: string | null }
          | undefined;
        const terminal = x?.state === 'completed' && x.terminal_entry_hash === rec.entryHash;
        if (!terminal || x?.call_id !== rec.callId) out.registryMismatch.push(rec.executionId);
      }
    }
    return out;
  } finally {
    db.close();
  }
}

/** Counts of a load result: answered / results / errors by code / failures. */
export function summarize(r: LoadResult): Record<string, number> {
  const s: Record<string, number> = { requests: r.records.length, answered: 0, results: 0, unanswered: 0 };
  for (const rec of r.records) {
    if (!rec.answered) {
      s.unanswered = (s.unanswered ?? 0) + 1;
      s[`unanswered_${rec.failureKind}`] = (s[`unanswered_${rec.failureKind}`] ?? 0) + 1;
    } else {
      s.answered = (s.answered ?? 0) + 1;
      const k = rec.errorCode ?? 'results';
      s[k] = (s[k] ?? 0) + 1;
    }
  }
  return s;
}
