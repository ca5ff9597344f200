/**
 * The top self-time functions of a V8 CPU profile (`node --cpu-prof`, the `.cpuprofile` JSON of
 * the Chrome DevTools protocol: `Profiler.Profile` — nodes with `callFrame` and `hitCount`,
 * `samples`, `timeDeltas` in µs). Self time of a node is the sum of the time deltas of the
 * samples that landed in it; functions are merged by name and location. Time in a native addon
 * call (better-sqlite3: a statement, a COMMIT with its fsync) is the self time of the JS function
 * that made it; all Wasm functions together are cedar-wasm.
 *
 *   node dist/bench/cpuprofile-top.js FILE.cpuprofile [N=25]   (self time, then total time)
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: number[];
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

function frameOf(node: ProfileNode): { fn: string; where: string; key: string } {
  const cf = node.callFrame;
  const fn = cf.functionName || '(anonymous)';
  const short = cf.url
    .replace(/^.*\/node_modules\//, '')
    .replace(/^.*\/dist\//, '')
    .replace(/^file:\/\//, '');
  const where = cf.url ? `${short}:${cf.lineNumber + 1}` : '';
  return { fn, where, key: `${fn}|${where}` };
}

/**
 * Self time per function of a profile, busy time first, largest first; and total (inclusive)
 * time: the time of the samples with the function anywhere on their stack, each sample counted
 * once per function however deep it recurses.
 */
export function topSelfTime(
  file: string,
  n = 25,
): { busyMs: number; totalMs: number; wasmMs: number; top: SelfTime[]; topTotal: SelfTime[] } {
  const p = JSON.parse(readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(p.nodes.map((x) => [x.id, x]));
  const parent = new Map<number, number>();
  for (const x of p.nodes) for (const c of x.children ?? []) parent.set(c, x.id);
  const self = new Map<string, { fn: string; where: string; us: number }>();
  const incl = new Map<string, { fn: string; where: string; us: number }>();
  const add = (m: typeof self, f: { fn: string; where: string; key: string }, dt: number) => {
    const e = m.get(f.key) ?? { fn: f.fn, where: f.where, us: 0 };
    e.us += dt;
    m.set(f.key, e);
  };
  let total = 0;
  let idle = 0;
  let wasm = 0;
  p.samples.forEach((id, i) => {
    const dt = p.timeDeltas[i] ?? 0;
    total += dt;
    const node = byId.get(id);
    if (!node) return;
    const f = frameOf(node);
    if (f.fn === '(idle)') idle += dt;
    if (node.callFrame.url.startsWith('wasm://')) wasm += dt;
    add(self, f, dt);
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const a = byId.get(at);
      if (!a) break;
      const af = frameOf(a);
      if (seen.has(af.key)) continue;
      seen.add(af.key);
      add(incl, af, dt);
    }
  });
  const busy = total - idle;
  const rank = (m: typeof self) =>
    [...m.values()]
      .filter((e) => e.fn !== '(idle)' && e.fn !== '(root)')
      .sort((a, b) => b.us - a.us)
      .slice(0, n)
      .map((e) => ({ fn: e.fn, where: e.where, selfMs: e.us / 1000, share: busy > 0 ? e.us / busy : 0 }));
  return {
    busyMs: busy / 1000,
    totalMs: total / 1000,
    wasmMs: wasm / 1000,
    top: rank(self),
    topTotal: rank(incl),
  };
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
    `busy ${r.busyMs.toFixed(0)} ms of ${r.totalMs.toFixed(0)} ms sampled\nself time\n${formatTop(r.top)}\ntotal time\n${formatTop(r.topTotal)}\n`,
  );
}
