/**
 * SEV-SNP and TDX providers through configfs-tsm (docs/spec/attestation.md#sev-snp-and-tdx-through-configfs-tsm), against a
 * temporary fake configfs-tsm tree whose fake "kernel" child process answers inblob writes with
 * recorded evidence from test/vectors. These tests cover our file ABI handling (entry
 * lifecycle, generation, provider, auxblob certificate table), not signatures.
 */
import { randomBytes, X509Certificate } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { verifyClaim } from '@cmcp/verify';
import { fromB64u } from '@cmcp/verify/formats';
import { afterEach, describe, expect, it } from 'vitest';
import { tsmReport } from '../native/tsm/configfs.js';
import {
  buildCertTable,
  checkSnpReport,
  parseCertTable,
  SNP_CERT_GUIDS,
  SNP_GET_EXT_REPORT,
  SNP_GET_REPORT,
  snpReportFromResponse,
  snpReportRequest,
  snpReportViaIoctl,
} from '../native/tsm/snp.js';
import { tdxReportDataOffset } from '../native/tsm/tdx.js';
import { BindingError } from '../src/tee/provider.js';
import { SevSnpProvider, TdxProvider } from '../src/tee/tsm-provider.js';
import { type FakeTsm, snpRecorded, startFakeTsm, tdxRecorded } from './harness/fake-tsm.js';
import { cleanup, rest, startInProcess, writeConfig } from './harness/gateway.js';
import { hasVectors } from './harness/vectors.js';

const running: FakeTsm[] = [];
async function fake(o: Parameters<typeof startFakeTsm>[0]): Promise<FakeTsm> {
  const f = await startFakeTsm(o);
  running.push(f);
  return f;
}
afterEach(async () => {
  for (const f of running.splice(0)) await f.stop();
});

async function bindError(
  p: { bind(rd: Buffer): Promise<unknown> },
  rd = randomBytes(64),
): Promise<BindingError> {
  const e = await p.bind(rd).then(
    () => null,
    (err: unknown) => err,
  );
  expect(e).toBeInstanceOf(BindingError);
  return e as BindingError;
}

