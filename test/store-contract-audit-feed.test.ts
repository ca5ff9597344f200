/**
 * The audit export feed (store/port.ts AuditFeed) on both engines: while three replicas append
 * to several chains, a reader that pages through the feed and resumes from its last cursor gets
 * every committed entry exactly once (SQLite: each chain in sequence order), the entries the chains'
 * bundles hold; a cursor of another database, or malformed, is refused; on PostgreSQL an entry
 * of a transaction still open holds back every later commit until it ends.
 */
import { verifyBundle } from '@cmcp/verify';
import { describe, expect, it } from 'vitest';
import type { FeedEntry } from '../src/store/port.js';
import { appendEntry } from '../src/store/postgres/chain.js';
import { contractEngines, type Engine } from './harness/store-engines.js';

const { withPostgres, engines, pgEngine } = contractEngines('contract_feed');

/** Everything the feed holds after `cursor`, read in pages of `page`. */
async function drain(engine: Engine, cursor: string | null, page: number): Promise<FeedEntry[]> {
  const out: FeedEntry[] = [];
  for (let c = cursor; ; ) {
    const got = await engine.feed.after(c, page);
    if (got.length === 0) return out;
    out.push(...got);
    c = got[got.length - 1]?.cursor ?? c;
  }
}

describe.each(engines)('the audit feed on %s', (name, make) => {
  it.skipIf(name === 'postgres' && !withPostgres)(
    'gives every entry once while replicas append, resumes from a cursor, refuses a foreign cursor',
    async () => {
      const engine = await make();
      try {
        const chains = ['chain-a', 'chain-b', 'chain-c', 'chain-d'];
        const read: FeedEntry[] = [];
        let cursor: string | null = null;
        let writing = true;
        // A reader follows the feed in small pages while the writers run, as `--follow` does.
        const reader = (async () => {
          while (writing || (await engine.feed.after(cursor, 1)).length > 0) {
            const got = await engine.feed.after(cursor, 7);
            read.push(...got);
            cursor = got[got.length - 1]?.cursor ?? cursor;
            if (got.length === 0) await new Promise((r) => setTimeout(r, 5));
          }
        })();
        await Promise.all(
          engine.replicas.map(async (replica, r) => {
            for (let i = 0; i < 40; i++)
              await replica.append(chains[(i + r) % chains.length] as string, {
                entry_type: 'test_append',
                detail: { r, i },
              });
          }),
        );
        writing = false;
        await reader;
        expect(read).toHaveLength(120);
        expect(new Set(read.map((e) => e.entry_hash)).size).toBe(120);
        // A reader that starts again from a cursor in the middle sees exactly the rest.
        const resumed = await drain(engine, read[49]?.cursor ?? null, 11);
        expect(resumed.map((e) => e.entry_hash)).toEqual(read.slice(50).map((e) => e.entry_hash));
        for (const chainId of chains) {
          // SQLite's one writer commits a chain's entries in sequence order; PostgreSQL's feed
          // follows transaction ids, which concurrent appends to one chain may take out of order.
          const ofChain = read
            .filter((e) => e.chain_id === chainId)
            .sort((a, b) => (name === 'sqlite' ? 0 : a.sequence_number - b.sequence_number));
          expect(ofChain.map((e) => e.sequence_number)).toEqual(ofChain.map((_, i) => i));
          const bundle = await engine.bundle(chainId, null);
          expect(ofChain.map((e) => ({ canonical: e.canonical, entry_hash: e.entry_hash }))).toEqual(
            bundle.entries,
          );
          expect(verifyBundle(bundle).checks.filter((c) => c.status === 'fail')).toEqual([]);
        }
        const last = read[119]?.cursor as string;
        const foreign = '0'.repeat(64);
        await expect(engine.feed.after(foreign, 5)).rejects.toMatchObject({ code: 'AUDIT_CURSOR_UNKNOWN' });
        await expect(engine.feed.after('x.1/abc', 5)).rejects.toMatchObject({ code: 'AUDIT_CURSOR_UNKNOWN' });
        expect(await engine.feed.after(last, 5)).toEqual([]);
      } finally {
        await engine.close();
      }
    },
    60_000,
  );
});

describe('the audit feed on postgres with a transaction still open', () => {
  it.skipIf(!withPostgres)(
    'passes no later commit until the older transaction ends',
    async () => {
      const engine = await pgEngine();
      try {
        await engine.replicas[0]?.append('chain-early', { entry_type: 'test_append' });
        const first = await drain(engine, null, 10);
        expect(first).toHaveLength(1);
        const held = await engine.admin.connect();
        try {
          await held.query('BEGIN');
          await appendEntry(held, 'chain-slow', { entry_type: 'test_append', detail: { slow: true } });
          await engine.replicas[1]?.append('chain-fast', {
            entry_type: 'test_append',
            detail: { fast: true },
          });
          expect(await drain(engine, first[0]?.cursor ?? null, 10)).toEqual([]);
          await held.query('COMMIT');
        } finally {
          held.release();
        }
        const rest = await drain(engine, first[0]?.cursor ?? null, 10);
        expect(rest.map((e) => e.chain_id)).toEqual(['chain-slow', 'chain-fast']);
      } finally {
        await engine.close();
      }
    },
    60_000,
  );
});
