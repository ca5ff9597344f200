/**
 * TCG2 crypto-agile event logs against test/vectors/tpm/eventlogs: every expectation of its
 * PROVENANCE.md (replay per bank, flipped digest byte, truncation, wrong bank) plus strictness
 * cases on synthetic logs (header, algorithms, StartupLocality, garbage). Expected values come
 * from the vector files (go-tpm-tools / tpm2_eventlog), never from the code under test.
 */
import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AbiError as EventLogError } from '@cmcp/verify/abi';
import { runVerifyEvidence, type VerifyEvidenceCliOptions } from '@cmcp/verify/cli';
import { afterAll, describe, expect, it } from 'vitest';
import {
  parseEventLog,
  replayEventLog,
  summarizeEventLog,
  verifyEventLog,
} from '../packages/verify/src/eventlog.js';
import { type PcrValue, TPM_ALG } from '../packages/verify/src/tpm/index.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const DIR = ['tpm', 'eventlogs'];
const read = (f: string) => readFileSync(vectorPath(...DIR, f));
type Bank = 'sha1' | 'sha256' | 'sha384';
interface Expected {
  logs: Record<
    string,
    {
      algorithms: Record<string, number>;
      events_including_header: number;
      bytes: number;
      final_pcrs: Record<Bank, Record<string, string>>;
      sha256_of_sha256_pcr0_7_concat: string;
      negatives: Record<string, unknown>;
    }
  >;
  files: Record<string, { bytes: number; sha256: string }>;
}
const expected = () => JSON.parse(read('expected.json').toString('utf8')) as Expected;
const ALG: Record<Bank, number> = { sha1: TPM_ALG.SHA1, sha256: TPM_ALG.SHA256, sha384: TPM_ALG.SHA384 };
const SHA256_ONLY_SEPARATOR = '3d458cfe55cc03ea1f443f1562beec8df51c75e14a9fcf9a7234a13f198e7969';

const parseError = (bytes: Uint8Array): EventLogError => {
  try {
    parseEventLog(bytes);
  } catch (err) {
    if (err instanceof EventLogError) return err;
    throw err;
  }
  throw new Error('parsed');
};

const LOGS = [
  {
    file: 'ubuntu-2404-amd-sevsnp.bin',
    flip: 45174,
    pcr5: '7c07b13f4c75e22c43ef3599b4cabf5b1cb05177d36f6c394e96992e006ffb83',
  },
  {
    file: 'rhel8-uefi.bin',
    flip: 33908,
    pcr5: 'ce968df9b0616aed5474295d7557379e4904c6f6d70ec42bff254d250c5da7db',
  },
] as const;

