/** `docs/errors.md` as text, from the registries of each package (written by render-docs.ts). */
import { VERIFY_ERRORS } from '@cmcp/verify/errors';
import { NATIVE_ERRORS } from '../../native/errors.js';
import { GATEWAY_ERRORS } from './index.js';

const SECTIONS = [
  ['The gateway', 'src/errors/codes.ts', GATEWAY_ERRORS],
  ['The native attestation layer', 'native/errors.ts', NATIVE_ERRORS],
  ['The verifier (@cmcp/verify)', 'packages/verify/src/errors/codes.ts', VERIFY_ERRORS],
] as const;

/** The Markdown tables of every registered code: one section per owner, in registry order. */
export function errorsMarkdown(): string {
  const lines = [
    '# Error codes',
    '',
    'Generated from the registry of each package by `npm run docs:errors`; do not edit by hand.',
    'Tool-call refusals are JSON-RPC errors in an HTTP 200 response (`error.data.error_code` holds the code);',
    'REST routes answer with the HTTP status and `{"error":{"error_code","message"}}`.',
    '',
  ];
  for (const [title, source, codes] of SECTIONS) {
    lines.push(`## ${title}`, '', `Registered in \`${source}\`.`, '');
    lines.push('| code | HTTP | JSON-RPC | meaning |', '|---|---|---|---|');
    for (const [code, e] of Object.entries(codes))
      lines.push(`| \`${code}\` | ${e.http} | ${e.rpc} | ${e.summary} |`);
    lines.push('');
  }
  return lines.join('\n');
}
