/**
 * TDX CC event log (CCEL) and Confidential Space canonical event log (CEL) against
 * test/vectors/tdx/ccel-cos-113 and test/vectors/cel/confidential-space-tdx: every expectation of
 * their PROVENANCE.md (replay equals the quote's RTMRs, content digests, each mutation refused
 * with its own code). Expected values come from the vector files (the quote, or a replay done
 * independently of this code), never from the code under test.
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { CheckResult } from '@cmcp/verify';
import { loadTrustStore, verifyTdxEvidence } from '@cmcp/verify';
import {
  AbiError,
  parseCcelLog,
  parseCcelTable,
  parseCel,
  parseEventLog,
  parseTdxQuote,
} from '@cmcp/verify/abi';
import { runVerifyEvidence, type VerifyEvidenceCliOptions } from '@cmcp/verify/cli';
import { afterAll, describe, expect, it } from 'vitest';
import { replayCel, verifyCel } from '../packages/verify/src/cel.js';
import { replayCcel, verifyCcel } from '../packages/verify/src/tdx/ccel.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const T = ['tdx', 'ccel-cos-113'];
const C = ['cel', 'confidential-space-tdx'];
const readT = (f: string) => readFileSync(vectorPath(...T, f));
const table = () => readT('ccel_table.dat');
const log = () => readT('ccel_data.dat');
const quote = () => readT('cos-113-tdx-quote.dat');
const cel = () => Buffer.from(readFileSync(vectorPath(...C, 'cel.b64'), 'utf8'), 'base64');
const expT = () =>
  JSON.parse(readT('expected.json').toString('utf8')) as {
    files: Record<string, { sha256: string }>;
    rtmrs: string[];
    negative: { change: string; rtmr0?: string; rtmr1?: string }[];
    log: { events_including_header: number; events_end: number };
    table: { laml: number; lasa: string };
  };
const expC = () =>
  JSON.parse(readFileSync(vectorPath(...C, 'expected.json'), 'utf8')) as {
    records: number;
    replay_from_zero: Record<string, string>;
    files: Record<string, { sha256: string; decoded_sha256: string }>;
  };
const AT = new Date('2025-01-01T00:00:00Z');
const trust = () =>
  loadTrustStore(new URL('../packages/verify/attestation/trust-store.yaml', import.meta.url).pathname);
const get = (checks: readonly CheckResult[], id: string): CheckResult => {
  const c = checks.find((x) => x.id === id);
  if (!c) throw new Error(`no check ${id}`);
  return c;
};
const rtmrsOf = (hex: string[]) => hex.map((h) => Buffer.from(h, 'hex'));
const abiError = (f: () => unknown): AbiError => {
  try {
    f();
  } catch (err) {
    if (err instanceof AbiError) return err;
    throw err;
  }
  throw new Error('no AbiError');
};
/** A copy of `b` with `f` applied. */
const mutate = (b: Buffer, f: (c: Buffer) => void): Buffer => {
  const c = Buffer.from(b);
  f(c);
  return c;
};
/** Flips bit 0 of byte `i`. */
const flip =
  (i: number) =>
  (b: Buffer): void => {
    b[i] = (b[i] ?? 0) ^ 1;
  };
/** Sets byte `i` to `v`. */
const setByte =
  (i: number, v: number) =>
  (b: Buffer): void => {
    b[i] = v;
  };
/** Recomputes the ACPI checksum (byte 9) so that only the intended field is wrong. */
const fixChecksum = (t: Buffer): Buffer => {
  t[9] = 0;
  let sum = 0;
  for (const x of t) sum = (sum + x) & 0xff;
  t[9] = (0x100 - sum) & 0xff;
  return t;
};
const ccelRtmrs = (l: Buffer, rtmrs = rtmrsOf(expT().rtmrs)) =>
  verifyCcel({ log: l, table: table(), rtmrs, rtmrsQuoted: true });

