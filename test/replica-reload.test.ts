/**
 * Signed policy reloads on replicas (docs/replicas.md "Serving as a replica"): two `cmcp start`
 * replicas on one real throw-away PostgreSQL (testing/postgres.ts), a real MCP upstream in this
 * process, a policy bundle v1 under a pinned key.
 * - a reload to v2 (forbidding `c.record`) through replica 0 is recorded once, installed there
 *   at once and on replica 1 within the read interval; every open session bound to v1 is
 *   closed (`policy_reload`), whichever replica opened it; the forbidden tool is refused on both
 *   replicas, never invoked; a new session binds v2;
 * - the same version again through replica 1 is refused `not_newer`, a wrongly signed bundle
 *   `signature_invalid`, both recorded;
 * - a replica started afterwards with v1 in its config runs v2 before it serves;
 * - a session bound to a newer bundle (v3) used at once through replicas that had not read that
 *   reload yet is decided by v3: they read the recorded reloads first.
 * Needs the build (dist/).
 */
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { hashBundleDir, isBundleFile } from '../src/policy/bundle.js';
import { generatePolicyKey, signBundleHash } from '../src/policy/signature.js';
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
const key = generatePolicyKey();
const otherKey = generatePolicyKey();
let server: PostgresInstance | null = null;
let url = '';
let admin: pg.Pool;
let up: CountingServer;
const dirs: string[] = [];
const replicas: ChildGateway[] = [];
let v1 = '';
let v2 = '';

/** A bundle at `version`: everything permitted, and `c.record` forbidden when `noRecord`. */
function bundle(version: number, noRecord: boolean): string {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-replica-reload-'));
  dirs.push(dir);
  copyFileSync(join(REPO_ROOT, 'examples', 'policy', 'schema.cedarschema'), join(dir, 'schema.cedarschema'));
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version, description: `v${version}` }));
  writeFileSync(
    join(dir, '00-replicas.cedar'),
    '@id("allow-all")\npermit (principal, action, resource);\n' +
      (noRecord
        ? '@id("no-record")\nforbid (principal, action == Action::"call_tool", resource == Tool::"c.record");\n'
        : ''),
  );
  return dir;
}

function reloadBody(dir: string, signWith = key.privatePem): Record<string, unknown> {
  const files: Record<string, string> = {};
  for (const n of readdirSync(dir).filter(isBundleFile))
    files[n] = readFileSync(join(dir, n)).toString('base64url');
  return { files, signature: signBundleHash(hashBundleDir(dir), signWith) };
}

async function replica(id: string): Promise<ChildGateway> {
  const dir = mkdtempSync(join(tmpdir(), `cmcp-replica-reload-${id}-`));
  dirs.push(dir);
  const cfg = await writeConfig({
    dir,
    port: await freePort(),
    upstreams: [{ name: 'c', transport: 'http', url: up.url, timeout_ms: 20_000 }],
    operators: [{ operator_id: 'ops', token: 'ops-token' }],
    extra: {
      policy: { bundle: v1, enforcement_mode: 'enforcing', signing_key: key.publicRaw },
      database: url,
      instance_id: id,
      replicas: { lease_ttl_ms: 2000, renew_every_ms: 400 },
    },
  });
  return startChild(cfg);
}

beforeAll(async () => {
  if (!withPostgres) return;
  ({ server, url, admin, up } = await startReplicaBackend('reload_1'));
  v1 = bundle(1, false);
  v2 = bundle(2, true);
  for (const id of ['p0', 'p1']) replicas.push(await replica(id));
}, 90_000);
afterAll(async () => {
  await stopReplicaBackend({ server: server ?? undefined, admin, up }, replicas, dirs);
});

const op = (at: ChildGateway, method: string, path: string, b?: unknown) =>
  rest(at.url, 'ops-token', method, path, b);
const record = (at: ChildGateway, id: number, cmcp: object = {}) =>
  rpc(at.url, 'alice-token', {
    jsonrpc: '2.0',
    id,
    method: 'tools/call',
    params: { name: 'c.record', arguments: { a: `r${id}` }, _cmcp: cmcp },
  });

