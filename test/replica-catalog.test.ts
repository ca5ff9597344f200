/**
 * A catalog on replicas (docs/replicas.md "Serving as a replica"): two `cmcp start` replicas on
 * one real throw-away PostgreSQL (testing/postgres.ts), in front of a real MCP upstream in this
 * process, with one catalog pinned from its live tool list and a Cedar bundle that forbids
 * `c.record` once the session has run a secret tool.
 * - each replica records `catalog_load` in the gateway chain and binds the catalog's hash;
 * - `tools/list` shows the catalog's usable pins only; an unpinned tool is refused
 *   TOOL_NOT_IN_CATALOG and a tool whose pin does not match is refused CATALOG_DRIFT (each
 *   replica records its `catalog_drift`), neither invoked;
 * - the session sensitivity rule is exact across replicas: a session that ran the secret tool
 *   through replica 0 is refused `c.record` through replica 1, which had served that session
 *   at a lower level before; another session is not.
 * Needs the build (dist/).
 */
import { cpSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { definitionHash, loadCatalogFile, snapshotCatalog } from '../src/catalog/catalog.js';
import type { PostgresInstance } from '../testing/postgres.js';
import type { CountingServer } from './fixtures/counting-server.js';
import {
  type ChildGateway,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startChild,
  writeConfig,
} from './harness/gateway.js';
import { hasPostgres } from './harness/postgres.js';
import { startReplicaBackend, stopReplicaBackend } from './harness/replicas.js';

const withPostgres = hasPostgres();
let server: PostgresInstance | null = null;
let url = '';
let admin: pg.Pool;
let up: CountingServer;
let catalogFile = '';
let catalogHash = '';
let driftedPin = '';
let policyDir = '';
const dirs: string[] = [];
const replicas: ChildGateway[] = [];

async function replica(id: string): Promise<ChildGateway> {
  const dir = mkdtempSync(join(tmpdir(), `cmcp-replica-cat-${id}-`));
  dirs.push(dir);
  const cfg = await writeConfig({
    dir,
    port: await freePort(),
    upstreams: [{ name: 'c', transport: 'http', url: up.url, timeout_ms: 20_000 }],
    extra: {
      catalog: { file: catalogFile, relist_interval_s: 0 },
      policy: { bundle: policyDir, enforcement_mode: 'enforcing' },
      database: url,
      instance_id: id,
      replicas: { lease_ttl_ms: 2000, renew_every_ms: 400 },
    },
  });
  return startChild(cfg);
}

/** The upstream's live tools, as `cmcp catalog snapshot` pins them. */
async function liveTools() {
  const c = new Client({ name: 'catalog-snapshot', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(up.url)));
  const { tools } = await c.listTools();
  await c.close();
  return tools;
}

beforeAll(async () => {
  if (!withPostgres) return;
  ({ server, url, admin, up } = await startReplicaBackend('catalog_1'));
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-replica-cat-'));
  dirs.push(dir);
  // `big` secret, `fail` not pinned, `rich` pinned with a definition the upstream does not list.
  const catalog = snapshotCatalog([{ server: 'c', tools: await liveTools() }]);
  catalog.tools = catalog.tools.filter((t) => t.name !== 'fail');
  for (const t of catalog.tools) {
    if (t.name === 'big') t.sensitivity = 'secret';
    if (t.name === 'rich') {
      t.definition = { ...t.definition, description: 'an approved description the upstream does not have' };
      t.sha256 = definitionHash(t.definition);
      driftedPin = t.sha256;
    }
  }
  catalogFile = join(dir, 'catalog.json');
  writeFileSync(catalogFile, JSON.stringify(catalog, null, 2));
  policyDir = join(dir, 'policy');
  for (const f of ['schema.cedarschema', 'manifest.json'])
    cpSync(join(REPO_ROOT, 'examples', 'policy', f), join(policyDir, f));
  writeFileSync(
    join(policyDir, '00-replicas.cedar'),
    '@id("allow-all")\npermit (principal, action, resource);\n' +
      '@id("no-record-after-secret")\nforbid (principal, action == Action::"call_tool", resource == Tool::"c.record")\n' +
      'when { context.session.max_sensitivity_level >= 4 };\n',
  );
  for (const id of ['k0', 'k1']) replicas.push(await replica(id));
  catalogHash = loadCatalogFile(catalogFile).hash;
}, 90_000);
afterAll(async () => {
  await stopReplicaBackend({ server: server ?? undefined, admin, up }, replicas, dirs);
});

function call(at: ChildGateway, id: number, name: string, args: Record<string, unknown>, cmcp: object) {
  return rpc(at.url, 'alice-token', {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name, arguments: args, _cmcp: cmcp },
  });
}

