/**
 * TLS on the listeners (docs/operations.md#tls, src/config/tls.ts): a listener beyond loopback
 * needs `tls` or an explicit `tls: off` (then `--check` and the start-up log warn); the operator's
 * certificate files are served and their key bound as `key_origin: file`; the metrics listener
 * serves the same certificate as the agent listener. Loopback without `tls` stays plain HTTP.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type PeerCertificate } from 'node:tls';
import { verifyAttestedCertificate } from '@cmcp/verify';
import { TLS_EVIDENCE_PATH, type TlsEvidence } from '@cmcp/verify/formats';
import pino from 'pino';
import { Agent, fetch } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { runStartCheck } from '../src/cli/check.js';
import { ConfigError, parseConfig } from '../src/config/index.js';
import { warnExposure } from '../src/gateway/lifecycle/records.js';
import { selfSignedCertificate } from '../src/tls/certificate.js';
import { generateTlsKey } from '../src/tls/key.js';
import { cleanup, startInProcess, writeConfig } from './harness/gateway.js';

const dir = mkdtempSync(join(tmpdir(), 'cmcp-tls-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const base = {
  database: '/tmp/x.db',
  agents: [{ agent_id: 'a', token_sha256: 'a'.repeat(64) }],
  attestation: { provider: 'tpm', tcti: 'swtpm:host=127.0.0.1,port=1' },
};
const issues = (raw: unknown): string[] => {
  try {
    parseConfig(raw);
    return [];
  } catch (e) {
    if (e instanceof ConfigError) return e.issues;
    throw e;
  }
};

function peer(url: string): Promise<PeerCertificate> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host: u.hostname, port: Number(u.port), rejectUnauthorized: false }, () => {
      resolve(s.getPeerCertificate());
      s.destroy();
    });
    s.on('error', reject);
  });
}

describe('tls configuration', () => {
  it('refuses a listener beyond loopback without tls, accepts tls: off or a tls section', () => {
    expect(issues({ ...base, listen: { host: '0.0.0.0' } })).toEqual([
      'listen.host: 0.0.0.0 is beyond loopback: configure `tls` (a generated, attested certificate or files), or say `tls: off` to serve plain HTTP',
    ]);
    expect(
      issues({ ...base, metrics: { listen: { host: '10.0.0.1', port: 9464 }, allow_remote: true } })[0],
    ).toMatch(/^metrics\.listen\.host: 10\.0\.0\.1 is beyond loopback/);
    expect(issues({ ...base, listen: { host: '0.0.0.0' }, tls: 'off' })).toEqual([]);
    const on = parseConfig({ ...base, listen: { host: '0.0.0.0' }, tls: {} });
    expect(on.tls).toEqual({
      certificate: 'generated',
      min_version: 'TLSv1.3',
      rotation_interval_s: 86_400,
      names: [],
    });
    expect(parseConfig(base).tls).toBeUndefined(); // loopback: plain HTTP without a change
  });

  it('tls: off beyond loopback warns in --check and in the start-up log', async () => {
    const file = join(dir, 'off.yaml');
    writeFileSync(
      file,
      stringify({ ...base, database: join(dir, 'off.db'), listen: { host: '0.0.0.0', port: 0 }, tls: 'off' }),
    );
    const check = await runStartCheck(file);
    expect(check.lines.find((l) => l.what === 'tls')).toMatchObject({ status: 'warn' });
    expect(check.text).toMatch(/warn\s+tls\s+tls: off on 0\.0\.0\.0 \(beyond loopback\): plain HTTP/);
    const lines: string[] = [];
    const log = pino({ level: 'warn' }, { write: (l: string) => lines.push(l) });
    warnExposure(parseConfig({ ...base, listen: { host: '0.0.0.0' }, tls: 'off' }), log);
    expect(lines.join('')).toContain('tls: off on 0.0.0.0 (beyond loopback)');
  });
});

describe('tls listeners', () => {
  it("serves the operator's certificate files and binds their key as key_origin file", async () => {
    const key = await generateTlsKey();
    const now = Date.now();
    const certPem = await selfSignedCertificate(key, {
      names: ['127.0.0.1'],
      notBefore: new Date(now - 60_000),
      notAfter: new Date(now + 3_600_000),
      evidence: null,
    });
    const files = mkdtempSync(join(dir, 'files-'));
    writeFileSync(join(files, 'cert.pem'), certPem);
    writeFileSync(join(files, 'key.pem'), key.privatePem, { mode: 0o600 });
    const cfg = await writeConfig({
      extra: {
        tls: { certificate: { cert_file: join(files, 'cert.pem'), key_file: join(files, 'key.pem') } },
      },
    });
    const gw = await startInProcess(cfg);
    try {
      expect(gw.url).toMatch(/^https:/);
      const presented = await peer(gw.url);
      expect(presented.raw.toString('base64')).toBe(certPem.replace(/-----[A-Z ]+-----|\s/g, ''));
      const dispatcher = new Agent({ connect: { ca: certPem } });
      const doc = (await (
        await fetch(`${gw.url}${TLS_EVIDENCE_PATH}`, { dispatcher })
      ).json()) as TlsEvidence;
      await dispatcher.close();
      expect(doc.binding.preimage).toMatchObject({ key_origin: 'file', spki_sha256: key.spkiSha256 });
      const pins = { gatewayMeasurements: [String(doc.binding.preimage.gateway_measurement)], evidence: doc };
      expect(() => verifyAttestedCertificate(presented.raw, pins)).toThrow(
        expect.objectContaining({ code: 'TLS_KEY_NOT_GENERATED' }),
      );
      // The software provider (dev mode) binds nothing: refused even when file keys are allowed.
      expect(() => verifyAttestedCertificate(presented.raw, { ...pins, allowFileKey: true })).toThrow(
        expect.objectContaining({ code: 'TLS_EVIDENCE_ABSENT' }),
      );
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('serves the metrics listener with the same certificate as the agent listener', async () => {
    const cfg = await writeConfig({
      extra: { tls: { rotation_interval_s: 0 }, metrics: { listen: { host: '127.0.0.1', port: 0 } } },
    });
    const gw = await startInProcess(cfg);
    try {
      expect(gw.metricsUrl).toMatch(/^https:/);
      const [main, metrics] = [await peer(gw.url), await peer(gw.metricsUrl ?? '')];
      expect(metrics.fingerprint256).toBe(main.fingerprint256);
      const r = await fetch(`${gw.metricsUrl}/metrics`, {
        dispatcher: new Agent({ connect: { rejectUnauthorized: false } }),
      });
      expect(r.status).toBe(200);
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });

  it('keeps an authenticated TLS connection past the unauthenticated-connection deadline', async () => {
    const cfg = await writeConfig({
      extra: { tls: { rotation_interval_s: 0 }, limits: { unauthenticated_timeout_ms: 300 } },
    });
    const gw = await startInProcess(cfg);
    const connections: number[] = [];
    const dispatcher = new Agent({
      connections: 1,
      keepAliveTimeout: 30_000,
      connect: { rejectUnauthorized: false },
    });
    dispatcher.on('connect', () => connections.push(Date.now()));
    try {
      const post = () =>
        fetch(`${gw.url}/sessions`, {
          method: 'POST',
          headers: { authorization: 'Bearer alice-token', 'content-type': 'application/json' },
          body: '{}',
          dispatcher,
        });
      expect((await post()).status).toBe(201);
      await new Promise((r) => setTimeout(r, 900));
      expect((await post()).status).toBe(201);
      // One connection throughout: the authenticated TLS socket was not closed at the deadline.
      expect(connections).toHaveLength(1);
    } finally {
      await dispatcher.close();
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});
