/**
 * `npm run bench -- --cpu-side-by-side --cmcp-root DIR [--db-dir /dev/shm] [--calls REPS]`:
 * gateway CPU per call (`process.cpuUsage()` of the gateway, all threads, read through the probe)
 * of two builds of cmcp full side by side — the build in DIR ("before") and this checkout's
 * ("after") — each with its own HTTP upstream, swtpm and database, driven by the same client.
 * Each repetition runs one window per build and cell (noop calls at concurrency 16 and 64, HTTP
 * and stdio upstreams), the two builds' order alternating between repetitions, and records the
 * 1-minute load average beside each pair (after one unrecorded warm-up window per gateway). On a shared machine latency says little; CPU per call
 * moves less, and the pair taken at the same moment is the comparison (issue 12 items 3–4).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runWindow } from './compare/measure.js';
import {
  connectSubject,
  type Env,
  type Fleet,
  type Subject,
  startFleet,
  type Transport,
} from './compare/subjects.js';

export interface SideBySideCell {
  concurrency: number;
  transport: Transport;
  /** µs of gateway CPU per noop call, one per repetition. */
  before: number[];
  after: number[];
  /** 1-minute load average when each repetition's pair ran. */
  load: number[];
}

const load1 = () => Number(readFileSync('/proc/loadavg', 'utf8').split(' ')[0]);
const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? (s[m] as number) : ((s[m - 1] as number) + (s[m] as number)) / 2;
};

/** Runs the comparison (module doc). @throws when a gateway does not start or a window fails. */
export async function runCpuSideBySide(
  before: Env,
  after: Env,
  o: { reps: number; windowMs: number; warmMs: number; concurrencies: number[]; transports: Transport[] },
): Promise<SideBySideCell[]> {
  const fleets: Fleet[] = [];
  const subjects = new Map<string, Subject>();
  try {
    for (const [tag, env] of [
      ['before', before],
      ['after', after],
    ] as const) {
      const fleet = await startFleet(env, ['cmcp-full']);
      fleets.push(fleet);
      for (const t of o.transports)
        subjects.set(`${tag}/${t}`, await connectSubject(env, fleet, 'cmcp-full', t));
    }
    const cells: SideBySideCell[] = [];
    for (const concurrency of o.concurrencies)
      for (const transport of o.transports)
        cells.push({ concurrency, transport, before: [], after: [], load: [] });
    const counter = { i: 0 };
    // One unrecorded window per gateway and upstream first: the first repetition would otherwise
    // carry the JIT's warm-up and the first session rotation.
    for (const [key, s] of subjects) {
      const probeDir = (key.startsWith('before') ? before : after).probeDir;
      await runWindow(s, { tool: 'noop', concurrency: 64, warmMs: 0, ms: 1500, probeDir }, counter);
    }
    for (let rep = 0; rep < o.reps; rep++) {
      for (const cell of cells) {
        cell.load.push(load1());
        const order = rep % 2 === 0 ? (['before', 'after'] as const) : (['after', 'before'] as const);
        for (const tag of order) {
          const s = subjects.get(`${tag}/${cell.transport}`) as Subject;
          const env = tag === 'before' ? before : after;
          const w = await runWindow(
            s,
            {
              tool: 'noop',
              concurrency: cell.concurrency,
              warmMs: o.warmMs,
              ms: o.windowMs,
              probeDir: env.probeDir,
            },
            counter,
          );
          if (w.errors) throw new Error(`${tag} ${cell.transport} c=${cell.concurrency}: ${w.firstError}`);
          cell[tag].push(Math.round(w.cpuPerCallUs));
        }
      }
      console.log(`repetition ${rep + 1} of ${o.reps} done`);
    }
    return cells;
  } finally {
    for (const s of subjects.values()) await s.close();
    for (const f of fleets) await f.stop();
  }
}

/** The cells as a Markdown table: per repetition, min, median, and how often "after" was lower. */
export function sideBySideTable(cells: SideBySideCell[]): string {
  const rows = cells.map((c) => {
    const lower = c.before.filter((b, i) => (c.after[i] as number) < b).length;
    return `| ${c.concurrency} | ${c.transport} | ${c.before.join(' ')} | ${c.after.join(' ')} | ${Math.min(...c.before)} → ${Math.min(...c.after)} | ${median(c.before)} → ${median(c.after)} | ${lower} of ${c.before.length} | ${Math.min(...c.load).toFixed(1)}–${Math.max(...c.load).toFixed(1)} |`;
  });
  return [
    '| c | upstream | before, µs per call | after, µs per call | min | median | after lower | load 1 min |',
    '|---:|---|---|---|---|---|---:|---|',
    ...rows,
  ].join('\n');
}

/** Both builds' environments: their own folders under `dir`, the same node and probe. */
export function sideBySideEnvs(base: Env, beforeDist: string): { before: Env; after: Env } {
  const sub = (name: string, cmcpDist: string): Env => ({
    ...base,
    dir: join(base.dir, name),
    probeDir: join(base.dir, name, 'probe'),
    cmcpDist,
    ...(base.dbDir ? { dbDir: join(base.dbDir, name) } : {}),
  });
  return { before: sub('before', beforeDist), after: sub('after', base.cmcpDist) };
}
