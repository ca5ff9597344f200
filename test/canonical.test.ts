import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { verifyBundle } from '@cmcp/verify';
import {
  type AuditEntryBody,
  CanonicalJsonError,
  canonicalJson,
  hashEntryBody,
  sha256Hex,
} from '@cmcp/verify/formats';
import { describe, expect, it } from 'vitest';
import { hasVectors, vectorPath } from './harness/vectors.js';

const CASES = ['arrays', 'french', 'structures', 'unicode', 'values', 'weird'] as const;

describe.skipIf(!hasVectors())('RFC 8785 vectors (test/vectors/jcs)', () => {
  for (const name of CASES) {
    it(`${name}.json canonicalises byte for byte`, () => {
      const input = JSON.parse(readFileSync(vectorPath('jcs', 'input', `${name}.json`), 'utf8'));
      const want = readFileSync(vectorPath('jcs', 'output', `${name}.json`));
      const got = Buffer.from(canonicalJson(input), 'utf8');
      expect(got.toString('hex')).toBe(want.toString('hex'));
      // the hex rendering agrees too
      const hex = readFileSync(vectorPath('jcs', 'outhex', `${name}.txt`), 'utf8')
        .trim()
        .split(/\s+/)
        .join('');
      expect(got.toString('hex')).toBe(hex.toLowerCase());
    });
  }

  it('weird.json: emoji (UTF-16 0xD83D) sorts before U+FB33 — code-unit, not code-point order', () => {
    const input = JSON.parse(readFileSync(vectorPath('jcs', 'input', 'weird.json'), 'utf8'));
    const out = canonicalJson(input);
    expect(out.indexOf('😂')).toBeLessThan(out.indexOf('\uFB33'));
    expect(sha256Hex(out)).toBe('6af595a9aa80110b964b4de3f82a05fa6ae7423005019bacfa2620dddc4e94d1');
  });

  it('es6-numbers-first-10000.txt: every double serialises as ECMAScript prints it', () => {
    const file = readFileSync(vectorPath('jcs', 'es6-numbers-first-10000.txt'));
    expect(createHash('sha256').update(file).digest('hex')).toBe(
      'b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892',
    );
    const lines = file.toString('utf8').split('\n');
    expect(lines.pop()).toBe(''); // file ends with a newline
    expect(lines).toHaveLength(10_000);
    const bits = Buffer.alloc(8);
    let checked = 0;
    const failures: string[] = [];
    for (const line of lines) {
      const comma = line.indexOf(',');
      const hex = line.slice(0, comma).padStart(16, '0');
      const want = line.slice(comma + 1);
      bits.write(hex, 'hex');
      const value = bits.readDoubleBE(0);
      const got = canonicalJson(value);
      if (got !== want && failures.length < 5) failures.push(`${line} → ${got}`);
      checked++;
    }
    expect(failures).toEqual([]);
    expect(checked).toBe(10_000);
  });
});

describe('C-JCS-1 lone surrogates', () => {
  it('a lone surrogate value is refused with a typed error', () => {
    expect(() => canonicalJson({ a: '\uD800' })).toThrow(CanonicalJsonError);
    expect(() => canonicalJson(JSON.parse('{"a":"\\ud800"}'))).toThrow(CanonicalJsonError);
    expect(() => canonicalJson(['ok', '\uDC00x'])).toThrow(CanonicalJsonError);
    try {
      canonicalJson({ a: '\uD800' });
    } catch (err) {
      expect((err as CanonicalJsonError).code).toBe('CANONICAL_JSON_INVALID');
      expect((err as CanonicalJsonError).path).toBe('/a');
    }
  });

  it('a lone surrogate member name is refused, never replaced', () => {
    expect(() => canonicalJson({ '\uD83D': 1 })).toThrow(CanonicalJsonError);
    expect(() => canonicalJson(JSON.parse('{"x":{"\\udfff":1}}'))).toThrow(CanonicalJsonError);
  });

  it('a proper surrogate pair is fine', () => {
    expect(canonicalJson({ a: '\uD83D\uDE00' })).toBe('{"a":"😀"}');
  });
});

describe('C-JCS-2 member order', () => {
  it('{"\\uFFFF":2,"😀":1}: the emoji member comes first (UTF-16 code-unit order)', () => {
    expect(canonicalJson({ '\uFFFF': 2, '😀': 1 })).toBe('{"😀":1,"\uFFFF":2}');
  });
});

