/**
 * Outbound MCP: the configured upstreams (each one connection, ./upstream.ts), their
 * availability, and the merged tool list under gateway names with the routes back to them.
 */

import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import type { Tracer } from '@opentelemetry/api';
import type { Logger } from 'pino';
import type { UpstreamConfig } from '../config/index.js';
import { CmcpError } from '../errors/index.js';
import { AvailabilityTracker, type Failure, type Unavailable } from './availability.js';
import { UpstreamStartError } from './diagnose.js';
import { authorizationErrorOf, UpstreamAuthorizationRequiredError } from './oauth/errors.js';
import type { CallOutcome, RequestOptions, UpstreamHooks } from './request.js';
import { DEFAULT_MAX_RESULT_BYTES } from './result-cap.js';
import { toolNameFault } from './tool-name.js';
import { type RoutedTool, type ToolDefinition, Upstream } from './upstream.js';

export type { CallOutcome, RequestOptions, UpstreamHooks } from './request.js';
export { type EffectBoundary, type RoutedTool, type ToolDefinition, Upstream } from './upstream.js';

/** The operator's and the caller's view of a failed connect or listing. */
function failureOf(e: unknown): Failure {
  const reason = (e as Error).message;
  const a = authorizationErrorOf(e);
  if (a instanceof UpstreamAuthorizationRequiredError)
    return {
      reason: a.message,
      summary: 'authorization required',
      needsUser: { authorizationUrl: a.authorizationUrl },
    };
  if (a) return { reason: a.message, summary: 'authorization failed', authorizationFailed: true };
  return { reason, summary: e instanceof UpstreamStartError ? e.summary : 'not reachable' };
}

/** Why an upstream's tools were (re-)listed. */
export type ListTrigger = 'first_contact' | 'list_changed' | 'interval';

/** Called after every successful listing of one upstream's tools. */
export type ListObserver = (server: string, tools: ToolDefinition[], trigger: ListTrigger) => void;

/** Thrown at start-up when two upstreams expose the same gateway tool name. */
export class ToolNameClashError extends CmcpError {
  declare readonly code: 'TOOL_NAME_CLASH';
  constructor(message: string) {
    super('TOOL_NAME_CLASH', message);
    this.name = 'ToolNameClashError';
  }
}

/** All upstreams and the routing table from gateway tool names to them. */
export class UpstreamPool {
  private readonly upstreams = new Map<string, Upstream>();
  private routes = new Map<string, RoutedTool>();
  /** The unrecordable tools already warned about (upstream, NUL, name): once each, not at every re-list; at most 1,024. */
  private readonly unrecordableWarned = new Set<string>();
  private observer: ListObserver | null = null;
  private renewed: UpstreamHooks['onRenewed'] = undefined;
  /** Told of every SDK client of a shared connection (src/relay/sessions.ts: its notifications). */
  private sharedClient: ((upstream: string, client: Client) => void) | null = null;
  /** Upstreams not reached at start-up, retried with backoff (docs/spec/refinements.md). */
  readonly availability: AvailabilityTracker;

  /** @param maxResultBytes largest tools/call result read from an upstream, bytes. */
  constructor(
    configs: UpstreamConfig[],
    private readonly log: Logger,
    private readonly maxResultBytes = DEFAULT_MAX_RESULT_BYTES,
    /** CLIENT spans of every request sent upstream (absent: tracing off). */
    private readonly tracer?: Tracer,
  ) {
    for (const c of configs) {
      this.upstreams.set(
        c.name,
        new Upstream(c, log, () => void this.refresh(c.name, 'list_changed'), maxResultBytes, {
          onRenewed: (name, why) => this.renewed?.(name, why),
          onClient: (client) => this.sharedClient?.(c.name, client),
          ...(tracer ? { tracer } : {}),
        }),
      );
    }
    this.availability = new AvailabilityTracker(log, (name) => this.bringIn(name));
  }

  /**
   * Connects every upstream and lists its tools. One that cannot be reached is marked
   * unavailable and retried (src/upstream/availability.ts), unless it is `required`.
   * @throws Error naming a required upstream that could not be reached; ToolNameClashError.
   */
  async start(): Promise<void> {
    for (const u of this.upstreams.values()) {
      try {
        await u.listTools();
      } catch (e) {
        const why = `upstream ${u.cfg.name}: cannot list tools: ${(e as Error).message}`;
        if (u.cfg.required) throw new Error(why);
        await u.close();
        this.availability.markDown(u.cfg.name, failureOf(e));
      }
    }
    this.routes = this.buildRoutes(true);
  }

