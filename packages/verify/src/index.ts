/**
 * @cmcp/verify — the relying party's library: verifies cmcp claims and audit bundles, and raw
 * TPM 2.0, SEV-SNP and TDX evidence, offline, trusting only the pinned roots it is given; and
 * receipts and checkpoints of a session's tree (docs/spec/transparency.md).
 * Everything the browser entry offers (./browser.ts), plus the Node-only file loaders and the
 * receipt and checkpoint verifiers (their signed notes use node:crypto); and checks a server's
 * attested-TLS certificate before a client speaks (./tls/).
 *
 * The package's other entry points (package.json `exports`; nothing else is importable):
 * - `@cmcp/verify/formats`: canonical JSON, audit entries, claims, bindings, replicas, Merkle;
 * - `@cmcp/verify/abi`: the hardware byte layouts (TPM 2.0, SEV-SNP, TDX, Azure HCL, event logs);
 * - `@cmcp/verify/errors`: `CmcpError`, the verifier's error codes and the registry API;
 * - `@cmcp/verify/cli`: the `cmcp-verify` commands, to embed in another commander program.
 */
export * from './browser.js';
export {
  consistencyCheck,
  type GatewayKeySource,
  type SignedTreeHead,
  type VerifyCheckpointsOptions,
  verifyCheckpoints,
} from './checkpoints.js';
export { receiptSchema, type VerifyReceiptOptions, verifyReceipt } from './receipt.js';
export {
  type AttestedTlsOptions,
  type AttestedTlsResult,
  TlsBindingMemory,
  verifyAttestedCertificate,
} from './tls/check.js';
export {
  AttestedHttpsAgent,
  attestedCheckServerIdentity,
  attestedConnect,
  connectAttested,
  type OnAttested,
} from './tls/client.js';
export { EMPTY_TRUST_STORE, PolicyFileError } from './trust.js';
export { defaultAttestationDir, loadReferenceValues, loadTrustStore } from './trust-files.js';