describe.skipIf(!hasVectors())('tpm/eventlogs (TCG2 crypto-agile)', () => {
  for (const { file, flip, pcr5 } of LOGS) {
    describe(file, () => {
      it('the file is the stated one (bytes, SHA-256)', () => {
        const f = expected().files[file];
        const b = read(file);
        expect(b.length).toBe(f?.bytes);
        expect(createHash('sha256').update(b).digest('hex')).toBe(f?.sha256);
      });

      it('parses strictly: Spec ID Event03 header with sha1/20, sha256/32, sha384/48; stated event count; no StartupLocality, no EV_NO_ACTION after the header', () => {
        const e = expected().logs[file];
        const log = parseEventLog(read(file));
        expect(log.events).toHaveLength(e?.events_including_header ?? -1);
        expect(Object.fromEntries(log.algorithms.map((a) => [a.algId, a.digestSize]))).toEqual({
          [TPM_ALG.SHA1]: 20,
          [TPM_ALG.SHA256]: 32,
          [TPM_ALG.SHA384]: 48,
        });
        expect(log.specVersion.major).toBe(2);
        expect(log.startupLocality).toBeNull();
        expect(log.events.slice(1).filter((x) => x.type === 3)).toHaveLength(0);
      });

      it('replay equals the final PCRs in SHA-1, SHA-256 and SHA-384; other PCRs receive no events', () => {
        const e = expected().logs[file];
        const replay = replayEventLog(parseEventLog(read(file)));
        for (const bank of ['sha1', 'sha256', 'sha384'] as const) {
          const want = e?.final_pcrs[bank] ?? {};
          const got = replay.banks.get(ALG[bank]);
          expect(got, bank).toBeDefined();
          const gotHex = Object.fromEntries(
            [...(got ?? new Map()).entries()].map(([i, v]) => [String(i), v.toString('hex')]),
          );
          expect(gotHex, bank).toEqual(want);
        }
        expect(replay.covered).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 14]);
        // a SHA-256 PCR that received only the separator event
        expect(replay.banks.get(TPM_ALG.SHA256)?.get(2)?.toString('hex')).toBe(SHA256_ONLY_SEPARATOR);
      });

      it('SHA-256 over the concatenated SHA-256 PCRs 0..7 is the stated quote pcrDigest', () => {
        const bank = replayEventLog(parseEventLog(read(file))).banks.get(TPM_ALG.SHA256);
        const concat = Buffer.concat([0, 1, 2, 3, 4, 5, 6, 7].map((i) => bank?.get(i) ?? Buffer.alloc(0)));
        expect(createHash('sha256').update(concat).digest('hex')).toBe(
          expected().logs[file]?.sha256_of_sha256_pcr0_7_concat,
        );
      });

      it(`negative: flipping byte ${flip} (first byte of the last event's SHA-256 digest) changes SHA-256 PCR5 to the stated value, nothing else`, () => {
        const good = replayEventLog(parseEventLog(read(file)));
        const b = Buffer.from(read(file));
        b[flip] = (b[flip] ?? 0) ^ 0x01; // the vector's flip: lowest bit
        // confirm the position: the last event is PCR 5, and byte `flip` is its SHA-256 digest[0]
        const log = parseEventLog(b);
        const last = log.events[log.events.length - 1];
        expect(last?.pcr).toBe(5);
        expect(flip).toBe((last?.offset ?? 0) + 12 + 2 + 20 + 2);
        const bad = replayEventLog(log);
        expect(bad.banks.get(TPM_ALG.SHA256)?.get(5)?.toString('hex')).toBe(pcr5);
        expect(pcr5).not.toBe(expected().logs[file]?.final_pcrs.sha256['5']);
        for (const [alg, bank] of good.banks) {
          for (const [i, v] of bank) {
            if (alg === TPM_ALG.SHA256 && i === 5) continue;
            expect(bad.banks.get(alg)?.get(i)?.equals(v), `${alg}:${i}`).toBe(true);
          }
        }
        // against the stated table (as quoted PCRs) the flipped log must fail
        const quoted: PcrValue[] = Object.entries(expected().logs[file]?.final_pcrs.sha256 ?? {}).map(
          ([i, v]) => ({ hashAlg: TPM_ALG.SHA256, index: Number(i), value: Buffer.from(v, 'hex') }),
        );
        const r = verifyEventLog({ log: b, pcrValues: quoted, pcrValuesQuoted: true });
        expect(r.checks.find((c) => c.id === 'eventlog.pcrs')).toMatchObject({
          status: 'fail',
          reason_code: 'EVENTLOG_PCR_MISMATCH',
        });
        expect(r.checks.find((c) => c.id === 'eventlog.pcrs')?.detail).toMatch(/sha256:5 differ/);
        expect(
          verifyEventLog({ log: read(file), pcrValues: quoted, pcrValuesQuoted: true }).checks[1],
        ).toMatchObject({
          id: 'eventlog.pcrs',
          status: 'pass',
        });
      });

      it('negative: cutting the last 10 bytes is a parse error (EVENTLOG_TRUNCATED), never a silent early stop', () => {
        const b = read(file);
        const err = parseError(b.subarray(0, b.length - 10));
        expect(err.code).toBe('EVENTLOG_TRUNCATED');
        expect(err.message).toMatch(/event data/);
        const r = verifyEventLog({ log: b.subarray(0, b.length - 10) });
        expect(r.checks[0]).toMatchObject({
          id: 'eventlog.parse',
          status: 'fail',
          reason_code: 'EVENTLOG_TRUNCATED',
        });
        expect(r.summary).toBeUndefined();
      });

      it('negative: a cut at any offset that is not an event boundary is EVENTLOG_TRUNCATED (all positions)', () => {
        const b = read(file);
        const boundaries = new Set(parseEventLog(b).events.map((e) => e.offset));
        boundaries.add(b.length);
        for (let n = 0; n < b.length; n++) {
          if (boundaries.has(n) && n > 0) {
            // a cut at a boundary is a shorter, well-formed log (only a quote can tell)
            expect(() => parseEventLog(b.subarray(0, n))).not.toThrow();
            continue;
          }
          expect(parseError(b.subarray(0, n)).code, `cut at ${n}`).toBe('EVENTLOG_TRUNCATED');
        }
      });

      it('negative: a SHA-1 replay compared with SHA-256 quote PCRs is a mismatch (replay the bank the quote selected)', () => {
        const replay = replayEventLog(parseEventLog(read(file)));
        const sha1AsSha256: PcrValue[] = [...(replay.banks.get(TPM_ALG.SHA1) ?? new Map()).entries()].map(
          ([index, value]) => ({ hashAlg: TPM_ALG.SHA256, index, value }),
        );
        const r = verifyEventLog({ log: read(file), pcrValues: sha1AsSha256, pcrValuesQuoted: true });
        expect(r.checks[1]).toMatchObject({ status: 'fail', reason_code: 'EVENTLOG_PCR_MISMATCH' });
        // and the SHA-1 values against the SHA-1 bank match
        const sha1: PcrValue[] = sha1AsSha256.map((v) => ({ ...v, hashAlg: TPM_ALG.SHA1 }));
        expect(
          verifyEventLog({ log: read(file), pcrValues: sha1, pcrValuesQuoted: true }).checks[1]?.status,
        ).toBe('pass');
      });
    });
  }

  it('summary: replayed PCRs per bank as hex, covered PCRs, algorithms', () => {
    const log = parseEventLog(read('rhel8-uefi.bin'));
    const s = summarizeEventLog(log, replayEventLog(log));
    expect(s.events).toBe(83);
    expect(s.algorithms).toEqual([
      { alg: 'sha1', digest_size: 20 },
      { alg: 'sha256', digest_size: 32 },
      { alg: 'sha384', digest_size: 48 },
    ]);
    expect(s.pcrs.sha256?.['7']).toBe('5fd54361d580eb7592adb8deb236ff35444ceeac7148f24b3de63c041f12b3da');
    expect(s.pcrs.sha384?.['0']).toBe(
      '8be2d39fecef6e883d467379c57847437cfa03a6f7f7f78dcb2a05a479db4b4749ececedd105b760bc8313abccf1dfb6',
    );
  });

  it('PCR values the log does not cover (e.g. the gateway measurement PCR 15) are not compared; values that match but are not quoted fail', () => {
    const b = read('ubuntu-2404-amd-sevsnp.bin');
    const e = expected().logs['ubuntu-2404-amd-sevsnp.bin'];
    const v = (i: number, hex: string): PcrValue => ({
      hashAlg: TPM_ALG.SHA256,
      index: i,
      value: Buffer.from(hex, 'hex'),
    });
    const pcrs = [v(0, e?.final_pcrs.sha256['0'] ?? ''), v(15, 'ab'.repeat(32))];
    const ok = verifyEventLog({ log: b, pcrValues: pcrs, pcrValuesQuoted: true }).checks[1];
    expect(ok).toMatchObject({ status: 'pass' });
    expect(ok?.detail).toMatch(/PCR 15 not covered/);
    const onlyUncovered = verifyEventLog({
      log: b,
      pcrValues: [v(15, '00'.repeat(32))],
      pcrValuesQuoted: true,
    });
    expect(onlyUncovered.checks[1]?.status).toBe('not-applicable');
    expect(verifyEventLog({ log: b, pcrValues: pcrs, pcrValuesQuoted: false }).checks[1]).toMatchObject({
      status: 'fail',
      reason_code: 'DEPENDENCY_FAILED',
    });
    // a bank the log does not have
    const sha512 = verifyEventLog({
      log: b,
      pcrValues: [{ ...v(0, '00'.repeat(64)), hashAlg: TPM_ALG.SHA512 }],
    });
    expect(sha512.checks[1]?.reason_code).toBe('EVENTLOG_BANK_MISSING');
  });
});

