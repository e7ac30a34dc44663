/*
** check_twopc.c -- the "twopc" suite: two-phase commit across a KV store
** and the database file (ext/kv_coord.c), and named prepared
** transactions.
**
** Mixed transactions (one SQLite transaction writing an ordinary table
** "orders" and a kv_btree table "stock") on a plain file in WAL mode, in
** rollback-journal mode and on a depot database: the commit marker row,
** KV-only transactions that write none, a child killed with SIGKILL at the
** commit hook (after the KV part's WAL flush, before the file commits) or
** after the file committed but the KV publication failed, then reopened:
** never one part without the other.  Markers of retired WAL segments are
** collected.
*/
#include "config.h"
#define SQLITE_CORE 1
#include "tests/check/harness.h"
#include "ext/kv/kv_test.h"
#include "ext/depot.h"
#include "wal/wal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The database kinds of the mixed-transaction tests (loop index). */
static const char *const azKind[] = { "wal", "delete", "depot" };

/* The URI of the test database of kind iKind in directory zDir. */
static char *tp_uri(const char *zDir, int iKind){
  if( iKind==2 ) return sqlite3_mprintf("file:%s/app.depot?vfs=depot&db=app",
                                        zDir);
  return sqlite3_mprintf("file:%s/app.db", zDir);
}

/* Open the test database and set its journal mode.  A first connection
** registers the depot VFS (the process setup of the extension). */
static sqlite3 *tp_open(const char *zUri, const char *zKind){
  static sqlite3 *dbFirst = 0;
  sqlite3 *db;
  if( dbFirst==0 ) dbFirst = th_open(":memory:");
  db = th_open(zUri);
  sqlite3_busy_timeout(db, th_busy_ms(5000));
  if( strcmp(zKind, "wal")==0 ) th_exec(db, "PRAGMA journal_mode=WAL");
  if( strcmp(zKind, "delete")==0 ) th_exec(db, "PRAGMA journal_mode=DELETE");
  return db;
}

/* A new database of kind iKind with tables orders (file) and stock
** (kv_btree); returns its URI. */
static char *tp_setup(const char *zTag, int iKind){
  char *zDir = th_tmpdir(zTag);
  char *zUri = tp_uri(zDir, iKind);
  sqlite3 *db = tp_open(zUri, azKind[iKind]);
  th_exec(db, "CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT);"
              "CREATE VIRTUAL TABLE stock USING kv_btree;");
  sqlite3_close(db);
  sqlite3_free(zDir);
  return zUri;
}

/* ------------------------------------------------------------ children */

static int tpKillHook(void *pArg){
  (void)pArg;
  raise(SIGKILL);
  return 0;
}

/* The child's connection (no th_* helper: Check cannot report from a
** child), journal mode set; exits 4 on an error. */
static sqlite3 *tp_child_open(const char *zUri, const char *zKind){
  sqlite3 *db = 0, *dbFirst = 0;
  char *zErr = 0;
  int rc;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  rc = sqlite3_open_v2(":memory:", &dbFirst, SQLITE_OPEN_READWRITE, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
  }
  if( rc==SQLITE_OK ) sqlite3_busy_timeout(db, 10000);
  if( rc==SQLITE_OK && strcmp(zKind, "wal")==0 ){
    rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", 0, 0, &zErr);
  }
  if( rc==SQLITE_OK && strcmp(zKind, "delete")==0 ){
    rc = sqlite3_exec(db, "PRAGMA journal_mode=DELETE", 0, 0, &zErr);
  }
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "child: open %s: %s\n", zUri, zErr ? zErr : "?");
    _exit(4);
  }
  return db;
}

