/**
 * The gateway's error registry: its own codes (./codes.ts), registered next to the verifier's
 * (`@cmcp/verify/errors`) and the native attestation layer's (native/errors.ts), and the shared
 * {@link CmcpError} class, so an error thrown by the verifier's formats is one too.
 * {@link ERRORS} is every code of the three, for `ERRORS[code].http` lookups and the docs.
 */
import { type ErrorSpec, registerErrors, VERIFY_ERRORS } from '@cmcp/verify/errors';
import { NATIVE_ERRORS } from '../../native/errors.js';
import { GATEWAY_ERRORS } from './codes.js';

registerErrors('gateway', GATEWAY_ERRORS);

declare module '@cmcp/verify/errors' {
  interface ErrorRegistry extends Readonly<Record<keyof typeof GATEWAY_ERRORS, ErrorSpec>> {}
}

/** Every registered code: the gateway's, then native/'s, then the verifier's. */
export const ERRORS = { ...GATEWAY_ERRORS, ...NATIVE_ERRORS, ...VERIFY_ERRORS } as const;

export { CmcpError, clip, type ErrorCode, type ErrorSpec } from '@cmcp/verify/errors';
export { GATEWAY_ERRORS };