// ---------- synthetic logs ----------
const le32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n >>> 0);
  return b;
};
const le16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16LE(n);
  return b;
};
function specId(
  algs: [number, number][],
  over: { sig?: string; major?: number; extra?: Buffer } = {},
): Buffer {
  const body = Buffer.concat([
    Buffer.from(over.sig ?? 'Spec ID Event03\0', 'latin1'),
    le32(0), // platformClass
    Buffer.from([0, over.major ?? 2, 0, 2]), // minor, major, errata, uintnSize
    le32(algs.length),
    ...algs.map(([a, s]) => Buffer.concat([le16(a), le16(s)])),
    Buffer.from([0]), // vendorInfoSize
    over.extra ?? Buffer.alloc(0),
  ]);
  return Buffer.concat([le32(0), le32(3), Buffer.alloc(20), le32(body.length), body]);
}
const ALGS: [number, number][] = [
  [TPM_ALG.SHA1, 20],
  [TPM_ALG.SHA256, 32],
];
function event2(pcr: number, type: number, digests: [number, Buffer][], data: Buffer): Buffer {
  return Buffer.concat([
    le32(pcr),
    le32(type),
    le32(digests.length),
    ...digests.map(([a, d]) => Buffer.concat([le16(a), d])),
    le32(data.length),
    data,
  ]);
}
const measured = (pcr: number, text: string) =>
  event2(
    pcr,
    0x0d, // EV_IPL
    [
      [TPM_ALG.SHA1, createHash('sha1').update(text).digest()],
      [TPM_ALG.SHA256, createHash('sha256').update(text).digest()],
    ],
    Buffer.from(text),
  );
