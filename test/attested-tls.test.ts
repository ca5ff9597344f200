/**
 * Attested TLS end to end on swtpm (docs/spec/attested-tls.md): the gateway's generated TLS key
 * is bound into a TPM quote that its certificate carries; a client pinning the test AK CA and
 * the gateway's measurement accepts it over a real handshake, through each client entry point
 * (undici connector, node:https agent, checkServerIdentity hook, plain function); the same
 * document is served at the well-known route; a rotation gives a fresh key and binding while an
 * open connection keeps the old one.
 */
import { request } from 'node:https';
import { connect, type PeerCertificate } from 'node:tls';
import {
  AttestedHttpsAgent,
  attestedCheckServerIdentity,
  attestedConnect,
  TlsBindingMemory,
  verifyAttestedCertificate,
} from '@cmcp/verify';
import { runVerifyTls } from '@cmcp/verify/cli';
import {
  decodeTlsEvidenceExtension,
  OID_TCG_DICE_CMW,
  TLS_EVIDENCE_PATH,
  type TlsEvidence,
} from '@cmcp/verify/formats';
import * as x509 from '@peculiar/x509';
import { Agent, fetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connectAttestedMcp } from '../examples/attested-tls-agent.js';
import { type AttestedGateway, attestedPost, startAttestedGateway } from './harness/attested-tls.js';

let g: AttestedGateway;
beforeAll(async () => {
  g = await startAttestedGateway();
}, 60_000);
afterAll(async () => {
  await g?.stop();
});

/** The leaf certificate a server presents (no check: only to look at it). */
function peerCertificate(url: string): Promise<PeerCertificate> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const s = connect({ host: u.hostname, port: Number(u.port), rejectUnauthorized: false }, () => {
      resolve(s.getPeerCertificate());
      s.destroy();
    });
    s.on('error', reject);
  });
}

/** GET through node:https with `options`; resolves the status or rejects with the refusal. */
function httpsGet(url: string, options: Parameters<typeof request>[1]): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { ...options, headers: { authorization: 'Bearer alice-token' } }, (res) => {
      res.resume();
      resolve(res.statusCode ?? 0);
    });
    req.on('error', reject);
    req.end();
  });
}

