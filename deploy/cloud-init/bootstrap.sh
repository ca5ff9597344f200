#!/usr/bin/env bash
# cmcp-bootstrap (embedded verbatim in every cloud-init file beside this one, whose test checks
# they match this file): installs exactly one release artifact (`npm run release`), pinned by its
# SHA-256, then the system service and reference values, and starts the gateway. Nothing else is
# fetched: the artifact carries the gateway, its locked dependencies and its Node.js runtime.
set -euo pipefail
# shellcheck source=/dev/null
. /etc/cmcp/release.env
for v in CMCP_RELEASE_URL CMCP_RELEASE_SHA256 CMCP_PROVIDER; do
  case "${!v:-}" in
    '' | *REPLACE*)
      echo "cmcp-bootstrap: set $v in /etc/cmcp/release.env, then run /usr/local/sbin/cmcp-bootstrap" >&2
      exit 1
      ;;
  esac
done
if ! [[ "$CMCP_RELEASE_SHA256" =~ ^[0-9a-f]{64}$ ]]; then
  echo "cmcp-bootstrap: CMCP_RELEASE_SHA256 must be 64 lowercase hex digits" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
curl -fsSLo "$work/release.tar.gz" "$CMCP_RELEASE_URL"
echo "${CMCP_RELEASE_SHA256}  $work/release.tar.gz" | sha256sum -c -
# One folder per artifact hash; `current` names the one the unit runs.
dest="/opt/cmcp/releases/$CMCP_RELEASE_SHA256"
rm -rf "$dest"
install -d -m 0755 "$dest"
tar -xzf "$work/release.tar.gz" -C "$dest" --strip-components=1 --no-same-owner
ln -sfn "$dest" /opt/cmcp/current
ln -sfn /opt/cmcp/current/bin/cmcp /usr/local/bin/cmcp
/opt/cmcp/current/deploy/install-service.sh "$CMCP_PROVIDER"
chgrp cmcp /etc/cmcp/cmcp.yaml
chmod 0640 /etc/cmcp/cmcp.yaml
# What this VM will bind; a relying party computes the same from the artifact alone
# (`cmcp measure --release ARTIFACT --config cmcp.yaml`, docs/operations.md).
/usr/local/bin/cmcp measure --config /etc/cmcp/cmcp.yaml --out /etc/cmcp/reference-values.yaml
systemctl enable --now cmcp.service
