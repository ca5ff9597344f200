/**
 * `npm run conformance` as a test: the public MCP server conformance suite
 * (`@modelcontextprotocol/conformance`) passes against cmcp's fixture server, and through a
 * gateway in front of it every scenario passes with the same check counts — except those
 * listed, with their reason, in testing/conformance/expected.ts (a listed scenario that
 * starts passing fails this test until the list is updated).
 */
import { describe, expect, it } from 'vitest';
import { runConformance } from '../testing/conformance/run.js';

describe('MCP conformance (server suite)', () => {
  it('every scenario passes directly, and through cmcp with the same check counts', {
    timeout: 300_000,
  }, async () => {
    const r = await runConformance();
    // The suite really ran: the runner's active server scenarios, each with checks.
    expect(Object.keys(r.direct).length).toBeGreaterThanOrEqual(30);
    expect(r.direct['dns-rebinding-protection']).toEqual({ passed: 2, failed: 0 });
    expect(r.gateway['dns-rebinding-protection']).toEqual({ passed: 2, failed: 0 });
    expect(r.problems).toEqual([]);
  });
});