describe('attested TLS on the agent listener', () => {
  it('serves https and an attested client opens a session over it', async () => {
    expect(g.gw.url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(await attestedPost(g.gw.url, g.pins)).toEqual({ status: 201 });
  });

  it('carries in its certificate the document the well-known route serves, binding this key', async () => {
    const cert = await peerCertificate(g.gw.url);
    const ext = new x509.X509Certificate(cert.raw).getExtension(OID_TCG_DICE_CMW);
    expect(ext?.critical).toBe(false);
    const inCert = decodeTlsEvidenceExtension(
      new Uint8Array(ext?.value ?? new ArrayBuffer(0)),
    ) as TlsEvidence;
    const dispatcher = new Agent({ connect: attestedConnect(g.pins) });
    const served = (await (
      await fetch(`${g.gw.url}${TLS_EVIDENCE_PATH}`, { dispatcher })
    ).json()) as TlsEvidence;
    await dispatcher.close();
    expect(served).toEqual(inCert);
    expect(served.evidence.status).toBe('bound');
    expect(served.binding.preimage).toMatchObject({
      domain: 'cmcp.tls-binding',
      key_origin: 'generated',
      sequence: 0,
      gateway_measurement: g.gw.facts.gatewayMeasurement,
    });
    const accepted = verifyAttestedCertificate(cert.raw, g.pins);
    expect(accepted.verdict).toBe('hardware-attested');
    // The well-known document checks against the certificate as well as the extension does.
    expect(verifyAttestedCertificate(cert.raw, { ...g.pins, evidence: served }).preimage).toEqual(
      accepted.preimage,
    );
  });

  it('accepts the gateway through the node:https agent and the checkServerIdentity hook', async () => {
    expect(await httpsGet(`${g.gw.url}/healthz`, { agent: new AttestedHttpsAgent(g.pins) })).toBe(200);
    // The hook runs where the chain is trusted: here the client trusts this very certificate.
    const cert = await peerCertificate(g.gw.url);
    const ca = new x509.X509Certificate(cert.raw).toString('pem');
    const hooked = { ca, agent: false as const, checkServerIdentity: attestedCheckServerIdentity(g.pins) };
    expect(await httpsGet(`${g.gw.url}/healthz`, hooked)).toBe(200);
    const wrong = attestedCheckServerIdentity({
      ...g.pins,
      gatewayMeasurements: [`sha256:${'0'.repeat(64)}`],
    });
    await expect(
      httpsGet(`${g.gw.url}/healthz`, { ...hooked, checkServerIdentity: wrong }),
    ).rejects.toMatchObject({
      code: 'TLS_MEASUREMENT_MISMATCH',
    });
    await expect(
      httpsGet(`${g.gw.url}/healthz`, {
        agent: new AttestedHttpsAgent({ ...g.pins, gatewayMeasurements: [`sha256:${'0'.repeat(64)}`] }),
      }),
    ).rejects.toMatchObject({ code: 'TLS_MEASUREMENT_MISMATCH' });
  });

  it('the worked example: an MCP SDK client lists tools over attested TLS, and is refused under another measurement', async () => {
    const { client, close } = await connectAttestedMcp(g.gw.url, 'alice-token', g.pins);
    try {
      expect(Array.isArray((await client.listTools()).tools)).toBe(true);
    } finally {
      await close();
    }
    const wrong = { ...g.pins, gatewayMeasurements: [`sha256:${'0'.repeat(64)}`] };
    await expect(connectAttestedMcp(g.gw.url, 'alice-token', wrong)).rejects.toSatisfy(
      (e: unknown) =>
        JSON.stringify(e, Object.getOwnPropertyNames(e)).includes('TLS_MEASUREMENT_MISMATCH') ||
        String((e as { cause?: { code?: string } }).cause?.code).includes('TLS_MEASUREMENT_MISMATCH'),
    );
  });

  it('`cmcp-verify tls` accepts the gateway and refuses it under another measurement', async () => {
    const run = async (measurement: string) => {
      let out = '';
      const code = await runVerifyTls(
        g.gw.url,
        { measurement: [measurement], trustStore: g.trustStorePath, json: true },
        { stdout: (t) => (out += t), stderr: (t) => (out += t) },
      );
      return { code, report: JSON.parse(out) };
    };
    const ok = await run(String(g.gw.facts.gatewayMeasurement));
    expect(ok.code).toBe(0);
    expect(ok.report).toMatchObject({ accepted: true, verdict: 'hardware-attested' });
    const refused = await run(`sha256:${'0'.repeat(64)}`);
    expect(refused.code).toBe(1);
    expect(refused.report).toMatchObject({ accepted: false, code: 'TLS_MEASUREMENT_MISMATCH' });
  });

  it('rotates to a fresh key and binding; an open connection drains on the old key', async () => {
    const memory = new TlsBindingMemory();
    const pins = { ...g.pins, memory };
    const before = await peerCertificate(g.gw.url);
    const oldDoc = verifyAttestedCertificate(before.raw, pins).preimage;
    // One connection, kept open across the rotation.
    const checked: number[] = [];
    const dispatcher = new Agent({
      connect: attestedConnect(pins, (r) => checked.push(r.preimage.sequence)),
      connections: 1,
      keepAliveTimeout: 30_000,
    });
    const health = async () => (await fetch(`${g.gw.url}/healthz`, { dispatcher })).status;
    expect(await health()).toBe(200);
    await g.gw.tls?.rotate();
    expect(await health()).toBe(200);
    // The second request went over the same connection, checked once, on the previous key.
    expect(checked).toEqual([oldDoc.sequence]);
    const after = await peerCertificate(g.gw.url);
    expect(after.fingerprint256).not.toBe(before.fingerprint256);
    const newDoc = verifyAttestedCertificate(after.raw, pins).preimage;
    expect(newDoc.sequence).toBe(oldDoc.sequence + 1);
    expect(newDoc.spki_sha256).not.toBe(oldDoc.spki_sha256);
    // A client holding the previous evidence gets a clear failure, and passes on a fresh check.
    const oldEvidence = decodeTlsEvidenceExtension(
      new Uint8Array(
        new x509.X509Certificate(before.raw).getExtension(OID_TCG_DICE_CMW)?.value ?? new ArrayBuffer(0),
      ),
    );
    expect(() => verifyAttestedCertificate(after.raw, { ...g.pins, evidence: oldEvidence })).toThrow(
      expect.objectContaining({ code: 'TLS_KEY_NOT_BOUND' }),
    );
    // The older binding is now a replay for this client.
    expect(() => verifyAttestedCertificate(before.raw, pins)).toThrow(
      expect.objectContaining({ code: 'TLS_BINDING_REPLAYED' }),
    );
    await dispatcher.close();
    expect(await attestedPost(g.gw.url, pins)).toEqual({ status: 201 });
  });
});
