/**
 * deploy/ (deploy/README.md), checked as far as this machine allows: the systemd unit and its
 * attestation drop-ins with `systemd-analyze verify` and `systemd-analyze security --offline`,
 * the sysusers/tmpfiles entries by installing them into a temp root with
 * deploy/install-service.sh, the cloud-init user data with `cloud-init schema`, and the
 * Containerfile by reading its instructions (no container engine here: it is not built).
 * A tool that is absent skips its tests with a visible message; CMCP_REQUIRE_DEPLOY_TOOLS=1
 * (CI) makes an absent tool a failure.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { parseConfig } from '../src/config/index.js';
import { REPO_ROOT } from './harness/gateway.js';

const DEPLOY = join(REPO_ROOT, 'deploy');
const PROVIDERS = ['tpm', 'sev-snp', 'tdx', 'auto'] as const;
const temp = mkdtempSync(join(tmpdir(), 'cmcp-deploy-'));
afterAll(() => rmSync(temp, { recursive: true, force: true }));

function hasTool(tool: string): boolean {
  const found = spawnSync('sh', ['-c', `command -v ${tool}`]).status === 0;
  if (!found) {
    const msg = `${tool} not found: its deploy checks are skipped (Debian: see deploy/README.md)`;
    if (process.env.CMCP_REQUIRE_DEPLOY_TOOLS === '1') throw new Error(`${msg}; CMCP_REQUIRE_DEPLOY_TOOLS=1`);
    process.stdout.write(`deploy.test: SKIP — ${msg}\n`);
  }
  return found;
}

function sh(cmd: string, args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', env: { ...process.env, ...env } });
  return { code: r.status, out: `${r.stdout}${r.stderr}`.trim() };
}

/** `Key=value` lines of a unit file or drop-in, in order (systemd.syntax(7): no continuations used). */
function unitEntries(text: string): [string, string][] {
  return text
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#') && !l.startsWith(';') && !l.startsWith('['))
    .map((l) => {
      const i = l.indexOf('=');
      return [l.slice(0, i), l.slice(i + 1)] as [string, string];
    });
}
const values = (entries: [string, string][], key: string) =>
  entries.filter(([k]) => k === key).flatMap(([, v]) => v.split(/\s+/).filter(Boolean));

/** Installs the service into a temp root with deploy/install-service.sh (ExecStart → an existing binary). */
function installInto(provider: string): string {
  const root = mkdtempSync(join(temp, `root-${provider}-`));
  const r = sh('bash', [join(DEPLOY, 'install-service.sh'), provider], {
    CMCP_ROOT: root,
    // /usr/local/bin/cmcp is not installed on this machine; verify needs an executable there.
    CMCP_BIN: process.execPath,
  });
  expect(r.code, r.out).toBe(0);
  return root;
}

const systemdOk = hasTool('systemd-analyze') && hasTool('systemd-sysusers') && hasTool('systemd-tmpfiles');

