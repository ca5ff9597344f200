/**
 * One `tools/call`, from ingress to terminal commit, in order (design §9):
 * blocked agent → params → session → tool route → catalog → policy → execution admission →
 * upstream → terminal audit entry. The catalog gate precedes the policy because the Cedar
 * resource's attributes come from the tool's catalog pin: a tool without a trustworthy
 * definition is never evaluated.
 * Every call that reaches this pipeline ends in exactly one terminal `tool_call` entry
 * (design §3): in its session's chain, or in the gateway chain when no session could be
 * resolved.
 */
import { randomUUID } from 'node:crypto';
import { CmcpError, clip, type ErrorCode } from '@cmcp/verify/errors/index';
import { assertCanonicalizable, CanonicalJsonError, jcsDigest } from '@cmcp/verify/format/canonical';
import { type AuditEntry, GATEWAY_CHAIN_ID } from '@cmcp/verify/format/entry';
import type { Logger } from 'pino';
import type { AuditChain, EntryInput } from '../audit/chain.js';
import { SENSITIVITY_LEVELS, type Sensitivity } from '../catalog/catalog.js';
import type { CatalogGuard } from '../catalog/guard.js';
import { toolCallBinding } from '../execution/binding.js';
import { checkExecutionId } from '../execution/ingress.js';
import type { ExecutionRegistry } from '../execution/registry.js';
import type { PolicyEngine } from '../policy/engine.js';
import type { SessionRow, SessionService } from '../session/service.js';
import { type Db, immediate } from '../store/db.js';
import { maybeFail } from '../store/faults.js';
import type { CallOutcome, RoutedTool, UpstreamPool } from '../upstream/pool.js';
import { refuseOffline } from './offline.js';

/** Evidence returned in `result._meta["dev.cmcp/evidence"]` and in error data (design §8). */
export interface CallEvidence {
  call_id: string;
  session_id: string | null;
  entry_hash: string;
  sequence_number: number;
  chain_id: string;
}

export const EVIDENCE_META_KEY = 'dev.cmcp/evidence';

/** A JSON-RPC error produced by the pipeline (the gateway wraps it in a response). */
export interface CallError {
  code: number;
  message: string;
  data: Record<string, unknown>;
}

export type CallResponse = { result: Record<string, unknown> } | { error: CallError };

/**
 * Policy, catalog and identity controls of the pipeline (issue 6). The defaults (no
 * controls) keep the pre-policy behaviour: every routed call is allowed.
 */
export interface CallControls {
  /** The engine deciding calls now (changes on a signed reload), or null: no policy. */
  policy(): PolicyEngine | null;
  /** The catalog check, or null: no catalog. */
  catalog: CatalogGuard | null;
  /** Configured Cedar principal attributes of an agent. */
  agentAttributes(agentId: string): Record<string, unknown>;
  /** True when an operator blocked this agent (kill switch). */
  isBlocked(agentId: string): boolean;
}

const NO_CONTROLS: CallControls = {
  policy: () => null,
  catalog: null,
  agentAttributes: () => ({}),
  isBlocked: () => false,
};

interface CmcpParams {
  session_id?: string;
  workflow_id?: string;
}

/** True when the string has no lone surrogate (so JCS can carry it, RFC 8785 §3.2.2.2). */
function isWellFormed(s: string): boolean {
  try {
    assertCanonicalizable(s);
    return true;
  } catch {
    return false;
  }
}

const CMCP_KEYS = new Set(['session_id', 'workflow_id', 'execution_id', 'action_timestamp']);

/** Terminal state of an allowed call, from its effect boundary (design §6). */
function disposition(o: CallOutcome): 'completed' | 'not_attempted' | 'outcome_unknown' {
  if (o.boundary === 'answered') return 'completed';
  return o.boundary === 'not_sent' ? 'not_attempted' : 'outcome_unknown';
}

export class CallPipeline {
  constructor(
    private readonly db: Db,
    private readonly chain: AuditChain,
    private readonly sessions: SessionService,
    private readonly upstreams: UpstreamPool,
    private readonly executions: ExecutionRegistry,
    private readonly log: Logger,
    private readonly controls: CallControls = NO_CONTROLS,
  ) {}

