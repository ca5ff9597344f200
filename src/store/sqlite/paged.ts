/**
 * A session chain read for its claim in pages, each a short read, with the event loop free
 * between pages: what is proportional to the chain's length at close (parsing every entry, each
 * transcript line's JCS) happens outside the write transaction, which only catches up on the
 * entries appended meanwhile.
 */
import type { LoopSlice } from '../../offload/loop-slice.js';
import type { ClaimPageEntry } from './chain.js';

/** Entries read per page: ~0.3 ms of reading and parsing for ~1 KB entries. */
const PAGE_ENTRIES = 25;

/** What reads a chain's pages: a chain (./chain.ts AuditChain). */
export interface PagedChain {
  claimPage(chainId: string, after: number, limit: number): ClaimPageEntry[];
}

/** What the pages are fed to: a claim issuer (store/port.ts ClaimIssuer) or a chain summary. */
export interface PageSink {
  readonly lastSequence: number;
  add(page: readonly ClaimPageEntry[]): void;
}

/**
 * Feeds `sink` the chain as far as its tip is now, page by page, yielding after every page: a
 * page (0.2–0.3 ms) is the longest the loop is held. Entries appended afterwards are added by
 * {@link catchUp} inside the closing transaction.
 */
export async function summarizePaged(
  chain: PagedChain,
  chainId: string,
  slice: LoopSlice,
  sink: PageSink,
): Promise<void> {
  // Not in the turn that handled the request (routing, authentication, the session's row): a
  // timer, since from that I/O callback an immediate would run before the loop's timers.
  await new Promise((resolve) => setTimeout(resolve, 0));
  for (;;) {
    const page = chain.claimPage(chainId, sink.lastSequence, PAGE_ENTRIES);
    sink.add(page);
    if (page.length < PAGE_ENTRIES) return;
    await slice.yieldNow();
  }
}

/** Adds every entry after the sink's last one (inside the caller's transaction). */
export function catchUp(chain: PagedChain, chainId: string, sink: PageSink): void {
  for (;;) {
    const page = chain.claimPage(chainId, sink.lastSequence, PAGE_ENTRIES);
    sink.add(page);
    if (page.length < PAGE_ENTRIES) return;
  }
}
