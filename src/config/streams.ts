/**
 * The `streams` section of the config (docs/spec/mcp.md#resumable-streams): how cmcp's own SSE
 * streams to a client session can be resumed. Each event carries an id, each stream starts with
 * a priming event and the `retry:` delay, and the last events of each stream are kept, bounded
 * in count and bytes, so that a client reconnecting with `Last-Event-ID` gets what it missed.
 */
import { z } from 'zod';

/** `streams`: the resumption settings of cmcp's SSE streams, each with its default. */
export const streamsSchema = z.strictObject({
  /** The `retry:` each stream announces: how long a client waits before reconnecting, ms. */
  retry_ms: z.number().int().min(100).max(600_000).default(1000),
  /** Events kept per stream for replay; an older one requested is a clear error, not a gap. */
  replay_events: z.number().int().min(1).max(1_000_000).default(512),
  /** Bytes of events kept per stream for replay (the newest events fit first). */
  replay_bytes: z
    .number()
    .int()
    .min(1024)
    .max(1024 ** 3)
    .default(256 * 1024),
  /** Streams of one client session kept for replay (the standalone stream and POST streams); the oldest ended one goes first. */
  replay_streams: z.number().int().min(1).max(10_000).default(16),
  /**
   * How long a request whose stream broke off waits for its client to resume it before the
   * request is cancelled as by a disconnect, ms (0: cancelled at once).
   */
  resume_grace_ms: z.number().int().min(0).max(600_000).default(10_000),
});

export type StreamsConfig = z.infer<typeof streamsSchema>;
