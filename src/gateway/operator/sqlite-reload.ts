/**
 * Signed policy reloads on the SQLite gateway (docs/spec/policy.md#operator-controls): a signed
 * bundle replaces the running policy without a restart (rules in src/policy/state.ts).
 * Accepted reloads are recorded as `policy_reload` in the gateway chain *with the bundle's
 * files*, so the exact policy text in force is on the record and a restart resumes it instead
 * of silently falling back to an older configured bundle. Open sessions are closed with claims
 * (reason `policy_reload`): every session's claim covers decisions of exactly the policy its
 * binding names, and the next session binds the new hash and the gateway measurement taken
 * again with it (measure/record.ts, hooked by runtime.ts). Refusals are recorded as
 * `policy_reload_refused`. A replica's reloads across replicas are replica-reload.ts.
 */
import { fromB64u, GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { PolicyBundle } from '../../policy/bundle.js';
import { reloadDetail } from '../../policy/startup.js';
import { decodeReloadFiles, type PolicyState, ReloadRefusedError } from '../../policy/state.js';
import type { SessionFacts, SessionService } from '../../session/service.js';
import type { AuditChain } from '../../store/sqlite/chain.js';
import { immediateAsync } from '../../store/sqlite/db.js';
import { refuseReload } from '../lifecycle/records.js';
import { type PolicyReloads, reloadAnswer } from './controls.js';

export class SqliteReloads implements PolicyReloads {
  private readonly reloadHooks: ((bundle: PolicyBundle) => void)[] = [];

  constructor(
    private readonly chain: AuditChain,
    private readonly sessions: SessionService,
    private readonly facts: SessionFacts,
    private readonly policy: PolicyState | null,
    private readonly log: Logger,
  ) {}

  /**
   * Resumes the newest accepted reload recorded in the gateway chain when it is newer than the
   * configured bundle and still verifies under the pinned key.
   * @returns the resumed bundle, or null (the configured bundle stays).
   */
  resumeReloaded(): PolicyBundle | null {
    if (!this.policy) return null;
    const last = this.chain.entriesOfTypes(GATEWAY_CHAIN_ID, ['policy_reload']).at(-1);
    const d = last?.detail as { bundle_files?: Record<string, string>; signature?: string } | undefined;
    if (!d?.bundle_files) return null;
    try {
      const files = new Map(Object.entries(d.bundle_files).map(([k, v]) => [k, fromB64u(v)] as const));
      const b = this.policy.check(files, d.signature, this.policy.engine.bundle.manifest.version);
      this.policy.install(b);
      return b;
    } catch (e) {
      const why = e instanceof ReloadRefusedError ? e.reason : 'error';
      if (why !== 'not_newer')
        this.log.warn(
          { reason: why },
          'the last reloaded policy bundle could not be resumed; using the configured bundle',
        );
      return null;
    }
  }

  /**
   * Registers a hook run after an accepted reload is installed (and `facts.policyBundleHash`
   * updated) but before open sessions are closed: e.g. to measure the gateway again, so the
   * next session's binding covers the new measurement.
   */
  onReload(hook: (bundle: PolicyBundle) => void): void {
    this.reloadHooks.push(hook);
  }

  async reload(operatorId: string, body: unknown): Promise<Record<string, unknown>> {
    // Every record here waits for a write lock held by another process by awaiting (store/sqlite/db.ts
    // immediateAsync); past the busy timeout it fails as the blocking append did.
    const refuse = (e: ReloadRefusedError) => refuseReload(this.chain, this.log, operatorId, e);
    if (!this.policy) {
      return refuse(new ReloadRefusedError('no_policy_key', 'no policy is configured; reloads are disabled'));
    }
    let next: PolicyBundle;
    let signature: string | undefined;
    let files: Map<string, Buffer>;
    try {
      ({ files, signature } = decodeReloadFiles(body));
      next = this.policy.check(files, signature, this.policy.engine.bundle.manifest.version);
    } catch (e) {
      if (e instanceof ReloadRefusedError) return refuse(e);
      throw e;
    }
    const policy = this.policy;
    const previous = policy.engine.bundle;
    // The record and the install happen together once the lock is held: a reload that
    // installed meanwhile makes this one no longer newer.
    const entry = await immediateAsync(this.chain.db, () => {
      if (policy.engine.bundle !== previous) return null;
      const e = this.chain.append(GATEWAY_CHAIN_ID, {
        entry_type: 'policy_reload',
        detail: reloadDetail(next, previous, { operatorId, enforcementMode: policy.mode, signature, files }),
      });
      policy.install(next);
      this.facts.policyBundleHash = next.hash;
      return e;
    });
    if (!entry)
      return refuse(
        new ReloadRefusedError('not_newer', 'another reload was installed meanwhile', [], next.hash),
      );
    for (const hook of this.reloadHooks) {
      try {
        hook(next);
      } catch (e) {
        this.log.error({ err: (e as Error).message }, 'policy reload hook failed');
      }
    }
    // Every open session is unusable from here on; closed in batches, not holding the event loop.
    const closed = await this.sessions.closeOpenInBatches(null, 'policy_reload');
    this.log.info(
      {
        operator_id: operatorId,
        bundle_hash: next.hash,
        version: next.manifest.version,
        sessions_closed: closed.length,
      },
      'policy reloaded',
    );
    return reloadAnswer(next, previous, this.facts, entry.entry_hash, closed);
  }
}
