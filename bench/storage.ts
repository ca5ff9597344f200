/**
 * Storage bench (issue 11 item 7): appends N audit entries of ~0.9 KB canonical text to one
 * session chain of a fresh gateway database, and prints
 *   - bytes on disk per entry (main file after a checkpoint, and what dbstat says each
 *     table and index costs),
 *   - the WAL's largest size while a second connection reads throughout: as one long read
 *     transaction (`--reader long`, what a one-statement export or an idle open transaction
 *     does), or in short paged transactions (`--reader paged`, what the gateway's export does),
 *   - the event loop's longest stall while a bundle of the whole chain is exported (as
 *     `GET /sessions/:id/audit` does: read and serialised in pages),
 *   - the event loop's longest stall while one append waits for a write lock another process
 *     holds for `--hold-ms`: through the blocking `immediate` (what every write did before, and
 *     what the start-up paths still do) and the awaited `immediateAsync` (the request paths),
 *     beside the same wait with no append at all (the machine's own scheduling noise).
 *
 *   npm run bench:storage -- [--entries 10000] [--reader paged|long|none] [--hold-ms 1000]
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import Database from 'better-sqlite3';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { immediate, immediateAsync, openDatabase } from '../src/store/sqlite/db.js';
import { startCheckpoints } from '../src/store/sqlite/wal.js';

const { values } = parseArgs({
  options: {
    entries: { type: 'string', default: '10000' },
    reader: { type: 'string', default: 'paged' },
    'hold-ms': { type: 'string', default: '1000' },
  },
});
const n = Number(values.entries);
const dir = mkdtempSync(join(tmpdir(), 'cmcp-storage-'));
const path = join(dir, 'cmcp.db');
const size = (p: string) => {
  try {
    return statSync(p).size;
  } catch {
    return 0;
  }
};

const db = openDatabase(path);
const checkpoints = startCheckpoints(db);
const chain = new AuditChain(db);
const sessionId = '00000000-0000-4000-8000-000000000001';
// ~0.9 KB of canonical text per entry, like a tool_call entry with its hashes and detail.
const detail = { note: 'x'.repeat(420), upstream: 'everything', tool: 'echo' };

const reader = new Database(path, { readonly: true });
const page = reader.prepare<[string, number], { sequence_number: number }>(
  'SELECT sequence_number, canonical FROM audit_entries WHERE chain_id = ? AND sequence_number > ? ORDER BY sequence_number LIMIT 200',
);
if (values.reader === 'long') {
  reader.exec('BEGIN');
  reader.prepare('SELECT COUNT(*) FROM audit_entries').get();
}
let after = -1;
let maxWal = 0;
let canonicalBytes = 0;
for (let i = 0; i < n; i++) {
  const e = chain.append(sessionId, {
    entry_type: 'tool_call',
    session_id: sessionId,
    agent_id: 'bench',
    tool_name: 'everything.echo',
    call_id: `call-${i}`,
    request_payload_hash: `sha256:${'a'.repeat(64)}`,
    response_payload_hash: `sha256:${'b'.repeat(64)}`,
    detail,
  });
  if (i === 0) canonicalBytes = Buffer.byteLength(JSON.stringify({ ...e, entry_hash: undefined }));
  if (values.reader === 'paged' && i % 10 === 0) {
    const rows = page.all(sessionId, after);
    after = rows.length ? (rows.at(-1)?.sequence_number ?? after) : -1;
  }
  if (i % 100 === 0) {
    checkpoints.tick();
    maxWal = Math.max(maxWal, size(`${path}-wal`));
  }
}
maxWal = Math.max(maxWal, size(`${path}-wal`));
if (values.reader === 'long') reader.exec('COMMIT');
reader.close();

const delay = monitorEventLoopDelay({ resolution: 1 });
delay.enable();
const t0 = performance.now();
let exportBytes = 0;
for await (const piece of chain.bundleJson(sessionId, sessionId)) exportBytes += piece.length;
const exportMs = performance.now() - t0;
await new Promise((r) => setTimeout(r, 5));
delay.disable();

/**
 * The event loop's longest stall, milliseconds, while one append waits for the write lock that
 * another process holds for `holdMs` (better-sqlite3 in a child; resolved from the working
 * directory, the repository root under npm run).
 */
async function stallBehindLock(mode: 'blocking' | 'awaited' | 'idle', holdMs: number) {
  const holder = spawn(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      `import Database from 'better-sqlite3';
       const db = new Database(${JSON.stringify(path)});
       db.exec('BEGIN IMMEDIATE');
       process.stdout.write('held\\n');
       setTimeout(() => { db.exec('COMMIT'); db.close(); }, ${holdMs});`,
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  const exited = new Promise((r) => holder.once('exit', r));
  await new Promise<void>((res, rej) => {
    holder.stdout.once('data', () => res());
    holder.once('exit', () => rej(new Error('lock holder exited')));
  });
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  await new Promise((r) => setTimeout(r, 20)); // the monitor's first tick only starts its clock
  const t = performance.now();
  const append = () =>
    chain.append(sessionId, { entry_type: 'tool_call', session_id: sessionId, call_id: `lock-${mode}` });
  if (mode === 'blocking') immediate(db, append);
  else if (mode === 'awaited') await immediateAsync(db, append);
  else await new Promise((r) => setTimeout(r, holdMs)); // the machine's own noise, no append
  const waitedMs = performance.now() - t;
  await new Promise((r) => setTimeout(r, 5));
  h.disable();
  await exited;
  const ms = (ns: number) => Number((ns / 1e6).toFixed(1));
  return {
    waited_ms: Math.round(waitedMs),
    longest_event_loop_stall_ms: ms(h.max),
    p99_event_loop_delay_ms: ms(h.percentile(99)),
  };
}
const holdMs = Number(values['hold-ms']);
const lockBlocking = await stallBehindLock('blocking', holdMs);
const lockAwaited = await stallBehindLock('awaited', holdMs);
const lockIdle = await stallBehindLock('idle', holdMs);

db.pragma('wal_checkpoint(TRUNCATE)');
const stat = db
  .prepare<[], { name: string; bytes: number }>(
    'SELECT name, SUM(pgsize) AS bytes FROM dbstat GROUP BY name ORDER BY bytes DESC',
  )
  .all();
const mainBytes = size(path);
checkpoints.stop();
db.close();
console.log(
  JSON.stringify(
    {
      entries: n,
      reader: values.reader,
      canonical_bytes_per_entry: canonicalBytes,
      disk_bytes_per_entry: Math.round(mainBytes / n),
      by_table_bytes_per_entry: Object.fromEntries(stat.map((s) => [s.name, Math.round(s.bytes / n)])),
      wal_max_bytes: maxWal,
      export_bytes: exportBytes,
      export_ms: Math.round(exportMs),
      export_longest_event_loop_stall_ms: Number((delay.max / 1e6).toFixed(1)),
      lock_held_ms: holdMs,
      append_behind_lock_blocking: lockBlocking,
      append_behind_lock_awaited: lockAwaited,
      no_append_while_lock_held: lockIdle,
    },
    null,
    2,
  ),
);
rmSync(dir, { recursive: true, force: true });
