/**
 * Access tokens for one protected HTTP upstream (MCP 2025-11-25 "Authorization"): the bearer
 * the transport sends, and what to do when the upstream challenges it. A 401 runs the MCP SDK's
 * `auth()` (discovery from the challenge's `resource_metadata`, registration, the token request
 * with the RFC 8707 resource); a 403 `insufficient_scope` asks again with the challenged scope
 * added (step-up, RFC 6750 §3.1); an expired token with a refresh token is refreshed
 * (RFC 6749 §6). A flow that needs a user (authorization_code, or no `oauth` configured at
 * all) ends in {@link UpstreamAuthorizationRequiredError} with the URL to visit.
 *
 * Tokens live in this object only: never logged, recorded or put in an error. Acquisition and
 * refresh are told to the listeners (the gateway chain, ../record.ts) with the scope, lifetime
 * and authorization server, without token values.
 */
import {
  auth,
  discoverOAuthProtectedResourceMetadata,
  extractWWWAuthenticateParams,
  refreshAuthorization,
} from '@modelcontextprotocol/sdk/client/auth.js';
import { OAuthError } from '@modelcontextprotocol/sdk/server/auth/errors.js';
import { clip } from '../../errors/index.js';
import {
  type UpstreamAuthorizationError,
  UpstreamAuthorizationFailedError,
  UpstreamAuthorizationRequiredError,
} from './errors.js';
import type { GatewayOAuthProvider, HeldTokens } from './provider.js';

/** What an acquisition, refresh or refusal tells the audit (never a token value). */
export interface OAuthEvent {
  upstream: string;
  event: 'token_acquired' | 'token_refreshed' | 'authorization_required' | 'authorization_failed';
  detail: Record<string, unknown>;
}
export type OAuthListener = (e: OAuthEvent) => void;

/** Events kept for the first listener. */
const BACKLOG = 32;

/** After a failed acquisition, challenges within this time fail at once with the same error, ms. */
const FAILED_QUIET_MS = 5_000;

/** An authorization request waits this long for its callback before a new one is made, ms. */
const PENDING_USER_MS = 10 * 60_000;

/** A token this close to its expiry is refreshed (or acquired anew) before use, ms. */
const EXPIRY_MARGIN_MS = 30_000;

/** The reason of an SDK or authorization server failure, without anything secret. */
function reasonOf(e: unknown): string {
  if (e instanceof OAuthError) return `${e.errorCode}${e.message ? `: ${clip(e.message, 160)}` : ''}`;
  return clip((e as Error).message ?? String(e), 200);
}

/** One upstream's tokens and challenges. See the module comment. */
export class UpstreamAuthorizer {
  private readonly listeners = new Set<OAuthListener>();
  private readonly backlog: OAuthEvent[] = [];
  private lastFailure: { at: number; error: UpstreamAuthorizationFailedError } | undefined;
  /** The authorization request the operator was given, until its callback (or it is stale). */
  private waitingForUser: { at: number; error: UpstreamAuthorizationRequiredError } | undefined;
  /** One acquisition at a time; concurrent challenges wait for it. */
  private pending: Promise<void> | null = null;

  constructor(
    readonly upstream: string,
    private readonly serverUrl: URL,
    /** Absent: no `oauth` configured; a challenge can only be answered by a person. */
    private readonly provider: GatewayOAuthProvider | undefined,
  ) {}

  /**
   * Adds a listener of acquisitions, refreshes and refusals; the events from before the first
   * listener (start-up, at most {@link BACKLOG}) are replayed to it. @returns its removal.
   */
  listen(l: OAuthListener): () => void {
    this.listeners.add(l);
    for (const e of this.backlog.splice(0)) l(e);
    return () => this.listeners.delete(l);
  }

  private emit(event: OAuthEvent['event'], detail: Record<string, unknown>): void {
    const e = { upstream: this.upstream, event, detail };
    if (this.listeners.size === 0 && this.backlog.length < BACKLOG) this.backlog.push(e);
    for (const l of this.listeners) l(e);
  }

