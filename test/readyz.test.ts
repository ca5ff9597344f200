/**
 * GET /readyz (docs/operations.md#metrics-traces-readiness), distinct from /healthz, against a
 * real gateway: real SQLite, a real Streamable HTTP upstream (counting-server) and swtpm.
 * Ready when every check passes; a stopped required upstream, a held write lock or a stopped TPM
 * each make it not ready with the reason, while /healthz stays ok; a stopped optional upstream
 * is reported and leaves it ready.
 */
import Database from 'better-sqlite3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { startSwtpm } from '../testing/vitest-swtpm.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { cleanup, rest, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

/** /readyz answers the same report for 1 s (src/gateway/health/readiness.ts): wait past it after a change. */
const nextReport = () => new Promise((r) => setTimeout(r, 1100));

async function get(url: string, path: string) {
  const r = await fetch(`${url}${path}`);
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body asserted member by member
  return { status: r.status, body: (await r.json()) as any };
}

describe('readiness with the software provider', () => {
  let up: CountingServer;
  let spare: CountingServer;
  let cfg: TestConfig;
  let gw: Gateway;
  beforeAll(async () => {
    up = await startCountingServer();
    spare = await startCountingServer();
    cfg = await writeConfig({
      upstreams: [
        { name: 'counting', transport: 'http', url: up.url, required: true },
        { name: 'spare', transport: 'http', url: spare.url },
      ],
    });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    await gw?.close();
    await up?.close();
    await spare?.close();
    cleanup(cfg.dir);
  });

  it('is ready with every check passing; /healthz is liveness only', async () => {
    const r = await get(gw.url, '/readyz');
    expect(r.status).toBe(200);
    expect(r.body).toEqual({
      status: 'ready',
      checks: {
        database: null,
        upstreams: { counting: null, spare: null },
        required_upstreams: ['counting'],
        attestation: null,
        shutdown: null,
      },
    });
    expect(await get(gw.url, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
  });

  it('is not ready while another connection holds the database write lock', async () => {
    const other = new Database(cfg.dbPath);
    try {
      other.exec('BEGIN IMMEDIATE');
      await nextReport();
      const r = await get(gw.url, '/readyz');
      expect(r.status).toBe(503);
      expect(r.body.status).toBe('not_ready');
      expect(r.body.checks.database).toBe('SQLITE_BUSY');
      expect(r.body.checks.upstreams.counting).toBeNull();
      other.exec('ROLLBACK');
      await nextReport();
      expect((await get(gw.url, '/readyz')).status).toBe(200);
    } finally {
      other.close();
    }
  });

  it('stays ready when an optional upstream stops, and names its reason', async () => {
    await spare.close();
    await nextReport();
    const r = await get(gw.url, '/readyz');
    expect(r.status).toBe(200);
    expect(r.body.status).toBe('ready');
    expect(r.body.checks.upstreams.spare).toMatch(/ECONNREFUSED|fetch failed|no answer|unavailable/);
    expect(r.body.checks.upstreams.counting).toBeNull();
    expect(r.body.checks.required_upstreams).toEqual(['counting']);
  });

  it('is not ready once a required upstream stops, with the reason; /healthz stays ok', async () => {
    await up.close();
    await nextReport();
    const r = await get(gw.url, '/readyz');
    expect(r.status).toBe(503);
    expect(r.body.status).toBe('not_ready');
    expect(r.body.checks.database).toBeNull();
    expect(r.body.checks.attestation).toBeNull();
    expect(typeof r.body.checks.upstreams.counting).toBe('string');
    expect(r.body.checks.upstreams.counting).toMatch(/ECONNREFUSED|fetch failed|no answer/);
    expect(JSON.stringify(r.body)).not.toContain(up.url);
    expect(await get(gw.url, '/healthz')).toEqual({ status: 200, body: { status: 'ok' } });
  });
});

describe('readiness with the TPM provider (swtpm)', () => {
  it('ready while the TPM answers; not ready once it stops, with the binding failure', async () => {
    const tpm = await startSwtpm();
    const cfg = await writeConfig({
      attestation: { provider: 'tpm', tcti: tpm.tcti, ak_algorithm: 'ecc-p256', pcrs: [0, 7] },
    });
    const gw = await startInProcess(cfg);
    try {
      const ok = await get(gw.url, '/readyz');
      expect(ok.body.checks).toEqual({
        database: null,
        upstreams: {},
        required_upstreams: [],
        attestation: null,
        shutdown: null,
      });
      expect(ok.status).toBe(200);
      await tpm.stop();
      // A session binding now fails; readiness reports the provider's failure.
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.body.binding.status).toBe('absent');
      await nextReport();
      const r = await get(gw.url, '/readyz');
      expect(r.status).toBe(503);
      expect(r.body.checks.attestation).toMatch(/^ATTESTATION_BINDING_FAILED: \S/);
      expect(r.body.checks.database).toBeNull();
    } finally {
      await gw.close();
      await tpm.stop();
      cleanup(cfg.dir);
    }
  });
});
