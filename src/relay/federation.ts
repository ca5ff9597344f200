/**
 * Several upstreams as one MCP server (docs/spec/mcp.md#federation): merged lists of resources,
 * resource templates and prompts, and the routes back. Prompts and resource templates get the
 * upstream prefix like tools (`<prefix>.<name>`); resource URIs stay as the upstream wrote them
 * and route to the upstream that listed them. A URI two upstreams list is refused at list time
 * (left out of the list, logged) and never routed by guess; a URI nobody listed routes to the
 * one upstream whose resource template matches it, or to the only upstream offering resources.
 */
import { UriTemplate } from '@modelcontextprotocol/sdk/shared/uriTemplate.js';
import type { Logger } from 'pino';
import type { Upstream, UpstreamPool } from '../upstream/pool.js';
import { listAllPages } from '../upstream/request.js';

/** A merged list: its method, the result member and the upstream capability it needs. */
export interface ListKind {
  method: 'resources/list' | 'resources/templates/list' | 'prompts/list';
  key: 'resources' | 'resourceTemplates' | 'prompts';
  capability: 'resources' | 'prompts';
}

export const LISTS: Record<ListKind['method'], ListKind> = {
  'resources/list': { method: 'resources/list', key: 'resources', capability: 'resources' },
  'resources/templates/list': {
    method: 'resources/templates/list',
    key: 'resourceTemplates',
    capability: 'resources',
  },
  'prompts/list': { method: 'prompts/list', key: 'prompts', capability: 'prompts' },
};

/** The connection a request of one client session uses to reach an upstream. */
export type ConnectionFor = (upstream: string) => Upstream | undefined;

/** Where a gateway name or URI goes. */
export interface Route {
  upstream: string;
  /** The upstream's own name (prompts), or the URI unchanged (resources). */
  name: string;
}

/** The merged lists and their routes. */
export class Federation {
  /** URI → the upstream that listed it, or null when two did (refused). */
  private readonly uris = new Map<string, string | null>();
  private readonly templates = new Map<string, { upstream: string; template: UriTemplate }[]>();
  private readonly prompts = new Map<string, Route>();

  constructor(
    private readonly pool: UpstreamPool,
    private readonly log: Logger,
  ) {}

  /** The gateway name of an upstream item (`<prefix>.<name>`, or bare with an empty prefix). */
  exposed(upstream: string, name: string): string {
    const prefix = this.pool.shared(upstream)?.prefix ?? upstream;
    return prefix ? `${prefix}.${name}` : name;
  }

  /** Upstreams (configuration order) that are available and offer `capability`. */
  async offering(capability: string, conn: ConnectionFor): Promise<string[]> {
    const out: string[] = [];
    for (const name of this.pool.names()) {
      if (this.pool.availability.get(name)) continue;
      const c = conn(name);
      if (!c) continue;
      try {
        if ((await c.capabilities())[capability] !== undefined) out.push(name);
      } catch (e) {
        this.log.warn({ upstream: name, err: (e as Error).message }, 'upstream capabilities not readable');
      }
    }
    return out;
  }

  /**
   * Every item of one merged list, in the stable order (upstreams in configuration order, each
   * upstream's items in its order, every page of it). An upstream whose listing fails is left
   * out and logged. Updates the routes.
   */
  async merged(kind: ListKind, conn: ConnectionFor): Promise<Record<string, unknown>[]> {
    const perUpstream: { upstream: string; items: Record<string, unknown>[] }[] = [];
    for (const upstream of await this.offering(kind.capability, conn)) {
      const c = conn(upstream);
      if (!c) continue;
      try {
        perUpstream.push({ upstream, items: await listAllPages(c, kind.method, kind.key) });
      } catch (e) {
        this.log.warn({ upstream, method: kind.method, err: (e as Error).message }, 'upstream list failed');
      }
    }
    if (kind.key === 'resources') return this.mergeResources(perUpstream);
    const out: Record<string, unknown>[] = [];
    if (kind.key === 'resourceTemplates') this.templates.clear();
    for (const { upstream, items } of perUpstream) {
      for (const it of items) {
        if (typeof it.name !== 'string') continue;
        const name = this.exposed(upstream, it.name);
        if (kind.key === 'prompts') this.prompts.set(name, { upstream, name: it.name });
        else if (typeof it.uriTemplate === 'string') this.noteTemplate(upstream, it.uriTemplate);
        out.push({ ...it, name });
      }
    }
    return out;
  }

  private noteTemplate(upstream: string, uriTemplate: string): void {
    try {
      const list = this.templates.get(uriTemplate) ?? [];
      if (!list.some((t) => t.upstream === upstream))
        list.push({ upstream, template: new UriTemplate(uriTemplate) });
      this.templates.set(uriTemplate, list);
    } catch (e) {
      this.log.warn({ upstream, uriTemplate, err: (e as Error).message }, 'unusable resource template');
    }
  }

  private mergeResources(perUpstream: { upstream: string; items: Record<string, unknown>[] }[]) {
    const owners = new Map<string, Set<string>>();
    for (const { upstream, items } of perUpstream)
      for (const it of items)
        if (typeof it.uri === 'string') owners.set(it.uri, (owners.get(it.uri) ?? new Set()).add(upstream));
    const out: Record<string, unknown>[] = [];
    for (const { upstream, items } of perUpstream)
      for (const it of items) {
        if (typeof it.uri !== 'string') continue;
        const o = owners.get(it.uri) as Set<string>;
        if (o.size > 1) continue;
        this.uris.set(it.uri, upstream);
        out.push(it);
      }
    for (const [uri, o] of owners)
      if (o.size > 1) {
        if (this.uris.get(uri) !== null)
          this.log.error({ uri, upstreams: [...o] }, 'resource URI listed by several upstreams; refused');
        this.uris.set(uri, null);
      }
    return out;
  }

  /** URIs refused because several upstreams listed them, with those upstreams' names unknown here. */
  ambiguous(uri: string): boolean {
    return this.uris.get(uri) === null;
  }

  /**
   * The upstream serving a resource URI (module doc), listing resources and templates first
   * when nothing is known about it. Null when none, or several, would serve it.
   */
  async resourceRoute(uri: string, conn: ConnectionFor): Promise<Route | null> {
    if (!this.uris.has(uri)) {
      await this.merged(LISTS['resources/list'], conn);
      if (!this.uris.has(uri)) await this.merged(LISTS['resources/templates/list'], conn);
    }
    const listed = this.uris.get(uri);
    if (listed === null) return null;
    if (listed !== undefined) return { upstream: listed, name: uri };
    const matching = new Set<string>();
    for (const list of this.templates.values())
      for (const t of list) if (t.template.match(uri)) matching.add(t.upstream);
    if (matching.size === 1) return { upstream: [...matching][0] as string, name: uri };
    if (matching.size > 1) return null;
    const offering = await this.offering('resources', conn);
    return offering.length === 1 ? { upstream: offering[0] as string, name: uri } : null;
  }

  /** The upstream and upstream name of a gateway prompt name (listing prompts when unknown). */
  async promptRoute(name: string, conn: ConnectionFor): Promise<Route | null> {
    if (!this.prompts.has(name)) await this.merged(LISTS['prompts/list'], conn);
    return this.prompts.get(name) ?? null;
  }

  /** The upstream of a resource template (completion refs), by its URI template text. */
  templateRoute(uriTemplate: string): Route | null {
    const list = this.templates.get(uriTemplate);
    return list?.length === 1 && list[0] ? { upstream: list[0].upstream, name: uriTemplate } : null;
  }
}
