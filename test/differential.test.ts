/**
 * The differential test (docs/testing.md): the official SDK client straight to an upstream and
 * the same client through cmcp see the same MCP server, on every protocol revision the
 * upstream speaks (2025-03-26, 2025-06-18, 2025-11-25) and as stateless 2026-07-28 requests.
 * Compared: every tool definition, prompt, resource and resource template (every page), and
 * the results of deterministic calls, reads and prompts. The only differences allowed are the
 * documented ones (docs/spec/mcp.md): tools, prompts and resource templates are named
 * `<prefix>.<name>`, evidenced results carry `_meta["dev.cmcp/evidence"]`, stateless results
 * `resultType`, and lists are paged by the gateway's cursor. Upstreams: server-everything and
 * server-filesystem over stdio (server-memory is not installed here).
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import {
  CreateMessageRequestSchema,
  ElicitRequestSchema,
  ListRootsRequestSchema,
} from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { everythingUpstream, filesystemUpstream, startInProcess, writeConfig } from './harness/gateway.js';

const VERSIONS = ['2025-03-26', '2025-06-18', '2025-11-25'] as const;
const CAPABILITIES = { sampling: {}, elicitation: { form: {} }, roots: {} };
const AUTH = { Authorization: 'Bearer alice-token' };

type Item = Record<string, unknown>;

/** An upstream under comparison: its config, how to start it directly, and what to call. */
interface Subject {
  name: string;
  upstream: Record<string, unknown>;
  /** Deterministic tool calls (upstream names). */
  calls: { name: string; arguments: Record<string, unknown> }[];
  roots: { uri: string; name: string }[];
}

/** Sends every `initialize` with `version` (the SDK client always asks for its newest). */
function asking<T extends Transport>(t: T, version: string): T {
  const send = t.send.bind(t);
  t.send = (m, o) =>
    send(
      'method' in m && m.method === 'initialize'
        ? { ...m, params: { ...m.params, protocolVersion: version } }
        : m,
      o,
    );
  return t;
}

function client(roots: Subject['roots'], capabilities: Record<string, unknown>): Client {
  const c = new Client({ name: 'differential', version: '1.0.0' }, { capabilities });
  if ('sampling' in capabilities)
    c.setRequestHandler(CreateMessageRequestSchema, async () => ({
      role: 'assistant',
      content: { type: 'text', text: 'sampled' },
      model: 'm',
    }));
  if ('elicitation' in capabilities)
    c.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'decline' }));
  if ('roots' in capabilities) c.setRequestHandler(ListRootsRequestSchema, async () => ({ roots }));
  return c;
}

/** Every page of a list. */
async function all(c: Client, method: string, key: string): Promise<Item[]> {
  const out: Item[] = [];
  let cursor: string | undefined;
  do {
    const r = (await c.request(
      { method, params: cursor ? { cursor } : {} } as never,
      (await import('zod')).z.looseObject({}),
    )) as Item;
    out.push(...((r[key] as Item[] | undefined) ?? []));
    cursor = r.nextCursor as string | undefined;
  } while (cursor);
  return out;
}

/** What one client sees of the server, with the documented differences taken out. */
async function view(c: Client, s: Subject, prefix: string | null): Promise<Record<string, unknown>> {
  const unprefix = (items: Item[]) =>
    items.map((it) => {
      const name = it.name as string;
      return prefix === null
        ? it
        : { ...it, name: name.startsWith(`${prefix}.`) ? name.slice(prefix.length + 1) : `!${name}` };
    });
  const caps = c.getServerCapabilities() ?? {};
  const tools = unprefix(await all(c, 'tools/list', 'tools'));
  const prompts = caps.prompts ? unprefix(await all(c, 'prompts/list', 'prompts')) : [];
  const resources = caps.resources ? await all(c, 'resources/list', 'resources') : [];
  const templates = caps.resources
    ? unprefix(await all(c, 'resources/templates/list', 'resourceTemplates'))
    : [];
  const strip = (r: Item) => {
    const { _meta, ...rest } = r;
    const meta = { ...((_meta as Item | undefined) ?? {}) };
    delete meta['dev.cmcp/evidence'];
    return Object.keys(meta).length ? { ...rest, _meta: meta } : rest;
  };
  const calls = [];
  for (const call of s.calls)
    calls.push(
      strip((await c.callTool({ ...call, name: prefix ? `${prefix}.${call.name}` : call.name })) as Item),
    );
  const firstResource = resources[0]?.uri as string | undefined;
  const read = firstResource ? strip((await c.readResource({ uri: firstResource })) as Item) : null;
  const simple = prompts.find((p) => !((p.arguments as Item[] | undefined) ?? []).some((a) => a.required));
  const prompt = simple
    ? strip(
        (await c.getPrompt({ name: prefix ? `${prefix}.${simple.name}` : (simple.name as string) })) as Item,
      )
    : null;
  return { tools, prompts, resources, templates, calls, read, prompt };
}

