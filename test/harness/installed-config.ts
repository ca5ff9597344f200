/**
 * What a test does with an installed cmcp (an npm install or an unpacked release artifact): a
 * config made from the package's own example, and a closed session's claim and audit bundle.
 */
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { parse, stringify } from 'yaml';

/**
 * The shipped examples/cmcp.example.yaml of the installed package at `root`, adapted as an operator
 * would: a temp database and workspace, the installed upstream servers, the installed policy
 * bundle and catalog, a free port; `attestation` replaced when given.
 */
export function exampleConfig(
  root: string,
  dir: string,
  port: number,
  attestation?: Record<string, unknown>,
): string {
  const raw = parse(readFileSync(join(root, 'examples', 'cmcp.example.yaml'), 'utf8')) as Record<
    string,
    unknown
  >;
  mkdirSync(dir, { recursive: true });
  const workspace = join(dir, 'workspace');
  mkdirSync(join(workspace, 'outbox'), { recursive: true });
  const mcp = join(root, 'node_modules', '@modelcontextprotocol');
  const upstreams = raw.upstreams as { name: string; args: string[] }[];
  for (const u of upstreams) {
    if (u.name === 'fs') u.args = [join(mcp, 'server-filesystem', 'dist', 'index.js'), workspace];
    else if (u.name === 'everything') u.args = [join(mcp, 'server-everything', 'dist', 'index.js'), 'stdio'];
  }
  raw.listen = { host: '127.0.0.1', port };
  raw.database = join(dir, 'cmcp.db');
  (raw.policy as Record<string, unknown>).bundle = join(root, 'examples', 'policy');
  (raw.catalog as Record<string, unknown>).file = join(root, 'examples', 'catalog.json');
  if (attestation) {
    raw.attestation = attestation;
    raw.dev_mode = false;
  }
  const file = join(dir, 'cmcp.yaml');
  writeFileSync(file, stringify(raw));
  return file;
}

/** Opens a session, makes one call, closes it; writes claim.json and audit.json into `dir`. */
export async function closedSessionFiles(
  url: string,
  dir: string,
): Promise<{ claim: string; audit: string }> {
  const auth = { authorization: 'Bearer alice-token' };
  const json = { ...auth, 'content-type': 'application/json' };
  const s = await fetch(`${url}/sessions`, { method: 'POST', headers: json, body: '{}' });
  expect(s.status).toBe(201);
  const sid = ((await s.json()) as { session_id: string }).session_id;
  const call = await fetch(`${url}/mcp`, {
    method: 'POST',
    headers: { ...json, accept: 'application/json, text/event-stream' },
    body: JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'everything.echo', arguments: { message: 'measured' }, _cmcp: { session_id: sid } },
    }),
  });
  expect(call.status).toBe(200);
  const closed = await fetch(`${url}/sessions/${sid}/close`, { method: 'POST', headers: auth });
  expect(closed.status).toBe(200);
  const claim = join(dir, 'claim.json');
  writeFileSync(claim, await closed.text());
  const audit = join(dir, 'audit.json');
  writeFileSync(audit, await (await fetch(`${url}/sessions/${sid}/audit`, { headers: auth })).text());
  return { claim, audit };
}
