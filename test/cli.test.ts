/**
 * The `cmcp` command line as an operator uses it: `start` (config errors, no secrets or
 * arguments in logs), `verify` on a real claim and bundle, `executions list|show`.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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
const SECRET_TOKEN = 'tok-SECRET-7f3a9c';
const SECRET_ARG = 'argument-SECRET-55e1';

beforeAll(async () => {
  up = await startCountingServer();
  cfg = await writeConfig({
    port: await freePort(),
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    agents: [{ agent_id: 'alice', token: SECRET_TOKEN }],
  });
  gw = await startChild(cfg, { CMCP_LOG_LEVEL: 'debug' });
});
afterAll(async () => {
  await gw?.stop('SIGKILL');
  await up?.close();
  if (cfg) cleanup(cfg.dir);
});

describe('cmcp start', () => {
  it('refuses an invalid config naming the field, exit 2, no stack trace', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-cli-'));
    writeFileSync(
      join(dir, 'c.yaml'),
      'database: x.db\nattestation: { provider: software }\nlisten: { host: 0.0.0.0 }\ndev_mode: true\n',
    );
    const r = await cmcp('start', '--config', join(dir, 'c.yaml'));
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('listen.host: dev_mode binds loopback only');
    expect(r.stderr).not.toMatch(/\n\s+at /);
    cleanup(dir);
  });

  it('logs neither bearer tokens nor tool arguments', async () => {
    const s = await rest(gw.url, SECRET_TOKEN, 'POST', '/sessions', {});
    const sid = s.body.session_id;
    const x = 'exec-cli-1';
    const r = await rpc(gw.url, SECRET_TOKEN, {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'c.record', arguments: { a: SECRET_ARG }, _cmcp: { session_id: sid, execution_id: x } },
    });
    expect(r.body.result).toBeDefined();
    await rpc(gw.url, 'wrong-SECRET-token', { jsonrpc: '2.0', id: 2, method: 'ping' });
    const claim = await rest(gw.url, SECRET_TOKEN, 'POST', `/sessions/${sid}/close`);
    const bundle = await rest(gw.url, SECRET_TOKEN, 'GET', `/sessions/${sid}/audit`);
    writeFileSync(join(cfg.dir, 'claim.json'), JSON.stringify(claim.body));
    writeFileSync(join(cfg.dir, 'bundle.json'), JSON.stringify(bundle.body));
    await new Promise((res) => setTimeout(res, 200));
    const log = gw.stderr();
    expect(log).toContain('cmcp gateway listening');
    expect(log).not.toContain(SECRET_TOKEN);
    expect(log).not.toContain('wrong-SECRET-token');
    expect(log).not.toContain(SECRET_ARG);
  });
});

describe('cmcp verify', () => {
  it('prints a readable report and exits 0 for a signed-only claim with its bundle under --require signed-only', async () => {
    const signedOnly = ['--require', 'signed-only'];
    const r = await cmcp(
      'verify',
      join(cfg.dir, 'claim.json'),
      '--audit',
      join(cfg.dir, 'bundle.json'),
      ...signedOnly,
    );
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/SIGNED-ONLY/);
    const j = await cmcp(
      'verify',
      join(cfg.dir, 'claim.json'),
      '--audit',
      join(cfg.dir, 'bundle.json'),
      ...signedOnly,
      '--json',
    );
    const report = JSON.parse(j.stdout);
    expect(report.verdict).toBe('signed-only');
    expect(report.checks.every((c: { status: string }) => c.status !== 'fail')).toBe(true);
  });

  it('--require makes a weaker verdict fail: signed-only is not hardware-attested', async () => {
    const args = ['verify', join(cfg.dir, 'claim.json'), '--audit', join(cfg.dir, 'bundle.json')];
    expect((await cmcp(...args, '--require', 'signed-only')).code).toBe(0);
    expect((await cmcp(...args, '--require', 'hardware-unanchored')).code).toBe(1);
    expect((await cmcp(...args, '--require', 'hardware-attested')).code).toBe(1);
    expect((await cmcp(...args, '--require', 'invalid')).code).toBe(2);
  });

  it('exits 1 on an invalid claim, 2 on unreadable input', async () => {
    const { readFileSync } = await import('node:fs');
    const bundle = JSON.parse(readFileSync(join(cfg.dir, 'bundle.json'), 'utf8'));
    bundle.entries.pop();
    writeFileSync(join(cfg.dir, 'short.json'), JSON.stringify(bundle));
    const bad = await cmcp('verify', join(cfg.dir, 'claim.json'), '--audit', join(cfg.dir, 'short.json'));
    expect(bad.code).toBe(1);
    expect(bad.stdout).toMatch(/INVALID/);
    expect(bad.stdout).toContain('BUNDLE_TRUNCATED');
    const missing = await cmcp('verify', join(cfg.dir, 'nope.json'));
    expect(missing.code).toBe(2);
    // The package's command definition, named by the gateway's program: `cmcp verify`.
    expect(missing.stderr).toMatch(/^cmcp verify: cannot read claim .*nope\.json \(ENOENT\)\n$/);
    expect(missing.stderr).not.toMatch(/\n\s+at /);
  });
});

describe('cmcp executions', () => {
  it('lists and shows executions read-only', async () => {
    const list = await cmcp('executions', 'list', '--db', cfg.dbPath, '--json');
    expect(list.code).toBe(0);
    const rows = JSON.parse(list.stdout);
    expect(
      rows.some(
        (r: { execution_id: string; state: string }) =>
          r.execution_id === 'exec-cli-1' && r.state === 'completed',
      ),
    ).toBe(true);
    const show = await cmcp('executions', 'show', '--db', cfg.dbPath, '--agent', 'alice', 'exec-cli-1');
    expect(show.code).toBe(0);
    expect(show.stdout).toMatch(/state\s+completed/);
    const none = await cmcp('executions', 'show', '--db', cfg.dbPath, '--agent', 'bob', 'exec-cli-1');
    expect(none.code).toBe(1);
    expect(none.stderr).toContain('EXECUTION_NOT_FOUND');
    expect(up.invocations.filter((i) => i.args.a === SECRET_ARG)).toHaveLength(1);
  });
});
