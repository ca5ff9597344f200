/**
 * The trees' side of the storage contract (store/port.ts TreeStore), the same cases against both
 * engines (test/harness/store-engines.ts): every chain is also an RFC 9162 Merkle tree whose
 * frontier and nodes move with the chain in each append's transaction, whichever writer appends
 * (three connections on SQLite, three fenced replicas on PostgreSQL) — so a writer that takes
 * over a chain, or a process started again on the same database, continues the same tree — and
 * checkpoints stored once per size, found again by the leaf they cover.
 */
import {
  consistencyProof,
  consistencyProofNodeIds,
  entryLeafHash,
  inclusionProof,
  inclusionProofNodeIds,
  type TreeNodeId,
  treeRoot,
  verifyConsistency,
  verifyInclusion,
} from '@cmcp/verify/formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StoredCheckpoint, TreeStore } from '../src/store/port.js';
import { contractEngines, type Engine } from './harness/store-engines.js';

const { withPostgres, engines } = contractEngines('contract_trees');

/** A proof builder's reader over the nodes `trees` answers for `ids`. */
async function reader(trees: TreeStore, chainId: string, ids: TreeNodeId[]) {
  const nodes = new Map((await trees.treeNodes(chainId, ids)).map((n) => [`${n.level}:${n.index}`, n.hash]));
  return (id: TreeNodeId) => {
    const h = nodes.get(`${id.level}:${id.index}`);
    if (!h) throw new Error(`node ${id.level}:${id.index} not answered`);
    return h;
  };
}

async function leavesOf(engine: Engine, chainId: string): Promise<Buffer[]> {
  return (await engine.bundle(chainId, chainId)).entries.map((e) => entryLeafHash(e.entry_hash));
}

describe.each(engines)('the trees of the storage contract on %s', (name, make) => {
  const skip = name === 'postgres' && !withPostgres;
  let engine: Engine;
  beforeAll(async () => {
    if (!skip) engine = await make();
  }, 60_000);
  afterAll(async () => {
    await engine?.close();
  });

  it.skipIf(skip)('keeps every chain a Merkle tree through concurrent appends by every writer', async () => {
    const chainId = 'tree-session-1';
    const appends = Array.from({ length: 45 }, (_, i) =>
      (engine.replicas[i % 3] as Engine['replicas'][number]).append(chainId, {
        entry_type: 'tool_call',
        session_id: chainId,
        call_id: `call-${i}`,
      }),
    );
    await Promise.all(appends);
    const leaves = await leavesOf(engine, chainId);
    expect(leaves).toHaveLength(45);
    for (const r of engine.replicas) {
      const head = await r.trees.treeHead(chainId);
      expect(head).toEqual({ size: 45, root: treeRoot(leaves).toString('hex') });
    }
  });

  it.skipIf(skip)('answers the nodes of every inclusion and consistency proof, from any writer', async () => {
    const chainId = 'tree-session-1';
    const leaves = await leavesOf(engine, chainId);
    const root = treeRoot(leaves);
    for (const [i, r] of engine.replicas.entries()) {
      for (let index = i; index < leaves.length; index += 7) {
        const read = await reader(r.trees, chainId, inclusionProofNodeIds(index, leaves.length));
        const proof = inclusionProof(index, leaves.length, read);
        expect(verifyInclusion(leaves[index] as Buffer, index, leaves.length, proof, root)).toBe(true);
        // Another leaf at that place does not verify.
        expect(
          verifyInclusion(leaves[(index + 1) % leaves.length] as Buffer, index, leaves.length, proof, root),
        ).toBe(false);
      }
      for (const from of [1, 2, 3, 8, 13, 32, 44, 45]) {
        const read = await reader(r.trees, chainId, consistencyProofNodeIds(from, leaves.length));
        const proof = consistencyProof(from, leaves.length, read);
        expect(verifyConsistency(from, leaves.length, proof, treeRoot(leaves.slice(0, from)), root)).toBe(
          true,
        );
      }
    }
  });

  it.skipIf(skip)('continues the tree when another writer appends after a writer stopped', async () => {
    const chainId = 'tree-session-2';
    const [a, b] = engine.replicas as [Engine['replicas'][number], Engine['replicas'][number]];
    for (let i = 0; i < 6; i++) await a.append(chainId, { entry_type: 'tool_call', session_id: chainId });
    const before = await a.trees.treeHead(chainId);
    for (let i = 0; i < 5; i++) await b.append(chainId, { entry_type: 'tool_call', session_id: chainId });
    const leaves = await leavesOf(engine, chainId);
    expect(await a.trees.treeHead(chainId)).toEqual({ size: 11, root: treeRoot(leaves).toString('hex') });
    expect(before).toEqual({ size: 6, root: treeRoot(leaves.slice(0, 6)).toString('hex') });
  });

  it.skipIf(skip)('stores one checkpoint per size and finds the oldest that covers a leaf', async () => {
    const chainId = 'tree-session-2';
    const [a, b] = engine.replicas as [Engine['replicas'][number], Engine['replicas'][number]];
    const cp = (size: number, note: string): StoredCheckpoint => ({
      chain_id: chainId,
      tree_size: size,
      root_hash: 'ab'.repeat(32),
      note,
      signed_at: '2026-12-01T00:00:00.000Z',
    });
    expect(await a.trees.checkpointCovering(chainId, 0)).toBeUndefined();
    expect(await a.trees.recordCheckpoint(cp(6, 'first'))).toMatchObject({ tree_size: 6, note: 'first' });
    // Another writer's checkpoint of the same size: the stored one stands.
    expect(await b.trees.recordCheckpoint(cp(6, 'second'))).toMatchObject({ tree_size: 6, note: 'first' });
    await b.trees.recordCheckpoint(cp(11, 'third'));
    expect((await b.trees.checkpointCovering(chainId, 5))?.tree_size).toBe(6);
    expect((await a.trees.checkpointCovering(chainId, 6))?.tree_size).toBe(11);
    expect(await a.trees.checkpointCovering(chainId, 11)).toBeUndefined();
    expect((await a.trees.checkpoints(chainId)).map((c) => c.tree_size)).toEqual([6, 11]);
    expect((await b.trees.checkpointOfSize(chainId, 11))?.note).toBe('third');
  });

  it.skipIf(skip)("finds a call's newest entry in a chain", async () => {
    const chainId = 'tree-session-1';
    const e = await engine.replicas[0]?.trees.callEntry(chainId, 'call-17');
    const bundle = await engine.bundle(chainId, chainId);
    expect(e?.sequence_number).toBeGreaterThanOrEqual(0);
    expect(bundle.entries[e?.sequence_number ?? -1]?.entry_hash).toBe(e?.entry_hash);
    expect(JSON.parse(e?.canonical ?? '{}').call_id).toBe('call-17');
    expect(await engine.replicas[1]?.trees.callEntry(chainId, 'no-such-call')).toBeUndefined();
  });
});
