/**
 * Signed policy reloads (docs/spec/policy.md#operator-controls, docs/replicas.md#serving-as-a-replica),
 * on either engine through the storage port's OperatorRecords: a signed bundle replaces the
 * running policy without a restart (rules in src/policy/state.ts), and no call is decided by
 * another bundle than the one its session's binding names.
 *
 * - `POST /operator/policy/reload` checks the signed bundle (refusals recorded as
 *   `policy_reload_refused`), records `policy_reload` *with the bundle's files* only when its
 *   version is higher than the newest recorded one, installs it, measures the gateway again
 *   (the next session binds the new hash and measurement) and closes the sessions of the
 *   previous bundle (reason `policy_reload`): SQLite every open session of this instance, in
 *   batches; a replica every open session bound to another bundle, whichever replica opened it.
 * - A restart runs the newest recorded bundle when it is newer than the configured one and
 *   still verifies under the pinned key ({@link resumeRecordedReload}).
 * - A replica reads the chain's new `policy_reload` entries with its block reads (every
 *   BLOCK_READ_MS, and before it serves) and installs the newest when newer. Until it has read
 *   a reload it decides with the bundle it runs; a session bound to another bundle than the
 *   running one is not used: the replica first reads the recorded reloads, and a session still
 *   bound to another bundle is closed (a named one refused SESSION_CLOSED, a default one replaced).
 */
import { fromB64u } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { PolicyBundle } from '../../policy/bundle.js';
import { reloadDetail } from '../../policy/startup.js';
import { decodeReloadFiles, type PolicyState, ReloadRefusedError } from '../../policy/state.js';
import type { SessionService } from '../../session/service.js';
import type { SessionFacts, SessionRow } from '../../session/types.js';
import type { GatewayChainSink, OperatorRecords } from '../../store/port.js';
import { refuseReload } from '../lifecycle/records.js';
import { reloadAnswer } from './controls.js';

/** Sessions whose bound policy hash is remembered; past this the oldest is forgotten (read again). */
const MAX_REMEMBERED = 10_000;

export interface ReloadDeps {
  /** The gateway chain's reload entries, through the storage port (a replica's fenced by its lease). */
  records: OperatorRecords;
  /** The running policy, or null: none configured (a reload is refused `no_policy_key`). */
  policy: PolicyState | null;
  facts: SessionFacts;
  sessions: SessionService;
  chain: GatewayChainSink;
  /** Run after a bundle is installed (the gateway's measurement taken again). */
  onInstall: (bundle: PolicyBundle) => void;
  /**
   * Closes the sessions of the previous bundle once a newer one is installed (SQLite: every
   * open session, in batches); absent: every open session bound to another bundle, one by one.
   */
  closeOpen?: (reason: string) => Promise<Closed[]>;
  log: Logger;
}

type Closed = { session_id: string; agent_id: string; claim_sequence: number };

/**
 * The newest recorded reload when it is newer than the running bundle and verifies under the
 * pinned key, installed; else null (the running bundle stays; a reload that no longer verifies
 * is logged).
 */
export async function resumeRecordedReload(
  records: OperatorRecords,
  policy: PolicyState,
  log: Logger,
): Promise<PolicyBundle | null> {
  const newest = (await records.reloadsSince(-1)).at(-1);
  const running = policy.engine.bundle.manifest.version;
  if (!newest?.detail.bundle_files || (newest.detail.version ?? 0) <= running) return null;
  const bundle = verifiedReload(policy, newest.detail, running, log);
  if (bundle) policy.install(bundle);
  return bundle;
}

/** A recorded reload's bundle, its signature checked again under the pinned key, or null. */
function verifiedReload(
  policy: PolicyState,
  detail: { bundle_files?: Record<string, string>; signature?: string },
  running: number,
  log: Logger,
): PolicyBundle | null {
  try {
    const files = new Map(
      Object.entries(detail.bundle_files ?? {}).map(([k, v]) => [k, fromB64u(v)] as const),
    );
    return policy.check(files, detail.signature, running);
  } catch (e) {
    const why = e instanceof ReloadRefusedError ? e.reason : (e as Error).message;
    log.error({ reason: why }, 'a recorded policy reload does not verify here; not installed');
    return null;
  }
}

export class SignedReloads {
  private readSequence = -1;
  private reading: Promise<void> | null = null;
  /** Session id → the policy bundle hash its recorded binding names. */
  private readonly bound = new Map<string, string | null>();

  constructor(private readonly d: ReloadDeps) {}

