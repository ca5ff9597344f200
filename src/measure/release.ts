/**
 * Release artifacts (docs/operations.md#release-artifact; built by scripts/release.sh): a gzip'd
 * tar of one top folder `cmcp-<version>/` holding the built gateway, its production
 * dependencies, the Node.js runtime under `.runtime/`, and a `RELEASE` file of `key=value`
 * lines (name, version, commit, source_date_epoch, node, node_integrity, platform). The
 * artifact's SHA-256 is what a deployment pins; the gateway measurement it yields with a given
 * config is what a verifier expects ({@link measureReleaseArtifact}).
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { CmcpError } from '@cmcp/verify/errors';
import { measureRelease, type ReleaseMeasurement } from './reference.js';

/** A release artifact that cannot be read as a cmcp release. */
export class ReleaseArtifactError extends CmcpError {
  declare readonly code: 'RELEASE_ARTIFACT_INVALID';
  constructor(message: string) {
    super('RELEASE_ARTIFACT_INVALID', message);
    this.name = 'ReleaseArtifactError';
  }
}

/** `sha256:<hex>` of a file, read in 1 MiB chunks. */
export function fileSha256(file: string): string {
  const h = createHash('sha256');
  const buf = Buffer.alloc(1 << 20);
  const fd = openSync(file, 'r');
  try {
    for (let n = readSync(fd, buf); n > 0; n = readSync(fd, buf)) h.update(buf.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return `sha256:${h.digest('hex')}`;
}

/** An artifact unpacked into a temporary folder; {@link UnpackedRelease.dispose} removes it. */
export interface UnpackedRelease {
  /** The artifact file as given, resolved. */
  file: string;
  /** `sha256:<hex>` of the artifact bytes: the value a deployment pins. */
  sha256: string;
  /** The unpacked top folder (the package root the gateway measures). */
  root: string;
  /** The `RELEASE` file's `key=value` lines. */
  info: Record<string, string>;
  dispose(): void;
}

function tar(args: string[], what: string): string {
  try {
    return execFileSync('tar', args, {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  } catch (e) {
    const stderr =
      String((e as { stderr?: unknown }).stderr ?? '')
        .trim()
        .split('\n')[0] ?? '';
    throw new ReleaseArtifactError(`${what}: tar failed (${stderr.slice(0, 200) || 'no message'})`);
  }
}

/**
 * Checks that every entry of the artifact is under one top folder, with no absolute path and no
 * `..` component, and returns that folder's name.
 * @throws ReleaseArtifactError otherwise, or when tar cannot list it.
 */
function topFolder(file: string): string {
  const names = tar(['-tzf', file], file).split('\n').filter(Boolean);
  const tops = new Set<string>();
  for (const n of names) {
    const parts = n.split('/').filter((p) => p !== '' && p !== '.');
    if (n.startsWith('/') || parts.includes('..') || parts.length === 0)
      throw new ReleaseArtifactError(
        `${file}: entry ${JSON.stringify(n.slice(0, 120))} leaves the release folder`,
      );
    tops.add(parts[0] as string);
  }
  const [top, ...more] = [...tops];
  if (top === undefined || more.length > 0)
    throw new ReleaseArtifactError(`${file}: a release holds exactly one top folder (found ${tops.size})`);
  return top;
}

/** Parses `key=value` lines (blank lines and `#` comments skipped). */
export function parseReleaseInfo(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (!t || t.startsWith('#')) continue;
    const i = t.indexOf('=');
    if (i > 0) out[t.slice(0, i)] = t.slice(i + 1);
  }
  return out;
}

/**
 * Unpacks a release artifact (all but the Node.js runtime, which the gateway measurement does
 * not read) into a fresh temporary folder, using the system `tar` (GNU tar: gzip, no owners kept).
 * @throws ReleaseArtifactError when the file is unreadable, not a gzip tar, has an entry outside
 *   its one top folder, or lacks `RELEASE` or `dist/src/cli/main.js`.
 */
export function unpackRelease(artifact: string): UnpackedRelease {
  const file = resolve(artifact);
  if (!existsSync(file)) throw new ReleaseArtifactError(`${file}: no such file`);
  const sha256 = fileSha256(file);
  const top = topFolder(file);
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-release-'));
  const dispose = () => rmSync(dir, { recursive: true, force: true });
  try {
    tar(
      ['-xzf', file, '-C', dir, '--no-same-owner', '--no-same-permissions', `--exclude=${top}/.runtime`],
      file,
    );
    const root = join(dir, top);
    if (!existsSync(join(root, 'RELEASE')) || !existsSync(join(root, 'dist', 'src', 'cli', 'main.js')))
      throw new ReleaseArtifactError(
        `${file}: not a cmcp release (no RELEASE and dist/src/cli/main.js in ${top}/)`,
      );
    const info = parseReleaseInfo(readFileSync(join(root, 'RELEASE'), 'utf8'));
    if (info.name !== 'cmcp') throw new ReleaseArtifactError(`${file}: RELEASE names no cmcp release`);
    return { file, sha256, root, info, dispose };
  } catch (e) {
    dispose();
    throw e;
  }
}

/** A release artifact's identity and the gateway measurement it yields with one config. */
export interface ReleaseArtifactMeasurement extends ReleaseMeasurement {
  artifact: { file: string; sha256: string; info: Record<string, string> };
}

/**
 * The gateway measurement (docs/spec/measurement.md) that the gateway of `artifact` extends or
 * binds when started with `configFile`: the artifact is unpacked and measured exactly as
 * `cmcp measure --package-root` measures an installed package.
 * @throws ReleaseArtifactError, and what {@link measureRelease} throws for the config.
 */
export function measureReleaseArtifact(opts: {
  artifact: string;
  configFile: string;
}): ReleaseArtifactMeasurement {
  const rel = unpackRelease(opts.artifact);
  try {
    const m = measureRelease({ configFile: opts.configFile, root: rel.root });
    return { ...m, root: rel.file, artifact: { file: rel.file, sha256: rel.sha256, info: rel.info } };
  } finally {
    rel.dispose();
  }
}
