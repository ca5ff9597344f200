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

/** One TPM2_PCR_Read's answer: the PCRs it returned values for and those values. */
interface PcrReadStep {
  got: number[];
  digests: Buffer[];
}

/** Out-parameters of one TPM2_PCR_Read. */
function pcrReadOuts(): { counter: [number]; selOut: [NativePtr | null]; valOut: [NativePtr | null] } {
  return { counter: [0], selOut: [null], valOut: [null] };
}

/** Reads one TPM2_PCR_Read's outputs (and frees them). */
function pcrReadResult(outs: ReturnType<typeof pcrReadOuts>): PcrReadStep {
  try {
    const sel = fromStruct('TPML_PCR_SELECTION', ptr(outs.selOut, 'PCR_Read selection'));
    return {
      got: parsePcrSelection(sel).get(TPM2_ALG_SHA256) ?? [],
      digests: parseDigestList(fromStruct('TPML_DIGEST', ptr(outs.valOut, 'PCR_Read values'))),
    };
  } finally {
    freeAll(outs.selOut, outs.valOut);
  }
}

/** Checks one step against what was asked, records its values; returns the PCRs still to read. */
function pcrReadAccept(remaining: number[], step: PcrReadStep, values: Record<number, Buffer>): number[] {
  const { got, digests } = step;
  if (got.length === 0) {
    throw new TpmError('TPM_BAD_INPUT', `TPM has no sha256 value for PCR(s) ${remaining.join(',')}`);
  }
  if (digests.length !== got.length || got.some((p) => !remaining.includes(p))) {
    throw new TpmError('TPM_BAD_RESPONSE', 'TPM2_PCR_Read returned values for PCRs not asked for');
  }
  got.forEach((p, i) => {
    const d = digests[i]!;
    if (d.length !== 32) throw new TpmError('TPM_BAD_RESPONSE', `PCR ${p} sha256 value is ${d.length} bytes`);
    values[p] = d;
  });
  return remaining.filter((p) => !got.includes(p));
}

/**
 * A PCR read in rounds of TPM2_PCR_Read (a TPM may return fewer PCRs than asked), shared by the
 * synchronous and the worker-thread paths: each round is {@link next} (its Esys_PCR_Read
 * arguments), the command, then {@link done} or {@link failed}.
 */
class PcrReading {
  readonly values: Record<number, Buffer> = {};
  private remaining: number[];
  private outs = pcrReadOuts();

  constructor(pcrs: number[]) {
    this.remaining = normalisePcrs(pcrs);
  }

  get pending(): boolean {
    return this.remaining.length > 0;
  }

  /** Starts a round for the PCRs still to read; returns Esys_PCR_Read's arguments for a context. */
  next(): (ctx: NativePtr) => Parameters<ReturnType<typeof tss>['Esys_PCR_Read']> {
    const o = pcrReadOuts();
    this.outs = o;
    const sel = toStruct('TPML_PCR_SELECTION', pcrSelectionSha256(this.remaining));
    return (ctx) => [ctx, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, sel, o.counter, o.selOut, o.valOut];
  }

  /** The round's command returned: checks and records its values (and frees its outputs). */
  done(): void {
    this.remaining = pcrReadAccept(this.remaining, pcrReadResult(this.outs), this.values);
  }

  /** The round's command failed: frees its outputs and rethrows `e`. */
  failed(e: unknown): never {
    freeAll(this.outs.selOut, this.outs.valOut);
    throw e;
  }
}

/** {@link Tpm.readPcrs} (see its TSDoc). */
export function readPcrs(t: Tpm, pcrs: number[]): Record<number, Buffer> {
  const reading = new PcrReading(pcrs);
  while (reading.pending) {
    const ctx = t.ctx();
    const args = reading.next();
    try {
      t.check('TPM2_PCR_Read', tss().Esys_PCR_Read(...args(ctx)));
    } catch (e) {
      reading.failed(e);
    }
    reading.done();
  }
  return reading.values;
}

/** {@link readPcrs} with each TPM2_PCR_Read on koffi's worker thread ({@link Tpm.esysAsync}). */
export async function readPcrsAsync(t: Tpm, pcrs: number[]): Promise<Record<number, Buffer>> {
  const reading = new PcrReading(pcrs);
  while (reading.pending) {
    const args = reading.next();
    await t.esysAsync('TPM2_PCR_Read', tss().Esys_PCR_Read, args).catch((e: unknown) => reading.failed(e));
    reading.done();
  }
  return reading.values;
}

/** The marshalled inputs of a TPM2_Quote (built once, reused across retries). */
interface QuoteRequest {
  qd: Buffer;
  want: number[];
  handle: number;
  qdStruct: Buffer;
  scheme: Buffer;
  selection: Buffer;
}

