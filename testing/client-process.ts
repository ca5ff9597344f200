/**
 * An HTTP client in another process, for measuring the gateway's event loop alone: the child
 * is started first and waits for a line on its stdin, so that neither its start (a fork and
 * exec) nor its reading of a large answer runs on the process being measured.
 */
import { type ChildProcess, spawn } from 'node:child_process';

/** A started client process waiting to run its script. */
export interface WaitingClient<T> {
  /** Lets the script run; resolves with the JSON it writes to stdout. */
  go(): Promise<T>;
}

/**
 * Starts `script` (an ES module body: top-level await, `fetch`, `node:` imports) in another
 * Node process; it runs once {@link WaitingClient.go} is called and must write one JSON value
 * to stdout. Resolves once the child is running and waiting.
 */
export async function startClient<T>(script: string): Promise<WaitingClient<T>> {
  const wrapped = `await new Promise((r) => process.stdin.once('data', r));
    process.stdin.destroy();
    ${script}`;
  const p: ChildProcess = spawn(process.execPath, ['--input-type=module', '-e', wrapped], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  let out = '';
  p.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const done = new Promise<T>((resolve, reject) => {
    p.on('error', reject);
    p.on('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out) as T) : reject(new Error(`client exit ${code}`)),
    );
  });
  await new Promise((resolve, reject) => {
    p.once('spawn', resolve);
    p.once('error', reject);
  });
  // The module is loaded and waiting once a short while has passed; starting early only means
  // the child's own start-up overlaps the measurement's first milliseconds in another process.
  await new Promise((resolve) => setTimeout(resolve, 300));
  return {
    go: () => {
      p.stdin?.write('go\n');
      return done;
    },
  };
}
