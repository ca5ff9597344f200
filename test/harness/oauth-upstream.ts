/**
 * A protected MCP upstream on loopback (MCP 2025-11-25 "Authorization"): a real authorization
 * server (oidc-provider: client credentials, dynamic registration, RFC 8707 resource
 * indicators, JWT access tokens) and a Streamable HTTP MCP server built with the SDK that checks
 * each bearer token with jose (issuer, audience = its resource URL, scope), answers 401 with
 * `resource_metadata` (RFC 9728) and 403 `insufficient_scope` for a tool needing more scope.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { createRemoteJWKSet, type JWTPayload, jwtVerify } from 'jose';
import Provider from 'oidc-provider';

/** The pre-registered clients' credentials. */
export interface TestClients {
  basic: { id: string; secret: string };
  post: { id: string; secret: string };
  /** private_key_jwt: the PEM (PKCS#8) private key. */
  jwt: { id: string; privateKeyPem: string };
}

export interface ProtectedUpstream {
  /** The MCP endpoint (also the RFC 8707 resource). */
  url: string;
  issuer: string;
  clients: TestClients;
  /** Every access token the MCP server accepted, in order, with its payload. */
  accepted: { token: string; payload: JWTPayload }[];
  /** Challenges sent: 401 and 403 counts. */
  challenges: { unauthorized: number; insufficientScope: number };
  /** Token requests the authorization server answered, by grant. */
  grants: string[];
  /** Dynamic registrations made. */
  registrations: number;
  close(): Promise<void>;
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return (server.address() as AddressInfo).port;
}

async function body(req: IncomingMessage): Promise<unknown> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString('utf8');
  return text ? JSON.parse(text) : undefined;
}

function mcp(): McpServer {
  const s = new McpServer({ name: 'protected', version: '1.0.0' });
  s.registerTool('read', { description: 'Needs mcp:read' }, async () => ({
    content: [{ type: 'text', text: 'read ok' }],
  }));
  s.registerTool('write', { description: 'Needs mcp:write' }, async () => ({
    content: [{ type: 'text', text: 'write ok' }],
  }));
  return s;
}

/**
 * Starts the authorization server and the protected MCP server.
 * @param o.tokenTtlSeconds lifetime of client-credentials access tokens (default 600).
 */
export async function startProtectedUpstream(
  o: { tokenTtlSeconds?: number } = {},
): Promise<ProtectedUpstream> {
  const asServer = createServer();
  const asPort = await listen(asServer);
  const issuer = `http://127.0.0.1:${asPort}`;
  const rsServer = createServer();
  const rsPort = await listen(rsServer);
  const url = `http://127.0.0.1:${rsPort}/mcp`;
  const prmUrl = `http://127.0.0.1:${rsPort}/.well-known/oauth-protected-resource/mcp`;

  const signing = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const clientKey = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const clients: TestClients = {
    basic: { id: 'basic-client', secret: `basic-secret-${crypto.randomUUID()}` },
    post: { id: 'post-client', secret: `post-secret-${crypto.randomUUID()}` },
    jwt: {
      id: 'jwt-client',
      privateKeyPem: clientKey.privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    },
  };
  const cc = {
    grant_types: ['client_credentials'],
    redirect_uris: [],
    response_types: [],
    scope: 'mcp:read mcp:write',
  };
  const state: Omit<ProtectedUpstream, 'close' | 'url' | 'issuer' | 'clients'> = {
    accepted: [],
    challenges: { unauthorized: 0, insufficientScope: 0 },
    grants: [],
    registrations: 0,
  };
  const provider = new Provider(issuer, {
    clients: [
      {
        ...cc,
        client_id: clients.basic.id,
        client_secret: clients.basic.secret,
        token_endpoint_auth_method: 'client_secret_basic',
      },
      {
        ...cc,
        client_id: clients.post.id,
        client_secret: clients.post.secret,
        token_endpoint_auth_method: 'client_secret_post',
      },
      {
        ...cc,
        client_id: clients.jwt.id,
        token_endpoint_auth_method: 'private_key_jwt',
        token_endpoint_auth_signing_alg: 'RS256',
        jwks: { keys: [{ ...clientKey.publicKey.export({ format: 'jwk' }), alg: 'RS256', use: 'sig' }] },
      },
    ],
    jwks: {
      keys: [{ ...signing.privateKey.export({ format: 'jwk' }), kid: 'as-1', alg: 'RS256', use: 'sig' }],
    },
    scopes: ['mcp:read', 'mcp:write', 'offline_access'],
    ttl: { ClientCredentials: o.tokenTtlSeconds ?? 600 },
    features: {
      devInteractions: { enabled: false },
      clientCredentials: { enabled: true },
      registration: { enabled: true },
      resourceIndicators: {
        enabled: true,
        defaultResource: () => url,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource) => {
          if (resource !== url) throw new Error(`unknown resource ${resource}`);
          return {
            scope: 'mcp:read mcp:write',
            audience: url,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
  });
  provider.on('grant.success', (ctx) => state.grants.push(String(ctx.oidc.params?.grant_type)));
  provider.on('registration_create.success', () => {
    state.registrations += 1;
  });
  asServer.on('request', provider.callback());

  const jwks = createRemoteJWKSet(new URL(`${issuer}/jwks`));
  const challenge = (extra: string) => `Bearer resource_metadata="${prmUrl}"${extra ? `, ${extra}` : ''}`;
  rsServer.on('request', (req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      if (req.url === '/.well-known/oauth-protected-resource/mcp') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            resource: url,
            authorization_servers: [issuer],
            scopes_supported: ['mcp:read', 'mcp:write'],
          }),
        );
        return;
      }
      const auth = req.headers.authorization ?? '';
      let payload: JWTPayload | undefined;
      const token = auth.startsWith('Bearer ') ? auth.slice(7) : '';
      if (token)
        payload = await jwtVerify(token, jwks, { issuer, audience: url }).then(
          (v) => v.payload,
          () => undefined,
        );
      if (!payload) {
        state.challenges.unauthorized += 1;
        res.writeHead(401, { 'www-authenticate': challenge('scope="mcp:read"') }).end();
        return;
      }
      const msg =
        req.method === 'POST'
          ? ((await body(req)) as { method?: string; params?: { name?: string } })
          : undefined;
      const scopes = String(payload.scope ?? '').split(' ');
      if (msg?.method === 'tools/call' && msg.params?.name === 'write' && !scopes.includes('mcp:write')) {
        state.challenges.insufficientScope += 1;
        res
          .writeHead(403, {
            'www-authenticate': challenge('error="insufficient_scope", scope="mcp:read mcp:write"'),
          })
          .end();
        return;
      }
      state.accepted.push({ token, payload });
      const transport = new StreamableHTTPServerTransport({
        sessionIdGenerator: undefined,
        enableJsonResponse: true,
      });
      const server = mcp();
      res.on('close', () => {
        void transport.close();
        void server.close();
      });
      await server.connect(transport);
      await transport.handleRequest(req, res, msg);
    })().catch((e) => {
      if (!res.headersSent) res.writeHead(500).end(String(e));
    });
  });

  return {
    url,
    issuer,
    clients,
    ...state,
    get accepted() {
      return state.accepted;
    },
    get grants() {
      return state.grants;
    },
    get registrations() {
      return state.registrations;
    },
    challenges: state.challenges,
    async close() {
      asServer.closeAllConnections();
      rsServer.closeAllConnections();
      await Promise.all([new Promise((r) => asServer.close(r)), new Promise((r) => rsServer.close(r))]);
    },
  };
}