  /** Highest sensitivity among the calls a session forwarded (session id → level index). */
  private readonly seenSensitivity = new Map<string, number>();

  /** The catalog sensitivity of a routed tool (`unclassified` without a catalog). */
  private sensitivityOf(route: RoutedTool | undefined): Sensitivity {
    if (!route || !this.controls.catalog) return 'unclassified';
    return this.controls.catalog.find(route.upstream, route.toolName)?.sensitivity ?? 'unclassified';
  }

  /** Highest sensitivity a session has forwarded so far; rebuilt from its chain after a restart. */
  private maxSensitivity(sessionId: string): Sensitivity {
    let level = this.seenSensitivity.get(sessionId);
    if (level === undefined) {
      level = 0;
      for (const e of this.chain.entries(sessionId)) {
        if (e.entry_type !== 'tool_call' || e.tool_name === null) continue;
        if (e.disposition !== 'completed' && e.disposition !== 'outcome_unknown') continue;
        const l = SENSITIVITY_LEVELS.indexOf(this.sensitivityOf(this.upstreams.route(e.tool_name)));
        if (l > level) level = l;
      }
      if (this.seenSensitivity.size > 10_000) this.seenSensitivity.clear(); // rebuilt on demand
      this.seenSensitivity.set(sessionId, level);
    }
    return SENSITIVITY_LEVELS[level] ?? 'unclassified';
  }

  /**
   * Runs one `tools/call` for an authenticated agent. Never throws for caller faults: every
   * outcome is a result or a JSON-RPC error, after its terminal audit entry is committed.
   * @param startedAt process.hrtime.bigint() at receipt, for `latency_us`.
   */
  async call(agentId: string, rawParams: unknown, startedAt: bigint): Promise<CallResponse> {
    const callId = randomUUID();
    try {
      return await this.run(agentId, rawParams, startedAt, callId);
    } catch (e) {
      // An unexpected fault still ends in a terminal entry (design §3), on the gateway chain.
      this.log.error({ call_id: callId, err: (e as Error).message }, 'tools/call fault');
      return this.refuse(
        GATEWAY_CHAIN_ID,
        null,
        { entry_type: 'tool_call', call_id: callId, agent_id: agentId, execution_id: null },
        'INTERNAL_ERROR',
        'internal error',
      );
    }
  }

  /**
   * Records the terminal `tool_call` entry (gateway chain) of a tools/call refused by the MCP
   * layer before its params could be read (envelope errors), and returns its JSON-RPC error.
   */
  refuseEnvelope(agentId: string, code: ErrorCode, message: string, startedAt: bigint): CallResponse {
    return this.refuse(
      GATEWAY_CHAIN_ID,
      null,
      {
        entry_type: 'tool_call',
        call_id: randomUUID(),
        agent_id: agentId,
        execution_id: null,
        latency_us: Number((process.hrtime.bigint() - startedAt) / 1000n),
      },
      code,
      message,
    );
  }

