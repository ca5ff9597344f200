/**
 * The one gateway on PostgreSQL: a replica (docs/replicas.md), the same gateway with a lease in
 * place of the instance lock (engine.ts). Its lease is taken before anything writes; its
 * start-up records go in one batch; its evidence is recorded before it signs anything else,
 * then its own calls left in flight are sealed and the sweep of other replicas' expired work
 * starts. Blocks and reloads recorded by any replica are read on a timer; at a stop its own
 * calls still open are sealed and its sessions stay open for the others.
 */
import type { AuditEntry } from '@cmcp/verify/formats';
import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { GatewayConfig } from '../../config/index.js';
import { attestReplica } from '../../session/replica-start.js';
import type { GatewayKey } from '../../session/service.js';
import { maybeDie } from '../../store/faults.js';
import type { EntryInput, GatewayChainSink } from '../../store/port.js';
import { getExecution } from '../../store/postgres/executions.js';
import type { PostgresStorage } from '../../store/postgres/open.js';
import { appendRelayEntry } from '../../store/postgres/relay-entries.js';
import { recordReplicaStart } from '../../store/postgres/replica-evidence.js';
import type { ReplicaLease } from '../../store/postgres/replica-lease.js';
import { recoverOwnWork } from '../../store/postgres/sealing.js';
import { closeEachOpen } from '../operator/blocks.js';
import { BLOCK_READ_MS } from '../operator/controls.js';
import { SignedReloads } from '../operator/reloads.js';
import type { Engine } from './engine.js';
import { LeaseGate, startReplicaLease } from './lease-gate.js';
import { refuseConsole, replicaGauges } from './replica-unavailable.js';

/** The reason recorded on a replica's own calls still open when it stops. */
const STOPPED_REASON = 'gateway_stopped';

/**
 * Takes the replica's lease (a live lease of `instance_id` refuses the start) and returns the
 * engine over it; the lease's release goes onto `opened`. An expired lease of its own has its
 * open calls sealed later ({@link Engine.recover}), once this key's evidence is recorded: no
 * entry is signed by a key without evidence, whenever the start-up dies.
 * @throws (rejects) InstanceBusyError (INSTANCE_RUNNING); pg errors.
 */
export async function replicaEngine(
  storage: PostgresStorage,
  cfg: GatewayConfig,
  key: GatewayKey,
  log: Logger,
  opened: (() => unknown)[],
): Promise<Engine & { lease: ReplicaLease; gate: LeaseGate }> {
  const { pool } = storage;
  const gate = new LeaseGate();
  const lease = await startReplicaLease(pool, {
    instanceId: cfg.instance_id,
    replicas: cfg.replicas,
    keyThumbprint: key.thumbprint.toString('base64url'),
    key: key.privateKey,
    gate,
    log,
    regain: true,
  });
  opened.push(() => lease.stop());
  maybeDie('lease_acquired');
  const { fence } = lease;
  const sessionStore = storage.sessionStore(fence);
  const operatorRecords = storage.operatorRecords(fence);
  const chain: GatewayChainSink = {
    appendAwaited: async (chainId: string, input: EntryInput) =>
      (await sessionStore.appendEntries(chainId, [input]))[0] as AuditEntry,
  };
  const gathered: EntryInput[] = [];
  return {
    lease,
    gate,
    chain,
    sessionStore,
    callStore: storage.callStore(fence),
    operatorRecords,
    executions: { get: (agentId, executionId) => getExecution(pool, agentId, executionId) },
    sensitivityReads: null,
    relayEntries: (sessionId, input) => appendRelayEntry(pool, fence, sessionId, input),
    metricsDb: null,
    observe: (metrics) => replicaGauges(metrics, pool),
    record: (entry) => void gathered.push(entry),
    async recorded() {
      await sessionStore.appendEntries(GATEWAY_CHAIN_ID, gathered.splice(0));
      maybeDie('start_recorded');
    },
    resume: () => Promise.resolve(),
    recover: () => ({ settled: Promise.resolve() }),
    async attest({ facts, provider }) {
      // Its key and measurement in its own evidence, before it serves: what a /2 claim lists for
      // every replica that wrote into the chain (docs/spec/binding.md#replica-binding).
      await attestReplica((m) => recordReplicaStart(pool, fence, m), fence, key, provider, facts, log);
      maybeDie('evidence_recorded');
      // Its own calls left in flight by its previous run sealed (`replica_restart`), then the
      // sweep of other replicas' expired leases: both sign with this key, so after its evidence.
      await lease.begin();
      maybeDie('own_work_recovered');
      if (lease.recovered && (lease.recovered.attempts || lease.recovered.executions))
        log.warn(
          { ...lease.recovered },
          "recorded this replica's calls in flight in its previous run as outcome_unknown",
        );
    },
    reloads(i) {
      const reloads = new SignedReloads({ records: operatorRecords, log, ...i });
      if (i.policy) i.sessions.checkUsable((row) => reloads.usable(row));
      return reloads;
    },
    blocks: (sessions) => ({
      closeOpenOf: closeEachOpen(operatorRecords, (agentId, sid) =>
        sessions.closeAwaited(agentId, sid, 'agent_blocked'),
      ),
      knownBySessions: true,
      replicaId: fence.replicaId,
    }),
    knownAgents: () => [],
    blockReadMs: BLOCK_READ_MS,
    edge: () => ({}),
    attach(app) {
      gate.attach(app);
      refuseConsole(app);
    },
    async seal() {
      try {
        // Calls still at an upstream after the drain: on the record before the lease is released.
        if (lease.live) return await recoverOwnWork(pool, fence, STOPPED_REASON);
      } catch (e) {
        log.error(
          { err: (e as Error).message },
          'could not seal undrained calls (sealed by another replica)',
        );
      }
      return { attempts: 0, executions: 0 };
    },
    interrupted: null,
    closesSessionsAtStop: false,
    release: () => lease.stop().catch((e) => log.warn({ err: (e as Error).message }, 'lease not released')),
  };
}
