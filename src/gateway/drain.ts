/**
 * Admission gate and in-flight count of the HTTP edge, for a graceful shutdown
 * (docs/spec/call-path.md#shutdown): once stopped, every new request except the health probes
 * is refused with GATEWAY_SHUTTING_DOWN (503; a JSON-RPC error on /mcp), and the shutdown waits
 * for the requests already admitted, up to the drain time.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { isJsonRpc, sendError, sendRpcError } from './replies.js';

/** Routes still answered while draining: a load balancer must see the gateway go unready. */
const PROBES = new Set(['/healthz', '/readyz']);

export class Drain {
  private admitting = true;
  private inFlight = 0;
  private waiters: (() => void)[] = [];

  /** Requests admitted and not yet answered (or aborted). */
  get pending(): number {
    return this.inFlight;
  }

  /** True until {@link stop}. */
  get open(): boolean {
    return this.admitting;
  }

  /** Adds the gate to `app` (before its routes are registered). */
  attach(app: FastifyInstance): void {
    app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
      if (!this.admitting && !PROBES.has(req.url.split('?')[0] ?? '')) {
        const message = 'the gateway is shutting down and admits no new request';
        reply.header('connection', 'close');
        return isJsonRpc(req)
          ? sendRpcError(reply, 'GATEWAY_SHUTTING_DOWN', message)
          : sendError(reply, 'GATEWAY_SHUTTING_DOWN', message);
      }
      this.inFlight++;
      // 'close' fires once whether the response finished or the client went away.
      reply.raw.once('close', () => this.done());
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

  private done(): void {
    this.inFlight--;
    if (this.inFlight > 0) return;
    const ws = this.waiters;
    this.waiters = [];
    for (const w of ws) w();
  }
}