  private async run(
    agentId: string,
    rawParams: unknown,
    startedAt: bigint,
    callId: string,
  ): Promise<CallResponse> {
    const base: EntryInput = {
      entry_type: 'tool_call',
      call_id: callId,
      agent_id: agentId,
      execution_id: null,
    };
    const latency = () => Number((process.hrtime.bigint() - startedAt) / 1000n);

    // Unattributable refusals go to the gateway chain (nothing is off the record).
    const refuseInGateway = (code: ErrorCode, message: string, extra: Partial<EntryInput> = {}) =>
      this.refuse(GATEWAY_CHAIN_ID, null, { ...base, ...extra, latency_us: latency() }, code, message);

    if (this.controls.isBlocked(agentId)) {
      return refuseInGateway('AGENT_BLOCKED', 'this agent identity is blocked by an operator');
    }

    const params = rawParams;
    if (typeof params !== 'object' || params === null || Array.isArray(params)) {
      return refuseInGateway('INVALID_PARAMS', 'params must be an object');
    }
    const p = params as Record<string, unknown>;
    const cmcpRaw = p._cmcp;
    if (
      cmcpRaw !== undefined &&
      (typeof cmcpRaw !== 'object' || cmcpRaw === null || Array.isArray(cmcpRaw))
    ) {
      return refuseInGateway('INVALID_PARAMS', '_cmcp must be an object');
    }
    const cmcp = (cmcpRaw ?? {}) as Record<string, unknown>;
    for (const k of Object.keys(cmcp)) {
      if (!CMCP_KEYS.has(k)) return refuseInGateway('INVALID_PARAMS', `unknown _cmcp member ${clip(k, 40)}`);
    }
    const c: CmcpParams = {};
    if (cmcp.session_id !== undefined) {
      if (
        typeof cmcp.session_id !== 'string' ||
        cmcp.session_id.length > 100 ||
        !/^[\x21-\x7e]+$/.test(cmcp.session_id)
      )
        return refuseInGateway('INVALID_PARAMS', '_cmcp.session_id must be a string');
      c.session_id = cmcp.session_id;
    }
    if (cmcp.workflow_id !== undefined) {
      if (
        typeof cmcp.workflow_id !== 'string' ||
        cmcp.workflow_id.length < 1 ||
        cmcp.workflow_id.length > 200 ||
        !isWellFormed(cmcp.workflow_id)
      )
        return refuseInGateway('INVALID_PARAMS', '_cmcp.workflow_id must be a string of 1–200 characters');
      c.workflow_id = cmcp.workflow_id;
    }
    base.workflow_id = c.workflow_id ?? null;

    let session: SessionRow;
    try {
      session = await this.sessions.resolve(agentId, c.session_id);
    } catch (e) {
      if (e instanceof CmcpError)
        return refuseInGateway(e.code, e.message, { detail: { session: 'unresolved' } });
      throw e;
    }
    base.session_id = session.session_id;
    const refuse = (
      code: ErrorCode,
      message: string,
      extra: Partial<EntryInput> = {},
      data: Record<string, unknown> = {},
    ) =>
      this.refuse(
        session.session_id,
        session,
        { ...base, ...extra, latency_us: latency() },
        code,
        message,
        data,
      );

    // execution_id ingress first (design §6): anything but a valid id is EXECUTION_ID_INVALID,
    // refused before any reservation and audited with execution_id null.
    const exec = checkExecutionId(cmcp);
    if (exec.kind === 'invalid') return refuse('EXECUTION_ID_INVALID', `execution_id ${exec.reason}`);
    try {
      // Everything that may reach an audit entry or the upstream must be JSON that JCS can
      // carry exactly: checked before any reservation or upstream call.
      assertCanonicalizable(p, { integersExact: true }, '/params');
    } catch (e) {
      if (e instanceof CanonicalJsonError) return refuse('INVALID_PARAMS', clip(e.message, 160));
      throw e;
    }

    const name = p.name;
    if (typeof name !== 'string' || name.length < 1 || name.length > 256) {
      return refuse('INVALID_PARAMS', 'name must be a string of 1–256 characters');
    }
    base.tool_name = name;
    const args = p.arguments;
    if (args !== undefined && (typeof args !== 'object' || args === null || Array.isArray(args))) {
      return refuse('INVALID_PARAMS', 'arguments must be an object');
    }
    try {
      // The gateway forwards exactly what it evaluated: refuse what JSON cannot carry exactly.
      assertCanonicalizable(args ?? {}, { integersExact: true }, '/arguments');
    } catch (e) {
      if (e instanceof CanonicalJsonError) return refuse('INVALID_PARAMS', e.message);
      throw e;
    }
    base.request_payload_hash = jcsDigest({ name, arguments: args ?? {} });

    // execution_id ingress (design §6): refused before any reservation, audited as null.
    let actionTimestamp: string | null = null;
    if (cmcp.action_timestamp !== undefined) {
      if (typeof cmcp.action_timestamp !== 'string' || cmcp.action_timestamp.length > 64)
        return refuse('INVALID_PARAMS', '_cmcp.action_timestamp must be a string of at most 64 characters');
      actionTimestamp = cmcp.action_timestamp;
    }
    const executionId = exec.kind === 'valid' ? exec.value : null;

    const route = this.upstreams.route(name);
    const catalog = this.controls.catalog;
    if (!route) {
      const pinned = catalog?.findExposed(name, (s, t) => this.upstreams.exposedName(s, t));
      // Issue 16 item 3: the tool's upstream has not answered since start-up.
      const offline = this.upstreams.unavailableFor(name, pinned?.server);
      if (offline) return refuseOffline(refuse, name, offline);
      if (catalog && !pinned)
        return refuse('TOOL_NOT_IN_CATALOG', `tool ${clip(name, 80)} is not in the catalog`);
      if (!pinned) return refuse('UNKNOWN_TOOL', `unknown tool ${clip(name, 80)}`);
      return refuse(
        'CATALOG_DRIFT',
        'the upstream no longer offers this pinned tool; it is blocked',
        { server_identity: pinned.server, detail: { pinned_hash: pinned.sha256, live_hash: null } },
        { pinned_hash: pinned.sha256, live_hash: null },
      );
    }
    base.server_identity = route.upstream;

    // Catalog: only pinned tools whose live definition still matches the pin.
    let annotations: unknown = route.definition.annotations;
    if (catalog) {
      const chk = catalog.check(route.upstream, route.toolName);
      if (chk.kind === 'not_in_catalog')
        return refuse('TOOL_NOT_IN_CATALOG', `tool ${clip(name, 80)} is not in the catalog`);
      if (chk.kind === 'drift')
        return refuse(
          'CATALOG_DRIFT',
          "the upstream's definition of this tool differs from its catalog pin; it is blocked",
          { detail: { pinned_hash: chk.pinned, live_hash: chk.live } },
          { pinned_hash: chk.pinned, live_hash: chk.live },
        );
      annotations = chk.tool.definition.annotations;
    }

    // Policy (Cedar): decided before anything is reserved or sent. Without a policy every
    // routed call is allowed (enforcement_mode "none" in the claim).
    const policyDetail: Record<string, unknown> = {};
    let advisory: Record<string, unknown> | null = null;
    const engine = this.controls.policy();
    if (!engine) {
      base.policy_decision = 'allow';
    } else {
      const d = engine.evaluate({
        agentId,
        agentAttributes: this.controls.agentAttributes(agentId),
        tool: {
          exposedName: name,
          server: route.upstream,
          toolName: route.toolName,
          sensitivity: this.sensitivityOf(route),
          annotations,
        },
        arguments: (args ?? {}) as Record<string, unknown>,
        workflowId: c.workflow_id ?? null,
        session: { calls: session.call_count, maxSensitivity: this.maxSensitivity(session.session_id) },
      });
      base.policy_rule_matched = d.matched;
      if (d.errored.length) policyDetail.policy_errors = d.errored;
      if (d.failure) policyDetail.policy_failure = d.failure;
      if (d.decision === 'allow') {
        base.policy_decision = 'allow';
      } else if (engine.mode === 'enforcing') {
        base.policy_decision = 'deny';
        const failed = d.failure !== null || d.errored.length > 0;
        return refuse(
          failed ? 'POLICY_EVALUATION_FAILED' : 'POLICY_DENY',
          failed ? 'the call could not be evaluated by the policy; refused' : 'denied by policy',
          { detail: Object.keys(policyDetail).length ? policyDetail : null },
          { policy_ids: d.matched, ...policyDetail },
        );
      } else if (engine.mode === 'advisory') {
        base.policy_decision = 'advisory_deny';
        advisory = { policy_decision: 'advisory_deny', policy_ids: d.matched };
        this.log.warn(
          { call_id: callId, agent_id: agentId, tool: name, policy_ids: d.matched },
          'advisory deny',
        );
      } else {
        base.policy_decision = 'silent_deny';
      }
    }

    // Admission (design §6): one IMMEDIATE transaction reserves the key or classifies it.
    if (executionId !== null) {
      base.execution_id = executionId;
      const binding = toolCallBinding({
        agentId,
        serverIdentity: route.upstream,
        toolName: name,
        arguments: (args ?? {}) as Record<string, unknown>,
        actionTimestamp,
      });
      let refusal: CallResponse | null = null;
      try {
        refusal = immediate(this.db, () => {
          const a = this.executions.admit({
            agentId,
            executionId,
            binding,
            callId,
            sessionId: session.session_id,
            toolName: name,
          });
          if (a.kind === 'admitted') return null;
          const x = a.existing;
          const terminal = x.state === 'in_flight' ? null : x.terminal_entry_hash;
          return refuse(
            a.kind,
            a.kind === 'EXECUTION_COLLISION'
              ? 'this execution_id is bound to a different action'
              : a.kind === 'EXECUTION_IN_FLIGHT'
                ? 'this execution_id is in flight'
                : `this execution_id is terminal (${x.state}) and is never run again`,
            { detail: { execution_state: x.state, first_call_id: x.call_id, terminal_entry_hash: terminal } },
            { execution_id: executionId, execution_state: x.state, terminal_entry_hash: terminal },
          );
        });
      } catch (e) {
        this.log.error({ call_id: callId, err: (e as Error).message }, 'execution admission failed');
        return {
          error: {
            code: -32040,
            message: 'admission could not be recorded',
            data: { error_code: 'AUDIT_WRITE_FAILED', call_id: callId, execution_id: executionId },
          },
        };
      }
      if (refusal) return refusal;
    }

    const outcome = await this.upstreams.call(route, args as Record<string, unknown> | undefined);
    const disp = disposition(outcome);
    let errorCode: ErrorCode | 'UPSTREAM_RPC_ERROR' | null = null;
    let responseHash: string | null = null;
    const detail: Record<string, unknown> = { ...policyDetail };
    if (disp !== 'not_attempted') {
      const l = SENSITIVITY_LEVELS.indexOf(this.sensitivityOf(route));
      if (l > (this.seenSensitivity.get(session.session_id) ?? 0))
        this.seenSensitivity.set(session.session_id, l);
    }
    if ('result' in outcome) {
      try {
        responseHash = jcsDigest(outcome.result);
      } catch (e) {
        detail.response_hash_error = (e as Error).message;
      }
    } else if ('rpcError' in outcome) {
      errorCode = 'UPSTREAM_RPC_ERROR';
      detail.upstream_error_code = outcome.rpcError.code;
    } else if ('tooLarge' in outcome) {
      errorCode = 'UPSTREAM_RESULT_TOO_LARGE';
      detail.result_cap_bytes = outcome.tooLarge.capBytes;
    } else {
      errorCode = outcome.boundary === 'not_sent' ? 'UPSTREAM_UNAVAILABLE' : 'UPSTREAM_FAILED';
      detail.failure = outcome.failure;
    }

    let entry: AuditEntry;
    try {
      entry = immediate(this.db, () => {
        const e = this.chain.append(this.liveChain(session.session_id), {
          ...base,
          disposition: disp,
          error_code: errorCode,
          response_payload_hash: responseHash,
          latency_us: latency(),
          detail: Object.keys(detail).length ? detail : null,
        });
        // The registry state and the audit disposition are the same word, in one commit.
        if (executionId !== null) this.executions.finish(agentId, executionId, callId, disp, e.entry_hash);
        this.sessions.countCall(session.session_id);
        maybeFail('terminal_commit');
        return e;
      });
    } catch (e) {
      this.log.error(
        { call_id: callId, err: (e as Error).message },
        'terminal audit entry could not be committed',
      );
      const data: Record<string, unknown> = { error_code: 'AUDIT_WRITE_FAILED', call_id: callId };
      if (executionId !== null)
        Object.assign(data, { execution_id: executionId, execution_state: 'in_flight' });
      return { error: { code: -32040, message: 'the outcome could not be recorded', data } };
    }
    const evidence: CallEvidence & { policy_advisory?: Record<string, unknown> } = this.evidence(entry);
    if (advisory) evidence.policy_advisory = advisory;
    if ('result' in outcome) {
      const meta = (typeof outcome.result._meta === 'object' && outcome.result._meta) || {};
      return { result: { ...outcome.result, _meta: { ...meta, [EVIDENCE_META_KEY]: evidence } } };
    }
    if ('rpcError' in outcome) {
      return {
        error: {
          code: outcome.rpcError.code,
          message: outcome.rpcError.message,
          data: {
            error_code: 'UPSTREAM_RPC_ERROR',
            upstream_data: outcome.rpcError.data ?? null,
            call_id: callId,
            evidence,
          },
        },
      };
    }
    if ('tooLarge' in outcome) {
      const tl = new CmcpError(
        'UPSTREAM_RESULT_TOO_LARGE',
        `the upstream result exceeds the ${outcome.tooLarge.capBytes}-byte limit`,
      );
      const data: Record<string, unknown> = {
        error_code: tl.code,
        call_id: callId,
        limit_bytes: outcome.tooLarge.capBytes,
        evidence,
      };
      if (executionId !== null)
        Object.assign(data, {
          execution_id: executionId,
          execution_state: disp,
          terminal_entry_hash: entry.entry_hash,
        });
      return { error: { code: tl.rpc, message: tl.message, data } };
    }
    const err = new CmcpError(
      errorCode as ErrorCode,
      outcome.boundary === 'not_sent'
        ? 'the upstream could not be reached; nothing was sent'
        : 'the upstream did not answer; the outcome is unknown',
    );
    const data: Record<string, unknown> = {
      error_code: err.code,
      call_id: callId,
      disposition: disp,
      evidence,
    };
    if (executionId !== null)
      Object.assign(data, {
        execution_id: executionId,
        execution_state: disp,
        terminal_entry_hash: entry.entry_hash,
      });
    return { error: { code: err.rpc, message: err.message, data } };
  }

