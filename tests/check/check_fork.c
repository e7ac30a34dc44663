/*
** check_fork.c -- the "fork" suite, SQL level: forks and their isolation,
** forks of forks up to the depth limit, forks at a txid / time / restore
** point against plain-SQLite snapshots taken at each commit (the oracle),
** point-in-time policy, restore and rollback with their undo, buckets and
** their forks, pins, a writer committing while forks are taken, SIGKILL
** during fork and restore loops, and bad input that must change nothing.
**
** DEPOT_TORTURE_ITERS=N runs N kill rounds (default 3) in the kill test.
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A scratch directory with store.depot; zStore is its path. */
typedef struct Fx Fx;
struct Fx {
  char *zDir;
  char *zStore;
  sqlite3 *db;              /* :memory: connection with the extension */
};

/* The store of directory zDir: <zDir>/store.depot, or with
** $DEPOT_TEST_STORE_URI (tests/check/pg_suite.sh) that PostgreSQL server
** in a schema named after zDir. */
static char *fx_store_path(const char *zDir){
  const char *zPg = getenv("DEPOT_TEST_STORE_URI");
  const char *zBase = strrchr(zDir, '/');
  if( zPg && zPg[0] ){
    return sqlite3_mprintf("%s&schema=%s", zPg, zBase ? zBase+1 : zDir);
  }
  return sqlite3_mprintf("%s/store.depot", zDir);
}

/* The depot URI of (db, branch[, bucket]) in store zStore of zDir. */
static char *fx_uri(const char *zDir, const char *zStore, const char *zDb,
                    const char *zBranch, const char *zBucket){
  if( strncmp(zStore, "postgresql://", 13)==0 ){
    sqlite3_str *s = sqlite3_str_new(0);
    const char *z;
    sqlite3_str_appendf(s, "file:%s/app?vfs=depot&db=%s&branch=%s%s%s&store=",
        zDir, zDb, zBranch, zBucket ? "&bucket=" : "", zBucket ? zBucket : "");
    for(z=zStore; *z; z++){
      if( *z=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *z);
    }
    return sqlite3_str_finish(s);
  }
  return sqlite3_mprintf("file:%s?vfs=depot&db=%s&branch=%s%s%s",
      zStore, zDb, zBranch, zBucket ? "&bucket=" : "",
      zBucket ? zBucket : "");
}

static void fx_open(Fx *f, const char *zTag){
  f->zDir = th_tmpdir(zTag);
  f->zStore = fx_store_path(f->zDir);
  ck_assert_int_eq(depot_vfs_register(), SQLITE_OK);
  f->db = th_open(":memory:");
  sqlite3_extended_result_codes(f->db, 1);
}

static void fx_close(Fx *f){
  sqlite3_close(f->db);
  depot_fork_idle_close();
  sqlite3_free(f->zStore);
  sqlite3_free(f->zDir);
}

/* A connection to (db, branch[, bucket]) of the fixture's store. */
static sqlite3 *fx_db(Fx *f, const char *zDb, const char *zBranch,
                      const char *zBucket){
  char *z = fx_uri(f->zDir, f->zStore, zDb, zBranch, zBucket);
  sqlite3 *db = th_open(z);
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, 5000);
  sqlite3_free(z);
  return db;
}

/* Run a printf-formatted statement on the fixture's admin connection. */
static void fx_exec(Fx *f, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  th_exec(f->db, z);
  sqlite3_free(z);
}

static sqlite3_int64 fx_int(Fx *f, const char *zFmt, ...){
  va_list ap;
  sqlite3_int64 n;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  n = th_int(f->db, z);
  sqlite3_free(z);
  return n;
}

/* The text the formatted query gives must equal zWant. */
static void fx_text_eq(Fx *f, const char *zWant, const char *zFmt, ...){
  va_list ap;
  char *z, *zGot;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  zGot = th_text(f->db, z);
  ck_assert_msg(zGot && strcmp(zGot, zWant)==0, "%s: got '%s', want '%s'", z,
                zGot ? zGot : "NULL", zWant);
  sqlite3_free(zGot);
  sqlite3_free(z);
}

/* The text of a formatted query (sqlite3_malloc'd). */
static char *fx_text(Fx *f, const char *zFmt, ...){
  va_list ap;
  char *z, *zGot;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  zGot = th_text(f->db, z);
  sqlite3_free(z);
  return zGot;
}

/* Run zFmt on the admin connection expecting an error containing zSub. */
static void fx_fails(Fx *f, const char *zSub, const char *zFmt, ...){
  va_list ap;
  char *z, *zErr = 0;
  int rc;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  rc = th_try(f->db, z, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "%s: succeeded", z);
  ck_assert_msg(zErr && strstr(zErr, zSub), "%s: error '%s' lacks '%s'", z,
                zErr ? zErr : "", zSub);
  sqlite3_free(zErr);
  sqlite3_free(z);
}

/* The whole content of table t as text. */
static char *content(sqlite3 *db){
  return th_text(db, "SELECT coalesce(group_concat(a||':'||b, ','),'')"
                     " FROM (SELECT a, b FROM t ORDER BY a)");
}

static void assert_content(sqlite3 *db, const char *zWant){
  char *z = content(db);
  ck_assert_str_eq(z, zWant);
  sqlite3_free(z);
}

static void assert_integrity(sqlite3 *db){
  char *z = th_text(db, "PRAGMA integrity_check");
  ck_assert_str_eq(z, "ok");
  sqlite3_free(z);
}

/* ---- forks ---- */

START_TEST(test_fork_writes_never_show_on_the_other_side){
  Fx f;
  sqlite3 *pMain, *pDev;
  fx_open(&f, "fork-iso");
  pMain = fx_db(&f, "app", "main", 0);
  th_exec(pMain, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
                 "INSERT INTO t VALUES(1,'x'),(2,'y')");
  ck_assert_int_gt(fx_int(&f, "SELECT depot_fork(%Q,'app','main','dev')",
                          f.zStore), 0);
  pDev = fx_db(&f, "app", "dev", 0);
  assert_content(pDev, "1:x,2:y");
  th_exec(pMain, "INSERT INTO t VALUES(3,'main-only'); UPDATE t SET b='m'"
                 " WHERE a=1");
  th_exec(pDev, "INSERT INTO t VALUES(4,'dev-only'); DELETE FROM t"
                " WHERE a=2; CREATE TABLE d(z)");
  assert_content(pMain, "1:m,2:y,3:main-only");
  assert_content(pDev, "1:x,4:dev-only");
  ck_assert_int_eq(th_int(pMain, "SELECT count(*) FROM sqlite_schema"
                                 " WHERE name='d'"), 0);
  assert_integrity(pMain);
  assert_integrity(pDev);
  sqlite3_close(pDev);
  pDev = fx_db(&f, "app", "dev", 0);
  assert_content(pDev, "1:x,4:dev-only");
  sqlite3_close(pDev);
  sqlite3_close(pMain);
  fx_close(&f);
}
END_TEST

