#!/usr/bin/env bash
# The test command (`npm test`): set up, build, type-check, lint, then run every test.
# Prints a closing `N passed, N failed, N skipped` line.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The Node that setup chose (a local Node 24 where the machine's is older than 22).
source scripts/node-env.sh
echo "test: typecheck"
npx tsc -p tsconfig.test.json --noEmit
echo "test: lint"
npx biome check .
echo "test: vitest"
mkdir -p .tmp
set +e
npx vitest run --reporter=default --reporter=json --outputFile.json=.tmp/vitest.json "$@"
rc=$?
set -e
node -e '
const r = JSON.parse(require("fs").readFileSync(".tmp/vitest.json", "utf8"));
const skipped = (r.numPendingTests || 0) + (r.numTodoTests || 0);
console.log(`${r.numPassedTests} passed, ${r.numFailedTests} failed, ${skipped} skipped`);
' || true
exit $rc