  /** Records a refusal as the call's terminal entry and returns its JSON-RPC error. */
  private refuse(
    chainId: string,
    session: SessionRow | null,
    input: EntryInput,
    code: ErrorCode,
    message: string,
    data: Record<string, unknown> = {},
  ): CallResponse {
    const err = new CmcpError(code, message);
    let entry: AuditEntry;
    try {
      // Joins the caller's transaction when there is one (admission refusals).
      entry = immediate(this.db, () => {
        const e = this.chain.append(session ? this.liveChain(chainId) : chainId, {
          ...input,
          disposition: 'refused',
          error_code: code,
        });
        if (session) this.sessions.countCall(session.session_id);
        return e;
      });
    } catch (e) {
      this.log.error({ call_id: input.call_id, err: (e as Error).message }, 'refusal could not be recorded');
      return {
        error: {
          code: -32040,
          message: 'the refusal could not be recorded',
          data: { error_code: 'AUDIT_WRITE_FAILED', call_id: input.call_id },
        },
      };
    }
    return {
      error: {
        code: err.rpc,
        message: err.message,
        data: { error_code: code, call_id: input.call_id, ...data, evidence: this.evidence(entry) },
      },
    };
  }

  /**
   * The chain a call's terminal entry goes to: its session's, unless the session was closed
   * (by the agent or by rotation) while the call ran — its claim already fixed the chain's
   * tip, so the entry goes to the gateway chain instead (it still names the session).
   */
  private liveChain(sessionId: string): string {
    const row = this.db
      .prepare<[string], { status: string }>('SELECT status FROM sessions WHERE session_id = ?')
      .get(sessionId);
    return row?.status === 'open' ? sessionId : GATEWAY_CHAIN_ID;
  }

  private evidence(e: AuditEntry): CallEvidence {
    return {
      call_id: e.call_id as string,
      session_id: e.session_id,
      entry_hash: e.entry_hash,
      sequence_number: e.sequence_number,
      chain_id: e.chain_id,
    };
  }
}
