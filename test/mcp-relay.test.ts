/**
 * Issue 10, the upstream side: every MCP method through the gateway (real SDK upstreams, the
 * SDK Client in front), the gateway's own cursor over merged lists, evidence for every
 * data-carrying request, upstream errors recorded as answered, client sessions kept apart
 * upstream, expired and restarted upstream sessions renewed.
 */

import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { verifyBundle } from '@cmcp/verify';
import { runVerify } from '@cmcp/verify/cli';
import { canonicalJson, GATEWAY_CHAIN_ID, jcsDigest, sha256Hex } from '@cmcp/verify/formats';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
  ResourceListChangedNotificationSchema,
  ResourceUpdatedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import type { ClientChannel, ClientMessage } from '../src/relay/channel.js';
import { CursorCodec, CursorError } from '../src/relay/cursor.js';
import { type RelayServer, startRelayServer } from './fixtures/relay-server.js';
import { everythingUpstream, REPO_ROOT, rest, startInProcess, writeConfig } from './harness/gateway.js';

const AUTH = { Authorization: 'Bearer alice-token' };

async function sdkClient(url: string): Promise<Client> {
  const client = new Client({ name: 'relay-test', version: '1.0.0' });
  await client.connect(
    new StreamableHTTPClientTransport(new URL(`${url}/mcp`), { requestInit: { headers: AUTH } }),
  );
  return client;
}

/** An in-test client channel: records notifications, answers server-to-client requests. */
function testChannel(
  clientSessionId: string | undefined,
  answer?: (m: ClientMessage) => Record<string, unknown>,
) {
  const notes: ClientMessage[] = [];
  const requests: ClientMessage[] = [];
  const abort = new AbortController();
  const channel: ClientChannel = {
    streaming: true,
    notify: (m) => {
      notes.push(m);
      return true;
    },
    request: async (m) => {
      requests.push(m);
      if (!answer) throw new Error('no answer');
      return answer(m);
    },
    signal: abort.signal,
    ...(clientSessionId === undefined ? {} : { clientSessionId }),
  };
  return { channel, notes, requests, abort };
}

/**
 * A client session opened as `initialize` opens one (an unknown id is an ended session), by a
 * client that declared it can be asked for sampling, elicitation and roots.
 */
function clientSession(gw: Gateway, agentId = 'alice'): string {
  return gw.clientSessions.open(agentId, '2025-11-25', undefined, {
    sampling: {},
    elicitation: {},
    roots: {},
  }).id;
}

let id = 1;

async function until(ok: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 20));
  }
}
async function rpc(
  gw: Gateway,
  channel: ClientChannel,
  method: string,
  params: Record<string, unknown>,
  agentId = 'alice',
) {
  const r = await gw.mcp.handle(
    { agentId, blocked: false },
    { jsonrpc: '2.0', id: id++, method, params },
    undefined,
    process.hrtime.bigint(),
    channel,
  );
  return r.body as {
    result?: Record<string, unknown>;
    error?: { code: number; message: string; data?: Record<string, unknown> };
  };
}

function entriesOfType(gw: Gateway, type: string) {
  const rows = gw.db
    .prepare<[string], { chain_id: string }>(
      'SELECT DISTINCT chain_id FROM audit_entries WHERE entry_type = ?',
    )
    .all(type);
  return rows.flatMap((r) => gw.chain.entries(r.chain_id).filter((e) => e.entry_type === type));
}

