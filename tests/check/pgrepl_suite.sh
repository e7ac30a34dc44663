#!/bin/sh
# pgrepl_suite.sh -- the PostgreSQL backend on a replicated PostgreSQL
# (tests/check/check_pgrepl): in a temporary directory it starts, with
# pg_cluster.sh, a primary (p) and a streaming standby of it (s1) made with
# pg_basebackup -R, synchronous replication (synchronous_standby_names
# 'FIRST 1 (s1)'), and runs the suite with
#
#   DEPOT_TEST_PG_CLUSTER        tests/check/pg_cluster.sh
#   DEPOT_TEST_PGREPL_DIR        the temporary directory: a test that needs
#                                servers of its own (a failover changes
#                                which one is the primary) makes them in
#                                subdirectories of it, which the exit
#                                trap stops too
#   DEPOT_TEST_PGREPL_PRIMARY    the primary's directory (DIR/p)
#   DEPOT_TEST_PGREPL_STANDBY    the standby's directory (DIR/s1)
#   DEPOT_TEST_STORE_URI         the primary's URI
#   DEPOT_TEST_PGREPL_STANDBY_URI  the standby's URI
#   DEPOT_TEST_PGREPL_MULTI_URI  both, target_session_attrs=read-write
#
# Every server under the directory is stopped and the directory removed
# on exit, also when a test fails or the run is interrupted.  Skipped (77)
# in a build without libpq or on a machine without the PostgreSQL server
# programs.
srcdir=${srcdir:-.}
test -x tests/check/check_pgrepl || {
  echo "pgrepl_suite: no PostgreSQL backend in this build"; exit 77; }
test -n "$PG_BINDIR" && test -x "$PG_BINDIR/initdb" \
  && test -x "$PG_BINDIR/pg_basebackup" || {
  echo "pgrepl_suite: no PostgreSQL server programs (Debian: postgresql)"
  exit 77; }
export PG_BINDIR
cluster=$srcdir/tests/check/pg_cluster.sh
dir=$(mktemp -d /tmp/depot-pgrepl.XXXXXX) || exit 1
chmod 755 "$dir"
cleanup() {
  for d in "$dir"/*/; do
    test -f "$d/data/postmaster.pid" && sh "$cluster" stop "${d%/}"
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
DEPOT_TEST_STORE_URI=$(sh "$cluster" start "$dir/p") || exit 1
DEPOT_TEST_PGREPL_STANDBY_URI=$(sh "$cluster" standby "$dir/p" "$dir/s1" s1) \
  || exit 1
sh "$cluster" sync "$dir/p" 'FIRST 1 (s1)' || exit 1
DEPOT_TEST_PGREPL_MULTI_URI=$(sh "$cluster" multi "$dir/p" "$dir/s1")
DEPOT_TEST_PG_CLUSTER=$cluster
DEPOT_TEST_PGREPL_DIR=$dir
DEPOT_TEST_PGREPL_PRIMARY=$dir/p
DEPOT_TEST_PGREPL_STANDBY=$dir/s1
export DEPOT_TEST_STORE_URI DEPOT_TEST_PGREPL_STANDBY_URI \
  DEPOT_TEST_PGREPL_MULTI_URI DEPOT_TEST_PG_CLUSTER DEPOT_TEST_PGREPL_DIR \
  DEPOT_TEST_PGREPL_PRIMARY DEPOT_TEST_PGREPL_STANDBY
./tests/check/check_pgread || exit 1
./tests/check/check_pgrepl