describe('systemd unit, drop-ins, sysusers and tmpfiles', () => {
  const unit = unitEntries(readFileSync(join(DEPLOY, 'systemd', 'cmcp.service'), 'utf8'));
  const get = (k: string) => unit.filter(([key]) => key === k).map(([, v]) => v);

  it('runs the gateway as its own user, sandboxed, with a state directory and SIGTERM shutdown', () => {
    expect(get('User')).toEqual(['cmcp']);
    expect(get('ExecStart')).toEqual(['/usr/local/bin/cmcp start --config /etc/cmcp/cmcp.yaml']);
    expect(get('StateDirectory')).toEqual(['cmcp']);
    expect(get('WorkingDirectory')).toEqual(['/var/lib/cmcp']);
    expect(get('KillSignal')).toEqual(['SIGTERM']);
    for (const [k, v] of [
      ['ProtectSystem', 'strict'],
      ['PrivateDevices', 'yes'],
      ['DevicePolicy', 'closed'],
      ['NoNewPrivileges', 'yes'],
      ['CapabilityBoundingSet', ''],
      ['ProtectKernelTunables', 'yes'],
    ] as const) {
      expect(get(k), k).toEqual([v]);
    }
    // The base unit opens no device: that is the drop-ins' job.
    expect(get('DeviceAllow')).toEqual([]);
    expect(get('BindPaths')).toEqual([]);
  });

  it('each drop-in opens exactly the evidence paths of its provider, at the config defaults', () => {
    const cfg = parseConfig({
      database: '/var/lib/cmcp/cmcp.db',
      agents: [],
      dev_mode: true,
      attestation: { provider: 'auto' },
    });
    const a = cfg.attestation as { tsm_path: string; sev_guest_device: string; tcti: string };
    const tpmDevice = a.tcti.replace(/^device:/, '');
    const expected: Record<(typeof PROVIDERS)[number], { devices: string[]; rw: string[] }> = {
      tpm: { devices: [tpmDevice], rw: [] },
      'sev-snp': { devices: [a.sev_guest_device], rw: [a.tsm_path] },
      tdx: { devices: [], rw: [a.tsm_path] },
      auto: { devices: [a.sev_guest_device, tpmDevice], rw: [a.tsm_path] },
    };
    for (const p of PROVIDERS) {
      const e = unitEntries(readFileSync(join(DEPLOY, 'systemd', 'attestation', `${p}.conf`), 'utf8'));
      const allow = e.filter(([k]) => k === 'DeviceAllow').map(([, v]) => v.split(/\s+/)[0]);
      const bind = values(e, 'BindPaths').map((v) => v.replace(/^-/, ''));
      const rw = values(e, 'ReadWritePaths').map((v) => v.replace(/^-/, ''));
      expect(allow.sort(), p).toEqual([...expected[p].devices].sort());
      expect(bind.sort(), p).toEqual([...expected[p].devices].sort());
      expect(rw, p).toEqual(expected[p].rw);
    }
  });

  it.runIf(systemdOk)('systemd-analyze verify accepts the unit with every drop-in, without a warning', () => {
    for (const p of PROVIDERS) {
      const root = installInto(p);
      const r = sh('systemd-analyze', ['verify', 'cmcp.service'], {
        SYSTEMD_UNIT_PATH: `${join(root, 'etc', 'systemd', 'system')}:`,
      });
      expect(r, p).toEqual({ code: 0, out: '' });
      // Exposure is scored 0.0–10.0; --threshold is in tenths: fail above 2.0.
      const s = sh('systemd-analyze', ['security', '--offline=yes', '--threshold=20', 'cmcp.service'], {
        SYSTEMD_UNIT_PATH: `${join(root, 'etc', 'systemd', 'system')}:`,
      });
      expect(s.code, s.out).toBe(0);
      expect(s.out).toMatch(/Overall exposure level for cmcp\.service: 1\.\d OK/);
    }
  });

  it.runIf(systemdOk)('the verify check can fail: an unknown key and a missing binary are reported', () => {
    const root = installInto('tpm');
    const dropIn = join(root, 'etc', 'systemd', 'system', 'cmcp.service.d', 'attestation.conf');
    writeFileSync(dropIn, `${readFileSync(dropIn, 'utf8')}DeviceAlow=/dev/tpm0 rw\n`);
    const unitFile = join(root, 'etc', 'systemd', 'system', 'cmcp.service');
    writeFileSync(unitFile, readFileSync(unitFile, 'utf8').replace(process.execPath, '/nonexistent/cmcp'));
    const r = sh('systemd-analyze', ['verify', 'cmcp.service'], {
      SYSTEMD_UNIT_PATH: `${join(root, 'etc', 'systemd', 'system')}:`,
    });
    expect(r.out).toMatch(/Unknown key 'DeviceAlow'/);
    expect(r.out).toMatch(/\/nonexistent\/cmcp is not executable/);
  });

  it.runIf(systemdOk)(
    'sysusers creates the cmcp system user (no shell, in group tss); tmpfiles makes /var/lib/cmcp 0700',
    () => {
      const root = installInto('auto');
      const passwd = readFileSync(join(root, 'etc', 'passwd'), 'utf8');
      const user = passwd
        .split('\n')
        .find((l) => l.startsWith('cmcp:'))
        ?.split(':');
      expect(user?.[5]).toBe('/var/lib/cmcp');
      expect(user?.[6]).toBe('/usr/sbin/nologin');
      expect(Number(user?.[2])).toBeLessThan(1000);
      const tss = readFileSync(join(root, 'etc', 'group'), 'utf8')
        .split('\n')
        .find((l) => l.startsWith('tss:'));
      expect(tss?.split(':')[3]?.split(',')).toContain('cmcp');
      const st = statSync(join(root, 'var', 'lib', 'cmcp'));
      expect(st.mode & 0o777).toBe(0o700);
      expect(readFileSync(join(root, 'etc', 'udev', 'rules.d', '60-cmcp.rules'), 'utf8')).toMatch(
        /KERNEL=="sev-guest".*GROUP="cmcp", MODE="0660"/,
      );
    },
  );
});

