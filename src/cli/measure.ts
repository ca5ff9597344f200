/**
 * `cmcp measure --config FILE [--package-root DIR | --release ARTIFACT] [--out FILE] [--no-pcr-pin]
 * [--json]`: the gateway measurement digest and the expected measurement-PCR value of an
 * installed package (or an unpacked tarball, or a release artifact of scripts/release.sh) with a
 * config, computed from the files alone; `--out` writes the reference values a relying party
 * passes to `cmcp verify --reference-values`.
 *
 * Exit codes: 0 on success; 2 for an unreadable or invalid config, policy bundle or catalog, or
 * an unwritable output file, or a release artifact that is not one (one line, no stack trace).
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { CatalogError } from '../catalog/catalog.js';
import { ConfigError } from '../config/index.js';
import { measureRelease, type ReleaseMeasurement, referenceValuesYaml } from '../measure/reference.js';
import {
  measureReleaseArtifact,
  ReleaseArtifactError,
  type ReleaseArtifactMeasurement,
} from '../measure/release.js';
import { PolicyBundleError } from '../policy/bundle.js';

interface MeasureCliOptions {
  config: string;
  packageRoot?: string;
  /** A release artifact (scripts/release.sh) to measure instead of an installed package. */
  release?: string;
  out?: string;
  /** false with `--no-pcr-pin`. */
  pcrPin: boolean;
  json?: boolean;
}

/** The release artifact measured, when `r` came from `--release`. */
function artifactOf(
  r: ReleaseMeasurement | ReleaseArtifactMeasurement,
): ReleaseArtifactMeasurement['artifact'] | null {
  return 'artifact' in r ? (r as ReleaseArtifactMeasurement).artifact : null;
}

function renderText(r: ReleaseMeasurement | ReleaseArtifactMeasurement): string {
  const i = r.measurement.json.inputs;
  const artifact = artifactOf(r);
  const rows: [string, string][] = [
    ['package', `${r.root}${r.release ? ` (${r.release})` : ''}`],
    ...(artifact
      ? ([
          ['release artifact', artifact.sha256],
          ['release commit', artifact.info.commit ?? 'unknown'],
          [
            'release runtime',
            `node ${artifact.info.node ?? 'unknown'} (${artifact.info.platform ?? 'unknown'})`,
          ],
        ] as [string, string][])
      : []),
    ['config', r.configFile],
    ['code', `${i.code} (${i.code_files} files)`],
    ['lockfile', i.lockfile ?? 'none'],
    ['policy_bundle_hash', i.policy_bundle_hash ?? 'none'],
    ['catalog_hash', i.catalog_hash ?? 'none'],
    ['config digest', i.config],
    ['gateway_measurement', r.measurement.json.digest],
    [
      'measurement PCR',
      r.pcr === null || r.expectedPcr === null
        ? 'none (the configured provider extends no PCR)'
        : `${r.pcr} (sha256) = ${r.expectedPcr.toString('hex')} after one extend from reset`,
    ],
  ];
  return `${rows.map(([k, v]) => `${k.padEnd(20)} ${v}`).join('\n')}\n`;
}

/** Runs the measure command; returns the exit code. Never throws. */
export function runMeasure(opts: MeasureCliOptions): number {
  // A wrong --package-root would measure nothing and still write reference values.
  if (opts.packageRoot !== undefined) {
    const root = resolve(opts.packageRoot);
    if (!existsSync(join(root, 'package.json')) || !existsSync(join(root, 'dist', 'src', 'cli', 'main.js'))) {
      process.stderr.write(
        `cmcp measure: --package-root ${root} is not a cmcp package (no package.json and dist/src/cli/main.js)\n`,
      );
      return 2;
    }
  }
  if (opts.packageRoot !== undefined && opts.release !== undefined) {
    process.stderr.write('cmcp measure: --package-root and --release name two packages: give one\n');
    return 2;
  }
  let r: ReleaseMeasurement | ReleaseArtifactMeasurement;
  try {
    const configFile = resolve(opts.config);
    r =
      opts.release !== undefined
        ? measureReleaseArtifact({ artifact: opts.release, configFile })
        : measureRelease({ configFile, ...(opts.packageRoot ? { root: resolve(opts.packageRoot) } : {}) });
  } catch (e) {
    if (
      e instanceof ConfigError ||
      e instanceof PolicyBundleError ||
      e instanceof CatalogError ||
      e instanceof ReleaseArtifactError
    ) {
      process.stderr.write(`cmcp measure: ${e.message}\n`);
      return 2;
    }
    process.stderr.write(`cmcp measure: internal error: ${(e as Error).message.slice(0, 300)}\n`);
    return 2;
  }
  if (opts.out !== undefined) {
    try {
      writeFileSync(opts.out, referenceValuesYaml(r, { pinPcr: opts.pcrPin }));
    } catch (e) {
      process.stderr.write(
        `cmcp measure: cannot write ${opts.out} (${(e as NodeJS.ErrnoException).code ?? 'error'})\n`,
      );
      return 2;
    }
  }
  const artifact = artifactOf(r);
  if (opts.json) {
    process.stdout.write(
      `${JSON.stringify(
        {
          package_root: r.root,
          release: r.release,
          ...(artifact ? { release_artifact: { sha256: artifact.sha256, ...artifact.info } } : {}),
          config: r.configFile,
          measurement: r.measurement.json,
          measurement_pcr: r.pcr,
          expected_pcr_value: r.expectedPcr?.toString('hex') ?? null,
        },
        null,
        2,
      )}\n`,
    );
  } else process.stdout.write(renderText(r));
  return 0;
}

/** Adds `measure` to `program`; sets `process.exitCode` from {@link runMeasure}. */
export function registerMeasureCommand(program: Command): void {
  program
    .command('measure')
    .description(
      'print the gateway measurement and expected measurement-PCR value of this package with a config; --out writes reference values',
    )
    .requiredOption('-c, --config <file>', 'YAML configuration file, at the path the gateway will use')
    .option(
      '--package-root <dir>',
      'package to measure (default: this installation; e.g. an unpacked tarball)',
    )
    .option('--release <artifact>', 'release artifact (npm run release) to measure instead of a package')
    .option('--out <file>', 'write reference values YAML for `cmcp verify --reference-values`')
    .option(
      '--no-pcr-pin',
      'leave the measurement PCR value (valid only for a start from TPM reset) out of --out',
    )
    .option('--json', 'print JSON')
    .action((opts: MeasureCliOptions) => {
      process.exitCode = runMeasure(opts);
    });
}
