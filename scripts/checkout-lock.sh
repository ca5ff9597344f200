# shellcheck shell=bash
# One build per checkout: `npm run demo` and `npm test` each rebuild dist/ from scratch (setup.sh),
# which would pull the build out from under the other. Each holds .tmp/checkout.lock (flock, on
# file descriptor 9) for its whole run; a second one started meanwhile says who holds it and
# exits 1 instead of rebuilding. Sourced by scripts/demo.sh, scripts/test.sh and scripts/setup.sh.

# Takes the lock for this script's lifetime, or exits 1 naming the holder. $1: what is running.
# Already held by the calling script (setup.sh started by demo.sh or test.sh): nothing to do.
cmcp_hold_checkout() {
  if [ "${CMCP_CHECKOUT_LOCK_PID:-}" = "$PPID" ] || [ "${CMCP_CHECKOUT_LOCK_PID:-}" = "$$" ]; then
    return 0
  fi
  mkdir -p .tmp
  exec 9>>.tmp/checkout.lock
  if ! flock -n 9; then
    local holder
    holder="$(cat .tmp/checkout.holder 2>/dev/null || true)"
    echo "$1: not started: ${holder:-another command} holds the build of this checkout ($(pwd))." >&2
    echo "$1: it rebuilds dist/, so run this after it ends (or in another clone)." >&2
    exit 1
  fi
  echo "\`$1\` (pid $$, since $(date -u +%Y-%m-%dT%H:%M:%SZ))" > .tmp/checkout.holder
  export CMCP_CHECKOUT_LOCK_PID=$$
}
