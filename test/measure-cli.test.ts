/**
 * `cmcp measure` (docs/attestation.md#reference-values-for-a-release-cmcp-measure) on this checkout's build: what it prints and writes agrees
 * with the gateway's own start-up measurement (a real gateway in this process, same config), the
 * reference values file loads in the verifier, and bad input exits 2 with one line.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { loadReferenceValues } from '@cmcp/verify';
import { afterAll, describe, expect, it } from 'vitest';
import { cleanup, REPO_ROOT, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

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

const configs: TestConfig[] = [];
afterAll(() => {
  for (const c of configs) cleanup(c.dir);
});

describe('cmcp measure', () => {
  it('prints the digest the gateway measures at start-up with the same config (policy and catalog included)', async () => {
    const cfg = await writeConfig({
      extra: {
        policy: { bundle: join(REPO_ROOT, 'examples', 'policy') },
        catalog: { file: join(REPO_ROOT, 'examples', 'catalog.json'), relist_interval_s: 0 },
      },
      agents: [{ agent_id: 'alice', token: 'alice-token', attributes: { team: 'eng', roles: ['writer'] } }],
    });
    configs.push(cfg);
    const out = join(cfg.dir, 'rv.yaml');
    const r = await cmcp('measure', '--config', cfg.file, '--json', '--out', out);
    expect(r.code, r.stderr).toBe(0);
    const printed = JSON.parse(r.stdout);
    const gw = await startInProcess(cfg);
    try {
      expect(printed.measurement).toEqual({
        version: 1,
        digest: gw.facts.gatewayMeasurement,
        inputs: expect.objectContaining({
          policy_bundle_hash: gw.facts.policyBundleHash,
          catalog_hash: gw.facts.catalogHash,
        }),
      });
    } finally {
      await gw.close();
    }
    // software provider: no measurement PCR, so the file pins the digest only
    expect(printed.measurement_pcr).toBeNull();
    const rv = loadReferenceValues(out);
    expect(rv.gateway?.measurements).toEqual([printed.measurement.digest]);
    expect(rv.tpm).toBeUndefined();
    expect(readFileSync(out, 'utf8')).toMatch(/^# Reference values written by `cmcp measure` for cmcp@/);
  });

  it('TPM config: the measurement PCR value SHA-256(0³² ‖ digest) in the text and the file; --no-pcr-pin leaves it out', async () => {
    const cfg = await writeConfig({
      attestation: { provider: 'tpm', tcti: 'swtpm:host=127.0.0.1,port=1', measurement_pcr: 16 },
    });
    configs.push(cfg);
    const out = join(cfg.dir, 'rv.yaml');
    const r = await cmcp('measure', '-c', cfg.file, '--out', out);
    expect(r.code, r.stderr).toBe(0);
    const digest = /^gateway_measurement\s+sha256:([0-9a-f]{64})$/m.exec(r.stdout)?.[1];
    expect(digest).toBeDefined();
    const pcr = createHash('sha256')
      .update(Buffer.alloc(32))
      .update(Buffer.from(digest ?? '', 'hex'))
      .digest('hex');
    expect(r.stdout).toContain(`16 (sha256) = ${pcr} after one extend from reset`);
    expect(loadReferenceValues(out).tpm?.pcrs).toEqual({ '16': [pcr] });
    const unpinned = join(cfg.dir, 'rv-unpinned.yaml');
    expect((await cmcp('measure', '-c', cfg.file, '--out', unpinned, '--no-pcr-pin')).code).toBe(0);
    const rv = loadReferenceValues(unpinned);
    expect(rv.tpm).toBeUndefined();
    expect(rv.gateway?.measurements).toEqual([`sha256:${digest}`]);
  });

  it('an invalid config, a missing policy bundle or an unwritable --out: exit 2, one message, no stack', async () => {
    const cfg = await writeConfig({ extra: { policy: { bundle: '/nonexistent/policy' } } });
    configs.push(cfg);
    for (const args of [
      ['measure', '--config', join(cfg.dir, 'missing.yaml')],
      ['measure', '--config', cfg.file],
      ['measure'],
    ]) {
      const r = await cmcp(...args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
    const good = await writeConfig({});
    configs.push(good);
    const r = await cmcp('measure', '--config', good.file, '--out', '/nonexistent/dir/rv.yaml');
    expect(r.code).toBe(2);
    expect(r.stderr).toBe('cmcp measure: cannot write /nonexistent/dir/rv.yaml (ENOENT)\n');
    // A --package-root that is not a cmcp package measures nothing: refused, nothing written.
    const out = join(good.dir, 'rv.yaml');
    for (const root of ['/nonexistent', good.dir]) {
      const bad = await cmcp('measure', '--config', good.file, '--package-root', root, '--out', out);
      expect(bad.code, root).toBe(2);
      expect(bad.stderr).toContain('is not a cmcp package');
      expect(existsSync(out)).toBe(false);
    }
  });
});
