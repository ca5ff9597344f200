/**
 * `cmcp start --check --config FILE` (docs/getting-started.md): validates the config and reaches what the
 * gateway would need — the attestation provider (started, then one binding over a zero
 * REPORT_DATA), every upstream (connected and its tools listed), the policy bundle and catalog,
 * the database (read only: it opens, its schema is not newer than this cmcp, no live process
 * holds the instance; a file not made yet needs a writable folder), and the listen address —
 * without starting the gateway, writing the database or extending a PCR. Prints one line per
 * check.
 *
 * Exit codes, as `cmcp start` would exit for the same config: 0 every check passed (warnings
 * allowed); 2 the config is invalid; 3 the attestation check failed (the provider would refuse
 * start-up: ATTESTATION_UNAVAILABLE, ATTESTATION_TIER_TOO_LOW), whatever else failed; 4 a
 * replica's PostgreSQL cannot be reached (DATABASE_UNAVAILABLE); 1 any other check failed.
 * Scripts gating a deploy on `--check` can so tell them apart, as they do for `cmcp start`.
 */
import { accessSync, constants, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, resolve } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import pino from 'pino';
import { loadCatalogFile } from '../catalog/catalog.js';
import { ConfigError, type GatewayConfig, loadConfig } from '../config/index.js';
import { assertReplicaConfig } from '../gateway/lifecycle/replica-unavailable.js';
import { loadBundleDir } from '../policy/bundle.js';
import { isPostgresUrl, LATEST_SCHEMA_VERSION, redactPostgresUrl } from '../store/migrations/index.js';
import { postgresSchemaVersion } from '../store/migrations/postgres.js';
import { sqliteSchemaVersion } from '../store/migrations/sqlite.js';
import { liveHolder } from '../store/sqlite/instance-lock.js';
import { selectProvider } from '../tee/detect.js';
import { ATTESTATION_EXIT_CODE, namedProviderRequired, requiredBindingTier } from '../tee/tier.js';
import { tlsExposure } from '../tls/exposure.js';
import { UpstreamPool } from '../upstream/pool.js';

/**
 * Exit code of `cmcp start` when a replica's PostgreSQL is unreachable at start
 * (DATABASE_UNAVAILABLE): a supervisor may retry it. A SQLite file that cannot be opened is 1,
 * since starting again will not mend it.
 */
export const DATABASE_EXIT_CODE = 4;

type Status = 'ok' | 'warn' | 'FAIL';
export interface CheckLine {
  what: string;
  status: Status;
  detail: string;
}

const silent = pino({ level: 'silent' });

async function checkAttestation(cfg: GatewayConfig): Promise<CheckLine> {
  const a = cfg.attestation;
  const what = `attestation (${a.provider})`;
  let sel: Awaited<ReturnType<typeof selectProvider>>;
  try {
    sel = await selectProvider(a);
  } catch (e) {
    return { what, status: 'FAIL', detail: (e as Error).message };
  }
  const p = sel.provider;
  try {
    const started = (await p.start?.(null)) ?? { ok: true };
    let problem: string | null = null;
    if (started.ok === false)
      problem = `start failed: ${String(started.reason)} ${String(started.error ?? '')}`;
    else if (p.tier !== 'software') {
      try {
        await p.bind(Buffer.alloc(64));
      } catch (e) {
        problem = `binding failed: ${(e as { reason?: string }).reason ?? ''} ${(e as Error).message}`;
      }
    }
    const name = `${p.name} (tier ${p.tier}, ${sel.detail.reason})`;
    if (problem === null)
      return {
        what,
        status: p.tier === 'software' ? 'warn' : 'ok',
        detail:
          p.tier === 'software'
            ? `${name}: attests nothing; claims verify as signed-only`
            : `${name}: started and produced evidence`,
      };
    const required = requiredBindingTier(a);
    if (required)
      return {
        what,
        status: 'FAIL',
        detail: `${name}: ${problem.trim()}; minimum_tier ${required} refuses start-up`,
      };
    // A named hardware provider that does not start refuses start-up (exit 3) unless serve_unbound.
    if (started.ok === false && namedProviderRequired(a))
      return {
        what,
        status: 'FAIL',
        detail: `${name}: ${problem.trim()}; a configured ${a.provider} provider that cannot be reached refuses start-up (set attestation.on_unavailable: serve_unbound to serve signed-only)`,
      };
    return {
      what,
      status: 'warn',
      detail: `${name}: ${problem.trim()}; sessions would be served signed-only`,
    };
  } finally {
    p.close();
  }
}

