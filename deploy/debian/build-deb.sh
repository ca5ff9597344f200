#!/usr/bin/env bash
# Builds a Debian package of one release artifact (`npm run release`; deploy/README.md, "Debian
# package"), for an image build (deploy/image/) or an apt repository:
#
#   deploy/debian/build-deb.sh ARTIFACT.tar.gz OUT_DIR   →  OUT_DIR/cmcp_<version>-<commit12>_amd64.deb
#
# The package holds the artifact's folder unchanged under /opt/cmcp (so `cmcp measure
# --package-root /opt/cmcp` equals `cmcp measure --release ARTIFACT`), /usr/bin/cmcp linking to
# its bin/cmcp, and nothing else: the unit, drop-in, user and folders come from
# /opt/cmcp/deploy/install-service.sh PROVIDER, run by the image recipe or the operator (the
# provider is the deployment's choice). Reproducible: the times are the artifact's
# (SOURCE_DATE_EPOCH, its commit time), owners root:root, and dpkg-deb honours SOURCE_DATE_EPOCH.
set -euo pipefail
artifact="${1:-}"
out="${2:-}"
if [ -z "$artifact" ] || [ -z "$out" ] || [ ! -f "$artifact" ]; then
  echo "usage: build-deb.sh ARTIFACT.tar.gz OUT_DIR" >&2
  exit 2
fi
sha256="$(sha256sum "$artifact" | cut -d' ' -f1)"
work="$(mktemp -d "${TMPDIR:-/tmp}/cmcp-deb-XXXXXX")"
trap 'rm -rf "$work"' EXIT
root="$work/root"
mkdir -p "$root/opt/cmcp" "$root/usr/bin" "$root/DEBIAN"
tar -xzf "$artifact" -C "$root/opt/cmcp" --strip-components=1 --no-same-owner
release_value() { sed -nE "s/^$1=(.*)$/\1/p" "$root/opt/cmcp/RELEASE"; }
version="$(release_value version)"
commit="$(release_value commit)"
epoch="$(release_value source_date_epoch)"
if [ -z "$version" ] || [ -z "$commit" ] || [ -z "$epoch" ]; then
  echo "build-deb.sh: $artifact is not a cmcp release (no RELEASE version, commit, source_date_epoch)" >&2
  exit 1
fi
ln -s ../../opt/cmcp/bin/cmcp "$root/usr/bin/cmcp"
deb_version="$version-${commit:0:12}"
cat >"$root/DEBIAN/control" <<EOF
Package: cmcp
Version: $deb_version
Architecture: amd64
Maintainer: cmcp maintainers <cmcp@localhost>
Section: net
Priority: optional
Depends: libc6 (>= 2.28), libstdc++6, libgcc-s1
Description: Confidential MCP gateway (release artifact $sha256)
 Policy-checked, hash-chained, hardware-bound tool calls. This package is the
 release artifact sha256:$sha256 (commit $commit) unpacked under /opt/cmcp,
 with its own Node.js runtime. Run /opt/cmcp/deploy/install-service.sh PROVIDER
 to install the system service.
EOF
# Times of the files added here: the artifact's.
touch -h -d "@$epoch" "$root/usr/bin/cmcp" "$root/DEBIAN/control" "$root/usr/bin" "$root/usr" "$root/opt" "$root/opt/cmcp"
chmod -R u=rwX,go=rX "$root"
mkdir -p "$out"
deb="$out/cmcp_${deb_version}_amd64.deb"
SOURCE_DATE_EPOCH="$epoch" dpkg-deb --root-owner-group -Zgzip -z1 --build "$root" "$deb" >/dev/null
echo "$deb"
