/**
 * The call path's side of the store (store/writes.ts): {@link inProcessWrites} runs each
 * command on the event loop through the connection's group commit; {@link StoreWorker} sends it
 * to the store worker (store/write-worker.ts) over a bounded queue.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { CmcpError } from '@cmcp/verify/errors/index';
import { DEFAULT_MAX_QUEUED_WRITES, type StoreConfig, storeWorkerEnabled } from '../config/store.js';
import { type Db, immediateAsync } from './db.js';
import type { WriteWorkerData } from './write-worker.js';
import {
  executeWrite,
  type WriteCommand,
  type WriteContext,
  type WriteResults,
  type WriteStore,
} from './writes.js';

/** The writes on the event loop, in this connection's group commit. */
export function inProcessWrites(db: Db, ctx: WriteContext): WriteStore {
  return {
    write: <C extends WriteCommand>(cmd: C) =>
      immediateAsync(db, () => executeWrite(ctx, cmd)) as Promise<WriteResults[C['kind']]>,
  };
}

/**
 * The worker's script: the compiled write-worker.js beside this module; when this module runs
 * from its TypeScript source (the tests), the build's (dist/src/store/write-worker.js), since a
 * worker thread does not share vitest's transform.
 * @throws Error when neither exists (run `npm run build`).
 */
function workerScript(): URL {
  const beside = new URL('./write-worker.js', import.meta.url);
  if (!import.meta.url.endsWith('.ts')) return beside;
  const built = new URL('../../dist/src/store/write-worker.js', import.meta.url);
  if (!existsSync(fileURLToPath(built)))
    throw new Error(
      `the store worker runs from the build: ${fileURLToPath(built)} is missing (npm run build)`,
    );
  return built;
}

type Pending = { resolve(v: unknown): void; reject(e: unknown): void };

/** The store worker and its bounded queue (module doc). */
export class StoreWorker implements WriteStore {
  private readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private next = 0;
  private exited: Error | null = null;

  /** @param data the database file, its busy timeout (ms) and this gateway's instance id. */
  constructor(
    data: WriteWorkerData,
    private readonly maxPending = DEFAULT_MAX_QUEUED_WRITES,
  ) {
    this.worker = new Worker(workerScript(), { workerData: data });
    this.worker.on(
      'message',
      (m: { id: number; ok: boolean; value?: unknown; error?: { message: string; code: string | null } }) => {
        const p = this.pending.get(m.id);
        if (!p) return;
        this.pending.delete(m.id);
        if (m.ok) p.resolve(m.value);
        else
          p.reject(
            Object.assign(new Error(m.error?.message ?? 'store write failed'), {
              code: m.error?.code ?? undefined,
            }),
          );
      },
    );
    this.worker.on('error', (e) => this.failAll(e));
    this.worker.on('exit', () => this.failAll(new Error('the store worker exited')));
  }

  /**
   * Only new work (attempts, admissions) is bounded: a terminal entry or a refusal of a call
   * already under way is always queued, so a full queue never leaves a call without its record.
   */
  write<C extends WriteCommand>(cmd: C): Promise<WriteResults[C['kind']]> {
    const bounded = cmd.kind === 'attempt' || cmd.kind === 'admission';
    return this.request({ cmd }, bounded) as Promise<WriteResults[C['kind']]>;
  }

  /**
   * No new attempt after this (a shutdown past its drain time, AttemptLog.close). Resolves once
   * every command sent before it is durable or failed (it runs in the worker's write queue, in
   * order), so the recovery that follows sees every attempt the worker committed and none begins
   * after it (docs/spec/call-path.md#shutdown).
   */
  closeAttempts(): Promise<void> {
    return this.request({ close: true }, false).then(() => undefined);
  }

  /** Commands sent and not yet answered (the bounded queue's length). */
  get queued(): number {
    return this.pending.size;
  }

  /** Stops the worker once every command sent has been answered. */
  async close(): Promise<void> {
    while (this.pending.size > 0) await new Promise((r) => setTimeout(r, 5));
    await this.worker.terminate();
  }

  private request(body: { cmd?: WriteCommand; close?: true }, bounded: boolean): Promise<unknown> {
    if (this.exited) return Promise.reject(this.exited);
    if (bounded && this.pending.size >= this.maxPending)
      return Promise.reject(
        new CmcpError(
          'STORE_QUEUE_FULL',
          `the store's write queue is full (${this.maxPending} writes waiting)`,
        ),
      );
    const id = this.next++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ id, ...body });
    });
  }

  private failAll(e: Error): void {
    this.exited ??= e; // no later command is sent to a worker that is gone
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }
}

/**
 * The store worker when the config's `store.worker` asks for it,
 * else null (config/store.ts).
 * @param path the database file; @param owner this gateway's instance_id.
 */
export function startStoreWorker(
  cfg: StoreConfig,
  path: string,
  owner: string,
  busyTimeoutMs = 5000,
): StoreWorker | null {
  if (!storeWorkerEnabled(cfg)) return null;
  return new StoreWorker({ path, busyTimeoutMs, owner }, cfg.max_queued_writes);
}
