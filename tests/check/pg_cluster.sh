#!/bin/sh
# pg_cluster.sh -- private PostgreSQL servers for the tests: one server, or
# a primary with streaming standbys, each in a directory of its own, each
# listening only on a unix socket in that directory (port 5432 of the
# socket file; the directories keep them apart), trust auth.
#
#   pg_cluster.sh start DIR   initdb a cluster in DIR (new or empty) and
#                             start it as a primary ready for streaming
#                             replication (wal_level=replica, wal senders,
#                             hot standby); prints the store URI of
#                             database postgres (postgresql:///postgres?
#                             host=DIR&user=OWNER)
#   pg_cluster.sh stop DIR    stop it (fast), quietly when not running
#   pg_cluster.sh restart DIR restart it with -m immediate (a crash)
#   pg_cluster.sh standby PDIR DIR NAME
#                             a streaming standby of the running primary
#                             in PDIR: pg_basebackup -R into DIR, its
#                             application_name NAME (what
#                             synchronous_standby_names names), started
#                             and streaming when the command returns;
#                             prints its URI as start does (it starts
#                             with synchronous_standby_names empty, what
#                             the primary had set is not copied)
#   pg_cluster.sh sync PDIR 'LIST'
#                             synchronous_standby_names=LIST on the
#                             primary in PDIR (e.g. 'FIRST 1 (s1)'; ''
#                             is asynchronous replication), reloaded; with
#                             a LIST, returns once a standby of it is a
#                             synchronous one (sync_state sync or quorum)
#   pg_cluster.sh async PDIR  the same as sync PDIR ''
#   pg_cluster.sh wait DIR NAME [sync]
#                             wait (at most 60 s) until the server in DIR
#                             streams WAL to the standby NAME (and with
#                             sync, as a synchronous standby)
#   pg_cluster.sh kill DIR    stop the server with -m immediate (the
#                             primary's crash: no shutdown checkpoint, no
#                             more WAL sent); quietly when not running
#   pg_cluster.sh resume DIR  start the server of DIR again as it was
#                             configured (an old primary comes back as a
#                             primary on its old timeline)
#   pg_cluster.sh promote DIR promote the standby in DIR (pg_ctl promote)
#                             and return once it accepts writes
#   pg_cluster.sh timeline DIR
#                             prints the timeline of the server in DIR
#   pg_cluster.sh uri DIR     prints the URI of the server in DIR
#   pg_cluster.sh multi DIR1 DIR2 ...
#                             prints a multi-host URI of those servers
#                             (postgresql:///postgres?host=DIR1,DIR2&
#                             user=OWNER&target_session_attrs=read-write):
#                             libpq connects to the first of them that
#                             accepts writes
#   pg_cluster.sh stopall DIR1 DIR2 ...
#                             stop every one of them that runs (fast),
#                             quietly; for an EXIT trap
#
# A URI has no '&' of its own to escape in an SQLite URI parameter other
# than the separators shown.  PG_BINDIR (configure's) names the server
# programs.  As root the servers belong to the user postgres (initdb
# refuses root) and each DIR is made readable to it; otherwise to the
# current user.  The server log of DIR is DIR/server.log.
set -e
cmd=$1
dir=$2
bindir=${PG_BINDIR:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r | head -1)}
usage() {
  echo "usage: $0 start|stop|restart|kill|resume|promote|timeline|uri DIR" >&2
  echo "       $0 standby PDIR DIR NAME | sync PDIR LIST | async PDIR" >&2
  echo "       $0 wait DIR NAME [sync] | multi|stopall DIR..." >&2
  exit 2
}
test -n "$dir" || usage
if [ "$(id -u)" = 0 ]; then
  owner=postgres
  as() { runuser -u postgres -- "$@"; }
else
  owner=$(id -un)
  as() { "$@"; }
fi
uri() { echo "postgresql:///postgres?host=$1&user=$owner"; }
psqlc() {   # psqlc DIR SQL: one value
  as "$bindir/psql" -X -A -t -q -h "$1" -U "$owner" -d postgres -c "$2"
}
stopone() {
  if [ -f "$1/data/postmaster.pid" ]; then
    as "$bindir/pg_ctl" -D "$1/data" -m fast -w -t 60 stop >/dev/null 2>&1 || true
  fi
}
startone() {
  as "$bindir/pg_ctl" -D "$1/data" -l "$1/server.log" -w -t 60 start \
     >/dev/null || { tail -n 30 "$1/server.log" >&2; exit 1; }
}
waitfor() {  # waitfor DIR NAME [sync]
  want="state='streaming'"
  test "$3" = sync && want="$want AND sync_state IN ('sync','quorum')"
  i=0
  while [ $i -lt 600 ]; do
    n=$(psqlc "$1" "SELECT count(*) FROM pg_stat_replication WHERE
          application_name='$2' AND $want" 2>/dev/null || echo 0)
    test "$n" = 1 && return 0
    sleep 0.1
    i=$((i+1))
  done
  echo "pg_cluster: $2 is not a streaming${3:+ $3} standby of $1" >&2
  exit 1
}
case $cmd in
start)
  mkdir -p "$dir"
  if [ "$owner" = postgres ]; then chown postgres "$dir"; fi
  chmod 700 "$dir"
  as "$bindir/initdb" -D "$dir/data" -A trust -U "$owner" --no-sync \
     -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2; exit 1; }
  # settings in the configuration file, so that resume and a standby's
  # copy start the same way (a standby's own socket directory follows)
  as sh -c "cat >>'$dir/data/postgresql.conf'" <<EOF