describe('C-JCS-3 numbers', () => {
  it('canonicalise as ECMAScript prints them', () => {
    expect(canonicalJson([1e21, 1e-7, -0, 0.1, 5e-324, 1.0])).toBe('[1e+21,1e-7,0,0.1,5e-324,1]');
  });

  it('NaN, Infinity and BigInt are refused', () => {
    expect(() => canonicalJson(Number.NaN)).toThrow(CanonicalJsonError);
    expect(() => canonicalJson({ a: Number.POSITIVE_INFINITY })).toThrow(CanonicalJsonError);
    expect(() => canonicalJson([Number.NEGATIVE_INFINITY])).toThrow(CanonicalJsonError);
    expect(() => canonicalJson({ a: 10n })).toThrow(CanonicalJsonError);
  });

  it('9007199254740993 is refused with integersExact rather than silently rounded', () => {
    const args = JSON.parse('{"n":9007199254740993}');
    expect(() => canonicalJson(args, { integersExact: true })).toThrow(CanonicalJsonError);
    expect(() => canonicalJson(-Number('9007199254740993'), { integersExact: true })).toThrow(
      CanonicalJsonError,
    );
    // the edge itself is exact and accepted
    expect(canonicalJson(9007199254740991, { integersExact: true })).toBe('9007199254740991');
    // plain RFC 8785 (no profile) prints the rounded double, which is why the profile refuses it
    expect(canonicalJson(args)).toBe('{"n":9007199254740992}');
  });
});

describe('C-CHAIN-2 hash what you store', () => {
  const body = (seq: number, prev: string, ts: string, extra: Record<string, unknown> = {}): AuditEntryBody =>
    ({
      entry_version: 1,
      entry_id: `00000000-0000-4000-8000-00000000000${seq}`,
      chain_id: 'c1',
      sequence_number: seq,
      timestamp_utc: ts,
      entry_type: 'session_open',
      session_id: 'c1',
      call_id: null,
      agent_id: 'dev',
      workflow_id: null,
      execution_id: null,
      tool_name: null,
      server_identity: null,
      policy_decision: null,
      policy_rule_matched: null,
      disposition: null,
      error_code: null,
      latency_us: null,
      request_payload_hash: null,
      response_payload_hash: null,
      detail: null,
      prev_entry_hash: prev,
      ...extra,
    }) as AuditEntryBody;

  it('an undefined member is dropped from the stored text, and the stored text is what is hashed', () => {
    const b = body(0, 'genesis', '2026-11-30T12:00:00.000001Z', { detail: { a: 1, gone: undefined } });
    const { canonical, entry_hash } = hashEntryBody(b);
    expect(canonical).not.toContain('gone');
    expect(canonical).toContain('"detail":{"a":1}');
    expect(entry_hash).toBe(sha256Hex(canonical));
    // a non-canonical re-serialisation of the same object would hash differently
    expect(sha256Hex(JSON.stringify(b))).not.toBe(entry_hash);
    const v = verifyBundle({
      bundle_version: 1,
      chain_id: 'c1',
      session_id: 'c1',
      exported_at: '2026-11-30T12:00:01Z',
      entries: [{ canonical, entry_hash }],
    });
    expect(v.checks.filter((c) => c.status === 'fail')).toEqual([]);
  });

  it('sub-millisecond timestamps and equal timestamps (clock stepped back, clamped) verify; a decrease fails', () => {
    const e0 = hashEntryBody(body(0, 'genesis', '2026-11-30T12:00:00.000001Z'));
    const e1 = hashEntryBody(body(1, e0.entry_hash, '2026-11-30T12:00:00.000002Z'));
    const e2 = hashEntryBody(body(2, e1.entry_hash, '2026-11-30T12:00:00.000002Z'));
    const bundle = (entries: { canonical: string; entry_hash: string }[]) => ({
      bundle_version: 1,
      chain_id: 'c1',
      session_id: 'c1',
      exported_at: '2026-11-30T12:00:01Z',
      entries,
    });
    const ok = verifyBundle(bundle([e0, e1, e2]));
    expect(ok.checks.filter((c) => c.status === 'fail')).toEqual([]);
    const back = hashEntryBody(body(2, e1.entry_hash, '2026-11-30T12:00:00.000001Z'));
    const bad = verifyBundle(bundle([e0, e1, back]));
    expect(bad.checks.find((c) => c.id === 'audit.timestamps')?.reason_code).toBe('TIMESTAMP_DECREASING');
  });
});