/** The write_files entry at `path` of a cloud-config. */
function writeFile(doc: { write_files: { path: string; content: string }[] }, path: string): string {
  const f = doc.write_files.find((w) => w.path === path);
  if (!f) throw new Error(`no write_files entry ${path}`);
  return f.content;
}

const cloudInitOk = hasTool('cloud-init');

describe('cloud-init user data (Azure confidential VM, Google Confidential VM, AWS SEV-SNP)', () => {
  const files = {
    'azure-cvm.yaml': 'tpm',
    'gcp-confidential-vm.yaml': 'auto',
    'aws-sev-snp.yaml': 'sev-snp',
  } as const;

  it.runIf(cloudInitOk)('cloud-init schema accepts each; a wrong key is refused', () => {
    for (const f of Object.keys(files)) {
      const r = sh('cloud-init', ['schema', '--config-file', join(DEPLOY, 'cloud-init', f)]);
      expect(r, f).toEqual({ code: 0, out: `Valid cloud-config: ${join(DEPLOY, 'cloud-init', f)}` });
    }
    const bad = join(temp, 'bad.yaml');
    writeFileSync(
      bad,
      readFileSync(join(DEPLOY, 'cloud-init', 'azure-cvm.yaml'), 'utf8').replace(
        'write_files:',
        'package_update: often\nwrite_files:',
      ),
    );
    const r = sh('cloud-init', ['schema', '--config-file', bad]);
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/package_update: 'often' is not of type 'boolean'/);
  });

  it('each writes a config the gateway accepts, for the provider its drop-in is chosen by, and the shared bootstrap', () => {
    const bootstrap = readFileSync(join(DEPLOY, 'cloud-init', 'bootstrap.sh'), 'utf8');
    for (const [f, provider] of Object.entries(files)) {
      const doc = parse(readFileSync(join(DEPLOY, 'cloud-init', f), 'utf8'));
      const cfg = parseConfig(parse(writeFile(doc, '/etc/cmcp/cmcp.yaml')), f);
      expect(cfg.attestation.provider, f).toBe(provider);
      expect(cfg.dev_mode).toBe(false);
      expect(dirname(cfg.database)).toBe('/var/lib/cmcp');
      expect(writeFile(doc, '/etc/cmcp/release.env')).toMatch(new RegExp(`^CMCP_PROVIDER=${provider}$`, 'm'));
      expect(writeFile(doc, '/usr/local/sbin/cmcp-bootstrap'), f).toBe(bootstrap);
      expect(doc.runcmd).toEqual([['/usr/local/sbin/cmcp-bootstrap']]);
      expect(cfg.attestation.minimum_tier).toBe(provider === 'tpm' ? 'tpm' : 'tee');
      // Nothing installed at boot but the pinned release: no package lists, no npm, no Node download.
      expect(doc.packages, f).toBeUndefined();
      expect(doc.package_update, f).toBeUndefined();
      expect(writeFile(doc, '/etc/cmcp/release.env')).toMatch(/^CMCP_RELEASE_SHA256=REPLACE$/m);
    }
    // Every download is checked against the pinned SHA-256 before it is unpacked.
    const lines = bootstrap.split('\n').filter((l) => !l.trimStart().startsWith('#'));
    expect(lines.join('\n')).not.toMatch(/\bnpm\b|nodejs\.org|apt-get/);
    const fetch = lines.findIndex((l) => l.startsWith('curl '));
    expect(lines.filter((l) => l.startsWith('curl ')).length).toBe(1);
    expect(lines[fetch + 1]).toMatch(/^echo "\$\{CMCP_RELEASE_SHA256\} {2}.*" \| sha256sum -c -$/);
    expect(lines.findIndex((l) => l.startsWith('tar '))).toBeGreaterThan(fetch + 1);
    for (const script of [join(DEPLOY, 'cloud-init', 'bootstrap.sh'), join(DEPLOY, 'install-service.sh')]) {
      expect(() => execFileSync('bash', ['-n', script])).not.toThrow();
    }
  });

  it('the bootstrap refuses to run with the release placeholders left in', () => {
    const dir = mkdtempSync(join(temp, 'boot-'));
    const env = join(dir, 'release.env');
    const doc = parse(readFileSync(join(DEPLOY, 'cloud-init', 'azure-cvm.yaml'), 'utf8'));
    writeFileSync(env, writeFile(doc, '/etc/cmcp/release.env'));
    const script = readFileSync(join(DEPLOY, 'cloud-init', 'bootstrap.sh'), 'utf8').replace(
      '/etc/cmcp/release.env',
      env,
    );
    writeFileSync(join(dir, 'bootstrap.sh'), script);
    const r = sh('bash', [join(dir, 'bootstrap.sh')]);
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/set CMCP_RELEASE_URL in/);
  });

  it('the bootstrap refuses an artifact whose SHA-256 is not the pinned one, before unpacking anything', () => {
    const dir = mkdtempSync(join(temp, 'boot-hash-'));
    const artifact = join(dir, 'cmcp-release.tar.gz');
    writeFileSync(artifact, 'not the release that was pinned');
    const env = join(dir, 'release.env');
    writeFileSync(
      env,
      `CMCP_RELEASE_URL=file://${artifact}\nCMCP_RELEASE_SHA256=${'a'.repeat(64)}\nCMCP_PROVIDER=tpm\n`,
    );
    const script = readFileSync(join(DEPLOY, 'cloud-init', 'bootstrap.sh'), 'utf8')
      .replace('/etc/cmcp/release.env', env)
      .replaceAll('/opt/cmcp', join(dir, 'opt'));
    writeFileSync(join(dir, 'bootstrap.sh'), script);
    const r = sh('bash', [join(dir, 'bootstrap.sh')]);
    expect(r.code).not.toBe(0);
    expect(r.out).toMatch(/FAILED/);
    expect(existsSync(join(dir, 'opt'))).toBe(false);
    writeFileSync(env, `CMCP_RELEASE_URL=file://${artifact}\nCMCP_RELEASE_SHA256=ABC\nCMCP_PROVIDER=tpm\n`);
    expect(sh('bash', [join(dir, 'bootstrap.sh')]).out).toMatch(/must be 64 lowercase hex digits/);
  });
});

