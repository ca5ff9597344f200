/**
 * How a request that does not fit the bundle's schema is answered and recorded
 * (docs/policy.md#attribute-types):
 *
 * - the misfit is named by its attribute path, the schema's type and the JSON type found —
 *   never by a value: a distinctive value in a token claim, a tool argument or a configured
 *   attribute appears nowhere in the audit database, the session's audit bundle, the error
 *   answer or the gateway's log;
 * - only what a policy can read is checked: an argument no policy reads (another tool's
 *   argument of the same name and another type) is left out, in every mode, while the same misfit
 *   of an argument a policy reads is a deny — refused when enforcing, recorded as the mode's
 *   deny in advisory and silent;
 * - relayed requests: an older schema that declares fewer resource attributes than the gateway
 *   sends, and prompt arguments no policy reads, are not refused.
 */
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config/index.js';
import { type Gateway, startGateway } from '../src/gateway/lifecycle/start.js';
import { loadBundleDir } from '../src/policy/bundle.js';
import { type EnforcementMode, PolicyEngine } from '../src/policy/engine.js';
import { decideRelay } from '../src/relay/policy.js';
import {
  cleanup,
  everythingUpstream,
  freePort,
  rest,
  rpc,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';
import { type TestIssuer, testIssuer } from './harness/jwt-issuer.js';

const ISSUER = 'https://issuer.test';

const schema = (args: string, agent = 'scopes?: Set<String>, team?: String') => `
entity Server;
entity Agent = { ${agent} };
entity Tool in [Server] = {
  server: String,
  name: String,
  sensitivity: String,
  sensitivity_level: Long,
  annotations: { readOnlyHint?: Bool, destructiveHint?: Bool, idempotentHint?: Bool, openWorldHint?: Bool },
};
entity Resource in [Server] = { server: String };
entity Prompt in [Server] = { server: String, name: String };
action call_tool appliesTo {
  principal: [Agent],
  resource: [Tool],
  context: {
    arguments: { ${args} },
    workflow_id?: String,
    session: { calls: Long, max_sensitivity: String, max_sensitivity_level: Long },
  },
};
action read_resource appliesTo {
  principal: [Agent],
  resource: [Resource],
  context: { session: { calls: Long, max_sensitivity: String, max_sensitivity_level: Long } },
};
action get_prompt appliesTo {
  principal: [Agent],
  resource: [Prompt],
  context: {
    arguments: { who?: String, other?: String },
    session: { calls: Long, max_sensitivity: String, max_sensitivity_level: Long },
  },
};
`;

function bundle(schemaText: string, policies: string): string {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-misfit-bundle-'));
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version: 1, description: 'misfits' }));
  writeFileSync(join(dir, 'schema.cedarschema'), schemaText);
  writeFileSync(join(dir, 'policies.cedar'), policies);
  return dir;
}

/** `path` is declared (as one tool has it), but only `message` and `team` are read. */
const PATH_UNREAD = bundle(
  schema('path?: String, message?: String'),
  `@id("allow-all")
permit (principal, action, resource);
@id("forbid-team")
forbid (principal, action, resource) when { principal has team && principal.team == "contractors" };
@id("forbid-message")
forbid (principal, action == Action::"call_tool", resource) when { context.arguments has message && context.arguments.message == "stop" };
`,
);

/** The same schema, and a policy that reads `path`. */
const PATH_READ = bundle(
  schema('path?: String, message?: String'),
  `@id("allow-all")
permit (principal, action, resource);
@id("no-secrets")
forbid (principal, action == Action::"call_tool", resource) when { context.arguments has path && context.arguments.path like "*secret*" };
`,
);

/** A gateway in this process whose log lines (every level) are kept. */
async function start(cfg: TestConfig): Promise<{ gw: Gateway; log: () => string }> {
  let lines = '';
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines += chunk.toString();
      done();
    },
  });
  const gw = await startGateway(loadConfig(cfg.file), pino({ level: 'trace' }, sink));
  return { gw, log: () => lines };
}

const call = (gw: Gateway, token: string, args: Record<string, unknown>, session?: string) =>
  rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: {
      name: 'everything.echo',
      arguments: args,
      ...(session ? { _cmcp: { session_id: session } } : {}),
    },
  });

type Reply = Awaited<ReturnType<typeof call>>;

function outcome(r: Reply): string {
  if (r.body.result) return 'allowed';
  return r.body.error?.data?.error_code ?? JSON.stringify(r.body).slice(0, 200);
}

function recorded(gw: Gateway, r: Reply) {
  const ev = r.body.error?.data?.evidence ?? r.body.result?._meta?.['dev.cmcp/evidence'];
  return gw.chain.entries(ev.chain_id).find((e) => e.entry_hash === ev.entry_hash);
}

/** Every file of the gateway's database (the main file, its WAL and shared memory). */
function databaseBytes(cfg: TestConfig): string {
  return readdirSync(cfg.dir)
    .filter((f) => f.startsWith('cmcp.db'))
    .map((f) => readFileSync(join(cfg.dir, f)).toString('latin1'))
    .join('\n');
}

