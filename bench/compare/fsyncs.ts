/**
 * fsyncs per call of a subject's process, counted with `strace -f -c -e trace=fsync,fdatasync`
 * attached to it (all its threads) for a fixed number of calls. A pass of its own, after the
 * timed windows: ptrace slows the traced process, so no latency is taken while it is attached.
 */
import { spawn, spawnSync } from 'node:child_process';
import type { Subject } from './subjects.js';

/** True when strace can be run here. */
export function straceAvailable(): boolean {
  return spawnSync('strace', ['-V'], { stdio: 'ignore' }).status === 0;
}

/**
 * Counts fsync + fdatasync calls of `s.pid` over `calls` calls, `concurrency` at a time.
 * @returns fsyncs per call, or null when strace could not attach.
 */
export async function fsyncsPerCall(
  s: Subject,
  tool: 'noop' | 'blob',
  calls: number,
  counter: { i: number },
  concurrency = 16,
) {
  const st = spawn('strace', ['-f', '-c', '-e', 'trace=fsync,fdatasync', '-p', String(s.pid)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let err = '';
  st.stderr.on('data', (d) => {
    err += d;
  });
  // Wait until strace says it attached.
  const deadline = Date.now() + 5000;
  while (!/attached/.test(err) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  if (!/attached/.test(err)) {
    st.kill('SIGKILL');
    return null;
  }
  let done = 0;
  const worker = async () => {
    while (done < calls) {
      done += 1;
      await s.call(tool, counter.i++);
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const exited = new Promise((r) => st.once('exit', r));
  st.kill('SIGINT');
  await exited;
  let n = 0;
  for (const m of err.matchAll(/^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)\s*$/gm))
    n += Number(m[1]);
  return n / done;
}