/* Integer arguments of the depot functions (a txid `at`, a branch id,
** seconds, a threshold, a byte cap) also take a real with an integral
** value, as JavaScript hosts bind every number; other reals are refused. */
START_TEST(test_depot_functions_take_integral_reals_as_integers){
  Fx f;
  sqlite3 *pMain;
  char *z, *zErr = 0;
  sqlite3_int64 iTx, iBranch;
  fx_open(&f, "fork-real");
  pMain = fx_db(&f, "app", "main", 0);
  th_exec(pMain, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  iTx = fx_int(&f, "SELECT head_txid FROM depot_branches(%Q) WHERE"
               " database='app' AND branch='main'", f.zStore);
  th_exec(pMain, "INSERT INTO t VALUES(2)");
  ck_assert_int_gt(fx_int(&f, "SELECT depot_fork(%Q,'app','main','old',"
                          " %lld.0)", f.zStore, iTx), 0);
  sqlite3_close(pMain);
  pMain = fx_db(&f, "app", "old", 0);
  ck_assert_int_eq(th_int(pMain, "SELECT count(*) FROM t"), 1);
  sqlite3_close(pMain);
  z = sqlite3_mprintf("SELECT depot_fork(%Q,'app','main','bad', %lld.5)",
                      f.zStore, iTx);
  ck_assert_int_ne(th_try(f.db, z, &zErr), SQLITE_OK);
  ck_assert_msg(strstr(zErr, "at must be")!=0, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(z);
  iBranch = fx_int(&f, "SELECT branch_id FROM depot_branches(%Q) WHERE"
                   " branch='old'", f.zStore);
  /* taken as branch id 2 (a live branch is dropped by name) */
  z = sqlite3_mprintf("SELECT depot_drop_branch(%Q, 'app', %lld.0)",
                      f.zStore, iBranch);
  ck_assert_int_ne(th_try(f.db, z, &zErr), SQLITE_OK);
  ck_assert_msg(strstr(zErr, "is the live branch old")!=0, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(z);
  z = sqlite3_mprintf("SELECT depot_pitr_policy(%Q, 60.0, 3600.0)",
                      f.zStore);
  zErr = th_text(f.db, z);
  ck_assert_str_eq(zErr, "{\"interval\":60,\"retention\":3600}");
  sqlite3_free(zErr);
  sqlite3_free(z);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_compact_threshold(%Q, 10.0)",
                          f.zStore), 10);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_quota(%Q, 'app', 1000000.0)",
                          f.zStore), 1000000);
  z = sqlite3_mprintf("SELECT depot_quota(%Q, 'app', 0.5)", f.zStore);
  ck_assert_int_ne(th_try(f.db, z, 0), SQLITE_OK);
  sqlite3_free(z);
  ck_assert_int_eq(fx_int(&f, "SELECT depot_quota(%Q, 'app')", f.zStore),
                   1000000);
  fx_close(&f);
}
END_TEST

START_TEST(test_fork_of_fork_reaches_depth_limit_then_fails_clearly){
  Fx f;
  sqlite3 *db;
  char zFrom[32] = "main", zNew[32], zSql[64];
  int i;
  fx_open(&f, "fork-depth");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(0,'root')");
  sqlite3_close(db);
  for(i=1; i<=DEPOT_MAX_FORK_DEPTH; i++){
    sqlite3_snprintf(sizeof(zNew), zNew, "f%d", i);
    fx_exec(&f, "SELECT depot_fork(%Q,'app',%Q,%Q)", f.zStore, zFrom, zNew);
    db = fx_db(&f, "app", zNew, 0);
    th_exec(db, sqlite3_snprintf(sizeof(zSql), zSql,
                                 "INSERT INTO t VALUES(%d,'x')", i));
    sqlite3_close(db);
    memcpy(zFrom, zNew, sizeof(zNew));
  }
  db = fx_db(&f, "app", zFrom, 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"),
                   DEPOT_MAX_FORK_DEPTH+1);
  assert_integrity(db);
  sqlite3_close(db);
  fx_fails(&f, "fork depth limit", "SELECT depot_fork(%Q,'app',%Q,'over')",
           f.zStore, zFrom);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_branches(%Q)"
                          " WHERE branch='over'", f.zStore), 0);
  /* a fork of a fork that has no commits of its own is not deeper */
  fx_exec(&f, "SELECT depot_fork(%Q,'app','f1','g1')", f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','g1','g2')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT parent FROM depot_branches(%Q)"
      " WHERE branch='g2'", f.zStore), fx_int(&f, "SELECT branch_id FROM"
      " depot_branches(%Q) WHERE branch='f1'", f.zStore));
  fx_close(&f);
}
END_TEST

/* A chain of forks, each updating scattered rows of a many-page table, reads
** exactly what a plain file given the same statements holds (pages of one
** level interleave with pages of others, so fall-through skips and gaps
** are both exercised). */
START_TEST(test_fork_chain_reads_match_plain_file){
  Fx f;
  sqlite3 *pPlain, *db;
  char *zPlain, zFrom[16] = "main", zNew[16], *zA, *zB;
  int i;
  fx_open(&f, "fork-chain");
  zPlain = sqlite3_mprintf("%s/plain.db", f.zDir);
  pPlain = th_open(zPlain);
  db = fx_db(&f, "app", "main", 0);
  zA = "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
       "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c"
       " WHERE i<3000) INSERT INTO t SELECT i, printf('%0300d', i) FROM c";
  th_exec(pPlain, zA);
  th_exec(db, zA);
  sqlite3_close(db);
  for(i=1; i<=6; i++){
    char *zSql = sqlite3_mprintf("UPDATE t SET b=b||'-%d' WHERE a%%%d=%d;"
        "DELETE FROM t WHERE a BETWEEN %d AND %d", i, 7+i, i, i*400, i*400+20);
    sqlite3_snprintf(sizeof(zNew), zNew, "c%d", i);
    fx_exec(&f, "SELECT depot_fork(%Q,'app',%Q,%Q)", f.zStore, zFrom, zNew);
    db = fx_db(&f, "app", zNew, 0);
    th_exec(db, zSql);
    th_exec(pPlain, zSql);
    sqlite3_free(zSql);
    zA = th_text(db, "SELECT group_concat(a||b) FROM t");
    zB = th_text(pPlain, "SELECT group_concat(a||b) FROM t");
    ck_assert_str_eq(zA, zB);
    assert_integrity(db);
    sqlite3_free(zA);
    sqlite3_free(zB);
    sqlite3_close(db);
    memcpy(zFrom, zNew, sizeof(zNew));
  }
  sqlite3_close(pPlain);
  sqlite3_free(zPlain);
  fx_close(&f);
}
END_TEST

/* The oracle: the same statements on a plain file and on depot; after each
** commit the plain file's content is recorded with the commit's txid and
** time, and some commits get a restore point. */
#define ORACLE_STEPS 12

typedef struct Snap Snap;
struct Snap {
  sqlite3_int64 iTxid;
  char *zTime;
  char *zContent;
};

