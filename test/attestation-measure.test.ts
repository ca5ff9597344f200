/**
 * Gateway measurement (docs/spec/measurement.md): versioned, length-prefixed digest of dist/, the lockfile,
 * the policy bundle hash, the catalog hash and the effective config. Checked against an
 * independent encoder; every input changes the digest; file order and timestamps do not.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  codeDigest,
  measureGateway,
  measurementDigest,
  packageRoot,
  pcrExtend,
  remeasureGateway,
} from '../src/measure/index.js';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest();
function lp(s: string): Buffer {
  const b = Buffer.from(s, 'utf8');
  const n = Buffer.alloc(4);
  n.writeUInt32BE(b.length);
  return Buffer.concat([n, b]);
}
const u32 = (v: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(v);
  return b;
};

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'cmcp-measure-'));
  mkdirSync(join(root, 'dist', 'src'), { recursive: true });
  writeFileSync(join(root, 'dist', 'src', 'a.js'), 'export const a = 1;\n');
  writeFileSync(join(root, 'dist', 'b.js'), 'b');
  writeFileSync(join(root, 'package-lock.json'), '{"lockfileVersion":3}');
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('gateway measurement', () => {
  it('matches an independent encoding of the documented format', () => {
    const m = measureGateway({
      root,
      policyBundleHash: 'sha256:aa',
      catalogHash: null,
      config: { b: 2, a: [1] },
    });
    // code: files sorted by path bytes: dist/b.js < dist/src/a.js
    const code = sha(
      Buffer.concat([
        lp('cmcp.code/1'),
        u32(2),
        lp('dist/b.js'),
        sha('b'),
        lp('dist/src/a.js'),
        sha('export const a = 1;\n'),
      ]),
    );
    expect(m.json.inputs.code).toBe(`sha256:${code.toString('hex')}`);
    expect(m.json.inputs.code_files).toBe(2);
    expect(m.json.inputs.lockfile).toBe(`sha256:${sha('{"lockfileVersion":3}').toString('hex')}`);
    expect(m.json.inputs.config).toBe(`sha256:${sha('{"a":[1],"b":2}').toString('hex')}`);
    const digest = sha(
      Buffer.concat([
        lp('cmcp.gateway-measurement'),
        u32(1),
        lp('code'),
        lp(m.json.inputs.code),
        lp('lockfile'),
        lp(m.json.inputs.lockfile as string),
        lp('policy_bundle_hash'),
        lp('sha256:aa'),
        lp('catalog_hash'),
        lp(''),
        lp('config'),
        lp(m.json.inputs.config),
      ]),
    );
    expect(m.bytes.equals(digest)).toBe(true);
    expect(m.json.digest).toBe(`sha256:${digest.toString('hex')}`);
    expect(measurementDigest(m.json.inputs).equals(digest)).toBe(true);
  });

  it('every input changes the digest; timestamps and undefined members do not', () => {
    const base = { root, policyBundleHash: null, catalogHash: null, config: { x: 1 } };
    const d0 = measureGateway(base).json.digest;
    utimesSync(join(root, 'dist', 'b.js'), new Date(1000), new Date(1000));
    expect(measureGateway(base).json.digest).toBe(d0);
    expect(measureGateway({ ...base, config: { x: 1, y: undefined } }).json.digest).toBe(d0);
    expect(measureGateway({ ...base, config: { x: 2 } }).json.digest).not.toBe(d0);
    expect(measureGateway({ ...base, policyBundleHash: 'sha256:01' }).json.digest).not.toBe(d0);
    expect(measureGateway({ ...base, catalogHash: 'sha256:01' }).json.digest).not.toBe(d0);
    // null and "" are the same bytes only when both are absent: a hash is never empty
    writeFileSync(join(root, 'dist', 'b.js'), 'B');
    expect(measureGateway(base).json.digest).not.toBe(d0);
    writeFileSync(join(root, 'dist', 'b.js'), 'b');
    expect(measureGateway(base).json.digest).toBe(d0);
    writeFileSync(join(root, 'dist', 'c.js'), '');
    expect(measureGateway(base).json.digest).not.toBe(d0);
    rmSync(join(root, 'dist', 'c.js'));
    writeFileSync(join(root, 'package-lock.json'), '{}');
    expect(measureGateway(base).json.digest).not.toBe(d0);
    writeFileSync(join(root, 'package-lock.json'), '{"lockfileVersion":3}');
  });

  it('the bundled verify package build (node_modules/@cmcp/verify/dist) is measured code', () => {
    const a = codeDigest(root);
    const verifyDist = join(root, 'node_modules', '@cmcp', 'verify', 'dist');
    mkdirSync(verifyDist, { recursive: true });
    writeFileSync(join(verifyDist, 'binding.js'), 'v');
    writeFileSync(join(root, 'node_modules', '@cmcp', 'verify', 'package.json'), '{}');
    const b = codeDigest(root);
    expect(b.files).toBe(a.files + 1);
    expect(b.digest).toBe(
      `sha256:${sha(
        Buffer.concat([
          lp('cmcp.code/1'),
          u32(3),
          lp('dist/b.js'),
          sha('b'),
          lp('dist/src/a.js'),
          sha('export const a = 1;\n'),
          lp('node_modules/@cmcp/verify/dist/binding.js'),
          sha('v'),
        ]),
      ).toString('hex')}`,
    );
    writeFileSync(join(verifyDist, 'binding.js'), 'w');
    expect(codeDigest(root).digest).not.toBe(b.digest);
    rmSync(join(root, 'node_modules'), { recursive: true });
    expect(codeDigest(root).digest).toBe(a.digest);
  });

  it('a moved file changes the code digest (paths are measured)', () => {
    const a = codeDigest(root).digest;
    mkdirSync(join(root, 'dist', 'lib'));
    writeFileSync(join(root, 'dist', 'lib', 'b.js'), 'b');
    rmSync(join(root, 'dist', 'b.js'));
    expect(codeDigest(root).digest).not.toBe(a);
    writeFileSync(join(root, 'dist', 'b.js'), 'b');
    rmSync(join(root, 'dist', 'lib'), { recursive: true });
    expect(codeDigest(root).digest).toBe(a);
  });

  it('the installed package root is found from the module; pcrExtend is SHA-256(old ‖ digest)', () => {
    expect(packageRoot()).toMatch(/main$|[^/]+$/);
    const d = sha('m');
    expect(pcrExtend(Buffer.alloc(32), d).equals(sha(Buffer.concat([Buffer.alloc(32), d])))).toBe(true);
  });

  it('a reload re-measurement keeps the start-up code, lockfile, catalog and config inputs, with the new policy', () => {
    const base = { root, policyBundleHash: 'sha256:01', catalogHash: 'sha256:c0', config: { x: 1 } };
    const start = measureGateway(base);
    // dist/ changes on disk after start-up: not what this process runs, so not measured again
    writeFileSync(join(root, 'dist', 'late.js'), 'built after start');
    const again = remeasureGateway(start, { policyBundleHash: 'sha256:02' });
    rmSync(join(root, 'dist', 'late.js'));
    expect(again.json.inputs).toEqual({ ...start.json.inputs, policy_bundle_hash: 'sha256:02' });
    expect(again.json).toEqual(measureGateway({ ...base, policyBundleHash: 'sha256:02' }).json);
    expect(again.bytes.equals(measurementDigest(again.json.inputs))).toBe(true);
    expect(again.json.digest).not.toBe(start.json.digest);
  });
});
