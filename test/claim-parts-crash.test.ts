/**
 * A long claim's text is written in parts before its closing transaction (src/claim/parts.ts).
 * A gateway SIGKILLed between its parts and that transaction leaves parts no claim links: the
 * next start removes them, the session (still open, under the dead process's key) is closed
 * again at start-up with a claim that verifies and covers the whole chain, and its stored text
 * (first part in claims.canonical, the rest in its own linked parts) is what GET …/claim sends.
 * A real child gateway (built dist/), a real SQLite file, a real SIGKILL.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Claim, canonicalJson, sha256Hex, verifyClaimSignature } from '@cmcp/verify/formats';
import { afterAll, describe, expect, it } from 'vitest';
import { AuditChain } from '../src/store/sqlite/chain.js';
import { storedClaimText } from '../src/store/sqlite/claim-text.js';
import { type Db, immediate, openDatabase } from '../src/store/sqlite/db.js';
import {
  type ChildGateway,
  cleanup,
  freePort,
  rest,
  startChild,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

/** Entries of the session: its claim is ~1.5 MB, 11 parts after the first. */
const ENTRIES = 10_000;

/** Appends `n` tool_call entries to the session's chain through the test's own connection. */
function fill(db: Db, sid: string, n: number): void {
  const chain = new AuditChain(db);
  immediate(db, () => {
    for (let i = 0; i < n; i++)
      chain.append(sid, {
        entry_type: 'tool_call',
        session_id: sid,
        agent_id: 'alice',
        call_id: `call-${i}`,
        tool_name: 'fs.read_file',
        server_identity: 'fs',
        policy_decision: 'allow',
        policy_rule_matched: ['policy0'],
        disposition: 'completed',
        error_code: null,
        latency_us: 1000 + i,
        request_payload_hash: `sha256:${sha256Hex(`req-${i}`)}`,
        response_payload_hash: `sha256:${sha256Hex(`res-${i}`)}`,
        detail: { note: 'x'.repeat(400) },
      });
  });
}

const count = (db: Db, sql: string, ...args: unknown[]) => (db.prepare(sql).get(...args) as { n: number }).n;

const UNLINKED =
  'SELECT count(*) AS n FROM claim_parts WHERE text_id NOT IN (SELECT text_id FROM claim_part_links)';

describe('a crash between a claim text’s parts and its closing transaction', () => {
  let cfg: TestConfig | undefined;
  let gw: ChildGateway | undefined;
  let db: Db | undefined;
  afterAll(async () => {
    await gw?.stop('SIGKILL');
    db?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('leaves no orphan parts after the restart, and the claim is issued again, whole and verifying', async () => {
    cfg = await writeConfig({ port: await freePort() });
    gw = await startChild(cfg);
    db = openDatabase(cfg.dbPath);
    // Until one try catches the close between its first part and its closing transaction.
    let sid = '';
    for (let attempt = 0; attempt < 3 && !sid; attempt++) {
      const opened = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      const candidate = opened.body.session_id as string;
      fill(db, candidate, ENTRIES);
      const closing = fetch(`${gw.url}/sessions/${candidate}/close`, {
        method: 'POST',
        headers: { authorization: 'Bearer alice-token', 'content-type': 'application/json' },
        body: '{}',
      }).catch(() => undefined);
      const deadline = Date.now() + 30_000;
      while (count(db, UNLINKED) === 0 && Date.now() < deadline) await sleep(1);
      gw.proc.kill('SIGKILL');
      await gw.stop('SIGKILL');
      await closing;
      const claimed = count(db, 'SELECT count(*) AS n FROM claims WHERE session_id = ?', candidate);
      if (count(db, UNLINKED) > 0 && claimed === 0) sid = candidate;
      gw = await startChild(cfg);
    }
    expect(sid, 'a kill landed between the parts and the closing transaction').not.toBe('');

    // The restart removed the dead process's unlinked parts; the session is closed again at
    // start-up (it was open under the dead process's key), with its own linked parts.
    const started = gw as ChildGateway;
    let claimText = '';
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      const r = await fetch(`${started.url}/sessions/${sid}/claim`, {
        headers: { authorization: 'Bearer alice-token' },
      });
      if (r.status === 200) {
        claimText = await r.text();
        break;
      }
      await sleep(100);
    }
    expect(count(db, UNLINKED)).toBe(0);
    const claim = JSON.parse(claimText) as Claim;
    expect(verifyClaimSignature(claim)).toBe(true);
    const chain = new AuditChain(db).entries(sid);
    expect(chain.filter((e) => e.entry_type === 'session_close')).toHaveLength(1);
    expect(claim.audit_chain.length).toBe(chain.length);
    expect(claim.audit_chain.tip).toBe(chain.at(-1)?.entry_hash);
    expect(claim.transcript).toHaveLength(ENTRIES);
    const stored = storedClaimText(db, sid)?.toString('utf8');
    expect(stored).toBe(claimText);
    expect(stored).toBe(canonicalJson(claim));
    const row = db
      .prepare<[string], { claim_sequence: number; claim_hash: string }>(
        'SELECT claim_sequence, claim_hash FROM claims WHERE session_id = ?',
      )
      .get(sid);
    expect(row?.claim_hash).toBe(sha256Hex(claimText));
    expect(
      count(db, 'SELECT count(*) AS n FROM claim_part_links WHERE claim_sequence = ?', row?.claim_sequence),
    ).toBe(1);
  }, 240_000);
});
