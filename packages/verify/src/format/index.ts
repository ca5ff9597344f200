/**
 * `@cmcp/verify/formats`: the byte- and JSON-level formats the gateway writes and the verifier
 * reads, one module each, so both sides hash and sign the same bytes:
 * - canonical JSON (RFC 8785) and the tagged SHA-256 helpers (./canonical.ts);
 * - audit entries, bundles and the chain hash (./entry.ts, docs/spec/audit-entries.md);
 * - TRACE claims, their signature and evidence shapes (./claim.ts, docs/spec/claims.md);
 * - the session binding into hardware evidence (./binding.ts, docs/spec/binding.md);
 * - replica identity in entries and claims (./replica.ts);
 * - the RFC 6962 Merkle tree of batched bindings (crypto/merkle.ts);
 * - chain trees, proofs, checkpoints, signed notes and receipts (../transparency/,
 *   docs/spec/transparency.md).
 * Nothing here reads files or talks to hardware.
 */
export * from '../crypto/merkle.js';
export * from '../transparency/index.js';
export * from './binding.js';
export * from './canonical.js';
export * from './claim.js';
export * from './entry.js';
export * from './replica.js';
export * from './tls.js';