describe.skipIf(!hasVectors())('tdx/ccel-cos-113: the real CCEL', () => {
  it('files are the ones PROVENANCE names', async () => {
    const { createHash } = await import('node:crypto');
    for (const [f, v] of Object.entries(expT().files)) {
      expect(createHash('sha256').update(readT(f)).digest('hex'), f).toBe(v.sha256);
    }
  });

  it('the quote carries the RTMRs expected.json states (independent of the replay)', () => {
    const q = parseTdxQuote(quote());
    expect(q.body.rtmr.map((r) => r.toString('hex'))).toEqual(expT().rtmrs);
  });

  it('the ACPI table parses: CCEL, TDX, LAML and LASA as stated', () => {
    const t = parseCcelTable(table());
    expect(t).toMatchObject({
      revision: 1,
      ccType: 2,
      ccSubtype: 0,
      oemId: 'INTEL ',
      oemTableId: 'EDK2    ',
    });
    expect(Number(t.laml)).toBe(expT().table.laml);
    expect(`0x${t.lasa.toString(16)}`).toBe(expT().table.lasa);
  });

  it('the log parses: 44 events, header with MR index 1, the 0xFF fill after byte 18101 accepted', () => {
    const l = parseCcelLog(log());
    expect(l.events.length).toBe(expT().log.events_including_header);
    expect(l.events[0]).toMatchObject({ pcr: 1, type: 3 });
    expect(l.algorithms).toEqual([{ algId: 0x000c, digestSize: 48 }]);
    const last = l.events.at(-1);
    expect((last?.offset ?? 0) + 12 + 2 + 48 + 4 + (last?.data.length ?? 0)).toBe(expT().log.events_end);
  });

  it('read as a TPM TCG2 log it is refused for its header index, not for its type (it is EV_NO_ACTION)', () => {
    const e = abiError(() => parseEventLog(log()));
    expect(e.code).toBe('EVENTLOG_MALFORMED');
    expect(e.message).toMatch(/has PCR 1, not 0/);
    expect(e.message).toMatch(/CC event log/);
    expect(e.message).not.toMatch(/is not the EV_NO_ACTION/);
  });

  it('replay equals the quote RTMR0..2 (RTMR3 not extended): ccel.table, ccel.parse, ccel.rtmrs pass', () => {
    const r = verifyCcel({
      log: log(),
      table: table(),
      rtmrs: parseTdxQuote(quote()).body.rtmr,
      rtmrsQuoted: true,
    });
    expect(r.checks.map((c) => [c.id, c.status])).toEqual([
      ['ccel.table', 'pass'],
      ['ccel.parse', 'pass'],
      ['ccel.rtmrs', 'pass'],
    ]);
    expect(get(r.checks, 'ccel.rtmrs').detail).toBe(
      'replayed RTMR0, RTMR1, RTMR2 equal the quote; RTMR3 not extended by the log',
    );
    expect(r.replay?.rtmrs.map((x) => x.toString('hex'))).toEqual(expT().rtmrs);
  });

  it('values not covered by a verified quote signature do not pass', () => {
    const r = verifyCcel({ log: log(), rtmrs: rtmrsOf(expT().rtmrs), rtmrsQuoted: false });
    expect(get(r.checks, 'ccel.rtmrs')).toMatchObject({ status: 'fail', reason_code: 'DEPENDENCY_FAILED' });
  });

  const mismatches: [string, (b: Buffer) => void, Record<number, string | undefined>][] = [
    ['flipped digest byte 79', flip(79), { 0: expT().negative[0]?.rtmr0 }],
    ['event 1 type set to EV_NO_ACTION', (b) => b.writeUInt32LE(3, 69), { 0: expT().negative[1]?.rtmr0 }],
    [
      'event 1 MR index 1 → 2',
      (b) => b.writeUInt32LE(2, 65),
      { 0: expT().negative[2]?.rtmr0, 1: expT().negative[2]?.rtmr1 },
    ],
    [
      'events 1 and 2 swapped',
      (b) => {
        const e1 = Buffer.from(b.subarray(65, 173));
        const e2 = Buffer.from(b.subarray(173, 297));
        Buffer.concat([e2, e1]).copy(b, 65);
      },
      { 0: expT().negative[3]?.rtmr0 },
    ],
  ];
  for (const [name, f, changed] of mismatches) {
    it(`mutation: ${name} → CCEL_RTMR_MISMATCH, the replay gives the value expected.json states`, () => {
      const r = ccelRtmrs(mutate(log(), f));
      expect(get(r.checks, 'ccel.parse').status).toBe('pass');
      expect(get(r.checks, 'ccel.rtmrs')).toMatchObject({
        status: 'fail',
        reason_code: 'CCEL_RTMR_MISMATCH',
      });
      for (const [i, v] of Object.entries(changed)) {
        expect(v).toMatch(/^[0-9a-f]{96}$/);
        expect(r.replay?.rtmrs[Number(i)]?.toString('hex')).toBe(v);
      }
    });
  }

  const parseFailures: [string, () => Buffer, string, RegExp][] = [
    [
      'header type 4',
      () => mutate(log(), (b) => b.writeUInt32LE(4, 4)),
      'CCEL_EVENT_MALFORMED',
      /type 0x00000004, not EV_NO_ACTION/,
    ],
    [
      'header MR index 2',
      () => mutate(log(), (b) => b.writeUInt32LE(2, 0)),
      'CCEL_EVENT_MALFORMED',
      /MR index 2, not 0 or 1/,
    ],
    ['cut inside the last event', () => log().subarray(0, 18091), 'CCEL_EVENT_TRUNCATED', /event data needs/],
    [
      'a non-0xFF byte in the fill',
      () => mutate(log(), setByte(20000, 0)),
      'CCEL_EVENT_MALFORMED',
      /MR index 4294967295 is not below 5/,
    ],
    [
      'an event for MR index 5',
      () => mutate(log(), (b) => b.writeUInt32LE(5, 65)),
      'CCEL_EVENT_MALFORMED',
      /MR index 5 is not below 5/,
    ],
    [
      'an event extending MRTD',
      () => mutate(log(), (b) => b.writeUInt32LE(0, 65)),
      'CCEL_EVENT_MALFORMED',
      /MR index 0 \(MRTD\)/,
    ],
    ['empty', () => Buffer.alloc(0), 'CCEL_EVENT_TRUNCATED', /empty/],
  ];
  for (const [name, bytes, code, message] of parseFailures) {
    it(`mutation: ${name} → ${code}, and the RTMR comparison is not made`, () => {
      const r = ccelRtmrs(bytes());
      expect(get(r.checks, 'ccel.parse')).toMatchObject({ status: 'fail', reason_code: code });
      expect(get(r.checks, 'ccel.parse').detail).toMatch(message);
      expect(get(r.checks, 'ccel.rtmrs')).toMatchObject({ status: 'fail', reason_code: 'DEPENDENCY_FAILED' });
    });
  }

  const tableFailures: [string, () => Buffer, RegExp][] = [
    [
      'Length 60',
      () => fixChecksum(mutate(table(), (t) => void t.writeUInt32LE(60, 4))),
      /Length is 60, not 56/,
    ],
    [
      'LAML changed, checksum not fixed',
      () => mutate(table(), (t) => void t.writeBigUInt64LE(4096n, 40)),
      /checksum/,
    ],
    [
      'LAML 4096 (checksum fixed)',
      () => fixChecksum(mutate(table(), (t) => void t.writeBigUInt64LE(4096n, 40))),
      /more than the table's LAML 4096/,
    ],
    [
      'CC type 1 (SEV)',
      () => fixChecksum(mutate(table(), (t) => void t.writeUInt8(1, 36))),
      /CC Type is 1, not 2/,
    ],
    ['signature', () => fixChecksum(mutate(table(), (t) => void t.write('FACP', 0))), /not "CCEL"/],
    ['truncated to 40 bytes', () => table().subarray(0, 40), /the table is 40 bytes/],
  ];
  for (const [name, bytes, message] of tableFailures) {
    it(`table mutation: ${name} → CCEL_TABLE_MALFORMED (the log itself still replays)`, () => {
      const r = verifyCcel({ log: log(), table: bytes(), rtmrs: rtmrsOf(expT().rtmrs), rtmrsQuoted: true });
      expect(get(r.checks, 'ccel.table')).toMatchObject({
        status: 'fail',
        reason_code: 'CCEL_TABLE_MALFORMED',
      });
      expect(get(r.checks, 'ccel.table').detail).toMatch(message);
      expect(get(r.checks, 'ccel.rtmrs').status).toBe('pass');
    });
  }
});

