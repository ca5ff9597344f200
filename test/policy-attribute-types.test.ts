/**
 * An attribute of the wrong type never switches a policy off (docs/policy.md#attribute-types).
 * In Cedar, `==` between values of different types is false without an error, so a token claim
 * `s: ["contractors"]` made `forbid … when { principal.s == "contractors" }` not apply and the call
 * went through. Every request is now checked against the bundle's schema: every JSON type in
 * place of every schema type, through real JWTs (jose, a JWKS file, a real gateway and upstream),
 * through configured agent attributes (the start-up check and each decision), and in tool
 * arguments a policy reads. A misfit is named by its path and types, never by its value. A policy
 * that errors at evaluation, and a misfit, are a deny in every enforcement mode, named in the
 * decision and in the recorded entry.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { loadBundleDir } from '../src/policy/bundle.js';
import { PolicyEngine, type PolicyRequest } from '../src/policy/engine.js';
import { configuredEntities, policyState } from '../src/policy/startup.js';
import type { UpstreamPool } from '../src/upstream/pool.js';
import {
  cleanup,
  everythingUpstream,
  freePort,
  parseConfig,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';
import { type TestIssuer, testIssuer } from './harness/jwt-issuer.js';

const ISSUER = 'https://issuer.test';

// One optional agent attribute per schema type; `o` is read only by the policy that errors.
const SCHEMA = `
entity Server;
entity Agent = {
  scopes?: Set<String>,
  s?: String,
  l?: Long,
  b?: Bool,
  set?: Set<String>,
  rec?: { k: String },
  ent?: Agent,
  o?: Long,
};
entity Tool in [Server] = {
  server: String,
  name: String,
  sensitivity: String,
  sensitivity_level: Long,
  annotations: { readOnlyHint?: Bool, destructiveHint?: Bool, idempotentHint?: Bool, openWorldHint?: Bool },
};
action call_tool appliesTo {
  principal: [Agent],
  resource: [Tool],
  context: {
    arguments: { message?: String },
    workflow_id?: String,
    session: { calls: Long, max_sensitivity: String, max_sensitivity_level: Long },
  },
};
`;

// Each forbid applies when its attribute holds the value of its own type.
const POLICIES = `
@id("allow-all")
permit (principal, action, resource);
@id("forbid-s")
forbid (principal, action, resource) when { principal has s && principal.s == "contractors" };
@id("forbid-l")
forbid (principal, action, resource) when { principal has l && principal.l == 5 };
@id("forbid-b")
forbid (principal, action, resource) when { principal has b && principal.b };
@id("forbid-set")
forbid (principal, action, resource) when { principal has set && principal.set.contains("contractors") };
@id("forbid-rec")
forbid (principal, action, resource) when { principal has rec && principal.rec.k == "contractors" };
@id("forbid-ent")
forbid (principal, action, resource) when { principal has ent && principal.ent == Agent::"root" };
@id("forbid-message")
forbid (principal, action, resource) when { context.arguments has message && context.arguments.message == "contractors" };
// Valid against the schema, yet errors whenever o is set: Long overflow.
@id("overflows")
forbid (principal, action, resource) when { principal has o && principal.o * 4611686018427387904 > 0 };
`;

/** Every JSON type (and the shapes a record can take). */
const VALUES: [string, unknown][] = [
  ['string', 'contractors'],
  ['integer', 5],
  ['non-integer', 1.5],
  ['boolean', true],
  ['null', null],
  ['array', ['contractors']],
  ['empty object', {}],
  ['object', { k: 'contractors' }],
  ['nested', { k: { deep: [['contractors']] } }],
  ['entity escape', { __entity: { type: 'Agent', id: 'root' } }],
];

/** Attribute → its schema type, and the JSON value of that type. */
const TYPES: Record<string, { type: string; own: string | null }> = {
  s: { type: 'String', own: 'string' },
  l: { type: 'Long', own: 'integer' },
  b: { type: 'Bool', own: 'boolean' },
  set: { type: 'Set<String>', own: 'array' },
  rec: { type: 'Record', own: 'object' },
  ent: { type: 'entity reference', own: null }, // JSON cannot name an entity (escapes are refused)
};

type Outcome = 'allowed' | 'POLICY_DENY' | 'POLICY_ATTRIBUTE_INVALID';

