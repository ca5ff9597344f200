/**
 * When V8 starts marking the old generation, in the gateway's process (issue 11 item 7,
 * docs/operations.md "Event-loop stalls"). V8's default starts incremental marking as soon as
 * the room left below the old-generation allocation limit is no larger than the young
 * generation's target capacity (V8 heap.cc `Heap::IncrementalMarkingLimitReached`, the soft
 * limit). Traced on a replica under load (`--trace-incremental-marking`: ~40 MB live, a
 * 112–114 MB limit, a young generation grown to 64 MB), V8's task started marking again straight
 * after every mark-compact, so marking never stopped and a mark-compact — its atomic pause
 * 4–14 ms on the loop — landed every 200–300 ms, inside any close or export that ran longer.
 * With V8's percentage triggers the marking starts once the old generation has used 70 % of its room since the last mark-compact (at once
 * past 90 %; V8 takes the larger of the old generation's and the global, external memory
 * included, percentages), whatever the young generation's size. The limit is V8's own; the
 * typical heap is larger (marking starts later), and a large promotion can reach the limit
 * before marking starts (one longer pause then). Measured: docs/operations.md.
 */
import v8 from 'node:v8';

/** The V8 flags {@link paceMarking} sets (names as `node --v8-options` lists them). */
export const MARKING_FLAGS = [
  '--incremental-marking-soft-trigger=70',
  '--incremental-marking-hard-trigger=90',
] as const;

let paced = false;

/**
 * Sets {@link MARKING_FLAGS} once per process, unless the process was started with either
 * trigger flag of its own (an operator's choice wins). Process-wide: every isolate of the
 * process reads them from then on (`v8.setFlagsFromString`, Node.js docs; V8 reads these two
 * at each marking-limit check, so setting them after start-up takes effect).
 * @returns whether the flags were set by this call.
 */
export function paceMarking(): boolean {
  if (paced) return false;
  paced = true;
  if (process.execArgv.some((a) => /^--incremental[-_]marking[-_](soft|hard)[-_]trigger\b/.test(a)))
    return false;
  for (const flag of MARKING_FLAGS) v8.setFlagsFromString(flag);
  return true;
}
