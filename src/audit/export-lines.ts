/**
 * The audit export's lines (docs/audit-export.md): one JSON object per stored entry, read from
 * the storage port's feed (store/port.ts AuditFeed) after a cursor, optionally following new
 * commits. Two shapes: `cmcp` (the entry as stored, with its cursor and its canonical text, so a
 * consumer can re-hash it and rebuild each chain) and `ocsf` (an OCSF 1.3.0 API Activity event,
 * class 6003, with the same cmcp members under `unmapped.cmcp`).
 */
import type { AuditEntry } from '@cmcp/verify/formats';
import type { AuditFeed, FeedEntry } from '../store/port.js';

/** The line shapes `cmcp audit export --format` and `GET /operator/audit?format=` offer. */
export const EXPORT_FORMATS = ['cmcp', 'ocsf'] as const;
export type ExportFormat = (typeof EXPORT_FORMATS)[number];

/** The `cmcp` line: where to resume after it, the chain position, the entry and its stored text. */
export interface ExportLine {
  cursor: string;
  chain_id: string;
  sequence_number: number;
  entry_hash: string;
  /** The stored canonical text (UTF-8 JCS) that `entry_hash` is the SHA-256 of. */
  canonical: string;
  /** `canonical` parsed. */
  entry: AuditEntry;
}

/** OCSF 1.3.0 API Activity (category 6, Application Activity): activity "Other" (99). */
const OCSF_CLASS = 6003;
const OCSF_ACTIVITY_OTHER = 99;

/** Entries whose outcome is a refusal or a failure: OCSF status Failure (2). */
function failed(e: AuditEntry): boolean {
  return (
    e.error_code !== null ||
    e.policy_decision === 'deny' ||
    e.disposition === 'outcome_unknown' ||
    e.disposition === 'not_attempted' ||
    /refused|failed|denied/.test(e.entry_type)
  );
}

/** One feed entry as a `cmcp` line. */
export function exportLine(f: FeedEntry): ExportLine {
  const entry = { ...(JSON.parse(f.canonical) as Omit<AuditEntry, 'entry_hash'>), entry_hash: f.entry_hash };
  return { ...f, entry };
}

/**
 * The OCSF API Activity event of a `cmcp` line: `time` in ms since the epoch (the entry's
 * microseconds are in `metadata.original_time`), `status_id` 1 Success / 2 Failure,
 * `severity_id` 1 Informational / 3 Medium for a failure, the agent as `actor.user.uid`, the
 * tool (or the entry type) as `api.operation`, the entry hash as `metadata.uid`, the session as
 * `metadata.correlation_uid`; the whole `cmcp` line under `unmapped.cmcp`.
 */
export function ocsfEvent(line: ExportLine): Record<string, unknown> {
  const e = line.entry;
  const failure = failed(e);
  return {
    class_uid: OCSF_CLASS,
    category_uid: 6,
    activity_id: OCSF_ACTIVITY_OTHER,
    type_uid: OCSF_CLASS * 100 + OCSF_ACTIVITY_OTHER,
    time: Math.trunc(Date.parse(e.timestamp_utc)),
    severity_id: failure ? 3 : 1,
    status_id: failure ? 2 : 1,
    ...(e.error_code ? { status_code: e.error_code } : {}),
    ...(e.disposition ? { status_detail: e.disposition } : {}),
    message: e.entry_type,
    actor: e.agent_id ? { user: { uid: e.agent_id, type_id: 99, type: 'MCP agent' } } : undefined,
    api: {
      operation: e.tool_name ?? e.entry_type,
      service: { name: e.server_identity ?? 'cmcp' },
      ...(e.call_id ? { request: { uid: e.call_id } } : {}),
    },
    metadata: {
      version: '1.3.0',
      product: { name: 'cmcp', vendor_name: 'cmcp' },
      uid: e.entry_hash,
      original_time: e.timestamp_utc,
      ...(e.session_id ? { correlation_uid: e.session_id } : {}),
      log_name: e.chain_id,
    },
    unmapped: { cmcp: line },
  };
}

/** A line of `format` as one JSON text (no newline). */
export function formatLine(f: FeedEntry, format: ExportFormat): string {
  const line = exportLine(f);
  return JSON.stringify(format === 'ocsf' ? ocsfEvent(line) : line);
}

/** How {@link feedLines} reads. */
export interface FeedRead {
  /** Resume after this cursor (null: from the first entry). */
  after: string | null;
  /** Entries per read. */
  pageSize: number;
  /** Keep reading new commits after the end, every `pollMs`, until `signal` aborts. */
  follow: boolean;
  pollMs: number;
  signal?: AbortSignal;
}

/**
 * The feed's entries after `r.after`, page by page, in feed order; with `follow`, waits for new
 * ones until `r.signal` aborts (then ends cleanly after the page in hand).
 * @throws (rejects) what the feed throws (AUDIT_CURSOR_UNKNOWN, the engine's errors).
 */
export async function* feedPages(feed: AuditFeed, r: FeedRead): AsyncGenerator<FeedEntry[]> {
  let cursor = r.after;
  while (!r.signal?.aborted) {
    const page = await feed.after(cursor, r.pageSize);
    if (page.length > 0) {
      cursor = page[page.length - 1]?.cursor ?? cursor;
      yield page;
      if (page.length === r.pageSize) continue;
    }
    if (!r.follow) return;
    await new Promise<void>((resolve) => {
      const t = setTimeout(resolve, r.pollMs);
      r.signal?.addEventListener(
        'abort',
        () => {
          clearTimeout(t);
          resolve();
        },
        { once: true },
      );
    });
  }
}
