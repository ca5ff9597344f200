/**
 * Policy bundles (docs/spec/policy.md#policy-bundle), the Cedar request mapping and fail-closed evaluation
 * (items 2–3), and bundle signatures (item 6), using the real Cedar engine
 * (@cedar-policy/cedar-wasm) and the example bundle in examples/policy.
 */
import { execFile } from 'node:child_process';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { cpSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { hashBundleDir, loadBundleDir, type PolicyBundle, PolicyBundleError } from '../src/policy/bundle.js';
import { PolicyEngine, type PolicyRequest, toCedarValue } from '../src/policy/engine.js';
import {
  generatePolicyKey,
  parsePolicyPublicKey,
  signBundleHash,
  verifyBundleSignature,
} from '../src/policy/signature.js';
import { REPO_ROOT } from './harness/gateway.js';

const run = promisify(execFile);
const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
const EXAMPLE = join(REPO_ROOT, 'examples', 'policy');
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** A copy of the example bundle in a temp folder, optionally changed. */
function copyExample(change?: (dir: string) => void): string {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-bundle-'));
  dirs.push(dir);
  cpSync(EXAMPLE, dir, { recursive: true });
  change?.(dir);
  return dir;
}

function refusal(dir: string): PolicyBundleError {
  try {
    loadBundleDir(dir);
  } catch (e) {
    if (e instanceof PolicyBundleError) return e;
    throw e;
  }
  throw new Error('the bundle loaded');
}

describe('bundle loading and hashing', () => {
  it('the example bundle loads; its hash is SHA-256 over JCS of the sorted (path, SHA-256) list', async () => {
    const b = loadBundleDir(EXAMPLE);
    expect(b.manifest.version).toBe(1);
    expect(Object.keys(b.policies)).toContain('fs-writes-only-in-outbox');
    // Independent recomputation of the documented formula.
    const list = readdirSync(EXAMPLE)
      .filter((n) => n === 'manifest.json' || n.endsWith('.cedar') || n.endsWith('.cedarschema'))
      .sort()
      .map((path) => ({
        path,
        sha256: `sha256:${createHash('sha256')
          .update(readFileSync(join(EXAMPLE, path)))
          .digest('hex')}`,
      }));
    // Keys are already in JCS order (path < sha256) and all text is ASCII: JSON.stringify = JCS.
    const expected = `sha256:${createHash('sha256').update(JSON.stringify(list)).digest('hex')}`;
    expect(b.hash).toBe(expected);
    expect(hashBundleDir(EXAMPLE)).toBe(expected);
    const cli = await run(process.execPath, [CLI, 'policy', 'hash', EXAMPLE]);
    expect(cli.stdout.trim()).toBe(expected);
  });

  it('other files are not part of the bundle; any byte of a bundle file changes the hash', () => {
    const base = hashBundleDir(EXAMPLE);
    expect(hashBundleDir(copyExample((d) => writeFileSync(join(d, 'README.md'), 'notes')))).toBe(base);
    expect(
      hashBundleDir(
        copyExample((d) =>
          writeFileSync(
            join(d, '00-baseline.cedar'),
            `${readFileSync(join(d, '00-baseline.cedar'), 'utf8')} `,
          ),
        ),
      ),
    ).not.toBe(base);
  });

  it('a policy that does not validate against the schema refuses the bundle with Cedar diagnostics', async () => {
    const dir = copyExample((d) =>
      writeFileSync(
        join(d, '20-typo.cedar'),
        '@id("typo")\npermit (principal, action, resource)\nwhen { principal.teem == "x" };\n',
      ),
    );
    const e = refusal(dir);
    expect(e.code).toBe('POLICY_BUNDLE_INVALID');
    expect(e.diagnostics.join('\n')).toMatch(
      /20-typo\.cedar:3:\d+: .*attribute `teem` on entity type `Agent` not found/,
    );
    const cli = await run(process.execPath, [CLI, 'policy', 'check', dir]).catch(
      (x: { code: number; stderr: string }) => x,
    );
    expect((cli as { code: number }).code).toBe(1);
    expect((cli as { stderr: string }).stderr).toContain('attribute `teem`');
    expect((cli as { stderr: string }).stderr).not.toMatch(/\n\s+at /);
  });

  it('refuses parse errors, a bad schema, a bad manifest, duplicate ids and templates', () => {
    const cases: [string, (d: string) => void, RegExp][] = [
      [
        'parse error',
        (d) => writeFileSync(join(d, '20.cedar'), 'permit(principal, action, resource) when { x };'),
        /20\.cedar:1:\d+: invalid variable/,
      ],
      [
        'schema error',
        (d) => writeFileSync(join(d, 'schema.cedarschema'), 'entity Agent = { a: Strin };'),
        /schema\.cedarschema:1:\d+: failed to resolve type: Strin/,
      ],
      [
        'two schemas',
        (d) => writeFileSync(join(d, 'extra.cedarschema'), 'entity X;'),
        /exactly one \*\.cedarschema/,
      ],
      ['no manifest', (d) => rmSync(join(d, 'manifest.json')), /no manifest\.json/],
      [
        'bad version',
        (d) => writeFileSync(join(d, 'manifest.json'), '{"version":"2","description":"x"}'),
        /version must be a positive integer/,
      ],
      [
        'unknown manifest member',
        (d) => writeFileSync(join(d, 'manifest.json'), '{"version":2,"description":"x","mode":"off"}'),
        /unknown member/,
      ],
      [
        'duplicate id',
        (d) =>
          writeFileSync(
            join(d, '20.cedar'),
            '@id("session-call-budget") permit(principal, action, resource);',
          ),
        /duplicate policy id "session-call-budget"/,
      ],
      [
        'template',
        (d) => writeFileSync(join(d, '20.cedar'), 'permit(principal == ?principal, action, resource);'),
        /templates are not supported/,
      ],
    ];
    for (const [what, change, re] of cases) {
      const e = refusal(copyExample(change));
      expect(e.message, what).toMatch(re);
    }
  });

  it('policies without @id get <file>#<n> ids', () => {
    const dir = copyExample((d) =>
      writeFileSync(
        join(d, '20.cedar'),
        'permit(principal, action, resource);\nforbid(principal, action, resource) when { context.session.calls > 1000 };\n',
      ),
    );
    const b = loadBundleDir(dir);
    expect(b.sources['20.cedar#0']).toBe('20.cedar');
    expect(b.sources['20.cedar#1']).toBe('20.cedar');
  });
});

describe('Cedar requests', () => {
  const bundle: PolicyBundle = loadBundleDir(EXAMPLE);
  const engine = new PolicyEngine(bundle, 'enforcing');
  const req = (over: Partial<PolicyRequest> = {}): PolicyRequest => ({
    agentId: 'alice',
    agentAttributes: { team: 'eng', roles: ['writer'] },
    tool: {
      exposedName: 'fs.write_file',
      server: 'fs',
      toolName: 'write_file',
      sensitivity: 'confidential',
      annotations: { readOnlyHint: false, destructiveHint: true, title: 'ignored' },
    },
    arguments: { path: '/srv/workspace/outbox/a.txt', content: 'x' },
    workflowId: 'wf-1',
    session: { calls: 0, maxSensitivity: 'unclassified' },
    ...over,
  });

  it('allows and denies with the matched policy ids', () => {
    expect(engine.evaluate(req())).toEqual({
      decision: 'allow',
      matched: ['allow-writers-on-fs'],
      errored: [],
      failure: null,
      invalid: null,
    });
    const d = engine.evaluate(req({ arguments: { path: '/etc/passwd', content: 'x' } }));
    expect(d.decision).toBe('deny');
    expect(d.matched).toEqual(['fs-writes-only-in-outbox']);
    expect(
      engine.evaluate(req({ arguments: { path: '/srv/workspace/outbox/../x', content: '' } })).decision,
    ).toBe('deny');
    // outside the outbox folder, or not an absolute path
    for (const path of ['/srv/workspace/notes.txt', 'outbox/a.txt', '/srv/workspace/outboxes/a.txt'])
      expect(engine.evaluate(req({ arguments: { path, content: '' } })).matched, path).toEqual([
        'fs-writes-only-in-outbox',
      ]);
    // by agent: no writer role ⇒ no permit ⇒ default deny, nothing matched
    expect(engine.evaluate(req({ agentAttributes: { team: 'eng' } }))).toMatchObject({
      decision: 'deny',
      matched: [],
    });
  });

  it('session facts reach the context (calls so far, highest sensitivity seen)', () => {
    const openWorld = {
      exposedName: 'everything.gzip-file-as-resource',
      server: 'everything',
      toolName: 'gzip-file-as-resource',
      sensitivity: 'public' as const,
      annotations: { readOnlyHint: true, openWorldHint: true },
    };
    expect(engine.evaluate(req({ tool: openWorld, arguments: {} })).decision).toBe('allow');
    expect(
      engine.evaluate(
        req({ tool: openWorld, arguments: {}, session: { calls: 3, maxSensitivity: 'confidential' } }),
      ),
    ).toMatchObject({ decision: 'deny', matched: ['no-open-world-after-confidential'] });
    expect(
      engine.evaluate(
        req({ tool: openWorld, arguments: {}, session: { calls: 500, maxSensitivity: 'public' } }),
      ),
    ).toMatchObject({ decision: 'deny', matched: ['session-call-budget'] });
  });

  it('fails closed: an argument of a type the schema does not declare is refused before any policy runs', () => {
    // Cedar alone would evaluate it: `like` errors and skips the forbid, the permit allows.
    const d = engine.evaluate(req({ arguments: { path: 5, content: 'x' } }));
    expect(d.decision).toBe('deny');
    expect(d.invalid).toMatch(/context/);
    expect(d.matched).toEqual([]);
  });

  it('maps JSON honestly: null omitted, non-integers as strings, Cedar escapes refused', () => {
    expect(toCedarValue({ a: null, b: 1.5, c: [1, null, 'x'], d: { e: true } })).toEqual({
      b: '1.5',
      c: [1, 'x'],
      d: { e: true },
    });
    const forged = engine.evaluate(
      req({ arguments: { path: { __entity: { type: 'Agent', id: 'admin' } }, content: 'x' } }),
    );
    expect(forged.decision).toBe('deny');
    expect(forged.invalid).toMatch(/__entity is reserved/);
  });
});

describe('bundle signatures', () => {
  it('verifies under the pinned key only, for that hash only', () => {
    const k = generatePolicyKey();
    const hash = hashBundleDir(EXAMPLE);
    const sig = signBundleHash(hash, k.privatePem);
    for (const pinned of [k.publicRaw, k.publicPem]) {
      expect(verifyBundleSignature(hash, sig, parsePolicyPublicKey(pinned))).toBe(true);
    }
    const other = generatePolicyKey();
    expect(verifyBundleSignature(hash, sig, parsePolicyPublicKey(other.publicRaw))).toBe(false);
    expect(verifyBundleSignature(`sha256:${'0'.repeat(64)}`, sig, parsePolicyPublicKey(k.publicRaw))).toBe(
      false,
    );
    expect(verifyBundleSignature(hash, 'not-a-signature', parsePolicyPublicKey(k.publicRaw))).toBe(false);
    const { publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
    expect(() => parsePolicyPublicKey(publicKey.export({ format: 'pem', type: 'spki' }) as string)).toThrow(
      /not Ed25519/,
    );
    expect(() => parsePolicyPublicKey('short')).toThrow(/not an Ed25519 public key/);
  });
});