static void oracle_build(Fx *f, Snap *aSnap){
  sqlite3 *pPlain, *pDepot;
  char *zPlain = sqlite3_mprintf("%s/plain.db", f->zDir);
  int i;
  pPlain = th_open(zPlain);
  pDepot = fx_db(f, "app", "main", 0);
  fx_exec(f, "SELECT depot_pitr_policy(%Q,'app',0,3600)", f->zStore);
  for(i=0; i<ORACLE_STEPS; i++){
    char *z = i==0
      ? sqlite3_mprintf("CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT)")
      : sqlite3_mprintf("INSERT INTO t VALUES(%d, hex(randomblob(%d)));"
                        "UPDATE t SET b=b||'u' WHERE a=%d; DELETE FROM t"
                        " WHERE a=%d", i*10, 10+i*300, (i*7)%(i*10),
                        i%4==0 ? (i-2)*10 : -1);
    char *zRows;
    th_exec(pPlain, z);
    /* the same rows in depot: copy them from the plain file exactly */
    if( i==0 ) th_exec(pDepot, z);
    if( i>0 ){
      sqlite3_stmt *pS;
      ck_assert_int_eq(sqlite3_prepare_v2(pPlain, "SELECT a, b FROM t", -1,
                                          &pS, 0), SQLITE_OK);
      th_exec(pDepot, "BEGIN; DELETE FROM t");
      while( sqlite3_step(pS)==SQLITE_ROW ){
        zRows = sqlite3_mprintf("INSERT INTO t VALUES(%lld,%Q)",
            sqlite3_column_int64(pS, 0), sqlite3_column_text(pS, 1));
        th_exec(pDepot, zRows);
        sqlite3_free(zRows);
      }
      sqlite3_finalize(pS);
      th_exec(pDepot, "COMMIT");
    }
    aSnap[i].zContent = content(pPlain);
    aSnap[i].iTxid = fx_int(f, "SELECT max(txid) FROM depot_commits(%Q,"
                            "'app','main')", f->zStore);
    aSnap[i].zTime = fx_text(f, "SELECT time FROM depot_commits(%Q,'app',"
        "'main') WHERE txid=%lld", f->zStore, aSnap[i].iTxid);
    if( i%3==1 ){
      fx_exec(f, "SELECT depot_restore_point(%Q,'app','main','rp%d')",
              f->zStore, i);
    }
    sqlite3_free(z);
    usleep(3000);
  }
  sqlite3_close(pDepot);
  sqlite3_close(pPlain);
  sqlite3_free(zPlain);
}

START_TEST(test_fork_at_txid_time_and_restore_point_matches_oracle){
  Fx f;
  Snap aSnap[ORACLE_STEPS];
  int i;
  fx_open(&f, "fork-oracle");
  memset(aSnap, 0, sizeof(aSnap));
  oracle_build(&f, aSnap);
  for(i=0; i<ORACLE_STEPS; i++){
    sqlite3 *db;
    char zName[32];
    sqlite3_snprintf(sizeof(zName), zName, "tx%d", i);
    fx_exec(&f, "SELECT depot_fork(%Q,'app','main',%Q,%lld)", f.zStore, zName,
            aSnap[i].iTxid);
    db = fx_db(&f, "app", zName, 0);
    assert_content(db, aSnap[i].zContent);
    assert_integrity(db);
    sqlite3_close(db);
    sqlite3_snprintf(sizeof(zName), zName, "tm%d", i);
    fx_exec(&f, "SELECT depot_fork(%Q,'app','main',%Q,%Q)", f.zStore, zName,
            aSnap[i].zTime);
    db = fx_db(&f, "app", zName, 0);
    assert_content(db, aSnap[i].zContent);
    sqlite3_close(db);
    if( i%3==1 ){
      sqlite3_snprintf(sizeof(zName), zName, "rp-fork%d", i);
      fx_exec(&f, "SELECT depot_fork(%Q,'app','main',%Q,'rp%d')", f.zStore,
              zName, i);
      db = fx_db(&f, "app", zName, 0);
      assert_content(db, aSnap[i].zContent);
      sqlite3_close(db);
    }
  }
  for(i=0; i<ORACLE_STEPS; i++){
    sqlite3_free(aSnap[i].zTime);
    sqlite3_free(aSnap[i].zContent);
  }
  fx_close(&f);
}
END_TEST

/* The time of a commit that depot_commits lists but the point-in-time
** interval does not keep (a later commit of the same interval is kept
** instead) names no state: the error says why, instead of only claiming
** that there is no commit at or before a time where there is one. */
START_TEST(test_pitr_time_of_an_unretained_commit_says_why){
  Fx f;
  sqlite3 *db;
  char *z;
  fx_open(&f, "fork-pitrwhy");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  usleep(20000);
  th_exec(db, "INSERT INTO t VALUES(2,'b')");
  /* intervals start at the epoch: with the default 300 s one an interval
  ** could end between these commits; a 100-year one does not */
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,'app',3153600000,604800)",
          f.zStore);
  z = fx_text(&f, "SELECT time FROM depot_commits(%Q,'app') WHERE txid=2",
              f.zStore);
  fx_fails(&f, "has no commit at or before", "SELECT depot_fork(%Q,'app',"
           "'main','x',%Q)", f.zStore, z);
  fx_fails(&f, "retained for point-in-time restore (it keeps the last commit"
           " of each 3153600000-second interval", "SELECT depot_fork(%Q,"
           "'app','main','x',%Q)", f.zStore, z);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','x',2)", f.zStore);
  sqlite3_free(z);
  sqlite3_close(db);
  fx_close(&f);
}
END_TEST

/* A pinned commit (here a restore point's) is a point-in-time target even
** when a later commit of its interval replaces it as the interval's last:
** SQL.md keeps "the last commit of each interval ..., plus each branch head
** and every pinned point", and so does the error message. */
START_TEST(test_pitr_time_of_a_pinned_commit_resolves_to_it){
  Fx f;
  sqlite3 *db;
  char *z;
  fx_open(&f, "fork-pitrpin");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,'app',3153600000,604800)",
          f.zStore);
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','rp')", f.zStore);
  usleep(20000);
  th_exec(db, "INSERT INTO t VALUES(2,'b')");
  usleep(20000);
  th_exec(db, "INSERT INTO t VALUES(3,'c')");
  sqlite3_close(db);
  z = fx_text(&f, "SELECT time FROM depot_commits(%Q,'app') WHERE txid=2",
              f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','x',%Q)", f.zStore, z);
  ck_assert_int_eq(fx_int(&f, "SELECT fork_txid FROM depot_branches(%Q,'app')"
                          " WHERE branch='x'", f.zStore), 2);
  db = fx_db(&f, "app", "x", 0);
  assert_content(db, "1:a");
  sqlite3_close(db);
  /* the commit after it is no target (txid 4 is its interval's last), so
  ** its time resolves to the newest retained commit before it: the pin */
  sqlite3_free(z);
  z = fx_text(&f, "SELECT time FROM depot_commits(%Q,'app') WHERE txid=3",
              f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','y',%Q)", f.zStore, z);
  ck_assert_int_eq(fx_int(&f, "SELECT fork_txid FROM depot_branches(%Q,'app')"
                          " WHERE branch='y'", f.zStore), 2);
  sqlite3_free(z);
  fx_close(&f);
}
END_TEST

START_TEST(test_pitr_policy_retention_interval_and_off){
  Fx f;
  sqlite3 *db;
  char *z;
  fx_open(&f, "fork-pitr");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  fx_text_eq(&f, "{\"interval\":300,\"retention\":604800}",
             "SELECT depot_pitr_policy(%Q)", f.zStore);
  /* a time two hours ago is outside a one-hour retention */
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,'app',0,3600)", f.zStore);
  fx_fails(&f, "outside the point-in-time retention", "SELECT depot_fork(%Q,"
      "'app','main','old',strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ','now',"
      "'-2 hours'))", f.zStore);
  /* within retention but before the first commit */
  fx_fails(&f, "no commit at or before", "SELECT depot_fork(%Q,'app','main',"
      "'old',strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ','now','-30 minutes'))",
      f.zStore);
  /* an interval longer than the history keeps only the head: a time between
  ** two commits resolves to nothing retained */
  usleep(20000);
  z = th_text(f.db, "SELECT strftime('%Y-%m-%dT%H:%M:%fZ','now')");
  usleep(20000);
  th_exec(db, "INSERT INTO t VALUES(2,'b')");
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,'app',3153600000,3600)", f.zStore);
  fx_fails(&f, "no commit at or before", "SELECT depot_fork(%Q,'app','main',"
           "'old',%Q)", f.zStore, z);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,'app',0,3600)", f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','old',%Q)", f.zStore, z);
  sqlite3_free(z);
  /* off */
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,'app',0,0)", f.zStore);
  fx_fails(&f, "point-in-time restore is off", "SELECT depot_fork(%Q,'app',"
      "'main','old2',strftime('%%Y-%%m-%%dT%%H:%%M:%%SZ','now'))", f.zStore);
  /* the store default applies to other databases */
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,60,120)", f.zStore);
  fx_text_eq(&f, "{\"interval\":60,\"retention\":120}",
             "SELECT depot_pitr_policy(%Q,'other')", f.zStore);
  sqlite3_close(db);
  db = fx_db(&f, "app", "old", 0);
  assert_content(db, "1:a");
  sqlite3_close(db);
  fx_close(&f);
}
END_TEST

