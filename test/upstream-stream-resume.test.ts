/**
 * cmcp resumes an upstream's event stream (SEP-1699, docs/spec/mcp.md#resumable-streams): a
 * `tools/call` whose stream the upstream closes gracefully after a priming event, or whose TCP
 * connection dies mid-stream, is resumed with `GET` and `Last-Event-ID` after the stream's
 * `retry:`, and the call completes with the replayed response (one terminal entry,
 * `completed`). Real gateway, a raw HTTP upstream (test/fixtures/resuming-server.ts), the SDK
 * client in front.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterEach, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { type ResumingServer, startResumingServer } from './fixtures/resuming-server.js';
import { startInProcess, writeConfig } from './harness/gateway.js';

describe('an upstream event stream cut before the response', () => {
  let up: ResumingServer | undefined;
  let gw: Gateway | undefined;
  let client: Client | undefined;
  afterEach(async () => {
    await client?.close().catch(() => undefined);
    await gw?.close();
    await up?.close();
  });

  for (const how of ['close', 'kill'] as const)
    it(`is resumed with GET and Last-Event-ID after retry (${how === 'close' ? 'closed gracefully' : 'TCP connection killed'})`, async () => {
      up = await startResumingServer(how, 300);
      gw = await startInProcess(
        await writeConfig({ upstreams: [{ name: 'r', transport: 'http', url: up.url }] }),
      );
      client = new Client({ name: 'resume-test', version: '1.0.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
          requestInit: { headers: { Authorization: 'Bearer alice-token' } },
        }),
      );
      const r = await client.callTool({ name: 'r.slow', arguments: {} });
      expect(r.content).toEqual([{ type: 'text', text: 'resumed answer' }]);
      expect(up.resumes.map((x) => x.lastEventId)).toEqual([expect.stringMatching(/^p-\d+$/)]);
      // Not before the upstream's retry delay (wide margin: no upper bound asserted here).
      expect((up.resumes[0]?.at ?? 0) - (up.cutAt() ?? 0)).toBeGreaterThanOrEqual(250);
      const chains = gw.db
        .prepare<[], { chain_id: string }>(
          "SELECT DISTINCT chain_id FROM audit_entries WHERE entry_type = 'tool_call'",
        )
        .all();
      const rows = chains
        .flatMap((c) => gw?.chain.entries(c.chain_id) ?? [])
        .filter((e) => e.entry_type === 'tool_call' && e.tool_name === 'r.slow')
        .map((e) => ({ disposition: e.disposition, error_code: e.error_code }));
      expect(rows).toEqual([{ disposition: 'completed', error_code: null }]);
    });
});
