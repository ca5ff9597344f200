/**
 * `cmcp verify` accepts only what a relying party can tie to something it trusts: real claims
 * from a real gateway (software provider: signed-only), checked by the real CLI. A claim
 * re-signed with an attacker's own key is refused by default; an explicit `--require
 * signed-only` accepts a self-asserted signer and says so; `--key` pins the gateway's key. The
 * claim's agent_id and session_id must match every entry of the bundle it comes with.
 */
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { verifyClaim } from '@cmcp/verify';
import {
  type AuditBundle,
  type AuditEntryBody,
  b64u,
  type Claim,
  entryLeafHash,
  hashEntryBody,
  signClaim,
  treeRoot,
  type UnsignedClaim,
} from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bindSession } from '../testing/evidence.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import {
  type ChildGateway,
  cleanup,
  freePort,
  REPO_ROOT,
  rest,
  rpc,
  startChild,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';

const run = promisify(execFile);
const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
async function cmcp(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [CLI, ...args]);
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}

let up: CountingServer;
let cfg: TestConfig;
let gw: ChildGateway;
const files: Record<string, string> = {};
const claims: Record<string, Claim> = {};

/** One real session of `agent`: a tool call, then close; writes its claim and bundle. */
async function session(agent: string, token: string): Promise<void> {
  const s = await rest(gw.url, token, 'POST', '/sessions', {});
  const sid = s.body.session_id;
  await rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: {
      name: 'c.record',
      arguments: { a: agent },
      _cmcp: { session_id: sid, execution_id: `x-${agent}` },
    },
  });
  const claim = await rest(gw.url, token, 'POST', `/sessions/${sid}/close`);
  const bundle = await rest(gw.url, token, 'GET', `/sessions/${sid}/audit`);
  claims[agent] = claim.body as Claim;
  files[`${agent}-claim`] = write(`${agent}-claim.json`, claim.body);
  files[`${agent}-bundle`] = write(`${agent}-bundle.json`, bundle.body);
}

function write(name: string, value: unknown): string {
  const path = join(cfg.dir, name);
  writeFileSync(path, JSON.stringify(value));
  return path;
}

/**
 * The attacker's forgery: `claim` with `over` applied, re-bound to and signed with a fresh key of
 * the attacker's own (cnf.jwk, preimage thumbprint and report_data made self-consistent).
 */
