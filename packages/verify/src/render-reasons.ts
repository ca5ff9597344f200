/** Renders `docs/reasons.md` from the verifier's reason codes (`npm run docs:errors`). */
import { writeFileSync } from 'node:fs';
import { reasonsMarkdown } from './reasons-markdown.js';

writeFileSync(process.argv[2] ?? 'docs/reasons.md', reasonsMarkdown());
