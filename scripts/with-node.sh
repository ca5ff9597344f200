#!/usr/bin/env bash
# `with-node.sh CMD ARGS…`: runs CMD with the Node.js that scripts/setup.sh chose first on PATH
# (scripts/node-env.sh): the machine's when it is 22.12+, else the local Node 24 in .runtime/.
# npm scripts and bin/cmcp go through it, so nothing runs on a machine Node older than 22
# against native modules built for the local one.
set -euo pipefail
CMCP_ROOT="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
# shellcheck source=scripts/node-env.sh
source "$CMCP_ROOT/scripts/node-env.sh"
# Native modules (better-sqlite3 13) crash on older Node instead of failing: say so first.
if ! cmcp_system_node_ok; then
  echo "cmcp: Node.js 22.12 or newer is required (found $(node --version 2>/dev/null || echo none));" \
    "in a checkout run scripts/setup.sh, which installs Node 24 into .runtime/; else install Node 24 LTS" >&2
  exit 2
fi
exec "$@"