describe.skipIf(!hasVectors())('tdx/ccel-cos-113-dupe-separator: a second real CCEL (unpadded)', () => {
  const D = ['tdx', 'ccel-cos-113-dupe-separator'];
  const exp = () =>
    JSON.parse(readFileSync(vectorPath(...D, 'expected.json'), 'utf8')) as {
      rtmrs_upstream_asserts: string[];
      log: { events_including_header: number };
    };
  const bytes = () => readFileSync(vectorPath(...D, 'cos-113-intel-tdx-dupe-separator-unpadded.bin'));

  it('replays (no fill) to the RTMR0..2 go-eventlog asserts', () => {
    const want = [...exp().rtmrs_upstream_asserts, '0'.repeat(96)];
    const r = verifyCcel({ log: bytes(), rtmrs: rtmrsOf(want), rtmrsQuoted: true });
    expect(get(r.checks, 'ccel.parse').detail).toMatch(
      new RegExp(`^${exp().log.events_including_header} events`),
    );
    expect(get(r.checks, 'ccel.rtmrs').status).toBe('pass');
    expect(r.replay?.rtmrs.map((x) => x.toString('hex'))).toEqual(want);
  });

  it('against the other boot’s quote: RTMR0 and RTMR1 differ, RTMR2 (same OS image) does not', () => {
    const r = verifyCcel({ log: bytes(), rtmrs: parseTdxQuote(quote()).body.rtmr, rtmrsQuoted: true });
    expect(get(r.checks, 'ccel.rtmrs')).toMatchObject({
      status: 'fail',
      reason_code: 'CCEL_RTMR_MISMATCH',
      detail: 'replayed RTMR0, RTMR1 differ from the quote; RTMR3 not extended by the log',
    });
  });
});