async function checkUpstream(
  u: GatewayConfig['upstreams'][number],
  maxResultBytes: number,
): Promise<CheckLine> {
  const where = u.transport === 'http' ? u.url : `${u.command} ${u.args.join(' ')}`.slice(0, 80);
  const what = `upstream ${u.name}`;
  const pool = new UpstreamPool([{ ...u, required: true }], silent, maxResultBytes);
  try {
    await pool.start();
    const n = pool.toolLists()[0]?.tools.length ?? 0;
    return { what, status: 'ok', detail: `${u.transport} ${where}: ${n} tools` };
  } catch (e) {
    return {
      what,
      status: u.required ? 'FAIL' : 'warn',
      detail: `${(e as Error).message}${u.required ? '' : ' (not required: the gateway would start without it and retry)'}`,
    };
  } finally {
    await pool.close();
  }
}

function checkListen(host: string, port: number): Promise<CheckLine> {
  const what = 'listen';
  if (port === 0)
    return Promise.resolve({ what, status: 'ok', detail: `${host}: a free port is chosen at start` });
  return new Promise((done) => {
    const srv = createServer();
    srv.once('error', (e: NodeJS.ErrnoException) =>
      done({ what, status: 'FAIL', detail: `${host}:${port}: ${e.code ?? e.message}` }),
    );
    srv.listen({ host, port, exclusive: true }, () =>
      srv.close(() => done({ what, status: 'ok', detail: `${host}:${port} is free` })),
    );
  });
}

function checkFiles(cfg: GatewayConfig): CheckLine[] {
  const out: CheckLine[] = [];
  if (cfg.policy) {
    try {
      const b = loadBundleDir(cfg.policy.bundle);
      out.push({ what: 'policy', status: 'ok', detail: `${cfg.policy.bundle}: ${b.hash}` });
    } catch (e) {
      out.push({ what: 'policy', status: 'FAIL', detail: (e as Error).message });
    }
  }
  if (cfg.catalog) {
    try {
      const c = loadCatalogFile(cfg.catalog.file);
      out.push({ what: 'catalog', status: 'ok', detail: `${cfg.catalog.file}: ${c.hash}` });
    } catch (e) {
      out.push({ what: 'catalog', status: 'FAIL', detail: (e as Error).message });
    }
  }
  return out;
}

/**
 * Runs every check of `cmcp start --check`.
 * @returns the lines printed and the exit code: 0, 1, 2 or 3, the code `cmcp start` exits with
 *   for the same failure (see the file's header).
 */
export async function runStartCheck(
  file: string,
): Promise<{ lines: CheckLine[]; exitCode: number; text: string }> {
  let cfg: GatewayConfig;
  try {
    cfg = loadConfig(file);
  } catch (e) {
    if (e instanceof ConfigError) return { lines: [], exitCode: 2, text: `cmcp: ${e.message}\n` };
    throw e;
  }
  const postgres = isPostgresUrl(cfg.database);
  const database = postgres ? await checkPostgres(cfg) : checkDatabase(cfg);
  const lines: CheckLine[] = [
    {
      what: 'config',
      status: 'ok',
      detail: `${cfg.upstreams.length} upstream(s), ${cfg.agents.length} agent(s), ${cfg.operators.length} operator(s), database ${postgres ? redactPostgresUrl(cfg.database) : cfg.database}`,
    },
    database,
    ...(postgres ? [checkReplicaConfig(cfg)] : []),
    ...checkFiles(cfg),
  ];
  const attestation = await checkAttestation(cfg);
  lines.push(attestation);
  for (const u of cfg.upstreams) lines.push(await checkUpstream(u, cfg.limits.max_result_bytes));
  lines.push(await checkListen(cfg.listen.host, cfg.listen.port));
  lines.push({ what: 'tls', ...tlsExposure(cfg) });
  const failed = lines.filter((l) => l.status === 'FAIL').length;
  const width = Math.max(...lines.map((l) => l.what.length));
  const text =
    `cmcp start --check ${file}\n` +
    lines.map((l) => `  ${l.status.padEnd(4)}  ${l.what.padEnd(width)}  ${l.detail}`).join('\n') +
    `\n${failed ? `${failed} check(s) failed: the gateway would not start` : 'all checks passed: the gateway can start'}\n`;
  // As `cmcp start` would exit: 3 for an attestation refusal (it comes first), 4 for a replica's
  // unreachable PostgreSQL, 1 for other start-up failures.
  const exitCode =
    attestation.status === 'FAIL'
      ? ATTESTATION_EXIT_CODE
      : postgres && database.status === 'FAIL'
        ? DATABASE_EXIT_CODE
        : failed
          ? 1
          : 0;
  return { lines, exitCode, text };
}

