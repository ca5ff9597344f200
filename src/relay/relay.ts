/**
 * The relayed MCP methods (docs/spec/mcp.md#relayed-methods), composed: federation and cursor,
 * the client sessions' upstream connections, policy and evidence. `methods` is the handler
 * map the MCP layer dispatches to (src/gateway/agent/mcp/endpoint.ts `McpControls.methods`); `capabilities`
 * is what `initialize` and `server/discover` advertise. What the handlers work with is
 * declared in ./parts.ts.
 */
import { mergedCapabilities } from './capabilities.js';
import type { ClientSessionEvents, MethodHandler } from './channel.js';
import { CursorCodec } from './cursor.js';
import { RelayRecorder } from './evidence.js';
import { Federation } from './federation.js';
import { relayHandlers } from './methods.js';
import { NotificationBudget } from './notification-budget.js';
import { DEFAULT_PAGE_SIZE, type RelayDeps, type RelayParts } from './parts.js';
import { serverRequestRelay } from './server-requests.js';
import { RelaySessions } from './sessions.js';
import { TaskRoutes } from './task-routes.js';

export { DEFAULT_PAGE_SIZE, type RelayDeps } from './parts.js';

/** The relay: handlers, capabilities and the client sessions' upstream connections. */
export class Relay implements RelayParts {
  readonly sessions: RelaySessions;
  readonly federation: Federation;
  readonly recorder: RelayRecorder;
  readonly cursors = new CursorCodec();
  /** Task id → the upstream that created it (src/relay/task-routes.ts). */
  readonly tasks = new TaskRoutes();
  readonly methods: ReadonlyMap<string, MethodHandler>;

  constructor(readonly deps: RelayDeps) {
    this.federation = new Federation(deps.pool, deps.log);
    this.recorder = new RelayRecorder(deps.entries, deps.log, deps.onRefusal);
    this.sessions = new RelaySessions(
      deps.pool,
      deps.log,
      serverRequestRelay(deps, deps.sessions, this.recorder),
      new NotificationBudget(deps.notificationLimits),
      deps.onNotificationDropped,
    );
    this.methods = relayHandlers(this, deps.pageSize ?? DEFAULT_PAGE_SIZE);
  }

  /** Connects the HTTP edge's client sessions (standalone streams, end of session). */
  attach(events: ClientSessionEvents): void {
    this.sessions.attach(events);
  }

  /** What the upstreams really offer, merged (what none offers is not advertised). */
  capabilities(): Promise<Record<string, unknown>> {
    return mergedCapabilities(this.deps.pool);
  }

  close(): Promise<void> {
    return this.sessions.close();
  }
}
