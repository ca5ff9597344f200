/**
 * Issue 10 item 6: a session's claim counts every entry type, the relayed data-carrying ones
 * included, and the verifier holds those counts (and the tool-call counters) to the bundle.
 * A real gateway in process, a real SDK upstream (test/fixtures/relay-server.ts), real SQLite.
 */
import { generateKeyPairSync } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { verifyBundle, verifyClaim } from '@cmcp/verify';
import { runVerify } from '@cmcp/verify/cli';
import { type Claim, ed25519PublicJwk, signClaim } from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import type { ClientChannel } from '../src/relay/channel.js';
import { type RelayServer, startRelayServer } from './fixtures/relay-server.js';
import { rest, startInProcess, writeConfig } from './harness/gateway.js';

let id = 1;

/** A client channel that answers nothing (none of these requests asks the client). */
function quietChannel(): ClientChannel {
  const abort = new AbortController();
  return {
    streaming: true,
    notify: () => true,
    request: async () => {
      throw new Error('no client requests expected');
    },
    signal: abort.signal,
    clientSessionId: 'counts-session',
  };
}

async function rpc(gw: Gateway, method: string, params: Record<string, unknown>) {
  const r = await gw.mcp.handle(
    { agentId: 'alice', blocked: false },
    { jsonrpc: '2.0', id: id++, method, params },
    undefined,
    process.hrtime.bigint(),
    quietChannel(),
  );
  return r.body as { result?: Record<string, unknown>; error?: { code: number; message: string } };
}

/** The claim re-signed under a fresh key named in its own cnf.jwk: only what was changed is wrong. */
function resigned(claim: Claim, change: (c: Claim) => void): Claim {
  const { signature: _drop, ...unsigned } = structuredClone(claim);
  change(unsigned as Claim);
  const { privateKey } = generateKeyPairSync('ed25519');
  return signClaim({ ...unsigned, cnf: { jwk: ed25519PublicJwk(privateKey) } }, privateKey);
}

describe('claims count every entry type', () => {
  let up: RelayServer;
  let gw: Gateway;
  let dir: string;
  let claim: Claim;
  // biome-ignore lint/suspicious/noExplicitAny: the bundle is arbitrary JSON the verifier checks
  let bundle: any;

  beforeAll(async () => {
    up = await startRelayServer({ tag: 'k' });
    const cfg = await writeConfig({ upstreams: [{ name: 'k', transport: 'http', url: up.url }] });
    dir = cfg.dir;
    gw = await startInProcess(cfg);
    const sid = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id as string;
    const inSession = { _cmcp: { session_id: sid } };
    expect((await rpc(gw, 'resources/read', { uri: 'test://k/0', ...inSession })).result).toBeDefined();
    expect((await rpc(gw, 'prompts/get', { name: 'k.k-prompt-0', ...inSession })).result).toBeDefined();
    // Refused before routing (no such prompt): on the record with no policy decision, and the
    // session's claim still verifies.
    expect((await rpc(gw, 'prompts/get', { name: 'k.nope', ...inSession })).error).toBeDefined();
    const call = await rpc(gw, 'tools/call', { name: 'k.k-tool-0', arguments: {}, ...inSession });
    expect(call.result?.isError).not.toBe(true);
    claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${sid}/close`)).body as Claim;
    bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${sid}/audit`)).body;
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
  });

  it('counts the resource read, the prompt get and the tool call, and the counts verify', async () => {
    expect(claim.entry_counts).toMatchObject({
      resource_read: 1,
      prompt_get: 2,
      tool_call: 1,
      session_close: 1,
    });
    const total = Object.values(claim.entry_counts ?? {}).reduce((a, b) => a + b, 0);
    expect(total).toBe(claim.audit_chain.length);
    expect(claim.counters).toEqual({ tool_calls: 1, allowed: 1, refused: 0, faulted: 0 });
    const r = verifyClaim(claim, { bundle });
    expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(r.checks.find((c) => c.id === 'audit.entry_counts')?.status).toBe('pass');
    // The same through `cmcp verify`.
    const cp = join(dir, 'claim.json');
    writeFileSync(cp, JSON.stringify(claim));
    writeFileSync(`${cp}.audit`, JSON.stringify(bundle));
    let out = '';
    const code = await runVerify(
      cp,
      { audit: `${cp}.audit`, json: false, require: 'signed-only' },
      { stdout: (x) => (out += x), stderr: (x) => (out += x) },
      'cmcp verify',
    );
    expect(out).toMatch(/PASS\s+audit\.entry_counts/);
    expect(code).toBe(0);
  });

  it('rejects a claim whose entry counts disagree with its bundle, with ENTRY_COUNTS_MISMATCH', () => {
    const bad = resigned(claim, (c) => {
      (c.entry_counts as Record<string, number>).resource_read = 0;
    });
    const r = verifyClaim(bad, { bundle });
    expect(r.checks.find((c) => c.id === 'claim.signature')?.status).toBe('pass');
    const counts = r.checks.find((c) => c.id === 'audit.entry_counts');
    expect(counts).toMatchObject({ status: 'fail', reason_code: 'ENTRY_COUNTS_MISMATCH' });
    expect(counts?.detail).toContain('resource_read');
    expect(r.verdict).toBe('invalid');
    // A count of a type the bundle does not hold, and a tool-call counter moved, fail alike.
    const extra = verifyBundle(bundle, {
      length: claim.audit_chain.length,
      counts: { entry_counts: { ...claim.entry_counts, prompt_get: 3 }, counters: claim.counters },
    });
    expect(extra.checks.filter((c) => c.status === 'fail').map((c) => c.id)).toEqual(['audit.entry_counts']);
    const moved = verifyBundle(bundle, {
      counts: {
        entry_counts: claim.entry_counts ?? {},
        counters: { ...claim.counters, allowed: 0, faulted: 1 },
      },
    });
    expect(moved.checks.find((c) => c.id === 'audit.entry_counts')).toMatchObject({
      status: 'fail',
      reason_code: 'ENTRY_COUNTS_MISMATCH',
    });
    expect(moved.checks.find((c) => c.id === 'audit.entry_counts')?.detail).toContain(
      'counters."allowed" 0≠1',
    );
  });

  it('leaves the counts of a claim issued before them not-applicable', () => {
    const r = verifyBundle(bundle, { length: claim.audit_chain.length });
    expect(r.checks.find((c) => c.id === 'audit.entry_counts')).toMatchObject({
      status: 'not-applicable',
      reason_code: 'NOT_SUPPLIED',
    });
    expect(r.checks.filter((c) => c.status === 'fail')).toEqual([]);
  });
});
