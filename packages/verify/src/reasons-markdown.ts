/**
 * `docs/reasons.md` as text, from {@link REASON_CODES} (written by `npm run docs:errors` beside
 * docs/errors.md): every reason code a verification check can report, with its meaning.
 */
import { REASON_CODES } from './result.js';

/** The Markdown table of every reason code, in the order result.ts lists them. */
export function reasonsMarkdown(): string {
  return [
    '# Verification reason codes',
    '',
    'Generated from `REASON_CODES` in `packages/verify/src/result.ts` by `npm run docs:errors`; do not edit by hand.',
    'Every check of `cmcp verify`, `cmcp-verify` and the library reports one of these with its status',
    '([verification.md](verification.md#the-result)). Codes are stable: new ones may be added, none is repurposed.',
    '',
    '| reason | meaning |',
    '|---|---|',
    ...Object.entries(REASON_CODES).map(
      ([code, meaning]) => `| \`${code}\` | ${meaning.replaceAll('|', '\\|')} |`,
    ),
    '',
  ].join('\n');
}