describe('a misfit is named without its value', () => {
  const CLAIM = 'SENTINEL-CLAIM-7f3a';
  const ARG = 'SENTINEL-ARG-91bc';
  const KEY = 'SENTINEL-KEY-55de';
  const CONFIGURED = 'SENTINEL-CONFIGURED-c0a1';
  let issuer: TestIssuer;
  let cfg: TestConfig;
  let gw: Gateway;
  let log: () => string;
  let resource: string;

  const token = (claims: Record<string, unknown>) => issuer.mint(claims, resource);

  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'cmcp-misfit-oauth-'));
    issuer = await testIssuer(dir, ISSUER);
    const port = await freePort();
    resource = `http://127.0.0.1:${port}/mcp`;
    cfg = await writeConfig({
      dir,
      port,
      upstreams: [everythingUpstream('everything')],
      agents: [{ agent_id: 'eve', token: 'eve-token' }],
      extra: {
        policy: { bundle: PATH_UNREAD },
        oauth: {
          resource,
          issuer: ISSUER,
          jwks_file: issuer.jwksFile,
          algorithms: ['ES256'],
          attribute_claims: { team_claim: 'team' },
        },
      },
    });
    ({ gw, log } = await start(cfg));
  }, 60_000);

  afterAll(async () => {
    await gw?.close();
    if (cfg) cleanup(cfg.dir);
  });

  it('a claim, an argument and a member name: refused, recorded and answered by path and types only', async () => {
    const jwt = await token({ team_claim: [CLAIM] });
    const session = (await rest(gw.url, jwt, 'POST', '/sessions', {})).body.session_id;
    const replies = [
      [await call(gw, jwt, { message: 'hi' }, session), 'principal.team: expected String, got array'],
      [
        await call(gw, await token({}), { message: [ARG] }, session),
        'context.arguments.message: expected String, got array',
      ],
      [
        await call(
          gw,
          await token({}),
          { message: { [KEY]: { __entity: { type: 'Agent', id: ARG } } } },
          session,
        ),
        'context.arguments.message: member name __entity is reserved by Cedar',
      ],
    ] as const;
    for (const [r, why] of replies) {
      expect(outcome(r)).toBe('POLICY_ATTRIBUTE_INVALID');
      expect(r.body.error.data.policy_attribute_invalid).toBe(why);
      expect(recorded(gw, r)).toMatchObject({
        error_code: 'POLICY_ATTRIBUTE_INVALID',
        policy_decision: 'deny',
        detail: { policy_attribute_invalid: why },
      });
    }
    const answers = replies.map(([r]) => r.text).join('\n');
    const audit = await rest(gw.url, jwt, 'GET', `/sessions/${session}/audit`);
    expect(audit.status).toBe(200);
    const bundleText = JSON.stringify(audit.body);
    expect(bundleText).toContain('policy_attribute_invalid');
    await gw.close();
    const db = databaseBytes(cfg);
    expect(db).toContain('context.arguments.message');
    for (const sentinel of [CLAIM, ARG, KEY])
      for (const [where, text] of Object.entries({ answers, bundle: bundleText, db, log: log() }))
        expect(text.includes(sentinel), `${sentinel} in the ${where}`).toBe(false);
  }, 60_000);

  it('a configured attribute: the start is refused naming the attribute, not its value', async () => {
    const bad = await writeConfig({
      upstreams: [],
      agents: [{ agent_id: 'dora', token: 'dora-token', attributes: { team: [CONFIGURED] } }],
      extra: { policy: { bundle: PATH_UNREAD } },
    });
    try {
      let lines = '';
      const sink = new Writable({
        write(chunk, _enc, done) {
          lines += chunk.toString();
          done();
        },
      });
      const err = await startGateway(loadConfig(bad.file), pino({ level: 'trace' }, sink)).then(
        () => null,
        (e: unknown) => e as Error & { code?: string; diagnostics?: string[] },
      );
      expect(err?.code).toBe('POLICY_BUNDLE_INVALID');
      const told = `${err?.message}\n${JSON.stringify(err?.diagnostics ?? [])}`;
      expect(told).toContain('Agent::\\"dora\\": principal.team: expected String, got array');
      expect(`${told}\n${lines}\n${databaseBytes(bad)}`).not.toContain(CONFIGURED);
    } finally {
      cleanup(bad.dir);
    }
  });
});

