/**
 * Issue 16 item 5, the command line: `cmcp start --check` validates a config and reaches every
 * upstream and the attestation provider without starting; `--help` marks required options;
 * `cmcp token --operator` mints an operator token and says so. The built CLI, as a user runs it.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { LATEST_SCHEMA_VERSION } from '../src/store/migrations/index.js';
import { openDatabase } from '../src/store/sqlite/db.js';
import { cleanup, everythingUpstream, freePort, REPO_ROOT, writeConfig } from './harness/gateway.js';

const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
function cmcp(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 90_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('cmcp start --check', () => {
  it('passes a good config and lists each upstream with its tool count; nothing is started or written', async () => {
    const cfg = await writeConfig({ upstreams: [everythingUpstream('ev')], port: await freePort() });
    try {
      const r = cmcp('start', '--check', '--config', cfg.file);
      expect(r.code).toBe(0);
      expect(r.out).toMatch(/ok\s+config\s+1 upstream\(s\), 2 agent\(s\)/);
      expect(r.out).toMatch(/warn\s+attestation \(software\)\s+software .*attests nothing/);
      expect(r.out).toMatch(/ok\s+upstream ev\s+stdio .*: \d+ tools/);
      expect(r.out).toMatch(/ok\s+listen\s+127\.0\.0\.1:\d+ is free/);
      expect(r.out).toContain('all checks passed');
      expect(spawnSync('test', ['-e', cfg.dbPath]).status).not.toBe(0); // no database created
    } finally {
      cleanup(cfg.dir);
    }
  });

  it('an unreachable upstream: a warning when optional, a failure (exit 1) when required', async () => {
    const url = `http://127.0.0.1:${await freePort()}/mcp`;
    const opt = await writeConfig({ upstreams: [{ name: 'h', transport: 'http', url }] });
    const req = await writeConfig({ upstreams: [{ name: 'h', transport: 'http', url, required: true }] });
    try {
      const a = cmcp('start', '--check', '--config', opt.file);
      expect(a.code).toBe(0);
      expect(a.out).toMatch(
        /warn\s+upstream h\s+upstream h: cannot list tools: HTTP upstream at .* ECONNREFUSED/,
      );
      const b = cmcp('start', '--check', '--config', req.file);
      expect(b.code).toBe(1);
      expect(b.out).toMatch(/FAIL\s+upstream h/);
      expect(b.out).toContain('1 check(s) failed');
    } finally {
      cleanup(opt.dir);
      cleanup(req.dir);
    }
  });

  it('an attestation provider that cannot reach minimum_tier fails the check with exit 3, as cmcp start', async () => {
    const tcti = `swtpm:host=127.0.0.1,port=${await freePort()}`;
    const cfg = await writeConfig({ attestation: { provider: 'tpm', tcti, minimum_tier: 'tpm' } });
    try {
      const r = cmcp('start', '--check', '--config', cfg.file);
      expect(r.code).toBe(3);
      expect(r.out).toMatch(
        /FAIL\s+attestation \(tpm\)\s+tpm .*TCTI_INIT_FAILED.*minimum_tier tpm refuses start-up/,
      );
    } finally {
      cleanup(cfg.dir);
    }
  });

  it('the database, read only: not a database, a newer schema, a missing folder or a running instance each fail; cmcp start says DATABASE_UNAVAILABLE for a file that is not a database', async () => {
    const cfg = await writeConfig({ port: await freePort() });
    const check = (database: string) => {
      writeFileSync(cfg.file, stringify({ ...cfg.raw, database }));
      return cmcp('start', '--check', '--config', cfg.file);
    };
    try {
      const text = join(cfg.dir, 'text.db');
      writeFileSync(text, 'not a database at all, just text\n'.repeat(200));
      const notDb = check(text);
      expect(notDb.code).toBe(1);
      expect(notDb.out).toMatch(/FAIL\s+database\s+.*text\.db: .*\(DATABASE_UNAVAILABLE\)/);
      const started = cmcp('start', '--config', cfg.file);
      expect(started.code).toBe(1);
      expect(started.err).toContain('DATABASE_UNAVAILABLE');
      expect(started.err).not.toMatch(/\n\s+at /);

      const newer = join(cfg.dir, 'newer.db');
      const n = openDatabase(newer);
      n.prepare('INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)').run(
        LATEST_SCHEMA_VERSION + 1,
        'from the future',
        new Date().toISOString(),
      );
      n.close();
      const tooNew = check(newer);
      expect(tooNew.code).toBe(1);
      expect(tooNew.out).toMatch(
        /FAIL\s+database\s+.*newer than this cmcp knows.*\(DATABASE_SCHEMA_TOO_NEW\)/,
      );

      const missing = check(join(cfg.dir, 'no-such-folder', 'x.db'));
      expect(missing.code).toBe(1);
      expect(missing.out).toMatch(/FAIL\s+database\s+.*its folder does not exist \(DATABASE_UNAVAILABLE\)/);

      // A live process (this test's) holds the instance, with a fresh heartbeat.
      const held = join(cfg.dir, 'held.db');
      const h = openDatabase(held);
      h.prepare(
        'INSERT INTO instances (instance_id, pid, hostname, started_at, heartbeat_ms) VALUES (?,?,?,?,?)',
      ).run(
        (cfg.raw.instance_id as string | undefined) ?? 'gateway',
        process.pid,
        hostname(),
        new Date().toISOString(),
        Date.now(),
      );
      h.close();
      const running = check(held);
      expect(running.code).toBe(1);
      expect(running.out).toMatch(/FAIL\s+database\s+.*is already running \(pid \d+ .*\(INSTANCE_RUNNING\)/);

      const fresh = check(join(cfg.dir, 'fresh.db'));
      expect(fresh.out).toMatch(/ok\s+database\s+.*fresh\.db \(made at start, schema version \d+\)/);
    } finally {
      cleanup(cfg.dir);
    }
  });

  it('an invalid config: exit 2 naming the field', async () => {
    const cfg = await writeConfig();
    writeFileSync(cfg.file, 'database: x.db\nattestation: { provider: tpm }\n');
    try {
      const r = cmcp('start', '--check', '--config', cfg.file);
      expect(r.code).toBe(2);
      expect(r.err).toContain('attestation.tcti');
    } finally {
      cleanup(cfg.dir);
    }
  });
});

describe('help and tokens', () => {
  it('--help marks required options', () => {
    const r = cmcp('start', '--help');
    expect(r.out).toMatch(/-c, --config <file>\s+YAML configuration file \(required\)/);
    expect(r.out).toMatch(/--check\s+validate the config/);
    expect(r.out).not.toMatch(/--check.*\(required\)/);
    expect(cmcp('executions', 'show', '--help').out).toMatch(/--agent <agent_id>[^-]*\(required\)/);
  });

  it('cmcp token --operator mints an operator token and says so; the hash is the SHA-256 of the token', () => {
    for (const [args, kind] of [
      [['token', '--operator'], 'operator'],
      [['token'], 'agent'],
    ] as const) {
      const r = cmcp(...args);
      expect(r.code).toBe(0);
      const token = /^token:\s+(\S+)$/m.exec(r.out)?.[1] ?? '';
      const hash = /^token_sha256:\s+([0-9a-f]{64})$/m.exec(r.out)?.[1];
      expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect(hash).toBe(createHash('sha256').update(token).digest('hex'));
      expect(r.out).toMatch(new RegExp(`^kind:\\s+${kind} \\(put token_sha256 under ${kind}s:`, 'm'));
    }
  });
});
