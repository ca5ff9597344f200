/**
 * SEV-SNP TCB_VERSION layouts per product (SEV-SNP Firmware ABI 56860 Table 23; Turin adds FMC
 * and moves the fields) and the product named by a v3+ report's CPUID (AMD family/model).
 */

/** The SEV-SNP products with a known TCB layout. */
export const SNP_PRODUCTS = ['Milan', 'Genoa', 'Turin'] as const;
export type SnpProduct = (typeof SNP_PRODUCTS)[number];

/** TCB components decoded with the product's layout. */
export interface SnpTcb {
  fmc?: number;
  bootloader: number;
  tee: number;
  snp: number;
  microcode: number;
}

/**
 * Decodes an 8-byte TCB_VERSION with the product's layout: Milan/Genoa [0] bootloader,
 * [1] TEE, [6] SNP, [7] microcode; Turin [0] FMC, [1] bootloader, [2] TEE, [3] SNP, [7] microcode.
 */
export function decodeSnpTcb(tcb: Uint8Array, product: SnpProduct): SnpTcb {
  const at = (i: number) => tcb[i] ?? 0;
  if (product === 'Turin') return { fmc: at(0), bootloader: at(1), tee: at(2), snp: at(3), microcode: at(7) };
  return { bootloader: at(0), tee: at(1), snp: at(6), microcode: at(7) };
}

/** Product from a v3+ report's CPUID (family 19h: Milan models 00–0Fh, Genoa 10–1Fh/A0–AFh; family 1Ah: Turin). */
export function productFromCpuid(cpuid: { family: number; model: number }): SnpProduct | null {
  if (cpuid.family === 0x19 && cpuid.model < 0x10) return 'Milan';
  if (cpuid.family === 0x19 && ((cpuid.model >= 0x10 && cpuid.model < 0x20) || cpuid.model >= 0xa0))
    return 'Genoa';
  if (cpuid.family === 0x1a) return 'Turin';
  return null;
}
