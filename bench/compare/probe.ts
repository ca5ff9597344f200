/**
 * Preloaded (`node --import …/probe.js`, or through NODE_OPTIONS) into every Node process the
 * comparison starts, so that each subject is measured the same way from inside:
 *
 * - on SIGUSR2 it writes `probe-<pid>.json` into `CMCP_BENCH_PROBE_DIR`: `process.cpuUsage()`
 *   (µs, user and system, since start), `process.memoryUsage()` (bytes) and the event-loop
 *   delay histogram (`perf_hooks.monitorEventLoopDelay`, ns) since the previous SIGUSR2, which
 *   it then resets;
 * - with `CMCP_BENCH_PROBE_SAMPLE_MS` set, it appends one such line every that many ms to
 *   `samples-<pid>.jsonl` (the memory mode of bench/run.ts);
 * - loopback only: a server asked to listen on a port with no host (supergateway does) listens
 *   on 127.0.0.1, since benches here never bind other interfaces.
 */
import { appendFileSync, writeFileSync } from 'node:fs';
import { Server } from 'node:net';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const dir = process.env.CMCP_BENCH_PROBE_DIR;

const listen = Server.prototype.listen as (this: Server, ...a: unknown[]) => Server;
Server.prototype.listen = function (this: Server, ...args: unknown[]): Server {
  if (typeof args[0] === 'number' && (args.length === 1 || typeof args[1] === 'function'))
    return listen.call(this, args[0], '127.0.0.1', ...args.slice(1));
  return listen.apply(this, args);
} as typeof Server.prototype.listen;

if (dir) {
  const eld = monitorEventLoopDelay({ resolution: 10 });
  eld.enable();
  const snapshot = () => ({
    pid: process.pid,
    at_ms: Date.now(),
    cpu_us: process.cpuUsage(),
    memory: process.memoryUsage(),
    eld_ns: { p50: eld.percentile(50), p99: eld.percentile(99), max: eld.max, count: eld.count },
  });
  process.on('SIGUSR2', () => {
    writeFileSync(join(dir, `probe-${process.pid}.json`), JSON.stringify(snapshot()));
    eld.reset();
  });
  const every = Number(process.env.CMCP_BENCH_PROBE_SAMPLE_MS ?? 0);
  if (every > 0)
    setInterval(() => {
      appendFileSync(join(dir, `samples-${process.pid}.jsonl`), `${JSON.stringify(snapshot())}\n`);
    }, every).unref();
}
