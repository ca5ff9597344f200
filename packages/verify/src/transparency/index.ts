/**
 * Transparency formats (docs/spec/transparency.md): every audit chain is also an RFC 9162 Merkle
 * tree; the gateway signs checkpoints of it (C2SP tlog-checkpoint as C2SP signed notes) and hands
 * out a receipt per entry. Exported through `@cmcp/verify/formats`.
 * - ./tree.ts: leaf hashing of entries, the incremental frontier, perfect subtree nodes;
 * - ./proofs.ts: inclusion and consistency proofs (RFC 9162 §2.1.3, §2.1.4);
 * - ./note.ts: signed notes, key IDs, vkeys (Ed25519);
 * - ./checkpoint.ts: checkpoint text, cmcp origins, signing and verifying a chain checkpoint;
 * - ./receipt.ts: the receipt and consistency answer shapes.
 */
export * from './checkpoint.js';
export * from './errors.js';
export * from './note.js';
export * from './proofs.js';
export * from './receipt.js';
export * from './tree.js';
