/**
 * Operator controls (docs/spec/policy.md#operator-controls) against a real gateway and server-everything: operator
 * and agent credentials never substitute for each other; a signed policy reload takes effect
 * without a restart, is recorded, closes open sessions with claims and binds the next session
 * to the new hash; unsigned, wrongly signed, same-version and downgraded bundles are refused;
 * the kill switch blocks an agent on every route and closes its sessions with claims. Both
 * survive a restart.
 */
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyClaim } from '@cmcp/verify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { hashBundleDir, isBundleFile } from '../src/policy/bundle.js';
import { generatePolicyKey, signBundleHash } from '../src/policy/signature.js';
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

const EXAMPLE = join(REPO_ROOT, 'examples', 'policy');
const OP = 'operator-token-1';
const key = generatePolicyKey();
const otherKey = generatePolicyKey();
const tmp: string[] = [];

/** The example bundle at `version`, optionally with the no-echo policy. */
function bundle(version: number, noEcho: boolean, extra?: (dir: string) => void): string {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-reload-'));
  tmp.push(dir);
  cpSync(EXAMPLE, dir, { recursive: true });
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version, description: `v${version}` }));
  if (noEcho)
    writeFileSync(
      join(dir, '20-no-echo.cedar'),
      '@id("no-echo")\nforbid (principal, action, resource == Tool::"everything.echo");\n',
    );
  extra?.(dir);
  return dir;
}

function body(dir: string, signWith: string | null = key.privatePem): Record<string, unknown> {
  const files: Record<string, string> = {};
  for (const n of readdirSync(dir).filter(isBundleFile))
    files[n] = readFileSync(join(dir, n)).toString('base64url');
  return { files, ...(signWith ? { signature: signBundleHash(hashBundleDir(dir), signWith) } : {}) };
}

const echo = (gw: Gateway, token: string, session?: string) =>
  rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: {
      name: 'everything.echo',
      arguments: { message: 'hi' },
      ...(session ? { _cmcp: { session_id: session } } : {}),
    },
  });
const op = (gw: Gateway, method: string, path: string, b?: unknown, token = OP) =>
  rest(gw.url, token, method, path, b);
const gatewayEntries = (gw: Gateway, type: string) =>
  gw.chain.entries('gateway').filter((e) => e.entry_type === type);

let cfg: TestConfig;
let gw: Gateway;
const v1 = bundle(1, true);

beforeAll(async () => {
  cfg = await writeConfig({
    upstreams: [everythingUpstream('everything')],
    agents: [
      { agent_id: 'alice', token: 'alice-token', attributes: { team: 'eng', roles: ['writer'] } },
      { agent_id: 'bob', token: 'bob-token', attributes: { team: 'eng' } },
    ],
    operators: [{ operator_id: 'root', token: OP }],
    extra: {
      policy: { bundle: v1, signing_key: key.publicRaw },
      catalog: { file: join(REPO_ROOT, 'examples', 'catalog.json'), relist_interval_s: 0 },
    },
  });
  gw = await startInProcess(cfg);
});
afterAll(async () => {
  await gw?.close();
  if (cfg) cleanup(cfg.dir);
  for (const d of tmp) rmSync(d, { recursive: true, force: true });
});

