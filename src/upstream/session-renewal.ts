/**
 * Renewal of an upstream session the upstream expired (Streamable HTTP: HTTP 404 for a request
 * carrying an `Mcp-Session-Id` it no longer knows; MCP 2025-11-25 "Transports" §Session
 * Management). docs/spec/mcp.md: such an upstream is re-initialised once, transparently, and
 * that is recorded.
 *
 * Every request path (tools/call, lists, relayed methods, the readiness ping) that meets the
 * 404 hands the client it used here. The first one for a client detaches it (the next request
 * connects and initialises a new session) and records the renewal; later ones for the same
 * client only retry. The old client is not closed under calls still in flight on it: each of
 * those ends by what the upstream said to it (an answer, its own 404 and a retry, or a broken
 * stream), and the old client is closed when the last of them ends.
 */

/** What a connection is, to the renewal: something to close. */
export interface Closable {
  close(): Promise<void>;
}

/** The connection holder the renewal acts on (src/upstream/upstream.ts). */
export interface RenewalTarget<C> {
  /** The client requests are sent on now, or null when none is connected. */
  current(): C | null;
  /** Stops handing out `client`: the next request connects anew. */
  detach(client: C): void;
  /** Told once per expired session, with the method whose request met the 404 (log and record). */
  renewed(method: string): void;
}

/** Counts calls per client and retires an expired session's client once. See the module comment. */
export class SessionRenewal<C extends Closable> {
  private readonly users = new Map<C, number>();
  private readonly retired = new WeakSet<C>();

  constructor(private readonly target: RenewalTarget<C>) {}

  /** A call begins on `client`. */
  use(client: C): void {
    this.users.set(client, (this.users.get(client) ?? 0) + 1);
  }

  /** A call on `client` ended; the last one on a retired client closes it. */
  done(client: C): void {
    const left = (this.users.get(client) ?? 1) - 1;
    if (left > 0) {
      this.users.set(client, left);
      return;
    }
    this.users.delete(client);
    if (this.retired.has(client)) void client.close().catch(() => undefined);
  }

  /**
   * A request on `client` met the upstream's 404 for its session. The first report retires the
   * client and records the renewal (when it is still the current one, or none is: a newer client
   * already replaced it otherwise); later reports for it do nothing.
   */
  expired(client: C, method: string): void {
    if (this.retired.has(client)) return;
    this.retired.add(client);
    const now = this.target.current();
    if (now === client || now === null) {
      this.target.detach(client);
      this.target.renewed(method);
    }
    if (!this.users.has(client)) void client.close().catch(() => undefined);
  }
}