describe.skipIf(!hasVectors())('configfs-tsm providers (fake kernel, recorded evidence)', () => {
  it('SEV-SNP: report with our REPORT_DATA, VCEK/ASK/ARK from auxblob, entry removed', async () => {
    const f = await fake({ kind: 'sev-snp' });
    const p = new SevSnpProvider({ tsmPath: f.root, sevGuestDevice: join(f.dir, 'no-sev-guest') });
    expect(p.source()).toBe('configfs-tsm');
    const rd = randomBytes(64);
    const ev = await p.bind(rd);
    expect(ev.tpm).toBeNull();
    const snp = ev.sev_snp!;
    expect(snp.source).toBe('configfs-tsm');
    const report = fromB64u(snp.report);
    const rec = snpRecorded();
    expect(report).toHaveLength(0x4a0);
    expect(report.subarray(0x50, 0x90).equals(rd)).toBe(true);
    // everything but REPORT_DATA is the recorded report, byte for byte
    expect(Buffer.concat([report.subarray(0, 0x50), report.subarray(0x90)])).toEqual(
      Buffer.concat([rec.report.subarray(0, 0x50), rec.report.subarray(0x90)]),
    );
    expect(snp.certs.map((c) => c.kind)).toEqual(['vcek', 'ask', 'ark']);
    expect(fromB64u(snp.certs[0]!.der).equals(rec.vcek)).toBe(true);
    expect(new X509Certificate(fromB64u(snp.certs[2]!.der)).subject).toContain('ARK-Milan');
    // the entry was removed (rmdir) after the report
    expect(readdirSync(f.root)).toEqual([]);
    // a second report works on a fresh entry
    const rd2 = randomBytes(64);
    expect(
      fromB64u((await p.bind(rd2)).sev_snp!.report)
        .subarray(0x50, 0x90)
        .equals(rd2),
    ).toBe(true);
  });

  it('TDX: a DCAP v4 quote carrying REPORT_DATA at 0x238', async () => {
    const f = await fake({ kind: 'tdx' });
    const p = new TdxProvider({ tsmPath: f.root });
    const rd = randomBytes(64);
    const ev = await p.bind(rd);
    const quote = fromB64u(ev.tdx!.quote);
    expect(ev.tdx!.source).toBe('configfs-tsm');
    expect(tdxReportDataOffset(quote)).toBe(0x238);
    expect(quote.subarray(0x238, 0x238 + 64).equals(rd)).toBe(true);
    expect(quote.length).toBe(tdxRecorded().length);
    expect(readdirSync(f.root)).toEqual([]);
  });

  // ---- one test per failure class (docs/spec/attestation.md#failure-classes) ----

  it('device absent: no configfs-tsm and no /dev/sev-guest → DEVICE_ABSENT', async () => {
    const p = new SevSnpProvider({
      tsmPath: '/nonexistent/tsm/report',
      sevGuestDevice: '/nonexistent/sev-guest',
    });
    expect((await bindError(p)).reason).toBe('DEVICE_ABSENT');
    expect((await bindError(new TdxProvider({ tsmPath: '/nonexistent/tsm/report' }))).reason).toBe(
      'DEVICE_ABSENT',
    );
  });

  it('configfs write refused → CONFIGFS_WRITE_REFUSED, entry still removed', async () => {
    const f = await fake({ kind: 'sev-snp', mode: 'refuse-write' });
    const e = await bindError(new SevSnpProvider({ tsmPath: f.root }));
    expect(e.reason).toBe('CONFIGFS_WRITE_REFUSED');
    expect(readdirSync(f.root)).toEqual([]);
  });

  it('generation changed by a racing writer → GENERATION_CHANGED', async () => {
    const f = await fake({ kind: 'tdx', mode: 'race' });
    const e = await bindError(new TdxProvider({ tsmPath: f.root }));
    expect(e.reason).toBe('GENERATION_CHANGED');
    expect(e.message).toMatch(/another writer/);
  });

  it('certificate table malformed → CERT_TABLE_MALFORMED', async () => {
    const rec = snpRecorded();
    // entry offset points past the end of the blob
    const bad = Buffer.from(rec.certTable);
    bad.writeUInt32LE(bad.length + 10, 16);
    const f = await fake({ kind: 'sev-snp', auxblob: bad });
    expect((await bindError(new SevSnpProvider({ tsmPath: f.root }))).reason).toBe('CERT_TABLE_MALFORMED');
    await f.stop();
    // no terminator entry
    const f2 = await fake({ kind: 'sev-snp', auxblob: rec.certTable.subarray(0, 3 * 24) });
    expect((await bindError(new SevSnpProvider({ tsmPath: f2.root }))).reason).toBe('CERT_TABLE_MALFORMED');
    // a VCEK entry that is not a certificate
    const junk = buildCertTable([{ guid: SNP_CERT_GUIDS.vcek, data: Buffer.from('not a certificate') }]);
    const f3 = await fake({ kind: 'sev-snp', auxblob: junk });
    expect((await bindError(new SevSnpProvider({ tsmPath: f3.root }))).reason).toBe('CERT_TABLE_MALFORMED');
  });

  it('wrong provider behind configfs-tsm → PROVIDER_MISMATCH; stale report → REPORT_DATA_MISMATCH', async () => {
    const f = await fake({ kind: 'sev-snp', provider: 'tdx_guest' });
    expect((await bindError(new SevSnpProvider({ tsmPath: f.root }))).reason).toBe('PROVIDER_MISMATCH');
    const f2 = await fake({ kind: 'sev-snp', mode: 'stale' });
    expect((await bindError(new SevSnpProvider({ tsmPath: f2.root }))).reason).toBe('REPORT_DATA_MISMATCH');
  });

  it('a kernel that never answers → CONFIGFS_TIMEOUT (bounded), entry removed', async () => {
    const f = await fake({ kind: 'tdx', mode: 'silent' });
    const t0 = Date.now();
    const e = await bindError(new TdxProvider({ tsmPath: f.root, timeoutMs: 300 }));
    expect(e.reason).toBe('CONFIGFS_TIMEOUT');
    expect(Date.now() - t0).toBeLessThan(5000);
    expect(readdirSync(f.root)).toEqual([]);
  });

  it('tsmReport reads generation before and after: expected = g0 + 1', async () => {
    const f = await fake({ kind: 'tdx' });
    const r = await tsmReport({
      root: f.root,
      inblob: randomBytes(64),
      provider: 'tdx_guest',
      auxblob: true,
    });
    expect(r.generation).toBe(1);
    expect(r.auxblob).toBeNull();
    expect(r.provider).toBe('tdx_guest');
    expect(existsSync(join(f.root, r.entry))).toBe(false);
  });
});

