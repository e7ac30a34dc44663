#!/bin/sh
# pg_suite.sh -- the PostgreSQL store suite (tests/check/check_pg), and the
# depot, fork, compact, verify, staging, lock and depotdiff suites with
# DEPOT_TEST_STORE_URI (each runs its tests that reach the store only
# through its path or the store interface), and the depot program's
# commands, against a private cluster: started in a temporary directory by
# pg_cluster.sh, stopped and removed on exit, also when a test fails or
# the run is interrupted.  Skipped (77) in a build without libpq or on a
# machine without the PostgreSQL server programs.
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
# the store suite, then the depot oracle, fork/restore/PITR,
# compaction/GC, quota/verify, staging, locking and differential suites on
# this server (see each one's depot_test_suite())
rc=0
for t in check_pg check_depot check_fork check_compact check_verify \
         check_staging check_lock check_depotdiff; do
  ./tests/check/$t || rc=1
done

# the depot program on a store named by its URI (with a password, which
# trust auth ignores and no output may show)
if [ -n "$DEPOT_CLI" ] && [ -x "$DEPOT_CLI" ] && command -v sqlite3 >/dev/null
then
  store="postgresql://nobody:sekrit42@${uri#postgresql://}&schema=cli"
  cdir="$dir/cli"
  mkdir -p "$cdir"
  fail() { echo "pg_suite: depot $*"; rc=1; }
  sqlite3 "$cdir/src.db" "create table t(a integer primary key, b);
    insert into t select value, hex(randomblob(200))
    from generate_series(1,500)" || rc=1
  "$DEPOT_CLI" import "$cdir/src.db" "$store" --db app >"$cdir/all.txt" \
    || fail "import"
  "$DEPOT_CLI" --json export "$store:app" "$cdir/out.db" >>"$cdir/all.txt" \
    || fail "export"
  sqlite3 "$cdir/src.db" .dump > "$cdir/a.sql"
  sqlite3 "$cdir/out.db" .dump > "$cdir/b.sql"
  cmp -s "$cdir/a.sql" "$cdir/b.sql" || fail "export: rows differ"
  for c in "fork|app main dev" "branches|app" "log|app" "compact|app main" \
           "gc|" "vacuum|" "stats|" "du|" "verify|"; do
    cmd=${c%%|*}
    # shellcheck disable=SC2086
    "$DEPOT_CLI" "$cmd" "$store" ${c#*|} >"$cdir/out.txt" 2>&1 \
      || { cat "$cdir/out.txt"; fail "$cmd"; }
    cat "$cdir/out.txt" >>"$cdir/all.txt"
  done
  grep -q "no problems found" "$cdir/out.txt" || fail "verify: $(cat "$cdir/out.txt")"
  ! grep -q sekrit42 "$cdir/all.txt" || fail "output shows the password"
  grep -q "imported .* into postgresql://nobody@/" "$cdir/all.txt" \
    || fail "import: $(head -1 "$cdir/all.txt")"
fi
exit $rc
