/**
 * The catalog at start-up (docs/spec/policy.md#catalog): loaded before the listener opens, recorded as
 * `catalog_load` in the gateway chain with its hash (which goes into every session binding and
 * claim), and compared with the upstreams' tools from first contact on.
 */
import type { GatewayConfig } from '../config/index.js';
import type { EntryInput } from '../store/port.js';
import type { ToolDefinition, UpstreamPool } from '../upstream/pool.js';
import type { Catalog } from './catalog.js';
import type { CatalogGuard } from './guard.js';

/** A catalog file read by `loadCatalogFile`. */
export interface LoadedCatalog {
  catalog: Catalog;
  hash: string;
}

/**
 * The `catalog_load` record of a loaded catalog (docs/spec/policy.md#catalog): its hash, file,
 * pins (with sensitivity), the servers it names that are not configured, the re-list interval.
 */
export function catalogLoadEntry(
  loaded: LoadedCatalog,
  cfg: NonNullable<GatewayConfig['catalog']>,
  upstreamNames: string[],
): EntryInput {
  const configured = new Set(upstreamNames);
  return {
    entry_type: 'catalog_load',
    detail: {
      catalog_hash: loaded.hash,
      file: cfg.file,
      tools: loaded.catalog.tools.map((t) => ({
        server: t.server,
        name: t.name,
        sha256: t.sha256,
        sensitivity: t.sensitivity,
      })),
      unknown_servers: [...new Set(loaded.catalog.tools.map((t) => t.server))].filter(
        (sv) => !configured.has(sv),
      ),
      relist_interval_s: cfg.relist_interval_s,
    },
  };
}

/**
 * Compares every listing of the upstreams' tools with the guard's pins from now on (the ones
 * listed already are compared at once): call after `catalog_load` is recorded.
 */
export function watchCatalog(guard: CatalogGuard, upstreams: UpstreamPool): void {
  upstreams.observe((server, tools, trigger) => guard.observe(server, tools, trigger));
}

/** What `tools/list` shows under a catalog: the approved definitions of usable pins, under gateway names. */
export function catalogToolList(guard: CatalogGuard, upstreams: UpstreamPool): ToolDefinition[] {
  return guard.usable().flatMap((t) => {
    const exposed = upstreams.exposedName(t.server, t.name);
    return exposed ? [{ ...t.definition, name: exposed }] : [];
  });
}
