/**
 * What a client remembers of the bindings it accepted, to refuse a replayed older one
 * (docs/spec/attested-tls.md#freshness): per server and gateway instance, the newest
 * (`issued_at`, `sequence`) seen. A gateway's rotations and restarts only move it forward.
 */
import { CmcpError } from '../errors/index.js';
import type { TlsBindingPreimage } from '../format/tls.js';

/** Newest accepted binding per `origin` and `instance_id`. In memory; share one across connections. */
export class TlsBindingMemory {
  private readonly newest = new Map<string, { issuedAt: number; sequence: number }>();

  /**
   * Records `p` as accepted from `origin`.
   * @throws CmcpError TLS_BINDING_REPLAYED when an older binding of the same instance was accepted before.
   */
  accept(origin: string, p: TlsBindingPreimage): void {
    const id = `${origin}\u0000${p.instance_id}`;
    const at = { issuedAt: Date.parse(p.issued_at), sequence: p.sequence };
    const seen = this.newest.get(id);
    if (
      seen &&
      (at.issuedAt < seen.issuedAt || (at.issuedAt === seen.issuedAt && at.sequence < seen.sequence))
    )
      throw new CmcpError(
        'TLS_BINDING_REPLAYED',
        `binding ${p.issued_at} (sequence ${p.sequence}) is older than one already accepted from this server`,
      );
    this.newest.set(id, at);
  }
}
