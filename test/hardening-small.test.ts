/**
 * Small things found in the hardening pass (issue 11 item 10), each against a real gateway:
 * `cmcp executions` strips terminal escapes from recorded tool names; a tool name holding a
 * control character is neither listed nor routed, and a catalog pinning one does not load; a cross-agent probe
 * of another agent's session claim or audit, or of its client session (`Mcp-Session-Id`), is recorded; a refusal whose method name holds a
 * lone surrogate is still recorded; unauthenticated refusals counted in the open window are
 * written at shutdown (SIGTERM); `npm run build` leaves the built command entry points executable.
 */
import { execFile } from 'node:child_process';
import { chmodSync, statSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import {
  cleanup,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startChild,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const run = promisify(execFile);
const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
/** A tool name as a hostile upstream could choose it: colour, window title (OSC), C1 CSI, bell, newline. */
const EVIL = 'paint\u001b[31mRED\u001b]0;owned\u0007\u009b2J\nfake-row';
/** A tool name holding U+0000. */
const NUL = 'nul\u0000tool';
/**
 * Names that read as other names to a person: a right-to-left override (displayed as
 * "reporttxt.exe"), a zero-width space, a BOM, a bidi isolate and a line separator.
 */
const SPOOF: readonly (readonly [string, string])[] = [
  ['report\u202Eexe.txt', 'U+202E'],
  ['de\u200Blete', 'U+200B'],
  ['\uFEFFpaint', 'U+FEFF'],
  ['x\u2066y\u2069', 'U+2066'],
  ['two\u2028lines', 'U+2028'],
];
const OP = 'op-token-small';

let upstream: Server;
let upstreamUrl: string;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  upstream = createServer(async (req, res) => {
    const s = new McpServer({ name: 'hostile', version: '1.0.0' });
    for (const name of ['paint', EVIL, NUL, ...SPOOF.map(([n]) => n)])
      s.registerTool(name, { description: 'a tool' }, async () => ({
        content: [{ type: 'text', text: 'done' }],
      }));
    const t = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      void t.close();
      void s.close();
    });
    await s.connect(t);
    await t.handleRequest(req, res);
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  upstreamUrl = `http://127.0.0.1:${(upstream.address() as { port: number }).port}/mcp`;
  cfg = await writeConfig({
    upstreams: [{ name: 'h', transport: 'http', url: upstreamUrl }],
    // One prober per refusal: the aggregated record keeps the detail of the first refusal of each
    // (code, agent) in a 10-second window and counts the rest (docs/spec/audit-entries.md).
    agents: ['alice', 'bob', 'carol'].map((a) => ({ agent_id: a, token: `${a}-token` })),
    operators: [{ operator_id: 'root', token: OP }],
  });
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await new Promise((r) => upstream?.close(r));
  if (cfg) cleanup(cfg.dir);
});

const refusals = (g: Gateway) => g.chain.entries('gateway').filter((e) => e.entry_type === 'request_refused');

describe('cmcp executions', () => {
  it('strips terminal escape sequences and control characters from upstream-chosen names', async () => {
    // The gateway no longer serves such a name (below); a database written before that may hold
    // one, so the execution's tool name is set to it here, as such a gateway recorded it.
    const r = await rpc(gw.url, 'alice-token', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'h.paint', arguments: {}, _cmcp: { execution_id: 'exec-evil-1' } },
    });
    expect(r.body.result.content[0].text).toBe('done');
    const db = new Database(cfg.dbPath);
    db.prepare(`UPDATE executions SET tool_name = ? WHERE execution_id = 'exec-evil-1'`).run(`h.${EVIL}`);
    db.close();
    const list = await run(process.execPath, [CLI, 'executions', 'list', '--db', cfg.dbPath]);
    const show = await run(process.execPath, [
      CLI,
      'executions',
      'show',
      '--db',
      cfg.dbPath,
      '--agent',
      'alice',
      'exec-evil-1',
    ]);
    for (const out of [list.stdout, show.stdout]) {
      expect(out).toContain('h.paintRED');
      // biome-ignore lint/suspicious/noControlCharactersInRegex: asserting their absence
      expect(out).not.toMatch(/[\u001b\u0007\u009b]/);
      expect(out).not.toMatch(/^fake-row/m); // the newline did not start a row of its own
    }
    expect(list.stdout.split('\n').filter((l) => l.includes('exec-evil-1'))).toHaveLength(1);
    // JSON output keeps the exact name (JSON escapes it).
    const json = await run(process.execPath, [CLI, 'executions', 'list', '--db', cfg.dbPath, '--json']);
    expect(
      JSON.parse(json.stdout).find((x: { execution_id: string }) => x.execution_id === 'exec-evil-1')
        .tool_name,
    ).toBe(`h.${EVIL}`);
  });
});