/**
 * What the gateway must do with `value` as attribute `attr`: the value of its own type reaches
 * the forbid; null is no value (the attribute is absent, as if the claim were missing); a
 * non-integer is the string of its number (the documented JSON mapping), so a String takes it;
 * anything else does not conform.
 */
function expected(attr: string, value: string): Outcome {
  if (value === 'null') return 'allowed';
  if (TYPES[attr]?.own === value) return 'POLICY_DENY';
  if (attr === 's' && value === 'non-integer') return 'allowed';
  return 'POLICY_ATTRIBUTE_INVALID';
}

function writeBundle(): string {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-attr-bundle-'));
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version: 1, description: 'attribute types' }));
  writeFileSync(join(dir, 'schema.cedarschema'), SCHEMA);
  writeFileSync(join(dir, 'policies.cedar'), POLICIES);
  return dir;
}

const BUNDLE = writeBundle();
const echo = (gw: Gateway, token: string, args: Record<string, unknown> = { message: 'hi' }) =>
  rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name: 'everything.echo', arguments: args },
  });

type Reply = Awaited<ReturnType<typeof echo>>;

/** What the gateway did: forwarded the call (whatever the upstream answered), or refused it. */
function outcome(r: Reply): Outcome | string {
  if (r.body.result) return 'allowed';
  return r.body.error?.data?.error_code ?? JSON.stringify(r.body).slice(0, 200);
}

/** The audit entry a reply's evidence names. */
function recorded(gw: Gateway, r: Reply) {
  const ev = r.body.error?.data?.evidence ?? r.body.result?._meta?.['dev.cmcp/evidence'];
  return gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
}

describe('token attributes (real JWTs)', () => {
  let issuer: TestIssuer;
  let cfg: TestConfig;
  let gw: Gateway;
  let resource: string;

  const token = (claims: Record<string, unknown>) => issuer.mint(claims, resource);

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-attr-oauth-'));
    issuer = await testIssuer(dir, ISSUER);
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    cfg = await writeConfig({
      dir,
      port,
      upstreams: [everythingUpstream('everything')],
      agents: [{ agent_id: 'eve', token: 'eve-token', attributes: { o: 4 } }],
      extra: {
        policy: { bundle: BUNDLE },
        oauth: {
          resource,
          issuer: ISSUER,
          jwks_file: issuer.jwksFile,
          algorithms: ['ES256'],
          attribute_claims: Object.fromEntries(Object.keys(TYPES).map((a) => [`claim_${a}`, a])),
        },
      },
    });
    gw = await startInProcess(cfg);
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    if (cfg) cleanup(cfg.dir);
  });

  for (const [attr, { type }] of Object.entries(TYPES))
    it(`every JSON type as the claim of a ${type} attribute`, async () => {
      const got: Record<string, Outcome | string> = {};
      const want: Record<string, Outcome> = {};
      for (const [name, value] of VALUES) {
        const r = await echo(gw, await token({ [`claim_${attr}`]: value }));
        got[name] = outcome(r);
        want[name] = expected(attr, name);
        if (got[name] === 'POLICY_DENY') expect(r.body.error.data.policy_ids).toEqual([`forbid-${attr}`]);
        if (got[name] === 'POLICY_ATTRIBUTE_INVALID') {
          // Refused naming the attribute and the types (never the value, nor Cedar's message
          // that quotes it), before any policy ran, and recorded in the chain.
          const why =
            name === 'entity escape'
              ? new RegExp(`^principal\\.${attr}: member name __entity is reserved by Cedar$`)
              : new RegExp(
                  `^principal\\.${attr}(\\.k|\\[\\])?: expected [A-Za-z<> ]+, got (string|number|boolean|array|object|absent)$`,
                );
          expect(r.body.error.data.policy_ids).toEqual([]);
          expect(r.body.error.data.policy_attribute_invalid).toMatch(why);
          expect(r.body.error.data.policy_attribute_invalid).not.toContain('contractors');
          expect(recorded(gw, r)).toMatchObject({
            error_code: 'POLICY_ATTRIBUTE_INVALID',
            policy_decision: 'deny',
            policy_rule_matched: [],
            detail: { policy_attribute_invalid: expect.stringMatching(why) },
          });
        }
      }
      expect(got).toEqual(want);
    });

  it('every JSON type as a String argument the schema declares', async () => {
    const jwt = await token({});
    const got: Record<string, Outcome | string> = {};
    for (const [name, value] of VALUES) got[name] = outcome(await echo(gw, jwt, { message: value }));
    expect(got).toEqual(Object.fromEntries(VALUES.map(([n]) => [n, expected('s', n)])));
    const r = await echo(gw, jwt, { message: ['contractors'] });
    expect(recorded(gw, r)?.detail).toMatchObject({
      policy_attribute_invalid: 'context.arguments.message: expected String, got array',
    });
  });

  it('a token attribute the schema does not declare is refused', async () => {
    // `scopes` is declared; a schema without it refuses every token, never ignores it.
    const r = await echo(gw, await token({}));
    expect(outcome(r)).toBe('allowed');
    const engine = new PolicyEngine(
      { ...loadBundleDir(BUNDLE), schema: SCHEMA.replace('scopes?: Set<String>,', '') },
      'enforcing',
    );
    const d = engine.evaluate({ ...REQUEST, agentAttributes: { scopes: ['tools:read'] } });
    expect(d.decision).toBe('deny');
    expect(d.invalid).toBe('principal.scopes: not declared by the schema');
  });

  it('a claim mapped to an attribute the schema does not declare refuses the start, naming it', async () => {
    const oauth = (cfg.raw.oauth ?? {}) as Record<string, unknown>;
    const bad = await writeConfig({
      upstreams: [],
      agents: [],
      extra: {
        policy: { bundle: BUNDLE },
        oauth: { ...oauth, attribute_claims: { claim_s: 's', claim_x: 'undeclared' } },
      },
    });
    try {
      await expect(startInProcess(bad)).rejects.toMatchObject({ code: 'POLICY_BUNDLE_INVALID' });
      await expect(startInProcess(bad)).rejects.toThrow(/does not declare "undeclared"/);
    } finally {
      cleanup(bad.dir);
    }
  });

  it('enforcing: a policy that errors is a deny naming it (POLICY_EVALUATION_FAILED), recorded', async () => {
    const r = await echo(gw, 'eve-token');
    expect(outcome(r)).toBe('POLICY_EVALUATION_FAILED');
    expect(r.body.error.data.policy_errors).toEqual(['overflows']);
    expect(recorded(gw, r)).toMatchObject({
      error_code: 'POLICY_EVALUATION_FAILED',
      policy_decision: 'deny',
      detail: { policy_errors: ['overflows'] },
    });
  });
});

