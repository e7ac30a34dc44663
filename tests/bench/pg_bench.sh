#!/bin/sh
# pg_bench.sh -- make bench-pg: bench-speed's workload (the speedtest-class
# steps, the depot side against the unix VFS) on the embedded store and
# then, in the same run, on a PostgreSQL store of private servers
# (tests/check/pg_cluster.sh, in a temporary directory, stopped and
# removed on exit, also on failure) three ways: a single server; the same
# server as a primary with a streaming standby, asynchronous replication;
# and with that standby synchronous (synchronous_standby_names
# 'FIRST 1 (s1)', synchronous_commit on).  A table then sets the three
# side by side: the workload's total, the "300 one-row txns" step (300
# autocommit INSERTs: the commit latency and throughput) and each one's
# ratio to the single server.  Last, pgfail_bench's failover trials.
#
#   pg_bench.sh SPEED_BENCH PGFAIL_BENCH PG_CLUSTER "SPEED_ARGS" TRIALS
set -e
speed=$1; fail=$2; cluster=$3; args=$4; trials=${5:-5}
test -n "$PG_BINDIR" && test -x "$PG_BINDIR/pg_basebackup" || {
  echo "pg_bench: no PostgreSQL server programs (Debian: postgresql)"; exit 0; }
export PG_BINDIR
dir=$(mktemp -d /tmp/depot-pgbench.XXXXXX)
chmod 755 "$dir"
cleanup() {
  for d in "$dir"/*/ "$dir"/*/*/; do
    if [ -f "$d/data/postmaster.pid" ]; then sh "$cluster" stop "${d%/}"; fi
  done
  rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
echo "== embedded store"
# shellcheck disable=SC2086
"$speed" $args
uri=$(sh "$cluster" start "$dir/p")
echo "== PostgreSQL store, single server"
# shellcheck disable=SC2086
"$speed" --store-uri "$uri" $args | tee "$dir/single.txt"
sh "$cluster" standby "$dir/p" "$dir/s1" s1 >/dev/null
echo "== PostgreSQL store, primary with an asynchronous streaming standby"
# shellcheck disable=SC2086
"$speed" --store-uri "$uri" $args | tee "$dir/async.txt"
sh "$cluster" sync "$dir/p" 'FIRST 1 (s1)'
echo "== PostgreSQL store, primary with a synchronous standby"
# shellcheck disable=SC2086
"$speed" --store-uri "$uri" $args | tee "$dir/sync.txt"

# the depot column (median seconds) of a step's row: "| step | unix | depot |"
col() { awk -F'|' -v s="$2" 'index($2, s)==2 { gsub(/ /, "", $4); print $4; exit }' "$1"; }
echo
echo "### PostgreSQL store: single server, asynchronous and synchronous replication"
echo
echo "| store | workload total s | 300 one-row txns s | commit ms | commits/s | total / single | commit / single |"
echo "|---|---|---|---|---|---|---|"
t1=$(col "$dir/single.txt" "**total**"); c1=$(col "$dir/single.txt" "300 one-row txns")
for m in single async sync; do
  t=$(col "$dir/$m.txt" "**total**"); c=$(col "$dir/$m.txt" "300 one-row txns")
  awk -v m="$m" -v t="$t" -v c="$c" -v t1="$t1" -v c1="$c1" 'BEGIN {
    printf "| %s | %.3f | %.3f | %.2f | %.0f | %.2f | %.2f |\n", m, t, c,
      c*1000/300, 300/c, t/t1, c/c1 }'
done
sh "$cluster" stopall "$dir/p" "$dir/s1"
mkdir -p "$dir/fail"
chmod 755 "$dir/fail"
"$fail" --cluster "$cluster" --dir "$dir/fail" --trials "$trials"
