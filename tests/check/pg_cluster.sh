#!/bin/sh
# pg_cluster.sh -- a private PostgreSQL cluster for the tests.
#
#   pg_cluster.sh start DIR   initdb a cluster in DIR (new or empty) and
#                             start it on a unix socket in DIR only, trust
#                             auth; prints the store URI of database
#                             postgres (postgresql:///postgres?host=DIR&...)
#   pg_cluster.sh stop DIR    stop it (fast), quietly when not running
#   pg_cluster.sh restart DIR restart it with -m immediate (a crash)
#
# PG_BINDIR (configure's) names the server programs.  As root the cluster
# belongs to the user postgres (initdb refuses root) and DIR is made
# readable to it; otherwise to the current user.
set -e
cmd=$1
dir=$2
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -1)}
test -n "$dir" || { echo "usage: $0 start|stop|restart DIR" >&2; exit 2; }
if [ "$(id -u)" = 0 ]; then
  owner=postgres
  as() { runuser -u postgres -- "$@"; }
else
  owner=$(id -un)
  as() { "$@"; }
fi
case $cmd in
start)
  mkdir -p "$dir"
  if [ "$owner" = postgres ]; then chown postgres "$dir"; fi
  chmod 700 "$dir"
  as "$bindir/initdb" -D "$dir/data" -A trust -U "$owner" --no-sync \
     -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2; exit 1; }
  opts="-c listen_addresses='' -k $dir -c max_connections=60"
  opts="$opts -c shared_buffers=32MB"
  as "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
     -o "$opts" start >/dev/null || {
    cat "$dir/server.log" >&2; exit 1; }
  chmod 755 "$dir"
  echo "postgresql:///postgres?host=$dir&user=$owner"
  ;;
stop)
  if [ -f "$dir/data/postmaster.pid" ]; then
    as "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
  ;;
restart)
  as "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m immediate -w \
     -t 60 restart >/dev/null
  ;;
*)
  echo "usage: $0 start|stop|restart DIR" >&2; exit 2;;
esac
