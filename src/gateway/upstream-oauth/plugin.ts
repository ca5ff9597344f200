/**
 * `GET /oauth/upstream/callback`: where an upstream's authorization server sends the operator
 * back after they authorized the gateway (the `redirect_uri` of an upstream with
 * `oauth.grant: authorization_code`; docs/operations.md#upstream-oauth). No gateway token: the
 * request is bound by its `state` (256 random bits, single use, compared in constant time) to
 * the one pending authorization request, whose PKCE verifier only the gateway holds. The code is
 * exchanged, the upstream is brought in at once, and the page says so, without any token.
 */
import type { FastifyInstance } from 'fastify';
import { completeAuthorization } from '../../upstream/oauth/index.js';
import type { UpstreamPool } from '../../upstream/pool.js';

/** The callback path, relative to the gateway's public URL. */
export const UPSTREAM_OAUTH_CALLBACK = '/oauth/upstream/callback';

const query = {
  type: 'object',
  properties: {
    state: { type: 'string', maxLength: 512 },
    code: { type: 'string', maxLength: 4096 },
    error: { type: 'string', maxLength: 256 },
  },
} as const;

/** Registers the callback route. */
export async function upstreamOAuthPlugin(
  app: FastifyInstance,
  opts: { upstreams: UpstreamPool },
): Promise<void> {
  app.get<{ Querystring: { state?: string; code?: string; error?: string } }>(
    UPSTREAM_OAUTH_CALLBACK,
    { schema: { querystring: query } },
    async (req, reply) => {
      const { state, code, error } = req.query;
      const refuse = (status: number, error_code: string, message: string) =>
        reply.code(status).send({ error: { error_code, message } });
      if (error)
        return refuse(
          400,
          'UPSTREAM_AUTHORIZATION_REQUIRED',
          'the authorization server refused the authorization',
        );
      if (!state || !code) return refuse(400, 'INVALID_REQUEST', 'state and code are required');
      let upstream: string | undefined;
      try {
        upstream = await completeAuthorization(state, code);
      } catch (e) {
        return refuse(502, 'UPSTREAM_AUTHORIZATION_FAILED', (e as Error).message);
      }
      if (!upstream) return refuse(400, 'INVALID_REQUEST', 'no pending authorization has this state');
      const available = await opts.upstreams.availability.retryNow(upstream);
      return reply.send({ upstream, authorized: true, available });
    },
  );
}