/* Child modes:
**   mixed URI KIND hook   BEGIN; orders + stock; COMMIT, killed by the
**                         commit hook (KV part flushed, file not committed)
**   mixed URI KIND apply  the same, but the KV publication fails after the
**                         file committed; then killed */
/* Child mode "prepare URI": h writes acct 'a' = 90 and reads 'b', then
** kv_prepare(h, 'g1'); killed.  "resolve URI": kv_commit_prepared('g1')
** with the publication failing after the decision is durable; killed. */
static int tpChildPrepared(int argc, char **argv){
  sqlite3 *db = tp_child_open(argv[1], "wal");
  const char *zSql = strcmp(argv[0], "prepare")==0
    ? "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
      "SELECT kv_get(1, 'acct', 'b'); SELECT kv_prepare(1, 'g1')"
    : strcmp(argv[0], "prepare6")==0
    ? "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
      "SELECT kv_put(1, 'u1', 'k', 1); SELECT kv_put(1, 'u2', 'k', 2);"
      "SELECT kv_put(1, 'u3', 'k', 3); SELECT kv_put(1, 'u4', 'k', 4);"
      "SELECT kv_get(1, 'u5', 'k'); SELECT kv_prepare(1, 'g6')"
    : strcmp(argv[0], "unnamed")==0
    ? "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
      "SELECT kv_prepare(1)"
    : "SELECT kv_commit_prepared('g1')";
  char *zErr = 0;
  (void)argc;
  if( strcmp(argv[0], "resolve")==0 ) kv_engine_test_fail_apply(1);
  if( sqlite3_exec(db, zSql, 0, 0, &zErr)!=SQLITE_OK
   && strcmp(argv[0], "resolve")!=0 ){
    fprintf(stderr, "child: %s\n", zErr);
    return 4;
  }
  raise(SIGKILL);
  return 3;
}

/* Resolve n fresh gids zPrefix0.. on db (each writes acct 'k'). */
static int tpResolveMany(sqlite3 *db, const char *zPrefix, int n){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<n; i++){
    char *z = sqlite3_mprintf("CREATE TEMP TABLE IF NOT EXISTS h(id);"
        "DELETE FROM h; INSERT INTO h SELECT kv_begin();"
        "SELECT kv_put(id, 'acct', 'k', %d) FROM h;"
        "SELECT kv_prepare(id, '%s%d') FROM h;"
        "SELECT kv_commit_prepared('%s%d')", i, zPrefix, i, zPrefix, i);
    rc = z ? sqlite3_exec(db, z, 0, 0, 0) : SQLITE_NOMEM;
    sqlite3_free(z);
  }
  return rc;
}

/* The clock skew of the trim tests: past the keep time. */
#define TP_SKEW (KV_RESOLVED_KEEP_MS + 3600*1000)

/* Child mode "trim URI STAGE": trims at 8 entries, then at 16; 8
** decisions g*, a clean close (their WAL records retire), then 8 more h*
** a keep time later: the 16th entry's trim drops the g* and is killed at
** rewrite stage STAGE. */
static int tpChildTrim(char **argv){
  sqlite3 *db;
  kv_engine_test_wal_config(4096, 0);
  kv_engine_test_resolved(0, 8, -1);
  db = tp_child_open(argv[1], "wal");
  if( tpResolveMany(db, "g", 8)!=SQLITE_OK ) return 4;
  sqlite3_close(db);
  db = tp_child_open(argv[1], "wal");
  kv_engine_test_resolved(TP_SKEW, 8, atoi(argv[2]));
  if( tpResolveMany(db, "h", 8)!=SQLITE_OK ) return 4;
  return 3;
}

int depot_test_child(int argc, char **argv){
  sqlite3 *db;
  char *zErr = 0;
  if( argc==3 && strcmp(argv[0], "trim")==0 ) return tpChildTrim(argv);
  if( argc==2 && (strcmp(argv[0], "prepare")==0
               || strcmp(argv[0], "prepare6")==0
               || strcmp(argv[0], "unnamed")==0
               || strcmp(argv[0], "resolve")==0) ){
    return tpChildPrepared(argc, argv);
  }
  if( argc<4 || strcmp(argv[0], "mixed")!=0 ) return 2;
  db = tp_child_open(argv[1], argv[2]);
  if( sqlite3_exec(db, "BEGIN; INSERT INTO orders VALUES(1, 'bolt');"
                   "INSERT INTO stock VALUES('bolt', 41)", 0, 0, &zErr) ){
    fprintf(stderr, "child: %s\n", zErr);
    return 4;
  }
  if( strcmp(argv[3], "hook")==0 ) sqlite3_commit_hook(db, tpKillHook, 0);
  if( strcmp(argv[3], "apply")==0 ) kv_engine_test_fail_apply(1);
  sqlite3_exec(db, "COMMIT", 0, 0, 0);
  raise(SIGKILL);
  return 3;
}

/* Run child mode zHow on zUri and wait for its SIGKILL. */
static void tp_child(const char *zUri, int iKind, const char *zHow){
  const char *azArg[] = { "mixed", zUri, azKind[iKind], zHow, 0 };
  int st = 0;
  pid_t pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL,
                "child status %d", st);
}