  /** One retry of an unavailable upstream: true once listed and routed, else why not. */
  private async bringIn(name: string): Promise<true | Failure> {
    const u = this.upstreams.get(name);
    if (!u) return { reason: 'unknown upstream', summary: 'unknown upstream' };
    try {
      await u.listTools();
    } catch (e) {
      await u.close();
      return failureOf(e);
    }
    this.routes = this.buildRoutes(false);
    this.observer?.(name, u.tools, 'first_contact');
    return true;
  }

  /**
   * Why a call to `exposedName` cannot be served because its upstream is unavailable: the
   * upstream whose prefix it carries (or `server`, when the catalog knows it), or null.
   */
  unavailableFor(exposedName: string, server?: string): Unavailable | null {
    if (server !== undefined) {
      this.availability.nudge(server);
      return this.availability.get(server);
    }
    for (const u of this.upstreams.values()) {
      const down = this.availability.get(u.cfg.name);
      if (down && u.prefix && exposedName.startsWith(`${u.prefix}.`)) {
        this.availability.nudge(u.cfg.name);
        return down;
      }
    }
    return null;
  }

  private buildRoutes(strict: boolean): Map<string, RoutedTool> {
    const routes = new Map<string, RoutedTool>();
    for (const u of this.upstreams.values()) {
      for (const t of u.tools) {
        // A name the gateway cannot serve (./tool-name.ts) is neither listed nor routed.
        const unrecordable = toolNameFault(t.name);
        if (unrecordable) {
          const key = `${u.cfg.name}\u0000${t.name}`;
          // Bounded: an upstream listing ever new such names cannot grow the set without limit.
          if (!this.unrecordableWarned.has(key) && this.unrecordableWarned.size < 1024) {
            this.unrecordableWarned.add(key);
            this.log.warn(
              { upstream: u.cfg.name, tool: t.name, reason: unrecordable },
              'upstream tool not exposed',
            );
          }
          continue;
        }
        const exposedName = u.prefix ? `${u.prefix}.${t.name}` : t.name;
        const prev = routes.get(exposedName);
        if (prev) {
          const msg = `tool name clash: ${exposedName} from upstreams ${prev.upstream} and ${u.cfg.name}`;
          if (strict) throw new ToolNameClashError(msg);
          this.log.error({ tool: exposedName }, 'tool name clash after list change; keeping the first');
          continue;
        }
        routes.set(exposedName, { exposedName, upstream: u.cfg.name, toolName: t.name, definition: t });
      }
    }
    return routes;
  }

  /**
   * Sets the observer told about every listing from now on (the catalog check), and reports
   * the tools already listed at start-up to it as `first_contact`.
   */
  observe(observer: ListObserver): void {
    this.observer = observer;
    // An unavailable upstream has its first contact when it comes up (bringIn).
    for (const u of this.upstreams.values())
      if (!this.availability.get(u.cfg.name)) observer(u.cfg.name, u.tools, 'first_contact');
  }

  /** Re-lists one upstream (after `notifications/tools/list_changed`, or periodically). */
  async refresh(name: string, trigger: ListTrigger = 'list_changed'): Promise<void> {
    const u = this.upstreams.get(name);
    if (!u || this.availability.get(name)) return;
    try {
      await u.listTools();
      this.routes = this.buildRoutes(false);
      this.log.info({ upstream: name, tools: u.tools.length, trigger }, 'upstream tool list refreshed');
      this.observer?.(name, u.tools, trigger);
    } catch (e) {
      this.log.warn({ upstream: name, err: (e as Error).message }, 'tool list refresh failed');
    }
  }

  /** Re-lists every upstream (the periodic re-list). */
  async refreshAll(trigger: ListTrigger = 'interval'): Promise<void> {
    await Promise.all([...this.upstreams.keys()].map((n) => this.refresh(n, trigger)));
  }

