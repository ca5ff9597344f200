/**
 * PCRs and quotes for {@link Tpm}: TPM2_PCR_Read (Part 3 §22.4), TPM2_Quote (§18.4) checked
 * against the PCR values read just before, TPM2_PCR_Extend (§22.2).
 */
import { TpmError } from './errors.js';
import { freeAll, ptr } from './esys.js';
import {
  ESYS_TR_NONE,
  ESYS_TR_PASSWORD,
  ESYS_TR_PCR0,
  fromStruct,
  type NativePtr,
  toStruct,
  tss,
} from './lib.js';
import { normalisePcrs, sha256, sigScheme, type TpmAk, type TpmQuote } from './model.js';
import type { Tpm } from './tpm.js';
import {
  parseDigestList,
  parsePcrSelection,
  parseQuoteAttest,
  pcrSelectionSha256,
  TPM2_ALG_SHA256,
  TPM2_GENERATED_VALUE,
  unwrap2b,
  WireWriter,
} from './wire.js';

/** {@link Tpm.readPcrs} (see its TSDoc). */
export function readPcrs(t: Tpm, pcrs: number[]): Record<number, Buffer> {
  const ctx = t.ctx();
  const want = normalisePcrs(pcrs);
  const lib = tss();
  const values: Record<number, Buffer> = {};
  let remaining = want;
  while (remaining.length > 0) {
    const counter: [number] = [0];
    const selOut: [NativePtr | null] = [null];
    const valOut: [NativePtr | null] = [null];
    let got: number[];
    let digests: Buffer[];
    try {
      t.check(
        'TPM2_PCR_Read',
        lib.Esys_PCR_Read(
          ctx,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          toStruct('TPML_PCR_SELECTION', pcrSelectionSha256(remaining)),
          counter,
          selOut,
          valOut,
        ),
      );
      const sel = fromStruct('TPML_PCR_SELECTION', ptr(selOut, 'PCR_Read selection'));
      got = parsePcrSelection(sel).get(TPM2_ALG_SHA256) ?? [];
      digests = parseDigestList(fromStruct('TPML_DIGEST', ptr(valOut, 'PCR_Read values')));
    } finally {
      freeAll(selOut, valOut);
    }
    if (got.length === 0) {
      throw new TpmError('TPM_BAD_INPUT', `TPM has no sha256 value for PCR(s) ${remaining.join(',')}`);
    }
    if (digests.length !== got.length || got.some((p) => !remaining.includes(p))) {
      throw new TpmError('TPM_BAD_RESPONSE', 'TPM2_PCR_Read returned values for PCRs not asked for');
    }
    got.forEach((p, i) => {
      const d = digests[i]!;
      if (d.length !== 32)
        throw new TpmError('TPM_BAD_RESPONSE', `PCR ${p} sha256 value is ${d.length} bytes`);
      values[p] = d;
    });
    remaining = remaining.filter((p) => !got.includes(p));
  }
  return values;
}

/** {@link Tpm.quote} (see its TSDoc). */
export function quote(t: Tpm, ak: TpmAk, qualifyingData: Buffer, pcrs: number[]): TpmQuote {
  const ctx = t.ctx();
  const loaded = t.akHandle(ak);
  if (!(qualifyingData instanceof Uint8Array) || qualifyingData.length > 32) {
    throw new TpmError('TPM_BAD_INPUT', 'qualifyingData must be a Buffer of at most 32 bytes');
  }
  const qd = Buffer.from(qualifyingData);
  const want = normalisePcrs(pcrs);
  const lib = tss();
  const qdStruct = toStruct('TPM2B_DATA', new WireWriter().tpm2b(qd).done());
  const scheme = toStruct('TPMT_SIG_SCHEME', sigScheme(ak.algorithm));
  const selection = toStruct('TPML_PCR_SELECTION', pcrSelectionSha256(want));
  for (let attempt = 0; attempt < 3; attempt++) {
    const pcrValues = t.readPcrs(want);
    const quoted: [NativePtr | null] = [null];
    const sigOut: [NativePtr | null] = [null];
    let attest: Buffer;
    let signature: Buffer;
    try {
      t.check(
        'TPM2_Quote',
        lib.Esys_Quote(
          ctx,
          loaded.handle,
          ESYS_TR_PASSWORD,
          ESYS_TR_NONE,
          ESYS_TR_NONE,
          qdStruct,
          scheme,
          selection,
          quoted,
          sigOut,
        ),
      );
      attest = unwrap2b(fromStruct('TPM2B_ATTEST', ptr(quoted, 'TPM2_Quote quoted')), 'TPM2B_ATTEST');
      signature = fromStruct('TPMT_SIGNATURE', ptr(sigOut, 'TPM2_Quote signature'));
    } finally {
      freeAll(quoted, sigOut);
    }
    const parsed = parseQuoteAttest(attest);
    const [bank, ...others] = parsed.pcrSelect;
    if (
      parsed.magic !== TPM2_GENERATED_VALUE ||
      !parsed.extraData.equals(qd) ||
      !parsed.qualifiedSigner.equals(ak.qualifiedName) ||
      others.length !== 0 ||
      bank?.hashAlg !== TPM2_ALG_SHA256 ||
      bank.pcrs.join(',') !== want.join(',')
    ) {
      throw new TpmError('TPM_BAD_RESPONSE', 'TPM2_Quote attestation does not match the request');
    }
    const digest = sha256(...want.map((p) => pcrValues[p]!));
    if (digest.equals(parsed.pcrDigest)) {
      return {
        attest,
        signature,
        akPublic: Buffer.from(ak.publicArea),
        pcrSelection: { hash: 'sha256', pcrs: want },
        pcrValues,
      };
    }
  }
  throw new TpmError('PCR_CHANGED', 'PCR values kept changing between TPM2_PCR_Read and TPM2_Quote');
}

/** {@link Tpm.extendPcr} (see its TSDoc). */
export function extendPcr(t: Tpm, pcr: number, digest: Buffer): void {
  const ctx = t.ctx();
  normalisePcrs([pcr]);
  if (!(digest instanceof Uint8Array) || digest.length !== 32) {
    throw new TpmError('TPM_BAD_INPUT', 'extend digest must be 32 bytes (sha256)');
  }
  const values = toStruct(
    'TPML_DIGEST_VALUES',
    new WireWriter().u32(1).u16(TPM2_ALG_SHA256).bytes(digest).done(),
  );
  t.check(
    `TPM2_PCR_Extend(PCR ${pcr})`,
    tss().Esys_PCR_Extend(ctx, ESYS_TR_PCR0 + pcr, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, values),
  );
}
