/**
 * Two `cmcp start` replicas (testing/replicas.ts), each on its own swtpm, on one throw-away
 * PostgreSQL database, behind a logging MCP upstream: the setup the replica-database test files
 * share, with the sessions they drive through the replicas. The replicas run the build (dist/).
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { type LoggingUpstream, startLoggingUpstream } from '../../testing/crash/upstream.js';
import { createDatabase, type PostgresInstance, startPostgres } from '../../testing/postgres.js';
import { postgresReplicaConfig, ReplicaSet } from '../../testing/replicas.js';
import { startSwtpm } from '../../testing/vitest-swtpm.js';
import { cleanup, REPO_ROOT } from './gateway.js';

// biome-ignore lint/suspicious/noExplicitAny: the gateway's JSON answers, read field by field
type Json = any;

/** Resolves after `ms` milliseconds. */
export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface ReplicaPairOptions {
  /** Names the pair's database (`-` becomes `_`), its agent token and its temporary folder. */
  name: string;
  /** The replicas' lease ttl and renewal period. */
  leaseTtlMs: number;
  renewEveryMs: number;
  /** False: the hooks do nothing (PostgreSQL is missing and the file's tests skip). */
  enabled: boolean;
}

/** The running pair, filled in by the `beforeAll` hook that {@link useReplicaPair} registers. */
export interface ReplicaPair {
  /** The temporary folder the replicas' files live in. */
  readonly dir: string;
  readonly server: PostgresInstance;
  /** postgres:// URL of the database the replicas share. */
  readonly databaseUrl: string;
  readonly replicas: ReplicaSet;
  /** The replica configuration without its database part, for swtpm `tpm` (0 or 1). */
  baseConfig(tpm: number): Record<string, unknown>;
  /** One session through replica `i`: opened, one call answered with a result, closed. Throws otherwise. */
  serveOnce(i: number): Promise<void>;
  /** Both replicas alive and each serving within `ms` (the database back). */
  expectBothServe(ms: number): Promise<void>;
  /** Sessions with short calls through both replicas until `stop` (answers and failures ignored). */
  load(stop: { stopped: boolean }): Promise<void>;
}

/**
 * Registers a `beforeAll` that starts PostgreSQL, the database, two swtpms, the upstream and the
 * two replicas, and an `afterAll` that stops them and removes the folder.
 * @returns the pair, whose parts may be read once the `beforeAll` has run.
 * @throws Error (from the hook) when dist/ is missing (run `npm run build`).
 */
export function useReplicaPair(opts: ReplicaPairOptions): ReplicaPair {
  const token = `${opts.name}-token`;
  const dir = mkdtempSync(join(tmpdir(), `cmcp-${opts.name}-`));
  let server: PostgresInstance | null = null;
  const tpms: Awaited<ReturnType<typeof startSwtpm>>[] = [];
  let upstream: LoggingUpstream | null = null;
  let set: ReplicaSet | null = null;
  let databaseUrl = '';
  let ops = 0;

  const started = <T>(part: T | null, what: string): T => {
    if (part === null) throw new Error(`the replica pair's ${what} is not started`);
    return part;
  };

  function baseConfig(tpm: number): Record<string, unknown> {
    return {
      upstreams: [
        { name: 'up', transport: 'http', url: started(upstream, 'upstream').url, timeout_ms: 30_000 },
      ],
      attestation: {
        provider: 'tpm',
        tcti: (tpms[tpm] as { tcti: string }).tcti,
        ak_algorithm: 'ecc-p256',
        pcrs: [0, 7],
      },
      agents: [{ agent_id: 'agent', token_sha256: createHash('sha256').update(token).digest('hex') }],
      shutdown: { drain_ms: 500 },
    };
  }

  async function post(base: string, path: string, body?: unknown): Promise<{ status: number; json: Json }> {
    const r = await fetch(`${base}${path}`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${token}`,
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
      },
      body: JSON.stringify(body ?? {}),
      signal: AbortSignal.timeout(20_000),
    });
    const text = await r.text();
    return { status: r.status, json: text ? JSON.parse(text) : null };
  }

  async function serveOnce(i: number): Promise<void> {
    const base = started(set, 'replica set').url(i);
    const opened = await post(base, '/sessions');
    if (opened.status >= 300) throw new Error(`open: ${opened.status} ${JSON.stringify(opened.json)}`);
    const sid = String(opened.json.session_id);
    const call = await post(base, '/mcp', {
      jsonrpc: '2.0',
      id: 1,
      method: 'tools/call',
      params: { name: 'up.work', arguments: { op: `op-${++ops}`, ms: 50 }, _cmcp: { session_id: sid } },
    });
    if (!call.json?.result || call.json.result.isError)
      throw new Error(`call: ${call.status} ${JSON.stringify(call.json)}`);
    const closed = await post(base, `/sessions/${sid}/close`);
    if (closed.status >= 300) throw new Error(`close: ${closed.status} ${JSON.stringify(closed.json)}`);
  }

  async function expectBothServe(ms: number): Promise<void> {
    const replicas = started(set, 'replica set');
    expect(replicas.running()).toEqual([0, 1]);
    for (const i of [0, 1]) {
      let last = '';
      const end = Date.now() + ms;
      for (;;) {
        try {
          await serveOnce(i);
          break;
        } catch (e) {
          last = (e as Error).message;
        }
        expect(replicas.running(), `replica ${i} died:\n${replicas.logTail(i)}`).toEqual([0, 1]);
        if (Date.now() > end)
          throw new Error(`replica ${i} does not serve again: ${last}\n${replicas.logTail(i)}`);
        await sleep(250);
      }
    }
    expect(replicas.running()).toEqual([0, 1]);
  }

  function load(stop: { stopped: boolean }): Promise<void> {
    return Promise.all(
      [0, 1, 0, 1].map(async (i) => {
        while (!stop.stopped) await serveOnce(i).catch(() => sleep(50));
      }),
    ).then(() => undefined);
  }

  beforeAll(async () => {
    if (!opts.enabled) return;
    if (!existsSync(join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js')))
      throw new Error('dist/ is missing: run `npm run build` first');
    server = await startPostgres();
    databaseUrl = await createDatabase(server, opts.name.replaceAll('-', '_'));
    for (let i = 0; i < 2; i++) tpms.push(await startSwtpm());
    upstream = await startLoggingUpstream();
    set = await ReplicaSet.start({
      repoRoot: REPO_ROOT,
      dir,
      count: 2,
      config: (i, port) =>
        postgresReplicaConfig(baseConfig(i), {
          i,
          port,
          databaseUrl,
          leaseTtlMs: opts.leaseTtlMs,
          renewEveryMs: opts.renewEveryMs,
        }),
      startTimeoutMs: 60_000,
    });
  }, 120_000);
  afterAll(async () => {
    await set?.stopAll();
    await upstream?.close();
    for (const t of tpms) await t.stop();
    await server?.stop();
    cleanup(dir);
  });

  return {
    dir,
    get server() {
      return started(server, 'PostgreSQL');
    },
    get databaseUrl() {
      return databaseUrl;
    },
    get replicas() {
      return started(set, 'replica set');
    },
    baseConfig,
    serveOnce,
    expectBothServe,
    load,
  };
}
