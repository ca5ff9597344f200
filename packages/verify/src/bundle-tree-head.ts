/**
 * `audit.tree_head`: a claim version 2 commits to the session chain's RFC 9162 tree head instead
 * of a transcript (docs/spec/claims.md#claim-version-2); the verifier recomputes the root from the
 * bundle's entries, leaf i = the entry of sequence number i (docs/spec/transparency.md#the-tree).
 */
import type { ChainContext } from './bundle-checks.js';
import { check, fail, pass } from './result.js';
import { entryLeafHash, treeRoot } from './transparency/tree.js';

/** Adds `audit.tree_head` when the claim has a tree head; nothing for a version 1 claim. */
export function treeHeadCheck(c: ChainContext): void {
  const head = c.expect.tree_head;
  if (!head) return;
  if (!c.selfConsistent) {
    c.checks.push(
      fail('audit.tree_head', 'DEPENDENCY_FAILED', 'the chain did not verify, so its tree is not recomputed'),
    );
    return;
  }
  if (c.n < head.size) {
    c.checks.push(
      check(
        'audit.tree_head',
        'fail',
        'TREE_HEAD_MISMATCH',
        `the bundle holds ${c.n} entries, fewer than the tree head's ${head.size}`,
      ),
    );
    return;
  }
  const root = treeRoot(c.sorted.slice(0, head.size).map((e) => entryLeafHash(e.declared_hash))).toString(
    'hex',
  );
  c.checks.push(
    root === head.root
      ? pass('audit.tree_head', `the root of the first ${head.size} entries is the claimed tree head`)
      : fail(
          'audit.tree_head',
          'TREE_HEAD_MISMATCH',
          `the root of the first ${head.size} entries is ${root}, the claim says ${head.root}`,
        ),
  );
}
