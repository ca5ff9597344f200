/** Tries of a terminal commit that meets another process's write lock before it is kept for later. */
const TERMINAL_BUSY_TRIES = 6;

/**
 * One `tools/call`, from ingress to terminal commit (docs/spec/call-path.md), as stages run in order:
 * ingress (ingress.ts) → gates: blocked, route, catalog, policy (gates.ts) → admission
 * (admission.ts) → forward (forward.ts) → terminal record → respond (respond.ts). Every write
 * (attempt, admission, terminal, refusal) is one command of the storage port (store/port.ts).
 * The orchestrator only threads the terminal entry under construction through them; every call
 * that reaches it ends in exactly one terminal `tool_call` entry (docs/spec/audit-entries.md).
 */
import { randomUUID } from 'node:crypto';
import type { AuditEntry } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import { CmcpError, type ErrorCode } from '../errors/index.js';
import type { CallSessions } from '../session/ports.js';
import type { SessionRow } from '../session/service.js';
import type { EntryInput } from '../store/port.js';
import { type AttemptStart, type CallStore, isStoreBusy } from '../store/port.js';
import type { RoutedTool, UpstreamPool } from '../upstream/pool.js';
import { type AdmissionInput, actionBinding } from './admission.js';
import { forward } from './forward.js';
import { type CallControls, CallGates, NO_CONTROLS } from './gates.js';
import { readCallParams } from './ingress.js';
import { hopeless, PendingTerminals, RECORDED_LATE } from './pending-terminals.js';
import { answered, notRecorded, refused } from './respond.js';
import type { SessionSensitivity } from './sensitivity.js';
import { type CallTelemetry, NO_TELEMETRY } from './telemetry.js';
import type { Caller, CallLink, CallResponse, Refusal } from './types.js';

function latencyUs(startedAt: bigint): number {
  return Number((process.hrtime.bigint() - startedAt) / 1000n);
}

export class CallOrchestrator {
  private readonly gates: CallGates;
  /** Terminal entries whose commit failed, tried again until they commit (pending-terminals.ts). */
  readonly pendingTerminals: PendingTerminals;
  /** Set by {@link closeAttempts}: a shutdown records what is still open as outcome_unknown. */
  private closed = false;

  constructor(
    /** The storage port's call path: every write of a call goes there (store/port.ts). */
    private readonly store: CallStore,
    private readonly sessions: CallSessions,
    private readonly upstreams: UpstreamPool,
    /** Each session's highest forwarded sensitivity (also the relayed methods' Cedar context). */
    readonly sensitivity: SessionSensitivity,
    private readonly log: Logger,
    controls: CallControls = NO_CONTROLS,
    private readonly telemetry: CallTelemetry = NO_TELEMETRY,
  ) {
    this.gates = new CallGates(upstreams, controls, this.sensitivity);
    this.pendingTerminals = new PendingTerminals(log);
  }

  /**
   * No call begins after this (a shutdown past its drain time, before it records what is still
   * open); resolves once every write sent before it has settled (store/port.ts CallStore).
   */
  closeAttempts(): Promise<void> {
    this.closed = true;
    return this.store.closeAttempts();
  }

  /**
   * Runs one `tools/call` for an authenticated agent. Never throws for caller faults: every
   * outcome is a result or a JSON-RPC error, after its terminal audit entry is committed.
   * @param startedAt process.hrtime.bigint() at receipt, for `latency_us`.
   * @param link how the call reaches its upstream for this client (default: the shared connection).
   */
  async call(caller: Caller, rawParams: unknown, startedAt: bigint, link?: CallLink): Promise<CallResponse> {
    const callId = caller.callId ?? randomUUID();
    return this.telemetry.call(() => this.guarded(caller, rawParams, startedAt, callId, link));
  }

