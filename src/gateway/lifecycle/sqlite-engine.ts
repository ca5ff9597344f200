/**
 * The one gateway on SQLite (engine.ts): one instance per database file under its instance
 * lock, start-up records appended one by one, the previous run's calls in flight recorded and
 * its sessions closed before serving, and at a stop what did not drain recorded and every open
 * session closed with a claim.
 */

import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { GatewayConfig } from '../../config/index.js';
import { isLoopback } from '../../config/index.js';
import { ConsoleReadModel } from '../../console/read-model.js';
import { resumedPolicyEntry } from '../../policy/startup.js';
import { AttemptLog } from '../../store/sqlite/attempts.js';
import { sqliteAuditFeed } from '../../store/sqlite/audit-feed.js';
import { AuditChain } from '../../store/sqlite/chain.js';
import type { SqliteStorage } from '../../store/sqlite/open.js';
import { CallRecovery } from '../../store/sqlite/recovery.js';
import { sqliteRelayEntries } from '../../store/sqlite/relay-entries.js';
import { sqliteSensitivityReads } from '../../store/sqlite/sensitivity.js';
import { resumeRecordedReload, SignedReloads } from '../operator/reloads.js';
import type { Engine } from './engine.js';

/** The SQLite engine's parts and hooks, with its chain object and recovery (tests read them). */
export function sqliteEngine(
  storage: SqliteStorage,
  cfg: GatewayConfig,
  log: Logger,
): Engine & { chain: AuditChain; recovery: CallRecovery } {
  const { db } = storage;
  const chain = new AuditChain(db);
  const callStore = storage.callStore(chain);
  const sessionStore = storage.sessionStore(chain);
  const executions = callStore.local.executions;
  const operatorRecords = storage.operatorRecords(chain);
  const recovery = new CallRecovery(db, chain, new AttemptLog(db, cfg.instance_id), executions, sessionStore);
  return {
    chain,
    recovery,
    sessionStore,
    callStore,
    operatorRecords,
    executions,
    sensitivityReads: sqliteSensitivityReads(db, chain),
    relayEntries: sqliteRelayEntries(chain, sessionStore),
    gate: null,
    metricsDb: { db, dbPath: cfg.database },
    observe: () => undefined,
    auditFeed: sqliteAuditFeed(db),
    record: (entry) => void chain.append(GATEWAY_CHAIN_ID, entry),
    recorded: () => Promise.resolve(),
    async resume(policy, facts) {
      const resumed = policy ? await resumeRecordedReload(operatorRecords, policy, log) : null;
      if (!resumed || !policy) return;
      facts.policyBundleHash = resumed.hash;
      chain.append(GATEWAY_CHAIN_ID, resumedPolicyEntry(resumed, policy));
      log.info(
        { bundle_hash: resumed.hash, version: resumed.manifest.version },
        'resumed the last reloaded policy',
      );
    },
    recover(sessions) {
      // Before stale sessions close, so each interrupted call lands in the session chain it ran
      // in: nothing forwarded by an earlier process stays without a terminal entry.
      const recovered = recovery.run(
        'in flight at start-up: the previous process stopped before a terminal outcome was recorded',
      );
      if (recovered.attempts || recovered.executions)
        log.warn(recovered, 'recorded calls in flight in a previous run as outcome_unknown');
      // Made unusable now, closed in batches while start-up goes on (awaited once listening).
      const settled = sessions.closeStale().then((stale) => {
        if (stale)
          log.warn(
            { sessions: stale },
            'closed sessions left open by a previous run (claims issued, binding absent)',
          );
      });
      return { settled };
    },
    attest: () => Promise.resolve(),
    reloads(i) {
      return new SignedReloads({
        records: operatorRecords,
        log,
        ...i,
        // Every open session of this instance was bound to the previous bundle; closed in batches.
        closeOpen: (reason) => i.sessions.closeOpenInBatches(null, reason),
      });
    },
    blocks: (sessions) => ({
      closeOpenOf: (agentId) => sessions.closeOpenInBatches(agentId, 'agent_blocked'),
      knownBySessions: false,
    }),
    // Token agents are not listed in the config: those that opened sessions before are known.
    knownAgents: () =>
      cfg.oauth
        ? db
            .prepare<[], { agent_id: string }>('SELECT DISTINCT agent_id FROM sessions')
            .all()
            .map((r) => r.agent_id)
        : [],
    blockReadMs: undefined,
    edge: (operator) => ({
      onTokenAgent: (id) => operator.noteAgent(id),
      console: (auth, recordAuthFailure) => ({
        auth,
        read: new ConsoleReadModel(db, chain, operator, operator.agentIds()),
        block: (op, agent, reason) => operator.blockAgent(op, agent, reason ? { reason } : {}),
        unblock: (op, agent) => operator.unblockAgent(op, agent),
        reload: (op, body) => operator.reloadPolicy(op, body),
        secureCookie: !isLoopback(cfg.listen.host),
        recordAuthFailure,
      }),
    }),
    attach: () => undefined,
    async seal() {
      try {
        return await recovery.runAwaited('in flight at shutdown: the call did not end within the drain time');
      } catch (e) {
        log.error(
          { err: (e as Error).message },
          'could not record undrained calls (recovered at next start)',
        );
        return { attempts: 0, executions: 0 };
      }
    },
    interrupted: (callId) => recovery.interrupted(callId),
    closesSessionsAtStop: true,
    release: () => Promise.resolve(),
  };
}
