/**
 * The call path's write commands (store/port.ts) on PostgreSQL: each command is one fenced
 * transaction (./transaction.ts) on the replica's pool, with the same meaning as
 * `executeWrite` on SQLite — the same refusal builders (`admissionRefusal`,
 * `admissionRefusalEntry`), the same order of admission checks (store/executions.ts
 * classifyExisting), the same entry builder (store/entries/next-entry.ts), the same fault seam
 * (`terminal_commit`). Written as its own async sequence because the SQLite one runs
 * synchronously inside `BEGIN IMMEDIATE` (each command one savepoint of the group commit's
 * transaction, never yielding the loop), while here every statement is a round trip: one
 * sequence over a context that may answer later would make every SQLite command await.
 */
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type pg from 'pg';
import type { MicroClock } from '../entries/clock.js';
import type { EntryInput } from '../entries/next-entry.js';
import { maybeFail } from '../faults.js';
import type { AttemptStart, CallStore, WriteCommand, WriteResults } from '../port.js';
import { admissionRefusal, admissionRefusalEntry } from '../writes.js';
import { beginAttempt, endAttempt } from './attempts.js';
import { appendEntry } from './chain.js';
import { admitExecution, finishExecution } from './executions.js';
import type { Fence } from './leases.js';
import { countCall, lockLiveChain } from './sessions.js';
import { fencedTransaction, savepoint } from './transaction.js';

type Results = WriteResults[WriteCommand['kind']];

/** One replica's writes on the shared PostgreSQL, fenced by its lease. */
export class PostgresWriteStore implements CallStore {
  /** Writes sent and not yet settled ({@link closeAttempts} waits for them). */
  private readonly inflight = new Set<Promise<unknown>>();
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    /** The replica's lease (./leases.ts): checked first in every transaction. */
    readonly fence: Fence,
    private readonly clock?: MicroClock,
  ) {}

  /**
   * Executes one command in its own transaction.
   * @returns (resolves) the command's result once committed.
   * @throws (rejects) LeaseLostError (LEASE_LOST) when the lease is no longer live; what the
   *   command's checks throw (an attempt already ended, a row not in flight); an attempt or
   *   admission after {@link closeAttempts}; pg errors — in every case nothing of the command
   *   is written.
   */
  write<C extends WriteCommand>(cmd: C): Promise<WriteResults[C['kind']]> {
    if (this.closed && (cmd.kind === 'attempt' || cmd.kind === 'admission'))
      return Promise.reject(new Error('the gateway is shutting down: no new attempt'));
    const p = fencedTransaction(this.pool, this.fence, (client) => this.execute(client, cmd));
    this.inflight.add(p);
    const settled = () => void this.inflight.delete(p);
    p.then(settled, settled);
    return p as Promise<WriteResults[C['kind']]>;
  }

  /** No attempt after this; resolves once every write sent before it has settled. */
  async closeAttempts(): Promise<void> {
    this.closed = true;
    await Promise.allSettled([...this.inflight]);
  }

  /** Answered by the terminal write itself (it refuses an attempt already ended): true here. */
  attemptOpen(): boolean {
    return true;
  }

  private async execute(client: pg.PoolClient, cmd: WriteCommand): Promise<Results> {
    const owner = this.fence.replicaId;
    switch (cmd.kind) {
      case 'attempt':
        await this.begin(client, cmd.attempt, cmd.raiseSensitivity);
        return null;
      case 'admission': {
        const r = await admitExecution(client, cmd.admission, owner);
        if (r.kind === 'admitted') {
          await this.begin(client, cmd.attempt, cmd.raiseSensitivity);
          return { kind: 'admitted' };
        }
        const why = admissionRefusal(r, cmd.admission.executionId);
        const entry = admissionRefusalEntry(cmd.refusalEntry, why);
        try {
          const e = await savepoint(client, () => this.refusal(client, cmd.admission.sessionId, entry));
          return { kind: 'refused', refusal: why, entry: e };
        } catch (e) {
          return { kind: 'refusal-not-recorded', refusal: why, message: (e as Error).message };
        }
      }
      case 'terminal': {
        const chainId = await lockLiveChain(client, cmd.sessionId);
        const e = await appendEntry(
          client,
          chainId,
          { ...cmd.entry, disposition: cmd.disposition },
          this.clock,
          this.fence.writer,
        );
        if (cmd.execution) await finishExecution(client, cmd.execution, cmd.disposition, e.entry_hash);
        await countCall(client, cmd.sessionId);
        await endAttempt(client, cmd.entry.call_id as string);
        maybeFail('terminal_commit');
        return e;
      }
      case 'refusal':
        return this.refusal(client, cmd.sessionId, cmd.entry);
    }
  }

  private async begin(client: pg.PoolClient, attempt: AttemptStart, level: number | null): Promise<void> {
    await beginAttempt(client, attempt, this.fence.replicaId);
    if (level !== null)
      await client.query(
        `INSERT INTO session_sensitivity (session_id, level) VALUES ($1, $2)
         ON CONFLICT (session_id) DO UPDATE SET level = GREATEST(session_sensitivity.level, excluded.level)`,
        [attempt.sessionId, level],
      );
  }

  private async refusal(client: pg.PoolClient, sessionId: string | null, entry: EntryInput) {
    const chainId = sessionId ? await lockLiveChain(client, sessionId) : GATEWAY_CHAIN_ID;
    const e = await appendEntry(
      client,
      chainId,
      { ...entry, disposition: 'refused' },
      this.clock,
      this.fence.writer,
    );
    if (sessionId) await countCall(client, sessionId);
    return e;
  }
}
