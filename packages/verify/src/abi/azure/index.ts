/** Azure confidential VM layouts: the paravisor (HCL) report and its runtime data. */
export * from './hcl.js';
export * from './runtime-data.js';
