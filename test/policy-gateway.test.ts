/**
 * Cedar decisions on every call (docs/spec/policy.md#cedar-requests, #enforcement-modes) with real upstreams:
 * @modelcontextprotocol/server-filesystem on a fresh temp workspace (removed afterwards) and
 * server-everything, behind the example bundle (examples/policy) and catalog
 * (examples/catalog.json).
 * Allow and deny by tool, by argument value and by agent; fail-closed evaluation; session
 * facts; enforcing, advisory and silent modes; decisions and policy ids in the chain and in
 * the claim transcript; `cmcp verify --policy-hash`.
 */
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyBundle, verifyClaim } from '@cmcp/verify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { hashBundleDir } from '../src/policy/bundle.js';
import {
  cleanup,
  everythingUpstream,
  filesystemUpstream,
  REPO_ROOT,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

// A fresh workspace per run (realpath: server-filesystem compares resolved paths against its
// allowed directory). The example bundle allows writes only in its `outbox` folder.
const WORKSPACE = realpathSync(mkdtempSync(join(tmpdir(), 'cmcp-policy-ws-')));
const OUTBOX = join(WORKSPACE, 'outbox');
const BUNDLE = join(REPO_ROOT, 'examples', 'policy');
const CATALOG = join(REPO_ROOT, 'examples', 'catalog.json');
const AGENTS = [
  { agent_id: 'alice', token: 'alice-token', attributes: { team: 'eng', roles: ['writer'] } },
  { agent_id: 'bob', token: 'bob-token', attributes: { team: 'contractors', roles: [] } },
  { agent_id: 'carol', token: 'carol-token', attributes: { team: 'eng' } },
];
const run = randomUUID().slice(0, 8);
const NOTE = join(WORKSPACE, `note-${run}.txt`);

async function gateway(mode: string): Promise<{ cfg: TestConfig; gw: Gateway }> {
  const cfg = await writeConfig({
    upstreams: [filesystemUpstream(WORKSPACE, 'fs'), everythingUpstream('everything')],
    agents: AGENTS,
    extra: {
      policy: { bundle: BUNDLE, enforcement_mode: mode },
      catalog: { file: CATALOG, relist_interval_s: 0 },
    },
  });
  return { cfg, gw: await startInProcess(cfg) };
}

const callIn = (gw: Gateway, token: string, name: string, args: Record<string, unknown>, session?: string) =>
  rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name, arguments: args, ...(session ? { _cmcp: { session_id: session } } : {}) },
  });

beforeAll(() => {
  mkdirSync(OUTBOX, { recursive: true });
  writeFileSync(NOTE, 'confidential note\n');
});
afterAll(() => rmSync(WORKSPACE, { recursive: true, force: true }));

