/**
 * The gateway's OAuth client for one protected upstream, as the MCP SDK's `OAuthClientProvider`
 * (@modelcontextprotocol/sdk client/auth.js), so that the SDK's `auth()` does discovery
 * (RFC 9728, RFC 8414 / OpenID Connect Discovery), registration (pre-registered, Client ID
 * Metadata Document, RFC 7591 dynamic registration), the token request with the RFC 8707
 * `resource`, and client authentication (client_secret_basic, client_secret_post; private_key_jwt
 * through the SDK's `createPrivateKeyJwtAuth`, on jose). This class only holds state, in memory:
 * client information, tokens, discovery, the scope to ask for.
 *
 * Scope selection follows the MCP authorization spec (2025-11-25 §Scope Selection Strategy): the
 * `scope` of the challenge, else the resource metadata's `scopes_supported`, else the configured
 * `scopes`.
 */
import { createPublicKey, randomBytes, timingSafeEqual } from 'node:crypto';
import type {
  AddClientAuthentication,
  OAuthClientProvider,
  OAuthDiscoveryState,
} from '@modelcontextprotocol/sdk/client/auth.js';
import { createPrivateKeyJwtAuth } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import type {
  OAuthClientInformationMixed,
  OAuthClientMetadata,
  OAuthTokens,
} from '@modelcontextprotocol/sdk/shared/auth.js';
import type { UpstreamOAuthConfig } from '../../config/upstream-oauth.js';

/** The secret values a provider is built with (read by ./secrets.ts). */
export interface OAuthSecrets {
  clientSecret?: string;
  /** PEM (PKCS#8) text or a JWK of the private key for private_key_jwt. */
  privateKey?: string | Record<string, unknown>;
}

/** Tokens as kept in memory, with when the access token expires (ms since the epoch, or none). */
export type HeldTokens = OAuthTokens & { expiresAt?: number };

/** One upstream's OAuth client state (in memory only). See the module comment. */
export class GatewayOAuthProvider implements OAuthClientProvider {
  /** The scope the last challenge asked for (step-up adds to it). */
  challengeScope: string | undefined;
  /** The authorization URL the SDK built for an interactive flow, when it got that far. */
  authorizationUrl: URL | undefined;
  private registered: OAuthClientInformationMixed | undefined;
  private held: HeldTokens | undefined;
  private discovery: OAuthDiscoveryState | undefined;
  private verifier: string | undefined;
  private pendingState: string | undefined;
  readonly addClientAuthentication?: AddClientAuthentication;

  constructor(
    private readonly cfg: UpstreamOAuthConfig,
    private readonly secrets: OAuthSecrets,
    /** Told each time tokens are saved (acquired or refreshed), without their values. */
    private readonly onTokens: (t: HeldTokens) => void = () => undefined,
  ) {
    if (this.authMethod() === 'private_key_jwt' && secrets.privateKey !== undefined) {
      const privateKey = secrets.privateKey;
      this.addClientAuthentication = async (headers, params, url, metadata) => {
        const info = await this.clientInformation();
        if (!info) throw new Error('private_key_jwt: the client has no client_id yet');
        const sign = createPrivateKeyJwtAuth({
          issuer: info.client_id,
          subject: info.client_id,
          privateKey,
          alg: cfg.private_key_alg,
        });
        await sign(headers, params, url, metadata);
      };
    }
  }

  /** The token endpoint authentication method: configured, or implied by the secrets held. */
  authMethod(): NonNullable<UpstreamOAuthConfig['token_endpoint_auth_method']> | undefined {
    if (this.cfg.token_endpoint_auth_method) return this.cfg.token_endpoint_auth_method;
    if (this.secrets.privateKey !== undefined) return 'private_key_jwt';
    return undefined;
  }

  get redirectUrl(): string | undefined {
    return this.cfg.grant === 'authorization_code' ? this.cfg.redirect_uri : undefined;
  }

  get clientMetadataUrl(): string | undefined {
    return this.cfg.client_metadata_url;
  }

  /** The scope to ask for now (see the module comment), or undefined for the server's default. */
  scope(): string | undefined {
    const prm = this.discovery?.resourceMetadata?.scopes_supported;
    return this.challengeScope ?? (prm?.length ? prm.join(' ') : undefined) ?? this.cfg.scopes?.join(' ');
  }

