/**
 * `cmcp policy …`: work with policy bundles (docs/spec/policy.md; docs/policy.md).
 *
 * - `policy init DIR --config FILE` — writes a starter bundle for the configured upstreams:
 *   the schema of what the gateway sends (src/policy/vocabulary.ts), a manifest, and a policy
 *   permitting the tools of the pinned catalog (or, without one, the tools the upstreams list
 *   now). DIR must not exist or be empty.
 * - `policy hash DIR` — prints the bundle hash (`sha256:<hex>`; no validation).
 * - `policy check DIR` — loads and validates the bundle with Cedar; prints hash, version and
 *   policy ids, or the Cedar diagnostics (exit 1).
 * - `policy keygen --private-out FILE` — a new Ed25519 policy key: writes the private key
 *   (PKCS#8 PEM, mode 0600) and prints the public key to pin as `policy.signing_key`.
 * - `policy sign DIR --key FILE` — prints the detached signature (base64url) over the hash.
 * - `policy reload DIR --url URL --signature SIG` — posts the signed bundle to a running
 *   gateway's `/operator/policy/reload` with the operator token from `CMCP_OPERATOR_TOKEN`.
 *
 * Exit codes: 0 ok; 1 refused (invalid bundle, refused reload); 2 usage or unreadable input.
 */
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Command } from 'commander';
import pino from 'pino';
import { CatalogError, loadCatalogFile } from '../catalog/catalog.js';
import { ConfigError, type GatewayConfig, loadConfig } from '../config/index.js';
import { hashBundleDir, loadBundleDir, PolicyBundleError, readBundleDir } from '../policy/bundle.js';
import {
  agentAttributesOf,
  type InitTool,
  initBundleFiles,
  SchemaInitError,
  toolArgumentsOf,
} from '../policy/schema-generator.js';
import { generatePolicyKey, PolicyKeyError, signBundleHash } from '../policy/signature.js';
import { listUpstreamToolsOnce } from '../upstream/pool.js';

function die(code: number, msg: string): never {
  process.stderr.write(`cmcp policy: ${msg.slice(0, 4000)}\n`);
  process.exit(code);
}

function guard<T>(fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof PolicyBundleError) die(e.diagnostics.length ? 1 : 2, e.message);
    if (e instanceof PolicyKeyError) die(2, e.message);
    if (e instanceof ConfigError || e instanceof CatalogError || e instanceof SchemaInitError)
      die(2, e.message);
    die(2, (e as Error).message);
  }
}

/**
 * The tools a starter bundle is written for: the pinned catalog's when the config names one,
 * else every tool the configured upstreams list now (as `cmcp catalog snapshot` reads them).
 */
async function initTools(cfg: GatewayConfig): Promise<{ tools: InitTool[]; source: string }> {
  const prefix = new Map(cfg.upstreams.map((u) => [u.name, u.prefix ?? u.name]));
  const exposed = (server: string, name: string) => {
    const p = prefix.get(server);
    return p ? `${p}.${name}` : name;
  };
  if (cfg.catalog) {
    const file = cfg.catalog.file;
    const { catalog } = guard(() => loadCatalogFile(file));
    return {
      source: `the catalog ${file}`,
      tools: catalog.tools.map((t) => ({
        exposedName: exposed(t.server, t.name),
        server: t.server,
        inputSchema: t.definition.inputSchema,
      })),
    };
  }
  const lists = await listUpstreamToolsOnce(cfg.upstreams, pino({ level: 'silent' })).catch((e: Error) =>
    die(1, e.message),
  );
  return {
    source: 'the tools the upstreams list now',
    tools: lists.flatMap((l) =>
      l.tools.map((t) => ({
        exposedName: exposed(l.server, t.name),
        server: l.server,
        inputSchema: t.inputSchema,
      })),
    ),
  };
}

