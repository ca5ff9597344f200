/**
 * `GET /operator/audit` (docs/audit-export.md#the-operator-route) on a real gateway: the operator
 * token is accepted and an agent's refused; paging with the cursor the route returns gives every
 * entry of every chain once, the same entries the store's chains hold, whole; an unknown cursor
 * is refused with AUDIT_CURSOR_UNKNOWN; the OCSF shape is served on request.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { verifyChains } from '../src/audit/verify-chains.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const OP = 'operator-token-audit';
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  cfg = await writeConfig({
    agents: [{ agent_id: 'alice', token: 'alice-token' }],
    operators: [{ operator_id: 'root', token: OP }],
  });
  gw = await startInProcess(cfg);
  for (let i = 0; i < 3; i++) {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    expect(s.status).toBe(201);
    await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`, {});
  }
});
afterAll(async () => {
  await gw?.close();
  if (cfg) cleanup(cfg.dir);
});

async function page(query: string, token = OP) {
  const r = await fetch(`${gw.url}/operator/audit${query}`, {
    headers: { authorization: `Bearer ${token}` },
  });
  const text = await r.text();
  return {
    status: r.status,
    cursor: r.headers.get('cmcp-audit-cursor'),
    type: r.headers.get('content-type'),
    text,
  };
}

describe('GET /operator/audit', () => {
  it('pages through every entry of every chain once with the operator token', async () => {
    const got: { entry_hash: string; canonical: string; chain_id: string }[] = [];
    let cursor: string | null = null;
    for (;;) {
      const r = await page(`?limit=3${cursor ? `&after=${cursor}` : ''}`);
      expect(r.status, r.text).toBe(200);
      expect(r.type).toMatch(/^application\/x-ndjson/);
      if (r.text === '') {
        expect(r.cursor).toBe(cursor);
        break;
      }
      got.push(
        ...r.text
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l)),
      );
      cursor = r.cursor;
      expect(cursor).toBe(got[got.length - 1]?.entry_hash);
    }
    const chains = [...new Set(got.map((e) => e.chain_id))];
    expect(chains).toContain('gateway');
    expect(chains.length).toBe(4);
    for (const chainId of chains)
      expect(got.filter((e) => e.chain_id === chainId).map((e) => e.entry_hash)).toEqual(
        gw.chain.entries(chainId).map((e) => e.entry_hash),
      );
    expect((await verifyChains([got])).problems).toEqual([]);

    const ocsf = await page(`?limit=1&format=ocsf`);
    expect(JSON.parse(ocsf.text)).toMatchObject({ class_uid: 6003, metadata: { uid: got[0]?.entry_hash } });
  });

  it('refuses an agent token, an unknown cursor and a malformed one', async () => {
    const asAgent = await page('', 'alice-token');
    expect(asAgent.status).toBe(401);
    const unknown = await page(`?after=${'a'.repeat(64)}`);
    expect(unknown.status).toBe(400);
    expect(JSON.parse(unknown.text).error.error_code).toBe('AUDIT_CURSOR_UNKNOWN');
    expect((await page('?after=nope')).status).toBe(400);
    expect((await page('?limit=0')).status).toBe(400);
  });
});