const startupLocality = (loc: number, pcr = 0) =>
  event2(
    pcr,
    3,
    [
      [TPM_ALG.SHA1, Buffer.alloc(20)],
      [TPM_ALG.SHA256, Buffer.alloc(32)],
    ],
    Buffer.concat([Buffer.from('StartupLocality\0', 'latin1'), Buffer.from([loc])]),
  );

describe('event log strictness (synthetic logs)', () => {
  it('replay from zero: PCR = H(PCR ‖ digest) per bank, EV_NO_ACTION not extended (independent computation)', () => {
    const log = Buffer.concat([
      specId(ALGS),
      measured(4, 'a'),
      measured(4, 'b'),
      startupLocality(0).subarray(0, 0),
    ]);
    const r = replayEventLog(parseEventLog(log));
    const h = (alg: string, ...parts: Buffer[]) => {
      const x = createHash(alg);
      for (const p of parts) x.update(p);
      return x.digest();
    };
    let want = Buffer.alloc(32);
    for (const t of ['a', 'b']) want = h('sha256', want, h('sha256', Buffer.from(t)));
    expect(r.banks.get(TPM_ALG.SHA256)?.get(4)?.equals(want)).toBe(true);
    expect(r.covered).toEqual([4]);
  });

  it('StartupLocality: PCR 0 starts at 0…0‖locality (locality 3), in every bank', () => {
    const log = Buffer.concat([specId(ALGS), startupLocality(3), measured(0, 'crtm')]);
    const parsed = parseEventLog(log);
    expect(parsed.startupLocality).toBe(3);
    const r = replayEventLog(parsed);
    const init256 = Buffer.alloc(32);
    init256[31] = 3;
    const want256 = createHash('sha256')
      .update(init256)
      .update(createHash('sha256').update('crtm').digest())
      .digest();
    expect(r.banks.get(TPM_ALG.SHA256)?.get(0)?.equals(want256)).toBe(true);
    const init1 = Buffer.alloc(20);
    init1[19] = 3;
    const want1 = createHash('sha1')
      .update(init1)
      .update(createHash('sha1').update('crtm').digest())
      .digest();
    expect(r.banks.get(TPM_ALG.SHA1)?.get(0)?.equals(want1)).toBe(true);
    // without the event the same log replays from zero, so the values differ
    const plain = replayEventLog(parseEventLog(Buffer.concat([specId(ALGS), measured(0, 'crtm')])));
    expect(plain.banks.get(TPM_ALG.SHA256)?.get(0)?.equals(want256)).toBe(false);
    // StartupLocality alone: PCR 0 is covered with its initial value
    const only = replayEventLog(parseEventLog(Buffer.concat([specId(ALGS), startupLocality(4)])));
    expect(only.covered).toEqual([0]);
    expect(only.banks.get(TPM_ALG.SHA256)?.get(0)?.[31]).toBe(4);
  });

  it('a misplaced StartupLocality (after a PCR 0 extend, twice, other PCR, bad locality) is EVENTLOG_MALFORMED', () => {
    const cases = [
      Buffer.concat([specId(ALGS), measured(0, 'x'), startupLocality(3)]),
      Buffer.concat([specId(ALGS), startupLocality(3), startupLocality(3)]),
      Buffer.concat([specId(ALGS), startupLocality(3, 1)]),
      Buffer.concat([specId(ALGS), startupLocality(9)]),
    ];
    for (const c of cases) expect(parseError(c).code).toBe('EVENTLOG_MALFORMED');
  });

  it('garbage is EVENTLOG_MALFORMED with the offset: not Spec ID Event03, wrong sizes, undeclared/duplicate/missing digests, PCR ≥ 24, bytes inside the header', () => {
    const ev = measured(1, 'x');
    const cases: [string, Buffer][] = [
      ['legacy SHA-1 log', Buffer.concat([specId(ALGS, { sig: 'Spec ID Event00\0' }), ev])],
      ['spec major 1', Buffer.concat([specId(ALGS, { major: 1 }), ev])],
      ['sha256 declared 20 bytes', Buffer.concat([specId([[TPM_ALG.SHA256, 20]]), ev])],
      [
        'duplicate algorithm',
        specId([
          [TPM_ALG.SHA256, 32],
          [TPM_ALG.SHA256, 32],
        ]),
      ],
      ['bytes after vendorInfo', specId(ALGS, { extra: Buffer.from([0]) })],
      ['header for PCR 1', Buffer.concat([le32(1), specId(ALGS).subarray(4)])],
      ['header not EV_NO_ACTION', Buffer.concat([le32(0), le32(4), specId(ALGS).subarray(8)])],
      [
        'PCR 24',
        Buffer.concat([
          specId(ALGS),
          event2(
            24,
            0x0d,
            [
              [TPM_ALG.SHA1, Buffer.alloc(20)],
              [TPM_ALG.SHA256, Buffer.alloc(32)],
            ],
            Buffer.alloc(0),
          ),
        ]),
      ],
      [
        'one digest of two',
        Buffer.concat([specId(ALGS), event2(1, 0x0d, [[TPM_ALG.SHA256, Buffer.alloc(32)]], Buffer.alloc(0))]),
      ],
      [
        'undeclared sha384',
        Buffer.concat([
          specId(ALGS),
          event2(
            1,
            0x0d,
            [
              [TPM_ALG.SHA1, Buffer.alloc(20)],
              [TPM_ALG.SHA384, Buffer.alloc(48)],
            ],
            Buffer.alloc(0),
          ),
        ]),
      ],
      [
        'duplicate sha1',
        Buffer.concat([
          specId(ALGS),
          event2(
            1,
            0x0d,
            [
              [TPM_ALG.SHA1, Buffer.alloc(20)],
              [TPM_ALG.SHA1, Buffer.alloc(20)],
            ],
            Buffer.alloc(0),
          ),
        ]),
      ],
      ['0xff padding after the last event', Buffer.concat([specId(ALGS), ev, Buffer.alloc(64, 0xff)])],
    ];
    for (const [what, bytes] of cases) {
      const err = parseError(bytes);
      expect(err.code, what).toBe('EVENTLOG_MALFORMED');
      expect(err.message, what).toMatch(/at byte \d+/);
    }
    // zero padding reads as an event with 0 digests → malformed, not an early stop
    expect(parseError(Buffer.concat([specId(ALGS), ev, Buffer.alloc(64)])).code).toBe('EVENTLOG_MALFORMED');
    expect(parseError(Buffer.alloc(0)).code).toBe('EVENTLOG_TRUNCATED');
  });

  it('never throws anything but EventLogError on random mutations of a real log (2 000 mutations)', () => {
    if (!hasVectors()) return;
    const b = read('rhel8-uefi.bin');
    let seed = 42;
    const rnd = () => {
      seed = (seed * 1103515245 + 12345) & 0x7fffffff;
      return seed;
    };
    for (let i = 0; i < 2000; i++) {
      const m = Buffer.from(b);
      const n = 1 + (rnd() % 4);
      for (let k = 0; k < n; k++) m[rnd() % m.length] = rnd() & 0xff;
      try {
        replayEventLog(parseEventLog(m));
      } catch (err) {
        expect(err).toBeInstanceOf(EventLogError);
      }
      const r = verifyEventLog({ log: m });
      expect(['pass', 'fail']).toContain(r.checks[0]?.status);
    }
  });
});