/* Both parts of the mixed transaction are there (bWant 1) or neither
** (bWant 0). */
static void tp_whole(sqlite3 *db, int bWant){
  sqlite3_int64 nOrder = th_int(db, "SELECT count(*) FROM orders");
  sqlite3_int64 nStock = th_int(db, "SELECT count(*) FROM stock");
  ck_assert_msg(nOrder==bWant && nStock==bWant,
                "orders %lld, stock %lld, want %d each",
                (long long)nOrder, (long long)nStock, bWant);
}

/* --------------------------------------------------------------- tests */

START_TEST(test_twopc_mixed_commit_writes_one_marker){
  char *zUri = tp_setup("tp-marker", _i);
  sqlite3 *db = tp_open(zUri, azKind[_i]);
  char *zStore;
  th_exec(db, "BEGIN; INSERT INTO orders VALUES(1, 'bolt');"
              "INSERT INTO stock VALUES('bolt', 41); COMMIT");
  tp_whole(db, 1);
  /* CREATE VIRTUAL TABLE was a mixed transaction too, but its record
  ** retired when the setup closed the store: its marker is collected. */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM _depot_kv_commit"), 1);
  ck_assert_int_gt(th_int(db, "SELECT cid FROM _depot_kv_commit"), 1);
  zStore = th_text(db, "SELECT store FROM _depot_kv_commit LIMIT 1");
  ck_assert_ptr_nonnull(strstr(zStore, "-kv"));
  sqlite3_free(zStore);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_kv_only_commit_writes_no_marker){
  char *zUri = tp_setup("tp-kvonly", _i);
  sqlite3 *db = tp_open(zUri, azKind[_i]);
  /* CREATE VIRTUAL TABLE was a mixed transaction: its marker. */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM _depot_kv_commit"), 1);
  th_exec(db, "BEGIN; INSERT INTO stock VALUES('bolt', 41); COMMIT;"
              "INSERT INTO stock VALUES('nut', 7)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM _depot_kv_commit"), 1);
  ck_assert_int_eq(th_int(db, "SELECT cid FROM _depot_kv_commit"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM stock"), 2);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_file_only_commit_writes_no_marker){
  char *zUri = tp_setup("tp-fileonly", _i);
  sqlite3 *db = tp_open(zUri, azKind[_i]);
  th_exec(db, "BEGIN; INSERT INTO orders VALUES(1, 'bolt'); COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM _depot_kv_commit"), 1);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_kill_before_file_commit_keeps_neither_part){
  char *zUri = tp_setup("tp-killhook", _i);
  sqlite3 *db;
  tp_child(zUri, _i, "hook");
  db = tp_open(zUri, azKind[_i]);
  tp_whole(db, 0);
  sqlite3_close(db);
  db = tp_open(zUri, azKind[_i]);      /* the record stays withdrawn */
  tp_whole(db, 0);
  th_exec(db, "BEGIN; INSERT INTO orders VALUES(2, 'nut');"
              "INSERT INTO stock VALUES('nut', 7); COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM orders"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM stock"), 1);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_kill_after_file_commit_applies_kv_part){
  char *zUri = tp_setup("tp-killapply", _i);
  sqlite3 *db;
  tp_child(zUri, _i, "apply");
  db = tp_open(zUri, azKind[_i]);
  tp_whole(db, 1);
  ck_assert_int_eq(th_int(db, "SELECT value FROM stock WHERE key='bolt'"),
                   41);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_markers_of_retired_segments_are_collected){
  char *zDir = th_tmpdir("tp-gc");
  char *zUri = tp_uri(zDir, 0);
  sqlite3 *db;
  int i;
  kv_engine_test_wal_config(4096, 0);
  db = tp_open(zUri, "wal");
  th_exec(db, "CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT);"
              "CREATE VIRTUAL TABLE stock USING kv_memory(persistence=1)");
  for(i=1; i<=300; i++){
    char *z = sqlite3_mprintf("BEGIN; INSERT INTO orders VALUES(%d, 'x');"
        "INSERT INTO stock VALUES(%d, zeroblob(200)); COMMIT", i, i);
    th_exec(db, z);
    sqlite3_free(z);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM orders"), 300);
  ck_assert_int_lt(th_int(db, "SELECT count(*) FROM _depot_kv_commit"), 60);
  ck_assert_int_eq(th_int(db, "SELECT max(cid) IS NOT NULL FROM "
                              "_depot_kv_commit"), 1);
  sqlite3_close(db);
  kv_engine_test_wal_config(0, 0);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_twopc_busy_commit_retried_stays_whole){
  char *zUri = tp_setup("tp-busy", 1);
  sqlite3 *db = tp_open(zUri, "delete");
  sqlite3 *pReader = tp_open(zUri, "delete");
  sqlite3_stmt *pStmt = 0;
  int rc;
  sqlite3_busy_timeout(db, 0);
  th_exec(db, "BEGIN; INSERT INTO orders VALUES(1, 'bolt');"
              "INSERT INTO stock VALUES('bolt', 41)");
  /* A reader holding SHARED makes the commit's EXCLUSIVE lock busy. */
  ck_assert_int_eq(sqlite3_prepare_v2(pReader, "SELECT * FROM orders", -1,
                                      &pStmt, 0), SQLITE_OK);
  th_exec(pReader, "BEGIN");
  sqlite3_step(pStmt);
  rc = th_try(db, "COMMIT", 0);
  ck_assert_int_eq(rc, SQLITE_BUSY);
  sqlite3_finalize(pStmt);
  th_exec(pReader, "COMMIT");
  th_exec(db, "COMMIT");
  tp_whole(db, 1);
  sqlite3_close(pReader);
  sqlite3_close(db);
  db = tp_open(zUri, "delete");
  tp_whole(db, 1);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

/* ---------------------------------------------------- named prepared */

/* A WAL-mode database with kv_btree table acct: a=100, b=5. */
static char *tp_acct(const char *zTag){
  char *zDir = th_tmpdir(zTag);
  char *zUri = tp_uri(zDir, 0);
  sqlite3 *db = tp_open(zUri, "wal");
  th_exec(db, "CREATE VIRTUAL TABLE acct USING kv_btree;"
              "INSERT INTO acct VALUES('a', 100), ('b', 5)");
  sqlite3_close(db);
  sqlite3_free(zDir);
  return zUri;
}

/* Run child mode zMode on zUri and wait for its SIGKILL. */
static void tp_child2(const char *zMode, const char *zUri){
  const char *azArg[] = { zMode, zUri, 0 };
  int st = 0;
  pid_t pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL,
                "child status %d", st);
}

/* zSql fails with code rc and a message holding zLike (NULL: any; SQLite
** drops the message of a virtual table's xDestroy). */
static void tp_fails(sqlite3 *db, const char *zSql, int rc,
                     const char *zLike){
  char *zErr = 0;
  int r = th_try(db, zSql, &zErr);
  ck_assert_msg(r==rc, "%s: rc %d, want %d (%s)", zSql, r, rc,
                zErr ? zErr : "");
  ck_assert_msg(zLike==0 || (zErr && strstr(zErr, zLike)), "%s: '%s' lacks '%s'", zSql,
                zErr ? zErr : "", zLike);
  sqlite3_free(zErr);
}

/* The in-doubt list of db's store as "gid|keys|tables;..." */
static char *tp_prepared(sqlite3 *db){
  return th_text(db, "SELECT coalesce(group_concat(gid||'|'||keys||'|'||"
                     "\"tables\", ';'), '') FROM kv_prepared");
}

static void tp_prepared_is(sqlite3 *db, const char *zWant){
  char *z = tp_prepared(db);
  ck_assert_str_eq(z ? z : "", zWant);
  sqlite3_free(z);
}

START_TEST(test_twopc_prepared_stays_in_doubt_after_kill){
  char *zUri = tp_acct("tp-doubt");
  sqlite3 *db;
  int i;
  tp_child2("prepare", zUri);
  for(i=0; i<3; i++){                  /* three restarts of the store */
    db = tp_open(zUri, "wal");
    tp_prepared_is(db, "g1|1|[\"acct\"]");
    ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 100);
    /* its write and its read are still reserved */
    tp_fails(db, "UPDATE acct SET value=1 WHERE key='a'", SQLITE_BUSY, "'g1'");
    tp_fails(db, "UPDATE acct SET value=1 WHERE key='b'", SQLITE_BUSY, "'g1'");
    th_exec(db, "INSERT INTO acct VALUES('c', 1)");    /* others are free */
    th_exec(db, "DELETE FROM acct WHERE key='c'");
    sqlite3_close(db);
  }
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g1')"), 1);
  tp_prepared_is(db, "");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 90);
  th_exec(db, "UPDATE acct SET value=6 WHERE key='b'");
  sqlite3_close(db);
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 90);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g1')"), 0);
  tp_fails(db, "SELECT kv_rollback_prepared('g1')", SQLITE_CONSTRAINT,
           "was committed");
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

