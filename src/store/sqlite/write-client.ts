/**
 * The call path's side of the store (store/writes.ts): {@link inProcessWrites} runs each
 * command on the event loop through the connection's group commit; {@link StoreWorker} sends it
 * to the store worker (store/sqlite/write-worker.ts), an offload thread with a bounded queue.
 */
import { DEFAULT_MAX_QUEUED_WRITES, type StoreConfig, storeWorkerEnabled } from '../../config/store.js';
import { OffloadThread } from '../../offload/thread.js';
import {
  executeWrite,
  type WriteCommand,
  type WriteContext,
  type WriteResults,
  type WriteStore,
} from '../writes.js';
import { type Db, immediateAsync } from './db.js';
import type { WriteRequest, WriteWorkerData } from './write-worker.js';

/** The writes on the event loop, in this connection's group commit. */
export function inProcessWrites(db: Db, ctx: WriteContext): WriteStore {
  return {
    write: <C extends WriteCommand>(cmd: C) =>
      immediateAsync(db, () => executeWrite(ctx, cmd)) as Promise<WriteResults[C['kind']]>,
  };
}

/** The store worker and its bounded queue (module doc). */
export class StoreWorker implements WriteStore {
  private readonly thread: OffloadThread<WriteRequest>;

  /** @param data the database file, its busy timeout (ms), this gateway's instance id, group commit. */
  constructor(data: WriteWorkerData, maxQueued = DEFAULT_MAX_QUEUED_WRITES) {
    this.thread = new OffloadThread(
      { module: new URL('./write-worker.js', import.meta.url) },
      { name: 'the store worker', workerData: data, maxQueued },
    );
  }

  /**
   * Only new work (attempts, admissions) is bounded: a terminal entry or a refusal of a call
   * already under way is always queued, so a full queue never leaves a call without its record.
   */
  write<C extends WriteCommand>(cmd: C): Promise<WriteResults[C['kind']]> {
    const bounded = cmd.kind === 'attempt' || cmd.kind === 'admission';
    return this.thread.request({ cmd }, bounded) as Promise<WriteResults[C['kind']]>;
  }

  /**
   * No new attempt after this (a shutdown past its drain time, AttemptLog.close). Resolves once
   * every command sent before it is durable or failed (it runs in the worker's write queue, in
   * order), so the recovery that follows sees every attempt the worker committed and none begins
   * after it (docs/spec/call-path.md#shutdown).
   */
  closeAttempts(): Promise<void> {
    return this.thread.request({ close: true }).then(() => undefined);
  }

  /** Commands sent and not yet answered (the bounded queue's length). */
  get queued(): number {
    return this.thread.queued;
  }

  /** Stops the worker once every command sent has been answered (its connection closed). */
  close(): Promise<void> {
    return this.thread.close();
  }
}

/**
 * The store worker when the config's `store.worker` asks for it,
 * else null (config/store.ts).
 * @param path the database file; @param owner this gateway's instance_id.
 * @param groupCommit false: the worker commits each write in its own transaction.
 */
export function startStoreWorker(
  cfg: StoreConfig,
  path: string,
  owner: string,
  groupCommit = true,
  busyTimeoutMs = 5000,
): StoreWorker | null {
  if (!storeWorkerEnabled(cfg)) return null;
  return new StoreWorker({ path, busyTimeoutMs, owner, groupCommit }, cfg.max_queued_writes);
}
