/**
 * Resuming an upstream's event stream (MCP 2025-11-25 "Transports" §Resumability and
 * Redelivery; SEP-1699): a POST's event stream that ended — closed by the upstream, or broken
 * off — before the response to its request, after the upstream gave it an event id, is
 * reopened with `GET` and `Last-Event-ID` after the stream's `retry:` delay, and read on with
 * the same call: the upstream replays what came after that id, the response among it. Each
 * reopened stream that brings no new event counts as one try; a stream that does resets the
 * count. The call fails only when the upstream refuses the `GET` (any status but 2xx, 405 when
 * it offers none), or after {@link RESUME_TRIES} tries without progress; a stream without an
 * event id cannot be resumed and fails its call at once, as before.
 */
import type { Readable } from 'node:stream';
import type { StreamEnd } from './event-stream.js';

/** Reopened streams in a row that may bring nothing new before the call fails. */
export const RESUME_TRIES = 3;
/** Reopenings of one stream in all (an upstream that only ever primes a new stream never answers). */
export const RESUME_MAX = 50;
/** Delay before a reopening when the upstream sent no `retry:`, ms (the SDK client's first delay). */
export const RESUME_DEFAULT_DELAY_MS = 1000;

/** What resuming one stream needs of the transport. */
export interface Resumption {
  /** The last event id the stream carried. */
  lastEventId: string;
  /** The delay before each reopening, ms (the upstream's last `retry:`, else the default). */
  delayMs(): number;
  /** True once the response arrived, or the transport is closing: resuming stops. */
  done(): boolean;
  /**
   * `GET` with `Last-Event-ID`: the reopened stream's body, or a string saying why the upstream
   * refused it (its status). @throws when the request failed (counted as a try).
   */
  reopen(lastEventId: string): Promise<Readable | string>;
  /** Reads a reopened stream to its end, telling each event id. */
  read(body: Readable, onEventId: (id: string) => void): Promise<StreamEnd>;
}

/** How resuming ended: the response came (or the transport closed), the result cap was hit, or why it failed. */
export type Resumed = { end: 'done' } | { end: 'capped' } | { end: 'failed'; reason: string };

/** Resumes one stream until its response came; see the module comment. Never rejects. */
export async function resumeStream(r: Resumption): Promise<Resumed> {
  let last = r.lastEventId;
  let idle = 0;
  let why = 'the upstream ended its event stream before the response';
  for (let n = 0; idle < RESUME_TRIES && n < RESUME_MAX; n++) {
    await new Promise((resolve) => setTimeout(resolve, Math.max(0, r.delayMs())).unref());
    if (r.done()) return { end: 'done' };
    let body: Readable | string;
    try {
      body = await r.reopen(last);
    } catch (e) {
      idle++;
      why = `resuming the event stream failed: ${(e as Error).message}`;
      continue;
    }
    if (typeof body === 'string')
      return { end: 'failed', reason: `the upstream refused to resume its event stream (${body})` };
    let progressed = false;
    const how = await r.read(body, (id) => {
      last = id;
      progressed = true;
    });
    if (r.done()) return { end: 'done' };
    if (how.end === 'capped') return { end: 'capped' };
    idle = progressed ? 0 : idle + 1;
  }
  return { end: 'failed', reason: `${why} (resumed without the response)` };
}
