/**
 * The operator console under `/operator/ui` (docs/operations.md#operator-console): server-rendered
 * pages over the read model, with its own authentication. It sits beside the bearer-token
 * operator API, not inside it: the API's hook and routes are untouched, and a console cookie
 * is never accepted there (the cookie's path is `/operator/ui` and the API reads only
 * `Authorization`).
 *
 * - Login: a form posts an operator token (checked by the same Authenticator as the API); the
 *   browser gets an opaque session id cookie (login.ts). A refused login is recorded like any
 *   unauthenticated request (rate-bounded, gateway chain).
 * - Without a live login a page redirects to the login form; any other method is refused (403).
 * - Every POST carries the login's CSRF token (`_csrf`) besides the SameSite=Strict cookie.
 * - Every answer has a Content-Security-Policy without script, `nosniff`, no framing, no caching.
 */

import { Readable } from 'node:stream';
import cookie from '@fastify/cookie';
import formbody from '@fastify/formbody';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { CmcpError } from '../errors/index.js';
import { CONSOLE_COOKIE, CONSOLE_PATH, type ConsoleLogin, ConsoleLogins, csrfMatches } from './login.js';
import {
  type BucketSize,
  type ConsoleReadModel,
  type ConsoleUpstreams,
  upstreamStates,
} from './read-model.js';
import { type SearchFilter, searchAsked, searchFilter, searchForm } from './search.js';
import * as v from './views.js';

export interface ConsoleDeps {
  /** Operator tokens: the operator id a bearer header names, or null (gateway/edge/credentials.ts). */
  auth: { operator(header: string | undefined): string | null };
  read: ConsoleReadModel;
  /** Block and unblock, as the operator API does them (gateway/operator/controls.ts). */
  block(operatorId: string, agentId: string, reason: string | null): unknown;
  unblock(operatorId: string, agentId: string): unknown;
  /**
   * A signed policy reload `{files: {name: base64url}, signature}`, as the operator API takes it
   * (gateway/operator/reloads.ts: signature, version and bundle checks; refusals recorded).
   */
  reload?(operatorId: string, body: unknown): Promise<Record<string, unknown>>;
  /** Sets `Secure` on the cookie: true unless the gateway listens on loopback. */
  secureCookie: boolean;
  /** Records a refused login (the gateway's rate-bounded unauthenticated-request recorder). */
  recordAuthFailure: (route: string) => void;
  /** The upstream pool's availability (upstream/pool.ts); the upstreams page is empty without it. */
  upstreams?: ConsoleUpstreams;
}

declare module 'fastify' {
  interface FastifyRequest {
    consoleLogin: ConsoleLogin | null;
  }
}

const CSP =
  "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";
/** Routes served without a login. */
const OPEN = new Set([`${CONSOLE_PATH}/login`, `${CONSOLE_PATH}/console.css`, `${CONSOLE_PATH}/favicon.svg`]);

function securityHeaders(reply: FastifyReply): void {
  reply
    .header('content-security-policy', CSP)
    .header('x-content-type-options', 'nosniff')
    .header('x-frame-options', 'DENY')
    .header('referrer-policy', 'no-referrer')
    .header('cache-control', 'no-store');
}

const sendPage = (reply: FastifyReply, html: string, code = 200) =>
  reply.code(code).type('text/html; charset=utf-8').send(html);

/** The login of a request, known to exist on every route but the open ones. */
const loginOf = (req: FastifyRequest) => req.consoleLogin as ConsoleLogin;
const nav = (req: FastifyRequest) => ({ csrf: loginOf(req).csrf, operatorId: loginOf(req).operatorId });
const field = (body: unknown, name: string): string | undefined => {
  const value = (body as Record<string, unknown> | null)?.[name];
  return typeof value === 'string' ? value : undefined;
};

/** The largest reload form read, in bytes (a bundle's files, base64url, in one field). */
const RELOAD_BODY_BYTES = 4 * 1024 * 1024;

/** The largest login form body read, in bytes. */
const LOGIN_BODY_BYTES = 4096;