/** The gateway chain's entries of one type, parsed. */
async function gatewayEntries(type: string) {
  const r = await admin.query<{ canonical: string }>(
    "SELECT canonical FROM audit_entries WHERE chain_id = 'gateway' AND entry_type = $1 ORDER BY sequence_number",
    [type],
  );
  return r.rows.map(
    (x) => JSON.parse(x.canonical) as Record<string, unknown> & { detail: Record<string, unknown> },
  );
}

describe.skipIf(!withPostgres)('cmcp start on PostgreSQL with a catalog: two replicas', () => {
  it('records catalog_load on each replica and binds its hash into the session binding', async () => {
    const loads = await gatewayEntries('catalog_load');
    expect(loads).toHaveLength(2);
    expect(catalogHash).toMatch(/^sha256:[0-9a-f]{64}$/);
    for (const l of loads) expect(l.detail.catalog_hash).toBe(catalogHash);
    const sid = (await rest(replicas[0]?.url as string, 'alice-token', 'POST', '/sessions', {})).body
      .session_id as string;
    const b = await admin.query<{ binding_json: string }>(
      'SELECT binding_json FROM sessions WHERE session_id = $1',
      [sid],
    );
    expect(b.rows[0]?.binding_json).toContain(catalogHash);
  });

  it("lists the catalog's usable pins; an unpinned tool and a drifted pin are refused, never invoked", async () => {
    const [k0, k1] = replicas as [ChildGateway, ChildGateway];
    const list = await rpc(k1.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/list',
      params: {},
    });
    const names = (list.body.result.tools as { name: string }[]).map((t) => t.name).sort();
    expect(names).toContain('c.record');
    expect(names).toContain('c.big');
    expect(names).not.toContain('c.fail');
    expect(names).not.toContain('c.rich');
    const sid = (await rest(k0.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const before = up.invocations.length;
    const unpinned = await call(k0, 2, 'c.fail', {}, { session_id: sid });
    expect(unpinned.body.error.data.error_code).toBe('TOOL_NOT_IN_CATALOG');
    const drifted = await call(k1, 3, 'c.rich', { city: 'x' }, { session_id: sid });
    expect(drifted.body.error.data).toMatchObject({ error_code: 'CATALOG_DRIFT', pinned_hash: driftedPin });
    expect(up.invocations.length).toBe(before);
    // Each replica compared the upstream's listing with the pins itself and recorded the drift.
    const drift = (await gatewayEntries('catalog_drift')).filter((e) => e.tool_name === 'rich');
    expect(drift).toHaveLength(2);
    for (const d of drift)
      expect(d.detail).toMatchObject({ catalog_hash: catalogHash, trigger: 'first_contact' });
  });

  it('a session whose sensitivity rose on replica 0 is refused on replica 1; another session is not', async () => {
    const [k0, k1] = replicas as [ChildGateway, ChildGateway];
    const sid = (await rest(k0.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const other = (await rest(k1.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    // Replica 1 serves the session at level 0 first.
    const first = await call(k1, 10, 'c.record', { a: 'first' }, { session_id: sid });
    expect(first.body.result.isError).toBeFalsy();
    const secret = await call(k0, 11, 'c.big', { bytes: 3 }, { session_id: sid });
    expect(secret.body.result.content[0].text).toBe('xxx');
    const lv = await admin.query<{ level: string }>(
      'SELECT level FROM session_sensitivity WHERE session_id = $1',
      [sid],
    );
    expect(Number(lv.rows[0]?.level)).toBe(4);
    const before = up.invocations.length;
    const after = await call(k1, 12, 'c.record', { a: 'after' }, { session_id: sid });
    expect(after.body.error.data).toMatchObject({
      error_code: 'POLICY_DENY',
      policy_ids: ['no-record-after-secret'],
    });
    const again = await call(k0, 13, 'c.record', { a: 'again' }, { session_id: sid });
    expect(again.body.error.data.error_code).toBe('POLICY_DENY');
    expect(up.invocations.length).toBe(before);
    const elsewhere = await call(k1, 14, 'c.record', { a: 'elsewhere' }, { session_id: other });
    expect(elsewhere.body.result.isError).toBeFalsy();
    expect(up.invocations.length).toBe(before + 1);
  });
});
