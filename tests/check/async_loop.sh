#!/bin/sh
# async_loop.sh -- runs examples/async_loop (an epoll loop with a 5 ms timer
# and many queries through the async runner) in a scratch directory and
# fails when a tick came later than the bound: 150 ms, 1000 ms under a
# sanitizer or Valgrind.  The slow queries take longer than the bound (a
# few hundred ms, seconds under a sanitizer), so a loop that waited for one
# would fail; the bound leaves room for the scheduling of a loaded machine.
set -e
dir=${DEPOT_TEST_TMPDIR:-/tmp}/async_loop.$$
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
bound=150
n=1000
if test -n "$DEPOT_SANITIZER"; then bound=1000; n=300; fi
./examples/async_loop "$dir/loop.db" $n $bound