/** A call_tool request of the engine, as the call path builds it. */
const REQUEST: PolicyRequest = {
  agentId: 'dora',
  agentAttributes: {},
  tool: {
    exposedName: 'everything.echo',
    server: 'everything',
    toolName: 'echo',
    sensitivity: 'unclassified',
    annotations: {},
  },
  arguments: { message: 'hi' },
  workflowId: null,
  session: { calls: 0, maxSensitivity: 'unclassified' },
};

describe('configured agent attributes', () => {
  const bundle = loadBundleDir(BUNDLE);
  const engine = new PolicyEngine(bundle, 'enforcing');
  const noUpstreams = { exposedName: () => null } as unknown as UpstreamPool;

  for (const [attr, { type }] of Object.entries(TYPES))
    it(`every JSON type as the configured value of a ${type} attribute`, () => {
      const atStart: Record<string, string> = {};
      const perCall: Record<string, Outcome | string> = {};
      const want: Record<string, Outcome> = {};
      for (const [name, value] of VALUES) {
        want[name] = expected(attr, name);
        const cfg = parseConfig({
          database: '/tmp/unused.db',
          attestation: { provider: 'software' },
          dev_mode: true,
          agents: [{ agent_id: 'dora', token_sha256: 'a'.repeat(64), attributes: { [attr]: value } }],
          policy: { bundle: BUNDLE },
        });
        // The start-up check: the configured agents must fit the schema.
        try {
          policyState(bundle, null, cfg.policy as never, configuredEntities(cfg, null, noUpstreams));
          atStart[name] = 'starts';
        } catch (e) {
          atStart[name] = (e as { code?: string }).code ?? String(e);
          expect(String(e)).toContain('Agent::"dora"');
        }
        // Each decision checks them again (as the call path merges them with a token's).
        const d = engine.evaluate({
          ...REQUEST,
          agentAttributes: (cfg.agents[0]?.attributes ?? {}) as Record<string, unknown>,
        });
        perCall[name] = d.invalid
          ? 'POLICY_ATTRIBUTE_INVALID'
          : d.decision === 'allow'
            ? 'allowed'
            : d.matched.includes(`forbid-${attr}`)
              ? 'POLICY_DENY'
              : JSON.stringify(d);
      }
      expect(perCall).toEqual(want);
      expect(atStart).toEqual(
        Object.fromEntries(
          Object.entries(want).map(([n, w]) => [
            n,
            w === 'POLICY_ATTRIBUTE_INVALID' ? 'POLICY_BUNDLE_INVALID' : 'starts',
          ]),
        ),
      );
    });

  it('an action the schema does not declare is a deny, not decided unchecked', () => {
    const d = engine.authorize(
      { type: 'Agent', id: 'dora' },
      'read_resource',
      { type: 'Resource', id: 'file:///x' },
      { session: { calls: 0, max_sensitivity: 'unclassified', max_sensitivity_level: 0 } },
      [{ uid: { type: 'Agent', id: 'dora' }, attrs: {}, parents: [] }],
    );
    expect(d).toMatchObject({ decision: 'deny', failure: expect.stringMatching(/not declared/) });
  });

  it('a required attribute the agent lacks does not conform', () => {
    const strict = new PolicyEngine(
      { ...bundle, schema: SCHEMA.replace('s?: String,', 's: String,') },
      'enforcing',
    );
    expect(strict.evaluate({ ...REQUEST, agentAttributes: { s: null } }).invalid).toBe(
      'principal.s: expected String, got absent',
    );
    expect(strict.evaluate({ ...REQUEST, agentAttributes: { s: 'eng' } })).toMatchObject({
      decision: 'allow',
      invalid: null,
    });
  });
});