describe.skipIf(!hasVectors())('SEV-SNP ABI pieces', () => {
  it('certificate table round trip and strict parsing', () => {
    const rec = snpRecorded();
    const t = parseCertTable(rec.certTable);
    expect(t.map((e) => [e.kind, e.guid])).toEqual([
      ['vcek', SNP_CERT_GUIDS.vcek],
      ['ask', SNP_CERT_GUIDS.ask],
      ['ark', SNP_CERT_GUIDS.ark],
    ]);
    expect(parseCertTable(Buffer.alloc(0))).toEqual([]);
    // trailing zero padding after the data is fine (the ioctl hands a page-sized buffer)
    expect(parseCertTable(Buffer.concat([rec.certTable, Buffer.alloc(4096)]))).toHaveLength(3);
    const overlap = Buffer.from(rec.certTable);
    overlap.writeUInt32LE(overlap.readUInt32LE(16), 24 + 16); // ASK offset = VCEK offset
    expect(() => parseCertTable(overlap)).toThrow(/overlaps/);
    const intoHeader = Buffer.from(rec.certTable);
    intoHeader.writeUInt32LE(8, 16);
    expect(() => parseCertTable(intoHeader)).toThrow(/table header/);
  });

  it('report checks: size, version, REPORT_DATA', () => {
    const rec = snpRecorded();
    const rd = Buffer.concat([Buffer.from([1, 2, 3, 4, 5]), Buffer.alloc(59)]);
    expect(checkSnpReport(rec.report, rd).reportDataMatches).toBe(true);
    expect(checkSnpReport(rec.report, randomBytes(64)).reportDataMatches).toBe(false);
    expect(() => checkSnpReport(rec.report.subarray(0, 100), rd)).toThrow(/bytes/);
  });

  it('/dev/sev-guest ioctl: request/response encoding and the koffi call path', () => {
    expect(SNP_GET_REPORT).toBe(0xc0205300);
    expect(SNP_GET_EXT_REPORT).toBe(0xc0205302);
    const rd = randomBytes(64);
    const req = snpReportRequest(rd, 1);
    expect(req).toHaveLength(96);
    expect(req.subarray(0, 64).equals(rd)).toBe(true);
    expect(req.readUInt32LE(64)).toBe(1);
    const resp = Buffer.alloc(4000);
    resp.writeUInt32LE(0, 0);
    resp.writeUInt32LE(0x4a0, 4);
    snpRecorded().report.copy(resp, 0x20);
    expect(snpReportFromResponse(resp).equals(snpRecorded().report)).toBe(true);
    resp.writeUInt32LE(0x16, 0);
    expect(() => snpReportFromResponse(resp)).toThrow(/status 0x16/);
    // The real ioctl needs an SEV-SNP guest; /dev/null proves the koffi marshalling reaches
    // ioctl(2) and that its errno comes back (ENOTTY = 25).
    expect(() => snpReportViaIoctl('/dev/null', rd)).toThrow(/errno 25/);
    expect(() => snpReportViaIoctl('/nonexistent/sev-guest', rd)).toThrow(/cannot open/);
  });
});

describe.skipIf(!hasVectors())('gateway with the sev-snp provider (fake configfs-tsm)', () => {
  it('binds sessions, and keeps serving with attestation_binding_failed when the kernel refuses', async () => {
    const f = await fake({ kind: 'sev-snp' });
    const cfg = await writeConfig({ attestation: { provider: 'sev-snp', tsm_path: f.root } });
    const gw = await startInProcess(cfg);
    try {
      const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s.body.binding).toEqual({ provider: 'sev-snp', status: 'bound', reason: null });
      const claim = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${s.body.session_id}/close`)).body;
      expect(claim.evidence.provider).toBe('sev-snp');
      const report = fromB64u(claim.evidence.sev_snp.report);
      expect(report.subarray(0x50, 0x90).equals(fromB64u(claim.evidence.report_data))).toBe(true);
      expect(claim.evidence.sev_snp.certs).toHaveLength(3);
      expect(claim.evidence.measurement.digest).toBe(claim.gateway_measurement);
      // The verifier reads this evidence format: the binding holds (REPORT_DATA is ours), while the
      // signature cannot (the fake kernel patched REPORT_DATA into a recorded, signed report).
      const v = verifyClaim(claim, { now: new Date('2026-11-30T00:00:00Z') });
      expect(v.checks.find((c) => c.id === 'evidence.binding')?.status).toBe('pass');
      expect(v.checks.find((c) => c.id === 'evidence.signature')?.status).toBe('fail');
      const provEntry = gw.chain.entries('gateway').find((e) => e.entry_type === 'attestation_provider');
      expect(provEntry?.detail).toMatchObject({ provider: 'sev-snp', tier: 'tee', reason: 'configured' });

      // the kernel goes away: binding fails, the gateway keeps serving
      await f.stop();
      const s2 = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
      expect(s2.status).toBe(201);
      expect(s2.body.binding).toMatchObject({ status: 'absent', reason: 'DEVICE_ABSENT' });
      const failedEntry = gw.chain
        .entries(s2.body.session_id)
        .find((e) => e.entry_type === 'attestation_binding_failed');
      expect(failedEntry?.detail).toMatchObject({ provider: 'sev-snp', reason: 'DEVICE_ABSENT' });
      const claim2 = (await rest(gw.url, 'alice-token', 'POST', `/sessions/${s2.body.session_id}/close`))
        .body;
      expect(claim2.evidence).toMatchObject({ status: 'absent', reason: 'DEVICE_ABSENT', tpm: null });
      expect(claim2.evidence.measurement.digest).toBe(claim2.gateway_measurement);
    } finally {
      await gw.close();
      cleanup(cfg.dir);
    }
  });
});
