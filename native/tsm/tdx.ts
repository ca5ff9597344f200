/**
 * Intel TDX DCAP quote shape checks (Intel TDX DCAP Quoting Library API, Appendix A "Quote
 * format"): a 48-byte header (version u16 LE 4 or 5, attestation key type, TEE type 0x81), then
 * for v4 the 584-byte TD report body at offset 48 (REPORTDATA at body offset 520 → 0x238), for v5
 * a body descriptor (type u16, size u32) at 48 and the body at 54. The signature is checked by the
 * verifier, not here.
 */

export const TDX_TEE_TYPE = 0x00000081;

export class TdxError extends Error {
  constructor(
    readonly code: 'TDX_QUOTE_MALFORMED',
    message: string,
  ) {
    super(message);
    this.name = 'TdxError';
  }
}

/** Offset of REPORTDATA in a v4/v5 TDX quote. @throws TdxError */
export function tdxReportDataOffset(quote: Buffer): number {
  const bad = (why: string) => new TdxError('TDX_QUOTE_MALFORMED', `TDX quote: ${why}`);
  if (quote.length < 48 + 584) throw bad(`${quote.length} bytes is shorter than header + TD report`);
  const version = quote.readUInt16LE(0);
  const teeType = quote.readUInt32LE(4);
  if (teeType !== TDX_TEE_TYPE) throw bad(`TEE type 0x${teeType.toString(16)} is not TDX (0x81)`);
  if (version === 4) return 48 + 520;
  if (version === 5) {
    const bodyType = quote.readUInt16LE(48);
    if (bodyType !== 2 && bodyType !== 3) throw bad(`v5 body type ${bodyType} is not a TD report`);
    if (quote.length < 54 + 584) throw bad('v5 quote too short');
    return 54 + 520;
  }
  throw bad(`version ${version} is not 4 or 5 (a TDREPORT is not a quote)`);
}

/** Checks a quote's shape and whether it carries `reportData`. @throws TdxError */
export function checkTdxQuote(quote: Buffer, reportData: Buffer): { reportDataMatches: boolean } {
  const off = tdxReportDataOffset(quote);
  return { reportDataMatches: quote.subarray(off, off + 64).equals(reportData) };
}
