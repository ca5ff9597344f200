/**
 * The `sessions` section of the config (docs/configuration.md): when default sessions close with
 * a claim, when idle client sessions end, and the window session checkpoints are signed in
 * (docs/spec/transparency.md#checkpoints).
 */
import { z } from 'zod';

const DEFAULT_CHECKPOINT_WINDOW_MS = 25;

/** `sessions`: rotation of default sessions, idle client sessions, the checkpoint window. */
export const sessionsSchema = z
  .strictObject({
    /** A default (implicit) session is closed with a claim after this many calls. */
    default_max_calls: z.number().int().min(1).default(1000),
    /** …or after this many seconds. */
    default_max_age_s: z.number().int().min(1).default(3600),
    /**
     * A client session (`Mcp-Session-Id`) unused this many seconds ends, with its own upstream
     * connections (stdio processes); its id then gets 404.
     */
    client_idle_s: z.number().int().min(1).default(300),
    /** ms a grown session tree waits for its checkpoint: one signature per session per window. */
    checkpoint_window_ms: z.number().int().min(1).max(10_000).default(DEFAULT_CHECKPOINT_WINDOW_MS),
  })
  .default({
    default_max_calls: 1000,
    default_max_age_s: 3600,
    client_idle_s: 300,
    checkpoint_window_ms: DEFAULT_CHECKPOINT_WINDOW_MS,
  });
