#!/bin/sh
# pg_suite.sh -- the PostgreSQL store suite (tests/check/check_pg), and the
# depot, fork and compact suites with DEPOT_TEST_STORE_URI, against a
# private cluster: started in a temporary directory by pg_cluster.sh,
# stopped and removed on exit, also when a test fails or the run is
# interrupted.  Skipped (77) in a build without libpq or on a machine
# without the PostgreSQL server programs.
srcdir=${srcdir:-.}
test -x tests/check/check_pg || { echo "pg_suite: no PostgreSQL backend in this build"; exit 77; }
test -n "$PG_BINDIR" && test -x "$PG_BINDIR/initdb" || {
  echo "pg_suite: no PostgreSQL server programs (Debian: postgresql)"; exit 77; }
export PG_BINDIR
dir=$(mktemp -d /tmp/depot-pg.XXXXXX) || exit 1
cleanup() {
  sh "$srcdir/tests/check/pg_cluster.sh" stop "$dir"
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
uri=$(sh "$srcdir/tests/check/pg_cluster.sh" start "$dir") || exit 1
DEPOT_TEST_STORE_URI=$uri
DEPOT_TEST_PG_DIR=$dir
DEPOT_TEST_PG_CLUSTER=$srcdir/tests/check/pg_cluster.sh
export DEPOT_TEST_STORE_URI DEPOT_TEST_PG_DIR DEPOT_TEST_PG_CLUSTER
# the store suite, then the depot oracle, fork/restore/PITR and
# compaction/GC/quota suites on this server (their tests that reach the
# store only through its path; see each one's depot_test_suite())
rc=0
for t in check_pg check_depot check_fork check_compact; do
  ./tests/check/$t || rc=1
done
exit $rc