describe.skipIf(!hasVectors())('cel/confidential-space-tdx: the real CEL', () => {
  it('file hashes as stated; 18 CC MR records for RTMR3, numbered in order, content type 80', async () => {
    const { createHash } = await import('node:crypto');
    expect(createHash('sha256').update(cel()).digest('hex')).toBe(expC().files['cel.b64']?.decoded_sha256);
    const records = parseCel(cel());
    expect(records.length).toBe(expC().records);
    expect(records.map((r) => r.recnum)).toEqual([...Array(18).keys()]);
    expect(new Set(records.map((r) => `${r.indexType}:${r.index}:${r.contentType}`))).toEqual(
      new Set(['108:4:80']),
    );
  });

  it('content digests hold and the replay from zero gives the RTMR3 expected.json states', () => {
    const want = expC().replay_from_zero;
    const rtmrs = rtmrsOf(['RTMR0', 'RTMR1', 'RTMR2', 'RTMR3'].map((k) => want[k] as string));
    const r = verifyCel({ log: cel(), rtmrs, quoted: true });
    expect(r.checks.map((c) => [c.id, c.status])).toEqual([
      ['cel.parse', 'pass'],
      ['cel.digests', 'pass'],
      ['cel.replay', 'pass'],
    ]);
    expect(get(r.checks, 'cel.digests').detail).toMatch(/^18 Confidential Space record/);
    expect(r.replay?.rtmrs[3]?.toString('hex')).toBe(want.RTMR3);
  });

  const documented = () =>
    rtmrsOf(['RTMR0', 'RTMR1', 'RTMR2', 'RTMR3'].map((k) => expC().replay_from_zero[k] as string));
  const cases: [string, () => Buffer, Record<string, string>][] = [
    [
      'flipped digest byte 29',
      () => mutate(cel(), flip(29)),
      { 'cel.parse': 'OK', 'cel.digests': 'CEL_DIGEST_MISMATCH', 'cel.replay': 'CEL_REPLAY_MISMATCH' },
    ],
    [
      'flipped content byte 90',
      () => mutate(cel(), flip(90)),
      { 'cel.parse': 'OK', 'cel.digests': 'CEL_DIGEST_MISMATCH', 'cel.replay': 'OK' },
    ],
    [
      'record 0 index 4 → 3',
      () => mutate(cel(), setByte(18, 3)),
      { 'cel.parse': 'OK', 'cel.digests': 'OK', 'cel.replay': 'CEL_REPLAY_MISMATCH' },
    ],
    [
      'records 0 and 1 swapped',
      () => {
        const b = cel();
        const recs = parseCel(b);
        const [r0, r1] = [recs[0]?.offset ?? 0, recs[1]?.offset ?? 0];
        const r2 = recs[2]?.offset ?? 0;
        return Buffer.concat([b.subarray(r1, r2), b.subarray(r0, r1), b.subarray(r2)]);
      },
      {
        'cel.parse': 'CEL_RECORD_MALFORMED',
        'cel.digests': 'DEPENDENCY_FAILED',
        'cel.replay': 'DEPENDENCY_FAILED',
      },
    ],
    [
      'last 10 bytes cut',
      () => cel().subarray(0, cel().length - 10),
      {
        'cel.parse': 'CEL_RECORD_TRUNCATED',
        'cel.digests': 'DEPENDENCY_FAILED',
        'cel.replay': 'DEPENDENCY_FAILED',
      },
    ],
    [
      'index type 108 → 2 (NV index)',
      () => mutate(cel(), setByte(13, 2)),
      {
        'cel.parse': 'CEL_RECORD_MALFORMED',
        'cel.digests': 'DEPENDENCY_FAILED',
        'cel.replay': 'DEPENDENCY_FAILED',
      },
    ],
    [
      'CC MR index 0 (MRTD)',
      () => mutate(cel(), setByte(18, 0)),
      {
        'cel.parse': 'CEL_RECORD_MALFORMED',
        'cel.digests': 'DEPENDENCY_FAILED',
        'cel.replay': 'DEPENDENCY_FAILED',
      },
    ],
  ];
  for (const [name, bytes, want] of cases) {
    it(`mutation: ${name} → ${Object.values(want).join(' / ')}`, () => {
      const r = verifyCel({ log: bytes(), rtmrs: documented(), quoted: true });
      expect(Object.fromEntries(r.checks.map((c) => [c.id, c.reason_code]))).toEqual(want);
    });
  }
});

