/**
 * The tool catalog (docs/spec/policy.md#catalog) in front of real MCP servers: tools/list returns the
 * approved definitions only; unpinned tools are TOOL_NOT_IN_CATALOG; drift — at first
 * contact, on notifications/tools/list_changed, and on the periodic re-list — blocks only the
 * drifted tool and is recorded with old and new hashes; the catalog hash is in the
 * catalog_load entry, the binding and the claim, and `cmcp verify --catalog-hash` pins it.
 */
import { execFile } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { verifyClaim } from '@cmcp/verify';
import type { AuditEntry } from '@cmcp/verify/formats';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type Catalog,
  CatalogError,
  catalogHash,
  definitionHash,
  loadCatalogFile,
  parseCatalog,
  snapshotCatalog,
} from '../src/catalog/catalog.js';
import { parseConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import { UpstreamPool } from '../src/upstream/pool.js';
import {
  cleanup,
  everythingUpstream,
  REPO_ROOT,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const run = promisify(execFile);
const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
const MUTATING = join(REPO_ROOT, 'test', 'fixtures', 'mutating-server.mjs');
const mutUpstream = { name: 'mut', transport: 'stdio', command: process.execPath, args: [MUTATING] };

const call = (gw: Gateway, name: string, args: Record<string, unknown> = {}, token = 'alice-token') =>
  rpc(gw.url, token, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } });

const gatewayEntries = (gw: Gateway, type: string): AuditEntry[] =>
  gw.chain.entries('gateway').filter((e) => e.entry_type === type);

