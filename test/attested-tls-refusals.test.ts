/**
 * Attested TLS refusals over real handshakes (docs/spec/attested-tls.md#client-checks): servers
 * that are not the attested gateway — each built from real swtpm evidence the way an attacker
 * could reuse it — are refused with their own code, and the recording server shows that not a
 * byte of the request (so not the bearer token) reached any of them. One control server that
 * passes every check shows the recorder does see a request when one is sent.
 */
import { X509Certificate as NodeCert, webcrypto } from 'node:crypto';
import { connect } from 'node:tls';
import { type AttestedTlsOptions, attestedConnect, TlsBindingMemory } from '@cmcp/verify';
import { OID_TCG_DICE_CMW, TLS_EVIDENCE_PATH, type TlsEvidence } from '@cmcp/verify/formats';
import * as x509 from '@peculiar/x509';
import { Agent, fetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newGatewayKey } from '../src/gateway/lifecycle/start.js';
import { attestTlsKey } from '../src/tls/binding.js';
import { selfSignedCertificate } from '../src/tls/certificate.js';
import { generateTlsKey, type TlsKey } from '../src/tls/key.js';
import {
  type AttestedGateway,
  attestedPost,
  recordingServer,
  startAttestedGateway,
} from './harness/attested-tls.js';

const HOUR = 3_600_000;
let g: AttestedGateway;
let gatewayDoc: TlsEvidence;

beforeAll(async () => {
  g = await startAttestedGateway();
  const dispatcher = new Agent({ connect: attestedConnect(g.pins) });
  const r = await fetch(`${g.gw.url}${TLS_EVIDENCE_PATH}`, { dispatcher });
  gatewayDoc = (await r.json()) as TlsEvidence;
  await dispatcher.close();
}, 60_000);
afterAll(async () => {
  await g?.stop();
});

/** A real binding of `key` by the gateway's TPM, at the given times. */
async function bound(
  key: TlsKey,
  issuedAt = new Date(),
  notAfter = new Date(Date.now() + 24 * HOUR),
  sequence = 0,
) {
  const { evidence } = await attestTlsKey(key, g.gw.key, g.gw.facts, g.gw.provider, {
    instanceId: (g.cfg.raw.instance_id as string) ?? 'gateway',
    sequence,
    issuedAt: new Date(Math.floor(issuedAt.getTime() / 1000) * 1000),
    notAfter: new Date(Math.floor(notAfter.getTime() / 1000) * 1000),
  });
  return evidence;
}

/** Serves `evidence` in a certificate for `key` to an attested client; returns the outcome and what the server received. */
async function tryServer(
  key: TlsKey,
  evidence: TlsEvidence | null,
  pins: AttestedTlsOptions = g.pins,
  validity: [Date, Date] = [new Date(Date.now() - HOUR), new Date(Date.now() + 24 * HOUR)],
) {
  const certPem = await selfSignedCertificate(key, {
    names: ['127.0.0.1'],
    notBefore: validity[0],
    notAfter: validity[1],
    evidence,
  });
  const server = await recordingServer(certPem, key.privatePem);
  try {
    const outcome = await attestedPost(server.url, pins);
    return { outcome, received: server.received(), connections: server.connections };
  } finally {
    await server.close();
  }
}

/** Expects a refusal with `code` before any byte of the request reached the server. */
function expectRefused(r: Awaited<ReturnType<typeof tryServer>>, code: string) {
  expect(r.outcome).toEqual({ refused: code });
  // The client connected to the server (and refused its certificate) …
  expect(r.connections).toBe(1);
  // … and sent nothing after it.
  expect(r.received).toBe('');
  expect(r.received).not.toContain('alice-token');
}