/** The console plugin; register it with `prefix: '/operator/ui'`. */
export function consoleRoutes(d: ConsoleDeps) {
  const logins = new ConsoleLogins();
  return async (app: FastifyInstance) => {
    await app.register(cookie);
    await app.register(formbody);
    app.decorateRequest('consoleLogin', null);
    app.addHook('onRequest', async (req, reply) => {
      securityHeaders(reply);
      if (OPEN.has(req.routeOptions.url ?? '')) return;
      req.consoleLogin = logins.get(req.cookies[CONSOLE_COOKIE]);
      if (req.consoleLogin) return;
      if (req.method === 'GET' || req.method === 'HEAD') return reply.redirect(`${CONSOLE_PATH}/login`, 303);
      return sendPage(reply, v.page('Login required', v.messageView('login required')), 403);
    });
    // CSRF: every state-changing request but the login itself carries the login's token.
    app.addHook('preHandler', async (req, reply) => {
      if (req.method !== 'POST' || OPEN.has(req.routeOptions.url ?? '')) return;
      if (!csrfMatches(loginOf(req), field(req.body, '_csrf')))
        return sendPage(reply, v.page('Refused', v.messageView('missing or wrong CSRF token')), 403);
    });
    app.setNotFoundHandler((_req, reply) => {
      securityHeaders(reply);
      return sendPage(reply, v.page('Not found', v.messageView('not found')), 404);
    });

    app.get('/console.css', async (_req, reply) => reply.type('text/css; charset=utf-8').send(v.CONSOLE_CSS));
    app.get('/favicon.svg', async (_req, reply) => reply.type('image/svg+xml').send(v.CONSOLE_ICON));
    app.get('/login', async (_req, reply) => sendPage(reply, v.page('Log in', v.loginView(false))));
    // The login form is read before it authenticates anyone: a token (at most 512 characters)
    // and the form's fields fit well in LOGIN_BODY_BYTES; a longer body is refused (413) unread.
    app.post('/login', { bodyLimit: LOGIN_BODY_BYTES }, async (req, reply) => {
      const token = field(req.body, 'token');
      const operatorId = token ? d.auth.operator(`Bearer ${token}`) : null;
      if (!operatorId) {
        d.recordAuthFailure('POST /operator/ui/login');
        return sendPage(reply, v.page('Log in', v.loginView(true)), 401);
      }
      logins.close(req.cookies[CONSOLE_COOKIE]);
      const { id } = logins.open(operatorId);
      reply.setCookie(CONSOLE_COOKIE, id, {
        path: CONSOLE_PATH,
        httpOnly: true,
        sameSite: 'strict',
        secure: d.secureCookie,
        maxAge: Math.floor(logins.ttlMs / 1000),
      });
      req.log.info({ operator_id: operatorId }, 'operator console login');
      return reply.redirect(`${CONSOLE_PATH}/`, 303);
    });
    app.post('/logout', async (req, reply) => {
      logins.close(req.cookies[CONSOLE_COOKIE]);
      reply.clearCookie(CONSOLE_COOKIE, { path: CONSOLE_PATH });
      return reply.redirect(`${CONSOLE_PATH}/login`, 303);
    });
    pages(app, d);
    actions(app, d);
  };
}

