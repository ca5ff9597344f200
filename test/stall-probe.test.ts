/**
 * testing/stall.ts attributes a loop's longest gap: the CPU of the longest gap (Stall.cpuMs),
 * the GC pause inside it (gcMs) and the longest gap that held no GC pause (workCpuMs), which the
 * loop-block bench prints beside its verdict. A busy turn of the work's own (4 ms of CPU) and, in
 * a later turn, a forced mark-compact of a large heap followed by 12 ms of busy CPU (so that this
 * gap is the longest by CPU whatever share of the collection its helper threads take, or how
 * little CPU the loaded machine gives it): the second is the longest gap, the first the longest
 * without a GC pause.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { cpuNow, measureStall } from '../testing/stall.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Holds the main thread for `ms` of its own CPU time, allocating nothing. */
function busy(ms: number): void {
  const end = cpuNow() + ms;
  while (cpuNow() < end);
}

describe('the stall probe', () => {
  for (const probe of ['timer', 'turn'] as const)
    it(`(${probe}) tells a busy turn of the work from a GC pause: workCpuMs is the busy turn, cpuMs the collection's gap`, async () => {
      // ~1.5 M live objects, so that a full mark-compact takes far longer than the busy turn.
      const live = Array.from({ length: 1_500_000 }, (_, i) => ({ i }));
      // Settled first, so that no collection of the allocation above falls in the busy turn.
      gc();
      const { stall } = await measureStall(async () => {
        busy(4);
        await new Promise((r) => setTimeout(r, 5));
        gc();
        busy(12);
        await new Promise((r) => setTimeout(r, 5));
      }, probe);
      expect(live.length).toBe(1_500_000);
      console.log(`${probe}: ${JSON.stringify(stall)}`);
      expect(stall.cpuMs).toBeGreaterThanOrEqual(12);
      expect(stall.gcMs).toBeGreaterThan(0);
      expect(stall.workCpuMs).toBeGreaterThanOrEqual(4);
      // Not the collection's gap (at least 12 ms of CPU): that one is left out.
      expect(stall.workCpuMs).toBeLessThan(12);
    });
});
