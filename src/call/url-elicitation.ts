/**
 * An upstream that needs a user's authorization, told to a client that can take it: MCP's
 * `URLElicitationRequiredError` (2025-11-25 client/elicitation#url-elicitation-required-error,
 * JSON-RPC -32042, `data.elicitations` of URL-mode elicitations). Only a client that declared
 * URL-mode elicitation (`capabilities.elicitation.url`) gets it; every other client keeps
 * UPSTREAM_AUTHORIZATION_REQUIRED with `data.authorization_url`. Either way the call was refused
 * once and is not retried by the gateway.
 */
import { CmcpError } from '../errors/index.js';
import type { CallResponse } from './types.js';

/** Whether declared client capabilities include URL-mode elicitation (2025-11-25). */
export function declaresUrlElicitation(declared: Record<string, unknown> | undefined): boolean {
  const e = declared?.elicitation;
  return typeof e === 'object' && e !== null && typeof (e as Record<string, unknown>).url === 'object';
}

/**
 * The answer to a client that declared URL-mode elicitation: an UPSTREAM_AUTHORIZATION_REQUIRED
 * error that names an authorization URL becomes URL_ELICITATION_REQUIRED whose one elicitation
 * (`mode: "url"`, `elicitationId` = the call's id) points at that URL; its other data (call id,
 * evidence, disposition) stays, and `reason` keeps the code the terminal entry recorded.
 * Any other answer is returned unchanged.
 */
export function asUrlElicitation(r: CallResponse): CallResponse {
  if (!('error' in r)) return r;
  const data = r.error.data as Record<string, unknown> | undefined;
  const url = data?.authorization_url;
  if (data?.error_code !== 'UPSTREAM_AUTHORIZATION_REQUIRED' || typeof url !== 'string') return r;
  const upstream = typeof data.upstream === 'string' ? ` of upstream ${data.upstream}` : '';
  const message = `Authorize the gateway's access${upstream} at this URL, then call the tool again.`;
  const err = new CmcpError(
    'URL_ELICITATION_REQUIRED',
    'the upstream needs a user to authorize the gateway at the URL in data.elicitations',
  );
  const elicitationId = typeof data.call_id === 'string' ? data.call_id : url;
  return {
    error: {
      code: err.rpc,
      message: err.message,
      data: {
        ...data,
        error_code: 'URL_ELICITATION_REQUIRED',
        reason: 'UPSTREAM_AUTHORIZATION_REQUIRED',
        elicitations: [{ mode: 'url', elicitationId, url, message }],
      },
    },
  };
}