describe('enforcing (the example bundle)', () => {
  let cfg: TestConfig;
  let gw: Gateway;
  let session: string;
  const call = (token: string, name: string, args: Record<string, unknown>) =>
    callIn(gw, token, name, args, session);

  beforeAll(async () => {
    ({ cfg, gw } = await gateway('enforcing'));
    session = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id;
  });
  afterAll(async () => {
    await gw?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('policy_load records the bundle hash, version and policy ids; the binding names it', () => {
    const load = gw.chain.entries('gateway').filter((e) => e.entry_type === 'policy_load');
    expect(load).toHaveLength(1);
    expect(load[0]?.detail).toMatchObject({
      bundle_hash: hashBundleDir(BUNDLE),
      version: 1,
      source: 'config',
      enforcement_mode: 'enforcing',
    });
    expect(load[0]?.detail?.policy_ids).toContain('fs-writes-only-in-outbox');
    expect(gw.facts).toMatchObject({ policyBundleHash: hashBundleDir(BUNDLE), enforcementMode: 'enforcing' });
  });

  it('by tool: read-only tools are allowed, a writing tool outside the fs server is denied', async () => {
    const r = await call('alice-token', 'fs.read_text_file', { path: NOTE });
    expect(r.body.result.content[0].text).toContain('confidential note');
    const d = await call('alice-token', 'everything.toggle-simulated-logging', {});
    // Not in the catalog at all: refused before policy.
    expect(d.body.error.data.error_code).toBe('TOOL_NOT_IN_CATALOG');
  });

  it('by argument value: server-filesystem writes only inside the outbox, never through ..', async () => {
    const inside = join(OUTBOX, `ok-${run}.txt`);
    const ok = await call('alice-token', 'fs.write_file', { path: inside, content: 'hello' });
    expect(ok.body.result.isError).toBeFalsy();
    expect(existsSync(inside)).toBe(true);

    const outside = join(WORKSPACE, `outside-${run}.txt`);
    const denied = await call('alice-token', 'fs.write_file', { path: outside, content: 'nope' });
    expect(denied.body.error.code).toBe(-32060);
    expect(denied.body.error.data.error_code).toBe('POLICY_DENY');
    expect(denied.body.error.data.policy_ids).toEqual(['fs-writes-only-in-outbox']);
    expect(existsSync(outside)).toBe(false);

    const traversal = `${OUTBOX}/../traversal-${run}.txt`;
    const t = await call('alice-token', 'fs.write_file', { path: traversal, content: 'nope' });
    expect(t.body.error.data.error_code).toBe('POLICY_DENY');
    expect(existsSync(join(WORKSPACE, `traversal-${run}.txt`))).toBe(false);
  });

  it('by agent: no writer role means no permit; contractors never run confidential tools', async () => {
    const carol = await callIn(gw, 'carol-token', 'fs.write_file', {
      path: join(OUTBOX, `c-${run}.txt`),
      content: 'x',
    });
    expect(carol.body.error.data.error_code).toBe('POLICY_DENY');
    expect(carol.body.error.data.policy_ids).toEqual([]);
    const bob = await callIn(gw, 'bob-token', 'fs.read_text_file', { path: NOTE });
    expect(bob.body.error.data.policy_ids).toEqual(['contractors-below-confidential']);
    const bobList = await callIn(gw, 'bob-token', 'fs.list_directory', { path: WORKSPACE });
    expect(bobList.body.result.content[0].text).toContain(`note-${run}.txt`);
  });

  it('session facts: after a confidential read, an open-world tool is forbidden in that session', async () => {
    const fresh = (await rest(gw.url, 'carol-token', 'POST', '/sessions', {})).body.session_id;
    const gz = { name: 'x.txt', data: 'data:text/plain;base64,aGVsbG8=' };
    const before = await callIn(gw, 'carol-token', 'everything.gzip-file-as-resource', gz, fresh);
    // Not read-only and not on fs: no permit, nothing forbids yet.
    expect(before.body.error.data.policy_ids).toEqual([]);
    await callIn(gw, 'carol-token', 'fs.read_text_file', { path: NOTE }, fresh);
    const after = await callIn(gw, 'carol-token', 'everything.gzip-file-as-resource', gz, fresh);
    expect(after.body.error.data.policy_ids).toEqual(['no-open-world-after-confidential']);
  });

  it('fails closed: an argument of the wrong type is POLICY_ATTRIBUTE_INVALID, a forged entity too', async () => {
    const r = await call('alice-token', 'fs.write_file', { path: 5, content: 'x' });
    expect(r.body.error.data.error_code).toBe('POLICY_ATTRIBUTE_INVALID');
    expect(r.body.error.data.policy_attribute_invalid).toBe(
      'context.arguments.path: expected String, got number',
    );
    const f = await call('alice-token', 'fs.write_file', {
      path: { __entity: { type: 'Agent', id: 'root' } },
      content: 'x',
    });
    expect(f.body.error.data.error_code).toBe('POLICY_ATTRIBUTE_INVALID');
    expect(f.body.error.data.policy_attribute_invalid).toBe(
      'context.arguments.path: member name __entity is reserved by Cedar',
    );
  });

  it('decisions and policy ids are in the chain and the claim transcript; verify pins the policy hash', async () => {
    const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${session}/close`)).body;
    const bundle = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${session}/audit`)).body;
    const calls = gw.chain.entries(session).filter((e) => e.entry_type === 'tool_call');
    expect(calls.map((e) => [e.tool_name, e.policy_decision, e.policy_rule_matched, e.error_code])).toEqual([
      // alice is a writer: both permits are satisfied and both are reported.
      ['fs.read_text_file', 'allow', ['allow-read-only-tools', 'allow-writers-on-fs'], null],
      ['everything.toggle-simulated-logging', null, null, 'TOOL_NOT_IN_CATALOG'],
      ['fs.write_file', 'allow', ['allow-writers-on-fs'], null],
      ['fs.write_file', 'deny', ['fs-writes-only-in-outbox'], 'POLICY_DENY'],
      ['fs.write_file', 'deny', ['fs-writes-only-in-outbox'], 'POLICY_DENY'],
      ['fs.write_file', 'deny', [], 'POLICY_ATTRIBUTE_INVALID'],
      ['fs.write_file', 'deny', [], 'POLICY_ATTRIBUTE_INVALID'],
    ]);
    expect(claim.transcript.map((l: { policy_rule_matched: unknown }) => l.policy_rule_matched)).toEqual(
      calls.map((e) => e.policy_rule_matched),
    );
    expect(claim.transcript[3]).toMatchObject({ policy_decision: 'deny', disposition: 'refused' });
    expect(claim.policy_bundle_hash).toBe(hashBundleDir(BUNDLE));
    expect(claim.binding.preimage.policy_bundle_hash).toBe(hashBundleDir(BUNDLE));
    expect(claim.enforcement_mode).toBe('enforcing');

    const report = verifyClaim(claim, { bundle, expectedPolicyHash: hashBundleDir(BUNDLE) });
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(report.checks.find((c) => c.id === 'claim.policy_hash')?.status).toBe('pass');
    expect(report.checks.find((c) => c.id === 'audit.transcript')?.status).toBe('pass');
    const wrong = verifyClaim(claim, { bundle, expectedPolicyHash: `sha256:${'0'.repeat(64)}` });
    expect(wrong.verdict).toBe('invalid');
    expect(wrong.checks.find((c) => c.id === 'claim.policy_hash')?.reason_code).toBe('POLICY_HASH_MISMATCH');
    // The verifier compares matched policy ids line by line.
    const forged = structuredClone(claim.transcript);
    forged[0].policy_rule_matched = ['some-other-policy'];
    const v = verifyBundle(bundle, { transcript: forged });
    expect(v.checks.find((c) => c.id === 'audit.transcript')?.reason_code).toBe('TRANSCRIPT_MISMATCH');
  });
});

