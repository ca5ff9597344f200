/**
 * The client under test of the conformance client scenarios (`conformance client --command`):
 * the runner starts a scenario's server and runs this with its URL as the last argument and the
 * scenario's name in `MCP_CONFORMANCE_SCENARIO`. By default cmcp is the client under test: a
 * dev-mode gateway is started whose one upstream is the scenario's server (bare names,
 * `prefix: ""`), and the official SDK client drives it through the gateway. With `--direct`
 * the same SDK client talks to the scenario's server itself (the control).
 *
 * What the client does is what the scenario asks of a client: it initializes (declaring
 * elicitation with defaults applied, SEP-1034, in the elicitation scenarios), lists the tools, and calls the scenario's tool
 * (`add_numbers` with 5 and 3, `test_reconnection`, `test_client_elicitation_defaults`; in any
 * other scenario the first tool listed, with no arguments). An elicitation is accepted with no
 * content of its own, so the defaults are what the server receives. Exit status 0 when every
 * step answered, 1 otherwise (the scenario's checks decide the verdict either way).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import pino from 'pino';
import { parseConfig } from '../../src/config/index.js';
import { startGateway } from '../../src/gateway/lifecycle/start.js';

/** The tool each scenario expects a call of, and its arguments. */
const SCENARIO_TOOLS: Record<string, { name: string; arguments: Record<string, unknown> }> = {
  tools_call: { name: 'add_numbers', arguments: { a: 5, b: 3 } },
  'sse-retry': { name: 'test_reconnection', arguments: {} },
  'elicitation-sep1034-client-defaults': { name: 'test_client_elicitation_defaults', arguments: {} },
};

/** A dev-mode gateway (software provider, no tokens) whose one upstream is `upstreamUrl`. */
async function gatewayFor(upstreamUrl: string, dir: string) {
  const cfg = parseConfig(
    {
      dev_mode: true,
      listen: { host: '127.0.0.1', port: 0 },
      database: join(dir, 'cmcp.db'),
      attestation: { provider: 'software' },
      upstreams: [{ name: 'scenario', transport: 'http', url: upstreamUrl, prefix: '' }],
      metrics: { enabled: false },
    },
    'conformance client driver (inline)',
  );
  return startGateway(cfg, pino({ level: process.env.CMCP_CONFORMANCE_LOG ?? 'silent' }));
}

/** Runs one scenario's client steps against `url`. @throws what a step threw. */
export async function driveScenario(url: string, scenario: string): Promise<void> {
  // Elicitation only where the scenario asks for it: a client that declares it gets an upstream
  // connection of its own through cmcp (a second initialize the scenario would count).
  const elicits = scenario.startsWith('elicitation-');
  const client = new Client(
    { name: 'cmcp-conformance-client', version: '1.0.0' },
    elicits ? { capabilities: { elicitation: { form: { applyDefaults: true } } } } : {},
  );
  if (elicits) client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'accept', content: {} }));
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    const { tools } = await client.listTools();
    const wanted = SCENARIO_TOOLS[scenario];
    const first = tools[0];
    const call = wanted ?? (first ? { name: first.name, arguments: {} } : undefined);
    if (call) await client.callTool(call);
  } finally {
    await client.close();
  }
}

async function main(): Promise<number> {
  const url = process.argv.at(-1);
  const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? '';
  if (!url || !/^https?:/.test(url)) {
    console.error(
      'usage: client-driver [--direct] <server url> (MCP_CONFORMANCE_SCENARIO names the scenario)',
    );
    return 2;
  }
  if (process.argv.includes('--direct')) return driveScenario(url, scenario).then(() => 0);
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-conformance-client-'));
  const gw = await gatewayFor(url, dir);
  try {
    await driveScenario(`${gw.url}/mcp`, scenario);
    return 0;
  } finally {
    await gw.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const code = await main().catch((e: unknown) => {
    console.error((e as Error).message);
    return 1;
  });
  process.exit(code);
}