/** The read-only pages. */
function pages(app: FastifyInstance, d: ConsoleDeps): void {
  app.get('/', async (req, reply) => {
    const sessions = d.read.sessions();
    const executions = d.read.executions();
    const counts: Record<string, number> = {
      'open sessions': sessions.filter((s) => s.status === 'open').length,
      'closed sessions': sessions.filter((s) => s.status === 'closed').length,
    };
    for (const e of executions) counts[`executions ${e.state}`] = (counts[`executions ${e.state}`] ?? 0) + 1;
    return sendPage(reply, v.page('Overview', v.overviewView(d.read.status(), counts), nav(req)));
  });
  app.get('/sessions', async (req, reply) =>
    sendPage(reply, v.page('Sessions', v.sessionsView(d.read.sessions()), nav(req))),
  );
  app.get<{ Params: { id: string } }>('/sessions/:id', async (req, reply) => {
    const s = d.read.session(req.params.id);
    if (!s) return sendPage(reply, v.page('Not found', v.messageView('unknown session'), nav(req)), 404);
    const view = v.chainView(s, d.read.chainOf(s.session_id));
    return sendPage(reply, v.page(`Session ${s.session_id}`, view, nav(req)));
  });
  // The bundle as a download: the same JSON `GET /sessions/{id}/bundle` gives the session's agent.
  app.get<{ Params: { id: string } }>('/sessions/:id/bundle', async (req, reply) => {
    const s = d.read.session(req.params.id);
    if (!s) return sendPage(reply, v.page('Not found', v.messageView('unknown session'), nav(req)), 404);
    const file = `cmcp-bundle-${s.session_id.replace(/[^A-Za-z0-9._-]/g, '_')}.json`;
    return reply
      .type('application/json; charset=utf-8')
      .header('content-disposition', `attachment; filename="${file}"`)
      .send(Readable.from(d.read.bundleJson(s.session_id)));
  });
  app.get<{ Params: { id: string } }>('/sessions/:id/claim', async (req, reply) => {
    const s = d.read.session(req.params.id);
    const c = s ? await d.read.claim(s.session_id) : null;
    if (!s || !c)
      return sendPage(
        reply,
        v.page('Not found', v.messageView('no claim: unknown or open session'), nav(req)),
        404,
      );
    return sendPage(reply, v.page(`Claim of ${s.session_id}`, v.claimView(s.session_id, c), nav(req)));
  });
  app.get('/executions', async (req, reply) =>
    sendPage(reply, v.page('Executions', v.executionsView(d.read.executions()), nav(req))),
  );
  app.get<{ Querystring: { bucket?: string } }>('/refusals', async (req, reply) => {
    const size: BucketSize = req.query.bucket === 'hour' ? 'hour' : 'minute';
    return sendPage(reply, v.page('Refusals by code', v.refusalsView(size, d.read.refusals(size)), nav(req)));
  });
  app.get<{ Querystring: Record<string, unknown> }>('/search', async (req, reply) => {
    const form = searchForm(req.query);
    if (!searchAsked(form)) return sendPage(reply, v.page('Search', v.searchView(form, null), nav(req)));
    let filter: SearchFilter;
    try {
      filter = searchFilter(form);
    } catch (e) {
      if (!(e instanceof CmcpError)) throw e;
      return sendPage(reply, v.page('Search', v.messageView(e.message), nav(req)), 400);
    }
    return sendPage(reply, v.page('Search', v.searchView(form, d.read.search(filter)), nav(req)));
  });
  app.get('/upstreams', async (req, reply) =>
    sendPage(reply, v.page('Upstreams', v.upstreamsView(upstreamStates(d.upstreams)), nav(req))),
  );
  app.get('/agents', async (req, reply) => {
    const agents = d.read.agents.map((id) => ({ id, blocked: d.read.isBlocked(id) }));
    return sendPage(reply, v.page('Agents', v.agentsView(agents, loginOf(req).csrf), nav(req)));
  });
}

/** Block and unblock (CSRF-checked by the preHandler hook). */
function actions(app: FastifyInstance, d: ConsoleDeps): void {
  const act =
    (fn: (req: FastifyRequest<{ Params: { id: string } }>) => unknown) =>
    async (req: FastifyRequest<{ Params: { id: string } }>, reply: FastifyReply) => {
      try {
        await fn(req);
      } catch (e) {
        if (!(e instanceof CmcpError)) throw e;
        const code = e.code === 'AGENT_NOT_FOUND' ? 404 : 400;
        return sendPage(reply, v.page('Refused', v.messageView(e.message), nav(req)), code);
      }
      return reply.redirect(`${CONSOLE_PATH}/agents`, 303);
    };
  app.post<{ Params: { id: string } }>(
    '/agents/:id/block',
    act((req) => d.block(loginOf(req).operatorId, req.params.id, field(req.body, 'reason') || null)),
  );
  app.get('/policy', async (req, reply) =>
    sendPage(reply, v.page('Policy', v.policyView(d.read.status(), loginOf(req).csrf, null), nav(req))),
  );
  app.post('/policy/reload', { bodyLimit: RELOAD_BODY_BYTES }, async (req, reply) => {
    const show = (result: { refused: string } | { installed: Record<string, unknown> }, code: number) =>
      sendPage(
        reply,
        v.page('Policy', v.policyView(d.read.status(), loginOf(req).csrf, result), nav(req)),
        code,
      );
    if (!d.reload) return show({ refused: 'policy reload is not available on this gateway' }, 400);
    let request: unknown;
    try {
      request = JSON.parse(field(req.body, 'request') ?? '');
    } catch {
      return show({ refused: 'the reload request is not JSON ({"files": {…}, "signature": "…"})' }, 400);
    }
    try {
      return show({ installed: await d.reload(loginOf(req).operatorId, request) }, 200);
    } catch (e) {
      if (!(e instanceof CmcpError)) throw e;
      return show({ refused: `${e.code}: ${e.message}` }, 400);
    }
  });
  app.post<{ Params: { id: string } }>(
    '/agents/:id/unblock',
    act((req) => d.unblock(loginOf(req).operatorId, req.params.id)),
  );
}
