/**
 * @cmcp/verify in a browser: the package's browser bundle (`npm run build:browser`, esbuild,
 * `platform: 'browser'`, ESM) is served with its inputs on 127.0.0.1 and loaded in headless
 * Chromium (Debian's /usr/bin/chromium through puppeteer-core, fresh profile, no network
 * features). The page verifies a real claim and bundle made by a TPM-bound gateway on swtpm and
 * a real SEV-SNP report, and a claim whose AK certificate chains to a pinned AK root (an
 * enrolled AK), and its reports must equal what Node's verifier returns for the same inputs.
 *
 * The bundle keeps the verifier synchronous: `node:crypto` is aliased to the package's browser
 * stand-in (src/crypto/browser/: @noble/hashes, @noble/curves, node-forge, @peculiar/x509) and
 * `Buffer` is the `buffer` package. The page also verifies a tampered claim (one signature
 * byte) and a tampered SNP report (one signed byte), which must fail there as they fail in
 * Node, with the same reports. The serving and browser harness is checked on its own too: the
 * report renderer and verdict rule are bundled alone and run in the page on the Node report
 * of the real claim.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  computeVerdict,
  parseReferenceValues,
  parseTrustStore,
  renderText,
  type TrustStore,
  type VerificationReport,
  verifyClaim,
  verifySnpEvidence,
} from '@cmcp/verify';
import type { Claim } from '@cmcp/verify/formats';
import type { Browser } from 'puppeteer-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildBrowser, nodeBuiltinBlockers } from '../packages/verify/scripts/build-browser.mjs';
import { certDer, claimWithAkChain, makeAkPki, pinnedAkRoot } from '../testing/ak-pki.js';
import { CHROMIUM, launchChromium } from './harness/chromium.js';
import { REPO_ROOT } from './harness/gateway.js';
import { tpmBoundClaim } from './harness/gateway-claim.js';
import { hasVectors, vectorPath } from './harness/vectors.js';

const SRC = join(REPO_ROOT, 'packages', 'verify', 'src');
const work = mkdtempSync(join(tmpdir(), 'cmcp-verify-browser-'));

// The package's browser bundle, built once at collection time.
const full = await buildBrowser(join(work, 'cmcp-verify.js'));
const { blockers, others } = nodeBuiltinBlockers(full.errors);
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
  const claimTampered = await v.verifyClaim(JSON.parse(await text('/claim-tampered.json')), {
    bundle: JSON.parse(await text('/bundle.json')), trustStore, now: new Date(inputs.claimAt) });
  const akClaim = await v.verifyClaim(JSON.parse(await text('/ak-claim.json')), {
    trustStore: JSON.parse(await text('/ak-trust-store.json')), now: new Date(inputs.akAt) });
  const out = { claim, claimTampered, akClaim };
  const snp = async (report) => v.verifySnpEvidence({
    report: await bytes(report),
    certs: [await bytes('/snp/vcek.testcer'), await bytes('/snp/ask_ark_milan.pem')],
    trustStore, referenceValues: v.parseReferenceValues(inputs.snpReferenceValues),
    now: new Date(inputs.snpAt), expectedReportData: hex(inputs.snpReportData) });
  if (inputs.snp) {
    out.snp = await snp('/snp/attestation.bin');
    out.snpTampered = await snp('/snp/attestation-tampered.bin');
  }
  window.__cmcp = out;
} catch (e) { window.__cmcp = { error: String(e?.stack ?? e) }; }
</script>`;

/** The claim with one byte of its Ed25519 signature flipped. */
function tamperedClaim(claim: Claim): Claim {
  const sig = Buffer.from(claim.signature, 'base64url');
  sig[10] = (sig[10] ?? 0) ^ 0x01;
  return { ...claim, signature: sig.toString('base64url') };
}

/** The SNP report with one byte of IMAGE_ID (offset 0x20, inside the signed region) flipped. */
function tamperedSnpReport(): Buffer {
  const r = Buffer.from(readFileSync(vectorPath('snp', 'go-sev-guest-milan', 'attestation.bin')));
  r[0x20] = (r[0x20] ?? 0) ^ 0x01;
  return r;
}

let gateway: Awaited<ReturnType<typeof tpmBoundClaim>> | undefined;
let server: Server | undefined;
let base = '';
let browser: Browser | undefined;
let claimAt: Date;
let akClaim: Claim;
let akTrust: TrustStore;
const AK_AT = '2027-01-01T00:00:00Z';
const routes = new Map<string, { type: string; body: string | Buffer }>();

