/**
 * `GET /.well-known/cmcp/tls-evidence` (docs/spec/attested-tls.md#the-well-known-route), without
 * authentication: the evidence document of the listener's current TLS key, the same one its
 * certificate carries, for clients that cannot read certificate extensions (and for a key from
 * the operator's files, whose certificate carries none). 503 `TLS_EVIDENCE_UNAVAILABLE` before
 * the first binding.
 */
import { TLS_EVIDENCE_PATH } from '@cmcp/verify/formats';
import type { FastifyInstance } from 'fastify';
import type { ListenerTls } from '../../tls/listener.js';
import { sendError } from './replies.js';

/** Registers the route over `tls`. */
export function tlsEvidenceRoute(tls: ListenerTls) {
  return async (app: FastifyInstance) => {
    app.get(TLS_EVIDENCE_PATH, async (_req, reply) => {
      const doc = tls.evidence();
      if (!doc) return sendError(reply, 'TLS_EVIDENCE_UNAVAILABLE', 'the TLS key is not bound yet');
      reply.header('cache-control', 'no-store');
      return doc;
    });
  };
}
