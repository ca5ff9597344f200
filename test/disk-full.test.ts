/**
 * A gateway whose database sits on a full filesystem (a real tmpfs filled with ballast, no
 * mocks): /readyz says not ready with the database's reason while a write cannot commit, and
 * ready again once space is freed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/runtime.js';
import { startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';
import { mountSmallFs, type SmallFs, smallFsUnavailable } from './harness/small-fs.js';

const unavailable = smallFsUnavailable();
if (unavailable) console.warn(`disk-full tests skipped: ${unavailable}`);

/** /readyz answers the same report for 1 s (src/gateway/readiness.ts): wait past it after a change. */
const nextReport = () => new Promise((r) => setTimeout(r, 1100));

async function readyz(url: string) {
  const r = await fetch(`${url}/readyz`);
  // biome-ignore lint/suspicious/noExplicitAny: a JSON body asserted member by member
  return { status: r.status, body: (await r.json()) as any };
}

describe.skipIf(unavailable !== null)('a full disk', () => {
  let fs: SmallFs;
  let cfg: TestConfig;
  let gw: Gateway;
  beforeAll(async () => {
    fs = mountSmallFs(16 * 1024 * 1024);
    cfg = await writeConfig({ dir: fs.dir });
    gw = await startInProcess(cfg);
  });
  afterAll(async () => {
    try {
      fs?.unfill();
    } catch {}
    await gw?.close();
    fs?.close(); // removes the config and database with the filesystem
  });

  it('makes /readyz not ready while a write cannot commit, and ready once space is freed', async () => {
    expect((await readyz(gw.url)).status).toBe(200);
    fs.fill();
    await nextReport();
    const full = await readyz(gw.url);
    expect(full.status).toBe(503);
    expect(full.body.status).toBe('not_ready');
    expect(full.body.checks.database).toMatch(/^(ENOSPC|SQLITE_FULL|SQLITE_IOERR)/);
    fs.unfill();
    await nextReport();
    const freed = await readyz(gw.url);
    expect(freed.body.checks.database).toBeNull();
    expect(freed.status).toBe(200);
  });
});