async function waitFor<T>(fn: () => T | undefined, ms = 10_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Lists the real upstreams and pins the chosen tools; `tamper` changes one pinned definition. */
async function buildCatalog(
  keep: Record<string, string[]>,
  tamper?: { server: string; name: string },
): Promise<Catalog> {
  const pool = new UpstreamPool(
    parseConfig({
      database: ':memory:',
      dev_mode: true,
      attestation: { provider: 'software' },
      upstreams: [mutUpstream, everythingUpstream('everything')],
    }).upstreams,
    pino({ level: 'silent' }),
  );
  await pool.start();
  const doc = snapshotCatalog(pool.toolLists(), 'test catalog');
  await pool.close();
  doc.tools = doc.tools.filter((t) => keep[t.server]?.includes(t.name));
  for (const t of doc.tools) {
    if (tamper && t.server === tamper.server && t.name === tamper.name) {
      t.definition = { ...t.definition, description: 'an approved description the upstream does not send' };
      t.sha256 = definitionHash(t.definition);
    }
    if (t.server === 'mut' && t.name === 'target') t.sensitivity = 'confidential';
  }
  return doc;
}

const KEEP = {
  mut: ['target', 'other', 'mutate', 'mutate_silently', 'restore'],
  everything: ['echo', 'get-sum'],
};

describe('catalog files', () => {
  it('a pin that is not the hash of its definition refuses the catalog', () => {
    const def = { name: 't', description: 'x', inputSchema: { type: 'object' } };
    const good = {
      catalog_version: 1,
      tools: [
        { server: 's', name: 't', sensitivity: 'public', sha256: definitionHash(def), definition: def },
      ],
    };
    expect(parseCatalog(good).tools).toHaveLength(1);
    const bad = structuredClone(good);
    (bad.tools[0] as { definition: { description: string } }).definition.description = 'y';
    expect(() => parseCatalog(bad)).toThrow(CatalogError);
    expect(() => parseCatalog({ ...good, tools: [{ ...good.tools[0], sensitivity: 'top' }] })).toThrow(
      /sensitivity/,
    );
  });

  it('the definition hash covers description, inputSchema, outputSchema and annotations only', () => {
    const def = {
      name: 't',
      description: 'd',
      inputSchema: { type: 'object' },
      annotations: { readOnlyHint: true },
    };
    const h = definitionHash(def);
    expect(definitionHash({ ...def, title: 'another title', _meta: { x: 1 } })).toBe(h);
    expect(definitionHash({ ...def, annotations: { readOnlyHint: false } })).not.toBe(h);
    expect(definitionHash({ ...def, outputSchema: { type: 'object' } })).not.toBe(h);
  });
});

describe('catalog enforcement with real upstreams', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  let catalog: Catalog;
  let hash: string;

  beforeAll(async () => {
    catalog = await buildCatalog(KEEP, { server: 'everything', name: 'get-sum' });
    cfg = await writeConfig({ upstreams: [mutUpstream, everythingUpstream('everything')] });
    const file = join(cfg.dir, 'catalog.json');
    writeFileSync(file, JSON.stringify(catalog, null, 2));
    hash = catalogHash(catalog);
    cfg.raw.catalog = { file, relist_interval_s: 0 };
    writeFileSync(cfg.file, JSON.stringify(cfg.raw));
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('catalog_load records the catalog hash; tools/list returns only approved, undrifted definitions', async () => {
    const load = gatewayEntries(gw, 'catalog_load');
    expect(load).toHaveLength(1);
    expect(load[0]?.detail?.catalog_hash).toBe(hash);
    expect(gw.facts.catalogHash).toBe(hash);
    const r = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const names = (r.body.result.tools as { name: string }[]).map((t) => t.name).sort();
    expect(names).toEqual(
      [
        'everything.echo',
        'mut.mutate',
        'mut.mutate_silently',
        'mut.other',
        'mut.restore',
        'mut.target',
      ].sort(),
    );
    const echo = r.body.result.tools.find((t: { name: string }) => t.name === 'everything.echo');
    const pinned = catalog.tools.find((t) => t.name === 'echo');
    expect(echo).toEqual({ ...pinned?.definition, name: 'everything.echo' });
  });

  it('a tool the catalog does not pin is TOOL_NOT_IN_CATALOG (and audited)', async () => {
    for (const name of ['mut.unpinned', 'everything.get-env', 'nowhere.tool']) {
      const r = await call(gw, name);
      expect(r.body.error.data.error_code).toBe('TOOL_NOT_IN_CATALOG');
      expect(r.body.error.code).toBe(-32021);
      const ev = r.body.error.data.evidence;
      const entry = gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
      expect(entry?.entry_type).toBe('tool_call');
      expect(entry?.error_code).toBe('TOOL_NOT_IN_CATALOG');
    }
  });

  it('drift at first contact blocks only that tool, with old and new hashes on the record', async () => {
    const drift = gatewayEntries(gw, 'catalog_drift').find((e) => e.tool_name === 'get-sum');
    const pin = catalog.tools.find((t) => t.name === 'get-sum');
    expect(drift?.server_identity).toBe('everything');
    expect(drift?.detail?.trigger).toBe('first_contact');
    expect(drift?.detail?.old_hash).toBe(pin?.sha256);
    expect(drift?.detail?.new_hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(drift?.detail?.new_hash).not.toBe(pin?.sha256);
    const r = await call(gw, 'everything.get-sum', { a: 1, b: 2 });
    expect(r.body.error.data.error_code).toBe('CATALOG_DRIFT');
    expect(r.body.error.data.pinned_hash).toBe(pin?.sha256);
    expect(r.body.error.data.live_hash).toBe(drift?.detail?.new_hash);
    const ok = await call(gw, 'everything.echo', { message: 'still works' });
    expect(ok.body.result.content[0].text).toContain('still works');
  });

  it('drift on notifications/tools/list_changed blocks that tool only; restoring the pinned definition lifts it', async () => {
    expect((await call(gw, 'mut.target')).body.result.content[0].text).toBe('target ran');
    await call(gw, 'mut.mutate');
    const drift = await waitFor(() =>
      gatewayEntries(gw, 'catalog_drift').find(
        (e) => e.tool_name === 'target' && e.detail?.trigger === 'list_changed',
      ),
    );
    expect(drift.detail?.old_hash).toBe(catalog.tools.find((t) => t.name === 'target')?.sha256);
    const blocked = await call(gw, 'mut.target');
    expect(blocked.body.error.data.error_code).toBe('CATALOG_DRIFT');
    expect((await call(gw, 'mut.other')).body.result.content[0].text).toBe('other ran');
    const list = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 2, method: 'tools/list' });
    expect(list.body.result.tools.map((t: { name: string }) => t.name)).not.toContain('mut.target');

    await call(gw, 'mut.restore');
    await waitFor(() => gatewayEntries(gw, 'catalog_drift_cleared').find((e) => e.tool_name === 'target'));
    expect((await call(gw, 'mut.target')).body.result.content[0].text).toBe('target ran');
  });

  it('the claim carries the catalog hash; verify --catalog-hash pins it', async () => {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 3,
      method: 'tools/call',
      params: { name: 'mut.other', arguments: {}, _cmcp: { session_id: s.body.session_id } },
    });
    const claim = await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`);
    expect(claim.body.catalog_hash).toBe(hash);
    expect(claim.body.binding.preimage.catalog_hash).toBe(hash);
    expect(claim.body.policy_bundle_hash).toBeNull();
    expect(claim.body.enforcement_mode).toBe('none');
    const ok = verifyClaim(claim.body, { expectedCatalogHash: hash });
    expect(ok.checks.find((c) => c.id === 'claim.catalog_hash')?.status).toBe('pass');
    expect(ok.verdict).not.toBe('invalid');
    const bad = verifyClaim(claim.body, { expectedCatalogHash: `sha256:${'0'.repeat(64)}` });
    expect(bad.verdict).toBe('invalid');
    expect(bad.checks.find((c) => c.id === 'claim.catalog_hash')?.reason_code).toBe('CATALOG_HASH_MISMATCH');

    const file = join(cfg.dir, 'claim.json');
    writeFileSync(file, JSON.stringify(claim.body));
    const pass = await run(process.execPath, [
      CLI,
      'verify',
      file,
      '--catalog-hash',
      hash,
      '--require',
      'signed-only',
      '--json',
    ]);
    expect(
      JSON.parse(pass.stdout).checks.find((c: { id: string }) => c.id === 'claim.catalog_hash').status,
    ).toBe('pass');
    const fail = await run(process.execPath, [
      CLI,
      'verify',
      file,
      '--catalog-hash',
      `sha256:${'1'.repeat(64)}`,
    ]).catch((e: { code: number; stdout: string }) => e);
    expect((fail as { code: number }).code).toBe(1);
    expect((fail as { stdout: string }).stdout).toContain('CATALOG_HASH_MISMATCH');
  });
});

describe('periodic re-list', () => {
  it('a definition changed without a notification is caught by the re-list interval', async () => {
    const catalog = await buildCatalog(KEEP);
    const cfg = await writeConfig({ upstreams: [mutUpstream] });
    const file = join(cfg.dir, 'catalog.json');
    writeFileSync(file, JSON.stringify(catalog));
    cfg.raw.catalog = { file, relist_interval_s: 1 };
    writeFileSync(cfg.file, JSON.stringify(cfg.raw));
    const gw = await startInProcess(cfg);
    try {
      expect(gatewayEntries(gw, 'catalog_drift').filter((e) => e.server_identity === 'mut')).toEqual([]);
      await call(gw, 'mut.mutate_silently');
      const drift = await waitFor(() =>
        gatewayEntries(gw, 'catalog_drift').find((e) => e.tool_name === 'target'),
      );
      expect(drift.detail?.trigger).toBe('interval');
      expect((await call(gw, 'mut.target')).body.error.data.error_code).toBe('CATALOG_DRIFT');
      expect((await call(gw, 'mut.other')).body.result.content[0].text).toBe('other ran');
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});

describe('cmcp catalog', () => {
  it('snapshot writes a catalog of the live upstreams; hash prints its hash; a bad catalog refuses the start', async () => {
    const cfg = await writeConfig({ upstreams: [mutUpstream] });
    try {
      const out = join(cfg.dir, 'snap.json');
      await run(process.execPath, [CLI, 'catalog', 'snapshot', '--config', cfg.file, '--out', out]);
      const doc = JSON.parse(readFileSync(out, 'utf8')) as Catalog;
      expect(doc.tools.map((t) => t.name).sort()).toEqual(
        ['mutate', 'mutate_silently', 'other', 'restore', 'target', 'unpinned'].sort(),
      );
      expect(doc.tools.every((t) => t.sensitivity === 'unclassified' && t.server === 'mut')).toBe(true);
      const h = await run(process.execPath, [CLI, 'catalog', 'hash', out]);
      expect(h.stdout.trim()).toBe(loadCatalogFile(out).hash);
      expect(h.stdout.trim()).toBe(catalogHash(doc));

      const tampered = structuredClone(doc);
      (tampered.tools[0] as { sha256: string }).sha256 = `sha256:${'a'.repeat(64)}`;
      writeFileSync(out, JSON.stringify(tampered));
      const bad = await run(process.execPath, [CLI, 'catalog', 'hash', out]).catch(
        (e: { code: number; stderr: string }) => e,
      );
      expect((bad as { code: number }).code).toBe(2);
      expect((bad as { stderr: string }).stderr).toContain('is not the hash of its definition');
      expect((bad as { stderr: string }).stderr).not.toMatch(/\n\s+at /);
      cfg.raw.catalog = { file: out };
      const { loadConfig } = await import('../src/config/index.js');
      writeFileSync(cfg.file, JSON.stringify(cfg.raw));
      await expect(startGateway(loadConfig(cfg.file), pino({ level: 'silent' }))).rejects.toMatchObject({
        code: 'CATALOG_INVALID',
      });
    } finally {
      cleanup(cfg.dir);
    }
  });
});