describe('three federated upstreams', () => {
  let ups: RelayServer[];
  let gw: Gateway;
  let client: Client;

  beforeAll(async () => {
    ups = await Promise.all(
      ['a', 'b', 'c'].map((tag) =>
        startRelayServer({ tag, extraUris: tag === 'c' ? [] : ['test://shared/claimed'] }),
      ),
    );
    const cfg = await writeConfig({
      upstreams: ups.map((u, i) => ({ name: ['a', 'b', 'c'][i], transport: 'http', url: u.url })),
      extra: { limits: { list_page_size: 4 } },
    });
    gw = await startInProcess(cfg);
    client = await sdkClient(gw.url);
  });
  afterAll(async () => {
    await client?.close();
    await gw?.close();
    await Promise.all(ups.map((u) => u.close()));
  });

  it('advertises what the upstreams offer', () => {
    const caps = client.getServerCapabilities();
    expect(caps).toMatchObject({
      tools: {},
      resources: { subscribe: true, listChanged: true },
      prompts: {},
      completions: {},
      logging: {},
    });
  });

  it('lists every page of every upstream through the gateway cursor, in a stable order', async () => {
    const collect = async <T>(
      list: (cursor?: string) => Promise<{ nextCursor?: string } & T>,
      key: keyof T,
    ) => {
      const out: unknown[] = [];
      let cursor: string | undefined;
      let pages = 0;
      do {
        const r = await list(cursor);
        out.push(...(r[key] as unknown[]));
        cursor = r.nextCursor;
        pages++;
      } while (cursor);
      return { out, pages };
    };
    const tools = await collect((cursor) => client.listTools(cursor ? { cursor } : {}), 'tools');
    expect(tools.out).toHaveLength(3 * 13); // 6 numbered + 7 special tools, each upstream 7 pages
    expect(tools.pages).toBe(10);
    expect((tools.out as { name: string }[]).slice(0, 2).map((t) => t.name)).toEqual([
      'a.a-tool-0',
      'a.a-tool-1',
    ]);
    const prompts = await collect((cursor) => client.listPrompts(cursor ? { cursor } : {}), 'prompts');
    expect((prompts.out as { name: string }[]).map((p) => p.name)).toEqual(
      ['a', 'b', 'c'].flatMap((t) => [0, 1, 2, 3, 4, 5].map((i) => `${t}.${t}-prompt-${i}`)),
    );
    const resources = await collect((cursor) => client.listResources(cursor ? { cursor } : {}), 'resources');
    const uris = (resources.out as { uri: string }[]).map((r) => r.uri);
    expect(uris).toEqual(['a', 'b', 'c'].flatMap((t) => [0, 1, 2, 3, 4, 5].map((i) => `test://${t}/${i}`)));
    // The URI two upstreams list is refused at list time, never routed by guess.
    expect(uris).not.toContain('test://shared/claimed');
    const templates = await client.listResourceTemplates();
    expect(templates.resourceTemplates.map((t) => t.name)).toEqual([
      'a.a-template',
      'b.b-template',
      'c.c-template',
    ]);
    await expect(client.readResource({ uri: 'test://shared/claimed' })).rejects.toThrow(/several upstreams/);
  });

  it('refuses a tampered, foreign or misapplied cursor with -32602', async () => {
    const first = await client.listTools();
    const cursor = first.nextCursor as string;
    const [body, mac] = cursor.split('.') as [string, string];
    const tampered = `${Buffer.from(Buffer.from(body, 'base64url').toString().replace('"o":4', '"o":8')).toString('base64url')}.${mac}`;
    const foreign = new CursorCodec().issue('tools/list', 4);
    for (const bad of [tampered, foreign, 'garbage', `${cursor}x`]) {
      const e = await client.listTools({ cursor: bad }).catch((x) => x);
      expect(e.code, bad).toBe(-32602);
    }
    const e = await client.listPrompts({ cursor }).catch((x) => x);
    expect(e.code).toBe(-32602);
    expect(String(e.message)).toMatch(/issued for tools\/list/);
  });

  it('reads, gets and completes through the gateway, each with one terminal entry of its own type', async () => {
    const read = await client.readResource({ uri: 'test://b/3' });
    expect(read.contents[0]).toMatchObject({ uri: 'test://b/3', text: 'content of test://b/3 from b' });
    const viaTemplate = await client.readResource({ uri: 'test://c/99' });
    expect(viaTemplate.contents[0]).toMatchObject({ text: 'content of test://c/99 from c' });
    const prompt = await client.getPrompt({ name: 'c.c-prompt-2', arguments: { who: 'ann' } });
    expect(prompt.messages[0]?.content).toEqual({ type: 'text', text: 'c-prompt-2 for ann' });
    const done = await client.complete({
      ref: { type: 'ref/prompt', name: 'a.a-prompt-0' },
      argument: { name: 'who', value: 'an' },
    });
    expect(done.completion.values).toEqual(['an-a']);
    const reads = entriesOfType(gw, 'resource_read');
    const byTarget = new Map(reads.map((e) => [(e.detail as { target: string }).target, e]));
    const e = byTarget.get('test://b/3');
    expect(e).toMatchObject({ server_identity: 'b', disposition: 'completed', policy_decision: 'allow' });
    expect(e?.request_payload_hash).toBe(jcsDigest({ uri: 'test://b/3' }));
    const { _meta: _m, ...plain } = read as Record<string, unknown>;
    expect(e?.response_payload_hash).toBe(jcsDigest(plain));
    expect(byTarget.get('test://c/99')?.server_identity).toBe('c');
    expect(entriesOfType(gw, 'prompt_get')[0]).toMatchObject({
      server_identity: 'c',
      disposition: 'completed',
    });
    expect(entriesOfType(gw, 'completion')[0]).toMatchObject({
      server_identity: 'a',
      disposition: 'completed',
    });
    // Digests, never content.
    const canon = gw.db.prepare<[], { canonical: string }>('SELECT canonical FROM audit_entries').all();
    expect(canon.some((r) => r.canonical.includes('content of test://b/3'))).toBe(false);
    expect(canon.some((r) => r.canonical.includes('for ann'))).toBe(false);
    // The refused read of the claimed URI is in evidence too.
    expect(byTarget.get('test://shared/claimed')).toMatchObject({
      disposition: 'refused',
      error_code: 'RESOURCE_NOT_ROUTED',
    });
  });

  it('relays an upstream JSON-RPC error of any code and records the call completed', async () => {
    for (const code of [-32000, -32001, -32603]) {
      const e = await client.callTool({ name: 'a.fail', arguments: { code } }).catch((x) => x);
      expect(e.code).toBe(code);
      expect(String(e.message)).toContain(`failing with ${code}`);
    }
    const calls = gw.chain
      .entries(entriesOfType(gw, 'resource_read')[0]?.chain_id as string)
      .filter((x) => x.entry_type === 'tool_call' && x.tool_name === 'a.fail');
    expect(
      calls.map((c) => [
        c.disposition,
        c.error_code,
        (c.detail as { upstream_error_code: number }).upstream_error_code,
      ]),
    ).toEqual([
      ['completed', 'UPSTREAM_RPC_ERROR', -32000],
      ['completed', 'UPSTREAM_RPC_ERROR', -32001],
      ['completed', 'UPSTREAM_RPC_ERROR', -32603],
    ]);
  });

  it('passes upstream progress to the client under its own token', async () => {
    const t = testChannel(undefined);
    const r = await rpc(gw, t.channel, 'tools/call', {
      name: 'b.progress',
      arguments: {},
      _meta: { progressToken: 'tok-7' },
    });
    expect(r.result?.content).toEqual([{ type: 'text', text: 'progressed' }]);
    expect(t.notes.map((n) => [n.method, n.params?.progressToken, n.params?.progress])).toEqual([
      ['notifications/progress', 'tok-7', 1],
      ['notifications/progress', 'tok-7', 2],
      ['notifications/progress', 'tok-7', 3],
    ]);
  });

  it('passes every upstream progress notification to an SDK client over HTTP', async () => {
    const seen: number[] = [];
    const r = await client.callTool({ name: 'b.progress', arguments: {} }, undefined, {
      onprogress: (p) => seen.push(p.progress),
    });
    expect(r.content).toEqual([{ type: 'text', text: 'progressed' }]);
    expect(seen).toEqual([1, 2, 3]);
  });

  it('keeps two client sessions apart upstream: log levels, subscriptions, log messages', async () => {
    const one = testChannel(clientSession(gw));
    const two = testChannel(clientSession(gw));
    const before = new Set(ups[0]?.sessions.keys());
    await Promise.all([
      rpc(gw, one.channel, 'logging/setLevel', { level: 'debug' }),
      rpc(gw, two.channel, 'logging/setLevel', { level: 'error' }),
    ]);
    // A level that is not a syslog severity is refused at the gateway with its code, not forwarded.
    for (const params of [{ level: 'bogus' }, {}]) {
      const bad = await rpc(gw, one.channel, 'logging/setLevel', params);
      expect(bad.error?.code).toBe(-32602);
      expect((bad.error?.data as { error_code?: string })?.error_code).toBe('INVALID_PARAMS');
    }
    await rpc(gw, one.channel, 'resources/subscribe', { uri: 'test://a/1' });
    await rpc(gw, two.channel, 'resources/subscribe', { uri: 'test://a/2' });
    const fresh = [...(ups[0]?.sessions.entries() ?? [])].filter(([k]) => !before.has(k)).map(([, s]) => s);
    expect(fresh.map((s) => [s.level, [...s.subscriptions]]).sort()).toEqual([
      ['debug', ['test://a/1']],
      ['error', ['test://a/2']],
    ]);
    const [l1, l2] = await Promise.all([
      rpc(gw, one.channel, 'tools/call', { name: 'a.log', arguments: {} }),
      rpc(gw, two.channel, 'tools/call', { name: 'a.log', arguments: {} }),
    ]);
    expect(l1.result?.content).toEqual([{ type: 'text', text: 'logged at debug' }]);
    expect(l2.result?.content).toEqual([{ type: 'text', text: 'logged at error' }]);
    expect(one.notes.map((n) => n.params?.data)).toEqual(['level is debug']);
    expect(two.notes.map((n) => n.params?.data)).toEqual(['level is error']);
    expect(entriesOfType(gw, 'resource_subscribe').length).toBeGreaterThanOrEqual(2);
  });

  it("delivers resources/updated on each SDK client's own standalone stream, never another's", async () => {
    const other = await sdkClient(gw.url);
    const got: Record<string, string[]> = { mine: [], other: [] };
    client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      got.mine?.push(n.params.uri);
    });
    other.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => {
      got.other?.push(n.params.uri);
    });
    await client.subscribeResource({ uri: 'test://c/4' });
    await other.subscribeResource({ uri: 'test://c/5' });
    await client.callTool({ name: 'c.touch', arguments: {} });
    await until(() => (got.mine?.length ?? 0) > 0);
    await other.callTool({ name: 'c.touch', arguments: {} });
    await until(() => (got.other?.length ?? 0) > 0);
    expect(got).toEqual({ mine: ['test://c/4'], other: ['test://c/5'] });
    await other.close();
  });

  it('passes a list change on the shared connection to the standalone stream of every client session using it', async () => {
    const plain = [await sdkClient(gw.url), await sdkClient(gw.url)];
    const got = [0, 0];
    for (const [i, c] of plain.entries())
      c.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
        got[i] = (got[i] ?? 0) + 1;
      });
    let own = 0;
    // `client` subscribed to a resource of c above: it has a connection of its own there.
    client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
      own++;
    });
    // Touched again until both standalone streams (opened by the SDK after connecting) heard it.
    const end = Date.now() + 10_000;
    while (!got.every((n) => n > 0) && Date.now() < end) {
      await plain[0]?.callTool({ name: 'c.touch', arguments: { listChanged: true } });
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(got.every((n) => n > 0)).toBe(true);
    expect(own).toBe(0);
    await Promise.all(plain.map((c) => c.close()));
  });

  it('relays sampling, elicitation and roots to the client of the request, with evidence', async () => {
    const t = testChannel(clientSession(gw), (m) =>
      m.method === 'sampling/createMessage'
        ? { role: 'assistant', content: { type: 'text', text: 'hello' }, model: 'm' }
        : m.method === 'roots/list'
          ? { roots: [{ uri: 'file:///w' }] }
          : { action: 'decline' },
    );
    const s = await rpc(gw, t.channel, 'tools/call', { name: 'b.sample', arguments: {} });
    expect(s.result?.content).toEqual([{ type: 'text', text: 'sampled: {"type":"text","text":"hello"}' }]);
    const r = await rpc(gw, t.channel, 'tools/call', { name: 'b.roots', arguments: {} });
    expect(r.result?.content).toEqual([{ type: 'text', text: 'roots: file:///w' }]);
    const el = await rpc(gw, t.channel, 'tools/call', { name: 'b.elicit', arguments: {} });
    expect(el.result?.content).toEqual([{ type: 'text', text: 'elicited: decline' }]);
    expect(t.requests.map((m) => m.method)).toEqual([
      'sampling/createMessage',
      'roots/list',
      'elicitation/create',
    ]);
    for (const type of ['sampling_relay', 'roots_relay', 'elicitation_relay'])
      expect(entriesOfType(gw, type)[0], type).toMatchObject({
        server_identity: 'b',
        disposition: 'completed',
        policy_decision: 'allow',
        agent_id: 'alice',
      });
    // Without a client session no upstream is offered sampling: nothing is delivered by guess.
    const none = testChannel(undefined, () => ({}));
    const n = await rpc(gw, none.channel, 'tools/call', { name: 'b.sample', arguments: {} });
    expect(n.error).toBeDefined();
    expect(none.requests).toHaveLength(0);
  });

  it('renews an upstream session the upstream expired (404) once, and records it', async () => {
    const before = ups[1]?.initializations ?? 0;
    await ups[1]?.expireSessions();
    const r = await client.callTool({ name: 'b.b-tool-1', arguments: {} });
    expect(r.content).toEqual([{ type: 'text', text: 'called b-tool-1' }]);
    expect(ups[1]?.initializations).toBe(before + 1);
    const renewed = gw.chain
      .entries(GATEWAY_CHAIN_ID)
      .filter((e) => e.entry_type === 'upstream_session_renewed');
    expect(renewed.at(-1)).toMatchObject({ server_identity: 'b' });
  });

  it('reconnects an upstream that restarted', async () => {
    await ups[2]?.restart();
    const r = await client.readResource({ uri: 'test://c/1' });
    expect(r.contents[0]).toMatchObject({ text: 'content of test://c/1 from c' });
    const t = await client.callTool({ name: 'c.c-tool-0', arguments: {} });
    expect(t.content).toEqual([{ type: 'text', text: 'called c-tool-0' }]);
  });
});

