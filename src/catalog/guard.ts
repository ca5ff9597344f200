/**
 * Enforces the catalog against live upstream tool lists (docs/spec/policy.md#catalog). Each time an
 * upstream's tools are listed — at first contact, after `notifications/tools/list_changed`,
 * and on the periodic re-list — every pinned tool of that upstream is re-hashed. A tool
 * whose live definition differs from its pin (or that disappeared) is blocked alone, and a
 * `catalog_drift` entry in the gateway chain records the old and new hashes. When the live
 * definition matches its pin again the block is lifted and `catalog_drift_cleared` recorded.
 */

import { GATEWAY_CHAIN_ID } from '@cmcp/verify/formats';
import type { Logger } from 'pino';
import type { GatewayChainSink } from '../store/port.js';
import { type Catalog, type CatalogTool, definitionHash } from './catalog.js';

/** What triggered a re-check. */
export type ListTrigger = 'first_contact' | 'list_changed' | 'interval';

/** Result of {@link CatalogGuard.check}. */
export type CatalogCheck =
  | { kind: 'ok'; tool: CatalogTool }
  | { kind: 'not_in_catalog' }
  | { kind: 'drift'; tool: CatalogTool; pinned: string; live: string | null };

const key = (server: string, name: string) => `${server}\u0000${name}`;

export class CatalogGuard {
  private readonly byKey = new Map<string, CatalogTool>();
  /** key → live hash (null: tool missing upstream) for drifted tools. */
  private readonly drifted = new Map<string, string | null>();
  /** Servers whose tools have been compared at least once. */
  private readonly seen = new Set<string>();

  constructor(
    readonly catalog: Catalog,
    readonly hash: string,
    /** Where drift records go: the SQLite AuditChain, or a replica's gateway chain on PostgreSQL. */
    private readonly chain: GatewayChainSink,
    private readonly log: Logger,
  ) {
    for (const t of catalog.tools) this.byKey.set(key(t.server, t.name), t);
  }

  /**
   * Compares an upstream's live tool list with the pins of that upstream; records drift and
   * recovery in the gateway chain. Never throws (a failed audit write is logged and the tool
   * stays blocked).
   */
  observe(server: string, tools: ({ name: string } & Record<string, unknown>)[], trigger: ListTrigger): void {
    this.seen.add(server);
    const live = new Map(tools.map((t) => [t.name, t] as const));
    for (const pin of this.catalog.tools) {
      if (pin.server !== server) continue;
      const k = key(server, pin.name);
      const def = live.get(pin.name);
      let liveHash: string | null = null;
      if (def) {
        try {
          liveHash = definitionHash(def);
        } catch {
          liveHash = 'unhashable';
        }
      }
      const wasDrifted = this.drifted.has(k);
      if (liveHash === pin.sha256) {
        if (wasDrifted) {
          this.drifted.delete(k);
          this.record('catalog_drift_cleared', pin, { pinned_hash: pin.sha256, trigger });
          this.log.info({ server, tool: pin.name }, 'catalog drift cleared: live definition matches its pin');
        }
        continue;
      }
      if (wasDrifted && this.drifted.get(k) === liveHash) continue; // already recorded
      this.drifted.set(k, liveHash);
      this.record('catalog_drift', pin, { old_hash: pin.sha256, new_hash: liveHash, trigger });
      this.log.warn(
        { server, tool: pin.name, old_hash: pin.sha256, new_hash: liveHash, trigger },
        'catalog drift: tool blocked',
      );
    }
  }

  private record(entryType: string, pin: CatalogTool, detail: Record<string, unknown>): void {
    // Written at once when the lock is free; a lock held by another process is waited for by
    // awaiting (store/sqlite/db.ts immediateAsync). The block itself is in effect already.
    this.chain
      .appendAwaited(GATEWAY_CHAIN_ID, {
        entry_type: entryType,
        tool_name: pin.name,
        server_identity: pin.server,
        detail: { catalog_hash: this.hash, ...detail },
      })
      .catch((e) => this.log.error({ err: (e as Error).message }, `could not record ${entryType}`));
  }

  /** Whether a call to `server`/`name` may proceed as far as the catalog is concerned. */
  check(server: string, name: string): CatalogCheck {
    const k = key(server, name);
    const tool = this.byKey.get(k);
    if (!tool) return { kind: 'not_in_catalog' };
    if (this.drifted.has(k) || !this.seen.has(server))
      return { kind: 'drift', tool, pinned: tool.sha256, live: this.drifted.get(k) ?? null };
    return { kind: 'ok', tool };
  }

  /** The pin of a tool, if any. */
  find(server: string, name: string): CatalogTool | undefined {
    return this.byKey.get(key(server, name));
  }

  /** The pin whose gateway name is `exposed` (names computed by `nameOf`), if any. */
  findExposed(
    exposed: string,
    nameOf: (server: string, tool: string) => string | undefined,
  ): CatalogTool | undefined {
    return this.catalog.tools.find((t) => nameOf(t.server, t.name) === exposed);
  }

  /** Pins that are currently usable (seen and not drifted). */
  usable(): CatalogTool[] {
    return this.catalog.tools.filter(
      (t) => this.seen.has(t.server) && !this.drifted.has(key(t.server, t.name)),
    );
  }

  /** Currently drifted tools with their live hashes. */
  driftedTools(): { server: string; name: string; pinned: string; live: string | null }[] {
    return this.catalog.tools
      .filter((t) => this.drifted.has(key(t.server, t.name)))
      .map((t) => ({
        server: t.server,
        name: t.name,
        pinned: t.sha256,
        live: this.drifted.get(key(t.server, t.name)) ?? null,
      }));
  }
}
