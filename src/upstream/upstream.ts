/**
 * One connection (one MCP session) to one upstream through the official SDK client: stdio child
 * (the SDK's transport) or Streamable HTTP (the gateway's own, ./http-transport.ts), with the
 * result-size cap, credentials, session renewal, and calls that report their effect boundary
 * (`not_sent`, `maybe_sent`, `answered`) so that the caller can record `completed`,
 * `not_attempted` or `outcome_unknown`. The pool of them is ./pool.ts.
 */

import type { ChildProcess } from 'node:child_process';
import { CanonicalJsonError, canonicalJson } from '@cmcp/verify/formats';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { McpError, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { Logger } from 'pino';
import { z } from 'zod';
import type { UpstreamConfig } from '../config/index.js';
import { envValues } from '../config/upstream-credentials.js';
import { CmcpError } from '../errors/index.js';
import { clientSpan, detached } from '../tracing/mcp-spans.js';
import { type AnswerWatch, watchAnswers } from './answers.js';
import { type UpstreamCredentials, upstreamCredentials } from './credentials.js';
import { describeUpstreamFailure, failureSummary, UpstreamStartError, watchStdioStart } from './diagnose.js';
import { UpstreamHttpTransport } from './http-transport.js';
import { redactTransport } from './redact.js';
import {
  authorizationOutcome,
  type CallOutcome,
  causeCode,
  classifyFailure,
  listAllPages,
  type RequestOptions,
  sessionExpired,
  type UpstreamHooks,
} from './request.js';
import { type CallContext, callContext, ResultTooLargeError } from './result-cap.js';
import { SessionRenewal } from './session-renewal.js';

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

  /** Replaces an expired session's client once, retiring the old one when its calls end. */
  private readonly renewal = new SessionRenewal({
    current: () => this.client,
    detach: (client) => {
      if (this.client === client) this.client = null;
    },
    renewed: (method) => {
      this.log.warn({ upstream: this.cfg.name, method }, 'upstream session expired; initialising a new one');
      this.hooks.onRenewed?.(this.cfg.name, 'session expired (HTTP 404)');
    },
  });

  constructor(
    readonly cfg: UpstreamConfig,
    private readonly log: Logger,
    private readonly onListChanged: () => void,
    /** Largest result read from this upstream, bytes (C-MCP-4). */
    private readonly maxResultBytes: number,
    private readonly hooks: UpstreamHooks = {},
    /** Headers and TLS of an HTTP upstream, resolved at start-up (credentials.ts). */
    private readonly credentials: UpstreamCredentials = upstreamCredentials(cfg),
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
        env: { ...env, ...envValues(this.cfg.env) },
        cwd: this.cfg.cwd,
        stderr: 'pipe',
      });
    }
    const { headers, dispatcher, authorizer } = this.credentials;
    return new UpstreamHttpTransport(new URL(this.cfg.url), {
      ...(headers ? { headers } : {}),
      ...(dispatcher ? { dispatcher } : {}),
      ...(authorizer ? { authorizer } : {}),
      maxResultBytes: this.maxResultBytes,
      onOverflow: (ctx) => this.overflowed(ctx),
    });
  }

  /** Connects (once at a time) and returns a live client. @throws on connect failure. */
  connect(): Promise<Client> {
    if (this.client) return Promise.resolve(this.client);
    if (this.connecting) return this.connecting;
    // The connection outlives the request that opens it: its streams, timers and renewals
    // carry no request's trace context.
    this.connecting = detached(async () => {
      const client = new Client(
        { name: 'cmcp-gateway', version: '0.1.0' },
        { capabilities: this.hooks.capabilities ?? {} },
      );
      const transport = this.transport();
      this.answers = watchAnswers(transport);
      // Outermost: no configured secret in any message or error reaches the SDK or the relay.
      redactTransport(transport);
      // A list change can come on a call's own response stream (HTTP): the re-list it starts
      // is the gateway's own work, not part of that call's trace.
      client.setNotificationHandler(
        ToolListChangedNotificationSchema,
        detached(() => this.onListChanged()),
      );
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
        // Say what happened (stderr tail, exit, URL and cause).
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
        this.watchExit(transport, client);
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
   * A stdio child that exits fails its in-flight calls at once. The SDK
   * closes the transport only when the child's pipes close, which a grandchild holding them
   * open can delay forever; the process's own `exit` is what says no answer will come.
   */
  private watchExit(transport: StdioClientTransport, client: Client): void {
    const child = (transport as unknown as { _process?: ChildProcess })._process;
    child?.once('exit', (code, signal) => {
      const reason = `upstream process exited (${signal ?? `code ${code}`})`;
      for (const c of this.inflight) c.fail?.(reason);
      if (this.client === client) this.client = null;
      void client.close().catch(() => undefined);
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
   * session (HTTP 404: it processed nothing) is initialised again once and the request sent
   * again on the new session; concurrent requests that met the same 404 share that one
   * renewal (./session-renewal.ts), which `hooks.onRenewed` is told of once. Never throws.
   */
  async request(
    method: string,
    params: Record<string, unknown>,
    opts: RequestOptions = {},
  ): Promise<CallOutcome> {
    const tracer = this.hooks.tracer;
    if (!tracer) return this.requestOnce(method, params, opts);
    const transport = this.cfg.transport === 'stdio' ? 'pipe' : 'tcp';
    return clientSpan(
      tracer,
      { method, params, upstream: this.cfg.name, transport },
      () => this.requestOnce(method, params, opts),
      outcomeFailure,
    );
  }

  private async requestOnce(
    method: string,
    params: Record<string, unknown>,
    opts: RequestOptions,
  ): Promise<CallOutcome> {
    const first = await this.attempt(method, params, opts);
    if (!('expired' in first)) return first;
    this.renewal.expired(first.expired, method);
    const second = await this.attempt(method, params, opts);
    return 'expired' in second ? { boundary: 'not_sent', failure: 'upstream session expired twice' } : second;
  }

  private async attempt(
    method: string,
    params: Record<string, unknown>,
    opts: RequestOptions,
  ): Promise<CallOutcome | { expired: Client }> {
    let client: Client;
    try {
      client = await this.connect();
    } catch (e) {
      return (
        authorizationOutcome(e) ?? {
          boundary: 'not_sent',
          failure: `connect failed: ${causeCode(e) ?? (e as Error).message}`,
        }
      );
    }
    // One controller stops the request for every reason (AbortSignal.any costs ~10 µs of CPU a
    // call): the transport dying under the call (stdio exit, HTTP body broken off), the result
    // cap (an SSE response cut at the cap), and the caller's own abort.
    const halt = new AbortController();
    let died: UpstreamDiedError | null = null;
    const ctx: CallContext = {
      overflowed: false,
      cutOff: false,
      fail: (reason) => {
        died ??= new UpstreamDiedError(reason);
        halt.abort(died);
      },
      stop: halt,
    };
    const callerSignal = opts.signal;
    const onCallerAbort = () => halt.abort(callerSignal?.reason);
    if (callerSignal?.aborted) onCallerAbort();
    else callerSignal?.addEventListener('abort', onCallerAbort, { once: true });
    if (opts.onprogress) ctx.onprogress = opts.onprogress;
    this.inflight.add(ctx);
    this.renewal.use(client);
    const answers = this.answers;
    try {
      // The call's context follows its request into the transport's send (AsyncLocalStorage).
      const result = await callContext.run(ctx, () =>
        client.request({ method, params }, looseResult, {
          timeout: this.cfg.timeout_ms,
          maxTotalTimeout: this.cfg.timeout_ms,
          signal: halt.signal,
          // The SDK only sends a progress token (its request id) when given an onprogress; the
          // progress itself reaches ctx.onprogress through answers.ts, in arrival order, and
          // never the SDK, so it does not restart the timeout: timeout_ms bounds the whole call.
          ...(opts.onprogress ? { onprogress: () => undefined } : {}),
        }),
      );
      if (ctx.overflowed) return { boundary: 'answered', tooLarge: { capBytes: this.maxResultBytes } };
      // The JCS text has the length of JSON.stringify's (the same strings and numbers, members
      // reordered): one serialisation serves the cap here and the response hash later.
      const resultJcs = jcsOrNull(result);
      if (Buffer.byteLength(resultJcs ?? JSON.stringify(result)) > this.maxResultBytes)
        return { boundary: 'answered', tooLarge: { capBytes: this.maxResultBytes } };
      return resultJcs === null
        ? { boundary: 'answered', result }
        : { boundary: 'answered', result, resultJcs };
    } catch (e) {
      if (sessionExpired(e) && !ctx.answered) return { expired: client };
      const diedUnder = died as UpstreamDiedError | null;
      if (!ctx.overflowed && !ctx.cutOff && diedUnder)
        return { boundary: 'maybe_sent', failure: diedUnder.message };
      // The caller cancelled: the SDK rejects with McpError(RequestTimeout, reason), which would
      // read as a timeout (src/call/forward.ts records REQUEST_CANCELLED for this failure).
      if (callerSignal?.aborted && !ctx.answered && !ctx.overflowed)
        return { boundary: 'maybe_sent', failure: 'REQUEST_CANCELLED' };
      return classifyFailure(e, ctx, this.maxResultBytes);
    } finally {
      callerSignal?.removeEventListener('abort', onCallerAbort);
      this.inflight.delete(ctx);
      this.renewal.done(client);
      answers?.forget(ctx);
    }
  }

  /** What the upstream said it offers in `initialize` (connects first). @throws on connect failure. */
  async capabilities(): Promise<Record<string, unknown>> {
    const client = await this.connect();
    return (client.getServerCapabilities() ?? {}) as Record<string, unknown>;
  }

  /**
   * A JSON-RPC `ping` round trip (readiness). An expired upstream session (HTTP 404) is renewed
   * once, as for {@link request}, and the ping sent again.
   * @returns null when answered, else why not (a short code, no URL).
   */
  async ping(timeoutMs: number): Promise<string | null> {
    for (let tries = 0; ; tries++) {
      let client: Client | undefined;
      try {
        client = await this.connect();
        this.renewal.use(client);
        await client.ping({ timeout: timeoutMs, maxTotalTimeout: timeoutMs });
        return null;
      } catch (e) {
        if (client && sessionExpired(e) && tries === 0) {
          this.renewal.done(client);
          this.renewal.expired(client, 'ping');
          client = undefined;
          continue;
        }
        return pingFailure(e);
      } finally {
        if (client) this.renewal.done(client);
      }
    }
  }

  async close(): Promise<void> {
    const c = this.client;
    this.client = null;
    await c?.close().catch(() => undefined);
  }

  /** Closes the connection and the upstream's TLS dispatcher (the pool is closing). */
  async release(): Promise<void> {
    await this.close();
    await this.credentials.close().catch(() => undefined);
  }
}

/** Why a ping got no answer, for /readyz: the start summary, the HTTP status, the cause code. */
function pingFailure(e: unknown): string {
  if (e instanceof UpstreamStartError) return e.summary;
  if (e instanceof StreamableHTTPError)
    return e.code === 404
      ? 'HTTP 404 (session expired)'
      : e.code !== undefined && e.code > 0
        ? `HTTP ${e.code}`
        : 'bad response';
  return causeCode(e) ?? (e instanceof McpError ? `MCP error ${e.code}` : 'no answer');
}

/** JCS text of an upstream result, or null when JCS cannot carry it (forward.ts records why). */
function jcsOrNull(result: Record<string, unknown>): string | null {
  try {
    return canonicalJson(result);
  } catch (e) {
    if (e instanceof CanonicalJsonError) return null;
    throw e;
  }
}

/** The reason a call's transport died under it (the call's abort reason). */
class UpstreamDiedError extends CmcpError {
  declare readonly code: 'UPSTREAM_FAILED';
  constructor(message: string) {
    super('UPSTREAM_FAILED', message);
    this.name = 'UpstreamDiedError';
  }
}

/** How an upstream's answer fails its CLIENT span: an error answer, an over-cap result, no answer. */
function outcomeFailure(o: CallOutcome): { errorType: string; rpcCode?: number } | null {
  if ('rpcError' in o) return { errorType: String(o.rpcError.code), rpcCode: o.rpcError.code };
  if ('tooLarge' in o) return { errorType: 'RESULT_TOO_LARGE' };
  if ('failure' in o) return { errorType: o.boundary };
  return o.result.isError === true ? { errorType: 'tool_error' } : null;
}
