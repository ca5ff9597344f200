/**
 * The byte-layout owner (`@cmcp/verify/abi`): one bounded reader whose failures are AbiError
 * (a CmcpError with a registered code, the structure, field and offset), layouts the native
 * layer and the verifier share, and the one AK attribute rule both sides apply.
 */
import { createHash, generateKeyPairSync } from 'node:crypto';
import {
  AbiError,
  akAttributeProblem,
  ByteReader,
  ByteWriter,
  buildCertTable,
  parseCertTable,
  parsePcrSelection,
  parseTpmtPublic,
  pcrSelectionSha256,
  SNP_CERT_GUIDS,
} from '@cmcp/verify/abi';
import { describe, expect, it } from 'vitest';
import { akAttributeProblem as nativeAkAttributeProblem, parsePublic } from '../native/tpm/index.js';
import { parseCertTable as nativeParseCertTable, SnpError } from '../native/tsm/snp.js';
import { verifyTpmQuote } from '../packages/verify/src/tpm/index.js';
import { CmcpError, ERRORS } from '../src/errors/index.js';
import { AK_ATTRS, akNames, ENDORSEMENT_QN, eccAkPublic, softQuote } from '../testing/evidence.js';

const TPMA_SENSITIVE_DATA_ORIGIN = 0x20;

function caught(fn: () => unknown): unknown {
  try {
    fn();
  } catch (err) {
    return err;
  }
  throw new Error('did not throw');
}

describe('ByteReader', () => {
  it('a read past the end is an AbiError naming the structure, field and offset (registered code)', () => {
    const r = new ByteReader(Buffer.from([0, 1, 2]), {
      structure: 'TEST',
      truncated: 'TPM_STRUCTURE_MALFORMED',
      malformed: 'TPM_STRUCTURE_MALFORMED',
      trailing: 'TPM_STRUCTURE_MALFORMED',
    });
    expect(r.u16('first')).toBe(1);
    const err = caught(() => r.u32('second'));
    expect(err).toBeInstanceOf(AbiError);
    expect(err).toBeInstanceOf(CmcpError);
    const e = err as AbiError;
    expect(e.code).toBe('TPM_STRUCTURE_MALFORMED');
    expect(ERRORS[e.code].http).toBe(400);
    expect([e.structure, e.field, e.offset]).toEqual(['TEST', 'second', 2]);
    expect(e.message).toBe('TEST: second needs 4 bytes at offset 2, 1 left');
    // nothing was consumed by the failed read
    expect(r.u8('third')).toBe(2);
    r.end();
  });

  it('little-endian reads, TPM2B bounds and trailing bytes', () => {
    const le = new ByteReader(Buffer.from([1, 0, 0, 0, 2, 0]), {
      structure: 'LE',
      littleEndian: true,
      truncated: 'SNP_REPORT_MALFORMED',
      malformed: 'SNP_REPORT_MALFORMED',
      trailing: 'SNP_REPORT_MALFORMED',
    });
    expect(le.u32('a')).toBe(1);
    expect(le.u16('b')).toBe(2);
    const big = new ByteReader(new ByteWriter().tpm2b(Buffer.alloc(70)).u8(9).done(), {
      structure: 'TPM2B',
      truncated: 'TPM_ATTEST_TRUNCATED',
      malformed: 'TPM_ATTEST_MALFORMED',
      trailing: 'TPM_ATTEST_TRAILING_BYTES',
    });
    expect(caught(() => big.tpm2b('data', 66))).toMatchObject({
      code: 'TPM_ATTEST_MALFORMED',
      field: 'data.size',
    });
    const trailing = new ByteReader(Buffer.from([7, 8]), {
      structure: 'T',
      truncated: 'TPM_ATTEST_TRUNCATED',
      malformed: 'TPM_ATTEST_MALFORMED',
      trailing: 'TPM_ATTEST_TRAILING_BYTES',
    });
    trailing.u8('x');
    expect(caught(() => trailing.end())).toMatchObject({ code: 'TPM_ATTEST_TRAILING_BYTES', offset: 1 });
  });
});

describe('shared layouts', () => {
  it('TPML_PCR_SELECTION: what the native layer writes, the verifier reads', () => {
    expect(parsePcrSelection(pcrSelectionSha256([0, 7, 15, 23]))).toEqual([
      { hashAlg: 0x000b, pcrs: [0, 7, 15, 23], sizeofSelect: 3 },
    ]);
    expect(parsePcrSelection(pcrSelectionSha256([31]))[0]?.sizeofSelect).toBe(4);
  });

  it('SEV-SNP certificate table: one parser; the native layer maps its error to SnpError', () => {
    const table = buildCertTable([{ guid: SNP_CERT_GUIDS.vcek, data: Buffer.from('vcek') }]);
    expect(parseCertTable(table).map((e) => [e.kind, e.data.toString()])).toEqual([['vcek', 'vcek']]);
    const cut = table.subarray(0, 30);
    expect(caught(() => parseCertTable(cut))).toMatchObject({
      code: 'SNP_CERT_TABLE_MALFORMED',
      message: 'certificate table: no zero terminator entry',
    });
    const native = caught(() => nativeParseCertTable(cut));
    expect(native).toBeInstanceOf(SnpError);
    expect(native).toMatchObject({
      code: 'CERT_TABLE_MALFORMED',
      message: 'certificate table: no zero terminator entry',
    });
  });
});

describe('the one AK attribute rule', () => {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const noSdo = AK_ATTRS & ~TPMA_SENSITIVE_DATA_ORIGIN;

  it('native and verifier use the same rule', () => {
    expect(nativeAkAttributeProblem).toBe(akAttributeProblem);
    expect(akAttributeProblem(AK_ATTRS)).toBeNull();
  });

  it('an AK whose sensitive data the TPM did not generate (sensitiveDataOrigin clear) is refused by both sides', () => {
    // The case the two former rules disagreed on: native required sensitiveDataOrigin, the
    // verifier did not. A key created from caller-supplied sensitive data may exist outside the TPM.
    const akPublic = eccAkPublic(publicKey, noSdo);
    expect(parseTpmtPublic(akPublic).objectAttributes).toBe(noSdo);
    expect(parsePublic(akPublic).attributes).toBe(noSdo);
    expect(akAttributeProblem(noSdo)).toBe('AK attributes 0x00050052: sensitiveDataOrigin must be set');

    const { qualifiedName } = akNames(akPublic);
    const pcrDigest = createHash('sha256').digest();
    const extraData = Buffer.alloc(32, 7);
    const q = softQuote(
      { priv: privateKey, akPublic, ...akNames(akPublic), qualifiedName },
      { extraData, pcrs: [], pcrDigest },
    );
    const r = verifyTpmQuote({
      attest: q.attest,
      signature: q.signature,
      ak: { public: akPublic },
      akParentQualifiedName: ENDORSEMENT_QN,
      expectedExtraData: extraData,
    });
    const byId = (id: string) => r.checks.find((c) => c.id === id);
    expect(byId('evidence.signature')?.status).toBe('pass');
    expect(byId('tpm.qualified_signer')?.status).toBe('pass');
    expect(byId('tpm.ak_attributes')).toMatchObject({
      status: 'fail',
      reason_code: 'AK_ATTRIBUTES_INVALID',
      detail: 'AK attributes 0x00050052: sensitiveDataOrigin must be set',
    });
  });
});
