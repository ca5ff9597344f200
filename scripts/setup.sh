#!/usr/bin/env bash
# Gets a fresh Debian 12 + Node 20 machine ready to build, test and demo cmcp.
# Idempotent: installs only what is missing, re-runs `npm ci` only when the lockfile changed.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(swtpm swtpm-tools tpm2-tools libtss2-dev)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: need root or sudo to install ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "setup: Node.js 20 or newer is required (found $(node --version))" >&2
  exit 1
fi

stamp=node_modules/.cmcp-lock-sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: npm ci"
  npm ci --no-audit --no-fund
  echo "$want" > "$stamp"
fi

echo "setup: building"
npx tsc -p tsconfig.json
