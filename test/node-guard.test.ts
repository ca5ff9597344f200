/**
 * bin/cmcp on a Node older than 22.12 (native modules built for Node 24 would crash it): a copy
 * of bin/ and scripts/ without .runtime/, run with the machine's own Node first on PATH, exits 2
 * with one line naming the Node it found. Skipped, visibly, where the machine's Node is new enough.
 */
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';

const SYSTEM_PATH = '/usr/local/bin:/usr/bin:/bin';
const systemNode = spawnSync('node', ['-p', 'process.versions.node'], {
  env: { PATH: SYSTEM_PATH },
  encoding: 'utf8',
});
const version = systemNode.status === 0 ? systemNode.stdout.trim() : null;
const [major = 0, minor = 0] = (version ?? '0.0').split('.').map(Number);
const old = version !== null && (major < 22 || (major === 22 && minor < 12));
if (!old)
  console.warn(
    `\n*** SKIPPING node-guard: the machine's Node (${version ?? 'none'}) is not older than 22.12 ***\n`,
  );

describe.skipIf(!old)('bin/cmcp on an old Node', () => {
  it('refuses with exit 2 and names the Node it found', () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-node-guard-'));
    try {
      cpSync(join(REPO_ROOT, 'bin'), join(dir, 'bin'), { recursive: true });
      cpSync(join(REPO_ROOT, 'scripts'), join(dir, 'scripts'), { recursive: true });
      const r = spawnSync('bash', [join(dir, 'bin', 'cmcp'), '--version'], {
        env: { PATH: SYSTEM_PATH, HOME: dir },
        encoding: 'utf8',
      });
      expect(r.status).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toContain(`Node.js 22.12 or newer is required (found v${version})`);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