/** What a replica would refuse at start-up (assertReplicaConfig), as a failed line. */
function checkReplicaConfig(cfg: GatewayConfig): CheckLine {
  try {
    assertReplicaConfig(cfg);
    return { what: 'replica', status: 'ok', detail: 'every configured section is served on PostgreSQL' };
  } catch (e) {
    return {
      what: 'replica',
      status: 'FAIL',
      detail: `${(e as Error).message} (POSTGRES_FEATURE_UNAVAILABLE)`,
    };
  }
}

/**
 * A replica's PostgreSQL, read only: the server answers and its schema is not newer than this
 * cmcp (an older one is migrated at start). The replica's lease is not probed: another live
 * holder of the instance_id refuses the start itself (INSTANCE_RUNNING).
 */
async function checkPostgres(cfg: GatewayConfig): Promise<CheckLine> {
  const shown = redactPostgresUrl(cfg.database);
  const client = new pg.Client({ connectionString: cfg.database, connectionTimeoutMillis: 5000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    const version = await postgresSchemaVersion(client);
    if (version > LATEST_SCHEMA_VERSION)
      return {
        what: 'database',
        status: 'FAIL',
        detail: `${shown}: schema version ${version}, newer than this cmcp knows (${LATEST_SCHEMA_VERSION}) (DATABASE_SCHEMA_TOO_NEW)`,
      };
    return { what: 'database', status: 'ok', detail: `${shown} (PostgreSQL, schema version ${version})` };
  } catch (e) {
    const code = (e as { code?: string }).code;
    return {
      what: 'database',
      status: 'FAIL',
      detail: `cannot reach ${shown}: ${(e as Error).message}${code ? ` (${code})` : ''} (DATABASE_UNAVAILABLE)`,
    };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The SQLite database, read only: an existing file opens, is a database, has a schema this
 * cmcp knows (DATABASE_SCHEMA_TOO_NEW), is writable, and no live process holds the instance
 * (INSTANCE_RUNNING); a file not made yet needs an existing, writable folder.
 */
function checkDatabase(cfg: GatewayConfig): CheckLine {
  const path = resolve(cfg.database);
  const fail = (detail: string): CheckLine => ({ what: 'database', status: 'FAIL', detail });
  if (!existsSync(path)) {
    const dir = dirname(path);
    if (!existsSync(dir)) return fail(`${path}: its folder does not exist (DATABASE_UNAVAILABLE)`);
    try {
      accessSync(dir, constants.W_OK);
    } catch {
      return fail(`${path}: its folder is not writable (DATABASE_UNAVAILABLE)`);
    }
    return {
      what: 'database',
      status: 'ok',
      detail: `${path} (made at start, schema version ${LATEST_SCHEMA_VERSION})`,
    };
  }
  let db: Database.Database | null = null;
  try {
    accessSync(path, constants.R_OK | constants.W_OK);
    db = new Database(path, { readonly: true, fileMustExist: true });
    db.pragma('busy_timeout = 250');
    const version = sqliteSchemaVersion(db);
    if (typeof version === 'number' && version > LATEST_SCHEMA_VERSION)
      return fail(
        `${path}: schema version ${version}, newer than this cmcp knows (${LATEST_SCHEMA_VERSION}) (DATABASE_SCHEMA_TOO_NEW)`,
      );
    const holder = liveHolder(db, cfg.instance_id);
    if (holder)
      return fail(
        `${path}: instance "${cfg.instance_id}" is already running (pid ${holder.pid} on ${holder.hostname}) (INSTANCE_RUNNING)`,
      );
    const shown =
      version === 'unversioned'
        ? 'made before schema versions (taken over at start)'
        : `schema version ${version}`;
    return { what: 'database', status: 'ok', detail: `${path} (${shown})` };
  } catch (e) {
    return fail(`${path}: ${(e as Error).message} (DATABASE_UNAVAILABLE)`);
  } finally {
    db?.close();
  }
}
