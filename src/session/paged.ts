/**
 * Long work on the event loop in slices: a session's chain is read for its
 * claim in pages, each a short read, and the loop runs other work (probes, calls) between
 * pages once a slice has lasted {@link SLICE_MS}. What is proportional to the chain's length at
 * close (parsing every entry, each transcript line's JCS) happens here, outside the write
 * transaction; the transaction only catches up on the entries appended meanwhile.
 */
import type { AuditChain } from '../audit/chain.js';
import { ChainSummary } from '../claim/build.js';

/**
 * Longest stretch one slice of a batch of closes holds the event loop before yielding,
 * milliseconds (between closes; a chain's summary yields after every page). With the other
 * work of the same turn (a probe, a call) it stays within the ~3 ms a close may hold the loop
 * with a young-generation scavenge in it (5 ms slices of 100 entries held it
 * 6–8 ms; 1 ms slices left less room for a ~1–2 ms scavenge).
 */
export const SLICE_MS = 0.5;

/** Entries read per page: ~0.3 ms of reading and parsing for ~1 KB entries. */
const PAGE_ENTRIES = 25;

/** A budget of event-loop time: {@link pause} yields once the current slice has run out. */
export class LoopSlice {
  private started = performance.now();

  constructor(private readonly sliceMs = SLICE_MS) {}

  /** Yields to I/O and timers (setImmediate) when the slice has lasted `sliceMs`; else returns at once. */
  async pause(): Promise<void> {
    if (performance.now() - this.started < this.sliceMs) return;
    await this.yieldNow();
  }

  /** Yields to I/O and timers (setImmediate) now and starts a new slice. */
  async yieldNow(): Promise<void> {
    await new Promise((resolve) => setImmediate(resolve));
    this.started = performance.now();
  }
}

/**
 * Summarises a chain as far as its tip is now, page by page, yielding after every page: a page
 * (0.2–0.3 ms) is the longest the loop is held, since a slice that ran until the page crossing
 * 0.5 ms held it for 2–3 pages, and a scavenge landing in that turn made it the close's longest.
 * Entries appended afterwards are added by {@link catchUp} inside the closing transaction.
 */
export async function summarizePaged(
  chain: AuditChain,
  chainId: string,
  slice: LoopSlice,
): Promise<ChainSummary> {
  const summary = new ChainSummary();
  // Not in the turn that handled the request (routing, authentication, the session's row): a
  // timer, since from that I/O callback an immediate would run before the loop's timers.
  await new Promise((resolve) => setTimeout(resolve, 0));
  for (;;) {
    const page = chain.claimPage(chainId, summary.lastSequence, PAGE_ENTRIES);
    summary.add(page);
    if (page.length < PAGE_ENTRIES) return summary;
    await slice.yieldNow();
  }
}

/** Adds every entry after the summary's last one (inside the caller's transaction). */
export function catchUp(chain: AuditChain, chainId: string, summary: ChainSummary): void {
  for (;;) {
    const page = chain.claimPage(chainId, summary.lastSequence, PAGE_ENTRIES);
    summary.add(page);
    if (page.length < PAGE_ENTRIES) return;
  }
}
