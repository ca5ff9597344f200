/**
 * The thread's side of an OffloadThread (./thread.ts), for a thread that runs a module:
 * answers each `{ id, body }` with what `handle` returned or threw, and on `{ stop: true }`
 * closes what the thread holds and lets its port go, so the thread exits.
 */
import { parentPort, receiveMessageOnPort } from 'node:worker_threads';
import type { Answer } from './thread.js';

type Message = { id: number; body: unknown } | { stop: true };

/**
 * Serves requests on this thread's parent port. Every request already waiting on the port is
 * handed to `handle` in the same turn as the first (a store write joins that turn's group
 * commit instead of starting a transaction of its own).
 * @param handle runs one request; its value (or a promise of it) is the answer, its error (with
 *   its `code`) the refusal.
 * @param stop closes what the thread holds, before the port is let go.
 * @throws Error when not run on a worker thread.
 */
export function serveRequests(handle: (body: unknown) => unknown, stop: () => void): void {
  const port = parentPort;
  if (!port) throw new Error('serveRequests runs on a worker thread');
  const reply = (a: Answer) => port.postMessage(a);
  const run = (m: Message) => {
    if ('stop' in m) {
      stop();
      port.close();
      return;
    }
    let answer: Promise<unknown>;
    try {
      answer = Promise.resolve(handle(m.body)); // in this turn: see the doc above
    } catch (e) {
      answer = Promise.reject(e);
    }
    answer.then(
      (value) => reply({ id: m.id, ok: true, value }),
      (e: Error & { code?: string }) =>
        reply({ id: m.id, ok: false, error: { message: e.message, code: e.code ?? null } }),
    );
  };
  port.on('message', (m: Message) => {
    run(m);
    for (let next = receiveMessageOnPort(port); next; next = receiveMessageOnPort(port))
      run(next.message as Message);
  });
}
