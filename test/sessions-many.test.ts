/**
 * Issue 11 item 6: an agent with thousands of open sessions does not freeze the gateway when
 * an operator blocks it, when a policy reload closes every session, or when a restart closes
 * the sessions an earlier process left open. While each runs, real probe requests are
 * answered, and they see it half done (some sessions closed, some not). The event loop's
 * longest stall is printed (timings belong in the report and the bench, not in assertions).
 */
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { hashBundleDir, isBundleFile } from '../src/policy/bundle.js';
import { generatePolicyKey, signBundleHash } from '../src/policy/signature.js';
import {
  cleanup,
  everythingUpstream,
  freePort,
  REPO_ROOT,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

/** Sessions per agent (CMCP_MANY_SESSIONS; the report's numbers were taken with 2000). */
const N = Number(process.env.CMCP_MANY_SESSIONS ?? 1000);
const OP = 'operator-token-1';
const key = generatePolicyKey();
const tmp: string[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function bundleBody(version: number): Record<string, unknown> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-many-'));
  tmp.push(dir);
  cpSync(join(REPO_ROOT, 'examples', 'policy'), dir, { recursive: true });
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version, description: `v${version}` }));
  const files: Record<string, string> = {};
  for (const n of readdirSync(dir).filter(isBundleFile))
    files[n] = readFileSync(join(dir, n)).toString('base64url');
  return { dir, files, signature: signBundleHash(hashBundleDir(dir), key.privatePem) };
}

let cfg: TestConfig;
let gw: Gateway;
let url: string;

/**
 * POSTs a JSON body as the operator on a connection of its own (no keep-alive reuse: a socket
 * the gateway closes as idle just as a pooled request goes out would reset it).
 */
// biome-ignore lint/suspicious/noExplicitAny: responses are arbitrary JSON that tests assert field by field
function operatorPost(path: string, body: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    const req = request(
      `${url}${path}`,
      {
        method: 'POST',
        agent: false,
        headers: { authorization: `Bearer ${OP}`, 'content-type': 'application/json' },
      },
      (res) => {
        let text = '';
        res.on('data', (d) => {
          text += d;
        });
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) }));
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

/** Opens `n` sessions for `agentId` through the session service. */
async function openSessions(g: Gateway, agentId: string, n: number): Promise<void> {
  for (let i = 0; i < n; i++) await g.sessions.create(agentId);
}

/** The service's count, which SQLite answers at once (no promise). */
function openCount(g: Gateway, agentId: string): number {
  const n = g.sessions.openCount(agentId);
  if (typeof n !== 'number') throw new Error('the SQLite session service answers openCount with a promise');
  return n;
}

/**
 * Runs `op` while probing `GET /healthz` every 20 ms; returns what `op` returned, and the open
 * session count of `agentId` seen at each probe answered before `op` settled.
 */
async function probeDuring<T>(op: () => Promise<T>, seen: () => number) {
  const delay = monitorEventLoopDelay({ resolution: 1 });
  delay.enable();
  let settled = false;
  const started = performance.now();
  const running = op().finally(() => {
    settled = true;
  });
  const during: number[] = [];
  while (!settled) {
    try {
      const r = await fetch(`${url}/healthz`, { keepalive: false });
      await r.text();
      if (!settled && r.ok) during.push(seen());
    } catch {
      // not listening yet (restart)
    }
    await sleep(20);
  }
  const result = await running;
  delay.disable();
  const took = performance.now() - started;
  return { result, during, took, maxStallMs: delay.max / 1e6 };
}

beforeAll(async () => {
  const v1 = bundleBody(1);
  cfg = await writeConfig({
    port: await freePort(),
    upstreams: [everythingUpstream('everything')],
    agents: [
      { agent_id: 'alice', token: 'alice-token', attributes: { team: 'eng', roles: ['writer'] } },
      { agent_id: 'bob', token: 'bob-token', attributes: { team: 'eng' } },
    ],
    operators: [{ operator_id: 'root', token: OP }],
    extra: {
      policy: { bundle: v1.dir, signing_key: key.publicRaw },
      catalog: { file: join(REPO_ROOT, 'examples', 'catalog.json'), relist_interval_s: 0 },
    },
  });
  gw = await startInProcess(cfg);
  url = gw.url;
}, 60_000);

afterAll(async () => {
  await gw?.close();
  if (cfg) cleanup(cfg.dir);
  for (const d of tmp) rmSync(d, { recursive: true, force: true });
});

describe(`an agent with ${N} open sessions`, () => {
  it('blocking it: probes are answered while its sessions close', async () => {
    await openSessions(gw, 'alice', N);
    expect(openCount(gw, 'alice')).toBe(N);
    const r = await probeDuring(
      () => operatorPost('/operator/agents/alice/block', { reason: 'many sessions' }),
      () => openCount(gw, 'alice'),
    );
    expect(r.result.status).toBe(200);
    expect(r.result.body.sessions_closed).toHaveLength(N);
    expect(r.during.some((n) => n > 0 && n < N)).toBe(true);
    console.log(
      `block, ${N} sessions: ${r.took.toFixed(0)} ms, longest event-loop stall ${r.maxStallMs.toFixed(1)} ms`,
    );
  }, 120_000);

  it('a policy reload: probes are answered while every session closes; a closing session is refused', async () => {
    await openSessions(gw, 'bob', N);
    const newest = (
      gw.db
        .prepare(
          "SELECT session_id FROM sessions WHERE agent_id = 'bob' AND status = 'open' ORDER BY created_ms DESC LIMIT 1",
        )
        .get() as { session_id: string }
    ).session_id;
    const { files, signature } = bundleBody(2);
    let midway: Promise<unknown> | null = null;
    const r = await probeDuring(
      () => operatorPost('/operator/policy/reload', { files, signature }),
      () => {
        const n = openCount(gw, 'bob');
        // The newest session closes last; while the reload runs it is already unusable.
        if (n > 0 && n < N && midway === null)
          midway = gw.sessions.resolve('bob', newest).then(
            () => 'usable',
            (e: { code?: string }) => e.code,
          );
        return n;
      },
    );
    expect(r.result.status).toBe(200);
    expect(r.result.body.sessions_closed.length).toBeGreaterThanOrEqual(N);
    expect(r.during.some((n) => n > 0 && n < N)).toBe(true);
    expect(await midway).toBe('SESSION_CLOSED');
    console.log(
      `reload, ${N} sessions: ${r.took.toFixed(0)} ms, longest event-loop stall ${r.maxStallMs.toFixed(1)} ms`,
    );
  }, 120_000);

  it('a restart: the listener answers while the sessions left open are closed', async () => {
    await openSessions(gw, 'bob', N);
    await gw.close();
    const r = await probeDuring(
      async () => {
        gw = await startInProcess(cfg);
        return gw;
      },
      // Counted in SQLite directly: the new gateway object is not there until its start resolves.
      () => countOpen(cfg.dbPath),
    );
    expect(r.during.some((n) => n > 0 && n < N)).toBe(true);
    expect(openCount(gw, 'bob')).toBe(0);
    console.log(
      `restart, ${N} stale sessions: ${r.took.toFixed(0)} ms, longest event-loop stall ${r.maxStallMs.toFixed(1)} ms`,
    );
  }, 120_000);
});

/** Open sessions in the database file (a second, read-only connection). */
function countOpen(dbPath: string): number {
  const db = new Database(dbPath, { readonly: true });
  try {
    return (db.prepare("SELECT COUNT(*) AS n FROM sessions WHERE status = 'open'").get() as { n: number }).n;
  } finally {
    db.close();
  }
}
