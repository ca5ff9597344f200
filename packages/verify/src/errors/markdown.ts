/** `docs/errors.md` as text, from the error registry (written by render-docs.ts). */
import { ERRORS } from './index.js';

/** The Markdown table of every registered code, in registry order. */
export function errorsMarkdown(): string {
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
  return lines.join('\n');
}
