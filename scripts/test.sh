#!/usr/bin/env bash
# The test command (`npm test`): set up (with the test prerequisites), build, type-check, lint,
# then run every test. Holds the checkout's build lock throughout (scripts/checkout-lock.sh).
# Prints a closing `N passed, N failed, N skipped` line (scripts/test-summary.mjs), where failed
# also counts test files that failed to load or errored outside a test.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/checkout-lock.sh
source scripts/checkout-lock.sh
cmcp_hold_checkout "npm test"
bash scripts/setup.sh --for test
# The Node that setup chose (a local Node 24 where the machine's is older than 22).
source scripts/node-env.sh
echo "test: typecheck"
npx tsc -p tsconfig.test.json --noEmit
echo "test: lint"
npx biome check .
echo "test: vitest"
mkdir -p .tmp
rm -f .tmp/vitest.json
set +e
npx vitest run --reporter=default --reporter=json --outputFile.json=.tmp/vitest.json "$@" 9>&-
rc=$?
set -e
# The closing line counts a test file that failed to load, or a suite that errored outside any
# test, as a failure: it never says "0 failed" when vitest failed.
node scripts/test-summary.mjs .tmp/vitest.json "$rc" || rc=1
exit $rc