/* A prepared transaction over more tables than a root holds in itself
** (KV_ROOT_CHILDREN) comes back in doubt with every table, holds the key
** it read, and commits every write. */
START_TEST(test_twopc_prepared_many_tables_in_doubt){
  char *zUri = tp_acct("tp-doubt6");
  sqlite3 *db = tp_open(zUri, "wal");
  th_exec(db, "CREATE VIRTUAL TABLE u1 USING kv_btree;"
              "CREATE VIRTUAL TABLE u2 USING kv_btree;"
              "CREATE VIRTUAL TABLE u3 USING kv_btree;"
              "CREATE VIRTUAL TABLE u4 USING kv_btree;"
              "CREATE VIRTUAL TABLE u5 USING kv_btree;"
              "INSERT INTO u5 VALUES('k', 5)");
  sqlite3_close(db);
  tp_child2("prepare6", zUri);
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT keys FROM kv_prepared WHERE gid='g6'"),
                   5);
  ck_assert_int_eq(th_int(db, "SELECT json_array_length(\"tables\") FROM"
                              " kv_prepared WHERE gid='g6'"), 6);
  tp_fails(db, "UPDATE u5 SET value=0 WHERE key='k'", SQLITE_BUSY, "'g6'");
  tp_fails(db, "INSERT INTO u4 VALUES('k', 0)", SQLITE_BUSY, "'g6'");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u4"), 0);
  sqlite3_close(db);
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g6')"), 1);
  tp_prepared_is(db, "");
  sqlite3_close(db);
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT (SELECT value FROM acct WHERE key='a')"
      "+(SELECT value FROM u1 WHERE key='k')+(SELECT value FROM u2 WHERE"
      " key='k')+(SELECT value FROM u3 WHERE key='k')+(SELECT value FROM u4"
      " WHERE key='k')+(SELECT value FROM u5 WHERE key='k')"), 90+1+2+3+4+5);
  th_exec(db, "UPDATE u5 SET value=6 WHERE key='k'");
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_prepared_rollback_after_restart){
  char *zUri = tp_acct("tp-rollback");
  sqlite3 *db;
  tp_child2("prepare", zUri);
  db = tp_open(zUri, "wal");
  tp_prepared_is(db, "g1|1|[\"acct\"]");
  ck_assert_int_eq(th_int(db, "SELECT kv_rollback_prepared('g1')"), 1);
  tp_prepared_is(db, "");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 100);
  th_exec(db, "UPDATE acct SET value=1 WHERE key='a'");
  sqlite3_close(db);
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_rollback_prepared('g1')"), 0);
  tp_fails(db, "SELECT kv_commit_prepared('g1')", SQLITE_CONSTRAINT,
           "was rolled back");
  tp_prepared_is(db, "");
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_prepared_decision_survives_crash_in_commit){
  char *zUri = tp_acct("tp-decide");
  sqlite3 *db;
  tp_child2("prepare", zUri);
  db = tp_open(zUri, "wal");
  tp_prepared_is(db, "g1|1|[\"acct\"]");
  sqlite3_close(db);
  tp_child2("resolve", zUri);           /* decided, publication failed */
  db = tp_open(zUri, "wal");
  tp_prepared_is(db, "");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 90);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g1')"), 0);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_prepared_record_never_retires){
  char *zUri, *zDir;
  sqlite3 *db;
  int i;
  kv_engine_test_wal_config(4096, 0);
  zUri = tp_acct("tp-retire");
  db = tp_open(zUri, "wal");
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
              "SELECT kv_prepare(1, 'g1')");
  for(i=0; i<200; i++){
    char *z = sqlite3_mprintf("INSERT INTO acct VALUES(%d, zeroblob(300))", i);
    th_exec(db, z);
    sqlite3_free(z);
  }
  zDir = th_text(db, "SELECT dir FROM kv_tables WHERE name='acct'");
  sqlite3_close(db);                     /* a clean close retires the rest */
  db = tp_open(zUri, "wal");
  tp_prepared_is(db, "g1|1|[\"acct\"]");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM acct"), 202);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g1')"), 1);
  sqlite3_close(db);
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 90);
  sqlite3_close(db);
  kv_engine_test_wal_config(0, 0);
  sqlite3_free(zDir);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_prepared_bad_input_changes_nothing){
  char *zUri = tp_acct("tp-bad");
  sqlite3 *db = tp_open(zUri, "wal");
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
              "SELECT kv_prepare(1, 'g1'); SELECT kv_begin();"
              "SELECT kv_put(2, 'acct', 'z', 1)");
  tp_fails(db, "SELECT kv_commit_prepared('nope')", SQLITE_NOTFOUND,
           "no prepared transaction 'nope'");
  tp_fails(db, "SELECT kv_rollback_prepared('nope')", SQLITE_NOTFOUND,
           "no prepared transaction 'nope'");
  tp_fails(db, "SELECT kv_prepare(2, 'g1')", SQLITE_CONSTRAINT,
           "'g1' already exists");
  tp_fails(db, "SELECT kv_prepare(2, printf('%.201c', 'x'))", SQLITE_RANGE,
           "1..200 bytes");
  tp_fails(db, "SELECT kv_prepare(2, '')", SQLITE_RANGE, "1..200 bytes");
  tp_fails(db, "SELECT kv_prepare(2, 7)", SQLITE_RANGE, "must be text");
  tp_fails(db, "SELECT kv_commit_prepared(NULL)", SQLITE_RANGE,
           "must be text");
  tp_fails(db, "SELECT kv_prepare(1, 'g2')", SQLITE_ERROR, "handle 1");
  tp_prepared_is(db, "g1|1|[\"acct\"]");
  /* handle 2 is untouched: it still prepares, under another gid */
  th_exec(db, "SELECT kv_prepare(2)");
  tp_fails(db, "SELECT kv_prepare(2, 'g2')", SQLITE_MISUSE, "prepared");
  th_exec(db, "SELECT kv_commit(2)");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='z'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g1')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('g1')"), 0);
  tp_fails(db, "SELECT kv_rollback_prepared('g1')", SQLITE_CONSTRAINT,
           "was committed");
  th_exec(db, "SELECT kv_begin(); SELECT kv_put(3, 'acct', 'y', 1)");
  tp_fails(db, "SELECT kv_prepare(3, 'g1')", SQLITE_CONSTRAINT,
           "resolved less than 24 hours ago");
  th_exec(db, "SELECT kv_begin(); SELECT kv_create_table(4, 't2', 'kv_btree')");
  tp_fails(db, "SELECT kv_prepare(4, 'g4')", SQLITE_MISUSE,
           "creates or removes tables");
  tp_prepared_is(db, "");
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

