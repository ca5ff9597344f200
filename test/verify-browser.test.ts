/**
 * @cmcp/verify in a browser: the package's browser bundle (`npm run build:browser`, esbuild,
 * `platform: 'browser'`, ESM) is served with its inputs on 127.0.0.1 and loaded in headless
 * Chromium (Debian's /usr/bin/chromium through puppeteer-core, fresh profile, no network
 * features). The page verifies a real claim and bundle made by a TPM-bound gateway on swtpm and
 * a real SEV-SNP report, and its reports must equal what Node's verifier returns for the same
 * inputs.
 *
 * While the verifier still imports Node built-ins (node:crypto, node:fs) the bundle cannot be
 * built: the in-page verification is then skipped with a message naming the modules that block
 * it, and a test checks that nothing else breaks the build. The serving and browser harness is
 * exercised regardless: the report renderer and verdict rule (no Node built-ins) are bundled
 * alone and run in the page on the Node report of the real claim.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyClaim } from '@cmcp/verify/claim';
import { verifySnpEvidence } from '@cmcp/verify/evidence';
import { renderText } from '@cmcp/verify/render';
import { computeVerdict, type VerificationReport } from '@cmcp/verify/result';
import { parseReferenceValues, parseTrustStore } from '@cmcp/verify/trust';
import puppeteer, { type Browser } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBrowser, nodeBuiltinBlockers } from '../packages/verify/scripts/build-browser.mjs';
import { REPO_ROOT } from './harness/gateway.js';
import { tpmBoundClaim } from './harness/gateway-claim.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const CHROMIUM = '/usr/bin/chromium';
const SRC = join(REPO_ROOT, 'packages', 'verify', 'src');
const work = mkdtempSync(join(tmpdir(), 'cmcp-verify-browser-'));

// The package's browser bundle, built once at collection time so that a skip can say why.
const full = await buildBrowser(join(work, 'cmcp-verify.js'));
const { blockers, others } = nodeBuiltinBlockers(full.errors);
const blockedBy = Object.entries(blockers)
  .map(([name, files]) => `${name} <- ${files.join(', ')}`)
  .join('; ');
if (!full.ok) {
  console.warn(
    `\n*** SKIPPING in-browser verification: the @cmcp/verify browser bundle cannot be built while the verifier imports Node built-ins: ${blockedBy} ***\n`,
  );
}
const withVectors = hasVectors();

// The renderer and verdict rule alone: no Node built-ins, so they bundle today.
const smokeEntry = join(work, 'smoke-entry.ts');
writeFileSync(
  smokeEntry,
  `export { renderText } from ${JSON.stringify(join(SRC, 'render.ts'))};\n` +
    `export { computeVerdict } from ${JSON.stringify(join(SRC, 'result.ts'))};\n`,
);
const smoke = await buildBrowser(join(work, 'smoke.js'), smokeEntry);

const SNP_AT = '2026-11-30T00:00:00Z';
const SNP_REPORT_DATA = `0102030405${'00'.repeat(59)}`;
const SNP_RV = 'version: 1\nsev_snp:\n  allow_debug: true\n';

const SMOKE_PAGE = `<!doctype html><script type="module">
import { renderText, computeVerdict } from '/smoke.js';
try {
  const report = await (await fetch('/node-claim-report.json')).json();
  window.__cmcp = { text: renderText(report), verdict: computeVerdict(report.checks) };
} catch (e) { window.__cmcp = { error: String(e?.stack ?? e) }; }
</script>`;

const VERIFY_PAGE = `<!doctype html><script type="module">
import * as v from '/cmcp-verify.js';
const text = async (p) => { const r = await fetch(p); if (!r.ok) throw new Error(p + ': ' + r.status); return r.text(); };
const bytes = async (p) => new Uint8Array(await (await fetch(p)).arrayBuffer());
const hex = (h) => Uint8Array.from(h.match(/../g), (b) => parseInt(b, 16));
try {
  const inputs = JSON.parse(await text('/inputs.json'));
  const trustStore = v.parseTrustStore(await text('/trust-store.yaml'));
  const claim = await v.verifyClaim(JSON.parse(await text('/claim.json')), {
    bundle: JSON.parse(await text('/bundle.json')), trustStore, now: new Date(inputs.claimAt) });
  const out = { claim };
  if (inputs.snp) {
    out.snp = await v.verifySnpEvidence({
      report: await bytes('/snp/attestation.bin'),
      certs: [await bytes('/snp/vcek.testcer'), await bytes('/snp/ask_ark_milan.pem')],
      trustStore, referenceValues: v.parseReferenceValues(inputs.snpReferenceValues),
      now: new Date(inputs.snpAt), expectedReportData: hex(inputs.snpReportData) });
  }
  window.__cmcp = out;
} catch (e) { window.__cmcp = { error: String(e?.stack ?? e) }; }
</script>`;

let gateway: Awaited<ReturnType<typeof tpmBoundClaim>> | undefined;
let server: Server | undefined;
let base = '';
let browser: Browser | undefined;
let claimAt: Date;
const routes = new Map<string, { type: string; body: string | Buffer }>();

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(`${CHROMIUM} is missing: run scripts/setup.sh (Debian package chromium)`);
  gateway = await tpmBoundClaim();
  claimAt = new Date();
  const js = 'text/javascript';
  const serve = (path: string, type: string, body: string | Buffer) => routes.set(path, { type, body });
  serve('/smoke.html', 'text/html', SMOKE_PAGE);
  serve('/verify.html', 'text/html', VERIFY_PAGE);
  if (smoke.ok) serve('/smoke.js', js, readFileSync(smoke.outfile));
  if (full.ok) serve('/cmcp-verify.js', js, readFileSync(full.outfile));
  serve('/claim.json', 'application/json', JSON.stringify(gateway.claim));
  serve('/bundle.json', 'application/json', JSON.stringify(gateway.bundle));
  serve(
    '/trust-store.yaml',
    'text/yaml',
    readFileSync(join(REPO_ROOT, 'packages/verify/attestation/trust-store.yaml')),
  );
  const inputs = {
    claimAt: claimAt.toISOString(),
    snp: withVectors,
    snpAt: SNP_AT,
    snpReportData: SNP_REPORT_DATA,
    snpReferenceValues: SNP_RV,
  };
  serve('/inputs.json', 'application/json', JSON.stringify(inputs));
  if (withVectors) {
    for (const f of ['attestation.bin', 'vcek.testcer', 'ask_ark_milan.pem']) {
      serve(
        `/snp/${f}`,
        'application/octet-stream',
        readFileSync(vectorPath('snp', 'go-sev-guest-milan', f)),
      );
    }
  }
  server = createServer((req, res) => {
    const r = routes.get(new URL(req.url ?? '/', 'http://127.0.0.1').pathname);
    res.writeHead(r ? 200 : 404, { 'content-type': r?.type ?? 'text/plain', 'cache-control': 'no-store' });
    res.end(r?.body ?? 'not found');
  });
  await new Promise<void>((ok) => server?.listen(0, '127.0.0.1', ok));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    userDataDir: mkdtempSync(join(work, 'profile-')),
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await new Promise((ok) => (server ? server.close(ok) : ok(undefined)));
  await gateway?.stop();
  rmSync(work, { recursive: true, force: true });
});

/** Loads `page` and returns what its script left in `window.__cmcp` (page errors included). */
async function inPage(page: string): Promise<Record<string, unknown>> {
  const tab = await (browser as Browser).newPage();
  const errors: string[] = [];
  tab.on('pageerror', (e) => errors.push(String(e)));
  try {
    await tab.goto(`${base}/${page}`);
    await tab.waitForFunction('window.__cmcp !== undefined', { timeout: 60_000 });
    const out = (await tab.evaluate('window.__cmcp')) as Record<string, unknown>;
    expect(errors).toEqual([]);
    return out;
  } finally {
    await tab.close();
  }
}

