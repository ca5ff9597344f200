/**
 * DNS-rebinding protection (docs/spec/mcp.md#inbound, docs/operations.md#allowed-hosts): every
 * request's `Host` header, and its `Origin` header when sent, must name an allowed host. A web
 * page that rebinds its own name to the gateway's address still sends its own name in `Host`
 * (and its own origin in `Origin`), so it is refused with 403 HOST_NOT_ALLOWED before
 * authentication — a dev-mode gateway (no token needed) cannot be driven from a browser tab.
 * Ports are not compared: a rebinding page reaches the gateway on the gateway's own port.
 */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { isJsonRpc, sendError, sendRpcError } from './replies.js';

/** Loopback names allowed by default, as the WHATWG URL parser spells their hostnames. */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** A Host header: host name or IP literal, optional port; nothing a URL parser would read as userinfo or path. */
const HOST_HEADER = /^[A-Za-z0-9.\-_]+(:\d{1,5})?$|^\[[0-9A-Fa-f:.]+\](:\d{1,5})?$/;

/**
 * The hostname of a Host header value or an allowed-hosts entry, lowercased and normalised by
 * the WHATWG URL parser (so `LOCALHOST`, `127.0.0.1:8787` and `[0:0::1]` compare as written
 * in the allowed list); null when it is not a plain `host[:port]`.
 */
export function hostnameOf(value: string): string | null {
  if (!HOST_HEADER.test(value)) return null;
  try {
    return new URL(`http://${value}`).hostname;
  } catch {
    return null;
  }
}

/**
 * The allowed hosts of a listener: the configured `listen.allowed_hosts`, else the listen
 * address (unless it is a wildcard) and the loopback names.
 * @returns normalised hostnames (see {@link hostnameOf}); entries that do not parse are dropped
 *   (the config schema refuses them first).
 */
export function allowedHosts(listen: { host: string; allowed_hosts?: string[] | undefined }): Set<string> {
  const wildcard = listen.host === '0.0.0.0' || listen.host === '::' || listen.host === '';
  // An IPv6 listen address is written bare in the config and bracketed in a Host header.
  const own = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
  const names = listen.allowed_hosts ?? [...(wildcard ? [] : [own]), ...LOOPBACK_NAMES];
  const out = new Set<string>();
  for (const n of names) {
    const h = hostnameOf(n);
    if (h) out.add(h);
  }
  return out;
}

/** Why a request's Host/Origin pair is refused, or null when it is allowed. */
export function rebindingProblem(
  allowed: ReadonlySet<string>,
  host: string | undefined,
  origin: string | undefined,
): string | null {
  const name = host === undefined ? null : hostnameOf(host);
  if (name === null || !allowed.has(name)) return 'the Host header names no allowed host';
  // `Origin: null` is a browser withholding the origin (a form POST under Referrer-Policy
  // no-referrer, as the console sends; a sandboxed document): it names no host, so the Host
  // check above is what decides — a rebinding page cannot change its Host.
  if (origin === undefined || origin === 'null') return null;
  let o: URL;
  try {
    o = new URL(origin);
  } catch {
    return 'the Origin header is not an origin';
  }
  if ((o.protocol !== 'http:' && o.protocol !== 'https:') || !allowed.has(o.hostname))
    return 'the Origin header names no allowed host';
  return null;
}

/**
 * The `onRequest` hook, registered at the root before any authentication hook.
 * @param onRefused told the refused request's route (aggregated into `request_refused` records).
 */
export function hostCheck(allowed: ReadonlySet<string>, onRefused: (route: string) => void) {
  return async (req: FastifyRequest, reply: FastifyReply) => {
    const origin = req.headers.origin;
    const problem = rebindingProblem(allowed, req.headers.host, origin);
    if (problem === null) return;
    onRefused(`${req.method} ${req.routeOptions.url ?? 'unknown'}`);
    return isJsonRpc(req)
      ? sendRpcError(reply, 'HOST_NOT_ALLOWED', problem)
      : sendError(reply, 'HOST_NOT_ALLOWED', problem);
  };
}