describe('every relayed entry type through cmcp verify', () => {
  let up: RelayServer;
  let gw: Gateway;
  let dir: string;

  beforeAll(async () => {
    up = await startRelayServer({ tag: 'v' });
    const cfg = await writeConfig({ upstreams: [{ name: 'v', transport: 'http', url: up.url }] });
    dir = cfg.dir;
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });

  it('verifies a claim whose chain holds every new entry type, counts them, and rejects a tampered one', async () => {
    const answer = (m: ClientMessage) =>
      m.method === 'sampling/createMessage'
        ? { role: 'assistant', content: { type: 'text', text: 'x' }, model: 'm' }
        : m.method === 'roots/list'
          ? { roots: [] }
          : { action: 'cancel' };
    const t = testChannel(clientSession(gw), answer);
    const sid = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const inSession = { _cmcp: { session_id: sid } };
    await rpc(gw, t.channel, 'resources/read', { uri: 'test://v/0', ...inSession });
    await rpc(gw, t.channel, 'resources/read', { uri: 'test://nowhere/0', ...inSession });
    await rpc(gw, t.channel, 'resources/subscribe', { uri: 'test://v/0', ...inSession });
    await rpc(gw, t.channel, 'resources/unsubscribe', { uri: 'test://v/0', ...inSession });
    await rpc(gw, t.channel, 'prompts/get', { name: 'v.v-prompt-0', ...inSession });
    await rpc(gw, t.channel, 'completion/complete', {
      ref: { type: 'ref/resource', uri: 'test://v/{id}' },
      argument: { name: 'id', value: '1' },
      ...inSession,
    });
    for (const name of ['v.sample', 'v.elicit', 'v.roots'])
      await rpc(gw, t.channel, 'tools/call', { name, arguments: {}, _cmcp: { session_id: sid } });
    const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body;
    const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body;
    const verify = async (b: unknown, json: boolean) => {
      const cp = join(dir, `claim-${id++}.json`);
      writeFileSync(cp, JSON.stringify(claim));
      writeFileSync(`${cp}.audit`, JSON.stringify(b));
      let out = '';
      const code = await runVerify(
        cp,
        { audit: `${cp}.audit`, json, require: 'signed-only' },
        { stdout: (x) => (out += x), stderr: (x) => (out += x) },
        'cmcp verify',
      );
      return { code, out };
    };
    const good = await verify(bundle, false);
    expect(good.out).toMatch(/PASS\s+audit\.entry_types/);
    expect(good.code).toBe(0);
    const counts = good.out.split('\n').find((l) => l.startsWith('Audit entries by type:'));
    expect(counts).toContain('resource_read 2');
    for (const type of [
      'resource_subscribe 1',
      'resource_unsubscribe 1',
      'prompt_get 1',
      'completion 1',
      'sampling_relay 1',
      'elicitation_relay 1',
      'roots_relay 1',
      'tool_call 3',
    ])
      expect(counts).toContain(type);
    // Content tampering of a relayed entry: its hash no longer matches.
    const tampered = structuredClone(bundle);
    const i = tampered.entries.findIndex((e: { canonical: string }) =>
      e.canonical.includes('"resource_read"'),
    );
    tampered.entries[i].canonical = tampered.entries[i].canonical.replace('"completed"', '"refused"');
    const bad = await verify(tampered, true);
    expect(bad.code).toBe(1);
    expect(
      JSON.parse(bad.out).checks.find((c: { id: string }) => c.id === 'audit.entry_hashes').reason_code,
    ).toBe('ENTRY_HASH_MISMATCH');
    // A relayed entry built without its required members fails the entry-type check even when re-hashed.
    const body = JSON.parse(bundle.entries[i].canonical);
    const forged = { ...body, request_payload_hash: null };
    const canonical = canonicalJson(forged);
    const alone = verifyBundle({
      ...bundle,
      entries: [...bundle.entries.slice(0, i), { canonical, entry_hash: sha256Hex(canonical) }],
    });
    expect(alone.checks.find((c) => c.id === 'audit.entry_types')?.reason_code).toBe('ENTRY_TYPE_INVALID');
  });
});

