/** TPM 2.0 wire layouts (TPM 2.0 Library Part 2 "Structures"), big-endian. */
export * from './attest.js';
export * from './constants.js';
export * from './pcr.js';
export * from './public.js';
export * from './signature.js';
