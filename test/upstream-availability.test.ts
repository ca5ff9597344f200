/**
 * Issue 16 items 3 and 4: one upstream down is not the gateway down, and errors that say what
 * happened. Real MCP servers (server-everything over stdio, the counting server over Streamable
 * HTTP), real child processes, a real gateway.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startCountingServer } from './fixtures/counting-server.js';
import {
  cleanup,
  everythingUpstream,
  freePort,
  rpc,
  startInProcess,
  writeConfig,
} from './harness/gateway.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function toolNames(url: string): Promise<string[]> {
  const r = await rpc(url, 'alice-token', { jsonrpc: '2.0', id: 1, method: 'tools/list' });
  return (r.body.result.tools as { name: string }[]).map((t) => t.name);
}

/** A stdio upstream whose command writes to stderr (one line carries a configured secret) and exits 3. */
function failingStdio(name: string, extra: Record<string, unknown> = {}) {
  return {
    name,
    transport: 'stdio',
    command: process.execPath,
    args: [
      '-e',
      'console.error("\\x1b[31mboom: cannot open /srv/missing\\x1b[0m"); console.error("using key " + process.env.UPSTREAM_API_KEY); process.exit(3)',
    ],
    env: { UPSTREAM_API_KEY: 'hunter2-very-secret' },
    ...extra,
  };
}

describe('an upstream down at start-up', () => {
  it('an HTTP upstream that comes up after the gateway: hidden, refused with UPSTREAM_OFFLINE, then brought in', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/mcp`;
    const cfg = await writeConfig({
      upstreams: [everythingUpstream('ev'), { name: 'late', transport: 'http', url }],
    });
    const gw = await startInProcess(cfg);
    let late: Awaited<ReturnType<typeof startCountingServer>> | null = null;
    try {
      const before = await toolNames(gw.url);
      expect(before.some((n) => n.startsWith('ev.'))).toBe(true);
      expect(before.some((n) => n.startsWith('late.'))).toBe(false);
      const down = gw.chain.entries('gateway').find((e) => e.entry_type === 'upstream_unavailable');
      expect(down?.server_identity).toBe('late');
      expect(String((down?.detail as { reason?: string } | undefined)?.reason)).toContain(url);
      expect(String((down?.detail as { reason?: string } | undefined)?.reason)).toContain('ECONNREFUSED');

      const refused = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 2,
        method: 'tools/call',
        params: { name: 'late.record', arguments: { a: 1 } },
      });
      expect(refused.body.error.data.error_code).toBe('UPSTREAM_OFFLINE');
      expect(refused.body.error.message).toMatch(/upstream late is unavailable .*ECONNREFUSED/);
      // the agent gets the cause, not the upstream's address
      expect(refused.body.error.message).not.toContain(url);
      // the refusal is the call's terminal entry in its session chain
      const sessions = gw.db.prepare('SELECT session_id FROM sessions').all() as { session_id: string }[];
      const recorded = sessions
        .flatMap((s) => gw.chain.entries(s.session_id))
        .find((e) => e.entry_type === 'tool_call' && e.error_code === 'UPSTREAM_OFFLINE');
      expect(recorded).toMatchObject({ disposition: 'refused', server_identity: 'late' });

      late = await startCountingServer(port);
      const deadline = Date.now() + 15_000;
      while (!(await toolNames(gw.url)).includes('late.record')) {
        if (Date.now() > deadline) throw new Error('the late upstream was never brought in');
        await sleep(200);
      }
      const ok = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 3,
        method: 'tools/call',
        params: { name: 'late.record', arguments: { a: 2 } },
      });
      expect(ok.body.result).toBeDefined();
      expect(late.invocations).toHaveLength(1);
      const up = gw.chain.entries('gateway').find((e) => e.entry_type === 'upstream_available');
      expect(up).toMatchObject({ server_identity: 'late' });
    } finally {
      await gw.close();
      await late?.close();
      cleanup(cfg.dir);
    }
  });

  it('a stdio upstream whose command fails: the gateway serves the others; the reason has its stderr, never its secrets', async () => {
    const cfg = await writeConfig({ upstreams: [failingStdio('broken'), everythingUpstream('ev')] });
    const gw = await startInProcess(cfg);
    try {
      expect((await toolNames(gw.url)).some((n) => n.startsWith('ev.'))).toBe(true);
      const down = gw.chain.entries('gateway').find((e) => e.entry_type === 'upstream_unavailable');
      const reason = String((down?.detail as { reason?: string } | undefined)?.reason);
      expect(reason).toContain('exited with code 3');
      expect(reason).toContain('boom: cannot open /srv/missing');
      expect(reason).toContain('using key [redacted]');
      expect(reason).not.toContain('hunter2');
      expect(reason).not.toContain('\x1b');
      expect(gw.upstreams.availability.all().map((u) => u.upstream)).toEqual(['broken']);
      const call = await rpc(gw.url, 'alice-token', {
        jsonrpc: '2.0',
        id: 5,
        method: 'tools/call',
        params: { name: 'broken.anything', arguments: {} },
      });
      expect(call.body.error.data.error_code).toBe('UPSTREAM_OFFLINE');
      expect(call.body.error.message).toMatch(/upstream broken is unavailable \(exited with code 3\)/);
      expect(call.body.error.message).not.toContain('boom');
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('required: true keeps refuse-to-start, with the stderr tail and exit code in the error', async () => {
    const cfg = await writeConfig({ upstreams: [failingStdio('broken', { required: true })] });
    const err = await startInProcess(cfg).then(
      () => null,
      (e: Error) => e,
    );
    cleanup(cfg.dir);
    expect(err?.message).toMatch(/^upstream broken: cannot list tools: stdio upstream/);
    expect(err?.message).toContain('exited with code 3');
    expect(err?.message).toContain('| boom: cannot open /srv/missing');
    expect(err?.message).not.toContain('hunter2');
  });

  it('a required HTTP upstream that is down: the error names the URL and the cause', async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/mcp`;
    const cfg = await writeConfig({ upstreams: [{ name: 'h', transport: 'http', url, required: true }] });
    await expect(startInProcess(cfg)).rejects.toThrow(
      new RegExp(
        `upstream h: cannot list tools: HTTP upstream at ${url.replace(/[.]/g, '\\.')} is not reachable: ECONNREFUSED`,
      ),
    );
    cleanup(cfg.dir);
  });

  it('an HTTP upstream answering 503: the status code is named', async () => {
    const srv = createServer((_req, res) => res.writeHead(503).end('maintenance'));
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`;
    const cfg = await writeConfig({ upstreams: [{ name: 'h', transport: 'http', url, required: true }] });
    try {
      await expect(startInProcess(cfg)).rejects.toThrow(
        /HTTP upstream at .*\/mcp is not reachable: HTTP 503/,
      );
    } finally {
      await new Promise((r) => srv.close(r));
      cleanup(cfg.dir);
    }
  });

  it('an HTTPS upstream with a certificate nobody trusts: TLS and the certificate error are named', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-tls-'));
    const key = join(dir, 'key.pem');
    const cert = join(dir, 'cert.pem');
    const made = spawnSync('openssl', [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-days',
      '1',
      '-subj',
      '/CN=127.0.0.1',
      '-keyout',
      key,
      '-out',
      cert,
    ]);
    expect(made.status).toBe(0);
    const srv = createHttpsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (_q, r) => r.end());
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const url = `https://127.0.0.1:${(srv.address() as AddressInfo).port}/mcp`;
    const cfg = await writeConfig({ upstreams: [{ name: 'h', transport: 'http', url, required: true }] });
    try {
      await expect(startInProcess(cfg)).rejects.toThrow(
        /HTTP upstream at https:\/\/127\.0\.0\.1:\d+\/mcp is not reachable: TLS: (DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|ERR_TLS_CERT_ALTNAME_INVALID)/,
      );
    } finally {
      await new Promise((r) => srv.close(r));
      cleanup(cfg.dir);
      cleanup(dir);
    }
  });

  it('a stdio command that does not exist: named', async () => {
    const cfg = await writeConfig({
      upstreams: [{ name: 's', transport: 'stdio', command: '/nonexistent/cmcp-mcp-server', required: true }],
    });
    await expect(startInProcess(cfg)).rejects.toThrow(
      /^upstream s: cannot list tools: command not found: \/nonexistent\/cmcp-mcp-server/,
    );
    cleanup(cfg.dir);
  });

  it('a host that does not resolve: DNS is named', async () => {
    const cfg = await writeConfig({
      upstreams: [
        { name: 'h', transport: 'http', url: 'http://cmcp-no-such-host.invalid/mcp', required: true },
      ],
    });
    await expect(startInProcess(cfg)).rejects.toThrow(
      /(ENOTFOUND|EAI_AGAIN) \(DNS: cannot resolve host cmcp-no-such-host\.invalid\)/,
    );
    cleanup(cfg.dir);
  });
});

