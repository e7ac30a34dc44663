#!/bin/sh
# cli.sh -- the `depot` program: every command's text and --json output,
# every usage error (exit 2), the import/export round trip (integrity_check
# and the same rows), verify's findings (exit 3), --quiet, --help, and no
# progress output when stderr is not a terminal.  The terminal, SIGINT and
# progress-bar cases are in check_cli.c.  Needs the sqlite3 shell (else
# skips, exit 77).
: "${DEPOT_CLI:?DEPOT_CLI is not set}"
command -v sqlite3 >/dev/null 2>&1 || { echo "SKIP: no sqlite3 shell"; exit 77; }
tmp=${DEPOT_TEST_TMPDIR:-tests/tmp}
mkdir -p "$tmp" && tmp=$(mktemp -d "$tmp/cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
D=$DEPOT_CLI
fails=0
fail(){ echo "FAIL: $*"; fails=$((fails+1)); }

# run EXPECTED-EXIT ARGS...: runs depot, keeps stdout in $out and stderr
# in $err, checks the exit status.
run(){
  want=$1; shift
  out=$("$D" "$@" 2>err.txt); got=$?
  err=$(cat err.txt)
  [ "$got" = "$want" ] || fail "depot $* exited $got, not $want: $err"
}
has(){ case "$1" in *"$2"*) ;; *) fail "'$2' not in: $1";; esac; }
# JSON checks through SQLite: json FIELD-PATH EXPECTED (NULL reads as '')
json(){
  printf '%s' "$out" > out.json
  v=$(sqlite3 :memory: "select json_valid(readfile('out.json')),
        json_extract(readfile('out.json'), '$1')" 2>&1)
  [ "$v" = "1|$2" ] || fail "json $1: want '$2', got '$v' in $out"
}

sqlite3 src.db "create table t(a integer primary key, b);
  insert into t select value, hex(randomblob(200)) from generate_series(1,500);
  create index tb on t(b);" || exit 1
pages=$(sqlite3 src.db "pragma page_count")

# --- import / export round trip ---
run 0 import src.db s.depot --db app
has "$out" "imported src.db into s.depot:app@main: $pages pages"
[ -z "$err" ] || fail "import wrote to stderr off a terminal: $err"
run 0 --json import src.db s.depot --db crm
json '$.command' import; json '$.pages' "$pages"; json '$.db' crm
json '$.exit_code' 0
run 0 export s.depot:app out.db
has "$out" "exported s.depot:app@main to out.db: $pages pages"
[ "$(sqlite3 out.db 'pragma integrity_check')" = ok ] || fail "integrity"
sqlite3 src.db .dump > a.sql; sqlite3 out.db .dump > b.sql
cmp -s a.sql b.sql || fail "exported rows differ from the source"
run 0 --json export s.depot:crm@main out2.db
json '$.pages' "$pages"; json '$.branch' main
run 1 export s.depot:app out.db
has "$err" "already exists"
run 1 --json export s.depot:nope out3.db
json '$.exit_code' 1; [ ! -e out3.db ] || fail "failed export left a file"
run 1 import missing.db s.depot
has "$err" "cannot read missing.db"
run 1 import src.db new.depot --db 'a/b'
[ ! -e new.depot ] || fail "a failed import left the store it created"

# --- branches, fork, log ---
run 0 fork s.depot app main dev
has "$out" "forked app@main as dev (branch id"
run 0 --json fork s.depot app main first --at 1
json '$.at' 1; json '$.branch' first; json '$.from' main
sqlite3 "file:s.depot?vfs=depot&db=app&branch=dev" "select 1" 2>/dev/null
run 0 branches s.depot app
has "$out" "db   branch  branch_id"; has "$out" "dev"
run 0 --json branches s.depot
json '$.branches[0].db' app; json '$.branches[0].branch' main
json '$.branches[0].state' live; json '$.branches[2].parent' 1
run 0 log s.depot app
has "$out" "txid"; has "$out" "$pages"
run 0 --json log s.depot app main --limit 1
json '$.commits[0].txid' 1; json '$.commits[0].db_pages' "$pages"
json '$.commits[1]' ''
run 0 log s.depot app dev
has "$out" "no commits"

# --- restore points, restore, rollback, drop ---
run 0 restore-point s.depot app main before
has "$out" "restore point before pins the head of app@main"
run 0 --json restore-point s.depot app dev dev-head
json '$.restore_point' dev-head
run 0 restore s.depot app main --at before
has "$out" "restored app@main to before; undo with --at undo-main-"
run 0 --json restore s.depot app main --at 1
json '$.at' 1; has "$out" '"undo_point":"undo-main-'
run 0 rollback s.depot app main --at 1
has "$out" "rolled app@main back to 1 (branch id"
run 0 --json rollback s.depot app main
json '$.at' ''; has "$out" '"branch_id":'
run 1 rollback s.depot app main --at -1w
run 0 drop-branch s.depot app first
has "$out" "dropped app@first"
frozen=$(sqlite3 :memory: ".load ${DEPOT_MODULE%.so}" "select branch_id from
  depot_branches('s.depot', 'app') where state='frozen' limit 1" 2>/dev/null)
if [ -n "$frozen" ]; then
  run 0 --json drop-branch s.depot app --id "$frozen"
  json '$.branch_id' "$frozen"
fi
run 1 drop-branch s.depot app nope
has "$err" "nope"

# --- verify, compact, gc, stats, du ---
run 0 verify s.depot
has "$out" "ok: no problems found"
run 0 --json verify s.depot app
json '$.problems' 0; json '$.findings' '[]'
run 0 compact s.depot app main
has "$out" "branches"; has "$out" "shard_bytes"
run 0 --json compact s.depot
json '$.result.skipped' 0
run 0 gc s.depot
has "$out" "dropped_branches"
run 0 --json gc s.depot
json '$.result.rows' 0
run 0 vacuum s.depot
has "$out" "bytes_before"; has "$out" "bytes_after"
run 0 --json vacuum s.depot
printf '%s' "$out" > out.json
v=$(sqlite3 :memory: "select json_extract(readfile('out.json'),
      '\$.result.bytes_after') <= json_extract(readfile('out.json'),
      '\$.result.bytes_before')" 2>&1)
[ "$v" = 1 ] || fail "vacuum --json: bytes_after > bytes_before in $out"
run 0 stats s.depot
has "$out" "stored_bytes"; has "$out" "physical_bytes"
run 0 --json stats s.depot
json '$.stats.databases' 2
run 0 du s.depot
has "$out" "logical_bytes"; has "$out" "store: logical"
run 0 --json du s.depot
json '$.databases[0].db' app; json '$.total.wal_bytes' \
  "$(stat -c %s s.depot-wal 2>/dev/null || echo 0)"
json '$.branches[0].branch' main
# damage one page-blob chunk: verify reports it and exits 3
cp s.depot bad.depot
sqlite3 bad.depot "update depot_kv set value=zeroblob(length(value))
  where key=(select key from depot_kv where length(value)>1000 limit 1)"
run 3 verify bad.depot
has "$out" "problem"
run 3 --json verify bad.depot
json '$.exit_code' 3; has "$out" '"findings":[{"db":"app"'
run 3 --quiet verify bad.depot
[ -z "$out" ] || fail "--quiet verify printed $out"

# --- shell ---
# The shell loads the module: a sanitizer build's needs its runtime first.
pre=
case "${DEPOT_SANITIZER:-none}" in
  asan|tsan) pre=$(${DEPOT_CC:-cc} -print-file-name=lib${DEPOT_SANITIZER}.so) ;;
esac
if [ -n "$DEPOT_MODULE" ]; then
  out=$(echo "select count(*) from t;" |
        LD_PRELOAD=$pre ASAN_OPTIONS=detect_leaks=0 \
        DEPOT_MODULE=$DEPOT_MODULE "$D" shell s.depot:crm 2>&1)
  [ "$out" = 500 ] || fail "shell: $out"
fi
DEPOT_MODULE=${DEPOT_MODULE:-/nonexistent} run 0 --json shell s.depot:crm@main
json '$.uri' 'file:s.depot?vfs=depot&db=crm&branch=main'
DEPOT_MODULE=/nonexistent/depot run 1 shell s.depot
has "$err" "no depot module at /nonexistent/depot"
run 1 shell nope.depot

# --- kv ---
run 1 kv get kvs t k
has "$err" "no KV store at kvs"
run 0 kv put kvs t apple 3 --create --value-type int
has "$out" "put apple in t"
run 0 --json kv put kvs t blob 00ff --value-type hex
json '$.key' blob
run 0 kv put kvs t 7 seven --key-type int
run 0 kv get kvs t apple
[ "$out" = 3 ] || fail "kv get: $out"
run 0 --json kv get kvs t 7 --key-type int
json '$.value' seven
run 1 kv get kvs t nope
run 0 kv dump kvs t
[ "$out" = "$(printf "7\tseven\napple\t3\nblob\tx'00FF'")" ] || fail "dump: $out"
run 0 --json kv dump kvs t
json '$.rows[1].key' apple; json '$.rows[1].value' 3
run 0 kv tables kvs
has "$out" "kv_btree"
run 0 --json kv tables kvs
json '$.tables[0].name' t; json '$.tables[0].rows' 3
run 0 kv stats kvs
has "$out" "row_count"
run 0 --json kv stats kvs
json '$.stats[1].table' t

# --- --quiet, --help ---
run 0 --quiet fork s.depot app main q1
[ -z "$out$err" ] || fail "--quiet printed: $out$err"
run 0 fork s.depot app main q2 -q
[ -z "$out" ] || fail "-q printed: $out"
run 0 --help
has "$out" "usage: depot COMMAND"; has "$out" "vacuum"
for c in import export branches fork log restore-point restore rollback \
         drop-branch verify compact gc vacuum stats du shell; do
  run 0 "$c" --help; has "$out" "usage: depot $c"
done
for c in tables stats get put dump; do
  run 0 kv "$c" --help; has "$out" "usage: depot kv $c"
done
run 0 help fork; has "$out" "usage: depot fork"
run 0 --version; has "$out" "depot "

# --- usage errors: exit 2, a message, nothing on stdout ---
usage(){
  run 2 "$@"
  [ -n "$err" ] || fail "depot $*: no message"
  [ -z "$out" ] || fail "depot $*: printed $out"
}
usage
usage bogus
usage vacuum
usage vacuum s.depot x
usage kv
usage kv frob d
usage --frob
usage import src.db
usage import src.db s.depot extra
usage import src.db s.depot --db
usage import src.db s.depot --db=
usage import src.db s.depot --at 1
usage export s.depot
usage export 's.depot:' x.db
usage export 's.depot:app@' x.db
usage export ':app' x.db
usage export 's.depot:/x' x.db
usage branches
usage fork s.depot app main
usage fork s.depot app main x --at -5q
usage fork s.depot app main x --at ''
usage log s.depot
usage log s.depot app --limit x
usage log s.depot app --limit -1
usage restore-point s.depot app main
usage restore s.depot app main
usage rollback s.depot app
usage drop-branch s.depot app
usage drop-branch s.depot app dev --id 3
usage drop-branch s.depot app --id x
usage verify
usage verify s.depot a b c
usage compact
usage gc
usage gc s.depot x
usage stats
usage du
usage shell
usage shell 's.depot:@x'
usage kv tables
usage kv get kvs t
usage kv get kvs t k --key-type blob
usage kv put kvs t k v --value-type int
usage kv put kvs t k v --create=1
usage kv dump kvs
usage verify s.depot --json-ish
run 2 --json fork s.depot app main
json '$.exit_code' 2; json '$.command' fork

[ "$fails" = 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "cli: all passed"