  /** The `Authorization` value for the next request (refreshing an expiring token first), or undefined. */
  async authorization(): Promise<string | undefined> {
    const p = this.provider;
    if (!p) return undefined;
    if (this.pending) await this.pending.catch(() => undefined);
    let t = p.tokens() as HeldTokens | undefined;
    if (t?.expiresAt !== undefined && t.expiresAt - EXPIRY_MARGIN_MS <= Date.now()) {
      await this.once(() => this.renew(t as HeldTokens)).catch(() => undefined);
      t = p.tokens() as HeldTokens | undefined;
    }
    return t ? `Bearer ${t.access_token}` : undefined;
  }

  /**
   * Answers a challenge: a 401, or a 403 with `error="insufficient_scope"`. Resolves once a new
   * token is held (the request may be sent again once).
   * @param sent the `Authorization` value the challenged request carried.
   * @throws UpstreamAuthorizationRequiredError when a user must authorize;
   *   UpstreamAuthorizationFailedError when no token could be had, or the step-up asks for no
   *   more than was already granted.
   */
  async challenged(
    status: number,
    wwwAuthenticate: string | undefined,
    sent: string | undefined,
  ): Promise<void> {
    const params = extractWWWAuthenticateParams(
      new Response(null, { status, headers: wwwAuthenticate ? { 'www-authenticate': wwwAuthenticate } : {} }),
    );
    const p = this.provider;
    if (!p) throw await this.userNeeded(status, params.resourceMetadataUrl);
    // An acquisition that just failed is not tried again at once (every connection would ask).
    if (this.lastFailure && Date.now() - this.lastFailure.at < FAILED_QUIET_MS) throw this.lastFailure.error;
    // Another request already replaced the token this one was challenged with.
    const now = p.tokens();
    if (sent !== undefined && now && `Bearer ${now.access_token}` !== sent) return;
    if (status === 403) {
      const granted = new Set((p.challengeScope ?? p.scope() ?? '').split(' ').filter(Boolean));
      const asked = (params.scope ?? '').split(' ').filter(Boolean);
      if (asked.length === 0 || asked.every((s) => granted.has(s)))
        throw this.failed(
          'the upstream refused the token for insufficient scope, and asks for no scope beyond it',
          {
            step: 'step_up',
          },
        );
      p.challengeScope = [...granted, ...asked.filter((s) => !granted.has(s))].join(' ');
    } else if (params.scope) p.challengeScope = params.scope;
    await this.once(() => this.acquire(params.resourceMetadataUrl, status === 403 ? 'step_up' : 'challenge'));
  }

  /** Runs `f` unless an acquisition is under way, in which case that one is awaited. */
  private once(f: () => Promise<void>): Promise<void> {
    if (this.pending) return this.pending;
    this.pending = f().finally(() => {
      this.pending = null;
    });
    return this.pending;
  }

  /** A refresh with the refresh token, else a new acquisition. */
  private async renew(t: HeldTokens): Promise<void> {
    const p = this.provider as GatewayOAuthProvider;
    const d = p.discoveryState();
    const info = p.clientInformation();
    if (t.refresh_token && d?.authorizationServerUrl && info) {
      try {
        const fresh = await refreshAuthorization(d.authorizationServerUrl, {
          ...(d.authorizationServerMetadata ? { metadata: d.authorizationServerMetadata } : {}),
          clientInformation: info,
          refreshToken: t.refresh_token,
          ...(d.resourceMetadata?.resource ? { resource: d.resourceMetadata.resource } : {}),
          ...(p.addClientAuthentication ? { addClientAuthentication: p.addClientAuthentication } : {}),
        });
        p.saveTokens(fresh);
        this.emit('token_refreshed', this.describe(fresh, d.authorizationServerUrl));
        return;
      } catch (e) {
        this.emit('authorization_failed', { step: 'refresh', reason: reasonOf(e) });
      }
    }
    p.invalidateCredentials('tokens');
    await this.acquire(undefined, 'expiry');
  }