/** A stateless 2026-07-28 request to the gateway: its result without `resultType`. */
async function stateless(url: string, method: string, params: Item): Promise<Item> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { ...AUTH, 'content-type': 'application/json', accept: 'application/json' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method,
      params: {
        ...params,
        _meta: {
          'io.modelcontextprotocol/protocolVersion': '2026-07-28',
          'io.modelcontextprotocol/clientCapabilities': {},
        },
      },
    }),
  });
  const body = (await res.json()) as { result: Item };
  const { resultType, _meta, ...rest } = body.result;
  expect(resultType).toBe('complete');
  const meta = { ...((_meta as Item | undefined) ?? {}) };
  delete meta['dev.cmcp/evidence'];
  return Object.keys(meta).length ? { ...rest, _meta: meta } : rest;
}

const dir = mkdtempSync(join(tmpdir(), 'cmcp-differential-'));
writeFileSync(join(dir, 'note.txt'), 'differential\n');
const SUBJECTS: Subject[] = [
  {
    name: 'everything',
    upstream: everythingUpstream('everything'),
    calls: [
      { name: 'echo', arguments: { message: 'same' } },
      { name: 'get-sum', arguments: { a: 2, b: 3 } },
    ],
    roots: [{ uri: 'file:///srv/x', name: 'x' }],
  },
  {
    name: 'fs',
    upstream: filesystemUpstream(dir, 'fs'),
    calls: [
      { name: 'list_allowed_directories', arguments: {} },
      { name: 'read_text_file', arguments: { path: join(dir, 'note.txt') } },
      { name: 'list_directory', arguments: { path: dir } },
    ],
    roots: [{ uri: pathToFileURL(dir).href, name: 'dir' }],
  },
];

for (const s of SUBJECTS)
  describe(`${s.name}: the SDK client directly and through cmcp`, () => {
    let gw: Gateway;
    beforeAll(async () => {
      gw = await startInProcess(await writeConfig({ upstreams: [s.upstream] }));
    }, 60_000);
    afterAll(async () => {
      await gw?.close();
    });

    const direct = (capabilities: Record<string, unknown>, version: string) => {
      const c = client(s.roots, capabilities);
      const cfg = s.upstream as { command: string; args: string[] };
      return c
        .connect(
          asking(
            new StdioClientTransport({ command: cfg.command, args: cfg.args, stderr: 'ignore' }),
            version,
          ),
        )
        .then(() => c);
    };

    for (const version of VERSIONS)
      it(`${version}: the same tools, prompts, resources and answers, but for the prefix`, async () => {
        const d = await direct(CAPABILITIES, version);
        const t = client(s.roots, CAPABILITIES);
        const http = asking(
          new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), { requestInit: { headers: AUTH } }),
          version,
        );
        await t.connect(http);
        // cmcp answered the revision asked for.
        expect(http.protocolVersion).toBe(version);
        try {
          expect(d.getServerVersion()).toBeDefined();
          const mine = await view(d, s, null);
          const theirs = await view(t, s, s.name);
          expect(theirs).toEqual(mine);
          expect((mine.tools as Item[]).length).toBeGreaterThan(0);
          // The capability-gated tools are among them (server-everything).
          if (s.name === 'everything')
            expect((mine.tools as Item[]).map((x) => x.name)).toContain('trigger-sampling-request');
        } finally {
          await d.close();
          await t.close();
        }
      }, 60_000);

    it('2026-07-28 stateless: the tools and answers of a client that declares nothing', async () => {
      const d = await direct({}, '2025-11-25');
      try {
        const tools = ((await all(d, 'tools/list', 'tools')) as Item[]).map((x) => ({
          ...x,
          name: `${s.name}.${x.name}`,
        }));
        const listed = await stateless(`${gw.url}/mcp`, 'tools/list', {});
        expect(listed.tools).toEqual(tools);
        for (const call of s.calls) {
          const mine = (await d.callTool(call)) as Item;
          const theirs = await stateless(`${gw.url}/mcp`, 'tools/call', {
            ...call,
            name: `${s.name}.${call.name}`,
          });
          expect(theirs).toEqual(mine);
        }
      } finally {
        await d.close();
      }
    }, 60_000);
  });
