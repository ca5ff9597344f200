/**
 * A TDX quote verified without Intel PCS collateral still has its Quoting Enclave checked: the QE
 * report (signed by the PCK, `tdx.qe_report_signature`) must name the Intel TD Quoting Enclave —
 * MRSIGNER and ISVPRODID equal to the trust store's `intel_qe_identity` (the values of Intel's
 * QE identity collateral, `enclaveIdentity.mrsigner` / `isvprodid`; Intel "SGX/TDX PCS API",
 * QE Identity v2). Without the collateral the ISVSVN, the TCB status and revocation are not
 * appraised, and the report says so.
 */
import type { TdxQuote } from '../abi/tdx/quote.js';
import { type CheckResult, check, fail, pass } from '../result.js';
import type { TrustStore } from '../trust.js';

const absent = (id: string, detail: string) => check(id, 'absent', 'COLLATERAL_NOT_SUPPLIED', detail);

/** The collateral checks when no collateral is supplied (ids as verifyTdxCollateral's). */
export function noCollateralChecks(
  q: TdxQuote,
  trustStore: TrustStore,
): { checks: CheckResult[]; notes: string[] } {
  const pin = trustStore.intel_qe_identity;
  const qe = q.qeReport;
  const seen = `QE report MRSIGNER ${qe.mrSigner.toString('hex')}, ISVPRODID ${qe.isvProdId}`;
  const qeCheck = !pin
    ? absent(
        'tdx.qe_identity',
        `QE identity not supplied, and the trust store pins no intel_qe_identity (${seen})`,
      )
    : qe.mrSigner.toString('hex') === pin.mrsigner && qe.isvProdId === pin.isvprodid
      ? pass(
          'tdx.qe_identity',
          `${seen} equal the trust store's Intel QE identity; ISVSVN and TCB status not appraised (no QE identity collateral)`,
        )
      : fail(
          'tdx.qe_identity',
          'COLLATERAL_MISMATCH',
          `${seen} are not the trust store's Intel QE identity (MRSIGNER ${pin.mrsigner}, ISVPRODID ${pin.isvprodid})`,
        );
  return {
    checks: [
      absent('tdx.collateral_signer', 'collateral not supplied'),
      absent('tdx.tcb_info', 'TCB info not supplied'),
      qeCheck,
      absent('tdx.crl', 'CRLs not supplied: revocation not checked'),
      absent('tdx.tcb_status', 'TCB status not appraised: no collateral (TCB info, QE identity) supplied'),
    ],
    notes: [
      'TCB status not appraised: no Intel PCS collateral (TCB info, QE identity, CRLs) was supplied, so the TCB status and revocation of the platform are unknown.',
    ],
  };
}
