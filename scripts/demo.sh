#!/usr/bin/env bash
# `npm run demo`: set up the machine (idempotent), build, then run the end-to-end demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
source scripts/node-env.sh
exec node dist/demo/run.js "$@"
