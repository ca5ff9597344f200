/**
 * Graceful shutdown (docs/spec/call-path.md#shutdown) of a `cmcp start` child on swtpm: SIGTERM
 * refuses new requests with GATEWAY_SHUTTING_DOWN, drains for shutdown.drain_ms, records calls
 * still at the upstream past it as outcome_unknown in their session chains, closes every open
 * session with a hardware-bound claim, exits 0 — and the restart has no session left to close
 * signed-only.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyClaim } from '@cmcp/verify';
import type { AuditBundle, Claim } from '@cmcp/verify/formats';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  type ChildGateway,
  cleanup,
  freePort,
  rest,
  rpc,
  startChild,
  writeConfig,
} from './harness/gateway.js';

let up: CountingServer;
let tpm: Awaited<ReturnType<typeof startSwtpm>>;
const children: ChildGateway[] = [];
const dir = mkdtempSync(join(tmpdir(), 'cmcp-shutdown-'));

beforeAll(async () => {
  up = await startCountingServer();
  tpm = await startSwtpm();
});
afterAll(async () => {
  for (const c of children) await c.stop('SIGKILL');
  up?.release();
  await up?.close();
  await tpm?.stop();
  cleanup(dir);
});

async function gateway(port: number) {
  const cfg = await writeConfig({
    dir,
    port,
    upstreams: [{ name: 'c', transport: 'http', url: up.url, timeout_ms: 30_000 }],
    attestation: { provider: 'tpm', tcti: tpm.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
    extra: { shutdown: { drain_ms: 1500 } },
  });
  const child = await startChild(cfg);
  children.push(child);
  return { child, dbPath: cfg.dbPath };
}

const call = (url: string, id: number, name: string, args: Record<string, unknown>, cmcp: object) =>
  rpc(url, 'alice-token', {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: args, _cmcp: cmcp },
  });

describe('SIGTERM', () => {
  it('drains, records what did not drain outcome_unknown, closes every session bound, exits 0', async () => {
    const port = await freePort();
    const { child, dbPath } = await gateway(port);
    const sa = (await rest(child.url, 'alice-token', 'POST', '/sessions', {})).body;
    const sb = (await rest(child.url, 'alice-token', 'POST', '/sessions', {})).body;
    expect(sa.binding.status).toBe('bound');
    expect(sb.binding.status).toBe('bound');
    expect(
      (await call(child.url, 1, 'c.record', { a: 1 }, { session_id: sa.session_id })).body.result,
    ).toBeDefined();
    // A quick call that ends within the drain time, and two that outlive it.
    const marker = `m-${Math.random().toString(36).slice(2)}`;
    const quick = call(
      child.url,
      2,
      'c.hold',
      { ms: 400, marker: `${marker}-q` },
      { session_id: sa.session_id },
    );
    const slow = call(child.url, 3, 'c.hold', { ms: 25_000, marker }, { session_id: sa.session_id });
    const slowX = call(
      child.url,
      4,
      'c.hold',
      { ms: 25_000, marker },
      {
        session_id: sb.session_id,
        execution_id: `${marker}-x`,
      },
    );
    for (let i = 0; i < 100 && up.invocations.filter((v) => v.args.marker === marker).length < 2; i++)
      await new Promise((r) => setTimeout(r, 50));
    expect(up.invocations.filter((v) => v.args.marker === marker)).toHaveLength(2);

    const exited = child.stop('SIGTERM');
    await new Promise((r) => setTimeout(r, 200));
    const late = await rest(child.url, 'alice-token', 'POST', '/sessions', {}).catch(() => null);
    expect(late?.status).toBe(503);
    expect(late?.body.error.error_code).toBe('GATEWAY_SHUTTING_DOWN');
    // Draining: not ready, with the reason (a load balancer stops sending), while still live.
    const ready = await fetch(`${child.url}/readyz`);
    expect(ready.status).toBe(503);
    const readyBody = (await ready.json()) as { status: string; checks: { shutdown: string | null } };
    expect(readyBody.status).toBe('not_ready');
    expect(readyBody.checks.shutdown).toBe('draining');
    expect((await quick).body.result).toBeDefined();
    // The calls that outlived the drain time are answered, not dropped: CALL_INTERRUPTED with
    // their JSON-RPC ids, as their outcome_unknown entries say.
    const [slowAnswer, slowXAnswer] = await Promise.all([slow, slowX]);
    for (const [a, id] of [
      [slowAnswer, 3],
      [slowXAnswer, 4],
    ] as const) {
      expect(a.body.id).toBe(id);
      expect(a.body.error.data.error_code).toBe('CALL_INTERRUPTED');
      expect(a.body.error.data.disposition).toBe('outcome_unknown');
    }
    expect(await exited).toBe(0);

    const db = new Database(dbPath, { readonly: true });
    const interrupted = db
      .prepare<[], { chain_id: string; session_id: string; canonical: string }>(
        "SELECT chain_id, session_id, canonical FROM audit_entries WHERE entry_type = 'tool_call' AND json_extract(canonical, '$.error_code') = 'CALL_INTERRUPTED'",
      )
      .all();
    expect(db.prepare('SELECT COUNT(*) AS n FROM call_attempts').get()).toEqual({ n: 0 });
    expect(db.prepare("SELECT COUNT(*) AS n FROM sessions WHERE status = 'open'").get()).toEqual({ n: 0 });
    expect(db.prepare('SELECT state FROM executions WHERE execution_id = ?').get(`${marker}-x`)).toEqual({
      state: 'outcome_unknown',
    });
    db.close();
    expect(interrupted.map((e) => e.chain_id).sort()).toEqual([sa.session_id, sb.session_id].sort());
    for (const e of interrupted) {
      expect(e.chain_id).toBe(e.session_id);
      expect(JSON.parse(e.canonical).disposition).toBe('outcome_unknown');
    }

    // The restart finds nothing to close signed-only; every claim is bound and verifies.
    const { child: again } = await gateway(port);
    expect(again.stderr()).not.toMatch(/closed sessions left open by a previous run/);
    for (const [s, calls] of [
      [sa, 3],
      [sb, 1],
    ] as const) {
      const claim = (await rest(again.url, 'alice-token', 'GET', `/sessions/${s.session_id}/claim`))
        .body as Claim;
      const bundle = (await rest(again.url, 'alice-token', 'GET', `/sessions/${s.session_id}/audit`))
        .body as AuditBundle;
      expect(claim.evidence.status).toBe('bound');
      expect(claim.counters.tool_calls).toBe(calls);
      const r = verifyClaim(claim, { bundle });
      expect(r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code)).toEqual([]);
    }
    await again.stop();
  });
});
