/**
 * The short crash test (`npm run crash-test` runs ≥ 50 kills; testing/crash/): 10 SIGKILLs of a
 * `cmcp start` gateway on swtpm under load at concurrency 8 — calls with and without
 * execution_id, retries, sessions opened and closed — each followed by a restart, then a
 * graceful stop; every rule of testing/crash/check.ts must hold.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { jcsDigest } from '@cmcp/verify/formats';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkCrashRun, checkCrashSnapshot } from '../testing/crash/check.js';
import { runCrashTest } from '../testing/crash/run.js';
import { readSqliteSnapshot } from '../testing/crash/snapshot.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { cleanup, REPO_ROOT, STORE_WORKER_PROJECT } from './harness/gateway.js';

let tpm: Awaited<ReturnType<typeof startSwtpm>>;
const dir = mkdtempSync(join(tmpdir(), 'cmcp-crash-test-'));

beforeAll(async () => {
  if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
    throw new Error('dist/ is missing: run `npm run build` first');
  tpm = await startSwtpm();
});
afterAll(async () => {
  await tpm?.stop();
  cleanup(dir);
});

describe('crash test (10 kills)', () => {
  it('no call ran without exactly one terminal entry, no execution ran twice, every chain and claim verifies', async () => {
    const r = await runCrashTest({
      kills: 10,
      tcti: tpm.tcti,
      dir,
      repoRoot: REPO_ROOT,
      storeWorker: STORE_WORKER_PROJECT,
    });
    expect(r.check.violations).toEqual([]);
    expect(r.lastExitCode).toBe(0);
    // The run exercised what it claims to: upstream work, answers, retries, sessions, recovery.
    expect(r.check.counts.upstreamRan).toBeGreaterThan(20);
    expect(r.load.answered).toBeGreaterThan(20);
    expect(r.load.retries).toBeGreaterThan(0);
    expect(r.load.sessionsClosed).toBeGreaterThan(0);
    expect(r.check.counts.executions).toBeGreaterThan(0);
    expect(r.check.counts.claims).toBeGreaterThan(0);

    // The rules can fail: an upstream run without a record, or twice, is reported.
    const phantom = checkCrashRun(
      r.dbPath,
      'up.work',
      [
        { op: 'never-recorded', ms: 1 },
        { op: 'never-recorded', ms: 1 },
      ],
      [{ callId: 'no-such-call', entryHash: 'x', errorCode: null }],
    );
    expect(phantom.violations).toEqual(
      expect.arrayContaining([
        'upstream ran never-recorded: 0 forwarded terminal entries',
        'op never-recorded reached the upstream 2 times',
        'answered call no-such-call: 0 terminal entries',
      ]),
    );

    // Each further rule fails on the real record corrupted the way it targets (the snapshot is
    // the real database's, read again for each mutation).
    const fresh = () => readSqliteSnapshot(r.dbPath);
    const check = (snap = fresh(), ran = r.ran, answered = r.answered) =>
      checkCrashSnapshot(snap, 'up.work', ran, answered).violations;
    const parsed = (e: { canonical: string }) => JSON.parse(e.canonical) as Record<string, unknown>;
    const payloadOf = (op: string, ms: number) => jcsDigest({ name: 'up.work', arguments: { op, ms } });

    // A call the upstream ran, recorded not_attempted.
    let snap = fresh();
    const ranOne = r.ran[0] as { op: string; ms: number };
    const ranEntry = snap.entries.find(
      (e) => parsed(e).request_payload_hash === payloadOf(ranOne.op, ranOne.ms),
    );
    if (!ranEntry) throw new Error('no entry for the first upstream run');
    ranEntry.canonical = JSON.stringify({ ...parsed(ranEntry), disposition: 'not_attempted' });
    expect(check(snap)).toContain(`upstream ran ${ranOne.op}: its entry says not_attempted`);

    // An answer whose entry says something else: a result said to be a refusal, and the reverse.
    const okAnswer = r.answered.find((a) => a.errorCode === null);
    const refusal = r.answered.find((a) => a.errorCode === 'EXECUTION_REPLAY_REFUSED');
    if (!okAnswer || !refusal) throw new Error('the run has no result or no replay refusal');
    expect(
      check(fresh(), r.ran, [{ ...okAnswer, errorCode: 'EXECUTION_REPLAY_REFUSED', result: false }]),
    ).toContain(
      `answered call ${okAnswer.callId}: answer EXECUTION_REPLAY_REFUSED, entry completed/null: the error codes differ`,
    );
    expect(check(fresh(), r.ran, [{ ...refusal, errorCode: null, result: true }])).toContain(
      `answered call ${refusal.callId}: answer result, entry refused/EXECUTION_REPLAY_REFUSED: a result names a completed entry`,
    );
    expect(check(fresh(), r.ran, [{ ...okAnswer, sequenceNumber: -1 }])[0]).toMatch(
      /^answered call .*: its answer names chain .* #-1, the entry is /,
    );

    // A retry of an ended execution that was answered with a result, and an execution with a
    // second terminal entry (a copy of its end under another call).
    expect(check(fresh(), r.ran, [{ ...okAnswer, retryOfEnded: true }])).toContain(
      `answered call ${okAnswer.callId}: answer result, entry completed/null: a retry of an execution that had ended was not refused`,
    );
    snap = fresh();
    const ended = snap.entries.find((e) => {
      const x = parsed(e);
      return x.entry_type === 'tool_call' && x.execution_id && x.disposition === 'completed';
    });
    if (!ended) throw new Error('no completed execution');
    const endedX = parsed(ended);
    snap.entries.push({
      ...ended,
      entry_hash: 'f'.repeat(64),
      canonical: JSON.stringify({ ...endedX, call_id: 'second-end' }),
    });
    expect(check(snap)).toContain(
      `execution ${String(endedX.execution_id)}: 2 terminal entries that are not refusals`,
    );

    // The claim chain: a claim missing, and a claim whose prev_claim_hash does not link.
    expect(r.check.counts.claims).toBeGreaterThan(2);
    snap = fresh();
    const bySeq = (s: typeof snap, n: number) =>
      s.claims.find((c) => (JSON.parse(c.text) as { claim_sequence: number }).claim_sequence === n);
    snap.claims = snap.claims.filter((c) => c !== bySeq(snap, 1));
    expect(check(snap)).toContain(
      `claim_sequence 1: missing (claims are not numbered 0…${r.check.counts.claims - 2})`,
    );
    snap = fresh();
    const second = bySeq(snap, 2);
    if (!second) throw new Error('no claim 2');
    second.text = JSON.stringify({
      ...JSON.parse(second.text),
      prev_claim_hash: createHash('sha256').update('x').digest('hex'),
    });
    expect(check(snap)).toContain('claim_sequence 2: prev_claim_hash does not link to claim 1');

    // Input the checker cannot parse fails the check.
    snap = fresh();
    (snap.entries[0] as { canonical: string }).canonical = '{not json';
    expect(check(snap)).toContain(`entry ${snap.entries[0]?.entry_hash}: cannot parse its JSON`);
    expect(checkCrashRun(join(dir, 'no-such.db'), 'up.work', r.ran, r.answered).violations[0]).toMatch(
      /^cannot read /,
    );

    // PRAGMA integrity_check: a copy of the database with a page no b-tree uses.
    const copy = join(dir, 'corrupt.db');
    const db = new Database(r.dbPath, { readonly: true });
    db.exec(`VACUUM INTO '${copy}'`);
    db.close();
    const c = new Database(copy);
    c.pragma('journal_mode = DELETE');
    c.close();
    const bytes = readFileSync(copy);
    const pageSize = bytes.readUInt16BE(16) === 1 ? 65536 : bytes.readUInt16BE(16);
    const pages = bytes.readUInt32BE(28);
    bytes.writeUInt32BE(pages + 1, 28);
    writeFileSync(copy, Buffer.concat([bytes, Buffer.alloc(pageSize)]));
    expect(checkCrashRun(copy, 'up.work', r.ran, r.answered).violations).toContain(
      `PRAGMA integrity_check: *** in database main ***\nPage ${pages + 1}: never used`,
    );
  }, 300_000);
});
