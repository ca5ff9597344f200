/**
 * A terminal entry that meets the database's write lock held by another process for longer than
 * the busy timeout (docs/spec/audit-entries.md#storage): the call's terminal entry is retried
 * until the lock is free — committed exactly once, never dropped — and the call is answered
 * then; calls that arrive meanwhile get a specific code (STORE_BUSY once their refusal is
 * recorded, AUDIT_WRITE_FAILED when nothing of them could be written), never INTERNAL_ERROR.
 */
import { once } from 'node:events';
import { verifyBundle } from '@cmcp/verify';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import { openReadOnlyDatabase } from '../src/store/sqlite/db.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rpc, type TestConfig, writeConfig } from './harness/gateway.js';
import { holdLock } from './harness/lock-holder.js';

let up: CountingServer;
let cfg: TestConfig;
let gw: Gateway;
const lines: { msg?: string; call_id?: string }[] = [];

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    agents: ['alice', 'bob'].map((a) => ({ agent_id: a, token: `${a}-token` })),
  });
  gw = await startGateway(
    loadConfig(cfg.file),
    pino({ level: 'warn' }, { write: (l: string) => void lines.push(JSON.parse(l)) }),
  );
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

const call = (agent: string, name: string, id: number) =>
  rpc(gw.url, `${agent}-token`, {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: {} },
  });

async function until(ok: () => boolean, what: string, ms = 60_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(lines)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('a terminal entry meeting a lock held past the busy timeout', () => {
  it('is retried until the lock is free and committed once; calls meanwhile get a specific code', async () => {
    const first = await call('alice', 'c.record', 1); // opens alice's default session
    const sid = first.body.result._meta['dev.cmcp/evidence'].session_id as string;
    const held = up.invocations.length;
    const pending = call('alice', 'c.hold', 2);
    await until(() => up.invocations.length > held, 'the upstream to receive the call');
    const lock = holdLock(cfg.dbPath, 60_000);
    try {
      await lock.held;
      up.release(); // the upstream answers: the terminal entry now waits for the lock
      // The first commit try gives up after the busy timeout (5 s); the call is not answered then.
      await until(
        () => lines.some((l) => l.msg?.startsWith('terminal audit entry')),
        'the terminal commit to meet the busy timeout',
      );
      expect(lines.filter((l) => l.msg?.startsWith('terminal audit entry')).map((l) => l.msg)).toEqual([
        'terminal audit entry waits for the database lock; retrying',
      ]);
      // Calls that arrive meanwhile: alice's (her session exists: its attempt cannot be written),
      // bob's (his default session cannot be made). Neither reaches the upstream.
      const invocations = up.invocations.length;
      const other = call('alice', 'c.record', 3);
      const fresh = call('bob', 'c.record', 4);
      await until(
        () => lines.some((l) => l.msg === 'tools/call refused: the database is locked by another process'),
        "bob's call to meet the busy timeout",
        30_000,
      );
      expect((await other).body.error.data).toMatchObject({
        error_code: 'AUDIT_WRITE_FAILED', // nothing of it could be written
      });
      let settled = false;
      void pending.finally(() => {
        settled = true;
      });
      await new Promise((r) => setImmediate(r));
      expect(settled).toBe(false); // the held call is still waiting for its terminal entry
      lock.proc.stdin?.write('go\n'); // released while bob's refusal waits to be written
      await lock.released;
      // Bob's refusal is recorded once the lock is free: a specific code, not INTERNAL_ERROR.
      const r4 = await fresh;
      expect(r4.body.error.data.error_code).toBe('STORE_BUSY');
      expect(up.invocations.length).toBe(invocations);
      const bobs = gw.chain
        .entries('gateway')
        .filter((e) => e.entry_type === 'tool_call' && e.call_id === r4.body.error.data.call_id);
      expect(bobs.map((e) => [e.agent_id, e.disposition, e.error_code])).toEqual([
        ['bob', 'refused', 'STORE_BUSY'],
      ]);
      expect(lines.some((l) => l.msg === 'tools/call fault')).toBe(false);
    } finally {
      // Released here if an assertion above failed first; the holder exits after releasing.
      const exited = once(lock.proc, 'exit');
      if (lock.proc.exitCode === null && lock.proc.signalCode === null) {
        lock.proc.stdin?.write('go\n');
        await exited;
      }
    }
    const r = await pending;
    expect(r.body.result.content[0].text).toBe('released');
    const evidence = r.body.result._meta['dev.cmcp/evidence'];
    const terminals = gw.chain
      .entries(sid)
      .filter((e) => e.entry_type === 'tool_call' && e.entry_hash === evidence.entry_hash);
    expect(terminals).toHaveLength(1);
    expect(terminals[0]?.disposition).toBe('completed');
    const ofCall = gw.chain.entries(sid).filter((e) => e.call_id === terminals[0]?.call_id);
    expect(ofCall).toHaveLength(1); // exactly once
    const left = openReadOnlyDatabase(cfg.dbPath);
    expect(left.prepare('SELECT count(*) AS n FROM call_attempts').get()).toEqual({ n: 0 });
    left.close();
    expect(verifyBundle(gw.chain.bundle(sid, sid)).checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(verifyBundle(gw.chain.bundle('gateway', null)).checks.filter((c) => c.status === 'fail')).toEqual(
      [],
    );
    // The gateway writes again at once.
    expect((await call('bob', 'c.record', 5)).body.result.content[0].text).toMatch(/^count=/);
  }, 120_000);
});
