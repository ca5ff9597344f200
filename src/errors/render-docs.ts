/** Renders `docs/errors.md` from the error registries (`npm run docs:errors`). */
import { writeFileSync } from 'node:fs';
import { errorsMarkdown } from './markdown.js';

writeFileSync(process.argv[2] ?? 'docs/errors.md', errorsMarkdown());