describe.skipIf(!hasVectors())('raw TDX evidence with --ccel / --ccel-table / --cel', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-ccel-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const put = (name: string, b: Uint8Array) => {
    const p = join(dir, name);
    writeFileSync(p, b);
    return p;
  };
  const run = async (opts: VerifyEvidenceCliOptions) => {
    let out = '';
    let err = '';
    const code = await runVerifyEvidence(opts, {
      stdout: (s) => {
        out += s;
      },
      stderr: (s) => {
        err += s;
      },
    });
    return { code, out, err };
  };
  const base = (): VerifyEvidenceCliOptions => ({
    tdxQuote: vectorPath(...T, 'cos-113-tdx-quote.dat'),
    reportData: readT('nonce.dat').toString('hex'),
    at: AT.toISOString(),
    require: 'hardware-attested',
  });

  it('library: the quote verifies and anchors, and the CCEL replays to its RTMRs', () => {
    const r = verifyTdxEvidence({
      quote: quote(),
      expectedReportData: readT('nonce.dat'),
      ccel: log(),
      ccelTable: table(),
      trustStore: trust(),
      now: AT,
    });
    expect(get(r.checks, 'evidence.signature').status).toBe('pass');
    expect(get(r.checks, 'evidence.anchor').status).toBe('pass');
    expect(get(r.checks, 'ccel.rtmrs').status).toBe('pass');
    expect(r.verdict).toBe('hardware-attested');
  });

  it('library: the CEL from another VM does not match this quote’s RTMR3 (CEL_REPLAY_MISMATCH)', () => {
    const r = verifyTdxEvidence({ quote: quote(), ccel: log(), cel: cel(), trustStore: trust(), now: AT });
    expect(get(r.checks, 'cel.digests').status).toBe('pass');
    expect(get(r.checks, 'cel.replay')).toMatchObject({ status: 'fail', reason_code: 'CEL_REPLAY_MISMATCH' });
    expect(r.verdict).toBe('invalid');
  });

  it('library: a CC event log that does not parse leaves the CEL replay without start values (DEPENDENCY_FAILED)', () => {
    const r = verifyTdxEvidence({
      quote: quote(),
      ccel: log().subarray(0, 18091),
      cel: cel(),
      trustStore: trust(),
      now: AT,
    });
    expect(get(r.checks, 'ccel.parse').reason_code).toBe('CCEL_EVENT_TRUNCATED');
    expect(get(r.checks, 'cel.digests').status).toBe('pass');
    expect(get(r.checks, 'cel.replay')).toMatchObject({ status: 'fail', reason_code: 'DEPENDENCY_FAILED' });
  });

  it('CLI: --ccel and --ccel-table with the quote → exit 0, the three ccel checks pass', async () => {
    const r = await run({
      ...base(),
      ccel: vectorPath(...T, 'ccel_data.dat'),
      ccelTable: vectorPath(...T, 'ccel_table.dat'),
    });
    expect(r.err).toBe('');
    expect(r.out).toMatch(/PASS\s+ccel\.table/);
    expect(r.out).toMatch(/PASS\s+ccel\.rtmrs\s+OK: replayed RTMR0, RTMR1, RTMR2 equal the quote/);
    expect(r.code).toBe(0);
  });

  it('CLI: a flipped digest → CCEL_RTMR_MISMATCH, exit 1', async () => {
    const b = mutate(log(), flip(79));
    const r = await run({ ...base(), ccel: put('flipped.dat', b) });
    expect(r.out).toMatch(/FAIL\s+ccel\.rtmrs\s+CCEL_RTMR_MISMATCH: replayed RTMR0 differ/);
    expect(r.code).toBe(1);
  });

  it('CLI: the CEL (decoded) → cel.replay CEL_REPLAY_MISMATCH, exit 1; usage errors exit 2', async () => {
    const r = await run({ ...base(), ccel: vectorPath(...T, 'ccel_data.dat'), cel: put('cel.bin', cel()) });
    expect(r.out).toMatch(/FAIL\s+cel\.replay\s+CEL_REPLAY_MISMATCH/);
    expect(r.code).toBe(1);
    const u = await run({ cel: put('cel2.bin', cel()), eventLog: vectorPath(...T, 'ccel_data.dat') });
    expect(u.code).toBe(2);
    expect(u.err).toMatch(/--cel goes with --tdx-quote or --tpm-quote/);
    const c = await run({
      ccel: vectorPath(...T, 'ccel_data.dat'),
      eventLog: vectorPath(...T, 'ccel_data.dat'),
    });
    expect(c.code).toBe(2);
    expect(c.err).toMatch(/--ccel goes with --tdx-quote/);
    const t = await run({ ...base(), ccelTable: vectorPath(...T, 'ccel_table.dat') });
    expect(t.code).toBe(2);
    expect(t.err).toMatch(/--ccel-table goes with --ccel/);
  });
});

