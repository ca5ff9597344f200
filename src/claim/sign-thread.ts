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
import { OffloadThread, ThreadFailed } from '../offload/thread.js';

/** Bytes copied into the shared buffer per turn of the loop (~0.05–0.3 ms). */
export const COPY_SLICE_BYTES = 256 * 1024;

/**
 * How long one signature may take on the thread before the thread is taken for stuck and
 * terminated, ms (a 1.5 MB text takes ~6 ms: this only bounds a thread that stopped answering).
 */
export const SIGN_TIMEOUT_MS = 10_000;

type SignRequest = { shared: SharedArrayBuffer; length: number; key: KeyObject };

let thread: OffloadThread<SignRequest> | null = null;
let shared = new SharedArrayBuffer(0);
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
  const run = turn.then(() =>
    signNow(pieces, key).catch((e) => (e instanceof ThreadFailed ? signNow(pieces, key) : Promise.reject(e))),
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
  const signature = await signingThread().request({ shared, length, key });
  return Buffer.from(signature as Uint8Array);
}

/**
 * Ends the signing thread now (a signature owed is asked again of a new one; the next signature
 * starts one): for a process that embeds gateways and wants no thread left, and for tests of
 * a thread that dies.
 */
export async function terminateSignThread(): Promise<void> {
  await thread?.terminate();
}

/** Starts the signing thread if it is not running (idle, it keeps no process alive). */
export function startSignThread(): void {
  signingThread();
}

/** The running signing thread, or a new one when there is none or it failed. */
function signingThread(): OffloadThread<SignRequest> {
  if (!thread || thread.failed)
    thread = new OffloadThread(
      { fn: signLoop },
      { name: 'the claim signing thread', answerTimeoutMs: SIGN_TIMEOUT_MS },
    );
  return thread;
}

/* c8 ignore start — runs on the signing thread as CommonJS source (OffloadThread `{ fn }`), so
   the tests' TypeScript sources need no build. */
function signLoop(): void {
  const { parentPort } = require('node:worker_threads');
  const { sign } = require('node:crypto');
  type Message =
    | { id: number; body: { shared: SharedArrayBuffer; length: number; key: KeyObject } }
    | { stop: true };
  parentPort.on('message', (m: Message) => {
    if ('stop' in m) return parentPort.close();
    try {
      const value: Uint8Array = sign(null, new Uint8Array(m.body.shared, 0, m.body.length), m.body.key);
      parentPort.postMessage({ id: m.id, ok: true, value });
    } catch (e) {
      parentPort.postMessage({ id: m.id, ok: false, error: { message: (e as Error).message, code: null } });
    }
  });
}
/* c8 ignore stop */