/* ---- restore and rollback ---- */

START_TEST(test_restore_then_undo_restores_both_ways){
  Fx f;
  sqlite3 *db, *pOld;
  char *zUndo;
  sqlite3_int64 iOld;
  fx_open(&f, "fork-restore");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','good')", f.zStore);
  th_exec(db, "INSERT INTO t VALUES(2,'bad'); DELETE FROM t WHERE a=1");
  iOld = fx_int(&f, "SELECT branch_id FROM depot_branches(%Q,'app')"
                " WHERE branch='main' AND state='live'", f.zStore);
  zUndo = fx_text(&f, "SELECT depot_restore(%Q,'app','main','good')",
                  f.zStore);
  ck_assert_ptr_nonnull(zUndo);
  fx_text_eq(&f, "frozen", "SELECT state FROM depot_branches(%Q) WHERE"
             " branch_id=%lld", f.zStore, iOld);
  fx_text_eq(&f, "undo", "SELECT kind FROM depot_restore_points(%Q,'app')"
             " WHERE name=%Q", f.zStore, zUndo);
  /* the connection on the old branch reads it and cannot write */
  assert_content(db, "2:bad");
  ck_assert_int_eq(th_try(db, "INSERT INTO t VALUES(3,'lost')", 0),
                   SQLITE_READONLY_DBMOVED);
  pOld = db;
  db = fx_db(&f, "app", "main", 0);
  assert_content(db, "1:a");
  th_exec(db, "INSERT INTO t VALUES(5,'after')");
  sqlite3_close(db);
  /* undo: back to the state before the restore */
  fx_exec(&f, "SELECT depot_restore(%Q,'app','main',%Q)", f.zStore, zUndo);
  db = fx_db(&f, "app", "main", 0);
  assert_content(db, "2:bad");
  assert_integrity(db);
  sqlite3_close(db);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_branches(%Q,'app')"
                          " WHERE branch='main' AND state='live'", f.zStore), 1);
  sqlite3_close(pOld);
  sqlite3_free(zUndo);
  fx_close(&f);
}
END_TEST

START_TEST(test_rollback_then_undo_returns_to_the_rolled_back_state){
  Fx f;
  sqlite3 *db;
  fx_open(&f, "fork-rollback");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a'); INSERT INTO t VALUES(2,'b');"
              "INSERT INTO t VALUES(3,'c')");
  sqlite3_close(db);
  fx_fails(&f, "no restore or rollback to undo",
           "SELECT depot_rollback(%Q,'app','main')", f.zStore);
  fx_exec(&f, "SELECT depot_rollback(%Q,'app','main',2)", f.zStore);
  db = fx_db(&f, "app", "main", 0);
  assert_content(db, "1:a");
  th_exec(db, "INSERT INTO t VALUES(9,'z')");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_rollback(%Q,'app','main')", f.zStore);
  db = fx_db(&f, "app", "main", 0);
  assert_content(db, "1:a,2:b,3:c");
  sqlite3_close(db);
  /* undoing the undo returns to the rolled-back branch's head */
  fx_exec(&f, "SELECT depot_rollback(%Q,'app','main')", f.zStore);
  db = fx_db(&f, "app", "main", 0);
  assert_content(db, "1:a,9:z");
  assert_integrity(db);
  sqlite3_close(db);
  fx_close(&f);
}
END_TEST

/* ---- buckets ---- */

START_TEST(test_bucket_fork_reads_and_writes_the_capped_fork_only){
  Fx f;
  sqlite3 *pSrc, *pB, *pOther;
  fx_open(&f, "fork-bucket");
  pSrc = fx_db(&f, "app", "main", 0);
  th_exec(pSrc, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
                "INSERT INTO t VALUES(1,'a')");
  pOther = fx_db(&f, "other", "main", 0);
  th_exec(pOther, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
                  "INSERT INTO t VALUES(7,'o')");
  ck_assert_int_gt(fx_int(&f, "SELECT depot_fork_bucket(%Q,'main','b2')",
                          f.zStore), 0);
  /* after the fork: source writes, a new database in the source */
  th_exec(pSrc, "INSERT INTO t VALUES(2,'after')");
  sqlite3_close(pOther);
  pOther = fx_db(&f, "late", "main", 0);
  th_exec(pOther, "CREATE TABLE t(a, b)");
  sqlite3_close(pOther);
  pB = fx_db(&f, "app", "main", "b2");
  assert_content(pB, "1:a");
  ck_assert_int_eq(fx_int(&f, "SELECT inherited FROM depot_databases(%Q,"
                          "'b2') WHERE database='app'", f.zStore), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_databases(%Q,"
                          "'b2') WHERE database='late'", f.zStore), 0);
  th_exec(pB, "INSERT INTO t VALUES(3,'in-b2')");
  assert_content(pB, "1:a,3:in-b2");
  assert_content(pSrc, "1:a,2:after");
  ck_assert_int_eq(fx_int(&f, "SELECT inherited FROM depot_databases(%Q,"
                          "'b2') WHERE database='app'", f.zStore), 0);
  /* dropping an inherited name in b2 hides it there only */
  fx_exec(&f, "SELECT depot_drop_branch(%Q,'b2/other','main')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_databases(%Q,"
                          "'b2') WHERE database='other'", f.zStore), 0);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_databases(%Q,"
                          "'main') WHERE database='other'", f.zStore), 1);
  /* forks inside a bucket */
  fx_exec(&f, "SELECT depot_fork(%Q,'b2/app','main','dev')", f.zStore);
  pOther = fx_db(&f, "app", "dev", "b2");
  assert_content(pOther, "1:a,3:in-b2");
  assert_integrity(pOther);
  sqlite3_close(pOther);
  sqlite3_close(pB);
  pB = fx_db(&f, "app", "main", "b2");
  assert_content(pB, "1:a,3:in-b2");
  sqlite3_close(pB);
  sqlite3_close(pSrc);
  fx_close(&f);
}
END_TEST

/* The store sequence `at` of depot_fork_bucket, bound as a double the way
** JavaScript hosts bind every number, is that sequence; 1.5 is refused. */
START_TEST(test_bucket_fork_takes_an_integral_real_sequence){
  Fx f;
  sqlite3 *db;
  sqlite3_stmt *pStmt;
  sqlite3_int64 iSeq;
  fx_open(&f, "fork-bucket-real");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  iSeq = fx_int(&f, "SELECT depot_fork_bucket(%Q,'main','b0')", f.zStore);
  th_exec(db, "INSERT INTO t VALUES(2,'b')");
  sqlite3_close(db);
  ck_assert_int_eq(sqlite3_prepare_v2(f.db, "SELECT depot_fork_bucket(?,"
                   "'main','b1',?)", -1, &pStmt, 0), SQLITE_OK);
  sqlite3_bind_text(pStmt, 1, f.zStore, -1, SQLITE_TRANSIENT);
  sqlite3_bind_double(pStmt, 2, (double)iSeq);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  ck_assert_int_eq(sqlite3_column_int64(pStmt, 0), iSeq);
  sqlite3_finalize(pStmt);
  db = fx_db(&f, "app", "main", "b1");
  assert_content(db, "1:a");
  sqlite3_close(db);
  fx_fails(&f, "got 1.5", "SELECT depot_fork_bucket(%Q,'main','b2',1.5)",
           f.zStore);
  fx_close(&f);
}
END_TEST