  private async guarded(
    caller: Caller,
    rawParams: unknown,
    startedAt: bigint,
    callId: string,
    link?: CallLink,
  ) {
    try {
      return await this.run(caller, rawParams, startedAt, callId, link);
    } catch (e) {
      // An unexpected fault still ends in a terminal entry (docs/spec/audit-entries.md), on the gateway chain.
      const entry = {
        entry_type: 'tool_call',
        call_id: callId,
        agent_id: caller.agentId,
        execution_id: null,
      };
      // Another process held the write lock past the busy timeout (e.g. while the session was
      // made): not a fault of the gateway, and nothing reached an upstream; the caller may retry.
      if (isStoreBusy(e)) {
        this.log.warn({ call_id: callId }, 'tools/call refused: the database is locked by another process');
        const message = 'the database is locked by another process; retry later';
        return this.refuse(null, entry, { code: 'STORE_BUSY', message }, startedAt);
      }
      this.log.error({ call_id: callId, err: (e as Error).message }, 'tools/call fault');
      return this.refuse(null, entry, { code: 'INTERNAL_ERROR', message: 'internal error' }, startedAt);
    }
  }

  /**
   * Records the terminal `tool_call` entry (gateway chain) of a tools/call refused by the MCP
   * layer before its params could be read (envelope errors), and returns its JSON-RPC error.
   */
  refuseEnvelope(
    agentId: string,
    code: ErrorCode,
    message: string,
    startedAt: bigint,
  ): Promise<CallResponse> {
    const entry = {
      entry_type: 'tool_call',
      call_id: randomUUID(),
      agent_id: agentId,
      execution_id: null,
      latency_us: latencyUs(startedAt),
    };
    return this.refuse(null, entry, { code, message }, startedAt);
  }