listen_addresses = ''
unix_socket_directories = '$dir'
max_connections = 60
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 8
wal_keep_size = 256MB
hot_standby = on
hot_standby_feedback = on
wal_receiver_status_interval = 1s
EOF
  startone "$dir"
  chmod 755 "$dir"
  uri "$dir"
  ;;
stop)
  stopone "$dir"
  ;;
stopall)
  shift
  for d in "$@"; do stopone "$d"; done
  ;;
restart)
  as "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -m immediate -w \
     -t 60 restart >/dev/null
  ;;
kill)
  if [ -f "$dir/data/postmaster.pid" ]; then
    as "$bindir/pg_ctl" -D "$dir/data" -m immediate -w -t 60 stop \
       >/dev/null 2>&1 || true
  fi
  ;;
resume)
  startone "$dir"
  ;;
standby)
  sdir=$3
  name=$4
  test -n "$sdir" && test -n "$name" || usage
  mkdir -p "$sdir"
  if [ "$owner" = postgres ]; then chown postgres "$sdir"; fi
  chmod 700 "$sdir"
  as "$bindir/pg_basebackup" -h "$dir" -U "$owner" -D "$sdir/data" -R \
     -X stream -c fast --no-sync \
     -d "host=$dir user=$owner application_name=$name" \
     >"$sdir/basebackup.log" 2>&1 || { cat "$sdir/basebackup.log" >&2; exit 1; }
  as sh -c "cat >>'$sdir/data/postgresql.auto.conf'" <<EOF
unix_socket_directories = '$sdir'
synchronous_standby_names = ''
primary_conninfo = 'host=$dir port=5432 user=$owner application_name=$name'
EOF
  startone "$sdir"
  chmod 755 "$sdir"
  waitfor "$dir" "$name"
  uri "$sdir"
  ;;
sync|async)
  list=$3
  test "$cmd" = async && list=
  esc=$(printf '%s' "$list" | sed "s/'/''/g")
  psqlc "$dir" "ALTER SYSTEM SET synchronous_standby_names = '$esc'" >/dev/null
  psqlc "$dir" "SELECT pg_reload_conf()" >/dev/null
  # the reload reaches every process a moment later
  i=0
  while [ "$(psqlc "$dir" "SHOW synchronous_standby_names")" != "$list" ]; do
    sleep 0.05; i=$((i+1)); test $i -lt 200 || { echo "pg_cluster: reload" >&2; exit 1; }
  done
  if [ -n "$list" ]; then
    i=0
    while [ "$(psqlc "$dir" "SELECT count(*) FROM pg_stat_replication
                WHERE sync_state IN ('sync','quorum')")" = 0 ]; do
      sleep 0.1; i=$((i+1))
      test $i -lt 600 || { echo "pg_cluster: no synchronous standby" >&2; exit 1; }
    done
  fi
  ;;
wait)
  test -n "$3" || usage
  waitfor "$dir" "$3" "$4"
  ;;
promote)
  as "$bindir/pg_ctl" -D "$dir/data" -w -t 60 promote >/dev/null
  i=0
  while [ "$(psqlc "$dir" "SELECT pg_is_in_recovery()")" != f ]; do
    sleep 0.05; i=$((i+1)); test $i -lt 1200 || { echo "pg_cluster: promote" >&2; exit 1; }
  done
  ;;
timeline)
  psqlc "$dir" "SELECT CASE WHEN pg_is_in_recovery()
      THEN (SELECT received_tli FROM pg_stat_wal_receiver)
      ELSE ('x'||substr(pg_walfile_name(pg_current_wal_lsn()),1,8))::bit(32)::int
      END"
  ;;
uri)
  uri "$dir"
  ;;
multi)
  shift
  hosts=$(printf '%s,' "$@")
  echo "postgresql:///postgres?host=${hosts%,}&user=$owner&target_session_attrs=read-write"
  ;;
*)
  usage;;
esac