const shellcheckOk = hasTool('shellcheck');

describe('shell scripts of deploy/ and the release', () => {
  it.runIf(shellcheckOk)(
    'shellcheck finds nothing in them; a control with an unquoted expansion is reported',
    () => {
      const scripts = [
        join(DEPLOY, 'install-service.sh'),
        join(DEPLOY, 'cloud-init', 'bootstrap.sh'),
        join(DEPLOY, 'debian', 'build-deb.sh'),
        join(REPO_ROOT, 'scripts', 'release.sh'),
        join(REPO_ROOT, 'scripts', 'node-env.sh'),
        join(REPO_ROOT, 'scripts', 'with-node.sh'),
        join(REPO_ROOT, 'bin', 'cmcp'),
      ];
      const r = sh('shellcheck', ['--external-sources', ...scripts]);
      expect(r, r.out).toEqual({ code: 0, out: '' });
      const bad = join(temp, 'bad.sh');
      writeFileSync(bad, '#!/usr/bin/env bash\nrm -rf $1/x\n');
      expect(sh('shellcheck', [bad]).out).toMatch(/SC2086/);
    },
  );
});

/** Instructions of a Containerfile: [KEYWORD, arguments] with `\` continuations joined. */
function containerInstructions(text: string): [string, string][] {
  const out: [string, string][] = [];
  let pending = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!pending && (line.startsWith('#') || !line)) continue;
    if (line.startsWith('#')) continue;
    pending += `${line.replace(/\\$/, '').trim()} `;
    if (line.endsWith('\\')) continue;
    const [kw = '', ...rest] = pending.trim().split(/\s+/);
    out.push([kw.toUpperCase(), rest.join(' ')]);
    pending = '';
  }
  return out;
}

