/**
 * `npm run conformance` as a test: the public MCP server conformance suite
 * (`@modelcontextprotocol/conformance`) passes against cmcp's fixture server, and through a
 * gateway in front of it every scenario passes with the same check counts — except those
 * listed, with their reason, in testing/conformance/expected.ts (a listed scenario that
 * starts passing fails this test until the list is updated). The client scenarios: every one
 * the SDK client passes alone passes with cmcp as the client (the SDK client through a gateway
 * whose upstream is the scenario's server) with the same check counts, `sse-retry` among them;
 * the auth/* scenarios are compared against an SDK client doing OAuth in conformance-auth.test.ts.
 * Needs the build (the runner starts the compiled driver, dist/testing/conformance/).
 */
import { describe, expect, it } from 'vitest';
import { runConformance } from '../testing/conformance/run.js';

describe('MCP conformance (server suite)', () => {
  it('every scenario passes directly, and through cmcp with the same check counts', {
    timeout: 300_000,
  }, async () => {
    const r = await runConformance({ server: true });
    // The suite really ran: the runner's active server scenarios, each with checks.
    expect(Object.keys(r.direct).length).toBeGreaterThanOrEqual(30);
    expect(r.direct['dns-rebinding-protection']).toEqual({ passed: 2, failed: 0 });
    expect(r.gateway['dns-rebinding-protection']).toEqual({ passed: 2, failed: 0 });
    expect(r.problems).toEqual([]);
  });
});

describe('MCP conformance (client scenarios)', () => {
  it('every scenario the SDK client passes alone passes with cmcp as the client, same counts', {
    timeout: 1_500_000,
  }, async () => {
    const r = await runConformance({ client: true });
    expect(Object.keys(r.client?.direct ?? {}).length).toBeGreaterThanOrEqual(20);
    expect(r.client?.gateway['sse-retry']).toEqual({ passed: 3, failed: 0 });
    expect(r.client?.gateway.tools_call).toEqual({ passed: 1, failed: 0 });
    expect(r.problems).toEqual([]);
  });
});
