/**
 * Sessions of a replica on PostgreSQL (docs/replicas.md#sessions-across-replicas): the
 * counterpart of service.ts's named sessions over the shared store
 * (store/postgres/session-store.ts). Any replica serves any session: a session opened through
 * one replica is resolved, used and closed through another (the SQLite gateway's rule that only
 * the opening instance may use a session is one host's). The close's claim is signed by the
 * closing replica's key: a `/2` claim with the opening's binding and every writer's evidence
 * when several replicas wrote the chain (claim/replicas.ts; the replicas' fences carry their
 * writers, replica-start.ts their evidence), else `/1` with the binding section of
 * claim-binding.ts (the opening's binding when this replica made it, else absent under this
 * key — signed-only — as for writers without keys). Default sessions are replica-service.ts's;
 * batched closes stay service.ts's (SQLite); a required binding tier refuses an unbound
 * session as service.ts does.
 */
import { randomUUID } from 'node:crypto';
import { CmcpError } from '@cmcp/verify/errors/index';
import { b64u } from '@cmcp/verify/format/canonical';
import type { Claim } from '@cmcp/verify/format/claim';
import type { Logger } from 'pino';
import type { ClaimTextPieces } from '../claim/parts.js';
import { replicaClaimIssuer } from '../claim/replica-issuer.js';
import type { SessionStore } from '../store/port.js';
import type { AttestationProvider, AttestationTier } from '../tee/provider.js';
import { BindingBatcher, DEFAULT_BATCH_LIMIT } from './binding-batcher.js';
import { bindingEntry, bindingRequiredError, bindSession, sessionPreimage } from './binding-record.js';
import { claimInputsFor } from './claim-binding.js';
import { issuedText, rememberIssuedText } from './close.js';
import type { GatewayKey, SessionCreated, SessionFacts, SessionRow } from './types.js';

export class ReplicaSessions {
  /** Sessions opened while a quote is in flight share the next one (docs/spec/binding.md#batched-bindings). */
  readonly binder: BindingBatcher;

  constructor(
    private readonly store: SessionStore,
    /** This replica's gateway key (made at its start). */
    private readonly key: GatewayKey,
    private readonly provider: AttestationProvider,
    /** What the replica runs: read at every creation and claim (a reload mutates it). */
    private readonly facts: SessionFacts,
    private readonly log: Logger,
    batchLimit = DEFAULT_BATCH_LIMIT,
    /** `minimum_tier` requiring a binding (tee/tier.ts requiredBindingTier), or null: unbound sessions serve. */
    private readonly requiredTier: AttestationTier | null = null,
  ) {
    this.binder = new BindingBatcher(provider, key.thumbprint, batchLimit);
  }

  /**
   * Opens a session: its genesis entry and row, then its chain root bound into this replica's
   * evidence and the outcome recorded. A failed bind serves the session signed-only, as
   * service.ts does — unless a binding tier is required: then the session is closed (reason
   * `binding_required`, its claim saying the binding is absent) and refused.
   * @param opts.challenge optional verifier nonce (base64url) folded into the binding preimage;
   *   `isDefault` marks an agent's default session (replica-service.ts).
   * @throws (rejects) CmcpError SESSION_BINDING_REQUIRED; LeaseLostError (LEASE_LOST); pg errors.
   */
  async create(
    agentId: string,
    opts: { challenge?: string | null; isDefault?: boolean } = {},
  ): Promise<SessionCreated> {
    const sessionId = randomUUID();
    const thumb = b64u(this.key.thumbprint);
    const genesis = await this.store.openSession({
      sessionId,
      agentId,
      isDefault: opts.isDefault ?? false,
      provider: this.provider.name,
      keyThumbprint: thumb,
    });
    // read before the quote: every claim up to it was quoted before this session's binding
    const openedAfter = await this.store.newestClaimSequence();
    const preimage = sessionPreimage(
      sessionId,
      genesis.entry_hash,
      thumb,
      this.facts,
      opts.challenge ?? null,
      openedAfter,
    );
    const record = await bindSession(this.binder, this.provider, preimage, this.log);
    const evidence = record.evidence;
    await this.store.recordBinding(sessionId, bindingEntry(sessionId, agentId, evidence), record);
    if (evidence.status === 'absent' && this.requiredTier !== null) {
      await this.close(agentId, sessionId, 'binding_required');
      throw bindingRequiredError(sessionId, this.provider.name, evidence.reason, this.requiredTier);
    }
    return {
      session_id: sessionId,
      chain_root: genesis.entry_hash,
      binding: { provider: evidence.provider, status: evidence.status, reason: evidence.reason },
    };
  }

  /**
   * The open session a call of `agentId` runs in, whichever replica opened it.
   * @throws CmcpError UNKNOWN_SESSION (none, or another agent's) | SESSION_CLOSED; pg errors.
   */
  async resolve(agentId: string, sessionId: string): Promise<SessionRow> {
    const row = await this.own(agentId, sessionId);
    if (row.status !== 'open')
      throw new CmcpError('SESSION_CLOSED', 'session is closed', { session_id: sessionId });
    return row;
  }

  /**
   * Closes the session with a claim signed by this replica's key; a closed session answers its
   * stored claim.
   * @throws CmcpError UNKNOWN_SESSION; LeaseLostError (LEASE_LOST); pg errors.
   */
  async close(agentId: string, sessionId: string, reason = 'requested'): Promise<Claim> {
    await this.own(agentId, sessionId);
    const issuer = replicaClaimIssuer(
      (row) => claimInputsFor(row, sessionId, agentId, this.key, this.facts, this.provider.name),
      this.store.fence,
    );
    const closed = await this.store.closeSession(sessionId, reason, issuer);
    // The close route answers with this text, not a read of it back (session/close.ts issuedText).
    rememberIssuedText(closed.claim, closed.canonical);
    return closed.claim;
  }

  /**
   * {@link close} answering the claim's canonical text (ports.ts AgentSessions.closeText): the
   * text just issued, or a closed session's stored text, unparsed and without reading its chain.
   * @throws CmcpError UNKNOWN_SESSION; LeaseLostError (LEASE_LOST); pg errors.
   */
  async closeText(agentId: string, sessionId: string): Promise<Buffer | ClaimTextPieces> {
    const row = await this.own(agentId, sessionId);
    if (row.status === 'closed') {
      const stored = await this.store.claimCanonical(sessionId);
      if (stored) return stored;
    }
    const claim = await this.close(agentId, sessionId);
    return issuedText(claim) ?? this.claimText(agentId, sessionId);
  }

  /**
   * The stored canonical text (UTF-8 JCS) of a closed session's claim, as signed and hashed.
   * @throws CmcpError UNKNOWN_SESSION | SESSION_OPEN; pg errors.
   */
  async claimText(agentId: string, sessionId: string): Promise<ClaimTextPieces> {
    await this.own(agentId, sessionId);
    const canonical = await this.store.claimCanonical(sessionId);
    if (!canonical)
      throw new CmcpError('SESSION_OPEN', 'the session is still open; close it to get its claim');
    return canonical;
  }

  private async own(agentId: string, sessionId: string): Promise<SessionRow> {
    const row = await this.store.session(sessionId);
    if (!row || row.agent_id !== agentId) throw new CmcpError('UNKNOWN_SESSION', 'unknown session');
    return row;
  }
}