beforeAll(async () => {
  if (!existsSync(CHROMIUM))
    throw new Error(
      `${CHROMIUM} is missing: run scripts/setup.sh --for test, as npm test does (Debian package chromium)`,
    );
  gateway = await tpmBoundClaim();
  claimAt = new Date();
  const js = 'text/javascript';
  const serve = (path: string, type: string, body: string | Buffer) => routes.set(path, { type, body });
  serve('/smoke.html', 'text/html', SMOKE_PAGE);
  serve('/verify.html', 'text/html', VERIFY_PAGE);
  if (smoke.ok) serve('/smoke.js', js, readFileSync(smoke.outfile));
  if (full.ok) serve('/cmcp-verify.js', js, readFileSync(full.outfile));
  serve('/claim.json', 'application/json', JSON.stringify(gateway.claim));
  serve('/claim-tampered.json', 'application/json', JSON.stringify(tamperedClaim(gateway.claim)));
  serve('/bundle.json', 'application/json', JSON.stringify(gateway.bundle));
  serve(
    '/trust-store.yaml',
    'text/yaml',
    readFileSync(join(REPO_ROOT, 'packages/verify/attestation/trust-store.yaml')),
  );
  // An enrolled AK: a claim whose AK certificate chains (ECDSA P-256) to a pinned AK root.
  const pki = await makeAkPki();
  akClaim = claimWithAkChain(pki, [certDer(pki.leaf), certDer(pki.ca), certDer(pki.root)]);
  akTrust = pinnedAkRoot(pki.root);
  serve('/ak-claim.json', 'application/json', JSON.stringify(akClaim));
  serve('/ak-trust-store.json', 'application/json', JSON.stringify(akTrust));
  const inputs = {
    akAt: AK_AT,
    claimAt: claimAt.toISOString(),
    snp: withVectors,
    snpAt: SNP_AT,
    snpReportData: SNP_REPORT_DATA,
    snpReferenceValues: SNP_RV,
  };
  serve('/inputs.json', 'application/json', JSON.stringify(inputs));
  if (withVectors) {
    serve('/snp/attestation-tampered.bin', 'application/octet-stream', tamperedSnpReport());
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
  browser = await launchChromium(work);
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
  it('builds: no Node built-in or other error blocks it', () => {
    expect(blockers).toEqual({});
    expect(others).toEqual([]);
    expect(full.ok).toBe(true);
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

describe('verification inside headless Chromium', () => {
  it('a real claim and bundle, an enrolled-AK claim, and a real SEV-SNP report, genuine and tampered: the page’s reports equal Node’s', async () => {
    const trustStore = parseTrustStore(
      readFileSync(join(REPO_ROOT, 'packages/verify/attestation/trust-store.yaml'), 'utf8'),
    );
    const out = await inPage('verify.html');
    expect(out.error).toBeUndefined();
    const claim = await verifyClaim(gateway?.claim, { bundle: gateway?.bundle, trustStore, now: claimAt });
    expect(claim.verdict).toBe('hardware-unanchored');
    expect(out.claim).toEqual(asJson(claim));
    const tampered = await verifyClaim(tamperedClaim(gateway?.claim as Claim), {
      bundle: gateway?.bundle,
      trustStore,
      now: claimAt,
    });
    expect(tampered.verdict).toBe('invalid');
    expect(tampered.checks.find((c) => c.id === 'claim.signature')?.status).toBe('fail');
    expect(out.claimTampered).toEqual(asJson(tampered));
    const enrolled = await verifyClaim(akClaim, { trustStore: akTrust, now: new Date(AK_AT) });
    expect(enrolled.verdict).toBe('hardware-attested');
    expect(out.akClaim).toEqual(asJson(enrolled));
    if (!withVectors) return;
    const d = (f: string) => readFileSync(vectorPath('snp', 'go-sev-guest-milan', f));
    const snp = async (report: Buffer) =>
      verifySnpEvidence({
        report,
        certs: [d('vcek.testcer'), d('ask_ark_milan.pem')],
        trustStore,
        referenceValues: parseReferenceValues(SNP_RV),
        now: new Date(SNP_AT),
        expectedReportData: Buffer.from(SNP_REPORT_DATA, 'hex'),
      });
    const genuine = await snp(d('attestation.bin'));
    expect(genuine.verdict).toBe('hardware-attested');
    expect(out.snp).toEqual(asJson(genuine));
    const forged = await snp(tamperedSnpReport());
    expect(forged.verdict).toBe('invalid');
    expect(forged.checks.find((c) => c.id === 'evidence.signature')?.status).toBe('fail');
    expect(out.snpTampered).toEqual(asJson(forged));
  });
});
