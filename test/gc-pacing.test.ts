/**
 * The gateway's V8 GC flags (src/gateway/gc-pacing.ts): V8 ignores an unknown flag given to
 * `v8.setFlagsFromString` without a word, so the flags must be ones this Node's V8 lists; each
 * start sets them once, and an operator's own flag for the same choice is left alone. That they
 * keep mark-compacts out of a 10,000-entry export and copying scavenges out of its close is
 * shown by `npm run bench` (loop-block).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { GC_FLAGS } from '../src/gateway/gc-pacing.js';
import { REPO_ROOT } from './harness/gateway.js';

const module = join(REPO_ROOT, 'dist', 'src', 'gateway', 'gc-pacing.js');

function paceIn(execArgv: string[]): string {
  return execFileSync(
    process.execPath,
    [
      ...execArgv,
      '--input-type=module',
      '-e',
      `const { paceGc } = await import(${JSON.stringify(module)}); console.log(JSON.stringify([paceGc(), paceGc()]));`,
    ],
    { encoding: 'utf8' },
  ).trim();
}

describe('V8 GC flags of the gateway process', () => {
  it("every flag is one this Node's V8 knows (an unknown one would be dropped silently)", () => {
    const options = execFileSync(process.execPath, ['--v8-options'], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    for (const { flag } of GC_FLAGS) {
      const name = flag.replace(/=.*$/, '').replace(/^--no-/, '--');
      expect(options.includes(`  ${name} (`), `${name} in node --v8-options`).toBe(true);
    }
  });

  it('sets them once per process; an operator flag wins for its own choice only', () => {
    const all = GC_FLAGS.map((f) => f.flag);
    const pretenuring = '--no-allocation-site-pretenuring';
    const triggers = all.filter((f) => f !== pretenuring);
    expect(JSON.parse(paceIn([]))).toEqual([all, []]);
    expect(JSON.parse(paceIn(['--incremental-marking-soft-trigger=50']))).toEqual([[pretenuring], []]);
    expect(JSON.parse(paceIn(['--allocation-site-pretenuring']))).toEqual([triggers, []]);
    expect(JSON.parse(paceIn(['--no_allocation_site_pretenuring']))).toEqual([triggers, []]);
    // Node hands single-dash flags to V8 too, and V8 reads --noflag.
    expect(JSON.parse(paceIn(['-allocation-site-pretenuring']))).toEqual([triggers, []]);
    expect(JSON.parse(paceIn(['--noallocation-site-pretenuring']))).toEqual([triggers, []]);
    expect(JSON.parse(paceIn(['-incremental-marking-hard-trigger=0']))).toEqual([[pretenuring], []]);
  });
});
