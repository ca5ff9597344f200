/** TCG2 crypto-agile event log layout (TCG PC Client Platform Firmware Profile §10). */

/** The TDX CC event log and its ACPI CCEL table (UEFI 2.10 §38.4, ACPI 6.5 §5.2.34). */
export * from './ccel.js';
/** TCG Canonical Event Log, TLV encoding (as Confidential Space writes it). */
export * from './cel.js';
export * from './tcg2.js';
