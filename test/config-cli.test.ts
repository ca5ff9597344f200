/**
 * `cmcp config schema` and `cmcp config explain` (src/cli/config.ts), run as the built CLI
 * (dist/) on real config files: the committed JSON Schema is the one generated from the zod
 * schema, every section is placed under one concern, and `explain` prints each effective value
 * with its source and never a secret.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { configSchema } from '../src/config/index.js';
import { configJsonSchema } from '../src/config/json-schema.js';
import { CONFIG_CONCERNS } from '../src/config/sections.js';
import { REPO_ROOT } from './harness/gateway.js';

const run = promisify(execFile);
const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
async function cmcp(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const r = await run(process.execPath, [CLI, ...args], { env: { ...process.env, ...env } });
    return { code: 0, stdout: r.stdout, stderr: r.stderr };
  } catch (e) {
    const x = e as { code: number; stdout: string; stderr: string };
    return { code: x.code, stdout: x.stdout, stderr: x.stderr };
  }
}

const dir = mkdtempSync(join(tmpdir(), 'cmcp-config-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const HASH = 'a'.repeat(64);

function writeYaml(name: string, body: Record<string, unknown>): string {
  const file = join(dir, name);
  writeFileSync(file, stringify(body));
  return file;
}

interface Explained {
  concern: string;
  path: string;
  value: unknown;
  source: string;
}

async function explainJson(file: string, env: NodeJS.ProcessEnv = {}): Promise<Map<string, Explained>> {
  const r = await cmcp(['config', 'explain', '-c', file, '--json'], env);
  expect(r.stderr).toBe('');
  expect(r.code).toBe(0);
  return new Map((JSON.parse(r.stdout) as Explained[]).map((v) => [v.path, v]));
}

describe('cmcp config schema', () => {
  it('prints the committed docs/config.schema.json, which is the one generated from the zod schema', async () => {
    const committed = JSON.parse(readFileSync(join(REPO_ROOT, 'docs', 'config.schema.json'), 'utf8'));
    // On a difference: `node dist/src/cli/main.js config schema > docs/config.schema.json`, then biome format.
    expect(committed).toEqual(configJsonSchema());
    const r = await cmcp(['config', 'schema']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual(committed);
  });

  it('names every top-level key, refuses unknown ones, and describes each section', () => {
    const schema = configJsonSchema() as {
      additionalProperties: boolean;
      required: string[];
      properties: Record<string, { description?: string }>;
    };
    expect(Object.keys(schema.properties).sort()).toEqual(Object.keys(configSchema.shape).sort());
    expect(schema.additionalProperties).toBe(false);
    expect(schema.required).toEqual(expect.arrayContaining(['database', 'attestation']));
    for (const [key, p] of Object.entries(schema.properties)) expect(p.description, key).toMatch(/\w/);
  });

  it('every section of the config is placed under exactly one concern', () => {
    const placed = CONFIG_CONCERNS.flatMap((c) => Object.keys(c.sections));
    expect(new Set(placed).size).toBe(placed.length);
    expect(placed.sort()).toEqual(Object.keys(configSchema.shape).sort());
  });

  it('the shipped example configs point editors at the schema', () => {
    for (const [file, ref] of [
      ['examples/cmcp.example.yaml', '../docs/config.schema.json'],
      ['deploy/oci/cmcp.container.yaml', '../../docs/config.schema.json'],
    ] as const) {
      const first = readFileSync(join(REPO_ROOT, file), 'utf8').split('\n')[0];
      expect(first, file).toBe(`# yaml-language-server: $schema=${ref}`);
    }
  });
});

describe('cmcp config explain', () => {
  const SECRETS = [
    'pa55-SECRET-url',
    'q-SECRET-query',
    'ghp-SECRET-token',
    'SECRET-marked',
    'SECRET-in-db-url',
  ];
  const file = writeYaml('cmcp.yaml', {
    database: './gw.db',
    attestation: { provider: 'software' },
    dev_mode: true,
    agents: [{ agent_id: 'alice', token_sha256: HASH }],
    limits: { max_connections: 50 },
    upstreams: [
      {
        name: 'crm',
        transport: 'http',
        url: `https://svc:${SECRETS[0]}@crm.example/mcp?api_key=${SECRETS[1]}`,
        headers: { Authorization: { env: 'CRM_TOKEN', prefix: 'Bearer ' } },
      },
      {
        name: 'gh',
        transport: 'stdio',
        command: 'node',
        args: ['server.js'],
        env: {
          GITHUB_TOKEN: SECRETS[2],
          EXPLICIT: { value: SECRETS[3], secret: true },
          DATABASE_URL: `postgres://u:${SECRETS[4]}@db.example/app`,
          LOG_FORMAT: 'json',
        },
      },
    ],
  });

  it('prints every effective value with its source: the file, a default, or the environment', async () => {
    const v = await explainJson(file);
    expect(v.get('limits.max_connections')).toMatchObject({ value: 50, source: 'file', concern: 'limits' });
    expect(v.get('limits.max_request_bytes')).toMatchObject({ value: 2 * 1024 * 1024, source: 'default' });
    expect(v.get('listen.port')).toMatchObject({
      value: 8787,
      source: 'default',
      concern: 'listen and edge',
    });
    expect(v.get('upstreams[0].timeout_ms')).toMatchObject({ value: 30_000, source: 'default' });
    expect(v.get('upstreams[1].args')).toMatchObject({ value: ['server.js'], source: 'file' });
    expect(v.get('upstreams[0].headers.Authorization.env')).toMatchObject({
      value: 'CRM_TOKEN',
      source: 'file',
    });
    // Relative paths are shown resolved, as `cmcp start` uses them.
    expect(v.get('database')).toMatchObject({ value: join(dir, 'gw.db'), source: 'file', concern: 'store' });
    expect(v.get('policy')).toMatchObject({ value: null, source: 'default' });
    expect(v.get('store.worker')).toMatchObject({ value: false, source: 'default' });

    const switched = await explainJson(file, { CMCP_LOG_LEVEL: 'debug' });
    expect(switched.get('CMCP_LOG_LEVEL')).toMatchObject({
      value: 'debug',
      source: 'environment CMCP_LOG_LEVEL',
      concern: 'environment',
    });
  });

  it('never prints a secret: URL passwords and secret query values, secret stdio env values', async () => {
    const text = await cmcp(['config', 'explain', '-c', file]);
    const json = await cmcp(['config', 'explain', '--config', file, '--json']);
    for (const out of [text.stdout, json.stdout]) {
      for (const s of SECRETS) expect(out).not.toContain(s);
      expect(out).toContain('<redacted>');
    }
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^# limits$/m);
    expect(text.stdout).toMatch(/^limits\.max_connections += {1,2}50 {2}\(file\)$/m);
    const v = await explainJson(file);
    expect(v.get('upstreams[1].env.GITHUB_TOKEN')?.value).toBe('<redacted>');
    expect(v.get('upstreams[1].env.EXPLICIT.value')?.value).toBe('<redacted>');
    expect(v.get('upstreams[1].env.DATABASE_URL')?.value).toBe('postgres://u:<redacted>@db.example/app');
    expect(v.get('upstreams[1].env.LOG_FORMAT')?.value).toBe('json');
    expect(v.get('upstreams[0].url')?.value).toBe(
      'https://svc:<redacted>@crm.example/mcp?api_key=<redacted>',
    );

    const pg = writeYaml('replica.yaml', {
      database: `postgres://cmcp:${SECRETS[4]}@127.0.0.1:5432/cmcp`,
      attestation: { provider: 'software' },
      dev_mode: true,
    });
    const r = await cmcp(['config', 'explain', '-c', pg]);
    expect(r.code).toBe(0);
    expect(r.stdout).not.toContain(SECRETS[4]);
    expect(r.stdout).toContain('postgres://cmcp:<redacted>@127.0.0.1:5432/cmcp');
  });

  it('refuses an invalid config as `cmcp start` does: exit 2, the field named', async () => {
    const bad = writeYaml('bad.yaml', {
      database: './x.db',
      attestation: { provider: 'software' },
      limit: {},
    });
    const r = await cmcp(['config', 'explain', '-c', bad]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(/invalid config .*bad\.yaml/);
    expect(r.stderr).toMatch(/limit/);
    // A removed environment switch is refused, saying what replaces it: the config key, or nothing
    // (a switch that only turned a mechanism off), even when it asks for what now always runs.
    const REMOVED: [Record<string, string>, RegExp][] = [
      [
        { CMCP_STORE_WORKER: 'on' },
        /environment CMCP_STORE_WORKER: no longer read: set `store\.worker` in the config/,
      ],
      [
        { CMCP_GROUP_COMMIT: 'off' },
        /environment CMCP_GROUP_COMMIT: no longer read: group commit is always on/,
      ],
      [{ CMCP_GROUP_COMMIT: 'on' }, /environment CMCP_GROUP_COMMIT: no longer read/],
      [
        { CMCP_CHECKPOINT_WORKER: 'off' },
        /environment CMCP_CHECKPOINT_WORKER: no longer read: the WAL checkpoint thread always runs/,
      ],
    ];
    for (const sub of [
      ['config', 'explain', '-c', file],
      ['start', '--check', '-c', file],
    ])
      for (const [env, message] of REMOVED) {
        const removed = await cmcp(sub, env);
        expect(removed.code, `${sub.join(' ')} ${Object.keys(env)[0]}`).toBe(2);
        expect(removed.stdout).toBe('');
        expect(removed.stderr).toMatch(message);
      }
    const missing = await cmcp(['config', 'explain', '-c', join(dir, 'nope.yaml')]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/cannot read: ENOENT/);
  });
});
