/**
 * Resumable SSE streams of a client session (MCP 2025-11-25 "Transports" §Resumability and
 * Redelivery; SEP-1699; docs/spec/mcp.md#resumable-streams). Every event cmcp writes on a
 * stream of a client session that negotiated 2025-11-25 or later carries an id
 * `<stream>-<sequence>`; each stream opens with a priming event (an id, `retry:`, empty data).
 * The last events of each stream are kept, bounded in count and bytes (`streams.replay_events`,
 * `streams.replay_bytes`), and a session keeps `streams.replay_streams` streams (the oldest
 * ended one forgotten first). A `GET` with `Last-Event-ID` gets the events after that id, and
 * a stream still running goes on on that response. An id whose stream is unknown, or whose
 * following events no longer fit the buffer, is refused `STREAM_REPLAY_UNAVAILABLE`: what was
 * missed is never skipped silently.
 */
import { randomBytes } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import type { StreamsConfig } from '../../../config/streams.js';

/** The replay bounds and the `retry:` of one client session's streams. */
export type ReplayLimits = Pick<
  StreamsConfig,
  'retry_ms' | 'replay_events' | 'replay_bytes' | 'replay_streams' | 'resume_grace_ms'
>;

/** Protocol revisions from which streams are primed (older clients get events without ids). */
export function resumableRevision(protocolVersion: string | undefined): boolean {
  return protocolVersion !== undefined && protocolVersion >= '2025-11-25';
}

/** One event as written, with its sequence number. */
interface Kept {
  seq: number;
  frame: string;
  bytes: number;
}

/** Why a replay cannot be served. */
export interface ReplayGap {
  gap: string;
}

/** One stream's ids and its replay buffer. */
export class ReplayStream {
  readonly key = randomBytes(9).toString('base64url');
  private seq = 0;
  private readonly kept: Kept[] = [];
  private bytes = 0;
  /** True once the stream's last event (the response) was written. */
  ended = false;
  /** The response a resumed stream continues on (set by {@link attach}). */
  resumed: ServerResponse | null = null;
  /** Told when a client resumes this stream on a new response. */
  onResume: ((raw: ServerResponse) => void) | null = null;

  constructor(private readonly limits: ReplayLimits) {}

  /** The priming event: the stream's first id, the retry delay, no data. */
  priming(): string {
    return this.keep(`id: ${this.key}-${++this.seq}\nretry: ${this.limits.retry_ms}\ndata: \n\n`);
  }

  /** One JSON-RPC message as one event with the next id, kept for replay. */
  frame(message: Record<string, unknown>): string {
    return this.keep(`id: ${this.key}-${++this.seq}\nevent: message\ndata: ${JSON.stringify(message)}\n\n`);
  }

  private keep(frame: string): string {
    const bytes = Buffer.byteLength(frame);
    this.kept.push({ seq: this.seq, frame, bytes });
    this.bytes += bytes;
    while (
      this.kept.length > this.limits.replay_events ||
      (this.bytes > this.limits.replay_bytes && this.kept.length > 1)
    ) {
      const old = this.kept.shift() as Kept;
      this.bytes -= old.bytes;
    }
    return frame;
  }

  /**
   * The frames after sequence number `after`, or the gap when some of them are no longer kept.
   */
  after(after: number): string[] | ReplayGap {
    const first = this.kept[0];
    if (after > this.seq) return { gap: 'the event id is ahead of the stream' };
    if (after < this.seq && (!first || first.seq > after + 1))
      return {
        gap: `${(first?.seq ?? this.seq + 1) - after - 1} events after it no longer fit the replay buffer (streams.replay_events, streams.replay_bytes)`,
      };
    return this.kept.filter((k) => k.seq > after).map((k) => k.frame);
  }
}

/** The resumable streams of one client session, by key. */
export class ReplayStreams {
  private readonly streams = new Map<string, ReplayStream>();

  constructor(readonly limits: ReplayLimits) {}

  /** A new stream, kept; past `replay_streams` the oldest ended one (else the oldest) is forgotten. */
  open(): ReplayStream {
    const s = new ReplayStream(this.limits);
    this.streams.set(s.key, s);
    while (this.streams.size > this.limits.replay_streams) {
      const victim = [...this.streams.values()].find((x) => x.ended) ?? this.streams.values().next().value;
      if (!victim) break;
      this.streams.delete(victim.key);
    }
    return s;
  }

  /**
   * What a `Last-Event-ID` resumes: its stream and the frames after it, or why it cannot.
   * @param lastEventId the header as sent (`<stream>-<sequence>`).
   */
  resume(lastEventId: string): { stream: ReplayStream; frames: string[] } | ReplayGap {
    const m = /^([A-Za-z0-9_-]{12})-(\d{1,15})$/.exec(lastEventId);
    const stream = m ? this.streams.get(m[1] as string) : undefined;
    if (!m || !stream) return { gap: 'the event id names no stream this session keeps' };
    const frames = stream.after(Number(m[2]));
    return Array.isArray(frames) ? { stream, frames } : frames;
  }
}