function quoteRequest(t: Tpm, ak: TpmAk, qualifyingData: Buffer, pcrs: number[]): QuoteRequest {
  t.ctx();
  const loaded = t.akHandle(ak);
  if (!(qualifyingData instanceof Uint8Array) || qualifyingData.length > 32) {
    throw new TpmError('TPM_BAD_INPUT', 'qualifyingData must be a Buffer of at most 32 bytes');
  }
  const qd = Buffer.from(qualifyingData);
  const want = normalisePcrs(pcrs);
  return {
    qd,
    want,
    handle: loaded.handle,
    qdStruct: toStruct('TPM2B_DATA', new WireWriter().tpm2b(qd).done()),
    scheme: toStruct('TPMT_SIG_SCHEME', sigScheme(ak.algorithm)),
    selection: toStruct('TPML_PCR_SELECTION', pcrSelectionSha256(want)),
  };
}

/** The arguments of Esys_Quote for `req`, writing into `quoted` and `sigOut`. */
function quoteArgs(
  ctx: NativePtr,
  req: QuoteRequest,
  quoted: [NativePtr | null],
  sigOut: [NativePtr | null],
): Parameters<ReturnType<typeof tss>['Esys_Quote']> {
  return [
    ctx,
    req.handle,
    ESYS_TR_PASSWORD,
    ESYS_TR_NONE,
    ESYS_TR_NONE,
    req.qdStruct,
    req.scheme,
    req.selection,
    quoted,
    sigOut,
  ];
}

/**
 * Reads a TPM2_Quote's outputs (and frees them) and checks the attestation against the request
 * and the PCR values read just before; returns the quote, or null when a PCR changed in between.
 */
function quoteResult(
  ak: TpmAk,
  req: QuoteRequest,
  quoted: [NativePtr | null],
  sigOut: [NativePtr | null],
  pcrValues: Record<number, Buffer>,
): TpmQuote | null {
  let attest: Buffer;
  let signature: Buffer;
  try {
    attest = unwrap2b(fromStruct('TPM2B_ATTEST', ptr(quoted, 'TPM2_Quote quoted')), 'TPM2B_ATTEST');
    signature = fromStruct('TPMT_SIGNATURE', ptr(sigOut, 'TPM2_Quote signature'));
  } finally {
    freeAll(quoted, sigOut);
  }
  const { qd, want } = req;
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
  if (!digest.equals(parsed.pcrDigest)) return null;
  return {
    attest,
    signature,
    akPublic: Buffer.from(ak.publicArea),
    pcrSelection: { hash: 'sha256', pcrs: want },
    pcrValues,
  };
}

const PCR_CHANGED = () =>
  new TpmError('PCR_CHANGED', 'PCR values kept changing between TPM2_PCR_Read and TPM2_Quote');

/**
 * One TPM2_Quote attempt, shared by the synchronous and the worker-thread paths: {@link args}
 * for the command, then {@link result} or {@link failed}.
 */
class QuoteAttempt {
  private readonly quoted: [NativePtr | null] = [null];
  private readonly sigOut: [NativePtr | null] = [null];
  private readonly ak: TpmAk;
  private readonly req: QuoteRequest;

  constructor(ak: TpmAk, req: QuoteRequest) {
    this.ak = ak;
    this.req = req;
  }

  /** Esys_Quote's arguments for a context. */
  readonly args = (ctx: NativePtr) => quoteArgs(ctx, this.req, this.quoted, this.sigOut);

  /** The command returned: {@link quoteResult} against the PCR values read just before. */
  result(pcrValues: Record<number, Buffer>): TpmQuote | null {
    return quoteResult(this.ak, this.req, this.quoted, this.sigOut, pcrValues);
  }

  /** The command failed: frees its outputs and rethrows `e`. */
  failed(e: unknown): never {
    freeAll(this.quoted, this.sigOut);
    throw e;
  }
}

/** {@link Tpm.quote} (see its TSDoc). */
export function quote(t: Tpm, ak: TpmAk, qualifyingData: Buffer, pcrs: number[]): TpmQuote {
  const req = quoteRequest(t, ak, qualifyingData, pcrs);
  for (let n = 0; n < 3; n++) {
    const pcrValues = t.readPcrs(req.want);
    const attempt = new QuoteAttempt(ak, req);
    try {
      t.check('TPM2_Quote', tss().Esys_Quote(...attempt.args(t.ctx())));
    } catch (e) {
      attempt.failed(e);
    }
    const q = attempt.result(pcrValues);
    if (q) return q;
  }
  throw PCR_CHANGED();
}

/** {@link Tpm.quoteAsync} (see its TSDoc). */
export async function quoteAsync(
  t: Tpm,
  ak: TpmAk,
  qualifyingData: Buffer,
  pcrs: number[],
): Promise<TpmQuote> {
  const req = quoteRequest(t, ak, qualifyingData, pcrs);
  for (let n = 0; n < 3; n++) {
    const pcrValues = await readPcrsAsync(t, req.want);
    const attempt = new QuoteAttempt(ak, req);
    await t.esysAsync('TPM2_Quote', tss().Esys_Quote, attempt.args).catch((e: unknown) => attempt.failed(e));
    const q = attempt.result(pcrValues);
    if (q) return q;
  }
  throw PCR_CHANGED();
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
