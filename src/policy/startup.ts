/**
 * The policy at start-up (docs/spec/policy.md): the configured bundle is checked against the configured
 * agents and catalog tools, installed, and recorded as `policy_load` in the gateway chain with
 * its files' hashes; a newer signed reload found in the chain is resumed and recorded too.
 */

import type { KeyObject } from 'node:crypto';
import type * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import { b64u } from '@cmcp/verify/formats';
import type { CatalogGuard } from '../catalog/guard.js';
import type { GatewayConfig } from '../config/index.js';
import type { EntryInput } from '../store/port.js';
import type { UpstreamPool } from '../upstream/pool.js';
import { type PolicyBundle, PolicyBundleError } from './bundle.js';
import {
  agentEntity,
  CedarValueError,
  checkEntities,
  checkTokenAttributes,
  PolicyEngine,
  toolEntities,
} from './engine.js';
import { PolicyState } from './state.js';

/** The policy_load / policy_reload detail describing a bundle. */
export function bundleDetail(b: PolicyBundle): Record<string, unknown> {
  return {
    bundle_hash: b.hash,
    version: b.manifest.version,
    description: b.manifest.description,
    files: b.files,
    policy_ids: Object.keys(b.policies),
  };
}

/**
 * The `policy_reload` detail (docs/spec/policy.md#operator-controls): the new bundle, the one it
 * replaces, who reloaded it, and the signed files themselves (base64url), so that every replica
 * and every later start can install the same bundle from the record.
 */
export function reloadDetail(
  next: PolicyBundle,
  previous: PolicyBundle,
  r: {
    operatorId: string;
    enforcementMode: string;
    signature: string | undefined;
    files: Map<string, Buffer>;
  },
): Record<string, unknown> {
  return {
    ...bundleDetail(next),
    previous_bundle_hash: previous.hash,
    previous_version: previous.manifest.version,
    operator_id: r.operatorId,
    enforcement_mode: r.enforcementMode,
    signature: r.signature,
    bundle_files: Object.fromEntries([...r.files].map(([k, v]) => [k, b64u(v)])),
  };
}

/**
 * The entities every bundle must fit: the configured agents and the catalog's tools, under
 * their gateway names (read again at each reload: exposed names follow the live upstreams).
 * The returned function throws PolicyBundleError, naming the agent, for an agent attribute
 * Cedar cannot carry.
 */
export function configuredEntities(
  cfg: GatewayConfig,
  catalog: CatalogGuard | null,
  upstreams: UpstreamPool,
): () => cedar.EntityJson[] {
  return () => [
    ...cfg.agents.map((a) => {
      try {
        return agentEntity(a.agent_id, a.attributes as Record<string, unknown>);
      } catch (e) {
        // A value Cedar cannot carry (an entity or extension escape): the agent does not fit.
        if (!(e instanceof CedarValueError)) throw e;
        throw new PolicyBundleError('configured agents or catalog tools do not fit the policy schema', [
          // The attribute's name and the fixed reason: never the value, nor its member names.
          `Agent::${JSON.stringify(a.agent_id)}: principal.${e.path.split('/')[2] ?? ''}: ${e.reason}`,
        ]);
      }
    }),
    ...(catalog?.catalog.tools ?? []).flatMap((t) =>
      toolEntities({
        exposedName: upstreams.exposedName(t.server, t.name) ?? `${t.server}.${t.name}`,
        server: t.server,
        toolName: t.name,
        sensitivity: t.sensitivity,
        annotations: t.definition.annotations,
      }),
    ),
  ];
}

/** The Agent attributes an access token carries (`scopes` and the mapped claims), if any. */
export function tokenAttributeNames(cfg: GatewayConfig): string[] {
  return cfg.oauth ? ['scopes', ...new Set(Object.values(cfg.oauth.attribute_claims))] : [];
}

/**
 * The configured bundle checked against the configured entities and installed, unrecorded (the
 * start records its `policy_load`, {@link policyLoadEntry}; gateway/lifecycle/start.ts).
 * @param requiredEntities the configured agents and catalog tools, which must fit the schema
 *   now and after every reload.
 * @param tokenAttributes {@link tokenAttributeNames}: the schema must declare each of them.
 * @throws PolicyBundleError when configured agents or tools do not fit the bundle's schema, or
 *   it does not declare an attribute access tokens carry.
 */
export function policyState(
  bundle: PolicyBundle,
  signingKey: KeyObject | null,
  cfg: NonNullable<GatewayConfig['policy']>,
  requiredEntities: () => cedar.EntityJson[],
  tokenAttributes: readonly string[] = [],
): PolicyState {
  const misfits = [
    ...checkEntities(bundle, requiredEntities()),
    ...checkTokenAttributes(bundle, tokenAttributes),
  ];
  if (misfits.length)
    throw new PolicyBundleError('configured agents or catalog tools do not fit the policy schema', misfits);
  return new PolicyState(
    new PolicyEngine(bundle, cfg.enforcement_mode),
    signingKey,
    requiredEntities,
    tokenAttributes,
  );
}

/** The `policy_load` entry (source `config`) of the configured bundle. */
export function policyLoadEntry(
  bundle: PolicyBundle,
  signingKey: KeyObject | null,
  cfg: NonNullable<GatewayConfig['policy']>,
) {
  return {
    entry_type: 'policy_load',
    detail: {
      ...bundleDetail(bundle),
      source: 'config',
      folder: cfg.bundle,
      enforcement_mode: cfg.enforcement_mode,
      signing_key: signingKey !== null,
    },
  };
}

/** The `policy_load` entry (source `reload_resumed`) of a reload resumed from the gateway chain. */
export function resumedPolicyEntry(bundle: PolicyBundle, state: PolicyState): EntryInput {
  return {
    entry_type: 'policy_load',
    detail: { ...bundleDetail(bundle), source: 'reload_resumed', enforcement_mode: state.mode },
  };
}
