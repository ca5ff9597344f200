/**
 * The relayed methods see the session's real highest sensitivity in their Cedar context
 * (src/relay/policy.ts `maxSensitivityOf`, src/call/sensitivity.ts): a policy that forbids
 * `resources/read` once the session has run a secret tool refuses the read after such a call,
 * in that session only. Real SDK upstream (test/fixtures/relay-server.ts), a catalog pinned
 * from its live tool list, the example Cedar bundle plus that one rule.
 */
import { cpSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { snapshotCatalog } from '../src/catalog/catalog.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { jsonChannel } from '../src/relay/channel.js';
import { type RelayServer, startRelayServer } from './fixtures/relay-server.js';
import { REPO_ROOT, startInProcess, writeConfig } from './harness/gateway.js';

let id = 1;
async function rpc(gw: Gateway, agentId: string, method: string, params: Record<string, unknown>) {
  const r = await gw.mcp.handle(
    { agentId, blocked: false },
    { jsonrpc: '2.0', id: id++, method, params },
    undefined,
    process.hrtime.bigint(),
    jsonChannel(),
  );
  return r.body as {
    result?: Record<string, unknown>;
    error?: { code: number; message: string; data?: Record<string, unknown> };
  };
}

/** Every tool the upstream lists, every page (as `cmcp catalog snapshot` pins them). */
async function liveTools(url: string): Promise<Tool[]> {
  const c = new Client({ name: 'catalog-snapshot', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(url)));
  const tools: Tool[] = [];
  let cursor: string | undefined;
  do {
    const page = await c.listTools(cursor ? { cursor } : {});
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  await c.close();
  return tools;
}

describe('relayed requests see the session max sensitivity', () => {
  let up: RelayServer;
  let gw: Gateway;

  beforeAll(async () => {
    up = await startRelayServer({ tag: 'a' });
    const cfg = await writeConfig({
      upstreams: [{ name: 'a', transport: 'http', url: up.url }],
      agents: [
        { agent_id: 'alice', token: 'alice-token' },
        { agent_id: 'bob', token: 'bob-token' },
      ],
    });
    // The catalog marks `touch` secret; the rest stays unclassified.
    const catalog = snapshotCatalog([{ server: 'a', tools: await liveTools(up.url) }]);
    for (const t of catalog.tools) if (t.name === 'touch') t.sensitivity = 'secret';
    expect(catalog.tools.filter((t) => t.sensitivity === 'secret')).toHaveLength(1);
    const catalogFile = join(cfg.dir, 'catalog.json');
    writeFileSync(catalogFile, JSON.stringify(catalog, null, 2));
    const bundle = join(cfg.dir, 'policy');
    cpSync(join(REPO_ROOT, 'examples', 'policy'), bundle, { recursive: true });
    writeFileSync(
      join(bundle, '20-no-reads-after-secret.cedar'),
      [
        '// Once a session has run a secret tool, it reads no resource.',
        '@id("no-reads-after-secret")',
        'forbid (principal, action == Action::"read_resource", resource)',
        'when { context.session.max_sensitivity_level >= 4 };',
        '',
      ].join('\n'),
    );
    cfg.raw.catalog = { file: catalogFile, relist_interval_s: 0 };
    cfg.raw.policy = { bundle, enforcement_mode: 'enforcing' };
    writeFileSync(cfg.file, JSON.stringify(cfg.raw));
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });

  it('forbids a resources/read after a secret tool call in the same session, not before and not elsewhere', async () => {
    const before = await rpc(gw, 'alice', 'resources/read', { uri: 'test://a/0' });
    expect(before.result?.contents).toEqual([{ uri: 'test://a/0', text: 'content of test://a/0 from a' }]);
    const secret = await rpc(gw, 'alice', 'tools/call', { name: 'a.touch', arguments: {} });
    expect(secret.result?.content).toEqual([{ type: 'text', text: 'touched 0' }]);
    const after = await rpc(gw, 'alice', 'resources/read', { uri: 'test://a/0' });
    expect(after.error?.data).toMatchObject({
      error_code: 'POLICY_DENY',
      policy_ids: ['no-reads-after-secret'],
    });
    // Another agent's session ran nothing secret: its read is allowed.
    const other = await rpc(gw, 'bob', 'resources/read', { uri: 'test://a/0' });
    expect(other.result?.contents).toHaveLength(1);
    const reads = gw.chain
      .entries(
        gw.db
          .prepare<[], { chain_id: string }>(
            "SELECT chain_id FROM audit_entries WHERE entry_type = 'resource_read' AND agent_id = 'alice' LIMIT 1",
          )
          .get()?.chain_id ?? '',
      )
      .filter((e) => e.entry_type === 'resource_read');
    expect(reads.map((e) => [e.disposition, e.policy_decision, e.policy_rule_matched])).toEqual([
      ['completed', 'allow', expect.any(Array)],
      ['refused', 'deny', ['no-reads-after-secret']],
    ]);
  });
});
