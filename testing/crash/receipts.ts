/**
 * The crash test's receipt check (docs/spec/transparency.md), run once every replica is back
 * after the disruptions: every answered call recorded in a session chain has a receipt at
 * `GET /sessions/{id}/receipts/{call_id}` naming the entry the answer named, whose RFC 9162
 * inclusion proof leads from the entry's leaf to the root of the checkpoint it carries; and the
 * checkpoints of one session seen that way are consistent — one root per size, and each larger
 * one an extension of the next smaller one by the consistency proof the gateway serves
 * (`GET /sessions/{id}/consistency?from=&to=`, RFC 9162 §2.1.4.2). Checkpoint signatures are
 * not checked here: the keys of killed processes are gone with them (test/receipts.test.ts
 * checks signatures).
 */
import {
  type ConsistencyProofJson,
  entryLeafHash,
  type ReceiptJson,
  readChainCheckpoint,
  verifyConsistency,
  verifyInclusion,
} from '@cmcp/verify/formats';
import type { Answered } from './load.js';

export interface ReceiptCheck {
  /** Receipts fetched and whose inclusion proof verified. */
  receipts: number;
  /** Sessions whose checkpoints were compared. */
  sessions: number;
  /** Consistency proofs between two checkpoint sizes that verified. */
  consistencyProofs: number;
  violations: string[];
}

const hex = (h: string) => Buffer.from(h, 'hex');

/**
 * Checks the receipts of `answered` (calls in session chains) through the replica `url()`
 * gives at each request, as the agent of `token`.
 */
export async function checkCrashReceipts(
  url: () => string,
  token: string,
  answered: readonly Answered[],
): Promise<ReceiptCheck> {
  const out: ReceiptCheck = { receipts: 0, sessions: 0, consistencyProofs: 0, violations: [] };
  const get = async (path: string): Promise<{ status: number; body: unknown }> => {
    const r = await fetch(`${url()}${path}`, {
      headers: { authorization: `Bearer ${token}` },
      signal: AbortSignal.timeout(30_000),
    });
    return { status: r.status, body: await r.json().catch(() => null) };
  };
  // Per session: the root of each checkpoint size seen.
  const heads = new Map<string, Map<number, string>>();
  const inSessions = answered.filter((a) => a.chainId && a.chainId !== 'gateway');
  let next = 0;
  const worker = async () => {
    for (let a = inSessions[next++]; a; a = inSessions[next++]) {
      const sid = a.chainId as string;
      const where = `call ${a.callId} in session ${sid}`;
      let res: { status: number; body: unknown };
      try {
        res = await get(`/sessions/${sid}/receipts/${a.callId}`);
      } catch (e) {
        out.violations.push(`${where}: receipt not fetched: ${(e as Error).message}`);
        continue;
      }
      const r = res.body as ReceiptJson | null;
      if (res.status !== 200 || !r?.inclusion) {
        out.violations.push(`${where}: no receipt (${res.status} ${JSON.stringify(res.body).slice(0, 200)})`);
        continue;
      }
      if (r.entry_hash !== a.entryHash || r.leaf_index !== a.sequenceNumber) {
        out.violations.push(
          `${where}: the receipt names entry ${r.entry_hash} at ${r.leaf_index}, the answer ${a.entryHash} at ${a.sequenceNumber}`,
        );
        continue;
      }
      const cp = readChainCheckpoint(r.inclusion.checkpoint);
      const proof = r.inclusion.inclusion_proof.map(hex);
      if (
        cp.chain_id !== sid ||
        cp.size !== r.inclusion.tree_size ||
        !verifyInclusion(entryLeafHash(r.entry_hash), r.leaf_index, cp.size, proof, cp.root)
      ) {
        out.violations.push(`${where}: the inclusion proof does not reach its checkpoint's root`);
        continue;
      }
      out.receipts++;
      const seen = heads.get(sid) ?? new Map<number, string>();
      heads.set(sid, seen);
      const root = cp.root.toString('hex');
      const known = seen.get(cp.size);
      if (known && known !== root)
        out.violations.push(`session ${sid}: two checkpoints of size ${cp.size}, roots ${known} and ${root}`);
      seen.set(cp.size, root);
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  for (const [sid, seen] of heads) {
    out.sessions++;
    const sizes = [...seen.keys()].sort((x, y) => x - y);
    for (let i = 1; i < sizes.length; i++) {
      const from = sizes[i - 1] as number;
      const to = sizes[i] as number;
      const res = await get(`/sessions/${sid}/consistency?from=${from}&to=${to}`);
      const c = res.body as ConsistencyProofJson | null;
      if (
        res.status !== 200 ||
        !c ||
        !verifyConsistency(
          from,
          to,
          c.consistency_proof.map(hex),
          hex(seen.get(from) as string),
          hex(seen.get(to) as string),
        )
      )
        out.violations.push(
          `session ${sid}: checkpoint of size ${to} is not shown to extend size ${from} (${res.status})`,
        );
      else out.consistencyProofs++;
    }
  }
  return out;
}
