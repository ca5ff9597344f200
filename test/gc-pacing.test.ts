/**
 * The gateway's V8 marking triggers (src/gateway/gc-pacing.ts): V8 ignores an unknown flag
 * given to `v8.setFlagsFromString` without a word, so the flags must be ones this Node's V8
 * lists; each start sets them once, and an operator's own trigger flag is left alone. That they
 * keep mark-compacts out of a 10,000-entry export is shown by `npm run bench` (loop-block).
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { MARKING_FLAGS } from '../src/gateway/gc-pacing.js';
import { REPO_ROOT } from './harness/gateway.js';

const module = join(REPO_ROOT, 'dist', 'src', 'gateway', 'gc-pacing.js');

function paceIn(execArgv: string[]): string {
  return execFileSync(
    process.execPath,
    [
      ...execArgv,
      '--input-type=module',
      '-e',
      `const { paceMarking } = await import(${JSON.stringify(module)}); console.log(JSON.stringify([paceMarking(), paceMarking()]));`,
    ],
    { encoding: 'utf8' },
  ).trim();
}

describe('V8 marking triggers of the gateway process', () => {
  it("every flag is one this Node's V8 knows (an unknown one would be dropped silently)", () => {
    const options = execFileSync(process.execPath, ['--v8-options'], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    for (const flag of MARKING_FLAGS) {
      const name = flag.replace(/=.*$/, '');
      expect(options.includes(`  ${name} (`), `${name} in node --v8-options`).toBe(true);
    }
  });

  it('sets them once per process; a trigger flag on the command line wins', () => {
    expect(paceIn([])).toBe('[true,false]');
    expect(paceIn(['--incremental-marking-soft-trigger=50'])).toBe('[false,false]');
  });
});
