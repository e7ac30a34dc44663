#!/bin/sh
# c_example.sh -- C programs build against the installed extension: `make
# install DESTDIR=<scratch>`, then examples/c_example.c is compiled with
# `pkg-config --cflags --libs depot` (PKG_CONFIG_PATH and
# PKG_CONFIG_SYSROOT_DIR pointing into the scratch root) and run against
# the installed libdepot (it calls the write-hook API of depot_kv.h
# too).  Skips (exit 77) without pkg-config.
: "${DEPOT_TOP_BUILDDIR:?DEPOT_TOP_BUILDDIR is not set}"
command -v pkg-config >/dev/null 2>&1 || { echo "SKIP: no pkg-config"; exit 77; }
here=$(cd "$(dirname "$0")" && pwd)
tmp=${DEPOT_TEST_TMPDIR:-tests/tmp}
mkdir -p "$tmp" && tmp=$(mktemp -d "$tmp/c_example.XXXXXX") || exit 1
tmp=$(cd "$tmp" && pwd)
trap 'rm -rf "$tmp"' EXIT
root=$tmp/root
${DEPOT_MAKE:-make} -C "$DEPOT_TOP_BUILDDIR" install DESTDIR="$root" \
  >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; echo "FAIL: make install"; exit 1; }
pc=$(find "$root" -name depot.pc | head -n 1)
[ -n "$pc" ] || { echo "FAIL: make install put no depot.pc under $root"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc"); export PKG_CONFIG_PATH
PKG_CONFIG_SYSROOT_DIR=$root; export PKG_CONFIG_SYSROOT_DIR
flags=$(pkg-config --cflags --libs depot) || { echo "FAIL: pkg-config depot"; exit 1; }
echo "pkg-config --cflags --libs depot: $flags"
libdir=$root$(pkg-config --variable=libdir depot | sed "s|^$root||")
for f in "$libdir"/libdepot.so "$(dirname "$libdir")"/include/depot.h \
         "$(dirname "$libdir")"/include/depot_pool.h \
         "$(dirname "$libdir")"/include/depot_kv.h; do
  [ -e "$f" ] || { echo "FAIL: $f is not installed"; exit 1; }
done
case " $(pkg-config --static --libs depot) " in
  *" -lpthread "*) ;;
  *) echo "FAIL: pkg-config --static --libs depot lacks -lpthread"; exit 1 ;;
esac
[ -x "$(dirname "$libdir")/bin/depot" ] || { echo "FAIL: bin/depot is not installed"; exit 1; }
# shellcheck disable=SC2086
${DEPOT_CC:-cc} -o "$tmp/c_example" "$here/../../examples/c_example.c" $flags \
  -Wl,-rpath,"$libdir" || { echo "FAIL: c_example does not build"; exit 1; }
# A sanitizer build's module needs the sanitizer runtime loaded first in
# a host that was not built with it (the leaks of the host are not ours).
case "${DEPOT_SANITIZER:-none}" in
  asan|tsan)
    LD_PRELOAD=$(${DEPOT_CC:-cc} -print-file-name=lib${DEPOT_SANITIZER}.so)
    export LD_PRELOAD
    ASAN_OPTIONS=detect_leaks=0; export ASAN_OPTIONS ;;
esac
mkdir "$tmp/run"
LD_LIBRARY_PATH=$libdir "$tmp/c_example" "$tmp/run"
