/**
 * Graceful shutdown (docs/spec/call-path.md#shutdown), on SIGTERM/SIGINT: stop admitting, let
 * what was admitted end within the drain time, record what did not as outcome_unknown (SQLite:
 * the start-up recovery, run now; a replica: its own calls sealed before its lease goes), and on
 * SQLite close every open session of this instance with a claim signed by this process's key —
 * so a session bound at open keeps its hardware binding, where a restart would have ended it
 * signed-only; a replica's sessions stay open for the others — then close everything.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import type { PendingTerminals } from '../../call/pending-terminals.js';
import type { SessionService } from '../../session/service.js';
import type { Drain } from './drain.js';
import type { Engine, Sealed } from './engine.js';

/** What a shutdown did. */
export interface ShutdownReport {
  /** True when every admitted request ended within the drain time. */
  drained: boolean;
  /** Calls still at an upstream after the drain time, recorded outcome_unknown. */
  recovered: Sealed;
  /** Sessions closed with a claim (none on a replica). */
  sessionsClosed: number;
}

export interface ShutdownParts {
  app: FastifyInstance;
  drain: Drain;
  /**
   * The call path: its attempts closed before recovery so nothing is forwarded after it, once
   * every write sent before (the store worker's too) has settled.
   */
  calls: { closeAttempts(): Promise<void> };
  /** Terminal entries whose commit failed: tried once more before what is open is sealed. */
  pendingTerminals?: PendingTerminals;
  /** The engine's sealing, its interrupted calls' entries and whether sessions close at a stop. */
  engine: Pick<Engine, 'seal' | 'interrupted' | 'closesSessionsAtStop'>;
  sessions: SessionService;
  log: Logger;
  /** Closes listeners, upstreams, provider, lock or lease, and database. */
  close: () => Promise<void>;
}

/**
 * Runs the shutdown. Never throws for a step that fails: the fault is logged and the rest
 * still runs (the process is leaving either way), except `close`'s own errors.
 * @param drainMs how long admitted requests may take to end, milliseconds.
 */
export async function gracefulShutdown(p: ShutdownParts, drainMs: number): Promise<ShutdownReport> {
  p.drain.stop();
  const drained = await p.drain.idle(drainMs);
  // A call whose terminal write failed gets the outcome it knows if the store writes again now;
  // else the sealing below records it outcome_unknown.
  if (p.pendingTerminals) {
    await p.pendingTerminals.flush();
    p.pendingTerminals.close();
  }
  // Every attempt committed is durable before the sealing reads them; none begins after.
  await p.calls
    .closeAttempts()
    .catch((e) => p.log.error({ err: (e as Error).message }, 'call attempts not closed'));
  const recovered = await p.engine.seal();
  if (!drained)
    p.log.warn({ pending: p.drain.pending, ...recovered, drain_ms: drainMs }, 'drain time elapsed');
  // What is still pending gets an answer (CALL_INTERRUPTED, as recorded) instead of a dropped
  // connection; written before sessions close and connections are closed.
  if (!drained && p.engine.interrupted) await p.drain.answerPending(p.engine.interrupted);
  // Paged and awaited (store/sqlite/paged.ts): probes are answered while long sessions close.
  const closed = p.engine.closesSessionsAtStop
    ? await p.sessions.closeOpenInBatches(null, 'gateway_stopped')
    : [];
  // Requests still running hold their sockets; their late terminal commits are refused (the
  // attempt is gone), so nothing they could still say belongs in the record.
  p.app.server.closeAllConnections();
  await p.close();
  return { drained, recovered, sessionsClosed: closed.length };
}
