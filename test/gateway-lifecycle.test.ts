/**
 * Gateway lifecycle: sessions left open by an earlier process are closed honestly at start-up,
 * and unauthenticated requests are recorded at a bounded rate.
 */

import { verifyClaim } from '@cmcp/verify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

let up: CountingServer;
let cfg: TestConfig;

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({ upstreams: [{ name: 'c', transport: 'http', url: up.url }] });
});
afterAll(async () => {
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

const callIn = (url: string, sid?: string) =>
  rpc(url, 'alice-token', {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'c.record', arguments: {}, ...(sid ? { _cmcp: { session_id: sid } } : {}) },
  });

describe('restart', () => {
  it('closes sessions left open under the previous key, with claims that say the binding is absent', async () => {
    let gw = await startInProcess(cfg);
    const challenge = 'AAECAwQFBgcICQ';
    const explicit = (await rest(gw.url, 'alice-token', 'POST', '/sessions', { challenge })).body
      .session_id as string;
    await callIn(gw.url, explicit);
    const defaultSid = (await callIn(gw.url)).body.result._meta['dev.cmcp/evidence'].session_id as string;
    await gw.close();

    gw = await startInProcess(cfg);
    try {
      for (const sid of [explicit, defaultSid]) {
        const claim = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/claim`);
        expect(claim.status).toBe(200);
        expect(claim.body.evidence).toMatchObject({ status: 'absent', reason: 'GATEWAY_KEY_ROTATED' });
        const bundle = await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`);
        const last = JSON.parse(bundle.body.entries.at(-1).canonical);
        expect(last).toMatchObject({ entry_type: 'session_close', detail: { reason: 'gateway_restarted' } });
        const report = verifyClaim(claim.body, {
          bundle: bundle.body,
          ...(sid === explicit ? { expectedChallenge: challenge } : {}),
        });
        expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
        expect(report.verdict).toBe('signed-only');
      }
      const again = await callIn(gw.url, explicit);
      expect(again.body.error.data.error_code).toBe('SESSION_CLOSED');
      const fresh = (await callIn(gw.url)).body.result._meta['dev.cmcp/evidence'].session_id;
      expect(fresh).not.toBe(defaultSid);
    } finally {
      await gw.close();
    }
  });
});

describe('unauthenticated requests', () => {
  it('are all on the record, in a bounded number of entries', async () => {
    const gw = await startInProcess(cfg);
    const before = gw.chain.entries('gateway').length;
    for (let i = 0; i < 40; i++) await rpc(gw.url, 'wrong-token', { jsonrpc: '2.0', id: i, method: 'ping' });
    await gw.close(); // flushes the open window
    const { openDatabase } = await import('../src/store/sqlite/db.js');
    const { AuditChain } = await import('../src/store/sqlite/chain.js');
    const db = openDatabase(cfg.dbPath);
    const entries = new AuditChain(db)
      .entries('gateway')
      .slice(before)
      .filter((e) => e.error_code === 'UNAUTHENTICATED');
    db.close();
    expect(entries.length).toBeLessThanOrEqual(2);
    expect(entries.reduce((n, e) => n + Number(e.detail?.count ?? 0), 0)).toBe(40);
  });
});

describe('operator routes', () => {
  it('percent-encoded paths are authenticated as operator requests (no agent bypass)', async () => {
    const c2 = await writeConfig({
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
      operators: [{ operator_id: 'root', token: 'op-token' }],
    });
    const gw = await startInProcess(c2);
    try {
      for (const path of [
        '/operator/status',
        '/%6Fperator/status',
        '/%6fperator/status',
        '/op%65rator/status',
      ]) {
        const asAgent = await rest(gw.url, 'alice-token', 'GET', path);
        expect(asAgent.status, path).toBe(401);
        const noToken = await rest(gw.url, null, 'GET', path);
        expect(noToken.status, path).toBe(401);
      }
      const block = await rest(gw.url, 'alice-token', 'POST', '/%6Fperator/agents/bob/block', {});
      expect(block.status).toBe(401);
      const asOperator = await rest(gw.url, 'op-token', 'GET', '/%6Fperator/status');
      expect(asOperator.status).toBe(200);
      // bob is not blocked
      const r = await rpc(gw.url, 'bob-token', { jsonrpc: '2.0', id: 1, method: 'ping' });
      expect(r.status).toBe(200);
    } finally {
      await gw.close();
      cleanup(c2.dir);
    }
  });
});

describe('one live process per instance', () => {
  it('a second start of a running instance stops before recovery, measurement or session changes', async () => {
    const { freePort, startChild } = await import('./harness/gateway.js');
    const { spawnSync } = await import('node:child_process');
    const { REPO_ROOT } = await import('./harness/gateway.js');
    const { join } = await import('node:path');
    const c3 = await writeConfig({
      port: await freePort(),
      upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    });
    const a = await startChild(c3);
    try {
      const sid = (await rest(a.url, 'alice-token', 'POST', '/sessions', {})).body.session_id;
      const held = rpc(a.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 1,
        method: 'tools/call',
        params: {
          name: 'c.hold',
          arguments: { ms: 2500 },
          _cmcp: { session_id: sid, execution_id: 'lock-x' },
        },
      });
      await new Promise((r) => setTimeout(r, 300));
      const b = spawnSync(
        process.execPath,
        [join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'), 'start', '--config', c3.file],
        {
          encoding: 'utf8',
          timeout: 30_000,
        },
      );
      expect(b.status).toBe(1);
      expect(b.stderr).toMatch(/instance "gateway" is already running/);
      const r = await held;
      expect(r.body.result.content[0].text).toBe('released');
      const claim = await rest(a.url, 'alice-token', 'POST', `/sessions/${sid}/close`);
      expect(claim.status).toBe(200);
      expect(claim.body.transcript.at(-1)).toMatchObject({ disposition: 'completed' });
    } finally {
      await a.stop();
      cleanup(c3.dir);
    }
  });
});