  /** The recorded reloads since the last read; installs the newest when newer (one read at a time). */
  read(): Promise<void> {
    const policy = this.d.policy;
    if (!policy) return Promise.resolve();
    this.reading ??= (async () => {
      try {
        const reloads = await this.d.records.reloadsSince(this.readSequence);
        const newest = reloads.at(-1);
        if (!newest) return;
        this.readSequence = newest.sequence;
        const running = policy.engine.bundle.manifest.version;
        if (typeof newest.detail.version !== 'number' || newest.detail.version <= running) return;
        const bundle = verifiedReload(policy, newest.detail, running, this.d.log);
        if (!bundle) return;
        this.install(policy, bundle);
        this.d.log.info(
          { bundle_hash: bundle.hash, version: bundle.manifest.version },
          'installed a policy reload recorded by a replica',
        );
        // Sessions this replica opened before it read the reload are bound to the old bundle.
        this.closeStale('policy_reload').catch((e) =>
          this.d.log.warn({ err: (e as Error).message }, 'could not close sessions of the previous policy'),
        );
      } finally {
        this.reading = null;
      }
    })();
    return this.reading;
  }

  private install(policy: PolicyState, bundle: PolicyBundle): void {
    policy.install(bundle);
    this.d.facts.policyBundleHash = bundle.hash;
    try {
      this.d.onInstall(bundle);
    } catch (e) {
      this.d.log.error({ err: (e as Error).message }, 'policy reload hook failed');
    }
  }

  /**
   * Whether a call may run in `row` on this replica: its binding names the running bundle
   * (after reading the recorded reloads when it does not). Never throws for the session.
   */
  async usable(row: SessionRow): Promise<boolean> {
    if (!this.d.policy) return true;
    let hash = this.bound.get(row.session_id);
    if (hash === undefined) {
      hash = boundPolicyHash(row);
      if (row.binding_json !== '{}') {
        if (this.bound.size >= MAX_REMEMBERED) this.bound.delete(this.bound.keys().next().value as string);
        this.bound.set(row.session_id, hash);
      }
    }
    if (hash === this.d.facts.policyBundleHash) return true;
    await this.read();
    return hash === this.d.facts.policyBundleHash;
  }

  /** Closes the sessions of the previous bundle ({@link ReloadDeps.closeOpen}). */
  private async closeStale(reason: string): Promise<Closed[]> {
    if (this.d.closeOpen) return this.d.closeOpen(reason);
    const closed: Closed[] = [];
    for (const s of await this.d.records.sessionsBoundToOtherPolicy(this.d.facts.policyBundleHash ?? '')) {
      const claim = await this.d.sessions.closeAwaited(s.agent_id, s.session_id, reason);
      closed.push({ ...s, claim_sequence: claim.claim_sequence });
    }
    return closed;
  }

  /** `POST /operator/policy/reload` (module doc). @throws CmcpError POLICY_RELOAD_REFUSED; pg errors. */
  async reload(operatorId: string, body: unknown): Promise<Record<string, unknown>> {
    const policy = this.d.policy;
    if (!policy)
      return this.refuse(
        operatorId,
        new ReloadRefusedError('no_policy_key', 'no policy is configured; reloads are disabled'),
      );
    let next: PolicyBundle;
    let signature: string | undefined;
    let files: Map<string, Buffer>;
    try {
      await this.read(); // the newest recorded bundle is the one a reload must be newer than
      ({ files, signature } = decodeReloadFiles(body));
      next = policy.check(files, signature, policy.engine.bundle.manifest.version);
    } catch (e) {
      if (e instanceof ReloadRefusedError) return this.refuse(operatorId, e);
      throw e;
    }
    const previous = policy.engine.bundle;
    const entry = await this.d.records.recordReload(
      {
        entry_type: 'policy_reload',
        detail: reloadDetail(next, previous, { operatorId, enforcementMode: policy.mode, signature, files }),
      },
      next.manifest.version,
    );
    if (!entry)
      return this.refuse(
        operatorId,
        new ReloadRefusedError('not_newer', 'another reload was recorded meanwhile', [], next.hash),
      );
    // A read meanwhile may have installed an older recorded bundle; this one is the newest.
    if (next.manifest.version > policy.engine.bundle.manifest.version) this.install(policy, next);
    const closed = await this.closeStale('policy_reload');
    this.d.log.info(
      { operator_id: operatorId, bundle_hash: next.hash, sessions_closed: closed.length },
      'policy reloaded',
    );
    return reloadAnswer(next, previous, this.d.facts, entry.entry_hash, closed);
  }

  private refuse(operatorId: string, e: ReloadRefusedError): Promise<never> {
    return refuseReload(this.d.chain, this.d.log, operatorId, e);
  }
}

/** The policy bundle hash a session's recorded binding names (null: none, or not recorded). */
function boundPolicyHash(row: SessionRow): string | null {
  try {
    const b = JSON.parse(row.binding_json) as { preimage?: { policy_bundle_hash?: string | null } };
    return b.preimage?.policy_bundle_hash ?? null;
  } catch {
    return null;
  }
}