/** A report as the page sees it: plain JSON. */
const asJson = (r: VerificationReport) => JSON.parse(JSON.stringify(r)) as unknown;

describe('the @cmcp/verify browser bundle', () => {
  it('builds, or fails only because verifier modules import Node built-ins', () => {
    expect(others).toEqual([]);
    if (!full.ok) expect(Object.keys(blockers).length).toBeGreaterThan(0);
  });

  it('harness: the renderer and verdict rule, bundled for the browser, give Node’s answers in Chromium', async () => {
    expect(smoke.errors).toEqual([]);
    const report = await verifyClaim(gateway?.claim, { bundle: gateway?.bundle, now: claimAt });
    expect(report.verdict).toBe('hardware-unanchored');
    routes.set('/node-claim-report.json', { type: 'application/json', body: JSON.stringify(report) });
    const out = await inPage('smoke.html');
    expect(out.error).toBeUndefined();
    expect(out.verdict).toBe(computeVerdict(report.checks));
    expect(out.text).toBe(renderText(report));
  });
});

describe.skipIf(!full.ok)('verification inside headless Chromium', () => {
  it('a real claim and bundle, and a real SEV-SNP report: the page’s reports equal Node’s', async () => {
    const trustStore = parseTrustStore(
      readFileSync(join(REPO_ROOT, 'packages/verify/attestation/trust-store.yaml'), 'utf8'),
    );
    const out = await inPage('verify.html');
    expect(out.error).toBeUndefined();
    const claim = await verifyClaim(gateway?.claim, { bundle: gateway?.bundle, trustStore, now: claimAt });
    expect(claim.verdict).toBe('hardware-unanchored');
    expect(out.claim).toEqual(asJson(claim));
    if (!withVectors) return;
    const d = (f: string) => readFileSync(vectorPath('snp', 'go-sev-guest-milan', f));
    const snp = await verifySnpEvidence({
      report: d('attestation.bin'),
      certs: [d('vcek.testcer'), d('ask_ark_milan.pem')],
      trustStore,
      referenceValues: parseReferenceValues(SNP_RV),
      now: new Date(SNP_AT),
      expectedReportData: Buffer.from(SNP_REPORT_DATA, 'hex'),
    });
    expect(snp.verdict).toBe('hardware-attested');
    expect(out.snp).toEqual(asJson(snp));
  });
});
