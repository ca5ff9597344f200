/** Config validation (errors name the field), dev-mode rules, and start-up refusals. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, parseConfig } from '../src/config/index.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rpc, startInProcess, writeConfig } from './harness/gateway.js';

const base = {
  database: '/tmp/x.db',
  attestation: { provider: 'tpm', tcti: 'swtpm:host=127.0.0.1,port=1' },
  agents: [{ agent_id: 'a', token_sha256: 'a'.repeat(64) }],
};
function issues(raw: unknown): string[] {
  try {
    parseConfig(raw);
  } catch (e) {
    if (e instanceof ConfigError) return e.issues;
    throw e;
  }
  return [];
}

describe('config validation', () => {
  it('accepts a minimal TPM config with defaults', () => {
    const c = parseConfig(base);
    expect(c.listen).toEqual({ host: '127.0.0.1', port: 8787 });
    expect(c.attestation).toMatchObject({ provider: 'tpm', ak_algorithm: 'ecc-p256', pcrs: [0, 1, 2, 7] });
  });
  it('names the field in each error', () => {
    expect(issues({ ...base, upstreams: [{ name: 'u', transport: 'http', url: 'not a url' }] })[0]).toMatch(
      /^upstreams\[0\]\.url: /,
    );
    expect(issues({ ...base, agents: [{ agent_id: 'a', token_sha256: 'xyz' }] })[0]).toMatch(
      /^agents\[0\]\.token_sha256: /,
    );
    expect(issues({ ...base, listen: { port: 'eighty' } })[0]).toMatch(/^listen\.port: /);
    expect(issues({ ...base, surprise: 1 })[0]).toMatch(/surprise/);
    expect(issues({ ...base, upstreams: [{ name: 'u', transport: 'stdio' }] })[0]).toMatch(
      /^upstreams\[0\]\.command: /,
    );
  });
  it('software attestation requires dev mode; dev mode binds loopback only', () => {
    expect(issues({ ...base, attestation: { provider: 'software' } })).toEqual([
      'attestation.provider: `software` attests nothing and is allowed only with dev_mode: true',
    ]);
    expect(issues({ ...base, dev_mode: true, listen: { host: '0.0.0.0', port: 1 } })[0]).toMatch(
      /^listen\.host: dev_mode binds loopback only/,
    );
    expect(issues({ ...base, dev_mode: true, listen: { host: '127.0.0.1', port: 1 } })).toEqual([]);
  });
  it('requires an agent outside dev mode; refuses duplicate upstream names', () => {
    expect(issues({ ...base, agents: [] })[0]).toMatch(/^agents: /);
    const u = { name: 'u', transport: 'http', url: 'http://127.0.0.1:1/mcp' };
    expect(issues({ ...base, upstreams: [u, u] })[0]).toMatch(/^upstreams\[1\]\.name: duplicate/);
  });
  it('on_unavailable needs minimum_tier unless a hardware provider is named; required is a boolean (docs/spec/refinements.md)', () => {
    const att = base.attestation;
    // a named provider refuses start-up when unreachable: serve_unbound has an effect on its own
    expect(issues({ ...base, attestation: { ...att, on_unavailable: 'serve_unbound' } })).toEqual([]);
    expect(issues({ ...base, attestation: { provider: 'auto', on_unavailable: 'serve_unbound' } })).toEqual([
      'attestation.on_unavailable: has no effect with provider auto without attestation.minimum_tier (sessions are served unbound anyway)',
    ]);
    expect(
      issues({ ...base, attestation: { ...att, minimum_tier: 'tpm', on_unavailable: 'serve' } })[0],
    ).toMatch(/^attestation\.on_unavailable: /);
    expect(
      issues({ ...base, attestation: { ...att, minimum_tier: 'tpm', on_unavailable: 'serve_unbound' } }),
    ).toEqual([]);
    const u = { name: 'u', transport: 'http', url: 'http://127.0.0.1:1/mcp' };
    expect(issues({ ...base, upstreams: [{ ...u, required: 'yes' }] })[0]).toMatch(
      /^upstreams\[0\]\.required: /,
    );
    expect(parseConfig({ ...base, upstreams: [{ ...u, required: true }] }).upstreams[0]?.required).toBe(true);
  });
  it('a stdio env entry is a string or { value, secret } (strict: nothing else)', () => {
    const u = { name: 'u', transport: 'stdio', command: 'x' };
    const env = { PLAIN: 'a', MARKED: { value: 'b', secret: true }, UNMARKED: { value: 'c', secret: false } };
    const c = parseConfig({ ...base, upstreams: [{ ...u, env }] }).upstreams[0];
    expect(c?.transport === 'stdio' && c.env).toEqual(env);
    expect(issues({ ...base, upstreams: [{ ...u, env: { A: { value: 'b' } } }] })[0]).toMatch(
      /^upstreams\[0\]\.env\.A: /,
    );
    expect(issues({ ...base, upstreams: [{ ...u, env: { A: { value: 'b', secret: 'yes' } } }] })[0]).toMatch(
      /^upstreams\[0\]\.env\.A: /,
    );
    expect(
      issues({ ...base, upstreams: [{ ...u, env: { A: { value: 'b', secret: true, file: '/x' } } }] })[0],
    ).toMatch(/^upstreams\[0\]\.env\.A: /);
  });
  it('reports unreadable files and YAML errors with CONFIG_INVALID', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-cfg-'));
    expect(() => loadConfig(join(dir, 'missing.yaml'))).toThrow(ConfigError);
    writeFileSync(join(dir, 'bad.yaml'), 'a: [unclosed');
    try {
      loadConfig(join(dir, 'bad.yaml'));
      expect.unreachable();
    } catch (e) {
      expect((e as ConfigError).code).toBe('CONFIG_INVALID');
      expect((e as ConfigError).issues[0]).toMatch(/^YAML: /);
    }
    cleanup(dir);
  });
  it('refuses a removed environment switch that is still set, whatever its value, naming each', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-cfg-'));
    const file = join(dir, 'ok.yaml');
    writeFileSync(file, JSON.stringify(base)); // JSON is YAML
    try {
      expect(loadConfig(file, {}).database).toBe('/tmp/x.db');
      const refused = (env: NodeJS.ProcessEnv): string[] => {
        try {
          loadConfig(file, env);
        } catch (e) {
          expect((e as ConfigError).code).toBe('CONFIG_INVALID');
          return (e as ConfigError).issues;
        }
        return [];
      };
      expect(
        refused({ CMCP_GROUP_COMMIT: 'off', CMCP_CHECKPOINT_WORKER: 'off', CMCP_LOG_LEVEL: 'debug' }),
      ).toEqual([
        'environment CMCP_GROUP_COMMIT: no longer read: group commit is always on',
        'environment CMCP_CHECKPOINT_WORKER: no longer read: the WAL checkpoint thread always runs',
      ]);
      expect(refused({ CMCP_CHECKPOINT_WORKER: '' })).toHaveLength(1);
      expect(refused({ CMCP_STORE_WORKER: 'off' })[0]).toMatch(
        /^environment CMCP_STORE_WORKER: no longer read/,
      );
    } finally {
      cleanup(dir);
    }
  });
});

describe('tool names', () => {
  let up: CountingServer;
  it('a prefix setting renames (empty allowed), and a clash is refused at start-up', async () => {
    up = await startCountingServer();
    try {
      const ok = await writeConfig({
        upstreams: [
          { name: 'one', transport: 'http', url: up.url, prefix: '' },
          { name: 'two', transport: 'http', url: up.url, prefix: 'other' },
        ],
      });
      const gw = await startInProcess(ok);
      const list = await rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
      const names = list.body.result.tools.map((t: { name: string }) => t.name);
      expect(names).toContain('record');
      expect(names).toContain('other.record');
      await gw.close();
      cleanup(ok.dir);
      const clash = await writeConfig({
        upstreams: [
          { name: 'one', transport: 'http', url: up.url, prefix: 'x' },
          { name: 'two', transport: 'http', url: up.url, prefix: 'x' },
        ],
      });
      await expect(startInProcess(clash)).rejects.toThrow(/tool name clash: x\.record/);
      cleanup(clash.dir);
    } finally {
      await up.close();
    }
  });
});
