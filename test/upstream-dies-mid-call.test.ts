/**
 * Issue 11 item 8: an upstream that dies in the middle of a call fails that call at once as
 * outcome_unknown, not after its timeout. Real upstream processes and sockets: a stdio server
 * that exits mid-call (also with a grandchild holding its stdout open), an HTTP server that
 * resets the connection after its SSE response began and before any response byte, or ends
 * its SSE response cleanly without the result. Each
 * upstream's timeout is 60 s; each test's own time limit (15 s) is what fails if the call
 * waited for it.
 */
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type ResettingServer, startResettingServer } from './fixtures/resetting-http-server.js';
import { cleanup, REPO_ROOT, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const LIMIT_MS = 15_000;
let http: ResettingServer;
let cfg: TestConfig;
let gw: Gateway;

beforeAll(async () => {
  http = await startResettingServer();
  cfg = await writeConfig({
    upstreams: [
      {
        name: 'dying',
        transport: 'stdio',
        command: process.execPath,
        args: [join(REPO_ROOT, 'test', 'fixtures', 'dying-stdio-server.mjs')],
        timeout_ms: 60_000,
      },
      { name: 'resetting', transport: 'http', url: http.url, timeout_ms: 60_000 },
    ],
  });
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  await http?.close();
  if (cfg) cleanup(cfg.dir);
});

/** Calls a tool as alice in a fresh session; returns the answer and the session's terminal entry. */
async function callInSession(tool: string) {
  const s = await fetch(`${gw.url}/sessions`, {
    method: 'POST',
    headers: { authorization: 'Bearer alice-token', 'content-type': 'application/json' },
    body: '{}',
  });
  const { session_id } = (await s.json()) as { session_id: string };
  const r = await rpc(gw.url, 'alice-token', {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: tool, arguments: {}, _cmcp: { session_id } },
  });
  const terminal = gw.chain.entries(session_id).filter((e) => e.entry_type === 'tool_call');
  return { r, terminal };
}

describe('an upstream that dies mid-call', () => {
  it.each([
    ['dying.exit', 'the stdio child exits'],
    ['dying.exit_orphan', 'the stdio child exits while a grandchild keeps its stdout open'],
    ['resetting.reset', 'the HTTP connection is reset after the SSE response began'],
    ['resetting.reset_early', 'the HTTP connection is reset before any response byte'],
    ['resetting.end_early', 'the SSE response ends cleanly before the result'],
  ])(
    '%s (%s): answered as outcome_unknown, not after the 60 s timeout',
    async (tool) => {
      const { r, terminal } = await callInSession(tool);
      expect(r.body.error.data.error_code).toBe('UPSTREAM_FAILED');
      expect(terminal).toHaveLength(1);
      expect(terminal[0]?.disposition).toBe('outcome_unknown');
      expect(terminal[0]?.error_code).toBe('UPSTREAM_FAILED');
      expect(terminal[0]?.detail).toHaveProperty('failure');
    },
    LIMIT_MS,
  );

  it(
    'the upstream is used again afterwards (reconnect)',
    async () => {
      expect(http.resets).toBeGreaterThanOrEqual(2);
      for (const tool of ['dying.echo', 'resetting.echo']) {
        const { r, terminal } = await callInSession(tool);
        expect(r.body.result.content[0].text).toBe('alive');
        expect(terminal[0]?.disposition).toBe('completed');
      }
    },
    LIMIT_MS,
  );
});
