/**
 * The conformance `auth/*` client scenarios (testing/conformance/auth-run.ts) with the plain SDK
 * client as the control and cmcp as the client under test, in one run: discovery variants,
 * a Client ID Metadata Document, scope selection and step-up, each token endpoint
 * authentication method, pre-registration, the 2025-03-26 fallbacks, a resource mismatch,
 * client credentials with a secret and with private_key_jwt. cmcp passes every scenario the SDK
 * client passes, with the same check counts (except those listed, with the reason, in
 * EXPECTED_DIFFERENT). Needs the build (`npm run -s build`): the client programs run from dist/.
 */
import { describe, expect, it } from 'vitest';
import { runAuthConformance } from '../testing/conformance/auth-run.js';

describe('MCP conformance, auth client scenarios', () => {
  it('cmcp passes every auth scenario the SDK client passes, with the same check counts', {
    timeout: 600_000,
  }, async () => {
    const r = await runAuthConformance();
    expect(Object.keys(r.sdk).length).toBeGreaterThanOrEqual(22);
    // The control really passes most of them, and so does cmcp.
    const passing = Object.entries(r.cmcp).filter(([, c]) => c.failed === 0 && c.passed > 0);
    expect(passing.length).toBeGreaterThanOrEqual(20);
    expect(r.cmcp['auth/client-credentials-jwt']).toEqual(r.sdk['auth/client-credentials-jwt']);
    expect(r.problems).toEqual([]);
  });
});
