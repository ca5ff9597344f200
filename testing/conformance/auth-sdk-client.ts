/**
 * The control of the `auth/*` client scenarios (auth-run.ts): the plain MCP SDK client with its
 * own OAuth (`StreamableHTTPClientTransport` with an `authProvider`: the SDK's
 * ClientCredentialsProvider / PrivateKeyJwtProvider, or an in-memory provider for the
 * authorization code flow whose user approves at once). Connects to the URL given last on the
 * command line, lists the tools and calls the first; exit 0 when that worked.
 */

import type { OAuthClientProvider, OAuthDiscoveryState } from '@modelcontextprotocol/sdk/client/auth.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import {
  ClientCredentialsProvider,
  PrivateKeyJwtProvider,
} from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from '@modelcontextprotocol/sdk/shared/auth.js';
import { approve, type ClientKind, clientKind, scenario } from './auth-scenario.js';

const REDIRECT = 'http://localhost:3000/callback';

/** An interactive client whose user approves at once; the code is kept for finishAuth. */
class ApprovingProvider implements OAuthClientProvider {
  code: string | undefined;
  private info: OAuthClientInformationMixed | undefined;
  private saved: OAuthTokens | undefined;
  private verifier = '';
  private discovery: OAuthDiscoveryState | undefined;
  constructor(private readonly kind: Extract<ClientKind, { grant: 'authorization_code' }>) {
    if (kind.clientId)
      this.info = {
        client_id: kind.clientId,
        ...(kind.clientSecret ? { client_secret: kind.clientSecret } : {}),
      };
  }
  get redirectUrl(): string {
    return REDIRECT;
  }
  get clientMetadataUrl(): string | undefined {
    return this.kind.clientMetadataUrl;
  }
  get clientMetadata(): OAuthClientMetadata {
    return {
      client_name: 'sdk control client',
      redirect_uris: [REDIRECT],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
    };
  }
  clientInformation() {
    return this.info;
  }
  saveClientInformation(i: OAuthClientInformationMixed) {
    this.info = i;
  }
  tokens() {
    return this.saved;
  }
  saveTokens(t: OAuthTokens) {
    this.saved = t;
  }
  async redirectToAuthorization(url: URL) {
    this.code = (await approve(url.href)).searchParams.get('code') ?? undefined;
  }
  saveCodeVerifier(v: string) {
    this.verifier = v;
  }
  codeVerifier() {
    return this.verifier;
  }
  // Discovery is kept for the code exchange, as cmcp keeps it (the SDK rediscovers without).
  saveDiscoveryState(d: OAuthDiscoveryState) {
    this.discovery = d;
  }
  discoveryState() {
    return this.discovery;
  }
}

async function main(): Promise<void> {
  const url = new URL(process.argv.at(-1) as string);
  const { name, context } = scenario();
  const kind = clientKind(name, context);
  let provider: OAuthClientProvider;
  if (kind.grant === 'client_credentials')
    provider = kind.privateKeyPem
      ? new PrivateKeyJwtProvider({
          clientId: kind.clientId,
          privateKey: kind.privateKeyPem,
          algorithm: kind.alg ?? 'ES256',
        })
      : new ClientCredentialsProvider({ clientId: kind.clientId, clientSecret: kind.clientSecret ?? '' });
  else provider = new ApprovingProvider(kind);
  const connect = async () => {
    const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
    const client = new Client({ name: 'sdk-control', version: '1.0.0' }, { capabilities: {} });
    await client.connect(transport);
    return { client, transport };
  };
  /** The code the user's approval gave, once (undefined: none, or not an interactive flow). */
  const takeCode = (e: unknown): string | undefined => {
    if (!(e instanceof UnauthorizedError) || !(provider instanceof ApprovingProvider)) return undefined;
    const code = provider.code;
    provider.code = undefined;
    return code;
  };
  let c: Awaited<ReturnType<typeof connect>>;
  try {
    c = await connect();
  } catch (e) {
    const code = takeCode(e);
    if (!code) throw e;
    const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
    await transport.finishAuth(code);
    c = await connect();
  }
  // A request refused after connecting (authorization needed later, or step-up): the user
  // approves, the code is exchanged and the request sent again, twice at most.
  const authorizing = async <T>(f: () => Promise<T>): Promise<T> => {
    for (let i = 0; ; i++) {
      try {
        return await f();
      } catch (e) {
        const code = i < 2 ? takeCode(e) : undefined;
        if (!code) throw e;
        await c.transport.finishAuth(code);
      }
    }
  };
  const tools = await authorizing(() => c.client.listTools());
  const first = tools.tools[0];
  if (first) await authorizing(() => c.client.callTool({ name: first.name, arguments: {} }));
  await c.client.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`sdk control client: ${(e as Error).message}`);
    process.exit(1);
  },
);
