/**
 * Outbound MCP: one official-SDK client per configured upstream (stdio child or Streamable
 * HTTP), the merged tool list under gateway names, and calls that report their effect
 * boundary so the caller can record `completed`, `not_attempted` or `outcome_unknown`.
 */

import type { ChildProcess } from 'node:child_process';
import { CmcpError } from '@cmcp/verify/errors/index';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { McpError, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { UpstreamConfig } from '../config/index.js';
import { type AnswerWatch, watchAnswers } from './answers.js';
import { AvailabilityTracker, type Failure, type Unavailable } from './availability.js';
import { describeUpstreamFailure, failureSummary, UpstreamStartError, watchStdioStart } from './diagnose.js';
import {
  type CallOutcome,
  causeCode,
  classifyFailure,
  listAllPages,
  type RequestOptions,
  sessionExpired,
  type UpstreamHooks,
} from './request.js';
import {
  type CallContext,
  callContext,
  cappedFetch,
  DEFAULT_MAX_RESULT_BYTES,
  ResultTooLargeError,
} from './result-cap.js';

/** A tool definition exactly as the upstream sent it (unknown members kept). */
export type ToolDefinition = { name: string } & Record<string, unknown>;

/** A tool as the gateway exposes it. */
export interface RoutedTool {
  /** Name agents use: `<prefix>.<tool>` or the bare tool name when the prefix is empty. */
  exposedName: string;
  upstream: string;
  /** The upstream's own tool name. */
  toolName: string;
  definition: ToolDefinition;
}

/**
 * Where a call stopped relative to the upstream (docs/spec/execution.md):
 * `not_sent` — no request byte left the gateway; `maybe_sent` — it may have been received
 * but no answer came; `answered` — the upstream answered (result or JSON-RPC error).
 */
export type EffectBoundary = 'not_sent' | 'maybe_sent' | 'answered';

export type { CallOutcome, RequestOptions, UpstreamHooks } from './request.js';

const looseTools = z.looseObject({ tools: z.array(z.looseObject({ name: z.string() })) });
const looseResult = z.looseObject({});

/** One connection (one MCP session) to one upstream. */
export class Upstream {
  client: Client | null = null;
  tools: ToolDefinition[] = [];
  private connecting: Promise<Client> | null = null;
  private answers: AnswerWatch | null = null;

  /** Calls in flight on this upstream, each with what happened to its response. */
  private readonly inflight = new Set<CallContext>();

  constructor(
    readonly cfg: UpstreamConfig,
    private readonly log: Logger,
    private readonly onListChanged: () => void,
    /** Largest result read from this upstream, bytes (C-MCP-4). */
    private readonly maxResultBytes: number,
    private readonly hooks: UpstreamHooks = {},
  ) {}

  /**
   * A response overran the cap. Over HTTP the response belongs to the call whose request
   * fetched it (`ctx`). Over stdio all calls share one child: with one call in flight it is
   * that call's response; with several, the killed child leaves each without an answer, so
   * none of them is attributed the oversized result (each ends outcome_unknown).
   */
  private overflowed(ctx: CallContext | undefined): void {
    if (ctx) {
      ctx.overflowed = true;
      ctx.stop?.abort(new ResultTooLargeError(`response exceeds ${this.maxResultBytes} bytes`));
    } else if (this.inflight.size === 1) for (const c of this.inflight) c.overflowed = true;
    else for (const c of this.inflight) c.cutOff = true;
    this.log.warn(
      { upstream: this.cfg.name, cap: this.maxResultBytes },
      'upstream response over the result cap; read stopped',
    );
  }

  /** `<name>` for stdio, `<name> (url)` for HTTP: recorded as the audit `server_identity`. */
  get identity(): string {
    return this.cfg.name;
  }

  get prefix(): string {
    return this.cfg.prefix ?? this.cfg.name;
  }

  private transport(): Transport {
    if (this.cfg.transport === 'stdio') {
      const env: Record<string, string> = {};
      // The SDK's default environment (PATH, HOME, …) plus the configured variables only.
      for (const k of ['PATH', 'HOME', 'USER', 'LANG', 'TERM', 'SHELL', 'TMPDIR', 'npm_config_cache'])
        if (process.env[k] !== undefined) env[k] = process.env[k] as string;
      return new StdioClientTransport({
        command: this.cfg.command,
        args: this.cfg.args,
        env: { ...env, ...this.cfg.env },
        cwd: this.cfg.cwd,
        stderr: 'pipe',
      });
    }
    return new StreamableHTTPClientTransport(new URL(this.cfg.url), {
      fetch: cappedFetch(this.maxResultBytes, (ctx) => this.overflowed(ctx)),
    });
  }

  /** Connects (once at a time) and returns a live client. @throws on connect failure. */
  connect(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    if (this.connecting) return this.connecting;
    this.connecting = (async () => {
      const client = new Client(
        { name: 'cmcp-gateway', version: '0.1.0' },
        { capabilities: this.hooks.capabilities ?? {} },
      );
      const transport = this.transport();
      this.answers = watchAnswers(transport);
      client.setNotificationHandler(ToolListChangedNotificationSchema, () => this.onListChanged());
      this.hooks.onClient?.(client);
      client.onclose = () => {
        if (this.client === client) this.client = null;
        this.log.warn({ upstream: this.cfg.name }, 'upstream connection closed');
      };
      const watch = watchStdioStart(transport);
      try {
        await client.connect(transport);
      } catch (e) {
        await client.close().catch(() => undefined);
        // Issue 16 item 4: say what happened (stderr tail, exit, URL and cause).
        const exit = watch.exit();
        throw new UpstreamStartError(
          describeUpstreamFailure(this.cfg, e, watch.stderr(), exit),
          failureSummary(this.cfg, e, exit),
          { cause: e },
        );
      }
      if (transport instanceof StdioClientTransport) {
        // Drain the child's stderr so it can never block; do not log it (it may carry arguments).
        transport.stderr?.on('data', () => undefined);
        this.capStdio(transport);
      }
      this.client = client;
      return client;
    })().finally(() => {
      this.connecting = null;
    });
    return this.connecting;
  }

  /**
   * Stops reading a stdio upstream at the result cap: one JSON-RPC message is one line, so a
   * line longer than the cap kills the child (the next call reconnects). The SDK does not
   * expose the child's stdout, hence the guarded look at its process handle; without it, the
   * size check after parsing in {@link call} still refuses the result.
   */
  private capStdio(transport: StdioClientTransport): void {
    const child = (transport as unknown as { _process?: ChildProcess })._process;
    if (!child?.stdout) {
      this.log.warn(
        { upstream: this.cfg.name },
        'cannot watch stdio output size; relying on the size check after parsing',
      );
      return;
    }
    let lineBytes = 0;
    child.stdout.on('data', (chunk: Buffer) => {
      const nl = chunk.lastIndexOf(0x0a);
      lineBytes = nl >= 0 ? chunk.length - nl - 1 : lineBytes + chunk.length;
      if (lineBytes > this.maxResultBytes) {
        lineBytes = 0;
        this.overflowed(undefined);
        child.kill('SIGKILL');
      }
    });
  }

  /**
   * Every page of the upstream's tools (no page limit short of {@link MAX_LIST_PAGES}, which
   * throws rather than cut the list). @throws on connect or listing failure.
   */
  async listTools(): Promise<ToolDefinition[]> {
    await this.connect(); // a failed start throws UpstreamStartError (diagnose.ts)
    const out = await listAllPages(this, 'tools/list', 'tools');
    this.tools = looseTools.parse({ tools: out }).tools as ToolDefinition[];
    return this.tools;
  }

  call(
    toolName: string,
    args: Record<string, unknown> | undefined,
    opts?: RequestOptions,
  ): Promise<CallOutcome> {
    const params: Record<string, unknown> = { name: toolName };
    if (args !== undefined) params.arguments = args;
    return this.request('tools/call', params, opts);
  }

  /**
   * Sends one request upstream and says how far it got. An upstream that no longer knows its
   * session (HTTP 404) is initialised again once and the request sent again (nothing was
   * processed), and `hooks.onRenewed` is told. Never throws.
   */
  async request(
    method: string,
    params: Record<string, unknown>,
    opts: RequestOptions = {},
  ): Promise<CallOutcome> {
    const first = await this.attempt(method, params, opts);
    if (!('expired' in first)) return first;
    this.log.warn({ upstream: this.cfg.name, method }, 'upstream session expired; initialising a new one');
    await this.close();
    this.hooks.onRenewed?.(this.cfg.name, 'session expired (HTTP 404)');
    const second = await this.attempt(method, params, opts);
    return 'expired' in second ? { boundary: 'not_sent', failure: 'upstream session expired twice' } : second;
  }

  private async attempt(
    method: string,
    params: Record<string, unknown>,
    opts: RequestOptions,
  ): Promise<CallOutcome | { expired: true }> {
    let client: Client;
    try {
      client = await this.connect();
    } catch (e) {
      return { boundary: 'not_sent', failure: `connect failed: ${causeCode(e) ?? (e as Error).message}` };
    }
    const ctx: CallContext = { overflowed: false, cutOff: false, stop: new AbortController() };
    if (opts.onprogress) ctx.onprogress = opts.onprogress;
    this.inflight.add(ctx);
    const answers = this.answers;
    try {
      // The call's context follows its request into the capped fetch (AsyncLocalStorage).
      const result = await callContext.run(ctx, () =>
        client.request({ method, params }, looseResult, {
          timeout: this.cfg.timeout_ms,
          maxTotalTimeout: this.cfg.timeout_ms,
          // The caller's abort, and the result cap's (an SSE response cut at the cap).
          signal:
            opts.signal && ctx.stop ? AbortSignal.any([opts.signal, ctx.stop.signal]) : ctx.stop?.signal,
          // The SDK only sends a progress token (its request id) when given an onprogress; the
          // progress itself reaches ctx.onprogress through answers.ts, in arrival order.
          ...(opts.onprogress ? { onprogress: () => undefined, resetTimeoutOnProgress: true } : {}),
        }),
      );
      if (ctx.overflowed || Buffer.byteLength(JSON.stringify(result)) > this.maxResultBytes)
        return { boundary: 'answered', tooLarge: { capBytes: this.maxResultBytes } };
      return { boundary: 'answered', result };
    } catch (e) {
      if (sessionExpired(e) && !ctx.answered) return { expired: true };
      return classifyFailure(e, ctx, this.maxResultBytes);
    } finally {
      this.inflight.delete(ctx);
      answers?.forget(ctx);
    }
  }

  /** What the upstream said it offers in `initialize` (connects first). @throws on connect failure. */
  async capabilities(): Promise<Record<string, unknown>> {
    const client = await this.connect();
    return (client.getServerCapabilities() ?? {}) as Record<string, unknown>;
  }

  /** A JSON-RPC `ping` round trip (readiness). @returns null when answered, else why not. */
  async ping(timeoutMs: number): Promise<string | null> {
    try {
      const client = await this.connect();
      await client.ping({ timeout: timeoutMs, maxTotalTimeout: timeoutMs });
      return null;
    } catch (e) {
      if (e instanceof UpstreamStartError) return e.summary;
      return causeCode(e) ?? (e instanceof McpError ? `MCP error ${e.code}` : 'no answer');
    }
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = null;
    await c?.close().catch(() => undefined);
  }
}

/** The operator's and the caller's view of a failed connect or listing. */
function failureOf(e: unknown): Failure {
  const reason = (e as Error).message;
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
  private observer: ListObserver | null = null;
  private renewed: UpstreamHooks['onRenewed'] = undefined;
  /** Upstreams not reached at start-up, retried with backoff (docs/spec/refinements.md). */
  readonly availability: AvailabilityTracker;

  /** @param maxResultBytes largest tools/call result read from an upstream, bytes. */
  constructor(
    configs: UpstreamConfig[],
    private readonly log: Logger,
    private readonly maxResultBytes = DEFAULT_MAX_RESULT_BYTES,
  ) {
    for (const c of configs) {
      this.upstreams.set(
        c.name,
        new Upstream(c, log, () => void this.refresh(c.name, 'list_changed'), maxResultBytes, {
          onRenewed: (name, why) => this.renewed?.(name, why),
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
    if (server !== undefined) return this.availability.get(server);
    for (const u of this.upstreams.values()) {
      const down = this.availability.get(u.cfg.name);
      if (down && u.prefix && exposedName.startsWith(`${u.prefix}.`)) return down;
    }
    return null;
  }

  private buildRoutes(strict: boolean): Map<string, RoutedTool> {
    const routes = new Map<string, RoutedTool>();
    for (const u of this.upstreams.values()) {
      for (const t of u.tools) {
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
      onRenewed: (n, why) => {
        hooks.onRenewed?.(n, why);
        this.renewed?.(n, why);
      },
    });
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
        out[u.cfg.name] = down ? `unavailable: ${down.summary}` : await u.ping(timeoutMs);
      }),
    );
    return out;
  }

  async close(): Promise<void> {
    this.availability.close();
    await Promise.all([...this.upstreams.values()].map((u) => u.close()));
  }
}
