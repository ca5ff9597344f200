/**
 * `npm run conformance`: the public MCP server conformance scenarios
 * (`@modelcontextprotocol/conformance`, its default "active" server suite) run twice — straight
 * against cmcp's fixture server (fixture-server.ts), then against a dev-mode gateway in front of
 * that same fixture (bare tool names, `prefix: ""`). Every scenario must pass directly, and
 * through the gateway with the same passed and failed check counts, except the scenarios listed
 * in expected.ts (each with the reason it does not yet pass): a listed one that
 * fails is reported, not fatal; a listed one that passes is an error too (the list is stale).
 *
 * Beside them the client scenarios (./client-suite.ts): the SDK client alone against each
 * scenario's server, then cmcp as the client under test (the SDK client through a gateway whose
 * upstream is the scenario's server). Each scenario the SDK client passes alone must pass
 * through cmcp with the same check counts, except those in expected.ts; one the SDK client
 * fails alone (the driver performs no OAuth) is reported, not fatal.
 *
 * Exit status: 0 when all of that holds, 1 otherwise. `--json` prints the comparison as JSON;
 * `--server` or `--client` runs one side only.
 */
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { parseConfig } from '../../src/config/index.js';
import { startGateway } from '../../src/gateway/lifecycle/start.js';
import { clientScenarios, runClientSuite } from './client-suite.js';
import { EXPECTED_CLIENT_THROUGH_GATEWAY, EXPECTED_THROUGH_GATEWAY } from './expected.js';
import { startFixtureServer } from './fixture-server.js';

/** Passed and failed checks of one scenario (WARNING and INFO checks are not counted, as the runner does). */
export interface ScenarioCounts {
  passed: number;
  failed: number;
}

export interface ConformanceReport {
  version: string;
  direct: Record<string, ScenarioCounts>;
  gateway: Record<string, ScenarioCounts>;
  /** Scenarios whose direct run failed, or whose gateway counts differ and that are not expected to. */
  problems: string[];
  /** Expected-through-gateway scenarios that still differ (with the recorded reason). */
  waiting: { scenario: string; reason: string; gateway: ScenarioCounts | null }[];
  /** The client scenarios: the SDK client alone, and through cmcp (absent when not run). */
  client?: {
    direct: Record<string, ScenarioCounts>;
    gateway: Record<string, ScenarioCounts>;
    /** Scenarios the SDK client fails alone (not compared). */
    controlFails: string[];
  };
}

const require = createRequire(import.meta.url);

/** The installed runner's entry and version. */
function runnerEntry(): { bin: string; version: string } {
  const pkgPath = require.resolve('@modelcontextprotocol/conformance/package.json');
  const pkg = JSON.parse(readFileSync(pkgPath, 'utf8')) as { version: string; bin: Record<string, string> };
  return { bin: join(dirname(pkgPath), pkg.bin.conformance as string), version: pkg.version };
}

/** Runs the server suite against `url`; returns each scenario's counts from its checks.json. */
async function runSuite(url: string, outDir: string): Promise<Record<string, ScenarioCounts>> {
  const { bin } = runnerEntry();
  await new Promise<void>((resolve, reject) => {
    const child = spawn(process.execPath, [bin, 'server', '--url', url, '-o', outDir], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    child.stdout.on('data', (d) => {
      log += d;
    });
    child.stderr.on('data', (d) => {
      log += d;
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), 600_000);
    // Exit 1 only means some check failed: the counts below say which.
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code === 0 || code === 1) resolve();
      else reject(new Error(`conformance runner exited ${code}:\n${log.slice(-4000)}`));
    });
  });
  const out: Record<string, ScenarioCounts> = {};
  for (const dir of readdirSync(outDir)) {
    const m = /^server-(.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$/.exec(dir);
    const file = join(outDir, dir, 'checks.json');
    if (!m || !existsSync(file)) continue;
    const checks = JSON.parse(readFileSync(file, 'utf8')) as { status: string }[];
    out[m[1] as string] = {
      passed: checks.filter((c) => c.status === 'SUCCESS').length,
      failed: checks.filter((c) => c.status === 'FAILURE').length,
    };
  }
  return out;
}

/** A dev-mode gateway (software provider, no tokens) in front of `upstreamUrl`. */
async function startGatewayFor(upstreamUrl: string, dir: string) {
  const cfg = parseConfig(
    {
      dev_mode: true,
      listen: { host: '127.0.0.1', port: 0 },
      database: join(dir, 'cmcp.db'),
      attestation: { provider: 'software' },
      upstreams: [{ name: 'fixture', transport: 'http', url: upstreamUrl, prefix: '', required: true }],
      metrics: { enabled: false },
    },
    'conformance (inline)',
  );
  return startGateway(cfg, pino({ level: process.env.CMCP_CONFORMANCE_LOG ?? 'silent' }));
}

function same(a: ScenarioCounts | undefined, b: ScenarioCounts | undefined): boolean {
  return !!a && !!b && a.passed === b.passed && a.failed === b.failed;
}

