/**
 * The console's pages, rendered on the server with Eta templates. Templates interpolate only
 * with `<%= %>`, which Eta escapes (autoEscape): a tool, agent or execution id holding
 * `<script>` shows as text. The one raw interpolation (`<%~ %>`) is the layout inserting a
 * page body Eta itself rendered. No page carries script; block and unblock are plain forms
 * with the login's CSRF token. Links are built here with each segment percent-encoded.
 */

import type { VerificationReport } from '@cmcp/verify';
import type { AuditEntry } from '@cmcp/verify/formats';
import { Eta } from 'eta';
import type { SessionRow } from '../session/service.js';
import type { ExecutionRow } from '../store/port.js';
import {
  type BucketSize,
  LIST_LIMIT,
  type PolicyDenial,
  type RefusalBucket,
  type UpstreamState,
} from './read-model.js';
import { DISPOSITIONS, type SearchForm } from './search.js';
import { TEMPLATES } from './templates.js';

const BASE = '/operator/ui';

/** A path below the console with each segment percent-encoded. */
const href = (...segments: string[]) => `${BASE}/${segments.map(encodeURIComponent).join('/')}`;

const eta = new Eta({ autoEscape: true, autoTrim: false, cache: true });
for (const [name, text] of Object.entries(TEMPLATES)) eta.loadTemplate(`@${name}`, text);

/** A page body: a named template and its data. */
export interface View {
  template: keyof typeof TEMPLATES;
  data: Record<string, unknown>;
}

/** The stylesheet, served from `${BASE}/console.css` (CSP: style-src 'self'). */
export const CONSOLE_CSS = `body{font:14px system-ui,sans-serif;margin:0;color:#1d2330}
header{background:#1d2330;color:#fff;padding:.6em 1em;display:flex;gap:1.2em;align-items:center}
header a{color:#cfe0ff}main{padding:1em}table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccd;padding:.25em .5em;text-align:left;vertical-align:top}
code{font:12px ui-monospace,monospace;word-break:break-all}td:first-child code{word-break:normal;white-space:nowrap}.pass{color:#0a7a2f}.fail{color:#b00020}
.absent,.not-applicable{color:#777}.verdict{font-size:1.3em;font-weight:bold}
.error{color:#b00020;font-weight:bold}form.inline{display:inline}`;

/** The tab icon, served from `${BASE}/favicon.svg` (without it a browser asks for /favicon.ico: a 404). */
export const CONSOLE_ICON =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><rect width="16" height="16" rx="3" fill="#1d2330"/></svg>';

/** A whole page: the layout (navigation when logged in) around the rendered view. */
export function page(title: string, view: View, nav?: { csrf: string; operatorId: string }): string {
  const body = eta.render(`@${view.template}`, { ...view.data, href });
  return eta.render('@layout', { title, body, nav: nav ?? null, href, base: BASE });
}

/** The login form; `refused` shows why the last attempt failed. */
export const loginView = (refused: boolean): View => ({ template: 'login', data: { refused } });

/** Running policy and catalog hashes, drifted tools, blocked agents, counts. */
export function overviewView(status: Record<string, unknown>, counts: Record<string, number>): View {
  const policy = status.policy as Record<string, unknown> | null;
  const catalog = status.catalog as { catalog_hash: string; tools: number; drifted: unknown[] } | null;
  return {
    template: 'overview',
    data: {
      policyHash: policy?.bundle_hash ?? null,
      policyVersion: String(policy?.version ?? 'none'),
      mode: String(status.enforcement_mode),
      catalogHash: catalog?.catalog_hash ?? null,
      catalogTools: String(catalog?.tools ?? 'none'),
      drifted: (catalog?.drifted ?? []).map((d) => JSON.stringify(d)),
      blocked: (status.blocked_agents as string[] | undefined) ?? [],
      counts: Object.entries(counts),
    },
  };
}

/** The newest sessions with links to their chains and claims. */
export const sessionsView = (rows: SessionRow[]): View => ({ template: 'sessions', data: { rows } });

/** One session's chain, entry by entry. */
export const chainView = (session: SessionRow, entries: AuditEntry[]): View => ({
  template: 'chain',
  data: { session, entries },
});

/** A claim, the verifier's verdict and every check. */
export const claimView = (
  sessionId: string,
  v: { claim: unknown; report: VerificationReport; trustNote: string | null },
): View => ({
  template: 'claim',
  data: { sessionId, report: v.report, trustNote: v.trustNote, claimJson: JSON.stringify(v.claim, null, 2) },
});

/** Registry rows and their states. */
export const executionsView = (rows: ExecutionRow[]): View => ({ template: 'executions', data: { rows } });

/** Refusals by code per time bucket, newest first. */
export const refusalsView = (
  size: BucketSize,
  r: { buckets: RefusalBucket[]; codes: string[]; denials: PolicyDenial[] },
): View => ({
  template: 'refusals',
  data: { size, buckets: r.buckets, codes: r.codes, denials: r.denials },
});

/** Every configured upstream and whether it is available, down, or waiting for a user. */
export const upstreamsView = (rows: UpstreamState[]): View => ({ template: 'upstreams', data: { rows } });

/** The search form (as typed) and, once asked, the matching entries with their sessions. */
export const searchView = (form: SearchForm, entries: AuditEntry[] | null): View => ({
  template: 'search',
  data: { form, entries, dispositions: DISPOSITIONS, limit: LIST_LIMIT },
});

/** The running policy, the signed-reload form, and the last reload's outcome. */
export function policyView(
  status: Record<string, unknown>,
  csrf: string,
  result: { refused: string } | { installed: Record<string, unknown> } | null,
): View {
  const policy = status.policy as Record<string, unknown> | null;
  return {
    template: 'policy',
    data: {
      csrf,
      hash: policy?.bundle_hash ?? null,
      version: String(policy?.version ?? 'none'),
      refused: result && 'refused' in result ? result.refused : null,
      installed: result && 'installed' in result ? JSON.stringify(result.installed, null, 2) : null,
    },
  };
}

/** Every known agent with its block or unblock form. */
export const agentsView = (agents: { id: string; blocked: boolean }[], csrf: string): View => ({
  template: 'agents',
  data: { agents, csrf },
});

/** A short message page (not found, refused). */
export const messageView = (text: string): View => ({ template: 'message', data: { text } });