/* A bucket fork at a time T sees the catalog as it was at T: a restore and
** a fork made after the last commit before T are part of it, a commit after
** T is not. */
START_TEST(test_bucket_fork_at_a_time_sees_catalog_changes_before_it){
  Fx f;
  sqlite3 *db;
  char *zT;
  fx_open(&f, "fork-bucket-time");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a'); INSERT INTO t VALUES(2,'b')");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,0,86400)", f.zStore);
  fx_exec(&f, "SELECT depot_restore(%Q,'app','main',2)", f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','dev')", f.zStore);
  usleep(30000);
  zT = fx_text(&f, "SELECT strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ','now')");
  usleep(30000);
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "INSERT INTO t VALUES(3,'later')");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_fork_bucket(%Q,'main','b1',%Q)", f.zStore, zT);
  db = fx_db(&f, "app", "main", "b1");
  assert_content(db, "1:a");
  sqlite3_close(db);
  db = fx_db(&f, "app", "dev", "b1");
  assert_content(db, "1:a");
  sqlite3_close(db);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_verify(%Q)",
                          f.zStore), 0);
  sqlite3_free(zT);
  fx_close(&f);
}
END_TEST

/* depot_commits takes BUCKET/NAME like the branch functions: the commits
** the bucket's own branch made, none for a name it only inherits. */
START_TEST(test_depot_commits_lists_the_commits_of_a_bucket_database){
  Fx f;
  sqlite3 *db;
  fx_open(&f, "fork-commits-bucket");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_fork_bucket(%Q,'main','stg')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_commits(%Q,"
                          "'stg/app')", f.zStore), 0);
  db = fx_db(&f, "app", "main", "stg");
  th_exec(db, "INSERT INTO t VALUES(2,'b'); INSERT INTO t VALUES(3,'c')");
  sqlite3_close(db);
  fx_text_eq(&f, "1,2", "SELECT group_concat(txid) FROM depot_commits(%Q,"
             "'stg/app')", f.zStore);
  fx_text_eq(&f, "1,2", "SELECT group_concat(txid) FROM depot_commits(%Q,"
             "'main/app')", f.zStore);
  fx_text_eq(&f, "1,2", "SELECT group_concat(txid) FROM depot_commits(%Q,"
             "'app', 'main')", f.zStore);
  fx_fails(&f, "bucket nob does not exist", "SELECT * FROM depot_commits(%Q,"
           "'nob/app')", f.zStore);
  fx_fails(&f, "NAME or BUCKET/NAME", "SELECT * FROM depot_commits(%Q,"
           "'/app')", f.zStore);
  fx_close(&f);
}
END_TEST

START_TEST(test_drop_branch_releases_its_pins){
  Fx f;
  sqlite3 *db;
  fx_open(&f, "fork-drop");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','dev')", f.zStore);
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','rp')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT pins FROM depot_branches(%Q,'app')"
                          " WHERE branch='main'", f.zStore), 2);
  fx_exec(&f, "SELECT depot_drop_branch(%Q,'app','dev')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT pins FROM depot_branches(%Q,'app')"
                          " WHERE branch='main'", f.zStore), 1);
  fx_text_eq(&f, "dropped", "SELECT state FROM depot_branches(%Q,'app')"
             " WHERE branch='dev'", f.zStore);
  fx_exec(&f, "SELECT depot_drop_restore_point(%Q,'app','rp')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT pins FROM depot_branches(%Q,'app')"
                          " WHERE branch='main'", f.zStore), 0);
  fx_fails(&f, "has no branch dev", "SELECT depot_fork(%Q,'app','dev','x')",
           f.zStore);
  fx_close(&f);
}
END_TEST

/* Every message logged through SQLITE_CONFIG_LOG, one per line. */
static char zForkLog[4096];
static void fork_log(void *pArg, int rc, const char *zMsg){
  size_t n = strlen(zForkLog);
  (void)pArg;
  snprintf(zForkLog+n, sizeof(zForkLog)-n, "(%d) %s\n", rc, zMsg);
}

START_TEST(test_reader_of_a_reclaimed_dropped_branch_gets_cantopen){
  /* A connection keeps reading a branch dropped under it until depot_gc
  ** reclaims the branch; then its next read fails with SQLITE_CANTOPEN and
  ** a log message saying why, not with SQLITE_CORRUPT. */
  Fx f;
  sqlite3 *db, *pDev;
  int rc;
  sqlite3_shutdown();
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_LOG, fork_log, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
  fx_open(&f, "fork-reclaimed");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','dev')", f.zStore);
  pDev = fx_db(&f, "app", "dev", 0);
  th_exec(pDev, "INSERT INTO t VALUES(2,'dev')");
  fx_exec(&f, "SELECT depot_drop_branch(%Q,'app','dev')", f.zStore);
  assert_content(pDev, "1:a,2:dev");
  fx_exec(&f, "SELECT depot_gc(%Q)", f.zStore);
  zForkLog[0] = 0;
  rc = th_try(pDev, "SELECT count(*) FROM t", 0);
  ck_assert_msg(rc==SQLITE_CANTOPEN, "rc %d, log: %s", rc, zForkLog);
  ck_assert_msg(strstr(zForkLog, "depot: database app branch dev: branch")
      && strstr(zForkLog, "was dropped and then reclaimed by depot_gc;"
                " reopen the database"), "log: %s", zForkLog);
  ck_assert_int_eq(th_try(pDev, "INSERT INTO t VALUES(3,'x')", 0),
                   SQLITE_CANTOPEN);
  /* the parent is untouched */
  assert_content(db, "1:a");
  assert_integrity(db);
  sqlite3_close(pDev);
  sqlite3_close(db);
  fx_close(&f);
}
END_TEST

/* ---- concurrency ---- */

typedef struct Writer Writer;
struct Writer {
  Fx *f;
  int bStop;                /* __atomic access */
  int nCommit;              /* __atomic access */
};

/* The writer's commits so far. */
static int writer_commits(Writer *w){
  return __atomic_load_n(&w->nCommit, __ATOMIC_ACQUIRE);
}

/* Wait (up to 60 s) until the writer has committed more than n times. */
static void writer_wait_past(Writer *w, int n){
  int i;
  for(i=0; i<60000 && writer_commits(w)<=n; i++) usleep(1000);
  ck_assert_int_gt(writer_commits(w), n);
}

static void *writer_main(void *pArg){
  Writer *w = (Writer*)pArg;
  sqlite3 *db = fx_db(w->f, "app", "main", 0);
  int i;
  for(i=2; !__atomic_load_n(&w->bStop, __ATOMIC_ACQUIRE); i++){
    char *z = sqlite3_mprintf("BEGIN; INSERT INTO t VALUES(%d,'w');"
                              "UPDATE c SET n=%d; COMMIT", i, i);
    if( sqlite3_exec(db, z, 0, 0, 0)==SQLITE_OK ){
      __atomic_add_fetch(&w->nCommit, 1, __ATOMIC_RELEASE);
    }else{
      sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
    }
    sqlite3_free(z);
    usleep(500);   /* the store's busy handler sleeps; let others in */
  }
  sqlite3_close(db);
  return 0;
}

