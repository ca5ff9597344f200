#!/usr/bin/env node
/**
 * `npm run build:browser` (in packages/verify): bundles the browser entry of @cmcp/verify
 * (`src/browser.ts`: the verifiers, the trust store and reference values parsers, the report
 * renderers — no file loading) with esbuild for `platform: 'browser'`, ESM, into
 * `dist/browser/cmcp-verify.js` (and its source map). The verifier stays one synchronous code
 * base: in the bundle `node:crypto` is aliased to src/crypto/browser/node-crypto.ts (the part
 * of it the verifier uses, over @noble/hashes, @noble/curves, node-forge and @peculiar/x509)
 * and every free `Buffer` is the `buffer` package's (src/crypto/browser/buffer-global.ts).
 * Any other Node built-in imported anywhere in the bundle (node:fs, …) cannot be bundled: the
 * build fails and names, per built-in, the modules that import it.
 * Usage: `node scripts/build-browser.mjs [outfile]`.
 */
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';

/** The browser entry of the package. */
export const BROWSER_ENTRY = fileURLToPath(new URL('../src/browser.ts', import.meta.url));
/** The browser stand-ins: node:crypto's subset and the Buffer global. */
const BROWSER_DIR = fileURLToPath(new URL('../src/crypto/browser/', import.meta.url));
export const NODE_CRYPTO_SHIM = `${BROWSER_DIR}node-crypto.ts`;
export const BUFFER_INJECT = `${BROWSER_DIR}buffer-global.ts`;
/** Where `npm run build:browser` writes the bundle. */
export const BROWSER_OUTFILE = fileURLToPath(new URL('../dist/browser/cmcp-verify.js', import.meta.url));

/**
 * Bundles `entry` into `outfile` (ESM, browser). Never throws.
 * @returns `{ ok: true }`, or `{ ok: false, errors }` with esbuild's messages (text and the
 *   importing file, when esbuild names one).
 */
export async function buildBrowser(outfile = BROWSER_OUTFILE, entry = BROWSER_ENTRY) {
  try {
    await build({
      entryPoints: [entry],
      outfile,
      bundle: true,
      platform: 'browser',
      format: 'esm',
      target: ['es2022'],
      sourcemap: true,
      alias: { 'node:crypto': NODE_CRYPTO_SHIM },
      inject: [BUFFER_INJECT],
      logLevel: 'silent',
    });
    return { ok: true, outfile, errors: [] };
  } catch (err) {
    const messages = Array.isArray(err?.errors) ? err.errors : [{ text: String(err) }];
    return {
      ok: false,
      outfile,
      errors: messages.map((m) => ({ text: m.text, file: m.location?.file ?? null })),
    };
  }
}

/**
 * The build errors that are Node built-ins the browser lacks, as built-in → importing modules;
 * `others` holds every other error (which no Node-only module explains).
 */
export function nodeBuiltinBlockers(errors) {
  const blockers = {};
  const others = [];
  for (const e of errors) {
    const m = /^Could not resolve "(node:[^"]+)"/.exec(e.text);
    if (!m || !e.file) {
      others.push(e.text);
      continue;
    }
    const name = m[1];
    blockers[name] = [...new Set([...(blockers[name] ?? []), e.file])].sort();
  }
  return { blockers, others };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const r = await buildBrowser(process.argv[2] ?? BROWSER_OUTFILE);
  if (r.ok) {
    process.stdout.write(`build:browser: wrote ${r.outfile}\n`);
  } else {
    const { blockers, others } = nodeBuiltinBlockers(r.errors);
    for (const [name, files] of Object.entries(blockers)) {
      process.stderr.write(`build:browser: ${name} (not in browsers) imported by ${files.join(', ')}\n`);
    }
    for (const o of others) process.stderr.write(`build:browser: ${o}\n`);
    process.exitCode = 1;
  }
}
