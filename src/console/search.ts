/**
 * The console's audit search: the query string of `GET /operator/ui/search` read into a filter
 * of the audit chains (agent, tool, disposition, time window). Times come from the form's
 * `datetime-local` fields (no zone) and are read as UTC.
 */

import { CmcpError } from '../errors/index.js';

/** Dispositions an entry can carry (relay/evidence.ts, store/port.ts). */
export const DISPOSITIONS = ['completed', 'refused', 'not_attempted', 'outcome_unknown'] as const;

/** What the form asked for, as typed (shown back in the form). */
export interface SearchForm {
  agent: string;
  tool: string;
  disposition: string;
  from: string;
  to: string;
}

/** The filter of {@link SearchForm}: null fields match anything; times in the chain's format. */
export interface SearchFilter {
  agentId: string | null;
  tool: string | null;
  disposition: string | null;
  from: string | null;
  to: string | null;
}

const text = (v: unknown): string => (typeof v === 'string' ? v.trim().slice(0, 200) : '');

/** The form's fields from a query string (missing ones empty, each at most 200 characters). */
export function searchForm(query: Record<string, unknown>): SearchForm {
  return {
    agent: text(query.agent),
    tool: text(query.tool),
    disposition: text(query.disposition),
    from: text(query.from),
    to: text(query.to),
  };
}

/** A `datetime-local` value (or RFC 3339) as the chain's timestamp format, UTC with microseconds. */
function chainTime(value: string, field: string): string | null {
  if (!value) return null;
  const at = Date.parse(/[zZ]|[+-]\d\d:\d\d$/.test(value) ? value : `${value}Z`);
  if (Number.isNaN(at)) throw new CmcpError('INVALID_PARAMS', `${field}: not a date and time`);
  return `${new Date(at).toISOString().slice(0, 23)}000Z`;
}

/**
 * The filter a form asks for.
 * @throws CmcpError INVALID_PARAMS for an unknown disposition or a time that does not parse.
 */
export function searchFilter(f: SearchForm): SearchFilter {
  if (f.disposition && !(DISPOSITIONS as readonly string[]).includes(f.disposition))
    throw new CmcpError('INVALID_PARAMS', `disposition: one of ${DISPOSITIONS.join(', ')}`);
  return {
    agentId: f.agent || null,
    tool: f.tool || null,
    disposition: f.disposition || null,
    from: chainTime(f.from, 'from'),
    to: chainTime(f.to, 'to'),
  };
}

/** Whether the form asks for anything (an empty form lists nothing). */
export const searchAsked = (f: SearchForm): boolean => Object.values(f).some((v) => v !== '');
