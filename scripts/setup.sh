#!/usr/bin/env bash
# Gets a fresh Debian 12 machine with Node.js 20.19+ ready to build, test and demo cmcp.
# Idempotent: installs only what is missing, re-runs `npm ci` only when the lockfile or the
# Node.js ABI changed, and rebuilds dist/ from scratch.
set -euo pipefail
cd "$(dirname "$0")/.."

# Node.js is not installed by this script (Debian 12's own nodejs is 18): check it first.
if ! command -v node >/dev/null; then
  echo "setup: Node.js 20.19 or newer is required and was not found on PATH" >&2
  exit 1
fi
if ! node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||a===22||(a===20&&b>=19)?0:1)'; then
  echo "setup: Node.js 20.19+ (or 22+) is required; found $(node --version)" >&2
  exit 1
fi

# swtpm and tpm2-tss for the TPM provider and tests; a C++ toolchain and python3 for native
# modules (better-sqlite3, koffi) when no prebuilt binary can be fetched.
APT_PACKAGES=(swtpm swtpm-tools tpm2-tools libtss2-dev g++ make python3 chromium)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO=(sudo)
  fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

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
