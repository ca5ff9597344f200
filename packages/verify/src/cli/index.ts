/**
 * `@cmcp/verify/cli`: the `cmcp-verify` commands as commander subcommands, for a host program
 * that embeds them (the gateway's `cmcp verify …`), and their runners for tests. The
 * `cmcp-verify` bin itself is ./main.ts. Node-only (reads files).
 * - `claim`: {@link registerVerifyCommand}, {@link runVerify} (./claim.ts);
 * - `evidence`: {@link registerVerifyEvidenceCommand}, {@link runVerifyEvidence} (./evidence.ts);
 * - `receipt`, `consistency`: {@link registerTransparencyCommands}, {@link runVerifyReceipt},
 *   {@link runVerifyConsistency} (./transparency.ts);
 * - `tls`: {@link registerVerifyTlsCommand}, {@link runVerifyTls} (./tls.ts);
 * - {@link VerifyInputError}: unreadable or oversized input (exit code 2).
 */
export { registerVerifyCommand, runVerify, type VerifyCliOptions } from './claim.js';
export {
  registerVerifyEvidenceCommand,
  runVerifyEvidence,
  type VerifyEvidenceCliOptions,
} from './evidence.js';
export { VerifyInputError } from './input.js';
export { registerVerifyTlsCommand, runVerifyTls, type VerifyTlsCliOptions } from './tls.js';
export {
  type ConsistencyCliOptions,
  type ReceiptCliOptions,
  registerTransparencyCommands,
  runVerifyConsistency,
  runVerifyReceipt,
} from './transparency.js';
