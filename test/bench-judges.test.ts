/**
 * The verdicts of `npm run bench` that decide an exit code or a table: the memory mode's
 * growth judgement (bench/memory.ts) and the self-time summary of a V8 CPU profile
 * (bench/cpuprofile-top.ts). No timing here: the samples and the profile are built by hand.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { topSelfTime } from '../bench/cpuprofile-top.js';
import { judgeMemory, type MemorySample } from '../bench/memory.js';

const series = (n: number, heap: (i: number) => number, rss: (i: number) => number): MemorySample[] =>
  Array.from({ length: n }, (_, i) => ({ calls: i * 1000, atS: i * 2, rssMb: rss(i), heapUsedMb: heap(i) }));

describe('memory judgement', () => {
  it('calls a collector sawtooth on a flat floor bounded', () => {
    // heap climbs 60 MB between collections and drops back; RSS flat at 300 MB
    const v = judgeMemory(
      series(
        200,
        (i) => 100 + (i % 10) * 6,
        () => 300,
      ),
    );
    expect(v.bounded).toBe(true);
    expect(Math.abs(v.heapRiseMb)).toBeLessThan(1);
  });

  it('calls a floor that rises with the calls growth', () => {
    // 0.1 MB of heap per 1000 calls on top of the sawtooth: 10 MB over the second half
    const v = judgeMemory(
      series(
        200,
        (i) => 100 + (i % 10) * 6 + i * 0.1,
        () => 300,
      ),
    );
    expect(v.bounded).toBe(false);
    expect(v.heapRiseMb).toBeGreaterThan(8);
  });

  it('calls an RSS that keeps climbing growth even with a flat heap', () => {
    const v = judgeMemory(
      series(
        200,
        () => 100,
        (i) => 300 + i * 0.5,
      ),
    );
    expect(v.bounded).toBe(false);
    expect(v.rssRiseMb).toBeGreaterThan(v.rssLimitMb);
  });

  it('cannot judge too few samples, and does not call them bounded', () => {
    expect(
      judgeMemory(
        series(
          10,
          () => 100,
          () => 300,
        ),
      ).bounded,
    ).toBe(false);
  });
});

describe('CPU profile self time', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-prof-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('sums time deltas per function, leaves idle out of the busy share, and counts Wasm', () => {
    const frame = (id: number, functionName: string, url: string, lineNumber = 0) => ({
      id,
      callFrame: { functionName, url, lineNumber, scriptId: '0', columnNumber: 0 },
      hitCount: 0,
    });
    const profile = {
      nodes: [
        frame(1, '(root)', ''),
        frame(2, '(idle)', ''),
        frame(3, 'sqliteTransaction', 'file:///x/node_modules/better-sqlite3/lib/methods/transaction.js', 51),
        frame(4, 'wasm-function[7]', 'wasm://wasm/01079692'),
        frame(5, 'evaluate', 'file:///x/dist/src/policy/engine.js', 9),
      ],
      startTime: 0,
      endTime: 1000,
      samples: [2, 3, 3, 4, 5, 3, 2],
      timeDeltas: [100_000, 3000, 3000, 2000, 1000, 3000, 100_000],
    };
    const file = join(dir, 'p.cpuprofile');
    writeFileSync(file, JSON.stringify(profile));
    const r = topSelfTime(file, 10);
    expect(r.totalMs).toBe(212);
    expect(r.busyMs).toBe(12);
    expect(r.wasmMs).toBe(2);
    expect(r.top[0]).toMatchObject({ fn: 'sqliteTransaction', selfMs: 9, share: 0.75 });
    expect(r.top[0]?.where).toBe('better-sqlite3/lib/methods/transaction.js:52');
    expect(r.top.map((t) => t.fn)).toEqual(['sqliteTransaction', 'wasm-function[7]', 'evaluate']);
  });
});