describe('only what a policy can read is checked', () => {
  const REQUEST = {
    agentId: 'dora',
    agentAttributes: {},
    tool: {
      exposedName: 'fs.list',
      server: 'fs',
      toolName: 'list',
      sensitivity: 'unclassified' as const,
      annotations: {},
    },
    arguments: { path: ['/tmp/a', '/tmp/b'] },
    workflowId: null,
    session: { calls: 0, maxSensitivity: 'unclassified' as const },
  };

  it('the engine: an unread argument of another type is left out; a read one is a deny naming it', () => {
    for (const mode of ['enforcing', 'advisory', 'silent'] as const) {
      const unread = new PolicyEngine(loadBundleDir(PATH_UNREAD), mode);
      expect(unread.evaluate(REQUEST)).toMatchObject({ decision: 'allow', invalid: null });
      // A read argument of another tool's name next to it still decides.
      expect(
        unread.evaluate({ ...REQUEST, arguments: { ...REQUEST.arguments, message: 'stop' } }),
      ).toMatchObject({ decision: 'deny', matched: ['forbid-message'], invalid: null });
      const read = new PolicyEngine(loadBundleDir(PATH_READ), mode);
      expect(read.evaluate(REQUEST)).toMatchObject({
        decision: 'deny',
        invalid: 'context.arguments.path: expected String, got array',
      });
    }
  });

  it('the engine: a principal attribute the schema declares is checked even when no policy reads it', () => {
    const engine = new PolicyEngine(loadBundleDir(PATH_READ), 'enforcing');
    expect(
      engine.evaluate({ ...REQUEST, arguments: {}, agentAttributes: { team: ['contractors'] } }),
    ).toMatchObject({ decision: 'deny', invalid: 'principal.team: expected String, got array' });
  });

  it('relayed: an older schema declaring fewer resource attributes, and an unread prompt argument', () => {
    const engine = new PolicyEngine(
      loadBundleDir(
        bundle(
          schema('message?: String'),
          `@id("allow-all")
permit (principal, action, resource);
@id("no-bob")
forbid (principal, action == Action::"get_prompt", resource) when { context.arguments has who && context.arguments.who == "bob" };
`,
        ),
      ),
      'enforcing',
    );
    const session = { calls: 0 };
    // The gateway sends `uri` too; this schema's Resource declares only `server`.
    expect(
      decideRelay(engine, {
        agentId: 'dora',
        agentAttributes: {},
        action: 'read_resource',
        resource: { type: 'Resource', id: 'file:///x', attrs: { uri: 'file:///x' }, server: 'fs' },
        session,
      }),
    ).toMatchObject({ entry: { policy_decision: 'allow' }, refused: null });
    const prompt = (args: Record<string, unknown>) =>
      decideRelay(engine, {
        agentId: 'dora',
        agentAttributes: {},
        action: 'get_prompt',
        resource: { type: 'Prompt', id: 'fs.greet', attrs: { name: 'greet' }, server: 'fs' },
        context: { arguments: args },
        session,
      });
    expect(prompt({ who: 'al', other: [1, 2] })).toMatchObject({
      entry: { policy_decision: 'allow' },
      refused: null,
    });
    expect(prompt({ who: ['bob'] })).toMatchObject({
      entry: { policy_decision: 'deny' },
      detail: { policy_attribute_invalid: 'context.arguments.who: expected String, got array' },
      refused: { code: 'POLICY_ATTRIBUTE_INVALID' },
    });
  });

  for (const mode of ['enforcing', 'advisory', 'silent'] as const)
    it(`${mode}: an unread array path passes; a read one is ${mode === 'enforcing' ? 'refused' : `a ${mode}_deny naming it`}`, async () => {
      const started: { gw: Gateway; cfg: TestConfig }[] = [];
      const open = async (b: string, m: EnforcementMode) => {
        const cfg = await writeConfig({
          upstreams: [everythingUpstream('everything')],
          agents: [{ agent_id: 'eve', token: 'eve-token' }],
          extra: { policy: { bundle: b, enforcement_mode: m } },
        });
        const { gw } = await start(cfg);
        started.push({ gw, cfg });
        return gw;
      };
      try {
        const args = { message: 'hi', path: ['/tmp/a', '/tmp/b'] };
        const unread = await open(PATH_UNREAD, mode);
        const a = await call(unread, 'eve-token', args);
        expect(outcome(a)).toBe('allowed');
        expect(recorded(unread, a)).toMatchObject({
          policy_decision: 'allow',
          policy_rule_matched: ['allow-all'],
        });

        const read = await open(PATH_READ, mode);
        const b = await call(read, 'eve-token', args);
        const why = 'context.arguments.path: expected String, got array';
        if (mode === 'enforcing') {
          expect(outcome(b)).toBe('POLICY_ATTRIBUTE_INVALID');
          expect(b.body.error.data.policy_attribute_invalid).toBe(why);
          expect(recorded(read, b)).toMatchObject({
            error_code: 'POLICY_ATTRIBUTE_INVALID',
            policy_decision: 'deny',
            detail: { policy_attribute_invalid: why },
          });
        } else {
          expect(outcome(b)).toBe('allowed');
          expect(recorded(read, b)).toMatchObject({
            policy_decision: `${mode}_deny`,
            detail: { policy_attribute_invalid: why },
          });
          const advisory = b.body.result._meta['dev.cmcp/evidence'].policy_advisory;
          if (mode === 'advisory')
            expect(advisory).toEqual({
              policy_decision: 'advisory_deny',
              policy_ids: [],
              policy_attribute_invalid: why,
            });
          else expect(advisory).toBeUndefined();
        }
      } finally {
        for (const s of started) {
          await s.gw.close();
          cleanup(s.cfg.dir);
        }
      }
    }, 60_000);
});
