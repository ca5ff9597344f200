/**
 * The operator console (/operator/ui) against a real gateway, a real upstream (counting server,
 * Streamable HTTP) and a real catalog that drifts (mutating server, stdio), in headless
 * Chromium (Debian's /usr/bin/chromium through puppeteer-core, fresh profile, no network
 * features). The browser logs in, opens a closed session's chain and its claim (the verdict
 * and checks must be what @cmcp/verify says in Node), blocks an agent (which /mcp then
 * refuses) and unblocks it. Screenshots go to .tmp/operator-console/; assertions are DOM queries.
 * Over plain HTTP: a wrong token is refused, no cookie redirects to the login, a POST without
 * the CSRF token is 403, the cookie is HttpOnly and SameSite=Strict, every answer has a CSP
 * without script, and the bearer-token API does not take the console cookie.
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { defaultAttestationDir, loadTrustStore, verifyClaim } from '@cmcp/verify';
import pino from 'pino';
import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { snapshotCatalog } from '../src/catalog/catalog.js';
import { parseConfig } from '../src/config/index.js';
import { ConsoleLogins, csrfMatches } from '../src/console/login.js';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { UpstreamPool } from '../src/upstream/pool.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { CHROMIUM, launchChromium } from './harness/chromium.js';
import {
  cleanup,
  REPO_ROOT,
  rest,
  rpc,
  startInProcess,
  type TestConfig,
  writeConfig,
} from './harness/gateway.js';
import { type ProtectedUpstream, startProtectedUpstream } from './harness/oauth-upstream.js';

const OP = 'console-operator-token';
const XSS = '<script>alert(1)</script>';
const SHOTS = join(REPO_ROOT, '.tmp', 'operator-console');
const MUTATING = join(REPO_ROOT, 'test', 'fixtures', 'mutating-server.mjs');
const mutUpstream = { name: 'mut', transport: 'stdio', command: process.execPath, args: [MUTATING] };

let up: CountingServer;
let guarded: ProtectedUpstream;
let cfg: TestConfig;
let gw: Gateway;
let browser: Browser;
let closedSession = '';
const startedAt = new Date(Date.now() - 1000).toISOString();
const work = mkdtempSync(join(tmpdir(), 'cmcp-console-'));

const call = (token: string, name: string, args: Record<string, unknown>, cmcp?: Record<string, unknown>) =>
  rpc(gw.url, token, {
    jsonrpc: '2.0',
    id: 1,
    method: 'tools/call',
    params: { name, arguments: args, ...(cmcp ? { _cmcp: cmcp } : {}) },
  });

/** A catalog pinning the real tools of both upstreams as they are now. */
async function writeCatalog(countingUrl: string): Promise<string> {
  const pool = new UpstreamPool(
    parseConfig({
      database: ':memory:',
      dev_mode: true,
      attestation: { provider: 'software' },
      upstreams: [mutUpstream, { name: 'c', transport: 'http', url: countingUrl }],
    }).upstreams,
    pino({ level: 'silent' }),
  );
  await pool.start();
  const doc = snapshotCatalog(pool.toolLists(), 'console test catalog');
  await pool.close();
  const file = join(work, 'catalog.json');
  writeFileSync(file, JSON.stringify(doc));
  return file;
}

/** The example policy bundle with a permit-all rule on top. */
function writePolicy(): string {
  const dir = join(work, 'policy');
  cpSync(join(REPO_ROOT, 'examples', 'policy'), dir, { recursive: true });
  writeFileSync(
    join(dir, '05-permit-all.cedar'),
    '@id("permit-all")\npermit (principal, action, resource);\n',
  );
  writeFileSync(
    join(dir, '06-no-big.cedar'),
    '@id("console-no-big")\nforbid (principal, action == Action::"call_tool", resource == Tool::"c.big");\n',
  );
  return dir;
}

/** A GET/POST to the console without a browser (no redirects followed). */
async function plain(path: string, init: RequestInit = {}) {
  return fetch(`${gw.url}${path}`, { redirect: 'manual', ...init });
}

