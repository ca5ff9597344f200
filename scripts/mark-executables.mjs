// Run by `npm run build` after tsc: tsc rewrites its outputs with mode 0644, so the built
// command entry points (the `bin` targets of both packages, and the gateway CLI that bin/cmcp
// runs) get their executable bit back after every rebuild.
import { chmodSync, existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const targets = new Set(['bin/cmcp', 'dist/src/cli/main.js']);
for (const pkg of ['.', 'packages/verify']) {
  const bin = JSON.parse(readFileSync(join(root, pkg, 'package.json'), 'utf8')).bin ?? {};
  for (const file of Object.values(typeof bin === 'string' ? { bin } : bin)) targets.add(join(pkg, file));
}
for (const rel of targets) {
  const file = join(root, rel);
  if (!existsSync(file)) continue;
  chmodSync(file, statSync(file).mode | 0o111);
}