/* Table removal while g1 is in doubt: zDrop fails with SQLITE_BUSY naming
** 'g1' and changes nothing; once g1 is resolved it works. */
static void tp_remove_blocked(const char *zTag, const char *zSetup,
                              const char *zPrepare, const char *zDrop,
                              const char *zResolve, const char *zGone){
  char *zUri = tp_acct(zTag);
  sqlite3 *db = tp_open(zUri, "wal");
  if( zSetup ) th_exec(db, zSetup);
  th_exec(db, zPrepare);
  tp_fails(db, zDrop, SQLITE_BUSY, strncmp(zDrop, "DROP", 4) ? "'g1'" : 0);
  ck_assert_int_eq(th_int(db, zGone), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_prepared"), 1);
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 100);
  sqlite3_close(db);
  db = tp_open(zUri, "wal");              /* and after a restart */
  tp_fails(db, zDrop, SQLITE_BUSY, strncmp(zDrop, "DROP", 4) ? "'g1'" : 0);
  ck_assert_int_eq(th_int(db, zGone), 1);
  ck_assert_int_eq(th_int(db, zResolve), 1);
  tp_prepared_is(db, "");
  th_exec(db, zDrop);
  ck_assert_int_eq(th_int(db, zGone), 0);
  sqlite3_close(db);
  sqlite3_free(zUri);
}