function forge(claim: Claim, over: Partial<UnsignedClaim>): Claim {
  const pre = claim.binding.preimage;
  const s = bindSession({
    sessionId: over.session_id ?? claim.session_id,
    chainRoot: over.audit_chain?.root ?? claim.audit_chain.root,
    gatewayMeasurement: pre.gateway_measurement,
    policyBundleHash: pre.policy_bundle_hash,
    catalogHash: pre.catalog_hash,
    challenge: pre.challenge,
  });
  const { signature: _sig, ...unsigned } = claim;
  return signClaim(
    {
      ...unsigned,
      ...over,
      cnf: { jwk: s.jwk },
      binding: { preimage: s.preimage },
      evidence: { ...claim.evidence, report_data: b64u(s.reportData) },
    } as UnsignedClaim,
    s.privateKey,
  );
}

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({
    port: await freePort(),
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    agents: [
      { agent_id: 'alice', token: 'alice-token' },
      { agent_id: 'bob', token: 'bob-token' },
    ],
  });
  gw = await startChild(cfg);
  await session('alice', 'alice-token');
  await session('bob', 'bob-token');
  files.aliceKey = write('alice-key.json', claims.alice?.cnf.jwk);
}, 60_000);
afterAll(async () => {
  await gw?.stop('SIGKILL');
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

describe('cmcp verify: who vouches for the signer', () => {
  it('a genuine signed-only claim exits 1 by default, naming the self-asserted signer', async () => {
    const r = await cmcp('verify', files['alice-claim'] ?? '', '--audit', files['alice-bundle'] ?? '');
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('Signer: SELF-ASSERTED');
    expect(r.stdout).toContain('Accepted: NO');
    expect(r.stdout).toContain('CLAIM_SIGNER_NOT_TRUSTED');
    expect(r.stderr).toBe('');
  });

  it('--require signed-only accepts it and says the signer is self-asserted', async () => {
    const args = ['verify', files['alice-claim'] ?? '', '--audit', files['alice-bundle'] ?? ''];
    const r = await cmcp(...args, '--require', 'signed-only', '--json');
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ verdict: 'signed-only', signer: 'self-asserted', accepted: true });
    expect(report.checks.find((c: { id: string }) => c.id === 'claim.signer')).toMatchObject({
      status: 'absent',
      reason_code: 'CLAIM_SIGNER_NOT_TRUSTED',
    });
    expect(report.notes.join('\n')).toMatch(/WARNING: the claim signer is self-asserted/);
  });

  it('--key pins the gateway key: its claim is accepted, by JWK file or thumbprint', async () => {
    const args = ['verify', files['alice-claim'] ?? '', '--audit', files['alice-bundle'] ?? ''];
    const r = await cmcp(...args, '--key', files.aliceKey ?? '', '--json');
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout);
    expect(report).toMatchObject({ verdict: 'signed-only', signer: 'pinned-key', accepted: true });
    const thumb = (report.checks as { id: string; detail: string }[])
      .find((c) => c.id === 'claim.signer')
      ?.detail.match(/thumbprint ([A-Za-z0-9_-]{43})/)?.[1];
    expect(thumb).toBeDefined();
    expect((await cmcp(...args, '--key', thumb ?? '')).code).toBe(0);
    // a pinned key that did not sign the claim does not help
    expect((await cmcp(...args, '--key', 'A'.repeat(43))).code).toBe(1);
    const bad = await cmcp(...args, '--key', files['alice-bundle'] ?? '');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/^cmcp verify: --key .* is not an Ed25519 public JWK/);
  });

  it('--key refuses a claim file (its cnf.jwk is whoever signed it) and a private JWK: exit 2', async () => {
    // The attacker's forgery, pinned by passing the forgery itself as --key, must not pass.
    const forged = write('self-pinned.json', forge(claims.alice as Claim, { agent_id: 'mallory' }));
    const self = await cmcp('verify', forged, '--key', forged);
    expect(self.code).toBe(2);
    expect(self.stdout).toBe('');
    expect(self.stderr).toMatch(
      /^cmcp verify: --key .* is a claim, not a key.*trusted source.*VERIFY_KEY_INVALID/,
    );
    // the genuine claim file is no key either: the relying party pins the key itself
    const genuine = await cmcp('verify', files['alice-claim'] ?? '', '--key', files['alice-claim'] ?? '');
    expect(genuine.code).toBe(2);
    expect(genuine.stderr).toContain('VERIFY_KEY_INVALID');
    const { generateKeyPairSync } = await import('node:crypto');
    const priv = generateKeyPairSync('ed25519').privateKey.export({ format: 'jwk' });
    const privFile = write('private-key.json', priv);
    const p = await cmcp('verify', files['alice-claim'] ?? '', '--key', privFile);
    expect(p.code).toBe(2);
    expect(p.stderr).toMatch(/^cmcp verify: --key .* holds private key members \(d\).*VERIFY_KEY_INVALID/);
  });

  it('a claim re-signed with an attacker key is refused by default', async () => {
    const resigned = write('resigned.json', forge(claims.alice as Claim, {}));
    const args = ['verify', resigned, '--audit', files['alice-bundle'] ?? ''];
    const d = await cmcp(...args);
    expect(d.code).toBe(1);
    expect(d.stdout).toContain('Signer: SELF-ASSERTED');
    expect(d.stdout).toContain('CLAIM_SIGNER_NOT_TRUSTED');
    expect((await cmcp(...args, '--key', files.aliceKey ?? '')).code).toBe(1);
  });

  it('a claim re-signed with an attacker key and another agent_id is refused', async () => {
    const forged = write('forged.json', forge(claims.alice as Claim, { agent_id: 'mallory' }));
    const args = ['verify', forged, '--audit', files['alice-bundle'] ?? ''];
    // default: the attacker's key is neither hardware-attested nor pinned
    const d = await cmcp(...args);
    expect(d.code).toBe(1);
    expect(d.stdout).toContain('Signer: SELF-ASSERTED');
    expect(d.stdout).toContain('Accepted: NO');
    // pinning the gateway's key does not accept another key
    expect((await cmcp(...args, '--key', files.aliceKey ?? '')).code).toBe(1);
    // even a relying party that accepts self-asserted signers sees the agent differ from the chain
    const s = await cmcp(...args, '--require', 'signed-only');
    expect(s.code).toBe(1);
    expect(s.stdout).toMatch(/INVALID/);
    expect(s.stdout).toContain('BUNDLE_AGENT_MISMATCH');
  });

  it("bob's session claimed for alice (re-signed) is refused: the entries name bob", async () => {
    const swapped = write('swapped.json', forge(claims.bob as Claim, { agent_id: 'alice' }));
    const s = await cmcp('verify', swapped, '--audit', files['bob-bundle'] ?? '', '--require', 'signed-only');
    expect(s.code).toBe(1);
    expect(s.stdout).toContain('BUNDLE_AGENT_MISMATCH');
  });

  it("alice's genuine claim with bob's bundle is refused, even with the key pinned", async () => {
    const r = await cmcp(
      'verify',
      files['alice-claim'] ?? '',
      '--audit',
      files['bob-bundle'] ?? '',
      '--key',
      files.aliceKey ?? '',
    );
    expect(r.code).toBe(1);
    expect(r.stdout).toContain('BUNDLE_SESSION_MISMATCH');
  });
});