// ---------- cmcp verify-evidence --event-log ----------
const be16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
};
const be32 = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0);
  return b;
};
const tpm2b = (b: Uint8Array) => Buffer.concat([be16(b.length), b]);

/** A software TPM-format quote over sha256 PCRs 0..7 with the given values (not from the code under test). */
function softQuote(values: Buffer[], nonce: Buffer) {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  const jwk = publicKey.export({ format: 'jwk' }) as { x: string; y: string };
  const akPublic = Buffer.concat([
    be16(0x0023),
    be16(0x000b),
    be32(0x00050072),
    tpm2b(Buffer.alloc(0)),
    be16(0x0010),
    be16(0x0018),
    be16(0x000b),
    be16(0x0003),
    be16(0x0010),
    tpm2b(Buffer.from(jwk.x, 'base64url')),
    tpm2b(Buffer.from(jwk.y, 'base64url')),
  ]);
  const name = Buffer.concat([be16(0x000b), createHash('sha256').update(akPublic).digest()]);
  // raw evidence has no parent: qualifiedSigner is compared with the AK name
  const qn = name;
  const attest = Buffer.concat([
    be32(0xff544347),
    be16(0x8018),
    tpm2b(qn),
    tpm2b(nonce),
    Buffer.alloc(8, 0),
    be32(1),
    be32(0),
    Buffer.from([1]),
    Buffer.alloc(8, 1),
    be32(1),
    be16(0x000b),
    Buffer.from([3, 0xff, 0x00, 0x00]),
    tpm2b(createHash('sha256').update(Buffer.concat(values)).digest()),
  ]);
  const p1363 = sign('sha256', attest, { key: privateKey, dsaEncoding: 'ieee-p1363' });
  const signature = Buffer.concat([
    be16(0x0018),
    be16(0x000b),
    tpm2b(p1363.subarray(0, 32)),
    tpm2b(p1363.subarray(32)),
  ]);
  return { attest, signature, akPublic };
}