START_TEST(test_twopc_remove_table_written_in_doubt_fails){
  tp_remove_blocked("tp-rm-func", 0,
      "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
      "SELECT kv_prepare(1, 'g1')",
      "CREATE TEMP TABLE IF NOT EXISTS h(id); DELETE FROM h;"
      "INSERT INTO h SELECT kv_begin();"
      "SELECT kv_remove_table(id, 'acct') FROM h;"
      "SELECT kv_commit(id) FROM h",
      "SELECT kv_commit_prepared('g1')",
      "SELECT count(*) FROM kv_tables WHERE name='acct'");
}
END_TEST

START_TEST(test_twopc_remove_table_read_in_doubt_fails){
  tp_remove_blocked("tp-rm-read",
      "CREATE VIRTUAL TABLE seen USING kv_btree;"
      "INSERT INTO seen VALUES('k', 1)",
      "SELECT kv_begin(); SELECT kv_get(1, 'seen', 'k');"
      "SELECT kv_put(1, 'acct', 'a', 90); SELECT kv_prepare(1, 'g1')",
      "DROP TABLE main.seen",
      "SELECT kv_rollback_prepared('g1')",
      "SELECT count(*) FROM kv_tables WHERE name='seen'");
}
END_TEST

START_TEST(test_twopc_drop_table_in_doubt_fails){
  tp_remove_blocked("tp-rm-drop", 0,
      "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
      "SELECT kv_prepare(1, 'g1')",
      "DROP TABLE main.acct",
      "SELECT kv_rollback_prepared('g1')",
      "SELECT count(*) FROM sqlite_schema WHERE name='acct'");
}
END_TEST

