/**
 * RFC 6962 Merkle hashing (packages/verify/src/crypto/merkle.ts) against the Certificate
 * Transparency reference vectors (the leaves and tree heads of sizes 1..8 and the audit paths
 * published with RFC 6962 implementations, used as data), then properties over every tree size
 * up to 70: every leaf's path leads to the root, and a wrong index, size, leaf or path does not.
 */
import {
  auditPathLength,
  batchDigest,
  canonicalJson,
  MerkleError,
  MerkleTree,
  merkleLeafHash,
  merkleNodeHash,
  rootFromAuditPath,
  sha256,
} from '@cmcp/verify/formats';
import { describe, expect, it } from 'vitest';

const hex = (b: Uint8Array) => Buffer.from(b).toString('hex');
const unhex = (s: string) => Buffer.from(s, 'hex');

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
  '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
  'fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125',
  'aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77',
  'd37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7',
  '4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4',
  '76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef',
  'ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c',
  '5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328',
];
/** (0-based leaf index, tree size, audit path). */
const PATHS: [number, number, string[]][] = [
  [0, 1, []],
  [
    0,
    8,
    [
      '96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      '6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4',
    ],
  ],
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
  [
    1,
    5,
    [
      '6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d',
      '5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e',
      'bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b',
    ],
  ],
];
const LEAVES = DATA.map(merkleLeafHash);

describe('RFC 6962 reference vectors', () => {
  it('leaf and node hashes carry the 0x00 / 0x01 prefixes', () => {
    expect(hex(merkleLeafHash(Buffer.alloc(0)))).toBe(ROOTS[0]);
    expect(hex(merkleNodeHash(LEAVES[0]!, LEAVES[1]!))).toBe(ROOTS[1]);
  });

  it('the tree heads of sizes 1..8', () => {
    for (let n = 1; n <= 8; n++)
      expect(hex(new MerkleTree(LEAVES.slice(0, n)).root()), `size ${n}`).toBe(ROOTS[n - 1]);
  });

  it('the published audit paths, produced and verified', () => {
    for (const [index, size, path] of PATHS) {
      const tree = new MerkleTree(LEAVES.slice(0, size));
      expect(tree.auditPath(index).map(hex), `${index}/${size}`).toEqual(path);
      const root = rootFromAuditPath(LEAVES[index]!, index, size, path.map(unhex));
      expect(root && hex(root)).toBe(ROOTS[size - 1]);
    }
  });
});

describe('properties', () => {
  const many = Array.from({ length: 70 }, (_, i) => merkleLeafHash(Buffer.from([i, i >> 8, 0x5a])));

  it('every leaf of every tree up to 70 proves to the root, and no other index or size does', () => {
    for (let n = 1; n <= many.length; n++) {
      const tree = new MerkleTree(many.slice(0, n));
      const root = tree.root();
      for (let i = 0; i < n; i++) {
        const path = tree.auditPath(i);
        expect(path.length).toBe(auditPathLength(i, n));
        expect(rootFromAuditPath(many[i]!, i, n, path)?.equals(root)).toBe(true);
        for (const j of [i - 1, i + 1, i ^ 2]) {
          if (j < 0 || j >= n || j === i) continue;
          expect(rootFromAuditPath(many[i]!, j, n, path)?.equals(root) ?? false, `${i}→${j} of ${n}`).toBe(
            false,
          );
        }
        if (n > 1) {
          expect(rootFromAuditPath(many[i]!, i, n * 2, path)?.equals(root) ?? false).toBe(false);
          expect(rootFromAuditPath(merkleLeafHash(Buffer.from('other')), i, n, path)?.equals(root)).toBe(
            false,
          );
          const flipped = path.map((h) => Buffer.from(h));
          flipped[0]![0]! ^= 8;
          expect(rootFromAuditPath(many[i]!, i, n, flipped)?.equals(root)).toBe(false);
          expect(rootFromAuditPath(many[i]!, i, n, path.slice(0, -1))?.equals(root) ?? false).toBe(false);
          expect(rootFromAuditPath(many[i]!, i, n, [...path, root])?.equals(root) ?? false).toBe(false);
        }
      }
    }
  });

  it('a tree of one leaf is its leaf hash, with an empty path', () => {
    const t = new MerkleTree([many[3]!]);
    expect(t.root().equals(many[3]!)).toBe(true);
    expect(t.auditPath(0)).toEqual([]);
  });

  it('an index or size out of range is refused with its own code', () => {
    const code = (f: () => unknown) => {
      try {
        f();
      } catch (e) {
        return e instanceof MerkleError ? e.code : 'other';
      }
      return 'none';
    };
    expect(code(() => rootFromAuditPath(many[0]!, 0, 0, []))).toBe('TREE_SIZE_OUT_OF_RANGE');
    expect(code(() => rootFromAuditPath(many[0]!, 0, 1.5, []))).toBe('TREE_SIZE_OUT_OF_RANGE');
    expect(code(() => rootFromAuditPath(many[0]!, 3, 3, []))).toBe('LEAF_INDEX_OUT_OF_RANGE');
    expect(code(() => rootFromAuditPath(many[0]!, -1, 3, []))).toBe('LEAF_INDEX_OUT_OF_RANGE');
    expect(code(() => new MerkleTree([]))).toBe('TREE_SIZE_OUT_OF_RANGE');
    expect(code(() => new MerkleTree(many.slice(0, 4)).auditPath(4))).toBe('LEAF_INDEX_OUT_OF_RANGE');
  });

  it('the batch digest is SHA-256 of the JCS batch preimage, and depends on root and size', () => {
    const root = new MerkleTree(many.slice(0, 5)).root();
    expect(batchDigest(root, 5)).toEqual(
      sha256(canonicalJson({ domain: 'cmcp.session-batch', version: 1, tree_size: 5, root: hex(root) })),
    );
    expect(batchDigest(root, 6).equals(batchDigest(root, 5))).toBe(false);
    expect(batchDigest(many[0]!, 5).equals(batchDigest(root, 5))).toBe(false);
  });
});
