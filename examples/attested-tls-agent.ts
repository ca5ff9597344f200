/**
 * An MCP agent that talks to cmcp over attested TLS (docs/spec/attested-tls.md): the MCP SDK's
 * Streamable HTTP client transport, with every connection opened through @cmcp/verify's
 * attested-TLS connector. The gateway's certificate must carry hardware evidence that chains to
 * the pinned roots, binds the certificate's own key and names the expected gateway measurement;
 * otherwise the connection is refused before the bearer token (or anything else) is sent.
 *
 * Run (after `cmcp measure` gave the measurement and the trust store pins your AK CA):
 *   node examples/attested-tls-agent.ts https://gateway:8787 sha256:<measurement> trust-store.yaml
 * with CMCP_TOKEN set to the agent's bearer token.
 */
import { pathToFileURL } from 'node:url';
import { type AttestedTlsOptions, attestedConnect, loadTrustStore, TlsBindingMemory } from '@cmcp/verify';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { Agent, fetch as undiciFetch } from 'undici';

/**
 * Connects an MCP client to `gatewayUrl` (its `/mcp` endpoint) over attested TLS.
 * @param pins what the agent pins: roots, accepted gateway measurements, optional policy/catalog hashes.
 * @returns the connected client and a `close()` that also closes the connection pool.
 * @throws (rejects) the transport's error, whose `cause` is the refusal (a CmcpError with a
 *   TLS_* code) when the server is not the attested gateway.
 */
export async function connectAttestedMcp(
  gatewayUrl: string,
  token: string,
  pins: AttestedTlsOptions,
): Promise<{ client: Client; close(): Promise<void> }> {
  // One memory per agent: a server replaying an older binding than one already seen is refused.
  const dispatcher = new Agent({ connect: attestedConnect({ memory: new TlsBindingMemory(), ...pins }) });
  const transport = new StreamableHTTPClientTransport(new URL('/mcp', gatewayUrl), {
    requestInit: { headers: { authorization: `Bearer ${token}` } },
    fetch: (url, init) =>
      undiciFetch(url, { ...(init as object), dispatcher }) as unknown as Promise<Response>,
  });
  const client = new Client({ name: 'attested-tls-agent', version: '1.0.0' });
  try {
    await client.connect(transport);
  } catch (e) {
    await dispatcher.close();
    throw e;
  }
  return {
    client,
    close: async () => {
      await client.close();
      await dispatcher.close();
    },
  };
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) {
  const [url, measurement, trustStore] = process.argv.slice(2);
  if (!url || !measurement || !trustStore || !process.env.CMCP_TOKEN) {
    process.stderr.write(
      'usage: CMCP_TOKEN=… node attested-tls-agent.ts <https-url> <sha256:measurement> <trust-store.yaml>\n',
    );
    process.exit(2);
  }
  const { client, close } = await connectAttestedMcp(url, process.env.CMCP_TOKEN, {
    trustStore: loadTrustStore(trustStore),
    gatewayMeasurements: [measurement],
  });
  const { tools } = await client.listTools();
  process.stdout.write(`attested gateway; ${tools.length} tools: ${tools.map((t) => t.name).join(', ')}\n`);
  await close();
}
