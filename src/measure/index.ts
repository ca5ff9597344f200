/**
 * Gateway measurement (docs/spec/measurement.md): one digest over what the gateway runs — the installed
 * code (every file under `dist/` and under the bundled verify package's
 * `node_modules/@cmcp/verify/dist/`, whose formats the gateway uses; plus `package-lock.json`),
 * the policy bundle, the catalog and the effective configuration. Versioned and length-prefixed so that no two different input
 * sets encode to the same bytes. Encoding v1 (all integers big-endian; lp(x) = u32 byte length
 * of the UTF-8 text x, then the text):
 *
 *   code     = SHA-256( lp("cmcp.code/1") ‖ u32 N ‖ for each file, sorted by path bytes:
 *                        lp(path relative to the package root, "/"-separated) ‖ SHA-256(content) )
 *   lockfile = SHA-256(package-lock.json bytes), or absent
 *   config   = SHA-256( JCS(effective config) )
 *   digest   = SHA-256( lp("cmcp.gateway-measurement") ‖ u32 1 ‖
 *                        lp("code") ‖ lp(code) ‖ lp("lockfile") ‖ lp(lockfile or "") ‖
 *                        lp("policy_bundle_hash") ‖ lp(value or "") ‖ lp("catalog_hash") ‖ lp(value or "") ‖
 *                        lp("config") ‖ lp(config) )
 *
 * where every digest inside is written `sha256:<lowercase hex>`. The claim's
 * `gateway_measurement` is `sha256:<hex of digest>`; the TPM provider extends the 32 digest
 * bytes into the measurement PCR.
 */
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { MeasurementJson } from '@cmcp/verify/formats';
import { canonicalJson } from '@cmcp/verify/formats';

export const MEASUREMENT_VERSION = 1;

const sha256 = (b: Uint8Array | string) => createHash('sha256').update(b).digest();
const tagged = (b: Buffer) => `sha256:${b.toString('hex')}`;

function u32(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v >>> 0);
  return b;
}

/** lp(x): u32 byte length ‖ UTF-8 bytes. */
function lp(text: string): Buffer {
  const b = Buffer.from(text, 'utf8');
  return Buffer.concat([u32(b.length), b]);
}

/** The package root: the nearest folder above this module holding package.json. */
export function packageRoot(from = dirname(fileURLToPath(import.meta.url))): string {
  let dir = resolve(from);
  for (;;) {
    if (existsSync(join(dir, 'package.json'))) return dir;
    const up = dirname(dir);
    if (up === dir) return resolve(from);
    dir = up;
  }
}

/** Every regular file and symlink under `dir` as [posix path relative to root, content digest]. */
function listFiles(root: string, rel: string, out: [string, Buffer][]): void {
  const abs = join(root, rel);
  let names: string[];
  try {
    names = readdirSync(abs);
  } catch {
    return;
  }
  for (const n of names) {
    const relPath = `${rel}/${n}`;
    const st = lstatSync(join(root, relPath));
    if (st.isDirectory()) listFiles(root, relPath, out);
    else if (st.isSymbolicLink()) out.push([relPath, sha256(`symlink:${readlinkSync(join(root, relPath))}`)]);
    else if (st.isFile()) out.push([relPath, sha256(readFileSync(join(root, relPath)))]);
  }
}

/**
 * Folders of measured code, relative to the package root: the gateway's build, and the build of
 * the workspace package @cmcp/verify (bundled in the release tarball; a symlink to
 * packages/verify in a checkout). A folder that is absent contributes no files.
 */
export const MEASURED_CODE_DIRS = ['dist', 'node_modules/@cmcp/verify/dist'] as const;

/** Digest of the code under {@link MEASURED_CODE_DIRS} of `root`: see the module comment. */
export function codeDigest(root: string): { digest: string; files: number } {
  const files: [string, Buffer][] = [];
  for (const dir of MEASURED_CODE_DIRS) listFiles(root, dir, files);
  files.sort((a, b) => Buffer.compare(Buffer.from(a[0], 'utf8'), Buffer.from(b[0], 'utf8')));
  const h = createHash('sha256').update(lp('cmcp.code/1')).update(u32(files.length));
  for (const [p, d] of files) h.update(lp(p)).update(d);
  return { digest: tagged(h.digest()), files: files.length };
}

export interface MeasurementInputs {
  /** Package root holding dist/, the bundled verify package and package-lock.json (default: this installation's). */
  root?: string;
  policyBundleHash: string | null;
  catalogHash: string | null;
  /** The validated configuration the gateway runs with. */
  config: unknown;
}

/** The measurement digest from already-digested inputs (what a verifier recomputes). */
export function measurementDigest(inputs: MeasurementJson['inputs']): Buffer {
  return sha256(
    Buffer.concat([
      lp('cmcp.gateway-measurement'),
      u32(MEASUREMENT_VERSION),
      lp('code'),
      lp(inputs.code),
      lp('lockfile'),
      lp(inputs.lockfile ?? ''),
      lp('policy_bundle_hash'),
      lp(inputs.policy_bundle_hash ?? ''),
      lp('catalog_hash'),
      lp(inputs.catalog_hash ?? ''),
      lp('config'),
      lp(inputs.config),
    ]),
  );
}

/** A computed measurement: the claim JSON and the raw 32 digest bytes to extend. */
export interface GatewayMeasurement {
  json: MeasurementJson;
  bytes: Buffer;
}

/** Computes the gateway measurement at start-up. Reads dist/ and the lockfile synchronously. */
export function measureGateway(m: MeasurementInputs): GatewayMeasurement {
  const root = m.root ?? packageRoot();
  const code = codeDigest(root);
  const lockPath = join(root, 'package-lock.json');
  const lockfile = existsSync(lockPath) ? tagged(sha256(readFileSync(lockPath))) : null;
  // JSON round trip drops undefined members (optional config fields) before canonicalising.
  const config = tagged(sha256(canonicalJson(JSON.parse(JSON.stringify(m.config ?? null)))));
  const inputs: MeasurementJson['inputs'] = {
    code: code.digest,
    code_files: code.files,
    lockfile,
    policy_bundle_hash: m.policyBundleHash,
    catalog_hash: m.catalogHash,
    config,
  };
  const bytes = measurementDigest(inputs);
  return { json: { version: MEASUREMENT_VERSION, digest: tagged(bytes), inputs }, bytes };
}

/** The PCR value after extending `digest` into `before` (TPM 2.0 Part 3 §22.2, sha256 bank). */
export function pcrExtend(before: Buffer, digest: Buffer): Buffer {
  return createHash('sha256').update(before).update(digest).digest();
}

/**
 * The gateway measurement after a policy reload (docs/spec/policy.md#operator-controls): the same code, lockfile,
 * catalog and config inputs as `previous` (what this process started with — dist/ is not read
 * again, so a build on disk after start-up is never claimed as running), with the new policy
 * bundle hash, encoded as above.
 */
export function remeasureGateway(
  previous: GatewayMeasurement,
  change: { policyBundleHash: string | null },
): GatewayMeasurement {
  const inputs: MeasurementJson['inputs'] = {
    ...previous.json.inputs,
    policy_bundle_hash: change.policyBundleHash,
  };
  const bytes = measurementDigest(inputs);
  return { json: { version: MEASUREMENT_VERSION, digest: tagged(bytes), inputs }, bytes };
}