  private async run(
    caller: Caller,
    params: unknown,
    startedAt: bigint,
    callId: string,
    link?: CallLink,
  ): Promise<CallResponse> {
    // The terminal entry under construction: each stage adds what it learnt.
    const entry: EntryInput = {
      entry_type: 'tool_call',
      call_id: callId,
      agent_id: caller.agentId,
      execution_id: null,
    };
    let sessionId: string | null = null; // null: refusals go to the gateway chain
    const refuse = (r: Refusal) =>
      this.refuse(sessionId, { ...entry, ...r.entry, latency_us: latencyUs(startedAt) }, r, startedAt);

    const blocked = this.gates.blocked(caller);
    if (blocked) return refuse(blocked);
    const ingress = readCallParams(params);
    if (ingress.kind === 'refused' && ingress.scope === 'gateway') return refuse(ingress.refusal);
    const read = ingress.kind === 'request' ? ingress.request : ingress;
    entry.workflow_id = read.workflowId;
    let session: SessionRow;
    try {
      session = await this.sessions.resolve(caller.agentId, read.sessionId);
    } catch (e) {
      // No such session, or none that could be bound (minimum_tier), is a refusal; anything else
      // is a fault of the gateway.
      const refusable = ['UNKNOWN_SESSION', 'SESSION_CLOSED', 'SESSION_BINDING_REQUIRED'];
      if (!(e instanceof CmcpError && refusable.includes(e.code))) throw e;
      return refuse({ code: e.code, message: e.message, entry: { detail: { session: 'unresolved' } } });
    }
    sessionId = session.session_id;
    entry.session_id = sessionId;
    entry.tool_name = read.toolName;
    entry.request_payload_hash = read.requestPayloadHash;
    if (ingress.kind === 'refused') return refuse(ingress.refusal);
    const req = ingress.request;

    const routed = this.gates.route(req.toolName);
    if (!routed.ok) return refuse(routed.refusal);
    const route = routed.value;
    entry.server_identity = route.upstream;
    const pinned = this.gates.catalog(req.toolName, route);
    if (!pinned.ok) return refuse(pinned.refusal);
    const policy = this.telemetry.stage('policy', route.upstream, () =>
      this.gates.policy(caller, req, route, pinned.value, session),
    );
    if (!policy.ok) return refuse(policy.refusal);
    const { advisory } = policy.value;
    Object.assign(entry, policy.value.entry);
    if (advisory)
      this.log.warn(
        { call_id: callId, agent_id: caller.agentId, tool: req.toolName, policy_ids: advisory.policy_ids },
        'advisory deny',
      );

    const executionId = req.executionId;
    const attempt: AttemptStart = {
      callId,
      method: 'tools/call',
      upstream: route.upstream,
      agentId: caller.agentId,
      sessionId,
      executionId,
      toolName: req.toolName,
      requestPayloadHash: req.requestPayloadHash,
      workflowId: req.workflowId,
    };
    if (executionId !== null) {
      entry.execution_id = executionId;
      const a = {
        agentId: caller.agentId,
        executionId,
        callId,
        sessionId,
        serverIdentity: route.upstream,
        toolName: req.toolName,
        arguments: req.arguments ?? {},
        actionTimestamp: req.actionTimestamp,
      };
      const binding = actionBinding(a);
      try {
        const r = await this.admit(a, binding, attempt, route, entry, startedAt);
        if (r) return r;
      } catch (e) {
        if (queueFull(e)) return refuse({ code: 'STORE_QUEUE_FULL', message: e.message });
        this.log.error({ call_id: callId, err: (e as Error).message }, 'execution admission failed');
        this.telemetry.ended(route.upstream, 'not_recorded', null, startedAt);
        return notRecorded('admission', callId, { execution_id: executionId });
      }
    } else {
      // No upstream runs without a durable record of the attempt (docs/spec/execution.md#attempts).
      try {
        await this.begin(attempt, route);
      } catch (e) {
        if (queueFull(e)) return refuse({ code: 'STORE_QUEUE_FULL', message: e.message });
        this.log.error({ call_id: callId, err: (e as Error).message }, 'call attempt could not be recorded');
        this.telemetry.ended(route.upstream, 'not_recorded', null, startedAt);
        return notRecorded('admission', callId);
      }
    }

    const f = await this.telemetry.stage('upstream', route.upstream, () =>
      forward(this.upstreams, route, req.arguments, link ? { link, sessionId } : undefined),
    );
    if (f.disposition !== 'not_attempted') this.sensitivity.note(sessionId, route);
    const detail = { ...policy.value.detail, ...f.detail };
    let committed: AuditEntry;
    const terminal = {
      ...entry,
      error_code: f.errorCode,
      response_payload_hash: f.responseHash,
      latency_us: latencyUs(startedAt),
      detail: Object.keys(detail).length ? detail : null,
    };
    const execution = executionId === null ? null : { agentId: caller.agentId, executionId, callId };
    const write = (input: EntryInput) => () =>
      this.store.write({ kind: 'terminal', sessionId, entry: input, disposition: f.disposition, execution });
    try {
      committed = await this.telemetry.stage('commit', route.upstream, () =>
        this.commitTerminal(write(terminal), callId),
      );
    } catch (e) {
      const shuttingDown = this.closed;
      if (shuttingDown)
        // Past the shutdown drain: the call was already recorded outcome_unknown, as designed.
        this.log.warn(
          { call_id: callId },
          'call ended after the shutdown drain; it is recorded outcome_unknown',
        );
      else
        this.log.error(
          { call_id: callId, err: (e as Error).message },
          'terminal audit entry could not be committed',
        );
      // The outcome is known: it is recorded once a write succeeds again, saying it came late
      // (the agent was answered AUDIT_WRITE_FAILED, not the result).
      if (!shuttingDown && !hopeless(e))
        this.pendingTerminals.add(
          callId,
          write({ ...terminal, detail: { ...(terminal.detail ?? {}), recorded_late: RECORDED_LATE } }),
          () => this.store.attemptOpen(callId),
        );
      const data = executionId === null ? {} : { execution_id: executionId, execution_state: 'in_flight' };
      this.telemetry.ended(route.upstream, 'not_recorded', f.errorCode, startedAt);
      return notRecorded('outcome', callId, data);
    }
    this.telemetry.ended(route.upstream, f.disposition, f.errorCode, startedAt);
    return answered(f, callId, executionId, committed, advisory);
  }