START_TEST(test_fork_while_parent_writer_commits_sees_a_whole_commit){
  Fx f;
  Writer w;
  pthread_t t;
  sqlite3 *db;
  int i, n0;
  fx_open(&f, "fork-conc");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "CREATE TABLE c(n); INSERT INTO c VALUES(1);"
              "INSERT INTO t VALUES(1,'w')");
  sqlite3_close(db);
  memset(&w, 0, sizeof(w));
  w.f = &f;
  ck_assert_int_eq(pthread_create(&t, 0, writer_main, &w), 0);
  /* the forks start once the writer commits (a thread can start late)
  ** and go on (up to 400) until it has committed again meanwhile */
  writer_wait_past(&w, 0);
  n0 = writer_commits(&w);
  for(i=0; i<20 || (i<400 && writer_commits(&w)<=n0); i++){
    char zName[16];
    sqlite3_snprintf(sizeof(zName), zName, "f%d", i);
    fx_exec(&f, "SELECT depot_fork(%Q,'app','main',%Q)", f.zStore, zName);
    db = fx_db(&f, "app", zName, 0);
    ck_assert_int_eq(th_int(db, "SELECT n FROM c"),
                     th_int(db, "SELECT count(*) FROM t"));
    ck_assert_int_eq(th_int(db, "SELECT n FROM c"),
                     th_int(db, "SELECT max(a) FROM t"));
    assert_integrity(db);
    sqlite3_close(db);
    usleep(2000);
  }
  __atomic_store_n(&w.bStop, 1, __ATOMIC_RELEASE);
  pthread_join(t, 0);
  ck_assert_int_gt(w.nCommit, n0);
  fx_close(&f);
}
END_TEST

/* ---- crashes ---- */

/* Child: forks f0, f1, ... and restores main to the restore point r and
** back, acknowledging each finished operation on fd. */
static void kill_child(Fx *f, int fd){
  sqlite3 *db = th_open(":memory:");
  int i;
  for(i=0; ; i++){
    char *z = sqlite3_mprintf(i%2 ? "SELECT depot_restore(%Q,'app','main',"
        "'r')" : "SELECT depot_fork(%Q,'app','main','f%d')", f->zStore, i);
    if( sqlite3_exec(db, z, 0, 0, 0)!=SQLITE_OK ) _exit(5);
    sqlite3_free(z);
    if( write(fd, &i, sizeof(i))!=(ssize_t)sizeof(i) ) _exit(6);
  }
}

/* After a kill: every live branch opens and passes integrity_check, the
** fork names are f0, f2, ... with no gap, the pins match the rows. */
static void kill_check(Fx *f, int nAck){
  sqlite3_int64 nFork = fx_int(f, "SELECT count(*) FROM depot_branches(%Q,"
      "'app') WHERE branch LIKE 'f%%'", f->zStore);
  sqlite3_int64 nMaxFork = fx_int(f, "SELECT coalesce(max(CAST(substr(branch,"
      "2) AS INTEGER)),-2) FROM depot_branches(%Q,'app') WHERE branch LIKE"
      " 'f%%'", f->zStore);
  sqlite3_stmt *pS;
  ck_assert_int_eq(nFork, nMaxFork/2+1);
  ck_assert_msg(nMaxFork>=nAck-1 && nMaxFork<=nAck+1, "acked %d, fork %lld",
                nAck, nMaxFork);
  ck_assert_int_eq(fx_int(f, "SELECT count(*) FROM depot_branches(%Q,'app')"
      " WHERE branch='main' AND state='live'", f->zStore), 1);
  ck_assert_int_eq(sqlite3_prepare_v2(f->db, "SELECT branch FROM"
      " depot_branches(?1,'app') WHERE state='live'", -1, &pS, 0), SQLITE_OK);
  sqlite3_bind_text(pS, 1, f->zStore, -1, SQLITE_STATIC);
  while( sqlite3_step(pS)==SQLITE_ROW ){
    sqlite3 *db = fx_db(f, "app", (const char*)sqlite3_column_text(pS, 0), 0);
    assert_content(db, "1:a");
    assert_integrity(db);
    sqlite3_close(db);
  }
  sqlite3_finalize(pS);
}

static void kill_round(Fx *f, unsigned seed){
  int fd[2], i, nAck = -1, st;
  pid_t pid;
  ck_assert_int_eq(pipe(fd), 0);
  pid = fork();
  if( pid==0 ){
    close(fd[0]);
    kill_child(f, fd[1]);
  }
  close(fd[1]);
  usleep(10000 + (seed*7919)%100000);
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
  while( read(fd[0], &i, sizeof(i))==(ssize_t)sizeof(i) ) nAck = i;
  close(fd[0]);
  kill_check(f, nAck);
}

START_TEST(test_sigkill_during_fork_and_restore_leaves_none_or_all){
  Fx f;
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  int nIter = zIters ? atoi(zIters) : 3, i;
  sqlite3 *db;
  fx_open(&f, "fork-kill");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','r')", f.zStore);
  for(i=0; i<nIter; i++){
    char *zDir = f.zDir, *zStore = f.zStore, zTag[32];
    kill_round(&f, 1+(unsigned)i*2654435761u%1000);
    /* next round in a fresh store */
    f.zDir = th_tmpdir(sqlite3_snprintf(sizeof(zTag), zTag, "fork-kill-%d",
                                        i));
    f.zStore = fx_store_path(f.zDir);
    sqlite3_free(zDir);
    sqlite3_free(zStore);
    db = fx_db(&f, "app", "main", 0);
    th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
                "INSERT INTO t VALUES(1,'a')");
    sqlite3_close(db);
    fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','r')", f.zStore);
  }
  fx_close(&f);
}
END_TEST

/* Closing the idle store handle (twice: the second finds none) leaves the
** next operation to reopen the store, and nothing on disk changes. */
START_TEST(test_fork_idle_close_then_next_operation_reopens_the_store){
  Fx f;
  sqlite3 *db;
  char *z;
  fx_open(&f, "fork-idle");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(7)");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','r1')", f.zStore);
  depot_fork_idle_close();
  depot_fork_idle_close();
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','dev','r1')", f.zStore);
  depot_fork_idle_close();
  z = fx_text(&f, "SELECT group_concat(branch, ',') FROM"
              " (SELECT branch FROM depot_branches(%Q) ORDER BY branch)",
              f.zStore);
  ck_assert_str_eq(z, "dev,main");
  sqlite3_free(z);
  db = fx_db(&f, "app", "dev", 0);
  ck_assert_int_eq(th_int(db, "SELECT a FROM t"), 7);
  sqlite3_close(db);
  fx_close(&f);
}
END_TEST