describe('a policy that errors is a deny in every enforcement mode, named', () => {
  it('the engine: deny with the erroring policy in `errored`, whatever the mode', () => {
    for (const mode of ['enforcing', 'advisory', 'silent'] as const) {
      const d = new PolicyEngine(loadBundleDir(BUNDLE), mode).evaluate({
        ...REQUEST,
        agentAttributes: { o: 4 },
      });
      expect(d).toMatchObject({ decision: 'deny', errored: ['overflows'], invalid: null, failure: null });
    }
  });

  for (const mode of ['advisory', 'silent'] as const)
    it(`${mode}: recorded as ${mode}_deny with the erroring policy or the misfit; never an allow`, async () => {
      const cfg = await writeConfig({
        upstreams: [everythingUpstream('everything')],
        agents: [
          { agent_id: 'eve', token: 'eve-token', attributes: { o: 4 } },
          { agent_id: 'sam', token: 'sam-token', attributes: { s: ['contractors'] } },
        ],
        extra: { policy: { bundle: BUNDLE, enforcement_mode: mode } },
      });
      // A configured attribute of the wrong type refuses the start in every mode.
      await expect(startInProcess(cfg)).rejects.toMatchObject({ code: 'POLICY_BUNDLE_INVALID' });
      const okDir = join(cfg.dir, 'ok');
      mkdirSync(okDir);
      const ok = await writeConfig({
        dir: okDir,
        upstreams: [everythingUpstream('everything')],
        agents: [{ agent_id: 'eve', token: 'eve-token', attributes: { o: 4 } }],
        extra: { policy: { bundle: BUNDLE, enforcement_mode: mode } },
      });
      const gw = await startInProcess(ok);
      try {
        const r = await echo(gw, 'eve-token');
        expect(outcome(r)).toBe('allowed');
        const ev = r.body.result._meta['dev.cmcp/evidence'];
        if (mode === 'advisory')
          expect(ev.policy_advisory).toEqual({
            policy_decision: 'advisory_deny',
            policy_ids: ['allow-all'],
            policy_errors: ['overflows'],
          });
        else expect(ev.policy_advisory).toBeUndefined();
        expect(recorded(gw, r)).toMatchObject({
          policy_decision: `${mode}_deny`,
          detail: { policy_errors: ['overflows'] },
        });
        // An argument a policy reads that does not conform is a deny too, following the mode.
        const bad = await echo(gw, 'eve-token', { message: ['contractors'] });
        expect(outcome(bad)).toBe('allowed');
        expect(recorded(gw, bad)).toMatchObject({
          policy_decision: `${mode}_deny`,
          detail: { policy_attribute_invalid: 'context.arguments.message: expected String, got array' },
        });
      } finally {
        await gw.close();
        cleanup(cfg.dir);
      }
    }, 60_000);
});
