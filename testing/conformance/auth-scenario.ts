/**
 * What the two clients of the conformance `auth/*` client scenarios share (auth-run.ts): the
 * scenario's name and context (`MCP_CONFORMANCE_SCENARIO`, `MCP_CONFORMANCE_CONTEXT`, set by the
 * runner), the client it calls for (client credentials with a secret or a private key, a
 * pre-registered or metadata-document client, else a dynamically registered one with the
 * authorization code grant), and the user's part of an authorization code flow: the scenario's
 * authorization server approves at once, so following its redirect yields the callback URL.
 */

/** What the runner passes in `MCP_CONFORMANCE_CONTEXT` (scenario-specific). */
export interface ScenarioContext {
  name?: string;
  client_id?: string;
  client_secret?: string;
  private_key_pem?: string;
  signing_algorithm?: string;
}

/** The Client ID Metadata Document URL the `auth/basic-cimd` scenario expects. */
export const CIMD_URL = 'https://conformance-test.local/client-metadata.json';

/** The scenario and its context, from the environment. */
export function scenario(): { name: string; context: ScenarioContext } {
  const name = process.env.MCP_CONFORMANCE_SCENARIO ?? '';
  const raw = process.env.MCP_CONFORMANCE_CONTEXT;
  return { name, context: raw ? (JSON.parse(raw) as ScenarioContext) : {} };
}

/** How a client authorizes for this scenario. */
export type ClientKind =
  | {
      grant: 'client_credentials';
      clientId: string;
      clientSecret?: string;
      privateKeyPem?: string;
      alg?: string;
    }
  | { grant: 'authorization_code'; clientId?: string; clientSecret?: string; clientMetadataUrl?: string };

export function clientKind(name: string, c: ScenarioContext): ClientKind {
  if (name.startsWith('auth/client-credentials') && c.client_id)
    return {
      grant: 'client_credentials',
      clientId: c.client_id,
      ...(c.client_secret ? { clientSecret: c.client_secret } : {}),
      ...(c.private_key_pem ? { privateKeyPem: c.private_key_pem, alg: c.signing_algorithm ?? 'ES256' } : {}),
    };
  if (name === 'auth/basic-cimd') return { grant: 'authorization_code', clientMetadataUrl: CIMD_URL };
  return {
    grant: 'authorization_code',
    ...(c.client_id ? { clientId: c.client_id } : {}),
    ...(c.client_secret ? { clientSecret: c.client_secret } : {}),
  };
}

/**
 * The user's part: opens the authorization URL (the scenario's server approves without a
 * login) and returns where it redirects, the client's redirect URI with `code` and `state`.
 * @throws Error when the server does not redirect.
 */
export async function approve(authorizationUrl: string): Promise<URL> {
  const r = await fetch(authorizationUrl, { redirect: 'manual' });
  const location = r.headers.get('location');
  await r.body?.cancel();
  if (!location) throw new Error(`the authorization endpoint answered ${r.status} without a redirect`);
  return new URL(location, authorizationUrl);
}
