/**
 * The crash test's load: `concurrency` workers send, until stopped, calls without and with
 * execution_id in the agent's default session, retries of execution_ids whose first answer was
 * lost to a kill (same arguments, same execution_id), fresh calls replacing lost calls without
 * one, retries of execution_ids that already ended (answered, or sealed by a restart after a
 * kill: each must be refused), and sessions opened, used (calls in sequence) and closed. It keeps
 * what was answered (the evidence each answer names, and whether it was a result) for the checks.
 */
import { randomUUID } from 'node:crypto';

/** An answer that names its terminal entry (result `_meta` or error `data.evidence`). */
export interface Answered {
  callId: string;
  entryHash: string;
  errorCode: string | null;
  /** The chain and sequence number the answer's evidence names (absent: not compared). */
  chainId?: string;
  sequenceNumber?: number;
  /** The answer was a result (`result._meta`), not an error; absent: a result when `errorCode` is null. */
  result?: boolean;
  /** The call retried an execution_id whose earlier call had been answered with its terminal entry. */
  retryOfEnded?: boolean;
}

/** What the load did, for the report. */
export interface LoadCounts {
  requests: number;
  answered: number;
  lost: number;
  retries: number;
  retryRefused: number;
  /** Retries of execution_ids that had already ended (each must be refused: check.ts). */
  retriesOfEnded: number;
  shuttingDown: number;
  notRecorded: number;
  sessionsOpened: number;
  sessionsClosed: number;
}

interface Op {
  op: string;
  ms: number;
  executionId: string | null;
}

type Json = Record<string, unknown>;

export class CrashLoad {
  readonly answered: Answered[] = [];
  readonly counts: LoadCounts = {
    requests: 0,
    answered: 0,
    lost: 0,
    retries: 0,
    retryRefused: 0,
    retriesOfEnded: 0,
    shuttingDown: 0,
    notRecorded: 0,
    sessionsOpened: 0,
    sessionsClosed: 0,
  };
  /** Execution calls whose answer was lost: retried later with the same arguments. */
  private readonly retryQueue: Op[] = [];
  /** Execution calls answered with their terminal entry: some are sent again, later (perhaps after a kill). */
  private readonly endedQueue: Op[] = [];

  constructor(
    private readonly token: string,
    private readonly tool: string,
    private readonly concurrency = 8,
  ) {}

  /**
   * Runs the workers until `stop.stopped` (each finishes its current step). `target` is the
   * gateway's URL, or a function naming one for each request (replicas: a session opened through
   * one replica is used and closed through whichever the function names next).
   */
  async run(target: string | (() => string), stop: { stopped: boolean }): Promise<void> {
    const url = typeof target === 'string' ? () => target : target;
    await Promise.all(
      Array.from({ length: this.concurrency }, async () => {
        while (!stop.stopped) await this.step(url);
      }),
    );
  }

  private async step(url: () => string): Promise<void> {
    const r = Math.random();
    if (r < 0.15 && this.retryQueue.length) {
      const op = this.retryQueue.shift() as Op;
      this.counts.retries++;
      const code = await this.call(url(), op, null);
      if (code === 'EXECUTION_REPLAY_REFUSED' || code === 'EXECUTION_IN_FLIGHT') this.counts.retryRefused++;
      return;
    }
    if (r < 0.2 && this.endedQueue.length) {
      // An execution that ended: the retry must be refused, never run again (check.ts).
      const op = this.endedQueue.splice(Math.floor(Math.random() * this.endedQueue.length), 1)[0] as Op;
      this.counts.retriesOfEnded++;
      await this.call(url(), op, null, true);
      return;
    }
    if (r < 0.35) return this.session(url);
    await this.call(url(), newOp(r < 0.65), null);
  }

  private async session(url: () => string): Promise<void> {
    const opened = await this.request(url(), 'POST', '/sessions', {});
    const sid = (opened?.session_id as string | undefined) ?? null;
    if (!sid) return;
    this.counts.sessionsOpened++;
    const n = 1 + Math.floor(Math.random() * 3);
    for (let i = 0; i < n; i++) {
      const code = await this.call(url(), newOp(Math.random() < 0.4), sid);
      if (code === 'lost') return; // the gateway is gone: the restart closes the session
    }
    if (await this.request(url(), 'POST', `/sessions/${sid}/close`)) this.counts.sessionsClosed++;
  }

  /** One tools/call; returns its error code, null for a result, or 'lost' without an answer. */
  private async call(
    url: string,
    op: Op,
    sessionId: string | null,
    retryOfEnded = false,
  ): Promise<string | null> {
    const cmcp: Json = {};
    if (op.executionId) cmcp.execution_id = op.executionId;
    if (sessionId) cmcp.session_id = sessionId;
    const body = {
      jsonrpc: '2.0',
      id: this.counts.requests,
      method: 'tools/call',
      params: { name: this.tool, arguments: { op: op.op, ms: op.ms }, _cmcp: cmcp },
    };
    const res = await this.post(url, '/mcp', body);
    if (!res) {
      // Lost to a kill. An execution is retried under its execution_id; a call without one is
      // replaced by a new call (it may have run: only the record says).
      if (op.executionId) this.retryQueue.push(op);
      return 'lost';
    }
    const result = res.result as Json | undefined;
    const error = res.error as { data?: Json } | undefined;
    const evidence = ((result?._meta as Json | undefined)?.['dev.cmcp/evidence'] ?? error?.data?.evidence) as
      | Json
      | undefined;
    const code = (error?.data?.error_code as string | undefined) ?? null;
    if (code === 'GATEWAY_SHUTTING_DOWN') this.counts.shuttingDown++;
    if (code === 'AUDIT_WRITE_FAILED') this.counts.notRecorded++;
    if (evidence) {
      this.counts.answered++;
      this.answered.push({
        callId: String(evidence.call_id),
        entryHash: String(evidence.entry_hash),
        errorCode: code,
        chainId: String(evidence.chain_id),
        sequenceNumber: Number(evidence.sequence_number),
        result: result !== undefined,
        ...(retryOfEnded ? { retryOfEnded } : {}),
      });
      // Its execution ended (a result, or the outcome_unknown of an interrupted call): queue a
      // later retry, at most a few dozen waiting.
      if (
        op.executionId &&
        (result || code === 'CALL_INTERRUPTED') &&
        this.endedQueue.length < 50 &&
        Math.random() < 0.3
      )
        this.endedQueue.push(op);
    }
    return code;
  }

  private async request(url: string, method: string, path: string, body?: unknown): Promise<Json | null> {
    this.counts.requests++;
    try {
      const r = await fetch(`${url}${path}`, {
        method,
        headers: {
          authorization: `Bearer ${this.token}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await r.text();
      return r.ok && text ? (JSON.parse(text) as Json) : null;
    } catch {
      this.counts.lost++;
      return null;
    }
  }

  private async post(url: string, path: string, body: unknown): Promise<Json | null> {
    this.counts.requests++;
    try {
      const r = await fetch(`${url}${path}`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${this.token}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await r.text();
      return text ? (JSON.parse(text) as Json) : null;
    } catch {
      this.counts.lost++;
      return null;
    }
  }
}

/** A new call: a unique op, a short random duration, and an execution_id when `withExecution`. */
function newOp(withExecution: boolean): Op {
  const op = randomUUID();
  return { op, ms: Math.floor(Math.random() * 400), executionId: withExecution ? `x-${op}` : null };
}
