/**
 * The store worker: a `node:worker_threads` thread that owns a write
 * connection to the gateway's database and runs the call path's write commands
 * (store/writes.ts) there, through the same group commit (store/group-commit.ts), so that the
 * COMMIT, its fsync and the entries' JCS hashing do not stop the event loop. Messages in:
 * `{ id, cmd }` or `{ id, close: true }` (no new attempt after it); out: `{ id, ok, value }` or
 * `{ id, ok: false, error: { message, code } }`.
 */
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { immediateAsync, openDatabase } from './db.js';
import { sqliteWriteContext } from './sqlite/writes.js';
import { executeWrite, type WriteCommand } from './writes.js';

/** What the gateway hands the worker at start. */
export interface WriteWorkerData {
  path: string;
  busyTimeoutMs: number;
  owner: string;
}

const data = workerData as WriteWorkerData;
const port = parentPort;
if (!port) throw new Error('store/write-worker.ts runs as a worker thread');
const db = openDatabase(data.path, data.busyTimeoutMs);
const ctx = sqliteWriteContext(db, data.owner);
const { attempts } = ctx;

type Message = { id: number; cmd?: WriteCommand; close?: true };

function run(m: Message): void {
  // The close runs in the write queue, after every command sent before it (write-client.ts).
  const fn = m.close ? () => attempts.close() : () => executeWrite(ctx, m.cmd as WriteCommand);
  immediateAsync(db, fn).then(
    (value) => port?.postMessage({ id: m.id, ok: true, value }),
    (e: Error & { code?: string }) =>
      port?.postMessage({ id: m.id, ok: false, error: { message: e.message, code: e.code ?? null } }),
  );
}

port.on('message', (m: Message) => {
  run(m);
  // Every command already waiting on the port joins this turn's group commit: delivered one
  // event each, the ones behind an fsync would otherwise start transactions of their own.
  for (let next = receiveMessageOnPort(port); next; next = receiveMessageOnPort(port))
    run(next.message as Message);
});
