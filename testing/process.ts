/**
 * Small process and port helpers shared by the swtpm control, the test harness and the demo.
 * Loopback only.
 */
import type { ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';

/** A TCP port that was free on 127.0.0.1 a moment ago (the OS picks it; another process may take it). */
export function freeLoopbackPort(): Promise<number> {
  return new Promise((ok, fail) => {
    const srv = createServer();
    srv.once('error', fail);
    srv.listen(0, '127.0.0.1', () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => ok(port));
    });
  });
}

/** True once `child` has exited or was killed by a signal. */
export function exited(child: ChildProcess): boolean {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Resolves true when `child` exits within `ms` milliseconds (at once if it already has), else false. */
export function waitExit(child: ChildProcess, ms: number): Promise<boolean> {
  if (exited(child)) return Promise.resolve(true);
  return new Promise((ok) => {
    const t = setTimeout(() => ok(false), ms);
    child.once('exit', () => {
      clearTimeout(t);
      ok(true);
    });
  });
}
