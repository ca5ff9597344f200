/**
 * A signed policy reload from the operator console, in headless Chromium against a real gateway
 * with a pinned policy key: a bundle signed by another key is refused (the page says why, the
 * running bundle stays, the refusal is recorded), a properly signed newer bundle is installed
 * and shown; the form carries the login's CSRF token (a POST without it is 403). Screenshots go
 * to .tmp/operator-console/; the page logs no console errors.
 */
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Gateway } from '../src/gateway/lifecycle/start.js';
import { hashBundleDir, isBundleFile } from '../src/policy/bundle.js';
import { generatePolicyKey, signBundleHash } from '../src/policy/signature.js';
import { type CountingServer, startCountingServer } from './fixtures/counting-server.js';
import { launchChromium } from './harness/chromium.js';
import { cleanup, REPO_ROOT, startInProcess, type TestConfig, writeConfig } from './harness/gateway.js';

const OP = 'console-reload-operator';
const SHOTS = join(REPO_ROOT, '.tmp', 'operator-console');
const key = generatePolicyKey();
const otherKey = generatePolicyKey();
const work = mkdtempSync(join(tmpdir(), 'cmcp-console-reload-'));

/** The example bundle at `version`. */
function bundle(version: number): string {
  const dir = join(work, `v${version}`);
  cpSync(join(REPO_ROOT, 'examples', 'policy'), dir, { recursive: true });
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ version, description: `v${version}` }));
  return dir;
}

/** The body `cmcp policy reload` posts, signed with `pem`. */
function reloadRequest(dir: string, pem: string): string {
  const files: Record<string, string> = {};
  for (const n of readdirSync(dir).filter(isBundleFile))
    files[n] = readFileSync(join(dir, n)).toString('base64url');
  return JSON.stringify({ files, signature: signBundleHash(hashBundleDir(dir), pem) });
}

let up: CountingServer;
let cfg: TestConfig;
let gw: Gateway;
let browser: Browser;

beforeAll(async () => {
  mkdirSync(SHOTS, { recursive: true });
  up = await startCountingServer();
  cfg = await writeConfig({
    upstreams: [{ name: 'c', transport: 'http', url: up.url }],
    agents: [{ agent_id: 'alice', token: 'alice-token' }],
    operators: [{ operator_id: 'root', token: OP }],
    extra: { policy: { bundle: bundle(1), signing_key: key.publicRaw } },
  });
  gw = await startInProcess(cfg);
  browser = await launchChromium(work);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await gw?.close();
  await up?.close();
  if (cfg) cleanup(cfg.dir);
  rmSync(work, { recursive: true, force: true });
});

async function submit(tab: Page, request: string): Promise<void> {
  await tab.$eval('#reload textarea', (e, value) => Object.assign(e, { value }), request);
  await Promise.all([tab.waitForNavigation(), tab.click('#reload button')]);
}

describe('policy reload from the console', () => {
  it('refuses a POST without the CSRF token', async () => {
    const login = await fetch(`${gw.url}/operator/ui/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ token: OP }).toString(),
    });
    const cookie = (login.headers.get('set-cookie') ?? '').split(';')[0] as string;
    const r = await fetch(`${gw.url}/operator/ui/policy/reload`, {
      method: 'POST',
      redirect: 'manual',
      headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ request: reloadRequest(bundle(7), key.privatePem) }).toString(),
    });
    expect(r.status).toBe(403);
    expect(gw.facts.policyBundleHash).toBe(hashBundleDir(join(work, 'v1')));
  });

  it('refuses a bundle signed by another key, installs a signed newer one', async () => {
    const tab = await browser.newPage();
    const errors: string[] = [];
    tab.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    tab.on('pageerror', (e) => errors.push(String(e)));
    await tab.goto(`${gw.url}/operator/ui/login`);
    await tab.type('input[name=token]', OP);
    await Promise.all([tab.waitForNavigation(), tab.click('#login button')]);
    await Promise.all([tab.waitForNavigation(), tab.click('nav a[href="/operator/ui/policy"]')]);
    const v1 = hashBundleDir(join(work, 'v1'));
    expect(await tab.$eval('[data-policy-hash]', (e) => e.textContent)).toBe(v1);

    const v2 = bundle(2);
    await submit(tab, reloadRequest(v2, otherKey.privatePem));
    await tab.screenshot({ path: join(SHOTS, 'policy-refused.png'), fullPage: true });
    expect(await tab.$eval('[data-reload-refused]', (e) => e.textContent)).toMatch(/^POLICY_RELOAD_REFUSED/);
    expect(await tab.$eval('[data-policy-hash]', (e) => e.textContent)).toBe(v1);
    expect(gw.chain.entries('gateway').some((e) => e.entry_type === 'policy_reload_refused')).toBe(true);

    await submit(tab, reloadRequest(v2, key.privatePem));
    await tab.screenshot({ path: join(SHOTS, 'policy-installed.png'), fullPage: true });
    expect(await tab.$('[data-reload-installed]')).not.toBeNull();
    expect(await tab.$eval('[data-policy-hash]', (e) => e.textContent)).toBe(hashBundleDir(v2));
    expect(await tab.$eval('[data-policy-version]', (e) => e.textContent)).toBe('2');
    const reload = gw.chain
      .entries('gateway')
      .filter((e) => e.entry_type === 'policy_reload')
      .at(-1);
    expect(reload?.detail).toMatchObject({ operator_id: 'root' });
    expect(errors.filter((m) => !m.includes('400'))).toEqual([]);
    await tab.close();
  }, 60_000);
});
