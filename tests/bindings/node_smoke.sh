#!/bin/sh
# node_smoke.sh -- the Node binding test (node_smoke.cjs) with better-sqlite3
# 12, which bootstrap.sh installs into tests/bindings/node/node_modules
# ($DEPOT_NODE_MODULES overrides where it is looked up; make distcheck
# passes the source tree's).  Skips (exit 77) only when node is not
# installed or the module is a sanitizer build; a missing better-sqlite3
# is a failure.
: "${DEPOT_MODULE:?DEPOT_MODULE is not set}"
node=$(command -v node) || { echo "SKIP: no node"; exit 77; }
# Node cannot host a sanitizer build's module (the runtime must come first
# in a process whose allocator and stacks V8 manages): the sanitizer builds
# test the same code through the C suites.
case "${DEPOT_SANITIZER:-none}" in
  asan|tsan) echo "SKIP: node does not host a $DEPOT_SANITIZER build"; exit 77 ;;
esac
here=$(cd "$(dirname "$0")" && pwd)
modules=${DEPOT_NODE_MODULES:-$here/node/node_modules}
if [ ! -d "$modules/better-sqlite3" ]; then
  echo "FAIL: better-sqlite3 is not installed in $modules (./bootstrap.sh installs it)"
  exit 1
fi
case "${DEPOT_SANITIZER:-none}" in
  asan|tsan)
    LD_PRELOAD=$(${DEPOT_CC:-cc} -print-file-name=lib${DEPOT_SANITIZER}.so)
    export LD_PRELOAD
    ASAN_OPTIONS=detect_leaks=0; export ASAN_OPTIONS ;;
esac
tmp=${DEPOT_TEST_TMPDIR:-tests/tmp}
mkdir -p "$tmp" && tmp=$(mktemp -d "$tmp/node_smoke.XXXXXX") || exit 1
tmp=$(cd "$tmp" && pwd)
trap 'rm -rf "$tmp"' EXIT
NODE_PATH=$modules exec "$node" "$here/node_smoke.cjs" "$DEPOT_MODULE" "$tmp"
