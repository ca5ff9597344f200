/**
 * The running policy and its signed replacement (docs/spec/policy.md#operator-controls). A reload is accepted only
 * when (in this order): a policy signing key is pinned in the config; the request carries a
 * signature; the bundle's files hash and the detached Ed25519 signature over that hash
 * verifies under the pinned key; the bundle loads and validates (Cedar diagnostics
 * otherwise); the agents and catalog tools still fit its schema; and its manifest version is
 * strictly higher than the running one (no downgrade, no re-play of the same version).
 */
import type { KeyObject } from 'node:crypto';
import type * as cedar from '@cedar-policy/cedar-wasm/nodejs';
import { fromB64u } from '@cmcp/verify/formats';
import { CmcpError } from '../errors/index.js';
import { bundleDigests, loadBundleFromFiles, type PolicyBundle, PolicyBundleError } from './bundle.js';
import { checkEntities, checkTokenAttributes, type EnforcementMode, PolicyEngine } from './engine.js';
import { verifyBundleSignature } from './signature.js';

/** Why a reload was refused (stable words, returned in `data.reason`). */
export type ReloadRefusal =
  | 'no_policy_key'
  | 'signature_missing'
  | 'signature_invalid'
  | 'bundle_invalid'
  | 'not_newer'
  | 'request_invalid';

/** A refused reload. */
export class ReloadRefusedError extends CmcpError {
  declare readonly code: 'POLICY_RELOAD_REFUSED';
  constructor(
    readonly reason: ReloadRefusal,
    message: string,
    readonly diagnostics: string[] = [],
    readonly bundleHash: string | null = null,
  ) {
    super('POLICY_RELOAD_REFUSED', message);
    this.name = 'ReloadRefusedError';
  }
}

/** A reload request body: file name → base64url (or base64) bytes, and the signature. */
export interface ReloadRequest {
  files: Record<string, string>;
  signature?: string;
}

/**
 * Decodes a reload body's files.
 * @throws ReloadRefusedError request_invalid.
 */
export function decodeReloadFiles(body: unknown): {
  files: Map<string, Buffer>;
  signature: string | undefined;
} {
  const b = body as Partial<ReloadRequest> | null;
  if (typeof b !== 'object' || b === null || Array.isArray(b))
    throw new ReloadRefusedError('request_invalid', 'body must be {files: {name: base64url}, signature}');
  if (typeof b.files !== 'object' || b.files === null || Array.isArray(b.files))
    throw new ReloadRefusedError('request_invalid', 'files must be an object of file name → base64url bytes');
  const files = new Map<string, Buffer>();
  for (const [name, v] of Object.entries(b.files)) {
    if (typeof v !== 'string')
      throw new ReloadRefusedError('request_invalid', 'every file must be a base64url string');
    try {
      files.set(name, fromB64u(v.replace(/=+$/, '').replace(/\+/g, '-').replace(/\//g, '_')));
    } catch {
      throw new ReloadRefusedError('request_invalid', 'a file is not base64url');
    }
  }
  if (b.signature !== undefined && typeof b.signature !== 'string')
    throw new ReloadRefusedError('request_invalid', 'signature must be a base64url string');
  return { files, signature: b.signature };
}

/** The running engine plus what a reload is checked against. */
export class PolicyState {
  constructor(
    private current: PolicyEngine,
    private readonly signingKey: KeyObject | null,
    /** Entities that must still fit a new bundle's schema (configured agents, catalog tools). */
    private readonly requiredEntities: () => cedar.EntityJson[],
    /** Agent attributes access tokens carry, which a new bundle's schema must declare. */
    private readonly tokenAttributes: readonly string[] = [],
  ) {}

  get engine(): PolicyEngine {
    return this.current;
  }

  get mode(): EnforcementMode {
    return this.current.mode;
  }

  /**
   * Checks a signed bundle and, if every rule holds, makes it the running one.
   * @returns the new and previous bundles.
   * @throws ReloadRefusedError with the reason (the running policy is unchanged).
   */
  reload(
    files: Map<string, Buffer>,
    signature: string | undefined,
  ): { next: PolicyBundle; previous: PolicyBundle } {
    const next = this.check(files, signature, this.current.bundle.manifest.version);
    const previous = this.current.bundle;
    this.install(next);
    return { next, previous };
  }

  /** Makes an already checked bundle the running one (after its audit entry is written). */
  install(bundle: PolicyBundle): void {
    this.current = new PolicyEngine(bundle, this.current.mode);
  }

  /**
   * Checks a signed bundle against the rules without installing it.
   * @throws ReloadRefusedError
   */
  check(files: Map<string, Buffer>, signature: string | undefined, runningVersion: number): PolicyBundle {
    if (!this.signingKey)
      throw new ReloadRefusedError(
        'no_policy_key',
        'no policy signing key is configured; reloads are disabled',
      );
    let hash: string;
    try {
      hash = bundleDigests(files).hash;
    } catch (e) {
      throw new ReloadRefusedError('bundle_invalid', (e as Error).message);
    }
    if (signature === undefined || signature === '')
      throw new ReloadRefusedError('signature_missing', 'the bundle is not signed', [], hash);
    if (!verifyBundleSignature(hash, signature, this.signingKey))
      throw new ReloadRefusedError(
        'signature_invalid',
        'the signature does not verify under the pinned policy key',
        [],
        hash,
      );
    let bundle: PolicyBundle;
    try {
      bundle = loadBundleFromFiles(files);
    } catch (e) {
      if (e instanceof PolicyBundleError)
        throw new ReloadRefusedError(
          'bundle_invalid',
          e.message.split('\n')[0] as string,
          e.diagnostics,
          hash,
        );
      throw e;
    }
    const misfits = [
      ...checkEntities(bundle, this.requiredEntities()),
      ...checkTokenAttributes(bundle, this.tokenAttributes),
    ];
    if (misfits.length)
      throw new ReloadRefusedError(
        'bundle_invalid',
        'configured agents or catalog tools do not fit the new schema',
        misfits,
        hash,
      );
    if (bundle.manifest.version <= runningVersion)
      throw new ReloadRefusedError(
        'not_newer',
        `bundle version ${bundle.manifest.version} is not higher than the running version ${runningVersion}`,
        [],
        hash,
      );
    return bundle;
  }
}
