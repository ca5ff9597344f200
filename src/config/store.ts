/**
 * The `store` section of the config (docs/spec/configuration.md#store): where the call path's
 * writes run — on the event loop's connection, or in the store worker thread
 * (src/store/sqlite/write-worker.ts) behind a bounded queue.
 */
import { z } from 'zod';

/** Default most call-path writes waiting for the store worker before new calls are refused. */
export const DEFAULT_MAX_QUEUED_WRITES = 4096;

/** `store`: `{ worker: boolean = false, max_queued_writes: 1…1,000,000 = 4096 }`. */
export const storeSchema = z.strictObject({
  /**
   * Run the call path's writes (attempts, admissions, terminal entries, refusals) in the store
   * worker thread instead of on the event loop. Off by default (docs/architecture.md: measured).
   */
  worker: z.boolean().default(false),
  /**
   * With `worker`: most writes waiting for it; past this a new call is refused with
   * STORE_QUEUE_FULL before anything is forwarded (its refusal is still recorded).
   */
  max_queued_writes: z.number().int().min(1).max(1_000_000).default(DEFAULT_MAX_QUEUED_WRITES),
});

export type StoreConfig = z.infer<typeof storeSchema>;

/** Whether the store worker runs: the config's `store.worker`, and nothing else. */
export function storeWorkerEnabled(cfg: StoreConfig): boolean {
  return cfg.worker;
}
