/**
 * `npm run demo`: cmcp end to end on this machine, with nothing mocked.
 *
 * What it proves:
 *  - an ordinary MCP client (the official SDK, Streamable HTTP, bearer token) uses tools of two real
 *    MCP servers (`@modelcontextprotocol/server-filesystem` and `server-everything`, over stdio)
 *    through the gateway, with results (text and structuredContent) passed through intact;
 *  - every call is decided by Cedar against the example policy bundle (examples/policy) and the
 *    pinned tool catalog (examples/catalog.json): writes only into the workspace's outbox, so one
 *    write outside it is refused with POLICY_DENY and the id of the policy that forbade it;
 *  - the calls run in a gateway session whose audit-chain root was bound into a TPM quote
 *    (a software TPM, swtpm) when the session opened, over a fresh verifier challenge;
 *  - closing the session yields a signed claim that the offline verifier (`cmcp verify`)
 *    re-derives from the claim and the audit bundle alone: claim signature → key thumbprint →
 *    binding preimage → TPM quote over SHA-256(REPORT_DATA) → chain root, tip and length, with the
 *    policy and catalog hashes pinned (`--policy-hash`, `--catalog-hash`) to those of the files.
 *
 * Expected verdict: `hardware-unanchored` (the swtpm AK is not chained to a pinned root). Exit 0 on
 * `hardware-unanchored` or `hardware-attested`, 1 otherwise. Everything started is stopped on
 * success, failure and Ctrl-C; the temp folder is removed unless `--keep` is given.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  realpathSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { type CallToolResult, McpError } from '@modelcontextprotocol/sdk/types.js';
import { stringify } from 'yaml';
import { exited, freeLoopbackPort, waitExit } from '../testing/process.js';
import { provisionSwtpm, type SwtpmInstance, startSwtpm } from '../testing/swtpm.js';
import { useRelayedMethods } from './relayed.js';

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = join(REPO_ROOT, 'dist', 'src', 'cli', 'main.js');
const MCP_SERVERS = join(REPO_ROOT, 'node_modules', '@modelcontextprotocol');
const POLICY_BUNDLE = join(REPO_ROOT, 'examples', 'policy');
const CATALOG_FILE = join(REPO_ROOT, 'examples', 'catalog.json');
const ACCEPTED_VERDICTS = new Set(['hardware-unanchored', 'hardware-attested']);
const AGENT_ID = 'demo-agent';
/** Cedar principal attributes of the demo agent: a writer (examples/policy/00-baseline.cedar). */
const AGENT_ATTRIBUTES = { team: 'eng', roles: ['writer'] };

/**
 * Aborted by the first SIGINT/SIGTERM. Steps stop at their next await (or the next step) and the
 * run ends through the one cleanup path; a second signal exits at once (exit hooks then SIGKILL
 * swtpm and the gateway's process group; the temp folder is left).
 */
const interrupt = new AbortController();
const { signal } = interrupt;

// ---------------------------------------------------------------------------------------------
// Console output
// ---------------------------------------------------------------------------------------------

let stepNo = 0;
function step(title: string): void {
  signal.throwIfAborted();
  stepNo += 1;
  console.log(`\n[${stepNo}] ${title}`);
}
function info(text: string): void {
  console.log(`    ${text}`);
}
function indent(text: string, prefix = '      '): string {
  return text
    .trimEnd()
    .split('\n')
    .map((l) => (l ? `${prefix}${l}` : l))
    .join('\n');
}
/** `label: a, b, c` wrapped at about 100 columns. */
function wrapList(label: string, items: string[]): string {
  const lines: string[] = [];
  let line = `${label}:`;
  for (const [i, item] of items.entries()) {
    const word = `${item}${i < items.length - 1 ? ',' : ''}`;
    if (line.length + word.length + 1 > 100) {
      lines.push(line);
      line = ' '.repeat(label.length + 1);
    }
    line += ` ${word}`;
  }
  lines.push(line);
  return lines.join('\n');
}
function snippet(text: string, max = 100): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