describe('relayed requests under the example policy (examples/policy)', () => {
  let up: RelayServer;
  let gw: Gateway;

  beforeAll(async () => {
    up = await startRelayServer({ tag: 'a', extraUris: ['test://a-secret/plan'] });
    const cfg = await writeConfig({
      upstreams: [{ name: 'a', transport: 'http', url: up.url }],
      agents: [
        { agent_id: 'alice', token: 'alice-token' },
        { agent_id: 'sam', token: 'sam-token', attributes: { roles: ['sampler'] } },
      ],
      extra: { policy: { bundle: join(REPO_ROOT, 'examples', 'policy'), enforcement_mode: 'enforcing' } },
    });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });

  it('denies a secret resource read and records it; allows the others', async () => {
    const t = testChannel(undefined);
    const denied = await rpc(gw, t.channel, 'resources/read', { uri: 'test://a-secret/plan' });
    expect(denied.error?.data).toMatchObject({
      error_code: 'POLICY_DENY',
      policy_ids: ['no-secret-resources'],
    });
    const ok = await rpc(gw, t.channel, 'resources/read', { uri: 'test://a/0' });
    expect(ok.result?.contents).toEqual([{ uri: 'test://a/0', text: 'content of test://a/0 from a' }]);
    const reads = entriesOfType(gw, 'resource_read');
    expect(reads.map((e) => [e.disposition, e.policy_decision, e.error_code])).toEqual([
      ['refused', 'deny', 'POLICY_DENY'],
      ['completed', 'allow', null],
    ]);
    expect(reads[0]?.policy_rule_matched).toEqual(['no-secret-resources']);
  });

  it('denies a sampling request for an agent without the sampler role: the upstream gets an error, the relay is recorded', async () => {
    const answer = () => ({ role: 'assistant', content: { type: 'text', text: 'hello' }, model: 'm' });
    const alice = testChannel(clientSession(gw), answer);
    const r = await rpc(gw, alice.channel, 'tools/call', { name: 'a.sample', arguments: {} });
    // The upstream's tool failed on the refused sampling request; its error is relayed.
    expect(r.error?.data?.error_code).toBe('UPSTREAM_RPC_ERROR');
    expect(String(r.error?.message)).toMatch(/denied by policy/);
    expect(alice.requests).toHaveLength(0);
    const sam = testChannel(clientSession(gw, 'sam'), answer);
    const s = await rpc(gw, sam.channel, 'tools/call', { name: 'a.sample', arguments: {} }, 'sam');
    expect(s.result?.content).toEqual([{ type: 'text', text: 'sampled: {"type":"text","text":"hello"}' }]);
    const relays = entriesOfType(gw, 'sampling_relay').sort((x, y) =>
      (x.agent_id ?? '').localeCompare(y.agent_id ?? ''),
    );
    expect(relays.map((e) => [e.agent_id, e.disposition, e.policy_decision, e.error_code])).toEqual([
      ['alice', 'refused', 'deny', 'POLICY_DENY'],
      ['sam', 'completed', 'allow', null],
    ]);
    expect(relays[1]?.policy_rule_matched).toEqual(['sampling-for-samplers']);
  });
});

