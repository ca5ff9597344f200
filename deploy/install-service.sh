#!/usr/bin/env bash
# Installs the cmcp system service from an installed package (deploy/README.md): the unit, the
# attestation drop-in for PROVIDER, the sysusers/tmpfiles entries and the udev rule, then
# creates the user and folders. Does not start anything: `systemctl enable --now cmcp` does.
#
#   install-service.sh PROVIDER        PROVIDER: tpm | sev-snp | tdx | auto (attestation.provider)
#   CMCP_ROOT=/some/dir install-service.sh tpm   installs into an image root instead of /
#
# The unit runs /usr/local/bin/cmcp (npm install -g --prefix /usr/local); CMCP_BIN overrides it.
set -euo pipefail

provider="${1:-}"
case "$provider" in
  tpm | sev-snp | tdx | auto) ;;
  *)
    echo "usage: install-service.sh tpm|sev-snp|tdx|auto" >&2
    exit 2
    ;;
esac
here="$(cd "$(dirname "$(readlink -f "$0")")" && pwd)"
root="${CMCP_ROOT:-}"
bin="${CMCP_BIN:-/usr/local/bin/cmcp}"
case "$bin" in
  /*) ;;
  *)
    echo "install-service.sh: CMCP_BIN must be an absolute path" >&2
    exit 2
    ;;
esac

install -d -m 0755 "$root/etc/systemd/system/cmcp.service.d" "$root/etc/sysusers.d" \
  "$root/etc/tmpfiles.d" "$root/etc/udev/rules.d"
sed "s#^ExecStart=/usr/local/bin/cmcp #ExecStart=$bin #" "$here/systemd/cmcp.service" >"$root/etc/systemd/system/cmcp.service"
chmod 0644 "$root/etc/systemd/system/cmcp.service"
install -m 0644 "$here/systemd/attestation/$provider.conf" "$root/etc/systemd/system/cmcp.service.d/attestation.conf"
install -m 0644 "$here/systemd/cmcp-sysusers.conf" "$root/etc/sysusers.d/cmcp.conf"
install -m 0644 "$here/systemd/cmcp-tmpfiles.conf" "$root/etc/tmpfiles.d/cmcp.conf"
if [ "$provider" = sev-snp ] || [ "$provider" = auto ]; then
  install -m 0644 "$here/udev/60-cmcp.rules" "$root/etc/udev/rules.d/60-cmcp.rules"
fi

if [ -n "$root" ]; then
  systemd-sysusers --root="$root" "$root/etc/sysusers.d/cmcp.conf"
  systemd-tmpfiles --root="$root" --create "$root/etc/tmpfiles.d/cmcp.conf"
else
  systemd-sysusers /etc/sysusers.d/cmcp.conf
  systemd-tmpfiles --create /etc/tmpfiles.d/cmcp.conf
  if [ -f /etc/udev/rules.d/60-cmcp.rules ] && command -v udevadm >/dev/null; then
    udevadm control --reload
    udevadm trigger --subsystem-match=misc --sysname-match=sev-guest || true
  fi
  systemctl daemon-reload
fi
echo "install-service.sh: installed cmcp.service ($provider, $bin); next: systemctl enable --now cmcp"
