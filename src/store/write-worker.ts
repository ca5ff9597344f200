/**
 * The store worker (issue 12 item 6): a `node:worker_threads` thread that owns a write
 * connection to the gateway's database and runs the call path's write commands
 * (store/writes.ts) there, through the same group commit (store/group-commit.ts), so that the
 * COMMIT, its fsync and the entries' JCS hashing do not stop the event loop. Messages in:
 * `{ id, cmd }` or `{ id, close: true }` (no new attempt after it); out: `{ id, ok, value }` or
 * `{ id, ok: false, error: { message, code } }`.
 */
import { parentPort, receiveMessageOnPort, workerData } from 'node:worker_threads';
import { AuditChain } from '../audit/chain.js';
import { AttemptLog } from '../call/attempts.js';
import { storeSensitivity } from '../call/sensitivity.js';
import { ExecutionRegistry } from '../execution/registry.js';
import { immediate, immediateAsync, openDatabase } from './db.js';
import { prepared } from './statements.js';
import { executeWrite, type WriteCommand, type WriteContext } from './writes.js';

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
const attempts = new AttemptLog(db, data.owner);
const ctx: WriteContext = {
  chain: new AuditChain(db),
  executions: new ExecutionRegistry(db, data.owner),
  attempts,
  sessionIsOpen: (id) =>
    prepared<[string], { status: string }>(db, 'SELECT status FROM sessions WHERE session_id = ?').get(id)
      ?.status === 'open',
  countCall: (id) =>
    void prepared(db, 'UPDATE sessions SET call_count = call_count + 1 WHERE session_id = ?').run(id),
  raiseSensitivity: (id, level) => storeSensitivity(db, id, level),
  atomic: (fn) => immediate(db, fn),
};

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