  get clientMetadata(): OAuthClientMetadata {
    const method = this.authMethod();
    const scope = this.scope();
    return {
      client_name: this.cfg.client_name,
      redirect_uris: this.cfg.redirect_uri ? [this.cfg.redirect_uri] : [],
      // An interactive client asks for refresh tokens: the user is not asked again at expiry.
      grant_types:
        this.cfg.grant === 'authorization_code' ? ['authorization_code', 'refresh_token'] : [this.cfg.grant],
      response_types: this.cfg.grant === 'authorization_code' ? ['code'] : [],
      ...(method ? { token_endpoint_auth_method: method } : {}),
      ...(method === 'private_key_jwt' ? { jwks: { keys: [this.publicJwk()] } } : {}),
      ...(scope ? { scope } : {}),
    };
  }

  /** The public half of the private_key_jwt key, for dynamic registration (RFC 7591 `jwks`). */
  private publicJwk(): Record<string, unknown> {
    const k = this.secrets.privateKey;
    const key =
      typeof k === 'string' ? createPublicKey(k) : createPublicKey({ key: k as never, format: 'jwk' });
    return {
      ...(key.export({ format: 'jwk' }) as Record<string, unknown>),
      alg: this.cfg.private_key_alg,
      use: 'sig',
    };
  }

  clientInformation(): OAuthClientInformationMixed | undefined {
    if (this.registered) return this.registered;
    if (!this.cfg.client_id) return undefined;
    const method = this.authMethod();
    return {
      client_id: this.cfg.client_id,
      ...(this.secrets.clientSecret !== undefined ? { client_secret: this.secrets.clientSecret } : {}),
      ...(method ? { token_endpoint_auth_method: method } : {}),
    };
  }

  saveClientInformation(info: OAuthClientInformationMixed): void {
    this.registered = info;
  }

  tokens(): OAuthTokens | undefined {
    return this.held;
  }

  saveTokens(tokens: OAuthTokens): void {
    const expiresAt = tokens.expires_in !== undefined ? Date.now() + tokens.expires_in * 1000 : undefined;
    // A refresh that returns no new refresh token keeps the old one (RFC 6749 §6).
    const refresh = tokens.refresh_token ?? this.held?.refresh_token;
    this.held = {
      ...tokens,
      ...(refresh !== undefined ? { refresh_token: refresh } : {}),
      ...(expiresAt !== undefined ? { expiresAt } : {}),
    };
    this.onTokens(this.held);
  }

  redirectToAuthorization(url: URL): void {
    this.authorizationUrl = url;
  }

  /** A new `state` for an authorization request (256 random bits), kept until its callback. */
  state(): string {
    this.pendingState = randomBytes(32).toString('base64url');
    return this.pendingState;
  }

  /** Whether `state` is that of the authorization request awaiting its callback (single use). */
  takeState(state: string): boolean {
    const want = this.pendingState;
    if (want === undefined || want.length !== state.length) return false;
    if (!timingSafeEqual(Buffer.from(want), Buffer.from(state))) return false;
    this.pendingState = undefined;
    return true;
  }

  saveCodeVerifier(v: string): void {
    this.verifier = v;
  }

  codeVerifier(): string {
    if (this.verifier === undefined) throw new Error('no PKCE code verifier saved');
    return this.verifier;
  }

  /** The grant of a non-interactive flow: client credentials with the selected scope. */
  prepareTokenRequest(): URLSearchParams | undefined {
    if (this.cfg.grant !== 'client_credentials') return undefined;
    const scope = this.scope();
    return new URLSearchParams({ grant_type: 'client_credentials', ...(scope ? { scope } : {}) });
  }

  invalidateCredentials(what: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery'): void {
    if (what === 'all' || what === 'tokens') this.held = undefined;
    if (what === 'all' || what === 'client') this.registered = undefined;
    if (what === 'all' || what === 'verifier') this.verifier = undefined;
    if (what === 'all' || what === 'discovery') this.discovery = undefined;
  }

  saveDiscoveryState(state: OAuthDiscoveryState): void {
    this.discovery = state;
  }

  discoveryState(): OAuthDiscoveryState | undefined {
    return this.discovery;
  }
}
