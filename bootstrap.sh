#!/bin/sh
# bootstrap.sh -- get a fresh clone to a configured build tree.
#
#   ./bootstrap.sh [CONFIGURE-ARGS...]
#
# Installs the Debian packages the build, the tests and the bench need (as
# root, only those missing), runs autoreconf when configure is missing or
# older than its inputs, and runs ./configure with the given arguments when
# there is no configured tree yet or the arguments changed.  Quiet and
# idempotent when everything is in place.
set -e
cd "$(dirname "$0")"

# clang-14 and libclang-rt-14-dev (libFuzzer and the sanitizer runtimes) are
# for `make fuzz` only; make check does not use them.  valgrind is for
# `make valgrind` only.  postgresql (the server: make check starts a private
# cluster of it) and libpq-dev are for the PostgreSQL store backend.
PKGS="build-essential libsqlite3-dev sqlite3 libzstd-dev zstd check autoconf
automake libtool pkg-config python3 clang-14 libclang-rt-14-dev valgrind
postgresql libpq-dev"

# node and npm are for the Node binding test (tests/bindings/node_smoke.sh):
# Debian's packages (libnode-dev holds the headers better-sqlite3 builds
# against) when no node is installed at all.
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  PKGS="$PKGS nodejs npm libnode-dev"
fi

missing=
for p in $PKGS; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed'; then
    missing="$missing $p"
  fi
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "bootstrap: missing packages:$missing (run as root, or install them)" >&2
    exit 1
  fi
  echo "bootstrap: installing$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  # shellcheck disable=SC2086
  apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

# better-sqlite3 12 for the Node binding test, into a scratch node_modules
# (tests/bindings/node/).  It builds from source with node-gyp (no prebuilt
# binary is downloaded where GitHub cannot be reached), against the
# installed node headers when they are there.  A failure is reported, and
# the Node test then fails, but the build goes on.
node_dir=tests/bindings/node
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 &&
   [ ! -d "$node_dir/node_modules/better-sqlite3/build/Release" ]; then
  echo "bootstrap: npm install (better-sqlite3 for the Node binding test)"
  if [ -z "${npm_config_nodedir:-}" ] && [ -f /usr/include/node/node_version.h ]; then
    npm_config_nodedir=/usr; export npm_config_nodedir
  fi
  (cd "$node_dir" && npm install --no-audit --no-fund --loglevel=error >/dev/null) ||
    echo "bootstrap: npm install in $node_dir failed; the Node binding test will fail" >&2
fi

regen=no
if [ ! -x configure ]; then
  regen=yes
else
  for f in configure.ac Makefile.am */local.mk */*/local.mk; do
    if [ "$f" -nt configure ] || [ "$f" -nt Makefile.in ]; then regen=yes; fi
  done
fi
if [ "$regen" = yes ]; then
  echo "bootstrap: autoreconf"
  autoreconf -fi >/dev/null 2>&1 || autoreconf -fi
fi

args="$*"
if [ ! -f Makefile ] || [ ! -f config.status ] || [ "$regen" = yes ] ||
   [ "$(cat .bootstrap-args 2>/dev/null)" != "$args" ]; then
  echo "bootstrap: ./configure $args"
  # shellcheck disable=SC2068
  ./configure --quiet $@
  printf '%s' "$args" > .bootstrap-args
fi
