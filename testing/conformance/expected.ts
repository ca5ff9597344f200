/**
 * Conformance scenarios that pass directly but not yet through cmcp, each with the reason
 * (testing/conformance/run.ts). A listed scenario that passes through the gateway fails the
 * run until it is removed here: this list only ever shrinks. Empty: all 30 active server
 * scenarios of @modelcontextprotocol/conformance 0.1.16 pass through cmcp.
 */
export const EXPECTED_THROUGH_GATEWAY: Record<string, string> = {};

/**
 * Client scenarios the SDK client passes alone but cmcp as the client does not yet, each with
 * the reason (testing/conformance/client-suite.ts); the same rule: this list only ever shrinks.
 */
export const EXPECTED_CLIENT_THROUGH_GATEWAY: Record<string, string> = {};