describe('audit.agent: entries that always name an agent', () => {
  it('a call entry re-written with agent_id null (re-chained, claim re-signed) is refused', async () => {
    const { readFileSync } = await import('node:fs');
    const bundle = JSON.parse(readFileSync(files['alice-bundle'] ?? '', 'utf8')) as AuditBundle;
    const claim = claims.alice as Claim;
    // The genuine chain still passes the check: every entry of it names alice.
    const real = verifyClaim(claim, { bundle, require: 'signed-only' });
    expect(real.checks.find((c) => c.id === 'audit.agent')?.status).toBe('pass');
    expect(real).toMatchObject({ verdict: 'signed-only', accepted: true });
    // The forger hides whose call it was, then makes chain and claim consistent again.
    let prev = 'genesis';
    let nulled = 0;
    const entries = bundle.entries.map((e) => {
      const body = JSON.parse(e.canonical) as AuditEntryBody;
      if (body.entry_type === 'tool_call') {
        body.agent_id = null;
        nulled++;
      }
      body.prev_entry_hash = prev;
      const h = hashEntryBody(body);
      prev = h.entry_hash;
      return h;
    });
    expect(nulled).toBe(1);
    const audit_chain = {
      ...claim.audit_chain,
      root: entries[0]?.entry_hash ?? '',
      tip: entries[entries.length - 1]?.entry_hash ?? '',
    };
    // A version-2 claim also commits to the tree head: the forger recomputes it too.
    const head = (claim as { tree_head?: { size: number } }).tree_head;
    const tree_head = head && {
      size: head.size,
      root: treeRoot(entries.slice(0, head.size).map((e) => entryLeafHash(e.entry_hash))).toString('hex'),
    };
    const forged = forge(claim, { audit_chain, ...(tree_head ? { tree_head } : {}) });
    const r = verifyClaim(forged, { bundle: { ...bundle, entries }, require: 'signed-only' });
    expect(r.checks.filter((c) => c.status === 'fail').map((c) => c.reason_code)).toEqual([
      'BUNDLE_AGENT_MISMATCH',
    ]);
    expect(r).toMatchObject({ verdict: 'invalid', accepted: false });
    // and through the CLI
    const f = write('agentless-claim.json', forged);
    const b = write('agentless-bundle.json', { ...bundle, entries });
    const cli = await cmcp('verify', f, '--audit', b, '--require', 'signed-only');
    expect(cli.code).toBe(1);
    expect(cli.stdout).toContain('BUNDLE_AGENT_MISMATCH');
  });
});

describe('verifyClaim: the library applies the same policy', () => {
  it('defaults to refusing a self-asserted signer; require and trustedKeys lower it explicitly', async () => {
    const { readFileSync } = await import('node:fs');
    const bundle = JSON.parse(readFileSync(files['alice-bundle'] ?? '', 'utf8'));
    const claim = claims.alice as Claim;
    const def = verifyClaim(claim, { bundle });
    expect(def).toMatchObject({ verdict: 'signed-only', signer: 'self-asserted', accepted: false });
    expect(verifyClaim(claim, { bundle, require: 'signed-only' }).accepted).toBe(true);
    const thumb = def.checks
      .find((c) => c.id === 'claim.signer')
      ?.detail.match(/thumbprint ([A-Za-z0-9_-]{43})/)?.[1];
    const pinned = verifyClaim(claim, { bundle, trustedKeys: [thumb ?? ''] });
    expect(pinned).toMatchObject({ signer: 'pinned-key', accepted: true });
    const forged = verifyClaim(forge(claim, { agent_id: 'mallory' }), { bundle, require: 'signed-only' });
    expect(forged).toMatchObject({ verdict: 'invalid', accepted: false });
  });
});