describe('operator credentials', () => {
  it('operator routes refuse agent tokens and no token; agent routes refuse operator tokens', async () => {
    const asAgent = await op(gw, 'GET', '/operator/status', undefined, 'alice-token');
    expect(asAgent.status).toBe(401);
    expect(asAgent.body.error.error_code).toBe('OPERATOR_UNAUTHENTICATED');
    expect(asAgent.body.error.message).toContain('agent credentials');
    expect((await rest(gw.url, null, 'GET', '/operator/status')).status).toBe(401);
    const status = await op(gw, 'GET', '/operator/status');
    expect(status.status).toBe(200);
    expect(status.body.policy).toMatchObject({ bundle_hash: hashBundleDir(v1), version: 1 });

    const mcp = await rpc(gw.url, OP, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    expect(mcp.status).toBe(403);
    expect(mcp.body.error.data.error_code).toBe('OPERATOR_CREDENTIAL_REFUSED');
    const sessions = await rest(gw.url, OP, 'POST', '/sessions', {});
    expect(sessions.status).toBe(403);
    expect(sessions.body.error.error_code).toBe('OPERATOR_CREDENTIAL_REFUSED');
    const refused = gatewayEntries(gw, 'request_refused').map((e) => e.error_code);
    expect(refused).toContain('OPERATOR_UNAUTHENTICATED');
    expect(refused).toContain('OPERATOR_CREDENTIAL_REFUSED');
  });
});

describe('signed policy reload', () => {
  it('refuses unsigned, wrongly signed, same-version and invalid bundles; the running policy stays', async () => {
    const v2 = bundle(2, false);
    const cases: [Record<string, unknown>, string][] = [
      [body(v2, null), 'signature_missing'],
      [body(v2, otherKey.privatePem), 'signature_invalid'],
      [{ ...body(v2), signature: body(bundle(2, true)).signature }, 'signature_invalid'],
      [body(bundle(1, false)), 'not_newer'],
      [
        body(
          bundle(5, false, (d) =>
            writeFileSync(
              join(d, '30.cedar'),
              'permit(principal, action, resource) when { principal.nope };',
            ),
          ),
        ),
        'bundle_invalid',
      ],
      [{ files: 'x' }, 'request_invalid'],
    ];
    for (const [b, reason] of cases) {
      const r = await op(gw, 'POST', '/operator/policy/reload', b);
      expect(r.status, reason).toBe(409);
      expect(r.body.error.error_code).toBe('POLICY_RELOAD_REFUSED');
      expect(r.body.error.reason).toBe(reason);
    }
    const invalid = gatewayEntries(gw, 'policy_reload_refused').find(
      (e) => e.detail?.reason === 'bundle_invalid',
    );
    expect(JSON.stringify(invalid?.detail?.diagnostics)).toContain('nope');
    expect(gatewayEntries(gw, 'policy_reload_refused').map((e) => e.detail?.reason)).toEqual(
      cases.map((c) => c[1]),
    );
    expect(gw.facts.policyBundleHash).toBe(hashBundleDir(v1));
    expect((await echo(gw, 'alice-token')).body.error.data.policy_ids).toEqual(['no-echo']);
  });

  it('a signed higher version takes effect without a restart, closes open sessions with claims, binds the next session', async () => {
    const s1 = (await rest(gw.url, 'alice-token', 'POST', '/sessions', {})).body.session_id;
    expect((await echo(gw, 'alice-token', s1)).body.error.data.error_code).toBe('POLICY_DENY');
    const v3 = bundle(3, false);
    const r = await op(gw, 'POST', '/operator/policy/reload', body(v3));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({
      bundle_hash: hashBundleDir(v3),
      version: 3,
      previous_bundle_hash: hashBundleDir(v1),
      previous_version: 1,
    });
    expect(r.body.sessions_closed.map((s: { session_id: string }) => s.session_id)).toContain(s1);
    const entry = gatewayEntries(gw, 'policy_reload').at(-1);
    expect(entry?.detail).toMatchObject({
      bundle_hash: hashBundleDir(v3),
      operator_id: 'root',
      previous_version: 1,
    });
    expect(entry?.entry_hash).toBe(r.body.entry_hash);

    // The closed session's claim covers only decisions of the policy its binding names.
    const c1 = (await rest(gw.url, 'alice-token', 'GET', `/sessions/${s1}/claim`)).body;
    expect(c1.policy_bundle_hash).toBe(hashBundleDir(v1));
    expect(c1.transcript.map((l: { policy_rule_matched: string[] }) => l.policy_rule_matched)).toEqual([
      ['no-echo'],
    ]);
    expect(verifyClaim(c1, { expectedPolicyHash: hashBundleDir(v1) }).verdict).not.toBe('invalid');
    expect((await echo(gw, 'alice-token', s1)).body.error.data.error_code).toBe('SESSION_CLOSED');

    const ok = await echo(gw, 'alice-token');
    expect(ok.body.result.content[0].text).toContain('hi');
    const s2 = ok.body.result._meta['dev.cmcp/evidence'].session_id;
    const c2 = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${s2}/close`)).body;
    expect(c2.binding.preimage.policy_bundle_hash).toBe(hashBundleDir(v3));
    // The reload re-measured the gateway: the next session binds the new measurement, which names v3.
    expect(r.body.gateway_measurement).toBe(gw.facts.gatewayMeasurement);
    expect(c2.gateway_measurement).toBe(r.body.gateway_measurement);
    expect(c2.evidence.measurement.inputs.policy_bundle_hash).toBe(hashBundleDir(v3));
    expect(c1.gateway_measurement).not.toBe(c2.gateway_measurement);
    expect(gatewayEntries(gw, 'gateway_measurement').at(-1)?.detail).toMatchObject({
      trigger: 'policy_reload',
      digest: r.body.gateway_measurement,
      previous_digest: c1.gateway_measurement,
      inputs: { policy_bundle_hash: hashBundleDir(v3) },
    });
    const v2report = verifyClaim(c2, { expectedPolicyHash: hashBundleDir(v3) });
    expect(v2report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(v2report.notes.join('\n')).not.toMatch(/reloaded after start-up/);
    expect(c2.transcript[0]).toMatchObject({
      policy_decision: 'allow',
      policy_rule_matched: ['allow-read-only-tools'],
    });
  });

  it('a downgrade (lower version, validly signed) is refused', async () => {
    const r = await op(gw, 'POST', '/operator/policy/reload', body(bundle(2, true)));
    expect(r.status).toBe(409);
    expect(r.body.error.reason).toBe('not_newer');
    expect(r.body.error.message).toContain('not higher than the running version 3');
  });
});

describe('kill switch', () => {
  it('blocks an agent on every route, closes its sessions with claims, leaves others alone', async () => {
    const s = (await rest(gw.url, 'bob-token', 'POST', '/sessions', {})).body.session_id;
    await echo(gw, 'bob-token', s);
    expect((await op(gw, 'POST', '/operator/agents/nobody/block', {})).body.error.error_code).toBe(
      'AGENT_NOT_FOUND',
    );
    const r = await op(gw, 'POST', '/operator/agents/bob/block', { reason: 'compromised' });
    expect(r.status).toBe(200);
    expect(r.body.sessions_closed.map((x: { session_id: string }) => x.session_id)).toContain(s);
    expect(gatewayEntries(gw, 'agent_blocked').at(-1)).toMatchObject({
      agent_id: 'bob',
      detail: { operator_id: 'root', reason: 'compromised' },
    });
    const claim = await gw.sessions.claim('bob', s);
    expect(claim.transcript).toHaveLength(1);
    expect(verifyClaim(claim).verdict).not.toBe('invalid');

    const call = await echo(gw, 'bob-token');
    expect(call.body.error.data.error_code).toBe('AGENT_BLOCKED');
    expect(call.body.error.code).toBe(-32072);
    const ev = call.body.error.data.evidence;
    expect(ev.chain_id).toBe('gateway');
    expect(gw.chain.entries('gateway').find((e) => e.entry_hash === ev.entry_hash)?.entry_type).toBe(
      'tool_call',
    );
    const list = await rpc(gw.url, 'bob-token', { jsonrpc: '2.0', id: 2, method: 'tools/list' });
    expect(list.body.error.data.error_code).toBe('AGENT_BLOCKED');
    for (const [m, p] of [
      ['POST', '/sessions'],
      ['GET', `/sessions/${s}/claim`],
      ['GET', '/executions/x'],
    ] as const) {
      const x = await rest(gw.url, 'bob-token', m, p, m === 'POST' ? {} : undefined);
      expect(x.status, p).toBe(403);
      expect(x.body.error.error_code).toBe('AGENT_BLOCKED');
    }
    expect((await echo(gw, 'alice-token')).body.result).toBeDefined();
  });

  it('blocks and the reloaded policy survive a restart; unblock restores the agent', async () => {
    await gw.close();
    gw = await startInProcess(cfg);
    expect(gw.facts.policyBundleHash).toBe(gatewayEntries(gw, 'policy_reload').at(-1)?.detail?.bundle_hash);
    expect(gatewayEntries(gw, 'policy_load').at(-1)?.detail).toMatchObject({
      source: 'reload_resumed',
      version: 3,
    });
    expect((await echo(gw, 'alice-token')).body.result).toBeDefined();
    expect((await echo(gw, 'bob-token')).body.error.data.error_code).toBe('AGENT_BLOCKED');
    const u = await op(gw, 'POST', '/operator/agents/bob/unblock');
    expect(u.body).toMatchObject({ agent_id: 'bob', blocked: false });
    expect((await echo(gw, 'bob-token')).body.result).toBeDefined();
  });
});
