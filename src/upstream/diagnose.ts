/**
 * Errors that say what happened when an upstream cannot be reached (docs/getting-started.md): a stdio
 * child that exits at start shows the last lines of its stderr (bounded, control characters
 * stripped, configured environment values and secret-looking variables redacted); an HTTP
 * upstream names its URL and the cause (connection refused, DNS, TLS, HTTP status).
 */

import type { UpstreamConfig } from '../config/index.js';
import { envValues } from '../config/upstream-credentials.js';
import { CmcpError } from '../errors/index.js';
import { knownSecrets } from './credentials.js';
import { SECRET_NAME, secretRedactor } from './redact.js';

/** Lines and bytes of a stdio child's stderr kept for a start-up error. */
export const STDERR_TAIL_LINES = 10;
export const STDERR_TAIL_BYTES = 2048;

/** The last lines of a child's stderr, bounded in lines and bytes. */
export class StderrTail {
  private lines: string[] = [];
  private partial = '';

  push(chunk: Buffer | string): void {
    const text = this.partial + (typeof chunk === 'string' ? chunk : chunk.toString('utf8'));
    const parts = text.split(/\r?\n/);
    this.partial = (parts.pop() ?? '').slice(-STDERR_TAIL_BYTES);
    for (const p of parts) if (p.trim()) this.lines.push(p.slice(0, STDERR_TAIL_BYTES));
    if (this.lines.length > STDERR_TAIL_LINES) this.lines = this.lines.slice(-STDERR_TAIL_LINES);
  }

  /** The kept lines (and an unterminated last line), oldest first. */
  get(): string[] {
    const all = this.partial.trim() ? [...this.lines, this.partial] : [...this.lines];
    return all.slice(-STDERR_TAIL_LINES);
  }
}

/**
 * Values that must not leave in an error: every configured `env` value of the upstream, and the
 * values of this process's variables whose names look secret. Short values (under 4 characters)
 * are not redacted: they would blank out ordinary words.
 */
export function secretValues(cfg: UpstreamConfig, env: NodeJS.ProcessEnv = process.env): string[] {
  const out = new Set<string>();
  if (cfg.transport === 'stdio')
    for (const v of Object.values(envValues(cfg.env))) if (v.length >= 4) out.add(v);
  for (const [k, v] of Object.entries(env)) if (v && v.length >= 4 && SECRET_NAME.test(k)) out.add(v);
  for (const v of knownSecrets()) if (v.length >= 4) out.add(v);
  return [...out].sort((a, b) => b.length - a.length);
}

/**
 * Makes stderr lines safe to show: ANSI escapes and control characters removed, secret values
 * replaced by `[redacted]`, the whole bounded to {@link STDERR_TAIL_BYTES}.
 */
export function sanitizeLines(lines: string[], secrets: string[]): string[] {
  let budget = STDERR_TAIL_BYTES;
  const out: string[] = [];
  for (const raw of lines.slice(-STDERR_TAIL_LINES).reverse()) {
    let line = raw
      // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping terminal escapes is the point
      .replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, '')
      // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping control characters is the point
      .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '');
    for (const s of secrets) line = line.split(s).join('[redacted]');
    line = secretRedactor()?.text(line) ?? line; // the credentials' encoded forms too
    if (line.length > budget) line = `…${line.slice(line.length - budget + 1)}`;
    budget -= line.length;
    out.unshift(line);
    if (budget <= 0) break;
  }
  return out;
}

function causeChain(e: unknown): { code?: string; status?: number; messages: string[] } {
  const messages: string[] = [];
  let code: string | undefined;
  let status: number | undefined;
  let cur: unknown = e;
  for (let i = 0; i < 6 && cur; i++) {
    const c = (cur as { code?: unknown }).code;
    if (typeof c === 'string' && code === undefined) code = c;
    if (typeof c === 'number' && c >= 100 && c <= 599 && status === undefined) status = c;
    const m = (cur as { message?: unknown }).message;
    if (typeof m === 'string' && m) messages.push(m);
    cur = (cur as { cause?: unknown }).cause;
  }
  return { code, status, messages };
}

/** TLS failures as node reports them (certificate codes and OpenSSL error codes). */
const TLS_CODE = /CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER|HOSTNAME_MISMATCH/;

/**
 * One line saying why an HTTP upstream could not be reached: `ECONNREFUSED (nothing listens
 * there)`, `ENOTFOUND (DNS: host … not found)`, `TLS: CERT_HAS_EXPIRED`, `HTTP 404`, …
 */
