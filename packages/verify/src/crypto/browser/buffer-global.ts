/**
 * Injected by esbuild into the browser bundle (scripts/build-browser.mjs): every free `Buffer`
 * of the verifier becomes the `buffer` package's Buffer (the Node Buffer API for browsers).
 */
export { Buffer } from 'buffer';
