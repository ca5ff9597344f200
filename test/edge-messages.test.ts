/**
 * Small edge answers that say what is wrong: POST /mcp with an Accept that lists neither JSON
 * nor SSE is 406 (MCP Streamable HTTP), a JSON-RPC id that is not a string or an integer is
 * named in the refusal, and `cmcp verify-evidence --certs` with a file that is no certificate is
 * an input error (exit 2, a clear message), not a CERT_MALFORMED verdict. A real gateway, the
 * built CLI and real SEV-SNP vectors.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { cleanup, REPO_ROOT, rpc, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

let cfg: TestConfig;
let gw: Gateway;
const dir = mkdtempSync(join(tmpdir(), 'cmcp-edge-'));

beforeAll(async () => {
  cfg = await writeConfig({});
  gw = await startInProcess(cfg);
}, 60_000);

afterAll(async () => {
  await gw?.close();
  if (cfg) cleanup(cfg.dir);
  cleanup(dir);
});

const ping = (id: unknown, accept?: string) =>
  rpc(gw.url, 'alice-token', { jsonrpc: '2.0', id, method: 'ping' }, accept === undefined ? {} : { accept });

describe('POST /mcp Accept', () => {
  it('text/html is 406 with the request id; JSON, SSE, */* and no Accept are served', async () => {
    const html = await ping(3, 'text/html');
    expect(html.status).toBe(406);
    expect(html.body.id).toBe(3);
    expect(html.body.error.data.error_code).toBe('INVALID_REQUEST');
    expect(html.body.error.message).toMatch(/Accept must list application\/json or text\/event-stream/);
    for (const accept of ['application/json', 'text/event-stream', '*/*', 'text/html, application/*;q=0.5'])
      expect((await ping(4, accept)).status, accept).toBe(200);
    const none = await fetch(`${gw.url}/mcp`, {
      method: 'POST',
      headers: { authorization: 'Bearer alice-token', 'content-type': 'application/json' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'ping' }),
    });
    expect(none.status).toBe(200);
  });
});

describe('JSON-RPC ids that are refused', () => {
  it('are named in the message (the answer id is null, JSON-RPC 2.0 §5)', async () => {
    const cases: [unknown, RegExp][] = [
      [1.5, /^id 1\.5 must be a string or an integer/],
      [2 ** 60, /^id 1152921504606847000 must be a string or an integer within/],
      [null, /^id must be a string or an integer \(null is not allowed\)$/],
      [true, /^id true must be a string or an integer$/],
      [{ a: 1 }, /^id must be a string or an integer, not an object$/],
    ];
    for (const [id, message] of cases) {
      const r = await ping(id);
      expect(r.status).toBe(400);
      expect(r.body.id).toBeNull();
      expect(r.body.error.message, JSON.stringify(id)).toMatch(message);
    }
  });
});

describe('cmcp verify-evidence --certs', () => {
  const cli = (...args: string[]) =>
    spawnSync(
      process.execPath,
      [join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js'), 'verify-evidence', ...args],
      {
        encoding: 'utf8',
      },
    );
  it.skipIf(!hasVectors())(
    'a file that is no certificate is an input error: exit 2, says which and why',
    () => {
      const d = (f: string) => vectorPath('snp', 'go-sev-guest-milan', f);
      const blob = join(dir, 'blob.bin');
      writeFileSync(blob, Buffer.from([0x00, 0xff, 0x13, 0x37, 0x42]));
      const r = cli('--snp-report', d('attestation.bin'), '--certs', d('vcek.testcer'), '--certs', blob);
      expect(r.status).toBe(2);
      expect(r.stdout).toBe('');
      expect(r.stderr).toMatch(
        /--certs .*blob\.bin is not a DER or PEM X\.509 certificate \(.*CERT_MALFORMED\)\n$/,
      );
      // The report given where a certificate belongs: the same.
      const swapped = cli('--snp-report', d('attestation.bin'), '--certs', d('attestation.bin'));
      expect(swapped.status).toBe(2);
      expect(swapped.stderr).toContain('attestation.bin is not a DER or PEM X.509 certificate');
      // Real certificates still reach a verdict (this vector is a debug report: invalid, exit 1).
      const real = cli(
        '--snp-report',
        d('attestation.bin'),
        '--certs',
        d('vcek.testcer'),
        '--certs',
        d('ask_ark_milan.pem'),
        '--at',
        '2026-11-30T00:00:00Z',
      );
      expect(real.status).toBe(1);
      expect(real.stdout).toContain('SNP_DEBUG_ENABLED');
    },
  );
});
