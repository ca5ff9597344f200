/**
 * Intel TDX DCAP quote shape checks on the guest side: the header and TD report body are parsed
 * by the verifier package's layout (`@cmcp/verify/abi/tdx/quote`, Intel TDX DCAP Quoting Library
 * API Appendix A): v4 has the 584-byte TD report body at offset 48 (REPORTDATA at body offset
 * 520 → 0x238), v5 a body descriptor (type u16, size u32) at 48 and the body at 54. The
 * signature is checked by the verifier, not here.
 */
import { AbiError, parseTdxQuoteHead, TD_REPORT_DATA_OFFSET } from '@cmcp/verify/abi';
import { CmcpError } from '../errors.js';

export { TDX_TEE_TYPE } from '@cmcp/verify/abi';

/** A quote of the wrong shape; `code` is registered (ABI_ERRORS). */
export class TdxError extends CmcpError {
  declare readonly code: 'TDX_QUOTE_MALFORMED';

  constructor(code: 'TDX_QUOTE_MALFORMED', message: string) {
    super(code, message);
    this.name = 'TdxError';
  }
}

/** Offset of REPORTDATA in a v4/v5 TDX quote. @throws TdxError */
export function tdxReportDataOffset(quote: Buffer): number {
  try {
    return parseTdxQuoteHead(quote).bodyOffset + TD_REPORT_DATA_OFFSET;
  } catch (err) {
    if (err instanceof AbiError) throw new TdxError('TDX_QUOTE_MALFORMED', `TDX quote: ${err.message}`);
    throw err;
  }
}

/** Checks a quote's shape and whether it carries `reportData`. @throws TdxError */
export function checkTdxQuote(quote: Buffer, reportData: Buffer): { reportDataMatches: boolean } {
  const off = tdxReportDataOffset(quote);
  return { reportDataMatches: quote.subarray(off, off + 64).equals(reportData) };
}