START_TEST(test_twopc_drop_carrier_in_doubt_fails){
  tp_remove_blocked("tp-rm-carrier",
      "CREATE VIRTUAL TABLE acct_by_v USING kv_index(source=acct, "
      "expr='value')",
      "SELECT kv_begin(); SELECT kv_put(1, 'acct', 'a', 90);"
      "SELECT kv_prepare(1, 'g1')",
      "DROP TABLE main.acct_by_v",
      "SELECT kv_commit_prepared('g1')",
      "SELECT count(*) FROM kv_tables WHERE name='acct_by_v'");
}
END_TEST

/* The size of the resolution log of db's store. */
static long tp_log_size(sqlite3 *db){
  char *zDir = th_text(db, "SELECT dir FROM kv_tables WHERE name='acct'");
  char *zPath = sqlite3_mprintf("%s/prepared.log", zDir);
  FILE *f = fopen(zPath, "rb");
  long n = -1;
  if( f && fseek(f, 0, SEEK_END)==0 ) n = ftell(f);
  if( f ) fclose(f);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
  return n;
}

START_TEST(test_twopc_prepared_log_is_trimmed_while_running){
  char *zUri;
  sqlite3 *db;
  long nEight;
  int i;
  kv_engine_test_wal_config(4096, 0);
  kv_engine_test_resolved(0, 8, -1);
  zUri = tp_acct("tp-trim");
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(tpResolveMany(db, "d0_", 8), SQLITE_OK);
  nEight = tp_log_size(db);
  sqlite3_close(db);                       /* retires their WAL records */
  for(i=1; i<=4; i++){                     /* a day later, 8 more, ... */
    char z[8], *zOld;
    kv_engine_test_resolved(TP_SKEW*(i-1), 8, -1);
    db = tp_open(zUri, "wal");             /* yesterday's are young here */
    kv_engine_test_resolved(TP_SKEW*i, 8, -1);
    sqlite3_snprintf(sizeof(z), z, "d%d_", i);
    ck_assert_int_eq(tpResolveMany(db, z, 8), SQLITE_OK);
    ck_assert_int_le(tp_log_size(db), nEight);
    /* yesterday's decisions are forgotten while the store runs */
    zOld = sqlite3_mprintf("SELECT kv_commit_prepared('d%d_0')", i-1);
    tp_fails(db, zOld, SQLITE_NOTFOUND, "no prepared transaction");
    sqlite3_free(zOld);
    zOld = sqlite3_mprintf("SELECT kv_commit_prepared('d%d_7')", i);
    ck_assert_int_eq(th_int(db, zOld), 0);  /* today's are remembered */
    sqlite3_free(zOld);
    sqlite3_close(db);
  }
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT kv_commit_prepared('d4_0')"), 0);
  tp_fails(db, "SELECT kv_rollback_prepared('d4_7')", SQLITE_CONSTRAINT,
           "was committed");
  sqlite3_close(db);
  kv_engine_test_resolved(0, 0, -1);
  kv_engine_test_wal_config(0, 0);
  sqlite3_free(zUri);
}
END_TEST

/* A kill at rewrite stage _i keeps every decision younger than the keep
** time, and the log stays readable. */
START_TEST(test_twopc_prepared_log_trim_survives_kill){
  char *zUri = tp_acct("tp-trimkill");
  char zStage[4];
  const char *azArg[] = { "trim", zUri, zStage, 0 };
  sqlite3 *db;
  int j, st = 0;
  pid_t pid;
  sqlite3_snprintf(sizeof(zStage), zStage, "%d", _i);
  kv_engine_test_wal_config(4096, 0);
  pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL,
                "child status %d", st);
  kv_engine_test_resolved(TP_SKEW, 8, -1);
  db = tp_open(zUri, "wal");
  for(j=0; j<8; j++){
    char *z = sqlite3_mprintf("SELECT kv_commit_prepared('h%d')", j);
    ck_assert_int_eq(th_int(db, z), 0);
    sqlite3_free(z);
  }
  tp_fails(db, "SELECT kv_rollback_prepared('h7')", SQLITE_CONSTRAINT,
           "was committed");
  tp_fails(db, "SELECT kv_commit_prepared('g0')", SQLITE_NOTFOUND,
           "no prepared transaction 'g0'");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='k'"), 7);
  sqlite3_close(db);
  kv_engine_test_resolved(0, 0, -1);
  kv_engine_test_wal_config(0, 0);
  sqlite3_free(zUri);
}
END_TEST