  /** The gateway name of an upstream's tool (`<prefix>.<tool>` or the bare name). */
  exposedName(server: string, toolName: string): string | undefined {
    const u = this.upstreams.get(server);
    if (!u) return undefined;
    return u.prefix ? `${u.prefix}.${toolName}` : toolName;
  }

  /** Every upstream's last listed tools, as the upstream sent them. */
  toolLists(): { server: string; tools: ToolDefinition[] }[] {
    return [...this.upstreams.values()].map((u) => ({ server: u.cfg.name, tools: u.tools }));
  }

  /** The tools agents see, with gateway names; definitions otherwise as the upstream sent them. */
  listTools(): ToolDefinition[] {
    return [...this.routes.values()].map((r) => ({ ...r.definition, name: r.exposedName }));
  }

  route(exposedName: string): RoutedTool | undefined {
    return this.routes.get(exposedName);
  }

  /**
   * Calls a routed tool, on `via` (a client session's own connection, src/relay/) or the
   * shared one. Never throws: the outcome says how far the request got.
   */
  call(
    route: RoutedTool,
    args: Record<string, unknown> | undefined,
    opts?: RequestOptions & { via?: Upstream },
  ): Promise<CallOutcome> {
    const u = opts?.via ?? this.upstreams.get(route.upstream);
    if (!u) return Promise.resolve({ boundary: 'not_sent', failure: 'unknown upstream' });
    return u.call(route.toolName, args, opts);
  }

  /** Upstream names in configuration order (the order of merged lists). */
  names(): string[] {
    return [...this.upstreams.keys()];
  }

  /** The shared connection to one upstream (stateless requests, listings), or undefined. */
  shared(name: string): Upstream | undefined {
    return this.upstreams.get(name);
  }

  /**
   * A new connection (its own upstream session) to one configured upstream, for one client
   * session (src/relay/sessions.ts); it connects on first use. Undefined for an unknown name.
   */
  openSession(name: string, onListChanged: () => void, hooks: UpstreamHooks): Upstream | undefined {
    const u = this.upstreams.get(name);
    if (!u) return undefined;
    return new Upstream(u.cfg, this.log, onListChanged, this.maxResultBytes, {
      ...hooks,
      ...(this.tracer ? { tracer: this.tracer } : {}),
      onRenewed: (n, why) => {
        hooks.onRenewed?.(n, why);
        this.renewed?.(n, why);
      },
    });
  }

  /**
   * Sets the one hook told of every SDK client of a shared connection, before it connects, and
   * of those already connected (handlers for the notifications the shared connection receives).
   */
  onSharedClient(hook: (upstream: string, client: Client) => void): void {
    this.sharedClient = hook;
    for (const u of this.upstreams.values()) if (u.client) hook(u.cfg.name, u.client);
  }

  /** Sets the one observer told when any connection renewed an expired upstream session. */
  observeRenewals(observer: (upstream: string, failure: string) => void): void {
    this.renewed = observer;
  }

  /**
   * Pings every upstream (readiness): an unavailable one is not pinged, its summary is the reason.
   * @returns per upstream name, null when it answered or why it did not.
   */
  async probe(timeoutMs = 2000): Promise<Record<string, string | null>> {
    const out: Record<string, string | null> = {};
    await Promise.all(
      [...this.upstreams.values()].map(async (u) => {
        const down = this.availability.get(u.cfg.name);
        if (down?.needsUser) out[u.cfg.name] = 'authorization required (not down)';
        else out[u.cfg.name] = down ? `unavailable: ${down.summary}` : await u.ping(timeoutMs);
      }),
    );
    return out;
  }

  async close(): Promise<void> {
    this.availability.close();
    await Promise.all([...this.upstreams.values()].map((u) => u.release()));
  }
}

/**
 * Starts every configured upstream, reads each one's tool list, and closes them again (what
 * `cmcp catalog snapshot` and `cmcp policy init` read).
 * @throws (rejects) what starting an upstream throws, after closing what was started.
 */
export async function listUpstreamToolsOnce(
  upstreams: ConstructorParameters<typeof UpstreamPool>[0],
  log: ConstructorParameters<typeof UpstreamPool>[1],
): Promise<{ server: string; tools: ToolDefinition[] }[]> {
  const pool = new UpstreamPool(upstreams, log);
  try {
    await pool.start();
    return pool.toolLists();
  } finally {
    await pool.close();
  }
}