// ---------------------------------------------------------------------------------------------
// Cleanup: everything started registers how to stop it; run once, in reverse order
// ---------------------------------------------------------------------------------------------

const cleanups: { what: string; run: () => Promise<void> | void }[] = [];
let cleaning: Promise<void> | null = null;

function onCleanup(what: string, run: () => Promise<void> | void): void {
  cleanups.push({ what, run });
}

function cleanupAll(): Promise<void> {
  cleaning ??= (async () => {
    for (const c of cleanups.reverse()) {
      try {
        await c.run();
      } catch (e) {
        console.error(`    cleanup: could not ${c.what}: ${(e as Error).message}`);
      }
    }
  })();
  return cleaning;
}

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

/** Runs `node dist/src/cli/main.js ARGS` to completion; never rejects on a non-zero exit. */
function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((ok, fail) => {
    const child = spawn(process.execPath, [CLI, ...args], { stdio: ['ignore', 'pipe', 'pipe'], signal });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
    });
    child.stderr.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    child.once('error', fail);
    child.once('close', (code) => ok({ code, stdout, stderr }));
  });
}

function lastLines(file: string, n: number): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-n).join('\n');
  } catch {
    return '(no log)';
  }
}

// ---------------------------------------------------------------------------------------------
// Demo steps
// ---------------------------------------------------------------------------------------------

interface Workspace {
  dir: string;
  /** The folder server-filesystem serves (its only allowed directory). */
  filesDir: string;
  /** `filesDir/outbox`: the only place the example policy lets writing tools touch. */
  outboxDir: string;
  configFile: string;
  logFile: string;
}

function makeWorkspace(keep: boolean): Workspace {
  // realpath: server-filesystem compares resolved paths against its allowed directory.
  const dir = realpathSync(mkdtempSync(join(tmpdir(), 'cmcp-demo-')));
  onCleanup('remove the temp folder', () => {
    if (keep) info(`kept ${dir}`);
    else rmSync(dir, { recursive: true, force: true });
  });
  const filesDir = join(dir, 'files');
  const outboxDir = join(filesDir, 'outbox');
  mkdirSync(outboxDir, { recursive: true });
  return {
    dir,
    filesDir,
    outboxDir,
    configFile: join(dir, 'cmcp.yaml'),
    logFile: join(dir, 'gateway.log'),
  };
}

/**
 * Provisions a TPM state (EK certificates from a throwaway local CA) and starts swtpm on a copy.
 * The cleanup is registered before anything is awaited, so an interrupt during provisioning or
 * start-up waits for swtpm_setup / swtpm to come up and then stops them.
 */
function startTpm(ws: Workspace): Promise<SwtpmInstance> {
  const starting = provisionSwtpm(join(ws.dir, 'tpm')).then((p) =>
    startSwtpm({ templateStateDir: p.stateDir, parentDir: ws.dir }),
  );
  onCleanup('stop swtpm', async () => {
    const tpm = await starting.catch(() => null);
    await tpm?.stop();
  });
  return starting;
}

/**
 * Writes the gateway config; the agent's token is stored only as its SHA-256. Policy and catalog
 * are the reviewed examples in the repository, used as they are.
 */
