/**
 * The release package (docs/operations.md), end to end with nothing from the checkout on
 * the gateway's path: `npm pack` → `npm install -g --prefix <tmp>` of the tarball →
 * `<tmp>/bin/cmcp start` with the shipped example config (temp database, installed upstream
 * servers) serves /healthz and a tools/call through the MCP SDK client, and stops on SIGTERM.
 * Then reference values are computed from the tarball alone (`cmcp measure --package-root` on
 * the unpacked tarball: no TPM), the installed gateway runs on swtpm, and `cmcp verify
 * --reference-values` accepts its claim; one byte changed in an installed dist file makes the
 * measurement reference check fail.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { freePort } from './harness/gateway.js';
import { closedSessionFiles, exampleConfig } from './harness/installed-config.js';
import {
  type InstalledPackage,
  installedEnv,
  machinePath,
  packAndInstall,
  pinnedNodeVersion,
  runInstalled,
  startInstalled,
} from './harness/package.js';

// Building better-sqlite3 from source on a loaded 2-core machine takes minutes.
const INSTALL_TIMEOUT_MS = 20 * 60_000;

let pkg: InstalledPackage;
let work: string;

beforeAll(async () => {
  pkg = await packAndInstall();
  process.stdout.write(
    pkg.fresh
      ? `package-install: installed ${pkg.tarballSha256} in ${pkg.installSeconds} s\n`
      : `package-install: reusing the install of the identical tarball ${pkg.tarballSha256} (CMCP_PACKAGE_FRESH=1 reinstalls)\n`,
  );
  work = mkdtempSync(join(tmpdir(), 'cmcp-pkg-'));
}, INSTALL_TIMEOUT_MS);
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

describe('npm pack → npm install -g (docs/operations.md)', () => {
  it('installs on the machine as it is: where its Node is older than 22.12 (Debian 12 + Node 20), Node 24 LTS from npm goes into the same prefix first and the installed cmcp runs on it', async () => {
    expect(pkg.machineNode, 'this machine has a node on PATH').not.toBeNull();
    const version = await runInstalled(pkg.bin, ['--version'], work);
    expect(version.code, version.stderr).toBe(0);
    const node = join(pkg.prefix, 'bin', 'node');
    if (!pkg.nodeIntoPrefix) {
      // A machine Node of 22.12+ is used as it is; nothing else goes into the prefix.
      expect(() => execFileSync(node, ['--version'])).toThrow();
      return;
    }
    expect(execFileSync(node, ['--version'], { encoding: 'utf8' }).trim()).toBe(`v${pinnedNodeVersion()}`);
    // The same installed cmcp on the machine's own Node alone refuses with one line, exit 2.
    let refused: { status: number | null; stderr: string } = { status: 0, stderr: '' };
    try {
      execFileSync(pkg.bin, ['--version'], {
        env: { ...installedEnv(pkg.prefix), PATH: machinePath() },
        stdio: 'pipe',
      });
    } catch (e) {
      const err = e as { status: number | null; stderr: Buffer };
      refused = { status: err.status, stderr: err.stderr.toString() };
    }
    expect(refused.status).toBe(2);
    expect(refused.stderr).toContain(`found ${pkg.machineNode}`);
  });

  it('the tarball carries the build, the bundled @cmcp/verify, examples and attestation, and nothing of tests or sources', () => {
    for (const f of [
      'package.json',
      'dist/src/cli/main.js',
      'dist/native/tpm/index.js',
      'node_modules/@cmcp/verify/package.json',
      'node_modules/@cmcp/verify/dist/claim.js',
      'examples/cmcp.example.yaml',
      'examples/catalog.json',
      'node_modules/@cmcp/verify/attestation/trust-store.yaml',
      'bin/cmcp',
      'scripts/with-node.sh',
      'deploy/systemd/cmcp.service',
    ]) {
      expect(pkg.files, f).toContain(f);
    }
    // Our own files (third-party bundled packages ship what their authors publish).
    const own = pkg.files.filter((f) => !f.startsWith('node_modules/'));
    const unwanted = own.filter(
      (f) =>
        (/^(test|src|native|packages|bench|demo|scripts|\.ci)\//.test(f) &&
          !/^scripts\/(with-node|node-env)\.sh$/.test(f)) ||
        /^dist\/(bench|demo|test)\//.test(f) ||
        /\.test\.|tsbuildinfo|(^|\/)\.tmp\//.test(f) ||
        (/\.ts$/.test(f) && !/\.d\.ts$/.test(f)),
    );
    expect(unwanted).toEqual([]);
    // The bundled workspace package: its manifest, build and trust anchors only (no src/, no tsbuildinfo).
    const verify = pkg.files.filter((f) => f.startsWith('node_modules/@cmcp/verify/'));
    expect(
      verify.filter(
        (f) => !/^node_modules\/@cmcp\/verify\/(package\.json|README\.md|dist\/.+|attestation\/.+)$/.test(f),
      ),
    ).toEqual([]);
  });

  it('the installed `cmcp start` serves the example config: /healthz, tools/list and a tools/call through the SDK client; SIGTERM stops it', async () => {
    const dir = join(work, 'software');
    mkdirSync(dir);
    const port = await freePort();
    const file = exampleConfig(pkg.root, dir, port);
    const gw = await startInstalled(pkg.bin, file, port, dir);
    try {
      const health = await fetch(`${gw.url}/healthz`);
      expect(health.status).toBe(200);
      const client = new Client({ name: 'package-install-test', version: '0.1.0' });
      await client.connect(
        new StreamableHTTPClientTransport(new URL(`${gw.url}/mcp`), {
          requestInit: { headers: { Authorization: 'Bearer alice-token' } },
        }),
      );
      const tools = await client.listTools();
      expect(tools.tools.map((t) => t.name)).toContain('everything.echo');
      const r = await client.callTool({
        name: 'everything.echo',
        arguments: { message: 'from the tarball' },
      });
      expect(JSON.stringify(r.content)).toContain('from the tarball');
      const evidence = (r._meta as Record<string, { entry_hash?: string }> | undefined)?.[
        'dev.cmcp/evidence'
      ];
      expect(evidence?.entry_hash).toMatch(/^[0-9a-f]{64}$/);
      await client.close();
    } finally {
      const code = await gw.stop('SIGTERM');
      expect(code, gw.output()).toBe(0);
    }
    // SIGTERM drains and closes sessions with their claims, then exits 0 (docs/operations.md).
    expect(gw.output()).toMatch(/"msg":"stopping: draining in-flight calls"/);
    expect(gw.output()).toMatch(/"drained":true.*"msg":"stopped"/);
  });
});

interface Report {
  verdict: string;
  checks: { id: string; status: string; reason_code: string }[];
}
const status = (r: Report, id: string) => r.checks.find((c) => c.id === id)?.status;

describe('reference values for a release (docs/attestation.md#reference-values-for-a-release-cmcp-measure)', () => {
  let tpm: Awaited<ReturnType<typeof startSwtpm>> | undefined;
  let dir: string;
  let config: string;
  let port: number;
  let referenceValues: string;
  let fromTarball: {
    measurement: { digest: string; inputs: Record<string, unknown> };
    expected_pcr_value: string;
    measurement_pcr: number;
  };

  beforeAll(async () => {
    dir = join(work, 'tpm');
    mkdirSync(dir);
    port = await freePort();
    tpm = await startSwtpm();
    config = exampleConfig(pkg.root, dir, port, { provider: 'tpm', tcti: tpm.tcti, pcrs: [0, 1, 2, 7] });
    // The relying party's side: the tarball alone, unpacked, measured with the config.
    const unpacked = join(dir, 'unpacked');
    mkdirSync(unpacked);
    execFileSync('tar', ['-xzf', pkg.tarball, '-C', unpacked]);
    referenceValues = join(dir, 'reference-values.yaml');
    const m = await runInstalled(
      pkg.bin,
      [
        'measure',
        '--config',
        config,
        '--package-root',
        join(unpacked, 'package'),
        '--out',
        referenceValues,
        '--json',
      ],
      dir,
    );
    expect(m.code, m.stderr).toBe(0);
    fromTarball = JSON.parse(m.stdout);
  }, 120_000);
  afterAll(async () => {
    await tpm?.stop();
  });

  it('`cmcp measure` prints the digest and the PCR 15 value; the installed package measures as the tarball does', async () => {
    expect(fromTarball.measurement.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(fromTarball.measurement_pcr).toBe(15);
    const digest = Buffer.from(fromTarball.measurement.digest.slice(7), 'hex');
    const fromReset = createHash('sha256').update(Buffer.alloc(32)).update(digest).digest('hex');
    expect(fromTarball.expected_pcr_value).toBe(fromReset);
    const installed = await runInstalled(pkg.bin, ['measure', '--config', config, '--json'], dir);
    expect(installed.code, installed.stderr).toBe(0);
    expect(JSON.parse(installed.stdout).measurement).toEqual(fromTarball.measurement);
    const rv = parse(readFileSync(referenceValues, 'utf8'));
    expect(rv.gateway.measurements).toEqual([fromTarball.measurement.digest]);
    expect(rv.tpm.pcrs['15']).toEqual([fromReset]);
  });

  it('the installed gateway on swtpm issues a claim that `cmcp verify --reference-values` accepts', async () => {
    const gw = await startInstalled(pkg.bin, config, port, dir);
    let files: { claim: string; audit: string };
    try {
      files = await closedSessionFiles(gw.url, dir);
    } finally {
      expect(await gw.stop()).toBe(0);
    }
    const v = await runInstalled(
      pkg.bin,
      [
        'verify',
        files.claim,
        '--audit',
        files.audit,
        '--reference-values',
        referenceValues,
        '--require',
        'hardware-unanchored',
        '--json',
      ],
      dir,
    );
    expect(v.code, v.stdout + v.stderr).toBe(0);
    const report = JSON.parse(v.stdout) as Report;
    expect(report.checks.filter((c) => c.status === 'fail')).toEqual([]);
    for (const id of [
      'measurement.digest',
      'measurement.claim',
      'measurement.pcr',
      'measurement.reference',
      'tpm.pcr_values',
    ]) {
      expect(status(report, id), id).toBe('pass');
    }
    expect(report.verdict).toBe('hardware-unanchored');
  });

  it('one byte changed in an installed dist file: the claim fails the measurement reference check', async () => {
    const target = join(pkg.root, 'dist', 'src', 'cli', 'start.js');
    const original = readFileSync(target);
    // One byte of a log message: the gateway still runs, and measures what it runs.
    const at = original.indexOf('gateway failed to start');
    expect(at).toBeGreaterThan(0);
    const tampered = Buffer.from(original);
    tampered[at] = 'G'.charCodeAt(0);
    // The same config (and so the same swtpm): only the code differs from the reference.
    mkdirSync(join(dir, 'tampered'));
    writeFileSync(target, tampered);
    let report: Report;
    let code: number;
    let measured: { digest: string; inputs: Record<string, unknown> };
    try {
      const m = await runInstalled(pkg.bin, ['measure', '--config', config, '--json'], dir);
      expect(m.code, m.stderr).toBe(0);
      measured = JSON.parse(m.stdout).measurement;
      const gw = await startInstalled(pkg.bin, config, port, dir);
      let files: { claim: string; audit: string };
      try {
        files = await closedSessionFiles(gw.url, join(dir, 'tampered'));
      } finally {
        await gw.stop();
      }
      const v = await runInstalled(
        pkg.bin,
        [
          'verify',
          files.claim,
          '--audit',
          files.audit,
          '--reference-values',
          referenceValues,
          '--require',
          'hardware-unanchored',
          '--json',
        ],
        dir,
      );
      code = v.code;
      report = JSON.parse(v.stdout) as Report;
      // What `cmcp measure` computed is what the running gateway measured and claimed.
      expect(JSON.parse(readFileSync(files.claim, 'utf8')).gateway_measurement).toBe(measured.digest);
    } finally {
      writeFileSync(target, original);
    }
    // `cmcp measure` of the tampered installation sees it: another code digest, the same rest.
    const reference = fromTarball.measurement as unknown as typeof measured;
    expect(measured.inputs.code).not.toBe(reference.inputs.code);
    expect({ ...measured.inputs, code: null }).toEqual({ ...reference.inputs, code: null });
    expect(code).toBe(1);
    expect(report.verdict).toBe('invalid');
    const ref = report.checks.find((c) => c.id === 'measurement.reference');
    expect(ref).toMatchObject({ status: 'fail', reason_code: 'MEASUREMENT_NOT_ALLOWED' });
    // PCR 15 holds neither the reference digest nor a first extend from reset: the pin fails too.
    expect(report.checks.find((c) => c.id === 'tpm.pcr_values')?.status).toBe('fail');
    // The claim is self-consistent (the gateway measured what it ran); only the reference differs.
    for (const id of ['measurement.digest', 'measurement.claim', 'measurement.pcr']) {
      expect(status(report, id), id).toBe('pass');
    }
  });
});