describe('a 401 from /mcp', () => {
  it('answers with the request id when the body could be read, null when not', async () => {
    const cfg = await writeConfig();
    const gw = await startInProcess(cfg);
    try {
      const a = await rpc(gw.url, 'wrong-token', { jsonrpc: '2.0', id: 42, method: 'tools/list' });
      expect(a.status).toBe(401);
      expect(a.headers.get('www-authenticate')).toMatch(/^Bearer/);
      expect(a.body).toMatchObject({
        jsonrpc: '2.0',
        id: 42,
        error: { data: { error_code: 'UNAUTHENTICATED' } },
      });
      const b = await rpc(gw.url, 'wrong-token', { jsonrpc: '2.0', id: 'req-7', method: 'ping' });
      expect(b.status).toBe(401);
      expect(b.body.id).toBe('req-7');
      const c = await rpc(gw.url, 'wrong-token', '{not json');
      expect(c.status).toBe(401);
      expect(c.body).toMatchObject({ id: null, error: { data: { error_code: 'UNAUTHENTICATED' } } });
      // still recorded in the gateway chain (the first failure of a window at once)
      const refused = gw.chain
        .entries('gateway')
        .filter((e) => e.entry_type === 'request_refused' && e.error_code === 'UNAUTHENTICATED');
      expect(refused.length).toBeGreaterThan(0);
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});
