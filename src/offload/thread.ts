/**
 * Work handed to a `node:worker_threads` thread so that it does not hold the event loop: the
 * claim signing thread (claim/sign-thread.ts), the store worker (store/sqlite/write-client.ts) and the
 * WAL checkpoint thread (store/sqlite/wal.ts) each run as one {@link OffloadThread}.
 *
 * One policy for all of them:
 * - Start: {@link OffloadThread} runs either a module of this package (from its TypeScript
 *   source, the build's copy under dist/, since a thread does not share vitest's transform) or a
 *   self-contained function run as CommonJS source.
 * - Requests and answers: `{ id, body }` in, `{ id, ok: true, value }` or
 *   `{ id, ok: false, error: { message, code } }` out (./serve.ts is the thread's side).
 * - One bound: requests marked `bounded` are refused with CmcpError STORE_QUEUE_FULL once
 *   `maxQueued` answers are owed; other requests (the end of work already under way) always go.
 * - The thread keeps the process alive only while an answer is owed or it is being closed.
 * - A thread that errs, exits or does not answer within `answerTimeoutMs` (then it is
 *   terminated) fails every owed answer with {@link ThreadFailed}, and every later request.
 * - Shutdown: {@link OffloadThread.close} waits for the owed answers, asks the thread to stop
 *   (`{ stop: true }`: it closes what it holds and lets its port go), and terminates it after a
 *   grace period.
 */
import { existsSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import { CmcpError } from '../errors/index.js';

/** How long {@link OffloadThread.close} waits for the thread to exit before terminating it, ms. */
export const STOP_GRACE_MS = 2000;

/** What a thread runs: a module of this package, or a self-contained function. */
export type ThreadCode = { module: URL } | { fn: () => void };

export interface ThreadOptions {
  /** The thread's name in errors ("the store worker"). */
  name: string;
  /** Handed to the thread as `workerData`. */
  workerData?: unknown;
  /** Most answers owed before a `bounded` request is refused (default: no bound). */
  maxQueued?: number;
  /** Longest one answer may take before the thread is taken for stuck and terminated, ms. */
  answerTimeoutMs?: number;
}

/** An owed answer failed because the thread erred, exited or was terminated as stuck. */
export class ThreadFailed extends CmcpError {
  constructor(message: string) {
    super('INTERNAL_ERROR', message);
    this.name = 'ThreadFailed';
  }
}

/** The thread's answer to one request (./serve.ts). */
export type Answer = {
  id: number;
  ok: boolean;
  value?: unknown;
  error?: { message: string; code: string | null };
};

type Owed = { resolve(v: unknown): void; reject(e: unknown): void };

/**
 * The file a `{ module }` thread runs: the URL itself from the build, the build's copy of it
 * (dist/ at the repository's root) when this module runs from its TypeScript source.
 * @throws Error when the build's copy is missing (run `npm run build`).
 */
export function threadScript(module: URL): URL {
  if (!import.meta.url.endsWith('.ts')) return module;
  const root = new URL('../../', import.meta.url);
  const built = new URL(`dist/${relative(fileURLToPath(root), fileURLToPath(module))}`, root);
  if (!existsSync(fileURLToPath(built)))
    throw new Error(`worker threads run from the build: ${fileURLToPath(built)} is missing (npm run build)`);
  return built;
}

/** One worker thread and the answers it owes (module doc). */
export class OffloadThread<Body = unknown> {
  private readonly worker: Worker;
  private readonly owed = new Map<number, Owed>();
  private readonly exited: Promise<void>;
  private next = 0;
  private failure: Error | null = null;

  /** @throws Error when a `{ module }` thread's build is missing (see {@link threadScript}). */
  constructor(
    code: ThreadCode,
    private readonly o: ThreadOptions,
  ) {
    this.worker =
      'module' in code
        ? new Worker(threadScript(code.module), { workerData: o.workerData })
        : new Worker(`(${code.fn.toString()})()`, { eval: true, workerData: o.workerData });
    this.worker.on('message', (a: Answer) => this.answer(a));
    this.worker.on('error', (e) => this.fail(new ThreadFailed(`${o.name} failed: ${e.message}`)));
    this.exited = new Promise((resolve) =>
      this.worker.once('exit', (code) => {
        this.fail(new ThreadFailed(`${o.name} exited with code ${code}`));
        resolve();
      }),
    );
    // After the listeners (a 'message' listener refs the worker): idle, it keeps no process alive.
    this.worker.unref();
  }

  /**
   * Sends `body` to the thread.
   * @returns (resolves) the thread's value.
   * @throws (rejects) the thread's error (its `code` kept); CmcpError STORE_QUEUE_FULL when
   *   `bounded` and `maxQueued` answers are owed; {@link ThreadFailed} when the thread failed.
   */
  request(body: Body, bounded = false): Promise<unknown> {
    if (this.failure) return Promise.reject(this.failure);
    const max = this.o.maxQueued;
    if (bounded && max !== undefined && this.owed.size >= max)
      return Promise.reject(
        new CmcpError('STORE_QUEUE_FULL', `${this.o.name}'s queue is full (${max} waiting)`),
      );
    const id = this.next++;
    if (this.owed.size === 0) this.worker.ref();
    const answered = new Promise((resolve, reject) => this.owed.set(id, { resolve, reject }));
    this.worker.postMessage({ id, body });
    const limit = this.o.answerTimeoutMs;
    if (limit === undefined) return answered;
    const stuck = setTimeout(() => void this.worker.terminate(), limit);
    stuck.unref();
    return answered.finally(() => clearTimeout(stuck));
  }

  /** Answers owed (the bounded queue's length). */
  get queued(): number {
    return this.owed.size;
  }

  /** Why the thread can take no more work, or null while it runs. */
  get failed(): Error | null {
    return this.failure;
  }

  /**
   * Waits for every owed answer, asks the thread to stop and resolves once it exited; after
   * `graceMs` the thread is terminated instead. A request made from then on is refused with
   * {@link ThreadFailed}.
   */
  async close(graceMs = STOP_GRACE_MS): Promise<void> {
    this.worker.ref(); // a shutdown's close is not dropped because the thread was idle
    while (this.owed.size > 0 && !this.failure) await new Promise((r) => setTimeout(r, 5));
    if (!this.failure) {
      this.failure = new ThreadFailed(`${this.o.name} is closed`); // no request after the stop
      this.worker.postMessage({ stop: true });
    }
    const late = setTimeout(() => void this.worker.terminate(), graceMs);
    await this.exited;
    clearTimeout(late);
  }

  /** Ends the thread now: every owed answer fails with {@link ThreadFailed}. */
  async terminate(): Promise<void> {
    await this.worker.terminate();
    await this.exited;
  }

  private answer(a: Answer): void {
    const p = this.owed.get(a.id);
    if (!p) return;
    this.owed.delete(a.id);
    if (this.owed.size === 0) this.worker.unref();
    if (a.ok) p.resolve(a.value);
    else
      p.reject(
        Object.assign(new Error(a.error?.message ?? `${this.o.name} failed`), {
          code: a.error?.code ?? undefined,
        }),
      );
  }

  private fail(e: Error): void {
    this.failure ??= e; // no later request is sent to a thread that is gone
    for (const p of this.owed.values()) p.reject(e);
    this.owed.clear();
  }
}