function writeConfig(ws: Workspace, tcti: string, port: number, token: string): void {
  const config = {
    dev_mode: false,
    listen: { host: '127.0.0.1', port },
    database: join(ws.dir, 'cmcp.db'),
    attestation: { provider: 'tpm', tcti, ak_algorithm: 'ecc-p256' },
    agents: [
      {
        agent_id: AGENT_ID,
        token_sha256: createHash('sha256').update(token).digest('hex'),
        attributes: AGENT_ATTRIBUTES,
      },
    ],
    policy: { bundle: POLICY_BUNDLE, enforcement_mode: 'enforcing' },
    catalog: { file: CATALOG_FILE },
    upstreams: [
      {
        name: 'fs',
        transport: 'stdio',
        command: process.execPath,
        args: [join(MCP_SERVERS, 'server-filesystem', 'dist', 'index.js'), ws.filesDir],
      },
      {
        name: 'everything',
        transport: 'stdio',
        command: process.execPath,
        args: [join(MCP_SERVERS, 'server-everything', 'dist', 'index.js'), 'stdio'],
      },
    ],
  };
  writeFileSync(ws.configFile, stringify(config));
}

/**
 * Starts `cmcp start --config FILE` in its own process group (so its stdio MCP servers can be
 * stopped with it) and waits for GET /healthz.
 */
async function startGatewayProcess(ws: Workspace, url: string): Promise<void> {
  signal.throwIfAborted();
  const log = openSync(ws.logFile, 'a');
  const child = spawn(process.execPath, [CLI, 'start', '--config', ws.configFile], {
    stdio: ['ignore', log, log],
    detached: true,
    env: { ...process.env, CMCP_LOG_LEVEL: 'info' },
  });
  closeSync(log);
  const pgid = child.pid;
  if (pgid === undefined) throw new Error('could not spawn the gateway');
  const killGroup = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pgid, sig);
    } catch {
      // the group is gone
    }
  };
  // Last resort if this process exits without running the cleanups.
  const lastResort = () => killGroup('SIGKILL');
  process.once('exit', lastResort);
  onCleanup('stop the gateway', async () => {
    if (!exited(child)) {
      child.kill('SIGTERM'); // graceful: the gateway closes its upstreams itself
      if (!(await waitExit(child, 5000))) child.kill('SIGKILL');
      await waitExit(child, 3000);
    }
    killGroup('SIGKILL'); // anything of its process group left behind
    process.off('exit', lastResort);
  });

  const deadline = Date.now() + 30_000;
  for (;;) {
    if (exited(child)) {
      throw new Error(
        `the gateway exited (${child.exitCode ?? child.signalCode}):\n${lastLines(ws.logFile, 20)}`,
      );
    }
    try {
      if ((await fetch(`${url}/healthz`, { signal })).ok) return;
    } catch {
      // not listening yet
    }
    signal.throwIfAborted();
    if (Date.now() > deadline)
      throw new Error(`the gateway did not answer /healthz:\n${lastLines(ws.logFile, 20)}`);
    await sleep(100, undefined, { signal });
  }
}

