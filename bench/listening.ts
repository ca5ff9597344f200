/**
 * Children of the bench that print `listening <port>` once they serve (the comparison's
 * upstream, the load profile's HTTP upstream, the TCP relay): spawned, and their port awaited.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { basename } from 'node:path';

/**
 * Spawns `node` with `args` (the script first) and resolves the port it prints, its stdout then
 * drained. @throws (rejects) Error when the child exits first, or after 30 s.
 */
export async function spawnListening(
  node: string,
  args: string[],
  env?: NodeJS.ProcessEnv,
): Promise<{ proc: ChildProcess; port: number }> {
  const proc = spawn(node, args, { stdio: ['ignore', 'pipe', 'inherit'], ...(env ? { env } : {}) });
  const name = basename(args[0] ?? node);
  const port = await new Promise<number>((ok, fail) => {
    let out = '';
    const t = setTimeout(() => fail(new Error(`${name} did not start in 30 s`)), 30_000);
    proc.once('exit', (c) => fail(new Error(`${name} exited ${c}: ${out}`)));
    proc.stdout?.on('data', (d) => {
      out += d;
      const m = /listening (\d+)/.exec(out);
      if (m) {
        clearTimeout(t);
        ok(Number(m[1]));
      }
    });
  });
  proc.removeAllListeners('exit');
  proc.stdout?.resume();
  return { proc, port };
}
