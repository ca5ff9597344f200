/**
 * Ed25519 signatures over long claim texts on a worker thread, from one reused shared buffer.
 * node:crypto's asynchronous `sign` and WebCrypto's `subtle.sign` both copy
 * the message on the calling thread first: for a 10,000-call claim (~1.5 MB) that copy into
 * fresh memory held the event loop 0.4–5 ms (page faults). Here the caller copies the text into
 * a SharedArrayBuffer a slice per turn of the loop, and the thread signs it where it lies
 * (RFC 8032 §5.1.6, deterministic: the signature is the one `sign(null, text, key)` gives).
 * The buffer is kept and grown, so a later close touches no new pages.
 */

import type { KeyObject } from 'node:crypto';
import { setTimeout } from 'node:timers/promises';
import { Worker } from 'node:worker_threads';

/** Bytes copied into the shared buffer per turn of the loop (~0.05–0.3 ms). */
export const COPY_SLICE_BYTES = 256 * 1024;

/**
 * How long one signature may take on the thread before the thread is taken for stuck and
 * terminated, ms (a 1.5 MB text takes ~6 ms: this only bounds a thread that stopped answering).
 */
export const SIGN_TIMEOUT_MS = 10_000;

interface Reply {
  id: number;
  signature?: Uint8Array;
  error?: string;
}

let worker: Worker | null = null;
let shared = new SharedArrayBuffer(0);
let nextId = 0;
const pending = new Map<number, { resolve(sig: Buffer): void; reject(e: Error): void }>();
/** One signature at a time: each copies into the one shared buffer. */
let turn: Promise<unknown> = Promise.resolve();

/**
 * Signs the concatenation of `pieces` with the Ed25519 private `key` on the signing thread,
 * copying the pieces into the shared buffer {@link COPY_SLICE_BYTES} per turn of the loop.
 * A thread that exits, or does not answer within {@link SIGN_TIMEOUT_MS} (then it is terminated),
 * is started again and the signature asked once more.
 * @returns the 64-byte signature (RFC 8032 §5.1.6).
 * @throws (rejects) Error when `key` is not an Ed25519 private key, or the thread failed twice.
 */
export function signOnThread(pieces: readonly Buffer[], key: KeyObject): Promise<Buffer> {
  // A thread that died (or was terminated as stuck) is started again for one more try.
  const run = turn.then(() =>
    signNow(pieces, key).catch((e) => (threadFailures.has(e) ? signNow(pieces, key) : Promise.reject(e))),
  );
  turn = run.catch(() => undefined);
  return run;
}

async function signNow(pieces: readonly Buffer[], key: KeyObject): Promise<Buffer> {
  const length = pieces.reduce((n, p) => n + p.length, 0);
  // A new SharedArrayBuffer is zero pages the kernel maps on first touch: growing costs no copy.
  if (shared.byteLength < length) shared = new SharedArrayBuffer(Math.max(length, 2 * shared.byteLength));
  const view = Buffer.from(shared, 0, length);
  let at = 0;
  let sliced = 0;
  for (const piece of pieces)
    for (let from = 0; from < piece.length; ) {
      const n = Math.min(piece.length - from, COPY_SLICE_BYTES - sliced);
      piece.copy(view, at, from, from + n);
      at += n;
      from += n;
      sliced += n;
      if (sliced === COPY_SLICE_BYTES) {
        sliced = 0;
        await setTimeout(0);
      }
    }
  const id = nextId++;
  const w = thread();
  const signed = new Promise<Buffer>((resolve, reject) => pending.set(id, { resolve, reject }));
  // Held (ref'd) only while a signature is owed: a process with nothing else to do exits, and a
  // shutdown's close is not dropped because the thread was unref'd.
  w.ref();
  const stuck = globalThis.setTimeout(() => void w.terminate(), SIGN_TIMEOUT_MS);
  stuck.unref();
  try {
    w.postMessage({ id, shared, length, key });
    return await signed;
  } finally {
    clearTimeout(stuck);
    if (pending.size === 0 && worker === w) w.unref();
  }
}

/**
 * Ends the signing thread now (a signature owed is asked again of a new one; the next signature
 * starts one): for a process that embeds gateways and wants no thread left, and for tests of
 * a thread that dies.
 */
export async function terminateSignThread(): Promise<void> {
  await worker?.terminate();
}

/** Rejections because the signing thread exited (an error, or terminated as stuck) before it answered. */
const threadFailures = new WeakSet<object>();

/** Starts the signing thread if it is not running (idle, it keeps no process alive). */
export function startSignThread(): void {
  thread();
}

function thread(): Worker {
  if (worker) return worker;
  const w = new Worker(`(${signLoop.toString()})()`, { eval: true });
  w.on('message', (r: Reply) => {
    const p = pending.get(r.id);
    pending.delete(r.id);
    if (r.signature) p?.resolve(Buffer.from(r.signature));
    else p?.reject(new Error(r.error ?? 'signing failed'));
  });
  const fail = (e: Error) => {
    if (worker === w) worker = null;
    for (const p of pending.values()) {
      const failed = new Error(`claim signing thread failed: ${e.message}`);
      threadFailures.add(failed);
      p.reject(failed);
    }
    pending.clear();
  };
  w.on('error', fail);
  w.on('exit', (code) => fail(new Error(`exited with code ${code}`)));
  // After the listeners: adding a 'message' listener refs the worker again. Idle, it keeps no
  // process alive.
  w.unref();
  worker = w;
  return w;
}

/* c8 ignore start — runs on the signing thread, as CommonJS (`eval`), so that the tests'
   TypeScript sources need no build. */
function signLoop(): void {
  const { parentPort } = require('node:worker_threads');
  const { sign } = require('node:crypto');
  parentPort.on('message', (m: { id: number; shared: SharedArrayBuffer; length: number; key: KeyObject }) => {
    try {
      const signature: Uint8Array = sign(null, new Uint8Array(m.shared, 0, m.length), m.key);
      parentPort.postMessage({ id: m.id, signature });
    } catch (e) {
      parentPort.postMessage({ id: m.id, error: (e as Error).message });
    }
  });
}
/* c8 ignore stop */