  /**
   * Commits a forwarded call's terminal entry, trying again while another process holds the write
   * lock past the busy timeout, up to {@link TERMINAL_BUSY_TRIES} tries (each waits the busy
   * timeout by awaiting, so the gateway keeps serving and the agent waits for its result). Past
   * them the caller keeps the entry and writes it once the lock is free (`recorded_late`), so the
   * agent's wait is bounded and the outcome is never dropped. It stops trying once a shutdown has
   * ended the attempts: the drain recorded the call outcome_unknown.
   * @throws what the commit throws other than SQLITE_BUSY; SQLITE_BUSY after the last try or
   *   after the shutdown.
   */
  private async commitTerminal(commit: () => Promise<AuditEntry>, callId: string): Promise<AuditEntry> {
    let warned = false;
    for (let tries = 1; ; tries++) {
      try {
        return await commit();
      } catch (e) {
        if (!isStoreBusy(e) || this.closed || tries >= TERMINAL_BUSY_TRIES) throw e;
        if (!warned)
          this.log.warn({ call_id: callId }, 'terminal audit entry waits for the database lock; retrying');
        warned = true;
      }
    }
  }

  /**
   * Records the call's attempt and raises the session's durable sensitivity with it, in one
   * write; the in-memory level is noted once it is durable.
   */
  private async begin(attempt: AttemptStart, route: RoutedTool): Promise<void> {
    const raiseSensitivity = this.sensitivity.raise(attempt.sessionId, route);
    await this.store.write({ kind: 'attempt', attempt, raiseSensitivity });
    if (raiseSensitivity !== null) this.sensitivity.raised(attempt.sessionId, raiseSensitivity);
  }

  /** Records a refusal as the call's terminal entry and returns its JSON-RPC error. */
  private async refuse(
    sessionId: string | null,
    input: EntryInput,
    r: Refusal,
    startedAt: bigint,
  ): Promise<CallResponse> {
    const upstream = typeof input.server_identity === 'string' ? input.server_identity : null;
    const write = () =>
      this.store.write({ kind: 'refusal', sessionId, entry: { ...input, error_code: r.code } });
    let e: AuditEntry;
    try {
      e = await this.telemetry.stage('commit', upstream, write);
    } catch (err) {
      return this.refusalNotRecorded(input, r, err, startedAt);
    }
    this.telemetry.ended(upstream, 'refused', r.code, startedAt);
    return refused(r, callId(input), e);
  }

  /**
   * The admission (docs/spec/execution.md#admission) as one write: the reservation and the
   * attempt, or the refusal's terminal entry, in one transaction. @returns the refusal's
   * answer, or null when admitted. @throws what the write throws.
   */
  private async admit(
    a: Omit<AdmissionInput, 'arguments' | 'actionTimestamp'>,
    binding: string,
    attempt: AttemptStart,
    route: RoutedTool,
    entry: EntryInput,
    startedAt: bigint,
  ): Promise<CallResponse | null> {
    const raiseSensitivity = this.sensitivity.raise(attempt.sessionId, route);
    const r = await this.telemetry.stage('admission', a.serverIdentity, () =>
      this.store.write({
        kind: 'admission',
        admission: { ...a, binding },
        attempt,
        raiseSensitivity,
        refusalEntry: { ...entry, latency_us: latencyUs(startedAt) },
      }),
    );
    if (r.kind === 'admitted') {
      if (raiseSensitivity !== null) this.sensitivity.raised(attempt.sessionId, raiseSensitivity);
      return null;
    }
    if (r.kind === 'refusal-not-recorded')
      return this.refusalNotRecorded({ ...entry }, r.refusal, new Error(r.message), startedAt);
    this.telemetry.ended(a.serverIdentity, 'refused', r.refusal.code, startedAt);
    return refused(r.refusal, a.callId, r.entry);
  }

  private refusalNotRecorded(input: EntryInput, r: Refusal, err: unknown, startedAt: bigint): CallResponse {
    const callId = input.call_id as string;
    const upstream = typeof input.server_identity === 'string' ? input.server_identity : null;
    this.log.error({ call_id: callId, err: (err as Error).message }, 'refusal could not be recorded');
    this.telemetry.ended(upstream, 'not_recorded', r.code, startedAt);
    return notRecorded('refusal', callId);
  }
}

/**
 * The store refused new work (its bounded queue is full): the call is refused before its
 * attempt, so nothing was forwarded; the refusal itself is still recorded (store/port.ts).
 */
function queueFull(e: unknown): e is CmcpError {
  return e instanceof CmcpError && e.code === 'STORE_QUEUE_FULL';
}

function callId(input: EntryInput): string {
  return input.call_id as string;
}