/* A process that forked after a branch operation (which keeps its store
** handle idle) and then uses the store in the child: the child's commits
** survive the parent closing its store handles.  The idle handle is closed
** at fork(), not carried into the child: there, SQLite's unix VFS would
** give the child's connection that handle's lock and -shm bookkeeping
** (taking no real lock), and the parent's close of its last connection
** would checkpoint and delete the -wal the child still appends to. */
START_TEST(test_fork_idle_handle_is_not_inherited_by_a_child_process){
  Fx f;
  sqlite3 *db;
  int toChild[2], toParent[2], st = 0;
  char ch = 0;
  pid_t pid;
  fx_open(&f, "fork-idle-child");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY)");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','r')", f.zStore);
  ck_assert_int_eq(pipe(toChild), 0);
  ck_assert_int_eq(pipe(toParent), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    int i, rc;
    char *zUri = fx_uri(f.zDir, f.zStore, "app", "main", 0);
    rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI, 0);
    if( rc==SQLITE_OK ) sqlite3_busy_timeout(db, 5000);
    if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "INSERT INTO t VALUES(1)", 0,
                                          0, 0);
    if( rc!=SQLITE_OK ) _exit(3);
    if( write(toParent[1], "x", 1)!=1 || read(toChild[0], &ch, 1)!=1 ){
      _exit(4);
    }
    for(i=2; i<=11; i++){
      char *z = sqlite3_mprintf("INSERT INTO t VALUES(%d)", i);
      if( sqlite3_exec(db, z, 0, 0, 0)!=SQLITE_OK ) _exit(5);
      sqlite3_free(z);
    }
    _exit(0);        /* as if killed: the connection is not closed */
  }
  ck_assert_int_eq(read(toParent[0], &ch, 1), 1);
  depot_fork_idle_close();    /* the parent's last handle on the store */
  ck_assert_int_eq(write(toChild[1], "x", 1), 1);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  close(toChild[0]); close(toChild[1]);
  close(toParent[0]); close(toParent[1]);
  db = fx_db(&f, "app", "main", 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 11);
  sqlite3_close(db);
  fx_close(&f);
}
END_TEST

/* ---- bad input ---- */

START_TEST(test_bad_input_gives_clear_errors_and_changes_nothing){
  Fx f;
  sqlite3 *db;
  char *zBefore, *zAfter, *zLong;
  const char *zQ = "SELECT group_concat(branch||branch_id||state||pins)"
                   " FROM depot_branches(%Q)";
  fx_open(&f, "fork-bad");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b TEXT);"
              "INSERT INTO t VALUES(1,'a')");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_restore_point(%Q,'app','main','rp')", f.zStore);
  fx_exec(&f, "SELECT depot_fork(%Q,'app','main','dev')", f.zStore);
  zBefore = fx_text(&f, zQ, f.zStore);
  zLong = sqlite3_mprintf("%.*c", 300, 'x');
  fx_fails(&f, "has no branch nope", "SELECT depot_fork(%Q,'app','nope','x')",
           f.zStore);
  fx_fails(&f, "has no branch main", "SELECT depot_fork(%Q,'nodb','main',"
           "'x')", f.zStore);
  fx_fails(&f, "already has a branch dev", "SELECT depot_fork(%Q,'app',"
           "'main','dev')", f.zStore);
  fx_fails(&f, "neither an ISO-8601 time nor a restore point",
           "SELECT depot_fork(%Q,'app','main','x','nosuchpoint')", f.zStore);
  fx_fails(&f, "txid 99 is not a commit", "SELECT depot_fork(%Q,'app','main',"
           "'x',99)", f.zStore);
  fx_fails(&f, "at must be NULL, an integer", "SELECT depot_fork(%Q,'app',"
           "'main','x',1.5)", f.zStore);
  fx_fails(&f, "new_branch must be non-empty text", "SELECT depot_fork(%Q,"
           "'app','main',NULL)", f.zStore);
  fx_fails(&f, "store must be non-empty text", "SELECT depot_fork(NULL,"
           "'app','main','x')");
  fx_fails(&f, "name must be 1..255 bytes", "SELECT depot_fork(%Q,'app',"
           "'main',%Q)", f.zStore, zLong);
  fx_fails(&f, "NAME or BUCKET/NAME", "SELECT depot_fork(%Q,%Q,'main','x')",
           f.zStore, zLong);
  fx_fails(&f, "cannot open", "SELECT depot_fork('%q/none.depot','app',"
           "'main','x')", f.zDir);
  fx_fails(&f, "already exists", "SELECT depot_restore_point(%Q,'app',"
           "'main','rp')", f.zStore);
  fx_fails(&f, "may not be named like an ISO-8601 time",
           "SELECT depot_restore_point(%Q,'app','main','2020-01-01')",
           f.zStore);
  fx_fails(&f, "no restore point gone", "SELECT depot_drop_restore_point(%Q,"
           "'app','gone')", f.zStore);
  fx_fails(&f, "at must name a txid", "SELECT depot_restore(%Q,'app','main',"
           "NULL)", f.zStore);
  fx_fails(&f, "has no branch zz", "SELECT depot_restore(%Q,'app','zz',1)",
           f.zStore);
  fx_fails(&f, "bucket nob does not exist", "SELECT depot_fork_bucket(%Q,"
           "'nob','b')", f.zStore);
  fx_fails(&f, "bucket main already exists", "SELECT depot_fork_bucket(%Q,"
           "'main','main')", f.zStore);
  fx_fails(&f, "bucket fork point", "SELECT depot_fork_bucket(%Q,'main','b',"
           "'yesterday')", f.zStore);
  fx_fails(&f, "depot: a bucket fork point is NULL, a store sequence number"
           " or an ISO-8601 time, got 1.5", "SELECT depot_fork_bucket(%Q,"
           "'main','b',1.5)", f.zStore);
  fx_fails(&f, "depot: a bucket fork point is NULL, a store sequence number"
           " or an ISO-8601 time, got a blob", "SELECT depot_fork_bucket(%Q,"
           "'main','b',x'01')", f.zStore);
  fx_fails(&f, "interval must be an integer", "SELECT depot_pitr_policy(%Q,"
           "'app','5',1)", f.zStore);
  fx_fails(&f, "retention must be an integer", "SELECT depot_pitr_policy(%Q,"
           "'app',5,-1)", f.zStore);
  fx_fails(&f, "does not exist", "SELECT depot_drop_branch(%Q,'app',"
           "(SELECT branch_id FROM depot_branches(%Q) WHERE branch='dev')+100)",
           f.zStore, f.zStore);
  fx_fails(&f, "drop it by name", "SELECT depot_drop_branch(%Q,'app',"
           "(SELECT branch_id FROM depot_branches(%Q) WHERE branch='dev'))",
           f.zStore, f.zStore);
  fx_fails(&f, "bucket b9 does not exist", "SELECT * FROM depot_databases(%Q,"
           "'b9')", f.zStore);
  fx_fails(&f, "without a bucket part", "SELECT * FROM depot_branches(%Q,"
           "'b9/app')", f.zStore);
  fx_fails(&f, "argument 2 must be non-empty text", "SELECT * FROM "
           "depot_branches(%Q, 'app' || char(0) || 'x')", f.zStore);
  zAfter = fx_text(&f, zQ, f.zStore);
  ck_assert_str_eq(zBefore, zAfter);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_restore_points(%Q,"
                          "'app')", f.zStore), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_databases(%Q)",
                          f.zStore), 2);
  sqlite3_free(zLong);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  fx_close(&f);
}
END_TEST

/* An `at` longer than any restore point name (restore point names are
** 1..255 bytes) names no restore point: a clear error for every function
** that takes `at`, never a crash, and nothing changes. */
START_TEST(test_overlong_at_is_neither_time_nor_restore_point){
  static const int anLen[] = { 256, 600, 70000 };
  Fx f;
  sqlite3 *db;
  char *zBefore, *zAfter, *zAt;
  const char *zQ = "SELECT group_concat(branch||branch_id||state||pins)"
                   " FROM depot_branches(%Q)";
  int i;
  fx_open(&f, "fork-longat");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  zBefore = fx_text(&f, zQ, f.zStore);
  for(i=0; i<(int)(sizeof(anLen)/sizeof(anLen[0])); i++){
    zAt = sqlite3_mprintf("%.*c", anLen[i], 'x');
    fx_fails(&f, "is neither an ISO-8601 time nor a restore point",
             "SELECT depot_fork(%Q,'app','main','x',%Q)", f.zStore, zAt);
    fx_fails(&f, "is neither an ISO-8601 time nor a restore point",
             "SELECT depot_restore(%Q,'app','main',%Q)", f.zStore, zAt);
    fx_fails(&f, "is neither an ISO-8601 time nor a restore point",
             "SELECT depot_rollback(%Q,'app','main',%Q)", f.zStore, zAt);
    sqlite3_free(zAt);
  }
  zAfter = fx_text(&f, zQ, f.zStore);
  ck_assert_str_eq(zBefore, zAfter);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  fx_close(&f);
}
END_TEST

