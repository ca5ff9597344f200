/**
 * The respond stage: the one builder of a `tools/call`'s JSON-RPC result or error, from its
 * committed terminal entry (docs/spec/mcp.md#inbound). Codes and messages come from the error registry; the
 * one exception is an upstream's own JSON-RPC error, relayed as it came (UPSTREAM_RPC_ERROR).
 */

import { type AuditEntry, buildReceipt, EVIDENCE_META_KEY } from '@cmcp/verify/formats';
import { CmcpError, type ErrorCode } from '../errors/index.js';
import type { Forwarded } from './forward.js';
import type { CallEvidence, CallResponse, Refusal } from './types.js';

export { EVIDENCE_META_KEY };

/**
 * The receipt of a committed entry (docs/spec/transparency.md#receipts) as an answer carries it:
 * its place in its chain's tree and, for a session chain's entry, where to fetch the inclusion
 * proof once the window's checkpoint is signed (the answer does not wait for it).
 */
export function evidenceOf(e: AuditEntry): CallEvidence {
  const receipt = buildReceipt({
    chain_id: e.chain_id,
    session_id: e.session_id,
    call_id: e.call_id,
    entry_hash: e.entry_hash,
    sequence_number: e.sequence_number,
  });
  // The gateway chain's checkpoints are not signed: nothing to fetch for its entries.
  return e.chain_id === e.session_id ? receipt : { ...receipt, fetch: null };
}

function registered(code: ErrorCode, message: string, data: Record<string, unknown>): CallResponse {
  const err = new CmcpError(code, message);
  return { error: { code: err.rpc, message: err.message, data: { error_code: code, ...data } } };
}

/** A refusal whose terminal entry was committed. */
export function refused(refusal: Refusal, callId: string, entry: AuditEntry): CallResponse {
  return registered(refusal.code, refusal.message, {
    call_id: callId,
    ...refusal.data,
    evidence: evidenceOf(entry),
  });
}

/**
 * The terminal entry (or the admission) could not be committed: the caller learns that the
 * outcome is not on the record. `what` names what was not recorded.
 */
export function notRecorded(
  what: 'refusal' | 'admission' | 'outcome',
  callId: string,
  data: Record<string, unknown> = {},
): CallResponse {
  const message =
    what === 'admission' ? 'admission could not be recorded' : `the ${what} could not be recorded`;
  return registered('AUDIT_WRITE_FAILED', message, { call_id: callId, ...data });
}

/** What the execution registry says about a terminal call, for error data. */
function executionData(executionId: string | null, f: Forwarded, entry: AuditEntry) {
  return executionId === null
    ? {}
    : { execution_id: executionId, execution_state: f.disposition, terminal_entry_hash: entry.entry_hash };
}

/**
 * The answer to a forwarded call whose terminal entry was committed: the upstream's result with
 * the evidence in `_meta`, or an error naming its disposition.
 * @param advisory set in advisory mode when the policy would have denied the call.
 */
export function answered(
  f: Forwarded,
  callId: string,
  executionId: string | null,
  entry: AuditEntry,
  advisory: Record<string, unknown> | null,
): CallResponse {
  const evidence: CallEvidence & { policy_advisory?: Record<string, unknown> } = evidenceOf(entry);
  if (advisory) evidence.policy_advisory = advisory;
  const o = f.outcome;
  if ('result' in o) {
    const meta = (typeof o.result._meta === 'object' && o.result._meta) || {};
    return { result: { ...o.result, _meta: { ...meta, [EVIDENCE_META_KEY]: evidence } } };
  }
  if ('rpcError' in o) {
    // The upstream's own code and message, relayed (the registry's UPSTREAM_RPC_ERROR says so).
    return {
      error: {
        code: o.rpcError.code,
        message: o.rpcError.message,
        data: {
          error_code: 'UPSTREAM_RPC_ERROR',
          upstream_data: o.rpcError.data ?? null,
          call_id: callId,
          evidence,
        },
      },
    };
  }
  if ('tooLarge' in o)
    return registered(
      'UPSTREAM_RESULT_TOO_LARGE',
      `the upstream result exceeds the ${o.tooLarge.capBytes}-byte limit`,
      {
        call_id: callId,
        limit_bytes: o.tooLarge.capBytes,
        evidence,
        ...executionData(executionId, f, entry),
      },
    );
  if (f.errorCode === 'UPSTREAM_AUTHORIZATION_REQUIRED' || f.errorCode === 'UPSTREAM_AUTHORIZATION_FAILED')
    return registered(
      f.errorCode,
      f.errorCode === 'UPSTREAM_AUTHORIZATION_REQUIRED'
        ? 'the upstream needs an authorization the gateway cannot perform; an operator must visit authorization_url'
        : 'the gateway could not get an access token the upstream accepts; nothing was sent',
      {
        call_id: callId,
        disposition: f.disposition,
        evidence,
        ...('authorizationUrl' in o && o.authorizationUrl ? { authorization_url: o.authorizationUrl } : {}),
        ...executionData(executionId, f, entry),
      },
    );
  return registered(
    f.errorCode ?? 'UPSTREAM_FAILED',
    o.boundary === 'not_sent'
      ? 'the upstream could not be reached; nothing was sent'
      : 'the upstream did not answer; the outcome is unknown',
    { call_id: callId, disposition: f.disposition, evidence, ...executionData(executionId, f, entry) },
  );
}
