/**
 * Admission gate and in-flight count of the HTTP edge, for a graceful shutdown
 * (docs/spec/call-path.md#shutdown): once stopped, every new request except the health probes
 * is refused with GATEWAY_SHUTTING_DOWN (503; a JSON-RPC error on /mcp), and the shutdown waits
 * for the requests already admitted, up to the drain time.
 */
import type { AuditEntry } from '@cmcp/verify/formats';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { evidenceOf } from '../../call/respond.js';
import type { RefusalSink } from '../edge/refusals.js';
import { isJsonRpc, jsonRpcError, readableId, sendError, sendRpcError } from '../edge/replies.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The call_id a `tools/call` of this /mcp request is recorded under (routes/mcp-routes.ts). */
    callId?: string;
    /**
     * Set by a /mcp request answering on an SSE stream (agent/mcp/plugin.ts): ends the
     * stream with this JSON-RPC body. @returns false when the stream cannot carry it.
     */
    finishStream?: (body: Record<string, unknown>) => boolean;
  }
}

/** How long an interrupted request's answer may take to leave, ms (the process exits next). */
const ANSWER_FLUSH_MS = 1000;

/** Routes still answered while draining: a load balancer must see the gateway go unready. */
const PROBES = new Set(['/healthz', '/readyz']);

/** The error data of a CALL_INTERRUPTED answer: the disposition, and the entry that recorded it. */
function interruptedData(e: AuditEntry | null): Record<string, unknown> {
  if (!e) return { disposition: 'outcome_unknown' };
  const execution = e.execution_id
    ? { execution_id: e.execution_id, execution_state: 'outcome_unknown', terminal_entry_hash: e.entry_hash }
    : {};
  return { call_id: e.call_id, disposition: 'outcome_unknown', ...execution, evidence: evidenceOf(e) };
}

export class Drain {
  private admitting = true;
  private inFlight = 0;
  private waiters: (() => void)[] = [];
  /** Admitted requests not yet answered, with their replies. */
  private readonly admitted = new Map<FastifyRequest, FastifyReply>();

  /** Requests admitted and not yet answered (or aborted). */
  get pending(): number {
    return this.inFlight;
  }

  /** True until {@link stop}. */
  get open(): boolean {
    return this.admitting;
  }

  /**
   * Adds the gate to `app` (before its routes are registered).
   * @param recordRefusal where a request refused while draining is recorded (aggregated
   *   `request_refused`, no agent: the gate runs before authentication; detail `route` is the
   *   route pattern, never the URL).
   */
  attach(app: FastifyInstance, recordRefusal: RefusalSink = () => undefined): void {
    app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
      if (!this.admitting && !PROBES.has(req.url.split('?')[0] ?? '')) {
        const message = 'the gateway is shutting down and admits no new request';
        recordRefusal(null, 'GATEWAY_SHUTTING_DOWN', {
          route: `${req.method} ${req.routeOptions.url ?? 'unknown'}`,
        });
        reply.header('connection', 'close');
        return isJsonRpc(req)
          ? sendRpcError(reply, 'GATEWAY_SHUTTING_DOWN', message)
          : sendError(reply, 'GATEWAY_SHUTTING_DOWN', message);
      }
      this.inFlight++;
      this.admitted.set(req, reply);
      // 'close' fires once whether the response finished or the client went away.
      reply.raw.once('close', () => {
        this.admitted.delete(req);
        this.done();
      });
    });
  }

  /** Stops admitting: from now on new requests are refused. */
  stop(): void {
    this.admitting = false;
  }

  /**
   * Resolves true once no admitted request is pending, or false after `timeoutMs`
   * milliseconds with some still pending.
   */
  idle(timeoutMs: number): Promise<boolean> {
    if (this.inFlight === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== wake);
        resolve(false);
      }, timeoutMs);
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.waiters.push(wake);
    });
  }

  /**
   * Answers every request still pending after the drain time instead of dropping its connection
   * (docs/spec/call-path.md#shutdown): a `tools/call` with CALL_INTERRUPTED (its attempt was
   * recorded outcome_unknown by the shutdown's recovery), any other JSON-RPC request and every
   * REST request with GATEWAY_SHUTTING_DOWN; on its SSE stream when it has one. Resolves once
   * the answers are written (at most {@link ANSWER_FLUSH_MS}).
   * @param interrupted the entry recovery wrote for a call_id, or null: a CALL_INTERRUPTED
   *   answer carries it in `data.evidence` as every tools/call answer does (docs/spec/mcp.md#evidence-in-results).
   * @returns how many requests were answered.
   */
  async answerPending(interrupted: (callId: string) => AuditEntry | null = () => null): Promise<number> {
    const sent: Promise<unknown>[] = [];
    for (const [req, reply] of this.admitted) {
      if (reply.sent && reply.raw.writableEnded) continue;
      const body = req.body as { method?: unknown } | null;
      const rpc = isJsonRpc(req);
      const call = rpc && body?.method === 'tools/call';
      const code = call ? 'CALL_INTERRUPTED' : 'GATEWAY_SHUTTING_DOWN';
      const message = call
        ? 'the gateway stopped before the call ended: its outcome is unknown (recorded outcome_unknown)'
        : 'the gateway stopped before the request ended';
      const answer = jsonRpcError(
        readableId(req.body),
        code,
        message,
        call ? interruptedData(req.callId ? interrupted(req.callId) : null) : {},
      );
      // On its SSE stream once that is open; else as a plain JSON (or REST) answer.
      let answered = rpc && req.finishStream?.(answer) === true;
      if (!answered && !reply.sent && !reply.raw.headersSent) {
        reply.header('connection', 'close');
        if (rpc) reply.code(200).type('application/json').send(answer);
        else sendError(reply, 'GATEWAY_SHUTTING_DOWN', message);
        answered = true;
      }
      if (answered)
        sent.push(
          new Promise((resolve) => {
            reply.raw.once('close', resolve);
            setTimeout(resolve, ANSWER_FLUSH_MS).unref();
          }),
        );
    }
    await Promise.all(sent);
    return sent.length;
  }

  private done(): void {
    this.inFlight--;
    if (this.inFlight > 0) return;
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }
}