/**
 * The PCR form of a CEL (Confidential Space on a vTPM: PCR 13, SHA-256). No such log ships with
 * the upstream repositories, so it is built here from the real records' contents: each record
 * re-encoded with index type PCR 13 and the SHA-256 of its content TLV. PCR 13 is computed with
 * node:crypto in the test, not by the code under test.
 */
describe.skipIf(!hasVectors())('CEL with PCR records (built from the real records)', () => {
  const tlv = (type: number, value: Buffer) => {
    const h = Buffer.alloc(5);
    h[0] = type;
    h.writeUInt32BE(value.length, 1);
    return Buffer.concat([h, value]);
  };
  const records = () => parseCel(cel());
  const pcrCel = () =>
    Buffer.concat(
      records().map((r) => {
        const n = Buffer.alloc(8);
        n.writeBigUInt64BE(BigInt(r.recnum));
        const d = createHash('sha256').update(r.contentTlv).digest();
        return Buffer.concat([tlv(0, n), tlv(1, Buffer.from([13])), tlv(3, tlv(0x0b, d)), r.contentTlv]);
      }),
    );
  const pcr13 = () =>
    records().reduce(
      (pcr, r) =>
        createHash('sha256')
          .update(Buffer.concat([pcr, createHash('sha256').update(r.contentTlv).digest()]))
          .digest(),
      Buffer.alloc(32),
    );

  it('replays PCR 13 in the SHA-256 bank and compares it with a supplied value', () => {
    const ok = verifyCel({
      log: pcrCel(),
      pcrValues: [{ hashAlg: 0x000b, index: 13, value: pcr13() }],
      quoted: true,
    });
    expect(ok.checks.map((c) => [c.id, c.reason_code])).toEqual([
      ['cel.parse', 'OK'],
      ['cel.digests', 'OK'],
      ['cel.replay', 'OK'],
    ]);
    const other = Buffer.from(pcr13());
    other[0] = (other[0] ?? 0) ^ 1;
    const bad = verifyCel({
      log: pcrCel(),
      pcrValues: [{ hashAlg: 0x000b, index: 13, value: other }],
      quoted: true,
    });
    expect(get(bad.checks, 'cel.replay')).toMatchObject({
      reason_code: 'CEL_REPLAY_MISMATCH',
      detail: 'replayed sha256:13 differ from the quoted value(s)',
    });
  });

  it('with a real TPM quote (Azure vTPM, PCRs 0..7): PCR 13 is not quoted → cel.replay not-applicable; a flipped content byte → CEL_DIGEST_MISMATCH, exit 1', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-cel-tpm-'));
    try {
      const AZ = (f: string) => vectorPath('tpm', 'azure-vtpm-2026-07-27', f);
      const e = JSON.parse(readFileSync(AZ('expected.json'), 'utf8')) as {
        pcrs_bin: { sha256_bank: Record<string, string> };
      };
      const put = (name: string, b: Uint8Array | string) => {
        const p = join(dir, name);
        writeFileSync(p, b);
        return p;
      };
      const opts: VerifyEvidenceCliOptions = {
        tpmQuote: AZ('quote.msg'),
        tpmSig: AZ('quote.sig'),
        tpmSigFormat: 'raw-rsassa-sha256',
        ak: AZ('ak.pub'),
        nonce: `@${AZ('nonce.hex')}`,
        pcrsFile: put('pcrs.json', JSON.stringify(e.pcrs_bin.sha256_bank)),
        at: '2026-11-30T00:00:00Z',
        require: 'hardware-unanchored',
      };
      let out = '';
      const io = {
        stdout: (t: string) => {
          out += t;
        },
        stderr: (t: string) => {
          out += t;
        },
      };
      expect(await runVerifyEvidence({ ...opts, cel: put('pcr.cel', pcrCel()) }, io)).toBe(0);
      expect(out).toMatch(/PASS\s+cel\.digests/);
      expect(out).toMatch(/N\/A\s+cel\.replay\s+NOT_SUPPLIED: no quoted register is extended by the CEL/);
      out = '';
      const flipped = pcrCel();
      // record 0 here: recnum TLV 13 + index TLV 6 + digests TLV 42 bytes, then the content TLV
      // (5-byte header) whose nested TLV (5-byte header) holds the image reference
      const at = 13 + 6 + 42 + 5 + 5 + 2;
      flipped[at] = (flipped[at] ?? 0) ^ 1;
      expect(await runVerifyEvidence({ ...opts, cel: put('flipped.cel', flipped) }, io)).toBe(1);
      expect(out).toMatch(/FAIL\s+cel\.digests\s+CEL_DIGEST_MISMATCH/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!hasVectors())('random mutations of the real logs fail closed', () => {
  let seed = 7;
  const rnd = () => {
    seed = (seed * 1103515245 + 12345) & 0x7fffffff;
    return seed;
  };
  const mutations = (b: Buffer, n: number, span = b.length) =>
    Array.from({ length: n }, () => {
      const m = Buffer.from(b);
      for (let k = 1 + (rnd() % 4); k > 0; k--) m[rnd() % span] = rnd() & 0xff;
      return m;
    });

  it('CCEL (events part) and its table: only AbiError from the parsers; the checks never throw (1 500 mutations)', () => {
    const rtmrs = rtmrsOf(expT().rtmrs);
    for (const m of mutations(log().subarray(0, 20000), 1000, 18200)) {
      try {
        replayCcel(parseCcelLog(m));
      } catch (err) {
        expect(err).toBeInstanceOf(AbiError);
      }
      const r = verifyCcel({ log: m, rtmrs, rtmrsQuoted: true });
      expect(r.checks.map((c) => c.id)).toEqual(['ccel.table', 'ccel.parse', 'ccel.rtmrs']);
    }
    for (const m of mutations(table(), 500)) {
      try {
        parseCcelTable(m);
      } catch (err) {
        expect(err).toBeInstanceOf(AbiError);
        expect((err as AbiError).code).toBe('CCEL_TABLE_MALFORMED');
      }
    }
  });

  it('CEL: only AbiError from the parser; the checks never throw (1 000 mutations)', () => {
    for (const m of mutations(cel(), 1000)) {
      try {
        replayCel(parseCel(m));
      } catch (err) {
        expect(err).toBeInstanceOf(AbiError);
      }
      expect(verifyCel({ log: m }).checks.map((c) => c.id)).toEqual([
        'cel.parse',
        'cel.digests',
        'cel.replay',
      ]);
    }
  });
});
