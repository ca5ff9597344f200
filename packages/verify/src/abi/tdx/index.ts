/** Intel TDX DCAP quote layouts (v4, v5), little-endian. */
export * from './quote.js';
export * from './tdreport.js';
