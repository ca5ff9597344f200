/**
 * cmcp as the client under test of the `auth/*` client scenarios (auth-run.ts): a dev-mode
 * gateway whose one upstream is the scenario's protected server (URL last on the command line),
 * with `upstreams[].oauth` for the scenario's client (auth-scenario.ts), and a plain SDK client
 * of the gateway. For an authorization code scenario the operator's part is played: the call
 * refused with UPSTREAM_AUTHORIZATION_REQUIRED names the authorization URL; it is opened, and
 * its redirect lands on the gateway's `/oauth/upstream/callback`, which finishes the flow. Then
 * the upstream's tools are listed and the first is called through the gateway; exit 0 when
 * that worked.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type CallToolResult, McpError } from '@modelcontextprotocol/sdk/types.js';
import pino from 'pino';
import { parseConfig } from '../../src/config/index.js';
import { startGateway } from '../../src/gateway/lifecycle/start.js';
import { approve, type ClientKind, clientKind, scenario } from './auth-scenario.js';

const SECRET_ENV = 'CMCP_CONFORMANCE_CLIENT_SECRET';
const KEY_ENV = 'CMCP_CONFORMANCE_PRIVATE_KEY';

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

/** The upstream's `oauth` section for this scenario's client; secrets go through the environment. */
function oauthSection(kind: ClientKind, callback: string): Record<string, unknown> {
  if (kind.clientSecret) process.env[SECRET_ENV] = kind.clientSecret;
  const secret = kind.clientSecret ? { client_secret: { env: SECRET_ENV } } : {};
  if (kind.grant === 'client_credentials') {
    if (kind.privateKeyPem) {
      process.env[KEY_ENV] = kind.privateKeyPem;
      return {
        client_id: kind.clientId,
        private_key: { env: KEY_ENV },
        private_key_alg: kind.alg,
        token_endpoint_auth_method: 'private_key_jwt',
      };
    }
    return { client_id: kind.clientId, ...secret };
  }
  return {
    grant: 'authorization_code',
    redirect_uri: callback,
    ...(kind.clientId ? { client_id: kind.clientId } : {}),
    ...secret,
    ...(kind.clientMetadataUrl ? { client_metadata_url: kind.clientMetadataUrl } : {}),
  };
}

/** The operator opens the URL; the authorization server sends them back to the gateway's callback. */
async function authorizeAt(url: string): Promise<void> {
  const r = await fetch(await approve(url));
  if (!r.ok) throw new Error(`the gateway's callback answered ${r.status}: ${await r.text()}`);
}

/** Calls a tool; the authorization URL when the call is refused for one. */
async function callAuthorizing(client: Client, tool: string): Promise<CallToolResult | string> {
  try {
    return (await client.callTool({ name: tool, arguments: {} })) as CallToolResult;
  } catch (e) {
    const data = e instanceof McpError ? (e.data as Record<string, unknown> | undefined) : undefined;
    if (data?.error_code === 'UPSTREAM_AUTHORIZATION_REQUIRED' && typeof data.authorization_url === 'string')
      return data.authorization_url;
    throw e;
  }
}

async function main(): Promise<void> {
  const upstreamUrl = process.argv.at(-1) as string;
  const { name, context } = scenario();
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-auth-conformance-'));
  const callback = `http://127.0.0.1:${port}/oauth/upstream/callback`;
  const cfg = parseConfig(
    {
      dev_mode: true,
      listen: { host: '127.0.0.1', port },
      database: join(dir, 'cmcp.db'),
      attestation: { provider: 'software' },
      upstreams: [
        {
          name: 'scenario',
          transport: 'http',
          url: upstreamUrl,
          oauth: oauthSection(clientKind(name, context), callback),
        },
      ],
      metrics: { enabled: false },
    },
    'auth conformance (inline)',
  );
  const gw = await startGateway(cfg, pino({ level: process.env.CMCP_CONFORMANCE_LOG ?? 'silent' }));
  try {
    const client = new Client({ name: 'cmcp-auth-conformance', version: '1.0.0' }, { capabilities: {} });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`)));
    // The upstream's tools are listed once it is authorized (client credentials: at start-up).
    let tools = await client.listTools();
    if (!tools.tools.some((t) => t.name.startsWith('scenario.'))) {
      const url = await callAuthorizing(client, 'scenario.test-tool');
      if (typeof url !== 'string')
        throw new Error('the upstream is neither listed nor waiting for an authorization');
      await authorizeAt(url);
      tools = await client.listTools();
    }
    const first = tools.tools.find((t) => t.name.startsWith('scenario.'));
    if (!first) throw new Error('the upstream offers no tools through the gateway');
    // A call that needs more (step-up) is refused with a new URL: authorized again, then retried.
    let result = await callAuthorizing(client, first.name);
    for (let i = 0; i < 2 && typeof result === 'string'; i++) {
      await authorizeAt(result);
      result = await callAuthorizing(client, first.name);
    }
    if (typeof result === 'string') throw new Error('the upstream keeps asking for an authorization');
    if (result.isError) throw new Error(`the call failed: ${JSON.stringify(result.content).slice(0, 300)}`);
    await client.close();
  } finally {
    await gw.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`cmcp client: ${(e as Error).message}`);
    process.exit(1);
  },
);
