/**
 * `cmcp policy init`: the bundle it writes for the configured upstreams is accepted unchanged by
 * `cmcp policy check`, permits the listed tools, and its schema is the one the request builders
 * send: a real request of every action the gateway decides, built by the gateway's own builders
 * (PolicyEngine.evaluate for tools/call, decideRelay for the relayed methods), is validated by
 * cedar-wasm against the generated schema and allowed by a permit-all policy.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadCatalogFile } from '../src/catalog/catalog.js';
import { loadBundleDir, loadBundleFromFiles, readBundleDir } from '../src/policy/bundle.js';
import { checkEntities, PolicyEngine, toolEntities } from '../src/policy/engine.js';
import { ACTIONS, type ActionId } from '../src/policy/vocabulary.js';
import { decideRelay, type RelayResource } from '../src/relay/policy.js';
import { cleanup, everythingUpstream, freePort, REPO_ROOT, writeConfig } from './harness/gateway.js';

const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
function cmcp(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: 'utf8', timeout: 90_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

describe('cmcp policy init', () => {
  it('without a catalog: lists the running upstreams and permits their tools; policy check accepts it', async () => {
    const cfg = await writeConfig({ upstreams: [everythingUpstream('ev')], port: await freePort() });
    const dir = join(cfg.dir, 'policy');
    try {
      const r = cmcp('policy', 'init', dir, '--config', cfg.file);
      expect(r.err).toBe('');
      expect(r.code).toBe(0);
      expect(r.out).toMatch(/\d+ tool\(s\) permitted, from the tools the upstreams list now/);
      expect(readFileSync(join(dir, '00-permit.cedar'), 'utf8')).toContain('Tool::"ev.echo"');
      const schema = readFileSync(join(dir, 'schema.cedarschema'), 'utf8');
      expect(schema).toMatch(/arguments: \{[^}]*message\?: String/);
      const check = cmcp('policy', 'check', dir);
      expect(check.code).toBe(0);
      expect(check.out).toMatch(/^ok sha256:[0-9a-f]{64}\n/);
      expect(check.out).toContain('policies: allow-listed-tools');
      // A second init never overwrites a bundle.
      const again = cmcp('policy', 'init', dir, '--config', cfg.file);
      expect(again.code).toBe(2);
      expect(again.err).toContain('is not empty');
    } finally {
      cleanup(cfg.dir);
    }
  });

  it('every action the gateway decides, built by its own request builders, conforms to the generated schema', () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'cmcp-init-')), 'policy');
    try {
      const config = join(REPO_ROOT, 'examples', 'cmcp.example.yaml');
      const r = cmcp('policy', 'init', dir, '--config', config);
      expect(r.code, r.err).toBe(0);
      expect(r.out).toContain('12 tool(s) permitted, from the catalog');
      expect(cmcp('policy', 'check', dir).code).toBe(0);

      // The generated schema with one permit-all policy: any deny is a request that does not conform.
      const files = readBundleDir(dir);
      for (const k of [...files.keys()]) if (k.endsWith('.cedar')) files.delete(k);
      files.set('all.cedar', Buffer.from('@id("all")\npermit (principal, action, resource);\n'));
      const bundle = loadBundleFromFiles(files);
      const engine = new PolicyEngine(bundle, 'enforcing');
      const agents: { id: string; attrs: Record<string, unknown> }[] = [
        { id: 'alice', attrs: { team: 'eng', roles: ['writer'] } },
        { id: 'bob', attrs: { team: 'contractors' } },
      ];
      const { catalog } = loadCatalogFile(join(REPO_ROOT, 'examples', 'catalog.json'));
      // Every catalog tool fits the schema as the gateway checks it at load.
      for (const t of catalog.tools) {
        const facts = {
          exposedName: `${t.server}.${t.name}`,
          server: t.server,
          toolName: t.name,
          sensitivity: t.sensitivity,
          annotations: t.definition.annotations,
        };
        expect(checkEntities(bundle, toolEntities(facts))).toEqual([]);
      }
      const tool = catalog.tools.find((t) => t.name === 'write_file');
      if (!tool) throw new Error('examples/catalog.json has no write_file');

      const relay =
        (action: ActionId, resource: RelayResource, context?: Record<string, unknown>) =>
        (agent: (typeof agents)[number]) => {
          const v = decideRelay(engine, {
            agentId: agent.id,
            agentAttributes: agent.attrs,
            action,
            resource,
            ...(context ? { context } : {}),
            session: { calls: 3, maxSensitivity: 'confidential' },
          });
          return { allowed: v.refused === null && v.entry.policy_decision === 'allow', why: v };
        };
      const requests: Record<
        ActionId,
        (agent: (typeof agents)[number]) => { allowed: boolean; why: unknown }
      > = {
        call_tool: (agent) => {
          const d = engine.evaluate({
            agentId: agent.id,
            agentAttributes: agent.attrs,
            tool: {
              exposedName: `fs.${tool.name}`,
              server: 'fs',
              toolName: tool.name,
              sensitivity: tool.sensitivity,
              annotations: tool.definition.annotations,
            },
            arguments: { path: '/w/outbox/a.txt', content: 'x', head: 2.5 },
            workflowId: 'wf-1',
            session: { calls: 1, maxSensitivity: 'internal' },
          });
          return { allowed: d.decision === 'allow' && d.invalid === null, why: d };
        },
        read_resource: relay('read_resource', {
          type: 'Resource',
          id: 'file:///w/a.txt',
          server: 'fs',
          attrs: { uri: 'file:///w/a.txt' },
        }),
        subscribe_resource: relay('subscribe_resource', {
          type: 'Resource',
          id: 'demo://resource/1',
          server: 'everything',
          attrs: { uri: 'demo://resource/1' },
        }),
        get_prompt: relay(
          'get_prompt',
          {
            type: 'Prompt',
            id: 'everything.simple-prompt',
            server: 'everything',
            attrs: { name: 'simple-prompt' },
          },
          { arguments: { who: 'me' } },
        ),
        complete: relay('complete', {
          type: 'Completion',
          id: 'ref/prompt:everything.args-prompt',
          server: 'everything',
          attrs: { ref_type: 'ref/prompt', ref: 'everything.args-prompt' },
        }),
        relay_sampling: relay('relay_sampling', {
          type: 'ClientRequest',
          id: 'sampling/createMessage',
          server: 'everything',
          attrs: { method: 'sampling/createMessage' },
        }),
        relay_elicitation: relay('relay_elicitation', {
          type: 'ClientRequest',
          id: 'elicitation/create',
          server: 'everything',
          attrs: { method: 'elicitation/create' },
        }),
        relay_roots: relay('relay_roots', {
          type: 'ClientRequest',
          id: 'roots/list',
          server: 'everything',
          attrs: { method: 'roots/list' },
        }),
      };
      expect(Object.keys(requests).sort()).toEqual(Object.keys(ACTIONS).sort());
      for (const [action, build] of Object.entries(requests))
        for (const agent of agents) {
          const { allowed, why } = build(agent);
          expect(allowed, `${action} by ${agent.id}: ${JSON.stringify(why)}`).toBe(true);
        }

      // The check can fail: an attribute the schema does not declare is refused.
      const bad = requests.call_tool({ id: 'eve', attrs: { clearance: 3 } }) as {
        allowed: boolean;
        why: { invalid: string | null };
      };
      expect(bad.allowed).toBe(false);
      expect(bad.why.invalid).toMatch(/clearance/);
    } finally {
      rmSync(join(dir, '..'), { recursive: true, force: true });
    }
  });

  it('the starter policy decides: a listed tool is allowed, any other is denied; a forbid wins', () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'cmcp-init-')), 'policy');
    try {
      expect(
        cmcp('policy', 'init', dir, '--config', join(REPO_ROOT, 'examples', 'cmcp.example.yaml')).code,
      ).toBe(0);
      writeFileSync(
        join(dir, '20-mine.cedar'),
        '@id("no-echo-secrets")\nforbid (principal, action == Action::"call_tool", resource == Tool::"everything.echo")\n' +
          'when { context.arguments has message && context.arguments.message like "*secret*" };\n',
      );
      const engine = new PolicyEngine(loadBundleDir(dir), 'enforcing');
      const call = (name: string, args: Record<string, unknown>) =>
        engine.evaluate({
          agentId: 'alice',
          agentAttributes: { team: 'eng' },
          tool: {
            exposedName: `everything.${name}`,
            server: 'everything',
            toolName: name,
            sensitivity: 'public',
            annotations: {},
          },
          arguments: args,
          workflowId: null,
          session: { calls: 0, maxSensitivity: 'unclassified' },
        });
      expect(call('echo', { message: 'hi' })).toMatchObject({
        decision: 'allow',
        matched: ['allow-listed-tools'],
      });
      expect(call('echo', { message: 'a secret' })).toMatchObject({
        decision: 'deny',
        matched: ['no-echo-secrets'],
      });
      expect(call('not-listed', {})).toMatchObject({ decision: 'deny', matched: [] });
    } finally {
      rmSync(join(dir, '..'), { recursive: true, force: true });
    }
  });
});
