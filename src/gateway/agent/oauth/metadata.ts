/**
 * RFC 9728 protected resource metadata, without authentication: at
 * `/.well-known/oauth-protected-resource` and at the path-suffixed form of the resource URI
 * (RFC 9728 §3.1: `/.well-known/oauth-protected-resource/mcp` for `https://host/mcp`), which
 * the 401 challenge names.
 */
import type { FastifyInstance } from 'fastify';
import type { OAuthVerifier } from './verifier.js';

/** The metadata plugin (no authentication hook); the document is fixed at start-up. */
export async function oauthMetadataPlugin(
  app: FastifyInstance,
  opts: { oauth: OAuthVerifier },
): Promise<void> {
  const doc = opts.oauth.metadata();
  const send = async () => doc;
  app.get('/.well-known/oauth-protected-resource', send);
  const suffixed = new URL(opts.oauth.metadataUrl()).pathname;
  if (suffixed !== '/.well-known/oauth-protected-resource') app.get(suffixed, send);
}