/** A REST call to the gateway as the demo agent; returns the raw body text. */
async function rest(url: string, token: string, method: 'GET' | 'POST', path: string, body?: unknown) {
  const r = await fetch(`${url}${path}`, {
    method,
    signal,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: HTTP ${r.status} ${snippet(text, 300)}`);
  return text;
}

interface SessionCreated {
  session_id: string;
  chain_root: string;
  binding: { provider: string; status: string; reason: string | null };
}

interface CallEvidence {
  session_id: string | null;
  sequence_number: number;
  entry_hash: string;
}

async function connectClient(url: string, token: string): Promise<Client> {
  const client = new Client({ name: 'cmcp-demo', version: '0.1.0' });
  const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  await client.connect(transport);
  onCleanup('close the MCP client', () => client.close());
  return client;
}

function textOf(result: CallToolResult): string {
  return result.content.map((c) => (c.type === 'text' ? c.text : `[${c.type}]`)).join(' ');
}

/**
 * One tools/call in the session. `_cmcp` is the gateway's extension member of the call params;
 * the SDK sends params as given. The gateway's evidence in `_meta` proves it ran in our session.
 */
async function callInSession(
  client: Client,
  sessionId: string,
  name: string,
  args: Record<string, unknown>,
): Promise<CallToolResult> {
  const params = { name, arguments: args, _cmcp: { session_id: sessionId } };
  const result = (await client.callTool(params, undefined, { signal })) as CallToolResult;
  const evidence = result._meta?.['dev.cmcp/evidence'] as CallEvidence | undefined;
  if (evidence?.session_id !== sessionId) {
    throw new Error(
      `${name}: the call was not recorded in session ${sessionId} (evidence ${JSON.stringify(evidence)})`,
    );
  }
  if (result.isError) throw new Error(`${name} returned an error: ${snippet(textOf(result), 300)}`);
  info(
    `${name}  → #${evidence.sequence_number} ${evidence.entry_hash.slice(0, 16)}…  ${snippet(textOf(result))}`,
  );
  return result;
}

/**
 * A call the policy must refuse: the gateway answers with a JSON-RPC error (POLICY_DENY, the
 * matched policy ids, and evidence of the refusal's audit entry in our session); the upstream
 * never sees the call.
 */
async function deniedInSession(
  client: Client,
  sessionId: string,
  name: string,
  args: Record<string, unknown>,
): Promise<void> {
  const params = { name, arguments: args, _cmcp: { session_id: sessionId } };
  try {
    await client.callTool(params, undefined, { signal });
  } catch (e) {
    if (!(e instanceof McpError)) throw e;
    const data = e.data as
      | { error_code?: string; policy_ids?: string[]; evidence?: CallEvidence }
      | undefined;
    if (data?.error_code !== 'POLICY_DENY')
      throw new Error(`${name}: expected POLICY_DENY, got ${e.message} ${JSON.stringify(data)}`);
    if (data.evidence?.session_id !== sessionId)
      throw new Error(`${name}: the refusal was not recorded in session ${sessionId}`);
    info(
      `${name}  ✗ #${data.evidence.sequence_number} ${data.evidence.entry_hash.slice(0, 16)}…  ` +
        `POLICY_DENY by ${(data.policy_ids ?? []).join(', ') || '(no permit)'} (JSON-RPC ${e.code})`,
    );
    return;
  }
  throw new Error(`${name}: the policy allowed a call it must refuse`);
}

async function useTools(client: Client, sessionId: string, ws: Workspace): Promise<void> {
  const { tools } = await client.listTools(undefined, { signal });
  const byUpstream = new Map<string, string[]>();
  for (const t of tools) {
    const [upstream = '', ...rest] = t.name.split('.');
    byUpstream.set(upstream, [...(byUpstream.get(upstream) ?? []), rest.join('.')]);
  }
  info(`tools/list: ${tools.length} tools`);
  for (const [upstream, names] of byUpstream) console.log(indent(wrapList(upstream, names)));
  for (const needed of [
    'fs.write_file',
    'fs.read_text_file',
    'everything.echo',
    'everything.get-structured-content',
  ]) {
    if (!tools.some((t) => t.name === needed)) throw new Error(`tools/list has no ${needed}`);
  }

  console.log('');
  const path = join(ws.outboxDir, 'hello.txt');
  const content = `Hello from the cmcp demo, ${new Date().toISOString()}\n`;
  await callInSession(client, sessionId, 'fs.write_file', { path, content });
  // Outside the outbox: forbidden by the example policy's guardrail, never reaches the server.
  const outside = join(ws.filesDir, 'outside-the-outbox.txt');
  info(`fs.write_file to ${outside} (outside ${ws.outboxDir}):`);
  await deniedInSession(client, sessionId, 'fs.write_file', { path: outside, content });
  if (existsSync(outside)) throw new Error('the denied write reached server-filesystem');
  const read = await callInSession(client, sessionId, 'fs.read_text_file', { path });
  if (textOf(read) !== content) throw new Error('fs.read_text_file did not return what fs.write_file wrote');
  await callInSession(client, sessionId, 'everything.echo', { message: 'through the gateway and back' });
  const weather = await callInSession(client, sessionId, 'everything.get-structured-content', {
    location: 'Chicago',
  });
  info(`structuredContent: ${JSON.stringify(weather.structuredContent)}`);
  if (!weather.structuredContent) throw new Error('get-structured-content returned no structuredContent');
}

interface VerifyOutcome {
  verdict: string;
  /** `id REASON_CODE: detail` of every failed check. */
  failed: string[];
  text: string;
}

interface VerifyReport {
  verdict: string;
  checks: { id: string; status: string; reason_code: string; detail: string }[];
}

/** The hashes a relying party pins, computed by the CLI from the reviewed files themselves. */
async function hashOf(kind: 'policy' | 'catalog', path: string): Promise<string> {
  const r = await runCli([kind, 'hash', path]);
  const hash = r.stdout.trim();
  if (r.code !== 0 || !/^sha256:[0-9a-f]{64}$/.test(hash))
    throw new Error(`cmcp ${kind} hash ${path} failed: ${r.stderr || r.stdout}`);
  return hash;
}

async function verify(
  ws: Workspace,
  challenge: string,
  pins: { policy: string; catalog: string },
): Promise<VerifyOutcome> {
  const claim = join(ws.dir, 'claim.json');
  const audit = join(ws.dir, 'audit.json');
  const args = [
    'verify',
    claim,
    '--audit',
    audit,
    '--challenge',
    challenge,
    '--policy-hash',
    pins.policy,
    '--catalog-hash',
    pins.catalog,
    // swtpm's AK chains to no pinned root: accept hardware-unanchored evidence explicitly
    '--require',
    'hardware-unanchored',
  ];
  const text = await runCli(args);
  const json = await runCli([...args, '--json']);
  if (json.code === 2 || text.code === 2)
    throw new Error(`cmcp verify could not run: ${json.stderr || text.stderr}`);
  const report = JSON.parse(json.stdout) as VerifyReport;
  const failed = report.checks
    .filter((c) => c.status === 'fail')
    .map((c) => `${c.id} ${c.reason_code}: ${c.detail}`);
  return { verdict: report.verdict, failed, text: text.stdout };
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

/** The gateway log, shown on failure (before the temp folder is removed). */
let logFile: string | null = null;

async function main(keep: boolean): Promise<number> {
  const started = Date.now();
  console.log(
    'cmcp demo: MCP client → cmcp gateway (swtpm-bound session) → two real MCP servers → offline verify',
  );

  step('Provisioning a software TPM (swtpm, loopback only)');
  const ws = makeWorkspace(keep);
  const tpm = await startTpm(ws);
  info(`swtpm pid ${tpm.pid}, TCTI ${tpm.tcti}`);

  step('Writing the gateway config and starting `cmcp start`');
  const token = randomBytes(32).toString('base64url');
  const port = await freeLoopbackPort();
  const url = `http://127.0.0.1:${port}`;
  writeConfig(ws, tpm.tcti, port, token);
  info(
    `config ${ws.configFile} (attestation tpm / ecc-p256, agent ${AGENT_ID}, token stored as SHA-256 only)`,
  );
  const pins = {
    policy: await hashOf('policy', POLICY_BUNDLE),
    catalog: await hashOf('catalog', CATALOG_FILE),
  };
  info(`policy  ${POLICY_BUNDLE} (enforcing) ${pins.policy}`);
  info(`catalog ${CATALOG_FILE} ${pins.catalog}`);
  logFile = ws.logFile;
  await startGatewayProcess(ws, url);
  info(`gateway listening on ${url} (log: ${ws.logFile})`);

  step('Opening a gateway session (POST /sessions with a fresh verifier challenge)');
  const challenge = randomBytes(32).toString('base64url');
  const session = JSON.parse(await rest(url, token, 'POST', '/sessions', { challenge })) as SessionCreated;
  info(`session ${session.session_id}`);
  info(`chain root ${session.chain_root}`);
  info(
    `binding: provider ${session.binding.provider}, ${session.binding.status}${session.binding.reason ? ` (${session.binding.reason})` : ''}`,
  );

  step('Using tools through the gateway with the MCP SDK client (Streamable HTTP)');
  const client = await connectClient(url, token);
  await useTools(client, session.session_id, ws);

  step('Reading a resource, getting a prompt and running a tool that reports progress (relayed MCP)');
  await useRelayedMethods(client, session.session_id, signal, info);

  step('Closing the session and fetching its claim and audit bundle');
  await rest(url, token, 'POST', `/sessions/${session.session_id}/close`);
  const claimText = await rest(url, token, 'GET', `/sessions/${session.session_id}/claim`);
  writeFileSync(join(ws.dir, 'claim.json'), claimText);
  writeFileSync(
    join(ws.dir, 'audit.json'),
    await rest(url, token, 'GET', `/sessions/${session.session_id}/audit`),
  );
  info(`claim → ${join(ws.dir, 'claim.json')}, audit bundle → ${join(ws.dir, 'audit.json')}`);
  const claim = JSON.parse(claimText) as {
    audit_chain: { root: string; tip: string; length: number };
    counters: Record<string, number>;
    policy_bundle_hash: string | null;
    catalog_hash: string | null;
    enforcement_mode: string;
  };
  info(`chain root   ${claim.audit_chain.root}`);
  info(`chain tip    ${claim.audit_chain.tip}`);
  info(`chain length ${claim.audit_chain.length} entries`);
  info(`counters     ${JSON.stringify(claim.counters)}`);
  info(`policy       ${claim.policy_bundle_hash} (${claim.enforcement_mode})`);
  info(`catalog      ${claim.catalog_hash}`);

  step(
    'Verifying offline: cmcp verify claim.json --audit audit.json --challenge … --policy-hash … --catalog-hash … --require hardware-unanchored',
  );
  const v = await verify(ws, challenge, pins);
  console.log(indent(v.text));

  const ok = ACCEPTED_VERDICTS.has(v.verdict);
  console.log(
    `\n${ok ? 'PASS' : 'FAIL'}: verdict ${v.verdict} for session ${session.session_id} ` +
      `(${((Date.now() - started) / 1000).toFixed(1)} s)`,
  );
  console.log(`  policy hash  ${pins.policy} (examples/policy, pinned with --policy-hash)`);
  console.log(`  catalog hash ${pins.catalog} (examples/catalog.json, pinned with --catalog-hash)`);
  for (const f of v.failed) console.log(`  failed check: ${f}`);
  return ok ? 0 : 1;
}

/** Exit code after an interrupt (128 + signal number). */
let interruptCode = 0;

function installSignalHandlers(): void {
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      if (signal.aborted) {
        console.error(`${sig} again: exiting now`);
        process.exit(interruptCode);
      }
      interruptCode = sig === 'SIGINT' ? 130 : 143;
      console.error(`\n${sig}: stopping everything the demo started…`);
      interrupt.abort(new Error(`interrupted by ${sig}`));
    });
  }
}

function parseCommandLine(): { keep: boolean } {
  try {
    const { values } = parseArgs({ options: { keep: { type: 'boolean', default: false } } });
    return { keep: values.keep === true };
  } catch (e) {
    console.error(
      `${(e as Error).message}\nusage: npm run demo [-- --keep]   (--keep: keep the temp folder)`,
    );
    process.exit(2);
  }
}

const options = parseCommandLine();
installSignalHandlers();
let code = 1;
try {
  code = await main(options.keep);
} catch (e) {
  if (!signal.aborted) {
    console.error(`\nFAIL: ${(e as Error).message}`);
    if (logFile) console.error(`gateway log (last lines):\n${indent(lastLines(logFile, 15))}`);
  }
}
await cleanupAll();
process.exit(signal.aborted ? interruptCode : code);
