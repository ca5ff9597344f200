/**
 * @cmcp/verify — the relying party's library: verifies cmcp claims and audit bundles, and raw
 * TPM 2.0, SEV-SNP and TDX evidence, offline, trusting only the pinned roots it is given.
 * Everything the browser entry offers (./browser.ts), plus the Node-only file loaders. Deeper
 * modules are reachable as subpaths (`@cmcp/verify/format/canonical`,
 * `@cmcp/verify/abi/tpm/attest`, `@cmcp/verify/tpm/index`, …).
 */
export * from './browser.js';
export { defaultAttestationDir, loadReferenceValues, loadTrustStore } from './trust-files.js';