describe('advisory and silent modes', () => {
  it('advisory: a deny is recorded as advisory_deny, the call proceeds and the caller is told', async () => {
    const { cfg, gw } = await gateway('advisory');
    try {
      const outside = join(WORKSPACE, `advisory-${run}.txt`);
      const r = await callIn(gw, 'alice-token', 'fs.write_file', { path: outside, content: 'advisory' });
      expect(r.body.result.isError).toBeFalsy();
      expect(existsSync(outside)).toBe(true);
      const ev = r.body.result._meta['dev.cmcp/evidence'];
      expect(ev.policy_advisory).toEqual({
        policy_decision: 'advisory_deny',
        policy_ids: ['fs-writes-only-in-outbox'],
      });
      const e = gw.chain.entries(ev.chain_id).find((x) => x.entry_hash === ev.entry_hash);
      expect(e).toMatchObject({
        policy_decision: 'advisory_deny',
        policy_rule_matched: ['fs-writes-only-in-outbox'],
        disposition: 'completed',
      });
      const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${ev.session_id}/close`)).body;
      expect(claim.enforcement_mode).toBe('advisory');
      expect(claim.transcript.at(-1)).toMatchObject({ policy_decision: 'advisory_deny' });
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('silent: evaluated and recorded as silent_deny, never blocks, the caller sees nothing', async () => {
    const { cfg, gw } = await gateway('silent');
    try {
      const outside = join(WORKSPACE, `silent-${run}.txt`);
      const r = await callIn(gw, 'alice-token', 'fs.write_file', { path: outside, content: 'silent' });
      expect(existsSync(outside)).toBe(true);
      const ev = r.body.result._meta['dev.cmcp/evidence'];
      expect(ev.policy_advisory).toBeUndefined();
      const e = gw.chain.entries(ev.chain_id).find((x) => x.entry_hash === ev.entry_hash);
      expect(e).toMatchObject({
        policy_decision: 'silent_deny',
        policy_rule_matched: ['fs-writes-only-in-outbox'],
      });
      const allowed = await callIn(gw, 'alice-token', 'fs.read_text_file', { path: NOTE });
      const ae = allowed.body.result._meta['dev.cmcp/evidence'];
      expect(gw.chain.entries(ae.chain_id).find((x) => x.entry_hash === ae.entry_hash)?.policy_decision).toBe(
        'allow',
      );
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});

describe('start-up refusals', () => {
  it('an agent whose attributes do not fit the schema refuses the start, naming the agent', async () => {
    const cfg = await writeConfig({
      upstreams: [],
      agents: [{ agent_id: 'dora', token: 'dora-token', attributes: { team: 7 } }],
      extra: { policy: { bundle: BUNDLE } },
    });
    try {
      await expect(startInProcess(cfg)).rejects.toMatchObject({ code: 'POLICY_BUNDLE_INVALID' });
      await expect(startInProcess(cfg)).rejects.toThrow(/Agent::"dora"/);
    } finally {
      cleanup(cfg.dir);
    }
  });
});