async function loginCookie(): Promise<string> {
  const r = await plain('/operator/ui/login', {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ token: OP }).toString(),
  });
  expect(r.status).toBe(303);
  const set = r.headers.get('set-cookie') ?? '';
  return set.split(';')[0] as string;
}

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} is missing: run scripts/setup.sh --for test, as npm test does (Debian package chromium)`,
    );
  mkdirSync(SHOTS, { recursive: true });
  up = await startCountingServer();
  guarded = await startProtectedUpstream();
  cfg = await writeConfig({
    upstreams: [
      { name: 'c', transport: 'http', url: up.url },
      mutUpstream,
      // Nothing listens on port 1: unavailable, retried. The guarded one waits for a user.
      { name: 'gone', transport: 'http', url: 'http://127.0.0.1:1/mcp' },
      {
        name: 'guarded',
        transport: 'http',
        url: guarded.url,
        oauth: { grant: 'authorization_code', redirect_uri: 'https://gateway.example/oauth/callback' },
      },
    ],
    agents: [
      { agent_id: 'alice', token: 'alice-token' },
      { agent_id: 'bob', token: 'bob-token' },
      { agent_id: XSS, token: 'xss-token' },
    ],
    operators: [{ operator_id: 'root', token: OP }],
    extra: {
      policy: { bundle: writePolicy() },
      catalog: { file: await writeCatalog(up.url), relist_interval_s: 0 },
    },
  });
  gw = await startInProcess(cfg);

  // A closed session with calls (one with an execution_id), a default session of the XSS agent,
  // a drifted tool, and refusals in the gateway chain (a wrong token).
  const s = await rest(gw.url, 'alice-token', 'POST', '/sessions', {});
  closedSession = s.body.session_id;
  expect((await call('alice-token', 'c.record', { a: 1 }, { session_id: closedSession })).status).toBe(200);
  const ex = await call(
    'alice-token',
    'c.record',
    { a: 2 },
    { session_id: closedSession, execution_id: 'job-1' },
  );
  expect(ex.body.result).toBeDefined();
  const denied = await call('alice-token', 'c.big', { size: 1 }, { session_id: closedSession });
  expect(denied.body.error.data.error_code).toBe('POLICY_DENY');
  expect((await rest(gw.url, 'alice-token', 'POST', `/sessions/${closedSession}/close`)).status).toBe(200);
  expect((await call('xss-token', 'c.record', { a: 3 })).body.result).toBeDefined();
  await call('alice-token', 'mut.mutate', {});
  for (let i = 0; i < 3; i++) expect((await call('wrong-token', 'c.record', {})).status).toBe(401);

  browser = await launchChromium(work);
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await up?.close();
  await guarded?.close();
  if (cfg) cleanup(cfg.dir);
  rmSync(work, { recursive: true, force: true });
});

describe('console access over HTTP', () => {
  it('no cookie redirects to the login; a wrong token is refused and sets no cookie', async () => {
    const r = await plain('/operator/ui/sessions');
    expect(r.status).toBe(303);
    expect(r.headers.get('location')).toBe('/operator/ui/login');
    const bad = await plain('/operator/ui/login', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: 'token=alice-token',
    });
    expect(bad.status).toBe(401);
    expect(bad.headers.get('set-cookie')).toBeNull();
    expect(await bad.text()).toContain('login refused');
  });

  it('the login cookie is HttpOnly, SameSite=Strict, scoped to /operator/ui; pages carry a script-free CSP', async () => {
    const r = await plain('/operator/ui/login', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ token: OP }).toString(),
    });
    const set = r.headers.get('set-cookie') ?? '';
    expect(set).toMatch(/HttpOnly/i);
    expect(set).toMatch(/SameSite=Strict/i);
    expect(set).toMatch(/Path=\/operator\/ui/);
    expect(set).not.toMatch(/Secure/i); // loopback listener
    const page = await plain('/operator/ui/', { headers: { cookie: set.split(';')[0] as string } });
    expect(page.status).toBe(200);
    const csp = page.headers.get('content-security-policy') ?? '';
    expect(csp).toContain("default-src 'none'");
    expect(csp).not.toMatch(/script-src/);
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    // The agent id holding markup arrives escaped in the HTML itself.
    const sessions = await (
      await plain('/operator/ui/sessions', { headers: { cookie: set.split(';')[0] as string } })
    ).text();
    expect(sessions).not.toContain(XSS);
    expect(sessions).toContain('&lt;script&gt;alert(1)&lt;/script&gt;');
    expect(sessions).not.toMatch(/<script/i);
  });

  it('a POST without the CSRF token is 403 and blocks nothing; the bearer API ignores the cookie', async () => {
    const cookie = await loginCookie();
    const r = await plain('/operator/ui/agents/bob/block', {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: 'reason=x',
    });
    expect(r.status).toBe(403);
    const wrong = await plain('/operator/ui/agents/bob/block', {
      method: 'POST',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: '_csrf=AAAA',
    });
    expect(wrong.status).toBe(403);
    expect(gw.operator.isBlocked('bob')).toBe(false);
    const noLogin = await plain('/operator/ui/agents/bob/block', { method: 'POST' });
    expect(noLogin.status).toBe(403);
    const api = await fetch(`${gw.url}/operator/status`, { headers: { cookie } });
    expect(api.status).toBe(401);
  });
});

describe('console search over HTTP', () => {
  it('refuses an unknown disposition or a time that does not parse; echoes input escaped', async () => {
    const cookie = await loginCookie();
    const bad = await plain('/operator/ui/search?disposition=gone', { headers: { cookie } });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toContain('disposition: one of');
    expect((await plain('/operator/ui/search?from=yesterday', { headers: { cookie } })).status).toBe(400);
    const xss = await plain(`/operator/ui/search?agent=${encodeURIComponent(XSS)}`, { headers: { cookie } });
    const html = await xss.text();
    expect(xss.status).toBe(200);
    expect(html).not.toMatch(/<script/i);
    expect(html).toMatch(/data-result-count="[1-9]\d*"/); // the agent's own entries, found by its id
  });
});

describe('console logins', () => {
  it('expire, are bounded in number, and match only their own CSRF token', async () => {
    const short = new ConsoleLogins(20);
    const { id, login } = short.open('root');
    expect(short.get(id)?.operatorId).toBe('root');
    expect(short.get(`${id.slice(0, -1)}${id.endsWith('A') ? 'B' : 'A'}`)).toBeNull();
    await new Promise((r) => setTimeout(r, 40));
    expect(short.get(id)).toBeNull();
    const few = new ConsoleLogins(60_000, 2);
    const first = few.open('a');
    few.open('b');
    few.open('c');
    expect(few.get(first.id)).toBeNull();
    expect(csrfMatches(login, login.csrf)).toBe(true);
    expect(csrfMatches(login, few.open('d').login.csrf)).toBe(false);
    expect(csrfMatches(login, undefined)).toBe(false);
  });
});

/** Waits for the navigation a click causes. */
async function clickAndWait(tab: Page, selector: string): Promise<void> {
  await Promise.all([tab.waitForNavigation(), tab.click(selector)]);
}

describe('the console in headless Chromium', () => {
  it('logs in, opens a chain and its claim, blocks and unblocks an agent', async () => {
    const tab = await browser.newPage();
    const dialogs: string[] = [];
    tab.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    // Console errors (a CSP refusal, a failed stylesheet) and uncaught page errors.
    const consoleErrors: string[] = [];
    tab.on('console', (m) => {
      if (m.type() === 'error') consoleErrors.push(m.text());
    });
    tab.on('pageerror', (e) => consoleErrors.push(String(e)));
    await tab.goto(`${gw.url}/operator/ui/`);
    expect(new URL(tab.url()).pathname).toBe('/operator/ui/login');
    await tab.type('input[name=token]', 'not-a-token');
    await clickAndWait(tab, '#login button');
    expect(await tab.$('[data-login-refused]')).not.toBeNull();
    await tab.type('input[name=token]', OP);
    await clickAndWait(tab, '#login button');
    await tab.screenshot({ path: join(SHOTS, 'overview.png'), fullPage: true });
    expect(new URL(tab.url()).pathname).toBe('/operator/ui/');
    const text = (sel: string) => tab.$eval(sel, (e) => e.textContent?.trim() ?? '');
    expect(await text('[data-operator]')).toBe('root');
    expect(await text('[data-policy-hash]')).toBe(gw.facts.policyBundleHash);
    expect(await text('[data-catalog-hash]')).toBe(gw.facts.catalogHash);
    const drifted = await tab.$$eval('[data-drifted]', (es) => es.map((e) => e.textContent ?? ''));
    expect(drifted.some((d) => d.includes('target'))).toBe(true);

    // Sessions: the XSS agent's name is text, not markup.
    await clickAndWait(tab, 'nav a[href="/operator/ui/sessions"]');
    await tab.screenshot({ path: join(SHOTS, 'sessions.png'), fullPage: true });
    const agents = await tab.$$eval('[data-session] td:nth-child(2)', (es) => es.map((e) => e.textContent));
    expect(agents).toContain(XSS);
    expect(await tab.$$eval('main script', (es) => es.length)).toBe(0);

    // The closed session's chain, then its claim.
    await clickAndWait(tab, `[data-session="${closedSession}"] a`);
    await tab.screenshot({ path: join(SHOTS, 'chain.png'), fullPage: true });
    const types = await tab.$$eval('[data-entry]', (es) => es.map((e) => e.getAttribute('data-entry')));
    expect(types).toEqual(gw.chain.entries(closedSession).map((e) => e.entry_type));
    expect(types).toContain('tool_call');
    expect(types.at(-1)).toBe('session_close');
    expect(await tab.$$eval('[data-execution]', (es) => es.map((e) => e.textContent))).toContain('job-1');
    // Each call shows its decision and the rule that decided it; the denied one names the forbid.
    const calls = await tab.$$eval('[data-entry="tool_call"]', (es) =>
      es.map((e) => ({
        tool: e.querySelector('[data-tool]')?.textContent,
        decision: e.querySelector('[data-decision]')?.textContent,
        rule: e.querySelector('[data-rule]')?.textContent,
      })),
    );
    expect(calls).toContainEqual({ tool: 'c.big', decision: 'deny', rule: 'console-no-big' });
    expect(calls).toContainEqual({ tool: 'c.record', decision: 'allow', rule: 'permit-all' });
    // The bundle downloads as a file: the session's chain, against which the claim verifies.
    const downloads = join(work, 'downloads');
    const cdp = await tab.createCDPSession();
    await cdp.send('Browser.setDownloadBehavior', { behavior: 'allow', downloadPath: downloads });
    await tab.click('[data-bundle-link]');
    const saved = join(downloads, `cmcp-bundle-${closedSession}.json`);
    for (let i = 0; i < 100 && !existsSync(saved); i++) await new Promise((r) => setTimeout(r, 100));
    const bundle = JSON.parse(readFileSync(saved, 'utf8'));
    expect(bundle.entries.map((e: { entry_hash: string }) => e.entry_hash)).toEqual(
      gw.chain.entries(closedSession).map((e) => e.entry_hash),
    );
    await clickAndWait(tab, '[data-claim-link]');
    await tab.screenshot({ path: join(SHOTS, 'claim.png'), fullPage: true });
    const dir = defaultAttestationDir();
    const expected = await verifyClaim(await gw.sessions.claim('alice', closedSession), {
      bundle: gw.chain.bundle(closedSession, closedSession),
      ...(dir ? { trustStore: loadTrustStore(join(dir, 'trust-store.yaml')) } : {}),
    });
    expect(await tab.$eval('[data-verdict]', (e) => e.getAttribute('data-verdict'))).toBe(expected.verdict);
    // A software-provider claim is signed-only: the console says whose word it is and that the
    // default policy does not accept it, as `cmcp verify` does.
    expect(expected).toMatchObject({ verdict: 'signed-only', signer: 'self-asserted', accepted: false });
    const fromDownload = await verifyClaim(await gw.sessions.claim('alice', closedSession), { bundle });
    expect(fromDownload.checks.filter((c) => c.status === 'fail')).toEqual([]);
    expect(await tab.$eval('[data-signer]', (e) => e.getAttribute('data-signer'))).toBe('self-asserted');
    expect(await tab.$eval('[data-self-asserted]', (e) => e.textContent)).toMatch(/^SELF-ASSERTED/);
    expect(await tab.$eval('[data-accepted]', (e) => e.getAttribute('data-accepted'))).toBe('no');
    expect(await tab.$eval('[data-accepted]', (e) => e.parentElement?.textContent)).toContain(
      'requires hardware-attested',
    );
    const checks = await tab.$$eval('[data-check]', (es) =>
      es.map((e) => ({ id: e.getAttribute('data-check'), status: e.getAttribute('data-status') })),
    );
    expect(checks).toEqual(expected.checks.map((c) => ({ id: c.id, status: c.status })));
    expect(checks.find((c) => c.id === 'claim.signature')?.status).toBe('pass');

    // Executions and refusals.
    await clickAndWait(tab, 'nav a[href="/operator/ui/executions"]');
    await tab.screenshot({ path: join(SHOTS, 'executions.png'), fullPage: true });
    expect(
      await tab.$$eval('[data-execution-state]', (es) =>
        es.map((e) => e.getAttribute('data-execution-state')),
      ),
    ).toEqual(['completed']);

    // Block bob through the form: /mcp refuses him; unblock lets him back.
    // Search: alice's refused entries are the policy denial, with its rule.
    await clickAndWait(tab, 'nav a[href="/operator/ui/search"]');
    await tab.type('#search input[name=agent]', 'alice');
    await tab.select('#search select[name=disposition]', 'refused');
    await clickAndWait(tab, '#search button');
    await tab.screenshot({ path: join(SHOTS, 'search.png'), fullPage: true });
    const found = await tab.$$eval('[data-result]', (es) =>
      es.map((e) => ({
        agent: e.querySelector('[data-agent]')?.textContent,
        tool: e.querySelector('[data-tool]')?.textContent,
        rule: e.querySelector('[data-rule]')?.textContent,
        disposition: e.querySelector('[data-disposition]')?.textContent,
      })),
    );
    expect(found).toEqual([
      { agent: 'alice', tool: 'c.big', rule: 'console-no-big', disposition: 'refused' },
    ]);
    expect(await tab.$eval('#search input[name=agent]', (e) => e.getAttribute('value'))).toBe('alice');
    // By tool and time: every c.record call is in the window since the test began, none after now.
    const recorded = gw.chain
      .entries(closedSession)
      .filter((e) => e.tool_name === 'c.record' && e.entry_type === 'tool_call').length;
    const window = (from: string) =>
      `${gw.url}/operator/ui/search?tool=c.record&from=${encodeURIComponent(from)}`;
    await tab.goto(window(startedAt.slice(0, 19)));
    expect(Number(await tab.$eval('[data-result-count]', (e) => e.getAttribute('data-result-count')))).toBe(
      recorded + 1, // and the XSS agent's call in its default session
    );
    await tab.goto(window(new Date(Date.now() + 3_600_000).toISOString().slice(0, 19)));
    expect(await tab.$eval('[data-result-count]', (e) => e.getAttribute('data-result-count'))).toBe('0');

    // Upstreams: available, down, and waiting for a user with the URL to send them to.
    await clickAndWait(tab, 'nav a[href="/operator/ui/upstreams"]');
    await tab.screenshot({ path: join(SHOTS, 'upstreams.png'), fullPage: true });
    const states = await tab.$$eval('[data-upstream]', (es) =>
      es.map((e) => [e.getAttribute('data-upstream'), e.getAttribute('data-state')]),
    );
    expect(Object.fromEntries(states)).toEqual({
      c: 'available',
      mut: 'available',
      gone: 'unavailable',
      guarded: 'authorization required',
    });
    const authUrl = await tab.$eval(
      '[data-upstream="guarded"] [data-authorization-url]',
      (e) => e.textContent,
    );
    expect(authUrl).toBe(gw.upstreams.availability.get('guarded')?.needsUser?.authorizationUrl);
    expect(authUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\//);

    await clickAndWait(tab, 'nav a[href="/operator/ui/agents"]');
    await tab.type('[data-agent-row="bob"] input[name=reason]', 'console test');
    await clickAndWait(tab, '[data-agent-row="bob"] button');
    await tab.screenshot({ path: join(SHOTS, 'agents-blocked.png'), fullPage: true });
    expect(await tab.$eval('[data-agent-row="bob"]', (e) => e.getAttribute('data-blocked'))).toBe('true');
    const refused = await call('bob-token', 'c.record', { a: 4 });
    expect(refused.body.error.data.error_code).toBe('AGENT_BLOCKED');
    const blockedEntry = gw.chain
      .entries('gateway')
      .filter((e) => e.entry_type === 'agent_blocked')
      .at(-1);
    expect(blockedEntry?.agent_id).toBe('bob');
    expect(blockedEntry?.detail).toMatchObject({ operator_id: 'root', reason: 'console test' });

    await clickAndWait(tab, 'nav a[href="/operator/ui/refusals"]');
    await tab.screenshot({ path: join(SHOTS, 'refusals.png'), fullPage: true });
    const codes = await tab.$$eval('[data-code]', (es) => es.map((e) => e.getAttribute('data-code')));
    expect(codes).toContain('UNAUTHENTICATED');
    expect(codes).toContain('AGENT_BLOCKED');
    expect(codes).toContain('POLICY_DENY');
    const denials = await tab.$$eval('[data-denial]', (es) =>
      es.map((e) => ({
        agent: e.querySelector('[data-agent]')?.textContent,
        tool: e.querySelector('[data-tool]')?.textContent,
        rule: e.querySelector('[data-rule]')?.textContent,
        session: e.querySelector('a')?.textContent,
      })),
    );
    expect(denials).toEqual([
      { agent: 'alice', tool: 'c.big', rule: 'console-no-big', session: closedSession },
    ]);

    await clickAndWait(tab, 'nav a[href="/operator/ui/agents"]');
    await clickAndWait(tab, '[data-agent-row="bob"] button');
    expect(await tab.$eval('[data-agent-row="bob"]', (e) => e.getAttribute('data-blocked'))).toBe('false');
    expect((await call('bob-token', 'c.record', { a: 5 })).body.result).toBeDefined();
    expect(dialogs).toEqual([]); // no injected script ever ran
    // The one expected error is the refused login's 401 at the start.
    expect(consoleErrors.filter((m) => !m.includes('401'))).toEqual([]);
    await tab.close();
  }, 120_000);
});
