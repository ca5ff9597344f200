#!/usr/bin/env bash
# `npm run demo`: set up what the demo needs (idempotent), build, then run the end-to-end demo.
# Holds the checkout's build lock throughout (scripts/checkout-lock.sh): `npm test` started
# meanwhile in this checkout says so and exits instead of rebuilding dist/ under the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/checkout-lock.sh
source scripts/checkout-lock.sh
cmcp_hold_checkout "npm run demo"
bash scripts/setup.sh --for demo
source scripts/node-env.sh
# The lock's descriptor is not passed on: only this script holds it, nothing the demo starts.
node dist/demo/run.js "$@" 9>&-