/* A resolution log in the first format (no cid) is still read. */
START_TEST(test_twopc_prepared_log_first_format_is_read){
  char *zUri = tp_acct("tp-oldlog");
  sqlite3 *db = tp_open(zUri, "wal");
  char *zDir = th_text(db, "SELECT dir FROM kv_tables WHERE name='acct'");
  char *zPath = sqlite3_mprintf("%s/prepared.log", zDir);
  uint8_t a[8+9+4];
  FILE *f;
  sqlite3_close(db);
  wal_put_u32(a, 9+4);
  a[8] = 'r';
  wal_put_u64(a+9, (uint64_t)(time(0)-60)*1000);
  memcpy(a+17, "old1", 4);
  wal_put_u32(a+4, wal_crc32c(0, a+8, 9+4));
  f = fopen(zPath, "wb");
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fwrite(a, 1, sizeof(a), f), sizeof(a));
  fclose(f);
  db = tp_open(zUri, "wal");
  ck_assert_int_eq(th_int(db, "SELECT kv_rollback_prepared('old1')"), 0);
  tp_fails(db, "SELECT kv_commit_prepared('old1')", SQLITE_CONSTRAINT,
           "was rolled back");
  sqlite3_close(db);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
  sqlite3_free(zUri);
}
END_TEST

START_TEST(test_twopc_unnamed_prepare_is_presumed_committed){
  char *zUri = tp_acct("tp-unnamed");
  const char *azArg[] = { "unnamed", zUri, 0 };
  sqlite3 *db;
  int st = 0;
  pid_t pid = th_spawn(azArg);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFSIGNALED(st));
  db = tp_open(zUri, "wal");
  tp_prepared_is(db, "");
  ck_assert_int_eq(th_int(db, "SELECT value FROM acct WHERE key='a'"), 90);
  sqlite3_close(db);
  sqlite3_free(zUri);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("twopc");
  TCase *tc = tcase_create("mixed");
  tcase_add_loop_test(tc, test_twopc_mixed_commit_writes_one_marker, 0, 3);
  tcase_add_loop_test(tc, test_twopc_kv_only_commit_writes_no_marker, 0, 3);
  tcase_add_loop_test(tc, test_twopc_file_only_commit_writes_no_marker, 0, 3);
  tcase_add_loop_test(tc, test_twopc_kill_before_file_commit_keeps_neither_part,
                      0, 3);
  tcase_add_loop_test(tc, test_twopc_kill_after_file_commit_applies_kv_part,
                      0, 3);
  tcase_add_test(tc, test_twopc_markers_of_retired_segments_are_collected);
  tcase_add_test(tc, test_twopc_busy_commit_retried_stays_whole);
  suite_add_tcase(s, tc);
  tc = tcase_create("prepared");
  tcase_add_test(tc, test_twopc_prepared_stays_in_doubt_after_kill);
  tcase_add_test(tc, test_twopc_prepared_rollback_after_restart);
  tcase_add_test(tc, test_twopc_prepared_many_tables_in_doubt);
  tcase_add_test(tc, test_twopc_prepared_decision_survives_crash_in_commit);
  tcase_add_test(tc, test_twopc_prepared_record_never_retires);
  tcase_add_test(tc, test_twopc_prepared_bad_input_changes_nothing);
  tcase_add_test(tc, test_twopc_unnamed_prepare_is_presumed_committed);
  tcase_add_test(tc, test_twopc_remove_table_written_in_doubt_fails);
  tcase_add_test(tc, test_twopc_remove_table_read_in_doubt_fails);
  tcase_add_test(tc, test_twopc_drop_table_in_doubt_fails);
  tcase_add_test(tc, test_twopc_drop_carrier_in_doubt_fails);
  tcase_add_test(tc, test_twopc_prepared_log_is_trimmed_while_running);
  tcase_add_loop_test(tc, test_twopc_prepared_log_trim_survives_kill, 0, 3);
  tcase_add_test(tc, test_twopc_prepared_log_first_format_is_read);
  suite_add_tcase(s, tc);
  return s;
}