/** Compares the client scenarios: problems and waiting go into the report's lists. */
function compareClient(
  direct: Record<string, ScenarioCounts>,
  gateway: Record<string, ScenarioCounts>,
  problems: string[],
  waiting: ConformanceReport['waiting'],
): string[] {
  const controlFails: string[] = [];
  for (const [name, d] of Object.entries(direct)) {
    // The auth/* scenarios are compared by ./auth-run.ts against an SDK client that does OAuth
    // (test/conformance-auth.test.ts); this control does none, so its counts say nothing there.
    if (name.startsWith('auth/')) continue;
    if (d.failed > 0 || d.passed === 0) {
      controlFails.push(name);
      continue;
    }
    const g = gateway[name];
    const reason = EXPECTED_CLIENT_THROUGH_GATEWAY[name];
    if (same(d, g)) {
      if (reason !== undefined) problems.push(`client ${name}: passes through cmcp now; update expected.ts`);
    } else if (reason !== undefined) waiting.push({ scenario: `client ${name}`, reason, gateway: g ?? null });
    else
      problems.push(
        `client ${name}: SDK client ${d.passed} passed/${d.failed} failed, cmcp ${g ? `${g.passed} passed/${g.failed} failed` : 'not run'}`,
      );
  }
  return controlFails;
}

/** Runs the client scenarios both ways and compares them into `r`. */
async function runClientSide(r: ConformanceReport, dir: string): Promise<void> {
  const { bin } = runnerEntry();
  const scenarios = await clientScenarios(bin);
  const direct = await runClientSuite(bin, scenarios, join(dir, 'client-direct'), true);
  const gateway = await runClientSuite(bin, scenarios, join(dir, 'client-gateway'), false);
  const controlFails = compareClient(direct, gateway, r.problems, r.waiting);
  r.client = { direct, gateway, controlFails };
}

/**
 * Runs the suites and compares them.
 * @param sides which suites to run (default both).
 */
export async function runConformance(
  sides: { server?: boolean; client?: boolean } = { server: true, client: true },
): Promise<ConformanceReport> {
  const dir = mkdtempSync(join(tmpdir(), 'cmcp-conformance-'));
  try {
    const r: ConformanceReport = sides.server
      ? await runServerSide(dir)
      : { version: runnerEntry().version, direct: {}, gateway: {}, problems: [], waiting: [] };
    if (sides.client) await runClientSide(r, dir);
    return r;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Runs the server suite directly and through a gateway, and compares them. */
async function runServerSide(dir: string): Promise<ConformanceReport> {
  const expected = EXPECTED_THROUGH_GATEWAY;
  const fixture = await startFixtureServer();
  try {
    const direct = await runSuite(fixture.url, join(dir, 'direct'));
    const gw = await startGatewayFor(fixture.url, dir);
    let gateway: Record<string, ScenarioCounts>;
    try {
      gateway = await runSuite(`${gw.url}/mcp`, join(dir, 'gateway'));
    } finally {
      await gw.close();
    }
    const problems: string[] = [];
    const waiting: ConformanceReport['waiting'] = [];
    for (const [name, d] of Object.entries(direct)) {
      if (d.failed > 0 || d.passed === 0) {
        problems.push(
          `${name}: fails directly (${d.passed} passed, ${d.failed} failed): the fixture is wrong`,
        );
        continue;
      }
      const g = gateway[name];
      const reason = expected[name];
      if (same(d, g)) {
        if (reason !== undefined)
          problems.push(
            `${name}: passes through the gateway now; remove it from testing/conformance/expected.ts`,
          );
      } else if (reason !== undefined) waiting.push({ scenario: name, reason, gateway: g ?? null });
      else
        problems.push(
          `${name}: direct ${d.passed} passed/${d.failed} failed, through the gateway ${g ? `${g.passed} passed/${g.failed} failed` : 'not run'}`,
        );
    }
    return { version: runnerEntry().version, direct, gateway, problems, waiting };
  } finally {
    await fixture.close();
  }
}

function print(r: ConformanceReport): void {
  console.log(`@modelcontextprotocol/conformance ${r.version}: server suite, direct vs through cmcp`);
  for (const [name, d] of Object.entries(r.direct)) {
    const g = r.gateway[name];
    const mark = same(d, g) ? 'ok     ' : r.waiting.some((w) => w.scenario === name) ? 'waiting' : 'FAIL   ';
    console.log(
      `${mark} ${name.padEnd(32)} direct ${d.passed}/${d.passed + d.failed}  gateway ${g ? `${g.passed}/${g.passed + g.failed}` : '-'}`,
    );
  }
  if (r.client) {
    console.log('client scenarios: the SDK client alone vs cmcp as the client');
    for (const [name, d] of Object.entries(r.client.direct)) {
      const g = r.client.gateway[name];
      const mark = r.client.controlFails.includes(name) ? 'control' : same(d, g) ? 'ok     ' : 'FAIL   ';
      console.log(
        `${mark} ${name.padEnd(44)} SDK ${d.passed}/${d.passed + d.failed}  cmcp ${g ? `${g.passed}/${g.passed + g.failed}` : '-'}`,
      );
    }
  }
  for (const w of r.waiting) console.log(`waiting: ${w.scenario}: ${w.reason}`);
  for (const p of r.problems) console.log(`problem: ${p}`);
  const ok = Object.entries(r.direct).filter(([n, d]) => same(d, r.gateway[n])).length;
  console.log(
    `${ok} of ${Object.keys(r.direct).length} scenarios pass through cmcp with the direct check counts`,
  );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const only = process.argv.includes('--server')
    ? 'server'
    : process.argv.includes('--client')
      ? 'client'
      : null;
  const r = await runConformance({ server: only !== 'client', client: only !== 'server' });
  if (process.argv.includes('--json')) console.log(JSON.stringify(r, null, 2));
  else print(r);
  process.exit(r.problems.length === 0 ? 0 : 1);
}
