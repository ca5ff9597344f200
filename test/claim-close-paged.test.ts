/**
 * Closing a long session never holds the event loop long (issue 11 item 7): the chain is read
 * for the claim in pages with the loop free between them (src/store/sqlite/paged.ts), and the
 * claim's tree and counters are gathered entry by entry as it is read (src/claim/build.ts
 * ChainSummary); the claim (a few KB) is built and signed before the closing transaction, which
 * checks that neither the session chain nor the claim chain moved
 * (src/store/sqlite/session-store.ts); the stored text is what both routes send. The claim is the one a whole read gives: it verifies, its counts and
 * chain tip are the chain's, and its stored text is canonicalJson of it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { verifyBundle } from '@cmcp/verify';
import { type AnyClaim, canonicalJson, sha256Hex, verifyClaimSignature } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChainSummary } from '../src/claim/build.js';
import { claimIssuer } from '../src/claim/issuer.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { LoopSlice } from '../src/offload/loop-slice.js';
import { claimInputsFor } from '../src/session/claim-binding.js';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { storedClaimText } from '../src/store/sqlite/claims.js';
import { immediate, openDatabase } from '../src/store/sqlite/db.js';
import { summarizePaged } from '../src/store/sqlite/paged.js';
import { SqliteSessionStore } from '../src/store/sqlite/session-store.js';
import { closeRemotely, exportRemotely, LONG_SESSION_ENTRIES, longSession } from '../testing/long-session.js';
import { measureStall, showStall } from '../testing/stall.js';
import { cleanup, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const ENTRIES = LONG_SESSION_ENTRIES;
const ALICE = { agentId: 'alice', token: 'alice-token' };

/**
 * The longest event-loop stall allowed while the long session closes, milliseconds of the main
 * thread's CPU time in one gap of a 1 ms timer (testing/stall.ts, CLOCK_THREAD_CPUTIME_ID: wall
 * time on a shared machine also counts time this process was not scheduled) — the gateway's
 * side alone: the client (probes, the close, reading the ~1.5 MB answer) is another process.
 * History: signing and hashing the claim inside the closing transaction held the loop 27–32 ms;
 * signing before it, 7–13 ms (the INSERT and COMMIT of the ~1.5 MB text in the closing
 * transaction, ~4–5 ms; 5 ms slices of the paged read). Then — the text's parts written before
 * the transaction (no longer: a version-2 claim is a few KB), 1 ms slices of 25 entries, the SHA-256 in slices, the
 * answer one chunk per turn, the page's fields taken out by SQLite and the transcript lines
 * sharing their repeated values (shorter young-generation GC pauses) — 2.7–5.6 ms were measured
 * with the 2-core machine at load 6–12, twice 7–8.2 ms (load 8 and 14; the largest pieces left:
 * the request's own turn, a scavenge, the closing transaction, each ~1–2 ms when the machine is
 * quiet and inflated when it is starved). The bound leaves room for a loaded full run; it fails
 * the close that signed inside the transaction (27–32 ms), not always the one just before the
 * parts (7–8 ms with this test at load 10); the blocking close of the same chain (~100–200 ms)
 * is measured beside it and must exceed it. Then (harness STALL_TRACE) the request's turn and
 * the first page were seen in one gap (from an I/O callback an immediate runs before the
 * timers), and so were the reply's start and the first chunk, the signature's resolution and
 * the signed text: each pair now in two turns. What is left over 3 ms is a young-generation
 * scavenge alone in its gap (2.9–3.6 ms: ~1.3 MB survived — the transcript lines, live until
 * the claim is signed — in a 64 MB new space). On the quiet machine after that (load 1.4–1.7,
 * six runs alone): 2.8–5.9 ms, and once 12.1 ms (export 8.2 ms in the same run). That outlier
 * was most likely (not caught in this test itself) SQLite's own WAL checkpoint (~15 ms of CPU
 * per 1,000 pages) inside one of the close's commits, or the scheduled one in its turns: with the
 * checkpoints left to SQLite, 3 of 20 closes of `npm run bench -- --loop-block` held the loop
 * 7.8–10.2 ms; they now run in a worker thread (src/store/sqlite/wal.ts). With that, the transcript
 * kept only as JCS bytes (no 10,000 live lines for a scavenge to copy) and each part's commit in
 * its own turn, the bench measures the distribution over 20+ runs against the 3 ms goal; this
 * test keeps the loose bound of 20 ms, which still fails the signing-inside-the-transaction
 * close and the blocking close, so that a full run on a loaded CI machine does not fail on the
 * machine's scheduling.
 */
const STALL_BOUND_MS = 20;