describe('an upstream with more than 100 pages', () => {
  it('loses nothing: every page of its tools is listed through the gateway', async () => {
    const up = await startRelayServer({ tag: 'big', items: 230, pageSize: 2 });
    const gw = await startInProcess(
      await writeConfig({ upstreams: [{ name: 'big', transport: 'http', url: up.url }] }),
    );
    try {
      const t = testChannel(undefined);
      const names: string[] = [];
      let cursor: unknown;
      do {
        const r = await rpc(gw, t.channel, 'tools/list', cursor === undefined ? {} : { cursor });
        names.push(...((r.result?.tools ?? []) as { name: string }[]).map((x) => x.name));
        cursor = r.result?.nextCursor;
      } while (cursor !== undefined);
      // 230 numbered tools + 7 special ones = 119 upstream pages.
      expect(names).toHaveLength(237);
      expect(names.at(229)).toBe('big.big-tool-229');
      expect(new Set(names).size).toBe(237);
    } finally {
      await gw.close();
      await up.close();
    }
  });
});

describe('progress from a stdio upstream', () => {
  it('relays every notification under the client token', async () => {
    const gw = await startInProcess(await writeConfig({ upstreams: [everythingUpstream()] }));
    try {
      const t = testChannel(undefined);
      const r = await rpc(gw, t.channel, 'tools/call', {
        name: 'everything.trigger-long-running-operation',
        arguments: { duration: 0, steps: 5 },
        _meta: { progressToken: 42 },
      });
      expect(r.result?.content).toBeDefined();
      expect(t.notes.map((n) => [n.params?.progressToken, n.params?.progress])).toEqual(
        [1, 2, 3, 4, 5].map((i) => [42, i]),
      );
    } finally {
      await gw.close();
    }
  });
});

describe('the cursor', () => {
  it('expires, and names its method', () => {
    let now = 1_000_000;
    const codec = new CursorCodec(Buffer.alloc(32, 1), () => now, 60_000);
    const c = codec.issue('prompts/list', 10);
    expect(codec.offset('prompts/list', c)).toBe(10);
    expect(() => codec.offset('tools/list', c)).toThrow(CursorError);
    now += 60_001;
    expect(() => codec.offset('prompts/list', c)).toThrow(/expired/);
    expect(() => new CursorCodec(Buffer.alloc(32, 2), () => now).offset('prompts/list', c)).toThrow(
      /not issued/,
    );
  });
});
