/**
 * Another OS process holding a database's write lock (BEGIN IMMEDIATE through its own
 * better-sqlite3 connection), for tests of what the gateway does meanwhile.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { REPO_ROOT } from './gateway.js';

/** Another OS process holds BEGIN IMMEDIATE on `file` until `holdMs` passed or it reads a line. */
export function holdLock(
  file: string,
  holdMs: number,
): { proc: ChildProcess; held: Promise<void>; released: Promise<void> } {
  const script = `
    import Database from 'better-sqlite3';
    const db = new Database(${JSON.stringify(file)});
    db.pragma('busy_timeout = 10000');
    db.exec('BEGIN IMMEDIATE');
    db.prepare("INSERT INTO instances VALUES ('lock-holder', 0, 'h', 'now', 0) ON CONFLICT DO NOTHING").run();
    process.stdout.write('held\\n');
    const release = () => { db.exec('COMMIT'); db.close(); process.stdout.write('released\\n'); process.exit(0); };
    setTimeout(release, ${holdMs});
    process.stdin.once('data', release);
  `;
  const proc = spawn(process.execPath, ['--input-type=module', '-e', script], {
    cwd: REPO_ROOT,
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  // A release line written as the holder exits after its own timeout (or after the line it
  // already read) meets a closed pipe: that EPIPE means the lock is already released.
  proc.stdin?.on('error', () => {});
  let out = '';
  const seen = (word: string) =>
    new Promise<void>((res, rej) => {
      const check = () => out.includes(word) && res();
      proc.stdout?.on('data', (d) => {
        out += String(d);
        check();
      });
      proc.once('exit', () =>
        out.includes(word) ? res() : rej(new Error(`lock holder exited before ${word}`)),
      );
    });
  return { proc, held: seen('held'), released: seen('released') };
}
