/**
 * The demo flow as an end-to-end test (README's quick start; examples/ as in docs/spec/policy.md): swtpm, the gateway with
 * the TPM provider in its own process, the example policy bundle and catalog, server-filesystem
 * and server-everything over stdio, the official SDK client, one call the policy denies, claim +
 * bundle, `cmcp verify --policy-hash --catalog-hash`. Runs `dist/demo/run.js` exactly as
 * `npm run demo` does and checks its verdict and that it leaves nothing running.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { loadCatalogFile } from '../src/catalog/catalog.js';
import { hashBundleDir } from '../src/policy/bundle.js';
import { REPO_ROOT } from './harness/gateway.js';

const run = promisify(execFile);

describe('npm run demo', () => {
  it('runs end to end and verifies hardware-unanchored or better', async () => {
    const demo = join(REPO_ROOT, 'dist', 'demo', 'run.js');
    expect(existsSync(demo), 'run `npm run build` first').toBe(true);
    const { stdout } = await run(process.execPath, [demo], { timeout: 90_000 });
    expect(stdout).toMatch(/PASS: verdict hardware-(unanchored|attested) for session [0-9a-f-]{36}/);
    expect(stdout).toContain('fs.write_file');
    expect(stdout).toContain('fs.read_text_file');
    expect(stdout).toContain('everything.echo');
    expect(stdout).toContain('"conditions":"Light rain / drizzle"');
    // One write outside the outbox, refused by the example policy's guardrail.
    expect(stdout).toMatch(
      /fs\.write_file {2}✗ #\d+ [0-9a-f]{16}… {2}POLICY_DENY by fs-writes-only-in-outbox/,
    );
    // The example policy and catalog ran, and verify pinned their hashes.
    const policyHash = hashBundleDir(join(REPO_ROOT, 'examples', 'policy'));
    const catalogHash = loadCatalogFile(join(REPO_ROOT, 'examples', 'catalog.json')).hash;
    expect(stdout).toContain(`policy hash  ${policyHash} (examples/policy, pinned with --policy-hash)`);
    expect(stdout).toContain(
      `catalog hash ${catalogHash} (examples/catalog.json, pinned with --catalog-hash)`,
    );
    expect(stdout).toContain(`claim.policy_hash       OK: policy_bundle_hash is the pinned ${policyHash}`);
    expect(stdout).toContain(`claim.catalog_hash      OK: catalog_hash is the pinned ${catalogHash}`);
    expect(stdout).toContain('"refused":1');
    // Relayed MCP (issue 10): a resource read, a prompt get and a progress tool, each in evidence.
    expect(stdout).toMatch(/resources\/read demo:\/\/\S+ {2}→ resource_read #\d+/);
    expect(stdout).toMatch(/prompts\/get everything\.simple-prompt {2}→ prompt_get #\d+/);
    expect(stdout).toMatch(
      /everything\.trigger-long-running-operation {2}→ tool_call #\d+ [0-9a-f]{16}… {2}3 progress notification\(s\) relayed \(1\/3, 2\/3, 3\/3\)/,
    );
    // The verifier's summary counts the session's entries by type.
    expect(stdout).toMatch(/Audit entries by type: .*prompt_get 1.*resource_read 1.*tool_call 6/);
    const m = /session ([0-9a-f-]{36})/.exec(stdout);
    // Nothing of this run is left behind: no gateway or swtpm naming its temp folder.
    const ps = await run('ps', ['-eo', 'pid,stat,args']);
    const tmp = /(\/tmp\/cmcp-demo-[A-Za-z0-9]+)/.exec(stdout)?.[1];
    expect(m).not.toBeNull();
    if (tmp) {
      const alive = ps.stdout.split('\n').filter((l) => l.includes(tmp) && !/\sZ/.test(l));
      expect(alive).toEqual([]);
    }
  });
});
