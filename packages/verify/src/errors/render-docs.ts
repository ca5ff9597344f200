/** Renders `docs/errors.md` from the error registry (`npm run docs:errors`). */
import { writeFileSync } from 'node:fs';
import { ERRORS } from './index.js';

const lines = [
  '# Error codes',
  '',
  'Generated from `packages/verify/src/errors/index.ts` by `npm run docs:errors`; do not edit by hand.',
  'Tool-call refusals are JSON-RPC errors in an HTTP 200 response (`error.data.error_code` holds the code);',
  'REST routes answer with the HTTP status and `{"error":{"error_code","message"}}`.',
  '',
  '| code | HTTP | JSON-RPC | meaning |',
  '|---|---|---|---|',
  ...Object.entries(ERRORS).map(([code, e]) => `| \`${code}\` | ${e.http} | ${e.rpc} | ${e.summary} |`),
  '',
];
const out = process.argv[2] ?? 'docs/errors.md';
writeFileSync(out, lines.join('\n'));