async function until(what: string, ok: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function gatewayEntries(type: string) {
  const r = await admin.query<{ canonical: string }>(
    "SELECT canonical FROM audit_entries WHERE chain_id = 'gateway' AND entry_type = $1 ORDER BY sequence_number",
    [type],
  );
  return r.rows.map((x) => JSON.parse(x.canonical) as { detail: Record<string, unknown> });
}

describe.skipIf(!withPostgres)('cmcp start on PostgreSQL: signed policy reloads', () => {
  it('a reload through replica 0 reaches replica 1 within the read interval; sessions of v1 closed', async () => {
    const [p0, p1] = replicas as [ChildGateway, ChildGateway];
    const sid = (await rest(p1.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    expect((await record(p0, 1, { session_id: sid })).body.result.isError).toBeFalsy();
    expect((await record(p1, 2)).body.result.isError).toBeFalsy(); // a default session, bound to v1
    const r = await op(p0, 'POST', '/operator/policy/reload', reloadBody(v2));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ bundle_hash: hashBundleDir(v2), version: 2, previous_version: 1 });
    const closed = (r.body.sessions_closed as { session_id: string }[]).map((x) => x.session_id);
    expect(closed).toContain(sid);
    expect(closed).toHaveLength(2);
    expect(await gatewayEntries('policy_reload')).toHaveLength(1);
    expect((await op(p0, 'GET', '/operator/status')).body.policy).toMatchObject({ version: 2 });
    const t0 = Date.now();
    await until(
      'replica 1 runs v2',
      async () => (await op(p1, 'GET', '/operator/status')).body.policy.version === 2,
      3000,
    );
    expect(Date.now() - t0).toBeLessThan(3000);
    const before = up.invocations.length;
    for (const [i, at] of [p0, p1].entries())
      expect((await record(at, 10 + i)).body.error.data).toMatchObject({
        error_code: 'POLICY_DENY',
        policy_ids: ['no-record'],
      });
    expect((await record(p1, 12, { session_id: sid })).body.error.data.error_code).toBe('SESSION_CLOSED');
    expect(up.invocations.length).toBe(before);
    const next = (await rest(p1.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const b = await admin.query<{ binding_json: string }>(
      'SELECT binding_json FROM sessions WHERE session_id = $1',
      [next],
    );
    expect(JSON.parse(b.rows[0]?.binding_json ?? '{}').preimage.policy_bundle_hash).toBe(hashBundleDir(v2));
  });

  it('refuses the same version again and a wrongly signed bundle through the other replica, recorded', async () => {
    const p1 = replicas[1] as ChildGateway;
    const same = await op(p1, 'POST', '/operator/policy/reload', reloadBody(v2));
    expect(same.status).toBe(409);
    expect(same.body.error).toMatchObject({ error_code: 'POLICY_RELOAD_REFUSED', reason: 'not_newer' });
    const forged = await op(
      p1,
      'POST',
      '/operator/policy/reload',
      reloadBody(bundle(3, false), otherKey.privatePem),
    );
    expect(forged.body.error).toMatchObject({
      error_code: 'POLICY_RELOAD_REFUSED',
      reason: 'signature_invalid',
    });
    expect((await gatewayEntries('policy_reload_refused')).map((e) => e.detail.reason)).toEqual([
      'not_newer',
      'signature_invalid',
    ]);
    expect(await gatewayEntries('policy_reload')).toHaveLength(1);
  });

  it('a replica started afterwards with v1 in its config runs the reloaded v2 before it serves', async () => {
    const p2 = await replica('p2');
    replicas.push(p2);
    expect((await op(p2, 'GET', '/operator/status')).body.policy).toMatchObject({
      bundle_hash: hashBundleDir(v2),
      version: 2,
    });
    expect((await record(p2, 20)).body.error.data.error_code).toBe('POLICY_DENY');
  });

  it('a session bound to a newer bundle is decided by it on a replica that had not read the reload yet', async () => {
    const [p0, p1, p2] = replicas as [ChildGateway, ChildGateway, ChildGateway];
    const v3 = bundle(3, false); // permits c.record again
    expect((await op(p1, 'POST', '/operator/policy/reload', reloadBody(v3))).status).toBe(200);
    // At once, before the others' next read: a session bound to v3 used through them.
    const sid = (await rest(p1.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const before = up.invocations.length;
    for (const [i, at] of [p0, p2].entries())
      expect((await record(at, 30 + i, { session_id: sid })).body.result.isError).toBeFalsy();
    expect(up.invocations.length).toBe(before + 2);
    for (const at of [p0, p2]) expect((await op(at, 'GET', '/operator/status')).body.policy.version).toBe(3);
  });
});
