/**
 * Every chain of a store checked from its entries as the export feed gives them (store/port.ts
 * AuditFeed) or as an export file holds them: each entry's hash is the SHA-256 of its canonical
 * text, each chain runs from sequence 0 without a hole, and each entry names its predecessor's
 * hash (docs/spec/audit-entries.md, C-CHAIN-1). Entries of one chain may arrive out of sequence
 * order (PostgreSQL's feed); they wait until their predecessor has come. Memory: one tip per
 * chain, and the entries still waiting.
 */
import { sha256Hex } from '@cmcp/verify/formats';

/** What each entry must carry to be checked. */
export interface ChainedText {
  entry_hash: string;
  canonical: string;
}

/** The outcome: each chain's length and tip, and what did not hold (empty: every chain holds). */
export interface ChainsReport {
  entries: number;
  chains: Map<string, { length: number; tip: string }>;
  problems: string[];
}

interface Body {
  chain_id?: unknown;
  sequence_number?: unknown;
  prev_entry_hash?: unknown;
}

/** Checks every chain of `entries` (in any order within a chain). */
export async function verifyChains(
  entries: AsyncIterable<readonly ChainedText[]> | Iterable<readonly ChainedText[]>,
): Promise<ChainsReport> {
  const chains = new Map<string, { length: number; tip: string }>();
  const waiting = new Map<string, Map<number, { hash: string; prev: string }>>();
  const problems: string[] = [];
  let count = 0;
  const advance = (chainId: string) => {
    const tip = chains.get(chainId) ?? { length: 0, tip: 'genesis' };
    const queue = waiting.get(chainId);
    for (let next = queue?.get(tip.length); next; next = queue?.get(tip.length)) {
      queue?.delete(tip.length);
      if (next.prev !== tip.tip)
        problems.push(`${chainId}#${tip.length}: prev_entry_hash does not name entry ${tip.length - 1}`);
      tip.length += 1;
      tip.tip = next.hash;
    }
    chains.set(chainId, tip);
  };
  for await (const page of entries)
    for (const e of page) {
      count += 1;
      if (sha256Hex(e.canonical) !== e.entry_hash) {
        problems.push(`entry ${e.entry_hash}: the hash of its canonical text differs`);
        continue;
      }
      const b = JSON.parse(e.canonical) as Body;
      if (
        typeof b.chain_id !== 'string' ||
        !Number.isInteger(b.sequence_number) ||
        typeof b.prev_entry_hash !== 'string'
      ) {
        problems.push(`entry ${e.entry_hash}: no chain position`);
        continue;
      }
      const seq = b.sequence_number as number;
      const queue = waiting.get(b.chain_id) ?? new Map();
      if (queue.has(seq) || seq < (chains.get(b.chain_id)?.length ?? 0))
        problems.push(`${b.chain_id}#${seq}: more than once`);
      queue.set(seq, { hash: e.entry_hash, prev: b.prev_entry_hash });
      waiting.set(b.chain_id, queue);
      advance(b.chain_id);
    }
  for (const [chainId, queue] of waiting)
    if (queue.size > 0)
      problems.push(`${chainId}: ${queue.size} entries after a hole at ${chains.get(chainId)?.length ?? 0}`);
  return { entries: count, chains, problems };
}
