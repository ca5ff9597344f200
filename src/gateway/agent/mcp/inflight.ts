/**
 * What the gateway waits for from its clients: the requests in flight (so that a client's
 * `notifications/cancelled` aborts the one it names) and the server-to-client requests sent
 * on SSE streams (so that the client's answer, POSTed separately, reaches the request waiting
 * for it). Both are scoped to the authenticated agent — and to the client session when there
 * is one — so no caller can cancel or answer another's request.
 */
import { randomBytes } from 'node:crypto';
import { CmcpError } from '../../../errors/index.js';

type JsonRpcId = string | number;

/** A server-to-client request waiting for the client's answer. */
interface Pending {
  agentId: string;
  resolve(result: Record<string, unknown>): void;
  reject(e: Error): void;
}

/** `typeof` keeps `1` and `"1"` apart (C-MCP-1). */
function key(agentId: string, clientSessionId: string | undefined, id: JsonRpcId): string {
  return JSON.stringify([agentId, clientSessionId ?? null, typeof id, String(id)]);
}

export class InflightRequests {
  private readonly running = new Map<string, Set<AbortController>>();
  private readonly pending = new Map<string, Pending>();
  /** Unguessable per process: an id the gateway sends can never be one a client made up. */
  private readonly prefix = `cmcp-${randomBytes(6).toString('hex')}-`;
  private counter = 0;

  /**
   * Registers a request in flight; `notifications/cancelled` naming its id aborts `ctl`.
   * @returns the function that unregisters it (call it when the request is answered).
   */
  track(
    agentId: string,
    clientSessionId: string | undefined,
    id: JsonRpcId,
    ctl: AbortController,
  ): () => void {
    const k = key(agentId, clientSessionId, id);
    let set = this.running.get(k);
    if (!set) {
      set = new Set();
      this.running.set(k, set);
    }
    set.add(ctl);
    return () => {
      set.delete(ctl);
      if (set.size === 0 && this.running.get(k) === set) this.running.delete(k);
    };
  }

  /**
   * A client's `notifications/cancelled` (MCP basic/utilities/cancellation): aborts the
   * caller's request with `requestId`. @returns how many requests were aborted.
   */
  cancel(agentId: string, clientSessionId: string | undefined, requestId: unknown, reason?: unknown): number {
    if (typeof requestId !== 'string' && typeof requestId !== 'number') return 0;
    const set = this.running.get(key(agentId, clientSessionId, requestId));
    if (!set) return 0;
    const why = typeof reason === 'string' ? reason.slice(0, 200) : 'cancelled by the client';
    for (const ctl of set) ctl.abort(new CmcpError('REQUEST_CANCELLED', why));
    return set.size;
  }

  /** A fresh JSON-RPC id for a server-to-client request, and the promise of its answer. */
  expect(agentId: string): { id: string; answer: Promise<Record<string, unknown>>; drop(e: Error): void } {
    const id = `${this.prefix}${++this.counter}`;
    let entry!: Pending;
    const answer = new Promise<Record<string, unknown>>((resolve, reject) => {
      entry = { agentId, resolve, reject };
    });
    this.pending.set(id, entry);
    return {
      id,
      answer,
      drop: (e) => {
        if (this.pending.get(id) === entry) {
          this.pending.delete(id);
          entry.reject(e);
        }
      },
    };
  }

  /**
   * A JSON-RPC response POSTed by a client: settles the server-to-client request it answers.
   * @returns false when no request of this agent waits for this id (the response is dropped).
   */
  settle(agentId: string, message: Record<string, unknown>): boolean {
    const id = message.id;
    if (typeof id !== 'string') return false;
    const p = this.pending.get(id);
    if (!p || p.agentId !== agentId) return false;
    this.pending.delete(id);
    const error = message.error as { code?: unknown; message?: unknown; data?: unknown } | undefined;
    if (error && typeof error === 'object') {
      const code = typeof error.code === 'number' ? error.code : -32603;
      const text = typeof error.message === 'string' ? error.message : 'client error';
      p.reject(new ClientRpcError(code, text, error.data));
    } else {
      const result = message.result;
      p.resolve(
        result && typeof result === 'object' && !Array.isArray(result)
          ? (result as Record<string, unknown>)
          : {},
      );
    }
    return true;
  }
}

/** The client answered a server-to-client request with a JSON-RPC error (its code and message kept). */
export class ClientRpcError extends CmcpError {
  declare readonly code: 'CLIENT_REQUEST_FAILED';
  constructor(
    readonly rpcCode: number,
    message: string,
    readonly rpcData?: unknown,
  ) {
    super('CLIENT_REQUEST_FAILED', message, { rpc_code: rpcCode });
    this.name = 'ClientRpcError';
  }
}