/** Adds the `policy` command group to `program`. */
export function registerPolicyCommand(program: Command): void {
  const cmd = program
    .command('policy')
    .description('policy bundles: init, hash, check, keygen, sign, reload');
  cmd
    .command('init')
    .description('write a starter policy bundle (schema, manifest, policies) for the configured upstreams')
    .argument('<dir>', 'folder to create (must not exist, or be empty)')
    .requiredOption('-c, --config <file>', 'gateway YAML configuration')
    .action(async (dir: string, o: { config: string }) => {
      const cfg = guard(() => loadConfig(o.config));
      let existing: string[] = [];
      try {
        existing = readdirSync(dir);
      } catch {
        // Absent: created below.
      }
      if (existing.length) die(2, `${dir} is not empty; choose a new folder`);
      const { tools, source } = await initTools(cfg);
      const files = guard(() =>
        initBundleFiles(
          {
            agentAttributes: agentAttributesOf(cfg.agents, cfg.oauth),
            toolArguments: toolArgumentsOf(tools),
          },
          tools,
        ),
      );
      guard(() => {
        mkdirSync(dir, { recursive: true });
        for (const [name, text] of Object.entries(files))
          writeFileSync(join(dir, name), text, { flag: 'wx' });
      });
      const b = guard(() => loadBundleDir(dir));
      process.stdout.write(
        `wrote ${Object.keys(files).join(', ')} to ${dir}\n${tools.length} tool(s) permitted, from ${source}\nbundle ${b.hash}\n`,
      );
      process.exit(0);
    });
  cmd
    .command('hash')
    .description('print the bundle hash of a policy bundle folder')
    .argument('<dir>')
    .action((dir: string) => {
      process.stdout.write(`${guard(() => hashBundleDir(dir))}\n`);
    });
  cmd
    .command('check')
    .description('load and validate a bundle with Cedar (schema and every policy)')
    .argument('<dir>')
    .option('--json', 'JSON output')
    .action((dir: string, o: { json?: boolean }) => {
      const b = guard(() => loadBundleDir(dir));
      const out = {
        bundle_hash: b.hash,
        version: b.manifest.version,
        description: b.manifest.description,
        files: b.files,
        policy_ids: Object.keys(b.policies),
      };
      process.stdout.write(
        o.json
          ? `${JSON.stringify(out, null, 2)}\n`
          : `ok ${b.hash}\nversion ${b.manifest.version}: ${b.manifest.description}\npolicies: ${out.policy_ids.join(', ')}\n`,
      );
    });
  cmd
    .command('keygen')
    .description('generate an Ed25519 policy signing key')
    .requiredOption('--private-out <file>', 'where to write the private key (PKCS#8 PEM, mode 0600)')
    .action((o: { privateOut: string }) => {
      const k = generatePolicyKey();
      guard(() => writeFileSync(o.privateOut, k.privatePem, { mode: 0o600, flag: 'wx' }));
      process.stdout.write(`signing_key (pin in config policy.signing_key): ${k.publicRaw}\n${k.publicPem}`);
    });
  cmd
    .command('sign')
    .description('sign a bundle: prints the detached signature (base64url) over its hash')
    .argument('<dir>')
    .requiredOption('--key <file>', 'Ed25519 private key, PKCS#8 PEM')
    .action((dir: string, o: { key: string }) => {
      const hash = guard(() => loadBundleDir(dir).hash);
      const pem = guard(() => readFileSync(o.key, 'utf8'));
      process.stdout.write(`${guard(() => signBundleHash(hash, pem))}\n`);
    });
  cmd
    .command('reload')
    .description('post a signed bundle to a running gateway (operator token in CMCP_OPERATOR_TOKEN)')
    .argument('<dir>')
    .requiredOption('--url <url>', 'gateway base URL, e.g. http://127.0.0.1:8787')
    .requiredOption('--signature <b64url>', 'detached signature from `cmcp policy sign`')
    .action(async (dir: string, o: { url: string; signature: string }) => {
      const token = process.env.CMCP_OPERATOR_TOKEN;
      if (!token) die(2, 'set CMCP_OPERATOR_TOKEN to the operator token');
      const files = guard(() => readBundleDir(dir));
      let r: Response;
      try {
        r = await fetch(new URL('/operator/policy/reload', o.url), {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({
            files: Object.fromEntries([...files].map(([k, v]) => [k, v.toString('base64url')])),
            signature: o.signature,
          }),
        });
      } catch (e) {
        die(2, `cannot reach ${o.url}: ${(e as Error).message}`);
      }
      const text = await r.text();
      process.stdout.write(`${text}\n`);
      if (!r.ok) process.exitCode = 1;
    });
}
