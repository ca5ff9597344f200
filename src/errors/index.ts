/**
 * The gateway's error registry: the codes it answers with and the shared {@link CmcpError}
 * class (from `@cmcp/verify/errors`, so an error thrown by the verifier's formats is one too).
 */
export { CmcpError, clip, ERRORS, type ErrorCode, type ErrorSpec } from '@cmcp/verify/errors';