describe('tool names the gateway cannot serve', () => {
  it('an upstream tool whose name holds a control character or U+0000 is not listed nor callable, and warned once', async () => {
    const lines: string[] = [];
    const { loadConfig } = await import('../src/config/index.js');
    const { startGateway } = await import('../src/gateway/lifecycle/start.js');
    const pino = (await import('pino')).default;
    const c = await writeConfig({ upstreams: [{ name: 'h', transport: 'http', url: upstreamUrl }] });
    const g = await startGateway(
      loadConfig(c.file),
      pino({ level: 'warn' }, { write: (l: string) => void lines.push(l) }),
    );
    try {
      const listed = await rpc(g.url, 'alice-token', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      expect(listed.body.result.tools.map((t: { name: string }) => t.name)).toEqual(['h.paint']);
      for (const name of [EVIL, NUL, ...SPOOF.map(([n]) => n)]) {
        const r = await rpc(g.url, 'alice-token', {
          jsonrpc: '2.0',
          id: 2,
          method: 'tools/call',
          params: { name: `h.${name}`, arguments: {} },
        });
        expect(r.body.result).toBeUndefined();
        expect(r.body.error.data.error_code).not.toBe('INTERNAL_ERROR');
      }
      for (let i = 0; i < 3; i++) await g.upstreams.refreshAll();
      const warned = lines
        .map((l) => JSON.parse(l))
        .filter((l) => l.msg === 'upstream tool not exposed')
        .map((l) => [l.tool, l.reason]);
      expect(warned).toEqual([
        [EVIL, 'its name holds the control character U+001B'],
        [NUL, 'its name holds the control character U+0000'],
        ...SPOOF.map(([n, cp]) => [n, `its name holds the invisible or direction-changing character ${cp}`]),
      ]);
    } finally {
      await g.close();
      cleanup(c.dir);
    }
  }, 60_000);

  it('a pinned catalog naming such a tool fails to load: CATALOG_INVALID naming the code point', async () => {
    const { definitionHash, loadCatalogFile } = await import('../src/catalog/catalog.js');
    const { loadConfig } = await import('../src/config/index.js');
    const { startGateway } = await import('../src/gateway/lifecycle/start.js');
    for (const [name, cp] of [
      [EVIL, 'U+001B'],
      [NUL, 'U+0000'],
      ['bell\u0007', 'U+0007'],
      ['c1\u0085', 'U+0085'],
      ...SPOOF,
    ]) {
      const definition = { name, description: 'a tool', inputSchema: { type: 'object' } };
      const c = await writeConfig({ upstreams: [{ name: 'h', transport: 'http', url: upstreamUrl }] });
      const file = join(c.dir, 'catalog.json');
      const { writeFileSync } = await import('node:fs');
      writeFileSync(
        file,
        JSON.stringify({
          catalog_version: 1,
          tools: [
            { server: 'h', name, sensitivity: 'internal', sha256: definitionHash(definition), definition },
          ],
        }),
      );
      let thrown: unknown;
      try {
        loadCatalogFile(file);
      } catch (e) {
        thrown = e;
      }
      expect(thrown).toMatchObject({ code: 'CATALOG_INVALID' });
      expect((thrown as Error).message).toMatch(
        /its name holds the (control|invisible or direction-changing) character U\+[0-9A-F]{4}/,
      );
      expect((thrown as Error).message).toContain(` character ${cp}`);
      const withCatalog = await writeConfig({
        upstreams: [{ name: 'h', transport: 'http', url: upstreamUrl }],
        extra: { catalog: { file } },
      });
      await expect(startGateway(loadConfig(withCatalog.file))).rejects.toMatchObject({
        code: 'CATALOG_INVALID',
      });
      cleanup(c.dir);
      cleanup(withCatalog.dir);
    }
  }, 60_000);
});

describe('refusals on the record', () => {
  it('a probe of another agent’s session claim or audit is recorded (the answer stays UNKNOWN_SESSION)', async () => {
    const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
    await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`, {});
    const before = refusals(gw).length;
    for (const [path, prober] of [
      ['claim', 'bob'],
      ['audit', 'carol'],
    ] as const) {
      const probe = await rest(gw.url, `${prober}-token`, 'GET', `/sessions/${s.body.session_id}/${path}`);
      expect(probe.status).toBe(404);
      expect(probe.body.error.error_code).toBe('UNKNOWN_SESSION');
      const missing = await rest(gw.url, `${prober}-token`, 'GET', `/sessions/no-such-session/${path}`);
      expect(missing.body).toEqual(probe.body); // nothing tells the prober the session exists
    }
    const added = refusals(gw).slice(before);
    expect(added.map((e) => [e.agent_id, e.error_code, e.detail?.route, e.detail?.cross_agent])).toEqual([
      ['bob', 'UNKNOWN_SESSION', '/sessions/:id/claim', true],
      ['carol', 'UNKNOWN_SESSION', '/sessions/:id/audit', true],
    ]);
    expect(added.every((e) => e.detail?.session_id === s.body.session_id)).toBe(true);
  });

  it('another agent’s use of a client session id (Mcp-Session-Id) is recorded under its hash, not the id', async () => {
    const { createHash } = await import('node:crypto');
    const init = await rpc(
      gw.url,
      'alice-token',
      {
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } },
      },
      { accept: 'application/json' },
    );
    const sid = init.headers.get('mcp-session-id') as string;
    expect(sid).toBeTruthy();
    const before = refusals(gw).length;
    const list = { jsonrpc: '2.0', id: 2, method: 'tools/list' };
    const probe = await rpc(gw.url, 'bob-token', list, { 'mcp-session-id': sid });
    expect(probe.status).toBe(404);
    expect(probe.body.error.data.error_code).toBe('UNKNOWN_CLIENT_SESSION');
    const unknown = await rpc(gw.url, 'bob-token', list, { 'mcp-session-id': 'no-such-client-session' });
    expect(unknown.body).toEqual(probe.body); // nothing tells the prober the session exists
    const del = await fetch(`${gw.url}/mcp`, {
      method: 'DELETE',
      headers: { authorization: 'Bearer carol-token', 'mcp-session-id': sid },
    });
    expect(del.status).toBe(404);
    const added = refusals(gw).slice(before);
    const hash = `sha256:${createHash('sha256').update(sid).digest('hex')}`;
    expect(added.map((e) => [e.agent_id, e.error_code, e.detail?.route, e.detail?.cross_agent])).toEqual([
      ['bob', 'UNKNOWN_CLIENT_SESSION', 'POST /mcp', true],
      ['carol', 'UNKNOWN_CLIENT_SESSION', 'DELETE /mcp', true],
    ]);
    expect(added.every((e) => e.detail?.client_session_id_sha256 === hash)).toBe(true);
    expect(JSON.stringify(added)).not.toContain(sid);
    // The probes neither ended nor took over the owner's session.
    const own = await rpc(gw.url, 'alice-token', list, { 'mcp-session-id': sid, accept: 'application/json' });
    expect(own.status).toBe(200);
    expect(own.body.result.tools.map((t: { name: string }) => t.name)).toContain('h.paint');
  });

  it('a refusal whose method name holds a lone surrogate (or is clipped inside a pair) is still recorded', async () => {
    for (const a of ['bob', 'carol'])
      expect((await rest(gw.url, OP, 'POST', `/operator/agents/${a}/block`, { reason: 'test' })).status).toBe(
        200,
      );
    try {
      const before = refusals(gw).length;
      const lone = '{"jsonrpc":"2.0","id":3,"method":"tools/\\ud800list"}';
      const clipped = JSON.stringify({ jsonrpc: '2.0', id: 4, method: `${'m'.repeat(63)}😀` });
      for (const [body, agent] of [
        [lone, 'bob'],
        [clipped, 'carol'],
      ]) {
        const r = await rpc(gw.url, `${agent}-token`, body as string);
        expect(r.body.error.data.error_code).toBe('AGENT_BLOCKED');
      }
      const added = refusals(gw).slice(before);
      expect(added.map((e) => e.detail?.method)).toEqual([
        'tools/\uFFFDlist',
        `${'m'.repeat(63)}\uFFFD…(65 chars)`, // clipped at 64 UTF-16 units, inside the pair
      ]);
      expect(added.map((e) => [e.error_code, e.agent_id])).toEqual([
        ['AGENT_BLOCKED', 'bob'],
        ['AGENT_BLOCKED', 'carol'],
      ]);
    } finally {
      for (const a of ['bob', 'carol']) await rest(gw.url, OP, 'POST', `/operator/agents/${a}/unblock`, {});
    }
  });

  it('unauthenticated refusals counted in the open window are written when the gateway stops (SIGTERM)', async () => {
    const c = await writeConfig({ port: await freePort() });
    const child = await startChild(c);
    try {
      for (let i = 0; i < 4; i++)
        expect((await rpc(child.url, 'wrong-token', { jsonrpc: '2.0', id: i, method: 'ping' })).status).toBe(
          401,
        );
      expect(await child.stop('SIGTERM')).toBe(0);
      const db = new Database(c.dbPath, { readonly: true });
      const rows = db
        .prepare(
          `SELECT canonical FROM audit_entries WHERE entry_type = 'request_refused' AND chain_id = 'gateway'`,
        )
        .all() as { canonical: string }[];
      db.close();
      const counts = rows
        .map((r) => JSON.parse(r.canonical))
        .filter((e) => e.error_code === 'UNAUTHENTICATED')
        .map((e) => e.detail.count);
      expect(counts).toEqual([1, 3]); // the first at once, the other three at shutdown
    } finally {
      await child.stop('SIGKILL');
      cleanup(c.dir);
    }
  }, 60_000);
});

describe('the build', () => {
  it('npm run build leaves the built command entry points executable', async () => {
    const entries = ['dist/src/cli/main.js', 'packages/verify/dist/cli/main.js', 'bin/cmcp'].map((p) =>
      join(REPO_ROOT, p),
    );
    for (const f of entries) chmodSync(f, 0o644); // as tsc writes them
    const pkg = JSON.parse((await import('node:fs')).readFileSync(join(REPO_ROOT, 'package.json'), 'utf8'));
    // The build's last step, run as `npm run build` runs it (the tsc steps before it rewrite dist/).
    expect(pkg.scripts.build).toMatch(/&& node scripts\/mark-executables\.mjs$/);
    await run(process.execPath, [join(REPO_ROOT, 'scripts', 'mark-executables.mjs')]);
    for (const f of entries) expect(statSync(f).mode & 0o111, f).toBe(0o111);
  });
});
