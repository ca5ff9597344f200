/**
 * Chain trees (packages/verify/src/transparency/tree.ts, proofs.ts): the incremental frontier,
 * inclusion and consistency proofs against the Certificate Transparency reference data for the
 * 8-leaf tree (the tree heads, inclusion and consistency proofs published with RFC 6962
 * implementations — google/certificate-transparency's merkle tree tests, repeated in
 * transparency-dev/merkle; used as data), then every proof of every tree size up to 40 built
 * from stored nodes, checked against a naive recursive MTH, verified, and refused when tampered.
 */
import { createHash } from 'node:crypto';
import {
  consistencyProof,
  consistencyProofNodeIds,
  EMPTY_TREE_ROOT,
  entryLeafHash,
  inclusionProof,
  inclusionProofNodeIds,
  leafNodeReader,
  MerkleFrontier,
  merkleLeafHash,
  merkleNodeHash,
  TransparencyError,
  treeRoot,
  verifyConsistency,
  verifyInclusion,
} from '@cmcp/verify/formats';
import { describe, expect, it } from 'vitest';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => Buffer.from(s, 'hex');

/** The RFC 6962 reference leaves (their data) and the roots of sizes 1..8. */
const DATA = [
  '',
  '00',
  '10',
  '2021',
  '3031',
  '40414243',
  '5051525354555657',
  '606162636465666768696a6b6c6d6e6f',
].map(unhex);
const ROOTS = [
  'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855',
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];
/** (old size, new size, consistency proof) from the reference data. */
const CONSISTENCY: [number, number, string[]][] = [
  [1, 1, []],
  [
    1,
    8,
    [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
  [
    6,
    8,
    [
      '0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
  [
    2,
    5,
    [
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    ],
  ],
];
/** (leaf index, tree size, inclusion proof) from the reference data. */
const INCLUSION: [number, number, string[]][] = [
  [0, 1, []],
  [
    5,
    8,
    [
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
      'ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0',
      'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
    ],
  ],
  [2, 3, ['fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125']],
];
const LEAVES = DATA.map(merkleLeafHash);

/** Flips the low bit of one byte. */
const flip = (b: Buffer, at: number) => b.writeUInt8((b.readUInt8(at) ^ 1) & 0xff, at);

/** The naive recursive MTH of RFC 9162 §2.1.1, as the definition reads. */
function naiveRoot(leaves: readonly Buffer[]): Buffer {
  if (leaves.length === 0) return createHash('sha256').digest();
  if (leaves.length === 1) return leaves[0] as Buffer;
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return merkleNodeHash(naiveRoot(leaves.slice(0, k)), naiveRoot(leaves.slice(k)));
}

describe('reference data (RFC 6962 test tree)', () => {
  it('the frontier gives every reference root, the empty one included', () => {
    const f = MerkleFrontier.empty();
    expect(hex(f.root())).toBe(ROOTS[0]);
    expect(f.root().equals(EMPTY_TREE_ROOT)).toBe(true);
    LEAVES.forEach((leaf, i) => {
      f.append(leaf);
      expect(hex(f.root())).toBe(ROOTS[i + 1]);
    });
  });

  it('builds and verifies the reference inclusion proofs', () => {
    for (const [index, size, proof] of INCLUSION) {
      const read = leafNodeReader(LEAVES.slice(0, size));
      expect(inclusionProof(index, size, read).map(hex)).toEqual(proof);
      expect(
        verifyInclusion(LEAVES[index] as Buffer, index, size, proof.map(unhex), unhex(ROOTS[size] as string)),
      ).toBe(true);
    }
  });

  it('builds and verifies the reference consistency proofs', () => {
    const read = leafNodeReader(LEAVES);
    for (const [from, to, proof] of CONSISTENCY) {
      expect(consistencyProof(from, to, read).map(hex)).toEqual(proof);
      expect(
        verifyConsistency(
          from,
          to,
          proof.map(unhex),
          unhex(ROOTS[from] as string),
          unhex(ROOTS[to] as string),
        ),
      ).toBe(true);
    }
  });
});

describe('every tree up to 40 leaves', () => {
  const leaves = Array.from({ length: 40 }, (_, i) => merkleLeafHash(Buffer.from(`entry ${i}`)));
  const read = leafNodeReader(leaves);
  const roots = Array.from({ length: 41 }, (_, n) => naiveRoot(leaves.slice(0, n)));

  it('the frontier root equals the naive MTH after every append, and survives JSON and bytes', () => {
    const f = MerkleFrontier.empty();
    for (let n = 1; n <= 40; n++) {
      f.append(leaves[n - 1] as Buffer);
      expect(f.root().equals(roots[n] as Buffer)).toBe(true);
      expect(
        MerkleFrontier.fromJSON(JSON.parse(JSON.stringify(f.toJSON())))
          .root()
          .equals(f.root()),
      ).toBe(true);
      const back = MerkleFrontier.fromBytes(f.toBytes());
      expect(back.size).toBe(n);
      // A restored frontier keeps appending to the same tree.
      if (n < 40) {
        back.append(leaves[n] as Buffer);
        expect(back.root().equals(roots[n + 1] as Buffer)).toBe(true);
      }
    }
    expect(treeRoot(leaves).equals(roots[40] as Buffer)).toBe(true);
  });

  it('every inclusion proof reads only the node ids it names, verifies, and fails when anything is changed', () => {
    for (let size = 1; size <= 40; size++) {
      for (let index = 0; index < size; index++) {
        const named = new Set(inclusionProofNodeIds(index, size).map((id) => `${id.level}:${id.index}`));
        const proof = inclusionProof(index, size, (id) => {
          expect(named.has(`${id.level}:${id.index}`)).toBe(true);
          return read(id);
        });
        const root = roots[size] as Buffer;
        const leaf = leaves[index] as Buffer;
        expect(verifyInclusion(leaf, index, size, proof, root)).toBe(true);
        expect(verifyInclusion(leaves[(index + 1) % 40] as Buffer, index, size, proof, root)).toBe(false);
        if (size > 1) expect(verifyInclusion(leaf, (index + 1) % size, size, proof, root)).toBe(false);
        expect(verifyInclusion(leaf, index, size, proof, roots[size - 1] as Buffer)).toBe(false);
        if (proof.length > 0) {
          const bent = proof.map((h) => Buffer.from(h));
          flip(bent[0] as Buffer, 0);
          expect(verifyInclusion(leaf, index, size, bent, root)).toBe(false);
          expect(verifyInclusion(leaf, index, size, proof.slice(1), root)).toBe(false);
        }
        expect(verifyInclusion(leaf, index, size, [...proof, root], root)).toBe(false);
      }
    }
  });

  it('every consistency proof verifies between its sizes and fails for other roots or sizes', () => {
    for (let to = 1; to <= 40; to++) {
      for (let from = 0; from <= to; from++) {
        const named = new Set(consistencyProofNodeIds(from, to).map((id) => `${id.level}:${id.index}`));
        const proof = consistencyProof(from, to, (id) => {
          expect(named.has(`${id.level}:${id.index}`)).toBe(true);
          return read(id);
        });
        const [r1, r2] = [roots[from] as Buffer, roots[to] as Buffer];
        expect(verifyConsistency(from, to, proof, r1, r2)).toBe(true);
        if (from === 0) continue;
        // A fork: the second tree with its last leaf replaced is no extension of the first.
        const forked = naiveRoot([...leaves.slice(0, to - 1), merkleLeafHash(Buffer.from('fork'))]);
        if (from < to) {
          expect(verifyConsistency(from, to, proof, r1, forked)).toBe(false);
          expect(verifyConsistency(from, to, proof, roots[from - 1] as Buffer, r2)).toBe(false);
          if (to < 40)
            expect(verifyConsistency(from, to + 1, proof, r1, roots[to + 1] as Buffer)).toBe(false);
          const bent = proof.map((h) => Buffer.from(h));
          flip(bent[bent.length - 1] as Buffer, 31);
          expect(verifyConsistency(from, to, bent, r1, r2)).toBe(false);
        } else {
          expect(verifyConsistency(from, to, [], r1, forked)).toBe(from === to && r1.equals(forked));
        }
      }
    }
  });
});

describe('bad input', () => {
  it('refuses impossible ranges, bad leaves and malformed state with stable codes', () => {
    const read = leafNodeReader(LEAVES);
    const code = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        expect(e).toBeInstanceOf(TransparencyError);
        return (e as TransparencyError).code;
      }
      return 'no error';
    };
    expect(code(() => inclusionProof(8, 8, read))).toBe('PROOF_RANGE_INVALID');
    expect(code(() => consistencyProof(5, 4, read))).toBe('PROOF_RANGE_INVALID');
    expect(code(() => inclusionProof(-1, 8, read))).toBe('TREE_SIZE_INVALID');
    expect(code(() => inclusionProof(0, 9, read))).toBe('TREE_NODE_MISSING');
    expect(code(() => entryLeafHash('ABC'))).toBe('TREE_LEAF_MALFORMED');
    expect(code(() => MerkleFrontier.fromJSON({ size: 3, hashes: [hex(LEAVES[0] as Buffer)] }))).toBe(
      'TREE_STATE_MALFORMED',
    );
    expect(code(() => MerkleFrontier.fromBytes(Buffer.alloc(8 + 32)))).toBe('TREE_STATE_MALFORMED');
  });

  it('an entry leaf is the leaf hash of the 32 bytes its entry_hash spells', () => {
    const h = createHash('sha256').update('x').digest('hex');
    expect(entryLeafHash(h).equals(merkleLeafHash(unhex(h)))).toBe(true);
  });
});
