/**
 * One build per checkout (scripts/checkout-lock.sh): while `npm run demo` holds the checkout,
 * `npm test` and a second demo started in it say who holds the build and exit 1 at once, before
 * any setup or rebuild; once the holder ends, the lock is free again. The real scripts, with a
 * stand-in holder that takes the lock exactly as scripts/demo.sh does (never the real setup).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { REPO_ROOT } from './harness/gateway.js';

/** The environment without a lock inherited from an enclosing `npm test`. */
function env(): NodeJS.ProcessEnv {
  const e = { ...process.env };
  delete e.CMCP_CHECKOUT_LOCK_PID;
  return e;
}

const HOLD = 'source scripts/checkout-lock.sh; cmcp_hold_checkout "npm run demo"; echo held; sleep 60 9>&-';

/** Starts the stand-in holder; resolves once it holds the lock (or with the refusal, when held already). */
function holder(): Promise<{ proc: ChildProcess; held: boolean; err: string }> {
  const proc = spawn('bash', ['-c', HOLD], {
    cwd: REPO_ROOT,
    env: env(),
    detached: true, // its own process group: the shell and its sleep end together
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  proc.stderr?.on('data', (d: Buffer) => {
    err += d.toString();
  });
  return new Promise((ok) => {
    proc.stdout?.on('data', (d: Buffer) => {
      if (d.toString().includes('held')) ok({ proc, held: true, err });
    });
    proc.on('exit', () => ok({ proc, held: false, err }));
  });
}

/** Ends the holder's process group (the shell and its sleep). */
function stop(p: ChildProcess): void {
  try {
    if (p.pid) process.kill(-p.pid, 'SIGTERM');
  } catch {
    // already gone
  }
}

let running: ChildProcess | null = null;
afterEach(() => {
  if (running?.pid && running.exitCode === null) stop(running);
  running = null;
});

describe('the checkout build lock', () => {
  it('a second command in the same checkout says who holds the build and exits 1 without rebuilding', async () => {
    const h = await holder();
    running = h.proc;
    // Under an enclosing `npm test` the lock is already that run's: the holder is refused the same way.
    const holderName = h.held ? '`npm run demo`' : '`npm test`';
    if (!h.held) expect(h.err).toMatch(/npm run demo: not started: `npm test` \(pid \d+/);
    for (const script of ['scripts/test.sh', 'scripts/demo.sh']) {
      const started = Date.now();
      const r = spawnSync('bash', [script], {
        cwd: REPO_ROOT,
        env: env(),
        encoding: 'utf8',
        timeout: 30_000,
      });
      expect(r.status, `${script}: ${r.stdout}${r.stderr}`).toBe(1);
      const what = script.endsWith('test.sh') ? 'npm test' : 'npm run demo';
      expect(r.stderr).toContain(`${what}: not started: ${holderName} (pid `);
      expect(r.stderr).toContain('holds the build of this checkout');
      expect(r.stderr).toContain('run this after it ends');
      expect(r.stdout).not.toContain('setup:'); // refused before any setup step
      expect(Date.now() - started).toBeLessThan(10_000);
    }
    if (!h.held) return;
    // The holder ends: the lock is free for the next one.
    const exited = new Promise((r) => h.proc.once('exit', r));
    stop(h.proc);
    await exited;
    const next = await holder();
    running = next.proc;
    expect(next.held, next.err).toBe(true);
  });
});