/**
 * The same for the bundle export of a 10,000-entry session (~14 MB, streamed in pages of 50
 * entries) to a client in another process: 2.5–5.7 ms measured at load 6–12, once 9.4 (the
 * largest piece: the request's own turn — routing, authentication, the export's start; pages
 * of 100 measured 4–7 ms). One read and one serialisation of the whole chain (the export before
 * it was paged) held the loop ~450 ms. Quiet, after the turn splits: 2.0–3.9 ms, once 8.2 ms
 * (most likely the scheduled checkpoint, then on the event loop, now in a worker thread).
 */
const EXPORT_STALL_BOUND_MS = 20;

describe('closing a 10,000-entry session', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  beforeAll(async () => {
    cfg = await writeConfig();
    gw = await startInProcess(cfg);
  }, 60_000);
  afterAll(async () => {
    await gw?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('POST /sessions/{id}/close never holds the event loop for the whole chain (under STALL_BOUND_MS); the claim covers it all', async () => {
    const sid = await longSession(gw, ALICE, ENTRIES);
    // The blocking close of an equal session, for comparison (the gateway never uses it).
    const other = await longSession(gw, ALICE, ENTRIES);
    const blocking = await measureStall(() => {
      const store = new SqliteSessionStore(gw.db, gw.chain, 'gateway');
      const inputs = (row: Parameters<typeof claimInputsFor>[0]) =>
        claimInputsFor(row, other, 'alice', gw.key, gw.facts, gw.provider.name);
      return store.closeNow(other, 'requested', claimIssuer(inputs, store.fence));
    });
    // The client is another process (started beforehand; testing/long-session.ts), so that
    // what is measured is the gateway's side alone: it probes /healthz throughout, closes the
    // session, and writes the ~1.5 MB answer to a file read after the measurement. The garbage
    // of writing 20,000 entries and of the blocking close is collected first, not in a major
    // GC's pause inside the measured close (the close's own garbage still is).
    const answer = join(cfg.dir, `close-${sid}.json`);
    const paged = await closeRemotely(gw, ALICE, sid, answer);
    const probes = paged.probes;
    console.log(
      `close of a ${ENTRIES + 3}-entry session: longest event-loop stall ${showStall(paged.stall)} paged ` +
        `(${probes} probes answered meanwhile); ${showStall(blocking.stall)} with the blocking close`,
    );
    expect(paged.status).toBe(200);
    expect(paged.stall.cpuMs).toBeLessThan(STALL_BOUND_MS);
    // The measure sees a close that holds the loop: the blocking one does not pass.
    expect(blocking.stall.cpuMs).toBeGreaterThan(STALL_BOUND_MS);
    expect(probes).toBeGreaterThan(0);

    const text = readFileSync(answer, 'utf8');
    const claim = JSON.parse(text) as AnyClaim;
    expect(verifyClaimSignature(claim)).toBe(true);
    const chain = gw.chain.entries(sid);
    expect(claim.audit_chain).toEqual({
      chain_id: sid,
      root: chain[0]?.entry_hash,
      tip: chain.at(-1)?.entry_hash,
      length: ENTRIES + 3, // session_open, attestation record, the calls, session_close
    });
    // Claim version 2: a tree head over every entry instead of a transcript line per call.
    expect('tree_head' in claim && claim.tree_head.size).toBe(ENTRIES + 3);
    expect(Buffer.byteLength(text)).toBeLessThan(8 * 1024);
    expect(claim.counters.tool_calls).toBe(ENTRIES);
    expect(claim.counters.refused).toBe(chain.filter((e) => e.disposition === 'refused').length);
    expect(claim.entry_counts?.session_close).toBe(1);
    const row = gw.db
      .prepare<[string], { claim_hash: string }>('SELECT claim_hash FROM claims WHERE session_id = ?')
      .get(sid);
    const stored = { canonical: storedClaimText(gw.db, sid)?.toString('utf8'), claim_hash: row?.claim_hash };
    expect(stored.canonical).toBe(canonicalJson(claim));
    expect(stored.claim_hash).toBe(sha256Hex(canonicalJson(claim)));
    // A text of a few KB is stored whole, in the claim's row, no parts linked.
    const link = gw.db
      .prepare<[number], { parts: number }>('SELECT parts FROM claim_part_links WHERE claim_sequence = ?')
      .get(claim.claim_sequence);
    expect(link).toBeUndefined();
    // Both answers are the stored text itself, byte for byte.
    expect(text).toBe(stored.canonical);
    const served = await fetch(`${gw.url}/sessions/${sid}/claim`, {
      headers: { authorization: 'Bearer alice-token' },
    });
    expect(served.headers.get('content-type')).toMatch(/^application\/json/);
    expect(await served.text()).toBe(stored.canonical);
    // Closing it again answers the stored text as it is, neither the chain read again nor the
    // ~1.5 MB text parsed (session/service.ts closeText). The loose bound does not tell that from
    // the parse (~10 ms); `npm run bench -- --loop-block` does (its `reclose`, against 3 ms).
    const again = await closeRemotely(gw, ALICE, sid, join(cfg.dir, `close-again-${sid}.json`));
    console.log(`second close of the closed session: longest event-loop stall ${showStall(again.stall)}`);
    expect(again.status).toBe(200);
    expect(readFileSync(join(cfg.dir, `close-again-${sid}.json`), 'utf8')).toBe(stored.canonical);
    expect(again.stall.cpuMs).toBeLessThan(STALL_BOUND_MS);
    // The blocking close's claim of the same kind of chain says the same about it.
    const whole = await gw.sessions.claim('alice', other);
    expect(whole.audit_chain.length).toBe(claim.audit_chain.length);
    expect(whole.counters).toEqual(claim.counters);
    expect(whole.entry_counts).toEqual(claim.entry_counts);
  }, 120_000);

  it('GET /sessions/{id}/audit of a 10,000-entry session is streamed in pages: the longest stall stays under EXPORT_STALL_BOUND_MS; the bundle verifies', async () => {
    const sid = await longSession(gw, ALICE, ENTRIES);
    // The client is another process, so that what is measured is the gateway's side alone (the
    // generator's pages and the socket writes); it reads the ~14 MB as it comes into a file.
    const file = join(cfg.dir, `bundle-${sid}.json`);
    const exported = await exportRemotely(gw, ALICE, sid, file);
    console.log(
      `export of a ${ENTRIES + 2}-entry session (${exported.bytes} bytes): longest event-loop stall ${showStall(exported.stall)}`,
    );
    expect(exported.status).toBe(200);
    expect(exported.bytes).toBeGreaterThan(ENTRIES * 900);
    expect(exported.stall.cpuMs).toBeLessThan(EXPORT_STALL_BOUND_MS);
    // The bundle the route streamed is the whole chain, and it verifies. (Read from the client's
    // file: a second export fetched here would leave a keep-alive socket idle through the
    // seconds of verification, which the gateway closes and the next test's request would reuse.)
    const whole = JSON.parse(readFileSync(file, 'utf8'));
    const report = verifyBundle(whole as never);
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect((whole.entries as unknown[]).length).toBe(ENTRIES + 2);
  }, 120_000);

  it('a claim stored by another process while the close signs is followed, not forked: the claim chain stays gap-free', async () => {
    const sid = await longSession(gw, ALICE, 20);
    const other = openDatabase(cfg.dbPath);
    try {
      // The close builds and signs after the claim tip it reads now; its transaction then waits
      // for this lock, and finds a newer claim stored meanwhile by the other connection.
      other.exec('BEGIN IMMEDIATE');
      const closing = gw.sessions.closeAwaited('alice', sid);
      await new Promise((r) => setTimeout(r, 200));
      const tip = other
        .prepare<[], { claim_sequence: number }>(
          'SELECT claim_sequence FROM claims ORDER BY claim_sequence DESC LIMIT 1',
        )
        .get();
      const foreignText = `{"foreign":${Date.now()}}`;
      const foreignSequence = tip ? tip.claim_sequence + 1 : 0;
      other
        .prepare('INSERT INTO claims (claim_sequence, session_id, claim_hash, canonical) VALUES (?,?,?,?)')
        .run(foreignSequence, `foreign-${sid}`, sha256Hex(foreignText), foreignText);
      other.exec('COMMIT');
      const claim = await closing;
      expect(claim.claim_sequence).toBe(foreignSequence + 1);
      expect(claim.prev_claim_hash).toBe(sha256Hex(foreignText));
      expect(verifyClaimSignature(claim)).toBe(true);
      const chain = gw.chain.entries(sid);
      expect(chain.filter((e) => e.entry_type === 'session_close')).toHaveLength(1);
      expect(claim.audit_chain.tip).toBe(chain.at(-1)?.entry_hash);
    } finally {
      if (other.inTransaction) other.exec('ROLLBACK');
      other.close();
    }
  }, 60_000);

  it('closes racing in one process take turns: consecutive claim_sequence, each prev_claim_hash the one before', async () => {
    const sids = await Promise.all([1, 2, 3, 4].map((n) => longSession(gw, ALICE, 30 * n)));
    const claims = await Promise.all(sids.map((sid) => gw.sessions.closeAwaited('alice', sid)));
    const rows = gw.db
      .prepare<[], { claim_sequence: number; claim_hash: string; session_id: string }>(
        'SELECT claim_sequence, claim_hash, session_id FROM claims ORDER BY claim_sequence',
      )
      .all();
    rows.forEach((r, i) => {
      if (i > 0) expect(r.claim_sequence).toBe((rows[i - 1]?.claim_sequence ?? -1) + 1);
      expect(r.claim_hash).toBe(sha256Hex(storedClaimText(gw.db, r.session_id)?.toString('utf8') ?? ''));
    });
    for (const [i, c] of claims.entries()) {
      // Claim version 2: the stored text is the claim; its tree head counts every entry.
      const stored = JSON.parse(
        storedClaimText(gw.db, sids[i] as string)?.toString('utf8') ?? '{}',
      ) as AnyClaim;
      expect(c.counters.tool_calls).toBe(30 * (i + 1));
      expect('tree_head' in c && c.tree_head.size).toBe(c.audit_chain.length);
      expect(structuredClone(c)).toEqual(stored);
      expect(verifyClaimSignature(c)).toBe(true);
      const before = rows.find((r) => r.claim_sequence === c.claim_sequence - 1);
      expect(c.prev_claim_hash).toBe(before?.claim_hash);
    }
  }, 60_000);

  it('the paged read (fields taken out by SQLite) summarises a chain as the whole parse does: escapes, non-ASCII, nulls', async () => {
    const sid = await longSession(gw, ALICE, 3);
    const names = [
      'fs.read_file',
      'tab\there',
      'quote"back\\slash',
      'ctl\u0001',
      'é ünï 🚀',
      'line\u2028sep',
    ];
    immediate(gw.db, () => {
      names.forEach((tool_name, i) => {
        gw.chain.append(sid, {
          entry_type: 'tool_call',
          session_id: sid,
          agent_id: 'alice',
          call_id: `odd-${i}`,
          tool_name,
          server_identity: 'fs',
          policy_decision: i % 2 ? 'deny' : 'allow',
          policy_rule_matched: i % 3 ? [`rule "${i}"`, 'ünï'] : null,
          disposition: i % 2 ? 'refused' : 'completed',
          error_code: i % 2 ? 'POLICY_DENY' : null,
        });
      });
      gw.chain.append(sid, { entry_type: 'resource_read', session_id: sid, agent_id: 'alice' });
    });
    const paged = new ChainSummary();
    await summarizePaged(gw.chain, sid, new LoopSlice(), paged);
    const whole = new ChainSummary();
    whole.add(gw.chain.entries(sid));
    // The chain's tree, rebuilt page by page, is the one built from the whole chain (claim version 2).
    expect(paged.tree.root()).toEqual(whole.tree.root());
    expect(paged.tree.size).toBe(whole.length);
    expect(paged.counters).toEqual(whole.counters);
    expect(paged.entry_counts).toEqual(whole.entry_counts);
    expect([paged.root, paged.tip, paged.length, paged.tipTimestamp]).toEqual([
      whole.root,
      whole.tip,
      whole.length,
      whole.tipTimestamp,
    ]);
  });

  it('an entry committed after the paged read, before the closing transaction, is caught up in the claim', async () => {
    // Under one page: the paged read is over before closeAwaited first yields.
    const sid = await longSession(gw, ALICE, 50);
    // Another connection holds the write lock: the paged read runs (WAL readers do not wait),
    // the closing transaction waits (its next try is an awaited timer). On release the other
    // connection appends to the session chain at once, before that try.
    const other = openDatabase(cfg.dbPath);
    try {
      other.exec('BEGIN IMMEDIATE');
      const closing = gw.sessions.closeAwaited('alice', sid);
      await new Promise((r) => setTimeout(r, 200));
      other.exec('COMMIT');
      const late = immediate(other, () =>
        new AuditChain(other).append(sid, {
          entry_type: 'resource_read',
          session_id: sid,
          agent_id: 'alice',
        }),
      );
      const claim = await closing;
      const chain = gw.chain.entries(sid);
      expect(chain.at(-2)?.entry_hash).toBe(late.entry_hash);
      expect(chain.at(-1)?.entry_type).toBe('session_close');
      expect(claim.audit_chain.length).toBe(chain.length);
      expect(claim.audit_chain.tip).toBe(chain.at(-1)?.entry_hash);
      expect(claim.entry_counts?.resource_read).toBe(1);
      expect(verifyClaimSignature(claim)).toBe(true);
    } finally {
      if (other.inTransaction) other.exec('ROLLBACK');
      other.close();
    }
  }, 60_000);
});