/* A time after now names no state yet, and one before the first commit no
** state at all: both are errors that change nothing. */
START_TEST(test_future_and_pre_creation_times_are_refused_and_change_nothing){
  Fx f;
  sqlite3 *db;
  char *zBefore, *zAfter;
  const char *zQ = "SELECT group_concat(branch||branch_id||state||pins)"
                   " FROM depot_branches(%Q)";
  fx_open(&f, "fork-future");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  fx_exec(&f, "SELECT depot_pitr_policy(%Q,'app',0,3162240000)", f.zStore);
  zBefore = fx_text(&f, zQ, f.zStore);
  fx_fails(&f, "2999-01-01 is in the future", "SELECT depot_fork(%Q,'app',"
           "'main','x','2999-01-01')", f.zStore);
  fx_fails(&f, "is in the future", "SELECT depot_restore(%Q,'app','main',"
           "'2999-01-01T00:00:00Z')", f.zStore);
  fx_fails(&f, "is in the future", "SELECT depot_rollback(%Q,'app','main',"
           "'2999-01-01 10:00')", f.zStore);
  fx_fails(&f, "is in the future", "SELECT depot_fork_bucket(%Q,'main','b',"
           "'2999-01-01')", f.zStore);
  fx_fails(&f, "has no commit at or before 2001-01-01",
           "SELECT depot_fork(%Q,'app','main','x','2001-01-01')", f.zStore);
  fx_fails(&f, "has no commit at or before", "SELECT depot_restore(%Q,'app',"
           "'main','2001-01-01')", f.zStore);
  zAfter = fx_text(&f, zQ, f.zStore);
  ck_assert_str_eq(zBefore, zAfter);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_databases(%Q)",
                          f.zStore), 1);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_restore_points(%Q,"
                          "'app')", f.zStore), 0);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  fx_close(&f);
}
END_TEST

/* A date that does not exist (February 30, hour 24, a zone offset of 25
** hours) is not a time: it is looked up as a restore point name. */
START_TEST(test_impossible_dates_and_offsets_are_not_times){
  static const char *const azBad[] = {
    "2026-02-30", "2025-02-29", "2026-04-31", "2026-11-30T24:00",
    "2026-11-30T10:00+25:00", "2026-11-30T10:00-03:60"
  };
  Fx f;
  sqlite3 *db;
  int i;
  fx_open(&f, "fork-baddate");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  for(i=0; i<(int)(sizeof(azBad)/sizeof(azBad[0])); i++){
    fx_fails(&f, "neither an ISO-8601 time nor a restore point",
             "SELECT depot_fork(%Q,'app','main','x',%Q)", f.zStore, azBad[i]);
  }
  fx_fails(&f, "is in the future", "SELECT depot_fork(%Q,'app','main','x',"
           "'2996-02-29')", f.zStore);
  ck_assert_int_eq(fx_int(&f, "SELECT count(*) FROM depot_branches(%Q)",
                          f.zStore), 1);
  fx_close(&f);
}
END_TEST

/* depot_restore_points needs its db: a NULL db is refused like any other
** argument that is not non-empty text, naming the argument, and a missing
** one says it is needed. */
START_TEST(test_restore_points_null_db_is_refused_as_a_bad_argument){
  Fx f;
  sqlite3 *db;
  fx_open(&f, "fork-rpnull");
  db = fx_db(&f, "app", "main", 0);
  th_exec(db, "CREATE TABLE t(a); INSERT INTO t VALUES(1)");
  sqlite3_close(db);
  fx_fails(&f, "depot: argument 2 must be non-empty text",
           "SELECT * FROM depot_restore_points(%Q, NULL)", f.zStore);
  fx_fails(&f, "depot: argument 2 must be non-empty text",
           "SELECT * FROM depot_restore_points(%Q, 7)", f.zStore);
  fx_fails(&f, "needs the db argument",
           "SELECT * FROM depot_restore_points(%Q)", f.zStore);
  fx_close(&f);
}
END_TEST

START_TEST(test_branch_functions_are_direct_only){
  Fx f;
  char *zErr = 0;
  fx_open(&f, "fork-direct");
  th_exec(f.db, "CREATE TABLE x(s); CREATE VIEW v AS SELECT"
                " depot_fork(s,'app','main','y') FROM x");
  ck_assert_int_ne(th_try(f.db, "SELECT * FROM v", &zErr), SQLITE_OK);
  ck_assert_ptr_nonnull(strstr(zErr, "unsafe use of depot_fork"));
  sqlite3_free(zErr);
  fx_close(&f);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("fork");
  TCase *tc = tcase_create("forks");
  tcase_add_test(tc, test_depot_functions_take_integral_reals_as_integers);
  tcase_add_test(tc, test_bucket_fork_takes_an_integral_real_sequence);
  tcase_add_test(tc, test_fork_writes_never_show_on_the_other_side);
  tcase_add_test(tc, test_fork_idle_close_then_next_operation_reopens_the_store);
  tcase_add_test(tc, test_fork_idle_handle_is_not_inherited_by_a_child_process);
  tcase_add_test(tc, test_fork_of_fork_reaches_depth_limit_then_fails_clearly);
  tcase_add_test(tc, test_fork_at_txid_time_and_restore_point_matches_oracle);
  tcase_add_test(tc, test_fork_chain_reads_match_plain_file);
  tcase_add_test(tc, test_pitr_policy_retention_interval_and_off);
  tcase_add_test(tc, test_pitr_time_of_an_unretained_commit_says_why);
  tcase_add_test(tc, test_pitr_time_of_a_pinned_commit_resolves_to_it);
  tcase_add_test(tc, test_restore_then_undo_restores_both_ways);
  tcase_add_test(tc, test_rollback_then_undo_returns_to_the_rolled_back_state);
  tcase_add_test(tc, test_bucket_fork_reads_and_writes_the_capped_fork_only);
  tcase_add_test(tc,
      test_bucket_fork_at_a_time_sees_catalog_changes_before_it);
  tcase_add_test(tc,
      test_depot_commits_lists_the_commits_of_a_bucket_database);
  tcase_add_test(tc, test_drop_branch_releases_its_pins);
  tcase_add_test(tc, test_reader_of_a_reclaimed_dropped_branch_gets_cantopen);
  tcase_add_test(tc, test_bad_input_gives_clear_errors_and_changes_nothing);
  tcase_add_test(tc, test_overlong_at_is_neither_time_nor_restore_point);
  tcase_add_test(tc,
      test_future_and_pre_creation_times_are_refused_and_change_nothing);
  tcase_add_test(tc, test_impossible_dates_and_offsets_are_not_times);
  tcase_add_test(tc, test_branch_functions_are_direct_only);
  tcase_add_test(tc, test_restore_points_null_db_is_refused_as_a_bad_argument);
  suite_add_tcase(s, tc);
  tc = tcase_create("concurrency");
  tcase_add_test(tc, test_fork_while_parent_writer_commits_sees_a_whole_commit);
  suite_add_tcase(s, tc);
  tc = tcase_create("faults");
  tcase_add_test(tc, test_sigkill_during_fork_and_restore_leaves_none_or_all);
  suite_add_tcase(s, tc);
  return s;
}
