/**
 * How V8 collects garbage in the gateway's process (docs/operations.md
 * "The WAL and the disk"): two choices of V8's defaults that put long GC pauses inside a replica's
 * closes and exports, each replaced by a flag.
 *
 * When marking starts. V8's default starts incremental marking as soon as the room left below
 * the old-generation allocation limit is no larger than the young generation's target capacity
 * (V8 heap.cc `Heap::IncrementalMarkingLimitReached`, the soft limit). Traced on a replica under
 * load (`--trace-incremental-marking`: ~40 MB live, a 112–114 MB limit, a young generation grown
 * to 64 MB), V8's task started marking again straight after every mark-compact, so marking
 * never stopped and a mark-compact — its atomic pause 4–14 ms on the loop — landed every
 * 200–300 ms, inside any close or export that ran longer. With V8's percentage triggers the
 * marking starts once the old generation has used 70 % of its room since the last mark-compact
 * (at once past 90 %; V8 takes the larger of the old generation's and the global, external
 * memory included, percentages), whatever the young generation's size. The limit is V8's own;
 * the typical heap is larger (marking starts later), and a large promotion can reach the limit
 * before marking starts (one longer pause then).
 *
 * Allocation-site pretenuring. Once an allocation site's objects have survived scavenges often
 * enough, V8 allocates that site's objects straight in the old generation (V8
 * pretenuring-handler.cc). A replica's filling of a session (thousands of appends in flight)
 * is what we infer taught V8 to pretenure sites whose objects, in a close's page reads, die soon:
 * dead in the old generation until the next mark-compact, they still hold the young objects they
 * point to (old-to-new remembered set), which a scavenge then copies (inferred from the flag's
 * effect, not traced object by object). Traced (`--trace-gc-nvp`): from the eighth close of a
 * process on, the scavenge inside each close copied 3–4 MB instead of ~0.1 MB and paused 2.4–5 ms
 * instead of 0.5–1.6; with `--no-allocation-site-pretenuring`, ~0.1 MB and ≤ 1.4 ms in every
 * close. Measured: docs/operations.md.
 */
import v8 from 'node:v8';

/** Either marking trigger on the command line: an operator's choice of both. */
const TRIGGER_FLAG = /^--?incremental[-_]marking[-_](soft|hard)[-_]trigger(=|$)/;

/**
 * The V8 flags {@link paceGc} sets (`node --v8-options` lists each by its name without `no-`),
 * each with the pattern of the command-line flags that are an operator's own choice of it (Node
 * passes `-flag` as well as `--flag` to V8, which also reads `--noflag`).
 */
export const GC_FLAGS = [
  { flag: '--incremental-marking-soft-trigger=70', operator: TRIGGER_FLAG },
  { flag: '--incremental-marking-hard-trigger=90', operator: TRIGGER_FLAG },
  {
    flag: '--no-allocation-site-pretenuring',
    operator: /^--?(no[-_]?)?allocation[-_]site[-_]pretenuring(=|$)/,
  },
] as const;

let paced = false;

/**
 * Sets {@link GC_FLAGS} once per process, each unless the process was started with a flag of
 * its own for the same choice (an operator's choice wins; either marking trigger counts for
 * both). Process-wide: every isolate of the process reads them from then on
 * (`v8.setFlagsFromString`, Node.js docs; V8 reads the triggers at each marking-limit check and
 * the pretenuring flag at each scavenge's pretenuring feedback, so setting them after start-up
 * takes effect — before the config is sound nothing is set).
 * @returns the flags set by this call (none at a second call).
 */
export function paceGc(): string[] {
  if (paced) return [];
  paced = true;
  const set = GC_FLAGS.filter(({ operator }) => !process.execArgv.some((a) => operator.test(a))).map(
    ({ flag }) => flag,
  );
  for (const flag of set) v8.setFlagsFromString(flag);
  return set;
}
