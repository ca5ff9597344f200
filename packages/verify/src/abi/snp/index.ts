/** AMD SEV-SNP layouts (SEV-SNP Firmware ABI 56860; GHCB 56421), little-endian. */
export * from './certtable.js';
export * from './report.js';
export * from './tcb.js';
