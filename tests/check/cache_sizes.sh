#!/bin/sh
# cache_sizes.sh -- the depot suites again with a tiny cache and a large
# one: check_depot, check_fork and check_compact with DEPOT_TEST_CACHE=tiny
# (decoded-page cache of two 4 KiB pages, page map of a few dozen entries,
# read-ahead of 64 pages that the cache cannot keep, a spill file of four
# slots; large: read-ahead 256)
# and =large, which the harness adds to every depot URI that sets no cache
# parameter of its own; then with DEPOT_TEST_BUDGET=tiny and =small
# (below).
set -u
EXEEXT=${EXEEXT:-}
# The programs are in the build tree (make check runs from its top), the
# script may be in a separate source tree (make distcheck).
dir=tests/check
rc=0
for size in tiny large; do
  for t in check_depot check_fork check_compact; do
    if ! DEPOT_TEST_CACHE=$size CK_VERBOSITY=normal "$dir/$t$EXEEXT"; then
      echo "cache_sizes: $t failed with DEPOT_TEST_CACHE=$size"
      rc=1
    fi
  done
done
# and the same suites with DEPOT_TEST_BUDGET=tiny and =small: every write
# transaction of more than two (sixteen) pages stages its pages in the
# store before its commit.
for budget in tiny small; do
  for t in check_depot check_fork check_compact check_verify; do
    if ! DEPOT_TEST_BUDGET=$budget CK_VERBOSITY=normal "$dir/$t$EXEEXT"; then
      echo "cache_sizes: $t failed with DEPOT_TEST_BUDGET=$budget"
      rc=1
    fi
  done
done
exit $rc
