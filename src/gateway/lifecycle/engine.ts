/**
 * What one storage engine adds to the one gateway start (start.ts): the storage port's parts
 * over the opened storage, and a few narrow hooks where the engines differ — how start-up
 * records are stored, what a start makes up for of the previous run (SQLite: recovery and stale
 * sessions; a replica: its evidence, then its lease's own work and the sweep), how reloads and
 * blocks reach the other writers, and what a stop seals. SQLite: sqlite-engine.ts; PostgreSQL
 * (a replica with a lease): replica-engine.ts.
 */

import type { AuditEntry } from '@cmcp/verify/formats';
import type { FastifyInstance } from 'fastify';
import type { GatewayMetrics } from '../../metrics/registry.js';
import type { PolicyBundle } from '../../policy/bundle.js';
import type { PolicyState } from '../../policy/state.js';
import type { RelayEntrySink } from '../../relay/evidence.js';
import type { ExecutionReads } from '../../session/ports.js';
import type { SessionService } from '../../session/service.js';
import type { SessionFacts } from '../../session/types.js';
import type {
  CallStore,
  EntryInput,
  GatewayChainSink,
  OperatorRecords,
  SensitivityReads,
  SessionStore,
} from '../../store/port.js';
import type { Db } from '../../store/sqlite/db.js';
import type { AttestationProvider } from '../../tee/provider.js';
import type { AppInputs } from '../compose.js';
import type { BlockLedgerOptions } from '../operator/blocks.js';
import type { OperatorControls, PolicyReloads } from '../operator/controls.js';
import type { LeaseGate } from './lease-gate.js';

/** Calls given their terminal entry by a start's or a stop's sealing. */
export interface Sealed {
  attempts: number;
  executions: number;
}

/** What the reloads hook is built over. */
export interface ReloadInputs {
  sessions: SessionService;
  facts: SessionFacts;
  policy: PolicyState | null;
  chain: GatewayChainSink;
  /** Run after a bundle is installed (the gateway measured again with it). */
  onInstall: (bundle: PolicyBundle) => void;
}

/** One engine's parts and hooks (module doc). */
export interface Engine {
  /** The gateway chain the domain's records go to. */
  chain: GatewayChainSink;
  sessionStore: SessionStore;
  callStore: CallStore;
  operatorRecords: OperatorRecords;
  executions: ExecutionReads;
  /** The stored sensitivity of a session (SQLite); null: read with the session's row. */
  sensitivityReads: SensitivityReads | null;
  relayEntries: RelayEntrySink;
  /** Readiness waits for it (a replica's lease); null: no lease. */
  gate: LeaseGate | null;
  /** SQLite's connection and file for the metrics' database gauges; null on PostgreSQL. */
  metricsDb: { db: Db; dbPath: string } | null;
  /** Adds the engine's own gauges (a replica: its pool). */
  observe(metrics: GatewayMetrics): void;
  /**
   * A start-up record of the gateway chain: SQLite appends it at once, in the caller's order; a
   * replica gathers it for {@link recorded}.
   */
  record(entry: EntryInput): void;
  /** Stores what {@link record} gathered (a replica: one batch) and resolves once it is durable. */
  recorded(): Promise<void>;
  /** Resumes a policy reload recorded by an earlier run before the gateway is measured (SQLite). */
  resume(policy: PolicyState | null, facts: SessionFacts): Promise<void>;
  /**
   * Makes up for the previous run before the gateway is measured (SQLite: its calls in flight
   * recorded, its sessions left open closing in batches, settled once listening; a replica
   * seals its own work only in {@link attest}, once its key has evidence).
   */
  recover(sessions: SessionService): { settled: Promise<void> };
  /**
   * Once the gateway is measured, before it serves: a replica records its key's evidence, then
   * seals its own calls left in flight and starts the sweep of expired leases; SQLite: nothing.
   */
  attest(p: { facts: SessionFacts; provider: AttestationProvider }): Promise<void>;
  /** The signed reloads (operator/reloads.ts) over this engine's records. */
  reloads(i: ReloadInputs): PolicyReloads;
  /** How blocks close a blocked agent's sessions and who counts as known. */
  blocks(sessions: SessionService): BlockLedgerOptions;
  /** Agents known besides the configured ones (SQLite: token agents that opened sessions). */
  knownAgents(): string[];
  /** How often blocks and reloads recorded elsewhere are read, milliseconds; undefined: never. */
  blockReadMs: number | undefined;
  /** What the edge adds (the console and token agents on SQLite; a replica: the lease gate, no console). */
  edge(operator: OperatorControls): Partial<Pick<AppInputs, 'onTokenAgent' | 'console'>>;
  /** Attaches engine hooks to the app before it listens. */
  attach(app: FastifyInstance): void;
  /**
   * At a stop, after the drain: records what did not drain as `outcome_unknown`. Never throws
   * (a failure is logged; the next start or another replica seals it).
   */
  seal(): Promise<Sealed>;
  /** The recorded terminal entry of an interrupted call, answered to what is still pending (SQLite). */
  interrupted: ((callId: string) => AuditEntry | null) | null;
  /** Whether a stop closes this instance's open sessions with claims (a replica leaves them to the others). */
  closesSessionsAtStop: boolean;
  /** Lets go of the lease (a replica); after the listeners and upstreams close. */
  release(): Promise<void>;
}