  /**
   * Completes an authorization a user granted: `state` must be that of the pending request
   * (single use); the code is exchanged with its PKCE verifier (the SDK's `auth()`).
   * @returns false when `state` is not this upstream's pending one.
   * @throws UpstreamAuthorizationFailedError when the exchange fails.
   */
  async complete(state: string, code: string): Promise<boolean> {
    const p = this.provider;
    if (!p?.takeState(state)) return false;
    await this.once(() => this.acquire(undefined, 'authorization_code', code));
    return true;
  }

  private async acquire(resourceMetadataUrl: URL | undefined, why: string, code?: string): Promise<void> {
    const p = this.provider as GatewayOAuthProvider;
    // The authorization request shown to the operator stays valid while it waits: a new one
    // would replace its state and PKCE verifier.
    const waiting = this.waitingForUser;
    if (code === undefined && waiting && Date.now() - waiting.at < PENDING_USER_MS) throw waiting.error;
    this.waitingForUser = undefined;
    // An interactive client keeps its tokens: the SDK refreshes them before asking a user again.
    if (!p.redirectUrl) p.invalidateCredentials('tokens');
    let result: 'AUTHORIZED' | 'REDIRECT';
    try {
      const scope = p.scope();
      result = await auth(p, {
        serverUrl: this.serverUrl,
        ...(resourceMetadataUrl ? { resourceMetadataUrl } : {}),
        ...(scope ? { scope } : {}),
        ...(code !== undefined ? { authorizationCode: code } : {}),
      });
    } catch (e) {
      // Discovery is done again next time: the server may have moved.
      p.invalidateCredentials('discovery');
      const error = this.failed(`cannot obtain an access token: ${reasonOf(e)}`, { step: why });
      this.lastFailure = { at: Date.now(), error };
      throw error;
    }
    this.lastFailure = undefined;
    if (result === 'REDIRECT') {
      const url = p.authorizationUrl?.href;
      this.emit('authorization_required', { authorization_url: url ?? null });
      const error = new UpstreamAuthorizationRequiredError(
        `upstream ${this.upstream} needs a user's authorization; the operator must visit the authorization URL`,
        url,
      );
      this.waitingForUser = { at: Date.now(), error };
      throw error;
    }
    const d = p.discoveryState();
    this.emit('token_acquired', { ...this.describe(p.tokens(), d?.authorizationServerUrl), trigger: why });
  }

  /** No `oauth` configured: only a person can authorize; the URL is the authorization server's. */
  private async userNeeded(
    status: number,
    resourceMetadataUrl: URL | undefined,
  ): Promise<UpstreamAuthorizationError> {
    let url: string | undefined;
    try {
      const prm = await discoverOAuthProtectedResourceMetadata(this.serverUrl, {
        ...(resourceMetadataUrl ? { resourceMetadataUrl } : {}),
      });
      url = prm.authorization_servers?.[0];
    } catch {
      url = undefined;
    }
    this.emit('authorization_required', { authorization_url: url ?? null, oauth_configured: false });
    return new UpstreamAuthorizationRequiredError(
      `upstream ${this.upstream} answered HTTP ${status} and has no upstreams[].oauth configured: it needs an authorization the gateway cannot perform`,
      url,
    );
  }

  private failed(message: string, detail: Record<string, unknown>): UpstreamAuthorizationFailedError {
    this.emit('authorization_failed', { ...detail, reason: message });
    return new UpstreamAuthorizationFailedError(`upstream ${this.upstream}: ${message}`);
  }

  /** The recorded facts of a token: never its value. */
  private describe(t: HeldTokens | undefined, as: string | undefined): Record<string, unknown> {
    const info = this.provider?.clientInformation();
    return {
      authorization_server: as ?? null,
      scope: t?.scope ?? this.provider?.scope() ?? null,
      expires_in: t?.expires_in ?? null,
      token_type: t?.token_type ?? null,
      refresh_token: t?.refresh_token !== undefined,
      client_id: info?.client_id ?? null,
    };
  }
}
