/** TCG2 crypto-agile event log layout (TCG PC Client Platform Firmware Profile §10). */
export * from './tcg2.js';
