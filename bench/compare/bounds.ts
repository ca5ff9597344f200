/**
 * The "What bounds cmcp full" section of BENCHMARKS.md (issue 12 item 3: where a target is
 * missed, by how much and what bounds it, with a CPU profile), from a comparison's own numbers
 * and the saved CPU profiles of this build.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { REPO_ROOT } from '../load/profile.js';
import type { CompareResult } from './run.js';

const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '–');

/**
 * What bounds cmcp full, by how much each target is missed, from this run's own numbers and the
 * saved profiles of this build (bench/results/profile-current-http-c{1,64}.json): at concurrency 1 a call's added latency is
 * the gateway's serial work (its CPU per call and its commits); at concurrency 64 the gateway's
 * one event-loop thread shares the machine's two cores with the client and the upstream, so
 * calls/s follows CPU per call.
 */
export function bounds(r: CompareResult): string {
  const fs = r.fsyncsPerCall;
  const row = (transport: string, c: number, subject: string) =>
    r.summary.find(
      (x) => x.transport === transport && x.tool === 'noop' && x.concurrency === c && x.subject === subject,
    );
  const med = (v: { median: number } | undefined) => v?.median ?? Number.NaN;
  const commit = r.diskFsyncMs.before.median;
  const lines: string[] = [];
  const h1 = row('http', 1, 'cmcp-full');
  const d1 = row('http', 1, 'direct');
  const sg1 = row('stdio', 1, 'supergateway');
  const s1 = row('stdio', 1, 'cmcp-full');
  lines.push(
    `**Concurrency 1 (added p50 ≤ 0.5 ms, p99 ≤ 2 ms): missed by ${f(med(h1?.addedP50Ms) - 0.5)} ms at p50 over HTTP (${f(med(s1?.addedP50Ms) - 0.5)} over stdio).** With one caller nothing overlaps: a call's added latency is the gateway's own work on it, end to end. That work is ${f(med(h1?.cpuPerCallUs), 0)} µs of gateway CPU per call over HTTP (the process's, all threads) (min ${f(h1?.cpuPerCallUs.min ?? Number.NaN, 0)}), ${f(med(s1?.cpuPerCallUs), 0)} over stdio, against ${f(med(d1?.cpuPerCallUs), 0)} µs that the upstream itself spends on the call (the direct row): over HTTP cmcp is a Streamable HTTP server to the client and a Streamable HTTP client to the upstream, and the upstream's own CPU per call is what one of those two sides costs on this Node stack, before any evidence or policy. On top of it come two commits that cannot overlap: the attempt record must be durable before the upstream is called and the terminal entry before the answer is sent (issue 11 item 1, synchronous=FULL), each at least the ${f(commit)} ms at p50 that a 4 KB write and fdatasync take on this disk (a commit writes a call's pages to the WAL first). The lightest peer shows the same floor: supergateway, which keeps no record and checks no policy, adds ${f(med(sg1?.addedP50Ms), 3)} ms at p50 over stdio by itself.${profileShares('current-http-c1')}`,
  );
  const h64 = row('http', 64, 'cmcp-full');
  const l64 = row('http', 64, 'cmcp-light');
  const d64 = row('http', 64, 'direct');
  const busy = (x: typeof h64) => (med(x?.callsPerSecond) * med(x?.cpuPerCallUs)) / 1e6;
  lines.push(
    `**Concurrency 64 over HTTP (≥ 50 % of direct): ${f(med(h64?.throughputRatio) * 100, 0)} %, missed by ${f(50 - med(h64?.throughputRatio) * 100, 0)} points.** The gateway process spends ${f(med(h64?.cpuPerCallUs), 0)} µs of CPU per call (min ${f(h64?.cpuPerCallUs.min ?? Number.NaN, 0)}; all its threads, the event loop's the most of it); at ${f(med(h64?.callsPerSecond), 0)} calls/s that is ${f(busy(h64), 2)} of a core, while the client and the upstream take the rest of the two cores. cmcp light, at ${f(med(l64?.cpuPerCallUs), 0)} µs per call, reaches ${f(med(l64?.throughputRatio) * 100, 0)} %: 50 % of direct (${f(med(d64?.callsPerSecond) / 2, 0)} calls/s here) needs cmcp full at or below light's CPU per call. Where the full profile's extra time goes is in the profiles below: Cedar, the store's transactions, hashing, the HTTP server and the upstream client.${profileShares('current-http-c64')}`,
  );
  const sg64 = row('stdio', 64, 'supergateway');
  const f64 = row('stdio', 64, 'cmcp-full');
  const li64 = row('stdio', 64, 'cmcp-light');
  lines.push(
    `**Against supergateway over stdio:** cmcp light spends ${f(med(li64?.cpuPerCallUs), 0)} µs per call at concurrency 64 against supergateway's ${f(med(sg64?.cpuPerCallUs), 0)}, and cmcp full ${f(med(f64?.cpuPerCallUs), 0)}: the evidence (the attempt record and the terminal entry, their hashes and their commit), the Cedar decision and the catalog check are the difference. Within 20 % of supergateway needs cmcp full at about ${f(med(sg64?.cpuPerCallUs) * 1.25, 0)} µs per call. At concurrency 1 and 16 every subject that serves Streamable HTTP is bounded the same way as above; cmcp light is slower than supergateway there by the per-call work its HTTP server, its session and its record keeping add.`,
  );
  lines.push(
    `Commits: cmcp full makes ${f(fs['cmcp-full/http'] ?? Number.NaN)} (HTTP) / ${f(fs['cmcp-full/stdio'] ?? Number.NaN)} (stdio) fsyncs per call at concurrency 16 and cmcp light ${f(fs['cmcp-light/http'] ?? Number.NaN)} / ${f(fs['cmcp-light/stdio'] ?? Number.NaN)}: group commit (store/sqlite/group-commit.ts) lets the writes queued in one event-loop turn share one \`BEGIN IMMEDIATE\` transaction and one fsync (p50 ${f(commit)} ms, p90 ${f(r.diskFsyncMs.before.p90)} ms before the run, ${f(r.diskFsyncMs.after.median)} ms after), so once calls overlap the disk is not what bounds calls/s; its effect, off and on side by side, is in "Group commit" below (a separate run).`,
  );
  return lines.join('\n\n');
}

/**
 * One sentence on a saved profile (bench/results/profile-<label>.json): main-thread time per call
 * inside SQLite transactions and inside cedar-wasm; empty when the profile is not saved.
 */
function profileShares(label: string): string {
  const file = join(REPO_ROOT, 'bench', 'results', `profile-${label}.json`);
  if (!existsSync(file)) return '';
  const p = JSON.parse(readFileSync(file, 'utf8')) as {
    calls: number;
    busyMs: number;
    sqliteShare: number;
    wasmShare: number;
  };
  const perCall = (share: number) => f((share * p.busyMs * 1000) / p.calls, 0);
  return ` In this build's CPU profile of the same cell ("${label}" below; the profiler slows the gateway, so read the split, not the totals), the main thread spends ${perCall(p.sqliteShare)} µs per call as self time of better-sqlite3's transaction function (the statements, the COMMIT and the wait for its fsync) and ${perCall(p.wasmShare)} µs in cedar-wasm, of ${f((p.busyMs * 1000) / p.calls, 0)} µs busy (start-up included).`;
}