export function httpCause(url: string, e: unknown): string {
  const { code, status, messages } = causeChain(e);
  const host = (() => {
    try {
      return new URL(url).hostname;
    } catch {
      return url;
    }
  })();
  if (status !== undefined) return `HTTP ${status} (${(messages[0] ?? '').slice(0, 160)})`;
  if (code === 'ECONNREFUSED') return 'ECONNREFUSED (connection refused: nothing listens there)';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') return `${code} (DNS: cannot resolve host ${host})`;
  if (code && TLS_CODE.test(code)) return `TLS: ${code} (${(messages.at(-1) ?? '').slice(0, 160)})`;
  if (code) return `${code} (${(messages.at(-1) ?? '').slice(0, 160)})`;
  return (messages.at(-1) ?? String(e)).slice(0, 200);
}

/** A failed connect or first listing: `message` for operators, `summary` for callers. */
export class UpstreamStartError extends CmcpError {
  constructor(
    message: string,
    /** A few words without URLs, paths or stderr: `ECONNREFUSED`, `HTTP 503`, `exited with code 3`. */
    readonly summary: string,
    options: { cause: unknown },
  ) {
    super('UPSTREAM_UNAVAILABLE', message);
    this.cause = options.cause;
    this.name = 'UpstreamStartError';
  }
}

/** The short form of a failure, safe to show an agent (see {@link UpstreamStartError}). */
export function failureSummary(cfg: UpstreamConfig, e: unknown, exit: ChildExit | null = null): string {
  if (cfg.transport === 'http') return httpCause(cfg.url, e).replace(/ \(.*$/s, '');
  if (causeChain(e).code === 'ENOENT') return 'command not found';
  if (exit?.signal) return `killed by ${exit.signal}`;
  if (exit && exit.code !== null) return `exited with code ${exit.code}`;
  return 'did not answer';
}

/** How a stdio child ended, if it did. */
export interface ChildExit {
  code: number | null;
  signal: string | null;
}

/**
 * The message of a failed connect or first listing, for start-up errors, logs and
 * `cmcp start --check`. Never includes configured environment values.
 */
export function describeUpstreamFailure(
  cfg: UpstreamConfig,
  e: unknown,
  stderr: string[] = [],
  exit: ChildExit | null = null,
): string {
  if (cfg.transport === 'http') {
    const text = `HTTP upstream at ${cfg.url} is not reachable: ${sanitizeLines([httpCause(cfg.url, e)], secretValues(cfg))[0] ?? ''}`;
    // The url may hold a secret of its own (a userinfo password, `?api_key=`).
    return secretRedactor()?.text(text) ?? text;
  }
  const { code, messages } = causeChain(e);
  const parts: string[] = [];
  if (code === 'ENOENT') parts.push(`command not found: ${cfg.command}`);
  else
    parts.push(`stdio upstream (${cfg.command}) did not answer: ${(messages[0] ?? String(e)).slice(0, 160)}`);
  if (exit && (exit.code !== null || exit.signal !== null))
    parts.push(exit.signal ? `killed by ${exit.signal}` : `exited with code ${exit.code}`);
  const lines = sanitizeLines(stderr, secretValues(cfg));
  if (lines.length) parts.push(`last stderr lines:\n    | ${lines.join('\n    | ')}`);
  else if (exit) parts.push('(no stderr output)');
  return parts.join('; ');
}

/**
 * Watches a stdio transport from before its start: the stderr tail and how the child ended.
 * The SDK exposes stderr (`stderr: 'pipe'`) but not the child, hence the guarded look at its
 * process handle once started. For an HTTP transport both stay empty.
 */
export function watchStdioStart(transport: unknown): {
  stderr: () => string[];
  exit: () => ChildExit | null;
} {
  const tail = new StderrTail();
  let exit: ChildExit | null = null;
  const t = transport as {
    stderr?: NodeJS.ReadableStream | null;
    start?: () => Promise<void>;
    _process?: { once(ev: 'exit', fn: (code: number | null, signal: string | null) => void): void };
  };
  if (t && typeof t === 'object' && 'stderr' in t && typeof t.start === 'function') {
    t.stderr?.on('data', (d: Buffer | string) => tail.push(d));
    const start = t.start.bind(t);
    t.start = async () => {
      await start();
      t._process?.once('exit', (code, signal) => {
        exit = { code, signal };
      });
    };
  }
  return { stderr: () => tail.get(), exit: () => exit };
}