describe('OCI image definition (deploy/oci/Containerfile; read, not built)', () => {
  const all = containerInstructions(readFileSync(join(DEPLOY, 'oci', 'Containerfile'), 'utf8'));
  const lastFrom = all.map(([k]) => k).lastIndexOf('FROM');
  const final = all.slice(lastFrom);
  const one = (kw: string) => final.filter(([k]) => k === kw).map(([, v]) => v);
  const cfg = parseConfig(
    parse(readFileSync(join(DEPLOY, 'oci', 'cmcp.container.yaml'), 'utf8')),
    'cmcp.container.yaml',
  );

  it('the final stage runs as a numeric non-root user and nothing after switches back', () => {
    const users = one('USER');
    expect(users.length).toBe(1);
    const [uid, gid] = (users[0] ?? '').split(':').map(Number);
    expect(uid).toBeGreaterThan(0);
    expect(gid).toBeGreaterThan(0);
    const afterUser = final.slice(final.findIndex(([k]) => k === 'USER') + 1).map(([k]) => k);
    expect(afterUser).not.toContain('RUN');
  });

  it('a read-only root: writable paths are the state volume (the config database folder) and /tmp only', () => {
    expect(one('VOLUME')).toEqual([`["${dirname(cfg.database)}"]`]);
    const labels = one('LABEL').join(' ');
    expect(labels).toMatch(/dev\.cmcp\.read-only-rootfs="required"/);
    expect(labels).toMatch(new RegExp(`dev\\.cmcp\\.writable-paths="${dirname(cfg.database)} /tmp"`));
    expect(all.map(([k]) => k)).not.toContain('ADD');
  });

  it('exposes the configured port, checks /healthz, stops on SIGTERM, runs the installed cmcp start', () => {
    expect(one('EXPOSE')).toEqual([String(cfg.listen.port)]);
    // TLS ends in the gateway: liveness over https on loopback (identity is the agents' check, not this one).
    expect(one('HEALTHCHECK').join(' ')).toContain(`https://127.0.0.1:${cfg.listen.port}/healthz`);
    expect(one('STOPSIGNAL')).toEqual(['SIGTERM']);
    expect(JSON.parse(one('ENTRYPOINT')[0] ?? '[]')).toEqual(['/opt/cmcp/bin/cmcp']);
    expect(JSON.parse(one('CMD')[0] ?? '[]')).toEqual(['start', '--config', '/etc/cmcp/cmcp.yaml']);
    // The release artifact is unpacked unchanged where ENTRYPOINT and the example upstream expect
    // it; nothing is installed from npm.
    expect(all.find(([k, v]) => k === 'RUN' && v.includes('tar -xzf'))?.[1]).toContain(
      '-C /opt/cmcp --strip-components=1',
    );
    expect(all.map(([, v]) => v).join('\n')).not.toMatch(/\bnpm\b/);
    const upstream = cfg.upstreams[0] as { args: string[] };
    expect(upstream.args[0]?.startsWith('/opt/cmcp/node_modules/')).toBe(true);
    expect(cfg.attestation.minimum_tier).toBe('tee');
  });
});
