/**
 * The top self-time functions of a V8 CPU profile (`node --cpu-prof`, the `.cpuprofile` JSON of
 * the Chrome DevTools protocol: `Profiler.Profile` — nodes with `callFrame` and `hitCount`,
 * `samples`, `timeDeltas` in µs). Self time of a node is the sum of the time deltas of the
 * samples that landed in it; functions are merged by name and location. Time in a native addon
 * call (better-sqlite3: a statement, a COMMIT with its fsync) is the self time of the JS function
 * that made it; all Wasm functions together are cedar-wasm.
 *
 *   node dist/bench/cpuprofile-top.js FILE.cpuprofile [N=25]
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface CpuProfile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

export interface SelfTime {
  fn: string;
  where: string;
  selfMs: number;
  /** Share of the profile's busy (non-idle) time. */
  share: number;
}

/** Self time per function of a profile, busy time first, largest first. */
export function topSelfTime(
  file: string,
  n = 25,
): { busyMs: number; totalMs: number; wasmMs: number; top: SelfTime[] } {
  const p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((x) => [x.id, x]));
  const self = new Map<string, { fn: string; where: string; us: number }>();
  let total = 0;
  let idle = 0;
  let wasm = 0;
  p.samples.forEach((id, i) => {
    const dt = p.timeDeltas[i] ?? 0;
    total += dt;
    const node = byId.get(id);
    if (!node) return;
    const cf = node.callFrame;
    const fn = cf.functionName || '(anonymous)';
    if (fn === '(idle)') idle += dt;
    if (cf.url.startsWith('wasm://')) wasm += dt;
    const short = cf.url
      .replace(/^.*\/node_modules\//, '')
      .replace(/^.*\/dist\//, '')
      .replace(/^file:\/\//, '');
    const where = cf.url ? `${short}:${cf.lineNumber + 1}` : '';
    const key = `${fn}|${where}`;
    const e = self.get(key) ?? { fn, where, us: 0 };
    e.us += dt;
    self.set(key, e);
  });
  const busy = total - idle;
  const top = [...self.values()]
    .filter((e) => e.fn !== '(idle)')
    .sort((a, b) => b.us - a.us)
    .slice(0, n)
    .map((e) => ({ fn: e.fn, where: e.where, selfMs: e.us / 1000, share: busy > 0 ? e.us / busy : 0 }));
  return { busyMs: busy / 1000, totalMs: total / 1000, wasmMs: wasm / 1000, top };
}

/** The table as fixed-width text. */
export function formatTop(top: SelfTime[]): string {
  return top
    .map(
      (t) =>
        `${(t.share * 100).toFixed(1).padStart(5)} %  ${t.selfMs.toFixed(0).padStart(7)} ms  ${t.fn}  ${t.where}`,
    )
    .join('\n');
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const file = process.argv[2];
  if (!file) {
    process.stderr.write('usage: cpuprofile-top FILE.cpuprofile [N]\n');
    process.exit(2);
  }
  const r = topSelfTime(file, Number(process.argv[3] ?? 25));
  process.stdout.write(
    `busy ${r.busyMs.toFixed(0)} ms of ${r.totalMs.toFixed(0)} ms sampled\n${formatTop(r.top)}\n`,
  );
}
