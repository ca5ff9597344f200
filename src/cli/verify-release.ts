/**
 * `cmcp verify <claim> --expect-release ARTIFACT --config FILE [other verify options]`: verifies a
 * claim as `cmcp verify` does and, besides, requires its `gateway_measurement` to be the one the
 * release artifact (scripts/release.sh) yields with that config (`cmcp measure --release`). The
 * expected digest joins the reference values as `gateway.measurements`, so the claim's
 * `gateway.reference` check decides; a `--reference-values` file is kept, and if it lists other
 * gateway measurements the release's must be among them.
 *
 * Exit codes as `cmcp verify`; 2 also for `--expect-release` without `--config` (or `--config`
 * alone), an artifact that is not a cmcp release, or a config that does not load.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { runVerify, type VerifyCliOptions } from '@cmcp/verify/cli';
import type { Command } from 'commander';
import { parse, stringify } from 'yaml';
import { CatalogError } from '../catalog/catalog.js';
import { ConfigError } from '../config/index.js';
import { measureReleaseArtifact, ReleaseArtifactError } from '../measure/release.js';
import { PolicyBundleError } from '../policy/bundle.js';

interface ExpectReleaseOptions extends VerifyCliOptions {
  expectRelease?: string;
  config?: string;
}

/**
 * Reference values YAML text: `base` (a parsed reference values document, or null) with
 * `gateway.measurements` set to `[digest]`.
 * @throws Error when `base` lists gateway measurements that do not include `digest`.
 */
export function withReleaseMeasurement(base: unknown, digest: string): string {
  const doc: Record<string, unknown> =
    base && typeof base === 'object' && !Array.isArray(base)
      ? { ...(base as Record<string, unknown>) }
      : { version: 1 };
  const listed = (doc.gateway as { measurements?: unknown } | undefined)?.measurements;
  if (Array.isArray(listed) && !listed.includes(digest))
    throw new Error(
      `the release measurement ${digest} is not among the gateway.measurements of --reference-values`,
    );
  doc.gateway = { ...(doc.gateway as object | undefined), measurements: [digest] };
  return stringify(doc);
}

async function runExpectRelease(
  claimPath: string,
  opts: ExpectReleaseOptions,
  label: string,
): Promise<number> {
  const fail = (msg: string) => {
    process.stderr.write(`${label}: ${msg}\n`);
    return 2;
  };
  if (opts.expectRelease === undefined) {
    if (opts.config !== undefined) return fail('--config is read only with --expect-release');
    return runVerify(claimPath, opts, undefined, label);
  }
  if (opts.config === undefined)
    return fail('--expect-release needs --config: the measurement covers the config the gateway runs with');
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-expect-release-'));
  try {
    let digest: string;
    let referenceText: string;
    try {
      const m = measureReleaseArtifact({ artifact: opts.expectRelease, configFile: resolve(opts.config) });
      digest = m.measurement.json.digest;
      process.stderr.write(`${label}: release ${m.artifact.sha256} with ${m.configFile} expects ${digest}\n`);
      const base =
        opts.referenceValues === undefined ? null : parse(readFileSync(opts.referenceValues, 'utf8'));
      referenceText = withReleaseMeasurement(base, digest);
    } catch (e) {
      const known =
        e instanceof ReleaseArtifactError ||
        e instanceof ConfigError ||
        e instanceof PolicyBundleError ||
        e instanceof CatalogError;
      const code = (e as NodeJS.ErrnoException).code;
      return fail(
        known ? (e as Error).message : `${(e as Error).message.slice(0, 300)}${code ? ` (${code})` : ''}`,
      );
    }
    const file = join(dir, 'reference-values.yaml');
    writeFileSync(file, referenceText);
    const { expectRelease: _r, config: _c, ...rest } = opts;
    return await runVerify(claimPath, { ...rest, referenceValues: file }, undefined, label);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Adds `--expect-release` and `--config` to the `verify` command that @cmcp/verify/cli registered. */
export function addExpectRelease(verify: Command, label: string): void {
  verify
    .option(
      '--expect-release <artifact>',
      'release artifact (npm run release): the claim must carry the gateway measurement it yields with --config',
    )
    .option('-c, --config <file>', 'the gateway config the release runs with (for --expect-release)')
    .action(async (claimPath: string, opts: ExpectReleaseOptions) => {
      process.exitCode = await runExpectRelease(claimPath, opts, label);
    });
}