describe.skipIf(!hasVectors())('cmcp verify-evidence --event-log', () => {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-eventlog-'));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const put = (name: string, data: Buffer | string) => {
    const p = join(dir, name);
    writeFileSync(p, data);
    return p;
  };
  const run = async (opts: VerifyEvidenceCliOptions) => {
    let out = '';
    let err = '';
    const code = await runVerifyEvidence(opts, { stdout: (t) => (out += t), stderr: (t) => (err += t) });
    return { code, out, err };
  };
  const UB = 'ubuntu-2404-amd-sevsnp.bin';
  const quoteFiles = () => {
    const pcrs = expected().logs[UB]?.final_pcrs.sha256 ?? {};
    const values = [0, 1, 2, 3, 4, 5, 6, 7].map((i) => Buffer.from(pcrs[String(i)] ?? '', 'hex'));
    const nonce = Buffer.alloc(32, 7);
    const q = softQuote(values, nonce);
    // the quote's pcrDigest is the one PROVENANCE states for this machine
    expect(q.attest.subarray(q.attest.length - 32).toString('hex')).toBe(
      expected().logs[UB]?.sha256_of_sha256_pcr0_7_concat,
    );
    return {
      tpmQuote: put('quote.msg', q.attest),
      tpmSig: put('quote.sig', q.signature),
      ak: put('ak.tpmt', q.akPublic),
      nonce: nonce.toString('hex'),
      pcrsFile: put(
        'pcrs.json',
        JSON.stringify(Object.fromEntries([0, 1, 2, 3, 4, 5, 6, 7].map((i) => [String(i), pcrs[String(i)]]))),
      ),
    };
  };

  it('alone: reports the replayed PCRs per bank (text and JSON), exit 0 with --require signed-only (1 by default), and says nothing signs a log', async () => {
    expect((await run({ eventLog: vectorPath(...DIR, UB) })).code).toBe(1);
    const t = await run({ eventLog: vectorPath(...DIR, UB), require: 'signed-only' });
    expect(t.err).toBe('');
    expect(t.code).toBe(0);
    expect(t.out).toMatch(/PASS\s+eventlog\.parse/);
    expect(t.out).toMatch(/Event log \(replayed\): 117 events; sha1\/20, sha256\/32, sha384\/48/);
    expect(t.out).toContain(
      'sha256 PCR  0  50597a27846e91d025eef597abbc89f72bff9af849094db97b0684d8bc4c515e',
    );
    const j = await run({ eventLog: vectorPath(...DIR, UB), json: true });
    const report = JSON.parse(j.out);
    expect(report.event_log.pcrs.sha384['0']).toBe(expected().logs[UB]?.final_pcrs.sha384['0']);
    expect(report.event_log.pcrs).toEqual(expected().logs[UB]?.final_pcrs);
    expect(report.checks.find((c: { id: string }) => c.id === 'evidence.signature').status).toBe('absent');
    expect(report.verdict).not.toBe('hardware-attested');
  });

  it('alone: the report has its fields — every replayed PCR as eventlog.pcr.<bank>.<index>, unverified (JSON and text)', async () => {
    const j = await run({ eventLog: vectorPath(...DIR, UB), json: true, require: 'signed-only' });
    const report = JSON.parse(j.out);
    const want = Object.entries(expected().logs[UB]?.final_pcrs ?? {}).flatMap(([bank, pcrs]) =>
      Object.entries(pcrs).map(([i, value]) => ({
        name: `eventlog.pcr.${bank}.${i}`,
        value,
        verified: false,
      })),
    );
    expect(want.length).toBeGreaterThan(30);
    expect(report.fields).toEqual(want);
    const t = await run({ eventLog: vectorPath(...DIR, UB), require: 'signed-only' });
    expect(t.out).toMatch(/Fields \(verified = /);
    expect(t.out).toMatch(
      /UNVERIFIED +eventlog\.pcr\.sha256\.0 +50597a27846e91d025eef597abbc89f72bff9af849094db97b0684d8bc4c515e/,
    );
    // a log that does not replay has no values to list: the section is there, empty
    const b = read(UB);
    const cut = JSON.parse(
      (await run({ eventLog: put('trunc-f.bin', b.subarray(0, b.length - 10)), json: true })).out,
    );
    expect(cut.fields).toEqual([]);
  });

  it('alone: a truncated log → exit 1, EVENTLOG_TRUNCATED', async () => {
    const b = read(UB);
    const r = await run({ eventLog: put('trunc.bin', b.subarray(0, b.length - 10)) });
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/FAIL\s+eventlog\.parse\s+EVENTLOG_TRUNCATED/);
  });

  it('with a TPM quote whose PCRs are the replayed ones: eventlog.pcrs passes (sha256 PCR 0..7)', async () => {
    const r = await run({
      ...quoteFiles(),
      eventLog: vectorPath(...DIR, UB),
      json: true,
      require: 'hardware-unanchored',
    });
    expect(r.err).toBe('');
    const report = JSON.parse(r.out);
    const get = (id: string) => report.checks.find((c: { id: string }) => c.id === id);
    expect(get('tpm.pcr_digest').status).toBe('pass');
    expect(get('eventlog.pcrs').status).toBe('pass');
    expect(get('eventlog.pcrs').detail).toMatch(/sha256:0, sha256:1, .*sha256:7 equal the quoted values/);
    expect(report.checks.filter((c: { status: string }) => c.status === 'fail')).toEqual([]);
    expect(report.verdict).toBe('hardware-unanchored');
    expect(r.code).toBe(0);
  });

  it('with the flipped log (byte 45174) → EVENTLOG_PCR_MISMATCH on PCR 5, exit 1', async () => {
    const b = Buffer.from(read(UB));
    b[45174] = (b[45174] ?? 0) ^ 0x01;
    const r = await run({ ...quoteFiles(), eventLog: put('flipped.bin', b) });
    expect(r.code).toBe(1);
    expect(r.out).toMatch(/FAIL\s+eventlog\.pcrs\s+EVENTLOG_PCR_MISMATCH: replayed sha256:5 differ/);
  });

  it('with another machine’s log (RHEL) → mismatch; with a truncated log → parse error and dependent check fails', async () => {
    const other = await run({ ...quoteFiles(), eventLog: vectorPath(...DIR, 'rhel8-uefi.bin') });
    expect(other.code).toBe(1);
    expect(other.out).toMatch(/EVENTLOG_PCR_MISMATCH/);
    const b = read(UB);
    const t = await run({ ...quoteFiles(), eventLog: put('trunc2.bin', b.subarray(0, b.length - 10)) });
    expect(t.code).toBe(1);
    expect(t.out).toMatch(/FAIL\s+eventlog\.parse\s+EVENTLOG_TRUNCATED/);
    expect(t.out).toMatch(/FAIL\s+eventlog\.pcrs\s+DEPENDENCY_FAILED/);
  });

  it('usage: --event-log with --snp-report / --tdx-quote is refused (exit 2)', async () => {
    const r = await run({ eventLog: vectorPath(...DIR, UB), tdxQuote: vectorPath(...DIR, UB) });
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--event-log goes with --tpm-quote/);
  });
});
