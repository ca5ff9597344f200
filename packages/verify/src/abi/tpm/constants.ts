/**
 * TPM 2.0 constants used by the layouts (TPM 2.0 Library Part 2 §6 "Constants": TPM_ALG_ID
 * §6.3, TPM_ECC_CURVE §6.4, TPM_ST §6.9, TPM_GENERATED §6.2).
 */

/** TPM_GENERATED_VALUE (Part 2 §6.2): first field of every TPMS_ATTEST the TPM signs. */
export const TPM_GENERATED_VALUE = 0xff544347;
/** TPM_ST_ATTEST_QUOTE (Part 2 §6.9): TPMS_ATTEST.type of a TPM2_Quote result. */
export const TPM_ST_ATTEST_QUOTE = 0x8018;

/** TPM_ALG_ID values (Part 2 §6.3). */
export const TPM_ALG = {
  RSA: 0x0001,
  SHA1: 0x0004,
  AES: 0x0006,
  SHA256: 0x000b,
  SHA384: 0x000c,
  SHA512: 0x000d,
  NULL: 0x0010,
  SM3_256: 0x0012,
  RSASSA: 0x0014,
  RSAES: 0x0015,
  RSAPSS: 0x0016,
  OAEP: 0x0017,
  ECDSA: 0x0018,
  ECDH: 0x0019,
  ECDAA: 0x001a,
  SM2: 0x001b,
  ECSCHNORR: 0x001c,
  ECMQV: 0x001d,
  KDF1_SP800_56A: 0x0020,
  KDF2: 0x0021,
  KDF1_SP800_108: 0x0022,
  ECC: 0x0023,
  SHA3_256: 0x0027,
  SHA3_384: 0x0028,
  SHA3_512: 0x0029,
  CFB: 0x0043,
} as const;

/** TPM_ECC_CURVE (Part 2 §6.4): NIST curves → coordinate size in bytes. */
export const TPM_ECC_CURVE = { NIST_P256: 0x0003, NIST_P384: 0x0004, NIST_P521: 0x0005 } as const;
export const ECC_COORDINATE_SIZE: Readonly<Record<number, number>> = { 3: 32, 4: 48, 5: 66 };

/** Digest size in bytes of the TPM hash algorithms (TPMU_HA, Part 2 §10.3.1). */
export const TPM_DIGEST_SIZE: Readonly<Record<number, number>> = {
  [TPM_ALG.SHA1]: 20,
  [TPM_ALG.SHA256]: 32,
  [TPM_ALG.SHA384]: 48,
  [TPM_ALG.SHA512]: 64,
  [TPM_ALG.SM3_256]: 32,
  [TPM_ALG.SHA3_256]: 32,
  [TPM_ALG.SHA3_384]: 48,
  [TPM_ALG.SHA3_512]: 64,
};

/** Largest TPMU_HA (SHA-512): bounds TPM2B_DIGEST; TPM2B_NAME/TPM2B_DATA hold a TPMT_HA (2 + 64). */
export const MAX_DIGEST = 64;
export const MAX_TPMT_HA = 2 + MAX_DIGEST;
/** tpm2-tss TPM2_NUM_PCR_BANKS and TPM2_PCR_SELECT_MAX. */
export const MAX_PCR_BANKS = 16;
export const MAX_PCR_SELECT = 4;
/** Largest TPM2B_PUBLIC_KEY_RSA (4096-bit) and TPM2B_ECC_PARAMETER (P-521). */
export const MAX_RSA_KEY_BYTES = 512;
export const MAX_ECC_KEY_BYTES = 66;

/** Human name of a TPM_ALG_ID, for messages (`sha256`, or `0x00ab`). */
export function algName(alg: number): string {
  for (const [k, v] of Object.entries(TPM_ALG)) if (v === alg) return k.toLowerCase();
  return `0x${alg.toString(16).padStart(4, '0')}`;
}
