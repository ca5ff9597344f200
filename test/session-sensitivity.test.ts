/**
 * The session sensitivity rule (src/call/sensitivity.ts) on a real SQLite database and audit
 * chain: the level is raised in the attempt's transaction and read back after a restart without
 * replaying the session's chain; only a session with no row (made before the table existed) is
 * replayed, once. The catalog and the routes are the collaborators' lookups, given as tables.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AuditEntry } from '@cmcp/verify/formats';
import { afterAll, describe, expect, it } from 'vitest';
import { SessionSensitivity } from '../src/call/sensitivity.js';
import type { Sensitivity } from '../src/catalog/catalog.js';
import type { CatalogGuard } from '../src/catalog/guard.js';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { type Db, immediate, openDatabase } from '../src/store/sqlite/db.js';
import { sqliteSensitivityReads } from '../src/store/sqlite/sensitivity.js';
import { storeSensitivity } from '../src/store/sqlite/writes.js';
import type { RoutedTool, UpstreamPool } from '../src/upstream/pool.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-sensitivity-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const LEVELS: Record<string, Sensitivity> = { read_secret_note: 'confidential', list: 'public' };
const route = (toolName: string): RoutedTool => ({
  exposedName: `fs.${toolName}`,
  upstream: 'fs',
  toolName,
  definition: { name: toolName, inputSchema: { type: 'object' } } as RoutedTool['definition'],
});
const catalog = {
  find: (_server: string, name: string) => (LEVELS[name] ? { sensitivity: LEVELS[name] } : undefined),
} as unknown as CatalogGuard;
const upstreams = {
  route: (exposed: string) => (exposed.startsWith('fs.') ? route(exposed.slice(3)) : undefined),
} as unknown as UpstreamPool;

/** A real chain that counts how often a whole chain is read. */
class CountingChain extends AuditChain {
  reads = 0;
  override entries(chainId: string): AuditEntry[] {
    this.reads += 1;
    return super.entries(chainId);
  }
}

function open(name: string): { db: Db; chain: CountingChain; rule: SessionSensitivity } {
  const db = openDatabase(join(dir, name));
  const chain = new CountingChain(db);
  return { db, chain, rule: new SessionSensitivity(sqliteSensitivityReads(db, chain), upstreams, catalog) };
}

const storedLevel = (db: Db, sessionId: string) =>
  db.prepare('SELECT level FROM session_sensitivity WHERE session_id = ?').get(sessionId) as
    | { level: number }
    | undefined;

/** What the call path's attempt write does with the level (store/port.ts `attempt`). */
function attempted(db: Db, rule: SessionSensitivity, sessionId: string, r: RoutedTool): void {
  const level = rule.raise(sessionId, r);
  if (level === null) return;
  immediate(db, () => storeSensitivity(db, sessionId, level));
  rule.raised(sessionId, level);
}

describe('session sensitivity', () => {
  it('is read back after a restart without replaying the chain', () => {
    const first = open('restart.db');
    expect(first.rule.max('s1')).toBe('unclassified'); // a new session: nothing stored yet
    attempted(first.db, first.rule, 's1', route('read_secret_note'));
    first.rule.note('s1', route('read_secret_note'));
    expect(first.rule.max('s1')).toBe('confidential');
    expect(storedLevel(first.db, 's1')).toEqual({ level: 3 });
    first.db.close();

    const again = open('restart.db');
    expect(again.rule.max('s1')).toBe('confidential');
    expect(again.chain.reads).toBe(0);
    again.db.close();
  });

  it('raises the stored level only when a call is higher, and never lowers it', () => {
    const { db, rule } = open('raise.db');
    rule.max('s2');
    attempted(db, rule, 's2', route('read_secret_note'));
    const changes = db.prepare('SELECT total_changes() AS n').get() as { n: number };
    attempted(db, rule, 's2', route('list'));
    expect((db.prepare('SELECT total_changes() AS n').get() as { n: number }).n).toBe(changes.n);
    expect(storedLevel(db, 's2')).toEqual({ level: 3 });
    // A process that forgot the session: a lower call noted first does not hide the higher one.
    const fresh = new SessionSensitivity(sqliteSensitivityReads(db, new AuditChain(db)), upstreams, catalog);
    fresh.note('s2', route('list'));
    expect(fresh.max('s2')).toBe('confidential');
    db.close();
  });

  it('replays a session with no row once (a database from before the table)', () => {
    const { db, chain, rule } = open('upgrade.db');
    immediate(db, () =>
      chain.append('s3', {
        entry_type: 'tool_call',
        call_id: 'c1',
        agent_id: 'a',
        session_id: 's3',
        execution_id: null,
        tool_name: 'fs.read_secret_note',
        disposition: 'completed',
      }),
    );
    expect(rule.max('s3')).toBe('confidential');
    expect(chain.reads).toBe(1);
    attempted(db, rule, 's3', route('list'));
    expect(storedLevel(db, 's3')).toEqual({ level: 3 });
    const after = new SessionSensitivity(sqliteSensitivityReads(db, chain), upstreams, catalog);
    expect(after.max('s3')).toBe('confidential');
    expect(chain.reads).toBe(1);
    db.close();
  });
});
