/**
 * Attested TLS fixtures: a gateway on swtpm with an enrolled AK (so its evidence chains to a
 * pinned test AK CA: hardware-attested) serving TLS with a generated, bound key; a TLS server
 * that records every byte a client sends after the handshake (to prove no request, no bearer
 * token, reached a refused server); and fetch through the attested-TLS connector.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type Server, type TLSSocket } from 'node:tls';
import { type AttestedTlsOptions, attestedConnect, loadTrustStore } from '@cmcp/verify';
import { Agent, fetch } from 'undici';
import { runEnroll } from '../../src/cli/tpm.js';
import type { Gateway } from '../../src/gateway/lifecycle/start.js';
import { enrollmentSection, makeAkCa, writeTrustStore } from '../../testing/attestation-ca.js';
import { startSwtpm } from '../../testing/vitest-swtpm.js';
import { startInProcess, type TestConfig, writeConfig } from './gateway.js';

/** A running attested gateway and what a client pins for it. */
export interface AttestedGateway {
  gw: Gateway;
  cfg: TestConfig;
  /** Options a client pins: the test AK CA and the gateway's measurement. */
  pins: AttestedTlsOptions;
  /** The trust store file pinning the test AK CA. */
  trustStorePath: string;
  stop(): Promise<void>;
}

/**
 * Starts swtpm, enrolls its AK under a fresh test CA and starts a gateway with `tls` (generated
 * certificate by default).
 */
export async function startAttestedGateway(
  tls: Record<string, unknown> = {},
  upstreams: Record<string, unknown>[] = [],
): Promise<AttestedGateway> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-atls-'));
  const sw = await startSwtpm();
  let gw: Gateway | undefined;
  try {
    const ca = await makeAkCa(dir);
    const trustStorePath = writeTrustStore(dir, ca);
    const trustStore = loadTrustStore(trustStorePath);
    const cfg = await writeConfig({
      dir,
      attestation: {
        provider: 'tpm',
        tcti: sw.tcti,
        ak_algorithm: 'ecc-p256',
        pcrs: [0, 7],
        enrollment: await enrollmentSection(dir, ca),
      },
      upstreams,
      extra: { tls },
    });
    let err = '';
    const code = await runEnroll({ config: cfg.file }, { stdout: () => {}, stderr: (t) => (err += t) });
    if (code !== 0) throw new Error(`enrollment failed: ${err}`);
    gw = await startInProcess(cfg);
    const measurement = gw.facts.gatewayMeasurement;
    if (!measurement) throw new Error('the gateway is not measured');
    const started = gw;
    return {
      gw: started,
      cfg,
      pins: { trustStore, gatewayMeasurements: [measurement] },
      trustStorePath,
      stop: async () => {
        await started.close();
        await sw.stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (e) {
    await gw?.close();
    await sw.stop();
    rmSync(dir, { recursive: true, force: true });
    throw e;
  }
}

/** A TLS server that records what each client sent after the handshake, and answers 418. */
export interface RecordingServer {
  url: string;
  /** TCP connections the server accepted (a client refused after the handshake still counts). */
  connections: number;
  /** Every byte received after a handshake, as latin1 text. */
  received(): string;
  close(): Promise<void>;
}

/** Serves `certPem`/`keyPem` (chain first-leaf PEM) on 127.0.0.1. */
export async function recordingServer(certPem: string, keyPem: string): Promise<RecordingServer> {
  const chunks: Buffer[] = [];
  const sockets = new Set<TLSSocket>();
  const state = { connections: 0 };
  const server: Server = createServer({ cert: certPem, key: keyPem, minVersion: 'TLSv1.3' }, (s) => {
    sockets.add(s);
    s.on('data', (d: Buffer) => {
      chunks.push(d);
      s.end('HTTP/1.1 418 I am a recorder\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
    });
    s.on('error', () => undefined);
    s.on('close', () => sockets.delete(s));
  });
  server.on('connection', () => {
    state.connections += 1;
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  return {
    url: `https://127.0.0.1:${port}`,
    get connections() {
      return state.connections;
    },
    received: () => Buffer.concat(chunks).toString('latin1'),
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/**
 * `POST /sessions` with a bearer token through the attested-TLS connector.
 * @returns the HTTP status, or the refusal's code (the `cause` of undici's failed fetch).
 */
export async function attestedPost(
  url: string,
  pins: AttestedTlsOptions,
  token = 'alice-token',
): Promise<{ status: number } | { refused: string }> {
  const dispatcher = new Agent({ connect: attestedConnect(pins) });
  try {
    const r = await fetch(`${url}/sessions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: '{}',
      dispatcher,
      signal: AbortSignal.timeout(10_000),
    });
    await r.arrayBuffer();
    return { status: r.status };
  } catch (e) {
    const cause = (e as { cause?: { code?: string; message?: string } }).cause;
    return { refused: cause?.code ?? cause?.message ?? String(e) };
  } finally {
    await dispatcher.close();
  }
}