describe('an attested-TLS client', () => {
  it('sends its request to a server whose certificate passes every check (the recorder sees the token)', async () => {
    const key = await generateTlsKey();
    const r = await tryServer(key, await bound(key));
    expect(r.outcome).toEqual({ status: 418 });
    expect(r.received).toContain('Bearer alice-token');
  });

  it("refuses the gateway's evidence copied into a certificate of another key: TLS_KEY_NOT_BOUND", async () => {
    expectRefused(await tryServer(await generateTlsKey(), gatewayDoc), 'TLS_KEY_NOT_BOUND');
  });

  it("refuses a binding whose quote is another binding's (evidence of another gateway): TLS_EVIDENCE_INVALID", async () => {
    const key = await generateTlsKey();
    const doc = await bound(key);
    const spliced = { ...doc, evidence: { ...gatewayDoc.evidence, report_data: doc.evidence.report_data } };
    expectRefused(await tryServer(key, spliced), 'TLS_EVIDENCE_INVALID');
  });

  it('refuses a preimage that another gateway key claims: TLS_BINDING_INVALID', async () => {
    const key = await generateTlsKey();
    const doc = await bound(key);
    expectRefused(await tryServer(key, { ...doc, cnf: { jwk: newGatewayKey().jwk } }), 'TLS_BINDING_INVALID');
  });

  it('refuses a replayed older binding once it accepted a newer one: TLS_BINDING_REPLAYED', async () => {
    const memory = new TlsBindingMemory();
    const pins = { ...g.pins, memory, origin: 'gateway.example:443' };
    const key = await generateTlsKey();
    expect((await tryServer(key, await bound(key), pins)).outcome).toEqual({ status: 418 });
    const old = await generateTlsKey();
    const replayed = await bound(old, new Date(Date.now() - HOUR));
    expectRefused(await tryServer(old, replayed, pins), 'TLS_BINDING_REPLAYED');
  });

  it('refuses a gateway of another measurement than pinned: TLS_MEASUREMENT_MISMATCH', async () => {
    const key = await generateTlsKey();
    const pins = { ...g.pins, gatewayMeasurements: [`sha256:${'0'.repeat(64)}`] };
    expectRefused(await tryServer(key, await bound(key), pins), 'TLS_MEASUREMENT_MISMATCH');
    expect(await attestedPost(g.gw.url, pins)).toEqual({ refused: 'TLS_MEASUREMENT_MISMATCH' });
  });

  it('refuses a policy other than pinned (TLS_POLICY_MISMATCH) and evidence without a pinned root (TLS_EVIDENCE_UNANCHORED)', async () => {
    const key = await generateTlsKey();
    const doc = await bound(key);
    expectRefused(
      await tryServer(key, doc, { ...g.pins, policyBundleHash: `sha256:${'1'.repeat(64)}` }),
      'TLS_POLICY_MISMATCH',
    );
    const { trustStore: _roots, ...unpinned } = g.pins;
    expectRefused(await tryServer(key, doc, unpinned), 'TLS_EVIDENCE_UNANCHORED');
  });

  it('refuses an expired binding (TLS_EVIDENCE_EXPIRED) and one older than the maximum age (TLS_EVIDENCE_STALE)', async () => {
    const key = await generateTlsKey();
    const expired = await bound(key, new Date(Date.now() - 72 * HOUR), new Date(Date.now() - 24 * HOUR));
    expectRefused(
      await tryServer(key, expired, g.pins, [
        new Date(Date.now() - 72 * HOUR),
        new Date(Date.now() - 24 * HOUR),
      ]),
      'TLS_EVIDENCE_EXPIRED',
    );
    const stale = await bound(key, new Date(Date.now() - 72 * HOUR));
    expectRefused(await tryServer(key, stale), 'TLS_EVIDENCE_STALE');
  });

  it('refuses an unparsable evidence extension: TLS_EVIDENCE_MALFORMED', async () => {
    const key = await generateTlsKey();
    const pair = key.pair as webcrypto.CryptoKeyPair;
    const cert = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: '01',
      name: 'CN=127.0.0.1',
      notBefore: new Date(Date.now() - HOUR),
      notAfter: new Date(Date.now() + HOUR),
      signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
      keys: pair,
      extensions: [
        new x509.Extension(OID_TCG_DICE_CMW, false, new Uint8Array([0x0c, 0x03, 0x7b, 0x7b, 0x7b])),
      ],
    });
    const server = await recordingServer(cert.toString('pem'), key.privatePem);
    try {
      expect(await attestedPost(server.url, g.pins)).toEqual({ refused: 'TLS_EVIDENCE_MALFORMED' });
      expect(server.received()).toBe('');
    } finally {
      await server.close();
    }
  });

  it('refuses a plain TLS server whose chain is valid: TLS_EVIDENCE_MISSING', async () => {
    const alg = { name: 'ECDSA', namedCurve: 'P-256', hash: 'SHA-256' };
    const caKeys = (await webcrypto.subtle.generateKey(alg, true, [
      'sign',
      'verify',
    ])) as webcrypto.CryptoKeyPair;
    const ca = await x509.X509CertificateGenerator.createSelfSigned({
      serialNumber: '01',
      name: 'CN=test web CA',
      notBefore: new Date(Date.now() - HOUR),
      notAfter: new Date(Date.now() + HOUR),
      keys: caKeys,
      signingAlgorithm: alg,
      extensions: [
        new x509.BasicConstraintsExtension(true, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign, true),
      ],
    });
    const leafKey = await generateTlsKey();
    const leaf = await x509.X509CertificateGenerator.create({
      serialNumber: '02',
      subject: 'CN=127.0.0.1',
      issuer: ca.subject,
      notBefore: new Date(Date.now() - HOUR),
      notAfter: new Date(Date.now() + HOUR),
      publicKey: (leafKey.pair as webcrypto.CryptoKeyPair).publicKey,
      signingKey: caKeys.privateKey,
      signingAlgorithm: alg,
      extensions: [new x509.SubjectAlternativeNameExtension([{ type: 'ip', value: '127.0.0.1' }])],
    });
    const server = await recordingServer(leaf.toString('pem'), leafKey.privatePem);
    try {
      // The chain is valid for a client trusting the CA: an ordinary TLS client authorises it.
      const authorized = await new Promise<boolean>((resolve, reject) => {
        const s = connect(
          { host: '127.0.0.1', port: Number(new URL(server.url).port), ca: ca.toString('pem') },
          () => {
            resolve(s.authorized);
            s.destroy();
          },
        );
        s.on('error', reject);
      });
      expect(authorized).toBe(true);
      expect(new NodeCert(leaf.toString('pem')).checkIssued(new NodeCert(ca.toString('pem')))).toBe(true);
      expect(await attestedPost(server.url, g.pins)).toEqual({ refused: 'TLS_EVIDENCE_MISSING' });
      expect(server.received()).toBe('');
    } finally {
      await server.close();
    }
  });
});
