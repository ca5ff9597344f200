/**
 * Reference values for a release (docs/attestation.md#reference-values-for-a-release-cmcp-measure): the gateway measurement that an installed
 * package (or an unpacked release tarball) with a given config will extend at start-up,
 * computed from the files and the config alone — no TPM, no database, no upstreams. The inputs
 * are gathered exactly as `startGateway` gathers them (docs/attestation.md, "Gateway
 * measurement"): the validated config with its paths resolved, the policy bundle hash of
 * `policy.bundle`, the catalog hash of `catalog.file`.
 *
 * Not covered: a policy reloaded through the operator API and resumed from the database at
 * start-up (the gateway then measures the reloaded bundle; measure with that bundle in the config).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { loadCatalogFile } from '../catalog/catalog.js';
import { type GatewayConfig, loadConfig } from '../config/index.js';
import { loadBundleDir } from '../policy/bundle.js';
import { type GatewayMeasurement, measureGateway, packageRoot, pcrExtend } from './index.js';

/** What `cmcp measure` reports for one package root and config. */
export interface ReleaseMeasurement {
  /** The package root measured (holds dist/). */
  root: string;
  /** `name@version` from the root's package.json, or null when unreadable. */
  release: string | null;
  configFile: string;
  measurement: GatewayMeasurement;
  /** The measurement PCR (sha256 bank) the TPM provider extends, or null (SNP/TDX/software, or `measurement_pcr: null`). */
  pcr: number | null;
  /** PCR value after the gateway's extend from reset: SHA-256(0³² ‖ digest) (TPM 2.0 Part 3 §22.2), or null. */
  expectedPcr: Buffer | null;
}

function releaseName(root: string): string | null {
  try {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
      name?: unknown;
      version?: unknown;
    };
    return typeof pkg.name === 'string' && typeof pkg.version === 'string'
      ? `${pkg.name}@${pkg.version}`
      : null;
  } catch {
    return null;
  }
}

/** The measurement PCR the configured provider extends: tpm and auto (when it picks the TPM). */
function measurementPcr(cfg: GatewayConfig): number | null {
  const a = cfg.attestation;
  return a.provider === 'tpm' || a.provider === 'auto' ? a.measurement_pcr : null;
}

/**
 * Measures a package root with a config file as the gateway would at start-up.
 * @param opts.root package root (default: this installation's).
 * @throws ConfigError (unreadable or invalid config), PolicyBundleError, CatalogError.
 */
export function measureRelease(opts: { configFile: string; root?: string }): ReleaseMeasurement {
  const root = opts.root ?? packageRoot();
  const cfg = loadConfig(opts.configFile);
  // The same loaders as start-up: an unusable bundle or catalog refuses here as it would there.
  const catalogHash = cfg.catalog ? loadCatalogFile(cfg.catalog.file).hash : null;
  const policyBundleHash = cfg.policy ? loadBundleDir(cfg.policy.bundle).hash : null;
  const measurement = measureGateway({ root, policyBundleHash, catalogHash, config: cfg });
  const pcr = measurementPcr(cfg);
  return {
    root,
    release: releaseName(root),
    configFile: opts.configFile,
    measurement,
    pcr,
    expectedPcr: pcr === null ? null : pcrExtend(Buffer.alloc(32), measurement.bytes),
  };
}

/**
 * The reference values YAML (docs/verification.md, "Reference values") a relying party passes
 * to `cmcp verify --reference-values`: `gateway.measurements` = [the digest], and, unless
 * `pinPcr` is false or there is no measurement PCR, `tpm.pcrs[pcr]` = [SHA-256(0³² ‖ digest)] —
 * which holds only for the first gateway start after a TPM reset (a restart extends again).
 */
export function referenceValuesYaml(r: ReleaseMeasurement, opts: { pinPcr: boolean }): string {
  const inputs = r.measurement.json.inputs;
  const doc: Record<string, unknown> = {
    version: 1,
    gateway: { measurements: [r.measurement.json.digest] },
  };
  const pin = opts.pinPcr && r.pcr !== null && r.expectedPcr !== null;
  if (pin) doc.tpm = { pcrs: { [String(r.pcr)]: [r.expectedPcr?.toString('hex')] } };
  const header = [
    `Reference values written by \`cmcp measure\` for ${r.release ?? 'an unnamed package'} (${r.root})`,
    `with config ${r.configFile}. Inputs of gateway measurement v1 (docs/attestation.md):`,
    `  code ${inputs.code} (${inputs.code_files} files)`,
    `  lockfile ${inputs.lockfile ?? 'none'}`,
    `  policy_bundle_hash ${inputs.policy_bundle_hash ?? 'none'}`,
    `  catalog_hash ${inputs.catalog_hash ?? 'none'}`,
    `  config ${inputs.config}`,
    ...(pin
      ? [
          `tpm.pcrs pins measurement PCR ${r.pcr} as extended once from reset: it holds only for the`,
          'first gateway start after a TPM reset (write the file with --no-pcr-pin to leave it out).',
        ]
      : []),
  ];
  return `${header.map((l) => `# ${l}`).join('\n')}\n${stringify(doc)}`;
}
