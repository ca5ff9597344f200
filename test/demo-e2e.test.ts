/**
 * The demo flow as an end-to-end test (issue 2 item 12): swtpm, the gateway with the TPM
 * provider in its own process, server-filesystem and server-everything over stdio, the
 * official SDK client, claim + bundle, `cmcp verify`. Runs `dist/demo/run.js` exactly as
 * `npm run demo` does and checks its verdict and that it leaves nothing running.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
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
