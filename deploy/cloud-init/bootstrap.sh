#!/usr/bin/env bash
# cmcp-bootstrap (embedded verbatim in azure-cvm.yaml and gcp-confidential-vm.yaml, whose test
# checks they match this file): installs Node.js and the cmcp release tarball, both pinned by
# SHA-256, then the system service, reference values, and starts the gateway.
set -euo pipefail
# shellcheck source=/dev/null
. /etc/cmcp/release.env
for v in NODE_VERSION NODE_SHA256 CMCP_TARBALL_URL CMCP_TARBALL_SHA256 CMCP_PROVIDER; do
  case "${!v:-}" in
    '' | *REPLACE*)
      echo "cmcp-bootstrap: set $v in /etc/cmcp/release.env, then run /usr/local/sbin/cmcp-bootstrap" >&2
      exit 1
      ;;
  esac
done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
node_tar="node-${NODE_VERSION}-linux-x64.tar.xz"
curl -fsSLo "$work/$node_tar" "https://nodejs.org/dist/${NODE_VERSION}/${node_tar}"
echo "${NODE_SHA256}  $work/$node_tar" | sha256sum -c -
tar -xJf "$work/$node_tar" -C /usr/local --strip-components=1 --no-same-owner
curl -fsSLo "$work/cmcp.tgz" "$CMCP_TARBALL_URL"
echo "${CMCP_TARBALL_SHA256}  $work/cmcp.tgz" | sha256sum -c -
# Local Node.js headers for the better-sqlite3 source build when no prebuilt binary can be fetched.
npm_config_nodedir=/usr/local /usr/local/bin/npm install -g --prefix /usr/local --no-audit --no-fund "$work/cmcp.tgz"
/usr/local/lib/node_modules/cmcp/deploy/install-service.sh "$CMCP_PROVIDER"
chgrp cmcp /etc/cmcp/cmcp.yaml
chmod 0640 /etc/cmcp/cmcp.yaml
# What this VM will extend; relying parties compute their own from the tarball (docs/operations.md).
/usr/local/bin/cmcp measure --config /etc/cmcp/cmcp.yaml --out /etc/cmcp/reference-values.yaml
systemctl enable --now cmcp.service
