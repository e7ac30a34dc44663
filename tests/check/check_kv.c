/*
** check_kv.c -- the "kv" suite: KV tables through SQL (kv_memory virtual
** tables, kv_* handle functions, kv_tables), the engine behind them
** (snapshots, conflicts, reservations, catalog, replay), bad input, and
** the multi-thread / multi-process / fault-injection scenarios.
** DEPOT_TORTURE_ITERS=n multiplies the bank-transfer stress by n.
*/
#include "config.h"
#define SQLITE_CORE 1  /* engine headers pull in sqlite3ext.h */
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "ext/kv/kv.h"
#include "ext/kv/kv_test.h"
#include "wal/wal.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers --- */

/* A connection on an in-memory main database. */
static sqlite3 *kv_db(void){
  return th_open(":memory:");
}

/* CREATE VIRTUAL TABLE zTab USING kv_memory(dir=zDir[, persistence=1]). */
static void kv_mk(sqlite3 *db, const char *zTab, const char *zDir, int bPersist){
  char *z = sqlite3_mprintf("CREATE VIRTUAL TABLE \"%w\" USING "
      "kv_memory(dir='%q', persistence=%d)", zTab, zDir, bPersist);
  th_exec(db, z);
  sqlite3_free(z);
}

/* Run zSql expecting failure: returns the extended code, checks that the
** message contains zLike (if not NULL). */
static int kv_fail(sqlite3 *db, const char *zSql, const char *zLike){
  const char *zTail = zSql;
  int rc = SQLITE_OK;
  while( rc==SQLITE_OK && zTail && zTail[0] ){
    sqlite3_stmt *pStmt = 0;
    rc = sqlite3_prepare_v2(db, zTail, -1, &pStmt, &zTail);
    if( rc==SQLITE_OK && pStmt ){
      while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){}
      if( rc==SQLITE_DONE ) rc = SQLITE_OK;
    }
    if( rc!=SQLITE_OK ){
      rc = sqlite3_extended_errcode(db);
      if( zLike ){
        ck_assert_msg(strstr(sqlite3_errmsg(db), zLike)!=0,
                      "%s\n  message '%s' lacks '%s'", zSql,
                      sqlite3_errmsg(db), zLike);
      }
      sqlite3_finalize(pStmt);
      return rc;
    }
    sqlite3_finalize(pStmt);
  }
  ck_abort_msg("expected failure: %s", zSql);
  return rc;
}

/* The EXPLAIN QUERY PLAN details of zSql, joined by ';'. */
static char *kv_plan(sqlite3 *db, const char *zSql){
  char *zQ = sqlite3_mprintf("EXPLAIN QUERY PLAN %s", zSql);
  char *z = sqlite3_mprintf("");
  sqlite3_stmt *pStmt = 0;
  ck_assert_int_eq(sqlite3_prepare_v2(db, zQ, -1, &pStmt, 0), SQLITE_OK);
  while( sqlite3_step(pStmt)==SQLITE_ROW ){
    z = sqlite3_mprintf("%z%s;", z, sqlite3_column_text(pStmt, 3));
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(zQ);
  return z;
}

static void kv_text_eq(sqlite3 *db, const char *zSql, const char *zWant){
  char *z = th_text(db, zSql);
  ck_assert_msg(zWant ? (z && strcmp(z, zWant)==0) : z==0,
                "%s\n  got '%s', want '%s'", zSql, z ? z : "NULL",
                zWant ? zWant : "NULL");
  sqlite3_free(z);
}

/* group_concat of a query, for compact checks. */
static void kv_rows_eq(sqlite3 *db, const char *zSql, const char *zWant){
  char *zQ = sqlite3_mprintf("SELECT group_concat(x, ' ') FROM (%s)", zSql);
  kv_text_eq(db, zQ, zWant);
  sqlite3_free(zQ);
}

/* -------------------------------------------------------- basic tables --- */

START_TEST(test_kv_roundtrip_keeps_types){
  char *zDir = th_tmpdir("kv-types");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'one'), (2.5, 2.5), ('k', x'00ff'), "
              "(x'0102', NULL), (3, 7)");
  kv_rows_eq(db, "SELECT typeof(key)||':'||typeof(value) AS x FROM t",
             "integer:text real:real integer:integer text:blob blob:null");
  kv_text_eq(db, "SELECT hex(value) FROM t WHERE key='k'", "00FF");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key=3"), 7);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=x'0102' "
                              "AND value IS NULL"), 1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_keys_order_like_sqlite){
  char *zDir = th_tmpdir("kv-order");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t(key) VALUES(x'00'), ('b'), ('a'), (10), (-1.5),"
              " (2), ('ab')");
  kv_rows_eq(db, "SELECT quote(key) AS x FROM t",
             "-1.5 2 10 'a' 'ab' 'b' X'00'");
  kv_rows_eq(db, "SELECT quote(key) AS x FROM t ORDER BY key DESC",
             "X'00' 'b' 'ab' 'a' 10 2 -1.5");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_range_and_in_constraints){
  char *zDir = th_tmpdir("kv-range");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<20) INSERT INTO t SELECT i, i*10 FROM c");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key>17", "18 19 20");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key>=18", "18 19 20");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key<3", "1 2");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key<=2", "1 2");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key BETWEEN 5 AND 7", "5 6 7");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key BETWEEN 5 AND 7 "
                 "ORDER BY key DESC", "7 6 5");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key IN (9, 3, 99, 3, NULL)",
             "3 9");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key IN (9, 3) "
                 "ORDER BY key DESC", "9 3");
  kv_rows_eq(db, "SELECT value AS x FROM t WHERE key=4", "40");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key='4'", 0);
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key>NULL", 0);
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key>19.5 AND key<'a'", "20");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* An IN list whose every operand is NULL matches nothing (found by the
** sql_args fuzz target: UBSan reported qsort() of the empty, NULL point
** array). */
START_TEST(test_kv_in_list_of_only_nulls_matches_nothing){
  char *zDir = th_tmpdir("kv-in-null");
  sqlite3 *db = kv_db();
  sqlite3_stmt *pStmt = 0;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'a'), (2, 'b')");
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key IN (NULL, NULL)", 0);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT count(*) FROM t "
                   "WHERE key IN (?,?,?)", -1, &pStmt, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  ck_assert_int_eq(sqlite3_column_int(pStmt, 0), 0);
  sqlite3_finalize(pStmt);
  kv_rows_eq(db, "SELECT key AS x FROM t WHERE key IN (2, NULL)", "2");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_query_plan_pushes_down){
  char *zDir = th_tmpdir("kv-eqp");
  sqlite3 *db = kv_db();
  char *z;
  kv_mk(db, "t", zDir, 0);
  z = kv_plan(db, "SELECT * FROM t WHERE key=5");
  ck_assert_msg(strstr(z, "VIRTUAL TABLE INDEX 1:")!=0, "%s", z);
  sqlite3_free(z);
  z = kv_plan(db, "SELECT * FROM t WHERE key BETWEEN 1 AND 4 ORDER BY key DESC");
  ck_assert_msg(strstr(z, "VIRTUAL TABLE INDEX 104:")!=0, "%s", z);
  ck_assert_msg(strstr(z, "TEMP B-TREE")==0, "%s", z);
  sqlite3_free(z);
  z = kv_plan(db, "SELECT * FROM t WHERE key IN (1,2,3)");
  ck_assert_msg(strstr(z, "VIRTUAL TABLE INDEX 2:")!=0, "%s", z);
  sqlite3_free(z);
  z = kv_plan(db, "SELECT * FROM t WHERE key>3 AND key<9");
  ck_assert_msg(strstr(z, "VIRTUAL TABLE INDEX 20:")!=0, "%s", z);
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Each operator on key, alone, is answered by the table (its own bit of
** idxNum in EXPLAIN QUERY PLAN) and returns the right rows; ORDER BY key in
** either direction needs no sorter. */
static const struct { const char *zWhere; const char *zIdx; const char *zRows; }
aPlan[] = {
  { "key=3",               "INDEX 1:",  "3" },
  { "key IN (2,9,4)",      "INDEX 2:",  "2 4" },
  { "key>3",               "INDEX 4:",  "4 5" },
  { "key>=3",              "INDEX 8:",  "3 4 5" },
  { "key<3",               "INDEX 16:", "1 2" },
  { "key<=3",              "INDEX 32:", "1 2 3" },
  { "key BETWEEN 2 AND 4", "INDEX 40:", "2 3 4" },
  { "1 ORDER BY key",      "INDEX 0:",  "1 2 3 4 5" },
  { "1 ORDER BY key DESC", "INDEX 64:", "5 4 3 2 1" },
};

START_TEST(test_kv_query_plan_pushes_down_each_operator){
  char *zDir = th_tmpdir("kv-eqp-each");
  sqlite3 *db = kv_db();
  char *zSql, *z;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(4,0),(1,0),(5,0),(3,0),(2,0)");
  zSql = sqlite3_mprintf("SELECT key FROM t WHERE %s", aPlan[_i].zWhere);
  z = kv_plan(db, zSql);
  ck_assert_msg(strstr(z, aPlan[_i].zIdx)!=0, "%s: %s", zSql, z);
  ck_assert_msg(strstr(z, "TEMP B-TREE")==0, "%s: %s", zSql, z);
  sqlite3_free(z);
  z = sqlite3_mprintf("SELECT key AS x FROM t WHERE %s", aPlan[_i].zWhere);
  kv_rows_eq(db, z, aPlan[_i].zRows);
  sqlite3_free(z);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_plain_insert_of_existing_key_fails){
  char *zDir = th_tmpdir("kv-pk");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'a')");
  ck_assert_int_eq(kv_fail(db, "INSERT INTO t VALUES(1, 'b')",
                           "UNIQUE constraint failed: t.key"),
                   SQLITE_CONSTRAINT_PRIMARYKEY);
  th_exec(db, "INSERT OR IGNORE INTO t VALUES(1, 'c')");
  kv_text_eq(db, "SELECT value FROM t WHERE key=1", "a");
  th_exec(db, "INSERT OR REPLACE INTO t VALUES(1, 'd')");
  kv_text_eq(db, "SELECT value FROM t WHERE key=1", "d");
  th_exec(db, "REPLACE INTO t VALUES(2.0, 'e')");
  kv_rows_eq(db, "SELECT quote(key)||'='||value AS x FROM t", "1=d 2.0=e");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_update_and_delete){
  char *zDir = th_tmpdir("kv-upd");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1,10),(2,20),(3,30)");
  th_exec(db, "UPDATE t SET value=value+1 WHERE key>=2");
  kv_rows_eq(db, "SELECT value AS x FROM t", "10 21 31");
  th_exec(db, "UPDATE t SET key=9 WHERE key=1");
  kv_rows_eq(db, "SELECT key AS x FROM t", "2 3 9");
  ck_assert_int_eq(kv_fail(db, "UPDATE t SET key=3 WHERE key=2", "UNIQUE"),
                   SQLITE_CONSTRAINT_PRIMARYKEY);
  kv_rows_eq(db, "SELECT key||':'||value AS x FROM t", "2:21 3:31 9:10");
  th_exec(db, "DELETE FROM t WHERE key=3");
  th_exec(db, "DELETE FROM t WHERE key=42");
  kv_rows_eq(db, "SELECT key AS x FROM t", "2 9");
  th_exec(db, "DELETE FROM t");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_rollback_and_savepoints){
  char *zDir = th_tmpdir("kv-sp");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  kv_mk(db, "u", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1,1)");
  th_exec(db, "BEGIN; INSERT INTO t VALUES(2,2); INSERT INTO u VALUES(1,1);"
              "ROLLBACK");
  kv_rows_eq(db, "SELECT key AS x FROM t", "1");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u"), 0);
  th_exec(db, "BEGIN; INSERT INTO t VALUES(2,2); SAVEPOINT a;"
              "INSERT INTO t VALUES(3,3); INSERT INTO u VALUES(5,5);"
              "SAVEPOINT b; DELETE FROM t WHERE key=1; ROLLBACK TO b;");
  kv_rows_eq(db, "SELECT key AS x FROM t", "1 2 3");
  th_exec(db, "ROLLBACK TO a");
  kv_rows_eq(db, "SELECT key AS x FROM t", "1 2");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u"), 0);
  th_exec(db, "INSERT INTO u VALUES(6,6); RELEASE a; COMMIT");
  kv_rows_eq(db, "SELECT key AS x FROM t", "1 2");
  kv_rows_eq(db, "SELECT key AS x FROM u", "6");
  /* A failing statement undoes only itself. */
  th_exec(db, "BEGIN; INSERT INTO t VALUES(7,7)");
  kv_fail(db, "INSERT INTO t VALUES(8,8),(1,1)", "UNIQUE");
  th_exec(db, "COMMIT");
  kv_rows_eq(db, "SELECT key AS x FROM t", "1 2 7");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_scan_is_a_snapshot_with_own_writes){
  char *zDir = th_tmpdir("kv-snap");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1,1),(2,2)");
  /* The scan feeding the insert never sees the rows it inserts. */
  th_exec(db, "INSERT INTO t SELECT key+10, value FROM t");
  kv_rows_eq(db, "SELECT key AS x FROM t", "1 2 11 12");
  /* Inside a transaction: own writes visible, others' commits not. */
  th_exec(db, "BEGIN; DELETE FROM t WHERE key=11; INSERT INTO t VALUES(5,5)");
  th_exec(db2, "INSERT INTO t VALUES(3,3)");
  kv_rows_eq(db, "SELECT key AS x FROM t", "1 2 5 12");
  kv_rows_eq(db2, "SELECT key AS x FROM t", "1 2 3 11 12");
  th_exec(db, "COMMIT");
  kv_rows_eq(db2, "SELECT key AS x FROM t", "1 2 3 5 12");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* A scan outside a transaction reads the table as of its start: commits
** made by another connection while it is half way (inserts before and
** after its position, a delete and an update ahead of it) do not show. */
START_TEST(test_kv_scan_in_progress_never_sees_later_commits){
  char *zDir = th_tmpdir("kv-scanlive");
  sqlite3 *db = kv_db(), *db2 = kv_db();
  sqlite3_stmt *pStmt = 0;
  char *zGot = sqlite3_mprintf("");
  int rc;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1,'a'),(2,'a'),(4,'a'),(5,'a')");
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key||value FROM t "
                   "ORDER BY key", -1, &pStmt, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  zGot = sqlite3_mprintf("%z%s", zGot, sqlite3_column_text(pStmt, 0));
  th_exec(db2, "INSERT INTO t VALUES(0,'new'),(3,'new'),(9,'new'); "
               "DELETE FROM t WHERE key=4; UPDATE t SET value='b' WHERE key=5");
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    zGot = sqlite3_mprintf("%z %s", zGot, sqlite3_column_text(pStmt, 0));
  }
  ck_assert_int_eq(rc, SQLITE_DONE);
  ck_assert_str_eq(zGot, "1a 2a 4a 5a");
  sqlite3_finalize(pStmt);
  /* The next scan sees them. */
  kv_rows_eq(db, "SELECT key||value AS x FROM t ORDER BY key",
             "0new 1a 2a 3new 5b 9new");
  sqlite3_free(zGot);
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* One SQL transaction over more KV tables than a root holds in itself
** (KV_ROOT_CHILDREN): every table's write commits, a rollback leaves
** none, a one-table write between them reuses the connection's root, and
** a conflict on the last table bound fails the whole commit. */
START_TEST(test_kv_transaction_over_many_tables){
  char *zDir = th_tmpdir("kv-many");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  char *z;
  int i, r;
  for(i=0; i<6; i++){
    char zTab[8];
    sqlite3_snprintf(sizeof(zTab), zTab, "t%d", i);
    kv_mk(db, zTab, zDir, 0);
    kv_mk(db2, zTab, zDir, 0);
  }
  for(r=1; r<=3; r++){
    z = sqlite3_mprintf("BEGIN; REPLACE INTO t0 VALUES('k', %d);"
        "REPLACE INTO t1 VALUES('k', %d); REPLACE INTO t2 VALUES('k', %d);"
        "REPLACE INTO t3 VALUES('k', %d); REPLACE INTO t4 VALUES('k', %d);"
        "REPLACE INTO t5 VALUES('k', %d); COMMIT", r, r, r, r, r, r);
    th_exec(db, z);
    sqlite3_free(z);
    th_exec(db, "INSERT OR REPLACE INTO t0 VALUES('one', 1)");
    th_exec(db, "BEGIN; INSERT OR REPLACE INTO t0 VALUES('k', 0);"
                "INSERT OR REPLACE INTO t3 VALUES('k', 0);"
                "INSERT OR REPLACE INTO t5 VALUES('k', 0);"
                "INSERT INTO t4 VALUES('gone', 0); ROLLBACK");
    ck_assert_int_eq(th_int(db2, "SELECT (SELECT value FROM t0 WHERE key='k')"
        "+(SELECT value FROM t1 WHERE key='k')"
        "+(SELECT value FROM t2 WHERE key='k')"
        "+(SELECT value FROM t3 WHERE key='k')"
        "+(SELECT value FROM t4 WHERE key='k')"
        "+(SELECT value FROM t5 WHERE key='k')"), 6*r);
    ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM t4 WHERE key='gone'"),
                     0);
  }
  /* db binds t0..t4 by writes and t5 by a read; db2 rewrites what it read */
  th_exec(db, "BEGIN; UPDATE t0 SET value=10 WHERE key='k';"
              "UPDATE t1 SET value=10 WHERE key='k';"
              "UPDATE t2 SET value=10 WHERE key='k';"
              "UPDATE t3 SET value=10 WHERE key='k';"
              "UPDATE t4 SET value=10 WHERE key='k';"
              "SELECT value FROM t5 WHERE key='k'");
  th_exec(db2, "UPDATE t5 SET value=50 WHERE key='k'");
  ck_assert_int_eq(kv_fail(db, "UPDATE t0 SET value=11 WHERE key='one';"
                               "COMMIT", "t5 key 'k'"), SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(sqlite3_get_autocommit(db), 1);
  kv_rows_eq(db2, "SELECT value AS x FROM (SELECT value FROM t0 WHERE key='k'"
             " UNION ALL SELECT value FROM t4 WHERE key='k'"
             " UNION ALL SELECT value FROM t5 WHERE key='k'"
             " UNION ALL SELECT value FROM t0 WHERE key='one')", "3 3 50 1");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_conflict_fails_commit_and_rolls_back){
  char *zDir = th_tmpdir("kv-conflict");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  int rc;
  kv_mk(db, "acct", zDir, 0);
  kv_mk(db2, "acct", zDir, 0);
  th_exec(db, "INSERT INTO acct VALUES('alice', 10), ('bob', 5)");
  th_exec(db, "BEGIN; UPDATE acct SET value=value+1 WHERE key='alice';"
              "INSERT INTO acct VALUES('carol', 1)");
  th_exec(db2, "BEGIN; UPDATE acct SET value=value*2 WHERE key='alice'; COMMIT");
  rc = kv_fail(db, "COMMIT", "acct key 'alice'");
  ck_assert_int_eq(rc, SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(sqlite3_get_autocommit(db), 1);      /* rolled back */
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM acct", "alice=20 bob=5");
  /* A retry in a new transaction succeeds. */
  th_exec(db, "BEGIN; UPDATE acct SET value=value+1 WHERE key='alice'; COMMIT");
  kv_rows_eq(db2, "SELECT key||'='||value AS x FROM acct", "alice=21 bob=5");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* A transaction begun with SAVEPOINT whose RELEASE conflicts: the KV part
** is rolled back, but SQLite keeps the connection inside a transaction
** (it does so for any failed RELEASE of an outermost savepoint), which now
** holds nothing; writes after it would only commit with a COMMIT.  SQL.md
** tells the application to run ROLLBACK before the retry. */
START_TEST(test_kv_conflict_on_release_leaves_an_empty_transaction){
  char *zDir = th_tmpdir("kv-release");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  kv_mk(db, "acct", zDir, 0);
  kv_mk(db2, "acct", zDir, 0);
  th_exec(db, "INSERT INTO acct VALUES('alice', 10)");
  th_exec(db, "SAVEPOINT tx; UPDATE acct SET value=value+1 WHERE key='alice';"
              "INSERT INTO acct VALUES('carol', 1)");
  th_exec(db2, "UPDATE acct SET value=value*2 WHERE key='alice'");
  ck_assert_int_eq(kv_fail(db, "RELEASE tx", "acct key 'alice'"),
                   SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(sqlite3_get_autocommit(db), 0);  /* still "in" one */
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM acct", "alice=20");
  th_exec(db, "ROLLBACK");
  ck_assert_int_eq(sqlite3_get_autocommit(db), 1);
  th_exec(db, "SAVEPOINT tx; UPDATE acct SET value=value+1 WHERE key='alice';"
              "RELEASE tx");
  ck_assert_int_eq(sqlite3_get_autocommit(db), 1);
  kv_rows_eq(db2, "SELECT key||'='||value AS x FROM acct", "alice=21");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* ----------------------------------------- reads in explicit transactions */

/* Roots begun (bClosed 0) or freed (1) in this process so far. */
static sqlite3_int64 kv_roots(sqlite3 *db, int bClosed){
  return th_int(db, bClosed
      ? "SELECT value FROM kv_metrics WHERE name='transaction_lifecycle' "
        "AND labels LIKE '%closed%'"
      : "SELECT value FROM kv_metrics WHERE name='transaction_lifecycle' "
        "AND labels LIKE '%created%'");
}

/* A key read by a SELECT before the transaction's first write is in its
** conflict check. */
START_TEST(test_kv_read_before_first_write_conflicts_at_commit){
  char *zDir = th_tmpdir("kv-readjoin");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  int rc;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1), ('b', 1)");
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  th_exec(db2, "UPDATE t SET value=2 WHERE key='a'");
  th_exec(db, "UPDATE t SET value=1 WHERE key='b'");
  rc = kv_fail(db, "COMMIT", "t key 'a'");
  ck_assert_int_eq(rc, SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(sqlite3_get_autocommit(db), 1);      /* rolled back */
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=2 b=1");
  /* A range scan joins the snapshot but registers no read: no conflict. */
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key>='a'"), 2);
  th_exec(db2, "UPDATE t SET value=3 WHERE key='a'");
  th_exec(db, "UPDATE t SET value=5 WHERE key='b'; COMMIT");
  kv_rows_eq(db2, "SELECT key||'='||value AS x FROM t", "a=3 b=5");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* A transaction that only reads commits or rolls back without a check,
** frees its root at once, and blocks no writer; autocommit SELECTs take no
** root at all. */
START_TEST(test_kv_read_only_transaction_ends_cleanly){
  char *zDir = th_tmpdir("kv-readonly");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  sqlite3_int64 nNew, nOpen;
  int i;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  nNew = kv_roots(db, 0);
  nOpen = nNew - kv_roots(db, 1);
  for(i=0; i<3; i++){
    ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  }
  th_exec(db, "SELECT * FROM t");
  ck_assert_int_eq(kv_roots(db, 0), nNew);          /* autocommit: no root */
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  ck_assert_int_eq(kv_roots(db, 0) - kv_roots(db, 1), nOpen+1);
  th_exec(db2, "UPDATE t SET value=2 WHERE key='a'");   /* not blocked */
  th_exec(db, "COMMIT");                           /* read only: no check */
  ck_assert_int_eq(kv_roots(db, 0) - kv_roots(db, 1), nOpen); /* released */
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 2);
  ck_assert_int_eq(kv_roots(db, 0) - kv_roots(db, 1), nOpen+1);
  th_exec(db, "ROLLBACK");
  ck_assert_int_eq(kv_roots(db, 0) - kv_roots(db, 1), nOpen);
  th_exec(db2, "BEGIN; UPDATE t SET value=3 WHERE key='a'; COMMIT");
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=3");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* Every SELECT of one transaction sees one snapshot of a table, also
** while another connection commits, plus the transaction's own writes. */
START_TEST(test_kv_selects_in_a_transaction_see_one_snapshot){
  char *zDir = th_tmpdir("kv-onesnap");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1), ('b', 1)");
  th_exec(db, "BEGIN");
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=1 b=1");
  th_exec(db2, "UPDATE t SET value=2 WHERE key='a'; INSERT INTO t "
               "VALUES('c', 2); DELETE FROM t WHERE key='b'");
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=1 b=1");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key IN "
                              "('b', 'c')"), 1);
  th_exec(db, "INSERT INTO t VALUES('d', 4)");
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t WHERE key>'a'",
             "b=1 d=4");
  th_exec(db, "ROLLBACK");
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=2 c=2");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* Savepoints around reads and writes of a transaction that began with a
** read; a SAVEPOINT that opens the transaction works the same way. */
START_TEST(test_kv_savepoints_with_reads_first){
  char *zDir = th_tmpdir("kv-spread");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 1)");
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  th_exec(db, "SAVEPOINT s; INSERT INTO t VALUES(2, 2)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 2);
  th_exec(db, "ROLLBACK TO s");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  th_exec(db, "INSERT INTO t VALUES(3, 3); RELEASE s; COMMIT");
  kv_rows_eq(db2, "SELECT key AS x FROM t", "1 3");
  /* SAVEPOINT as the outermost transaction, read only and then writing. */
  th_exec(db, "SAVEPOINT outer");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key=3"), 3);
  th_exec(db, "RELEASE outer");
  th_exec(db, "SAVEPOINT outer");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key=3"), 3);
  th_exec(db2, "UPDATE t SET value=30 WHERE key=3");
  th_exec(db, "INSERT INTO t VALUES(4, 4)");
  ck_assert_int_eq(kv_fail(db, "RELEASE outer", "t key 3"),
                   SQLITE_BUSY_SNAPSHOT);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "1=1 3=30");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* sqlite3_changes() counts the rows an INSERT OR IGNORE or UPDATE OR
** IGNORE wrote, not the ones it skipped, as for an ordinary table. */
START_TEST(test_kv_or_ignore_counts_only_rows_written){
  char *zDir = th_tmpdir("kv-ignore");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'a'), (3, 'c')");
  th_exec(db, "INSERT OR IGNORE INTO t VALUES(1, 'x'), (2, 'b'), (3.0, 'y')");
  ck_assert_int_eq(sqlite3_changes(db), 1);
  th_exec(db, "UPDATE OR IGNORE t SET key = key + 1");
  ck_assert_int_eq(sqlite3_changes(db), 1);
  kv_rows_eq(db, "SELECT key || value AS x FROM t ORDER BY key", "1a 2b 4c");
  th_exec(db, "BEGIN; INSERT OR IGNORE INTO t VALUES(4, 'z'); COMMIT");
  ck_assert_int_eq(sqlite3_changes(db), 0);
  kv_rows_eq(db, "SELECT key || value AS x FROM t ORDER BY key", "1a 2b 4c");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ROLLBACK TO the SAVEPOINT that opened the transaction (SQLite numbers
** that savepoint -1 for a virtual table) undoes every KV write made in it,
** also those of statements that opened statement savepoints of their own,
** and the transaction goes on. */
START_TEST(test_kv_rollback_to_outermost_savepoint_undoes_writes){
  char *zDir = th_tmpdir("kv-sptxn");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'a'), (2, 'b')");
  th_exec(db, "SAVEPOINT s0; UPDATE t SET value = 'y' WHERE key = 1;"
              "INSERT INTO t VALUES(3, 'c'), (4, 'd');"
              "UPDATE t SET key = key + 10 WHERE key >= 2");
  kv_rows_eq(db, "SELECT key AS x FROM t ORDER BY key", "1 12 13 14");
  th_exec(db, "ROLLBACK TO s0");
  ck_assert_int_eq(sqlite3_get_autocommit(db), 0);
  kv_rows_eq(db, "SELECT key || value AS x FROM t ORDER BY key", "1a 2b");
  th_exec(db, "INSERT INTO t VALUES(5, 'e'); ROLLBACK TO s0;"
              "INSERT INTO t VALUES(6, 'f'); RELEASE s0");
  kv_rows_eq(db, "SELECT key || value AS x FROM t ORDER BY key", "1a 2b 6f");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ROLLBACK TO a savepoint opened before the table's first write undoes
** that write also when the write came in a multi-row statement (SQLite
** then tells the table only the statement's own savepoint level, which
** ends with the statement), and when a newer savepoint was opened after
** it. */
START_TEST(test_kv_rollback_to_savepoint_older_than_first_write_undoes_it){
  char *zDir = th_tmpdir("kv-spold");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'a')");
  th_exec(db, "BEGIN; SAVEPOINT a; INSERT INTO t VALUES(2, 'b'), (3, 'c')");
  kv_rows_eq(db, "SELECT key AS x FROM t ORDER BY key", "1 2 3");
  th_exec(db, "ROLLBACK TO a");
  kv_rows_eq(db, "SELECT key AS x FROM t ORDER BY key", "1");
  th_exec(db, "INSERT INTO t VALUES(4, 'd'), (5, 'e'); SAVEPOINT b;"
              "INSERT INTO t VALUES(6, 'f'); ROLLBACK TO b");
  kv_rows_eq(db, "SELECT key AS x FROM t ORDER BY key", "1 4 5");
  th_exec(db, "ROLLBACK TO a");
  kv_rows_eq(db, "SELECT key AS x FROM t ORDER BY key", "1");
  th_exec(db, "INSERT INTO t VALUES(7, 'g'); COMMIT");
  kv_rows_eq(db, "SELECT key AS x FROM t ORDER BY key", "1 7");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Joining reads take no lock on the main database: two connections on
** one database file (WAL mode) read inside explicit transactions at once
** while one of them writes the file; a connection with query_only=1 reads
** too (without a root). */
START_TEST(test_kv_reads_in_transactions_do_not_lock_the_database){
  char *zDir = th_tmpdir("kv-readlock");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  sqlite3 *db = th_open(zDb);
  sqlite3 *db2 = th_open(zDb);
  kv_text_eq(db, "PRAGMA journal_mode=WAL", "wal");
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "CREATE TABLE plain(x); INSERT INTO t VALUES('a', 1)");
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  th_exec(db2, "BEGIN");
  ck_assert_int_eq(th_int(db2, "SELECT value FROM t WHERE key='a'"), 1);
  th_exec(db2, "INSERT INTO plain VALUES(1); UPDATE t SET value=2 "
               "WHERE key='a'; COMMIT");
  kv_text_eq(db, "SELECT name FROM sqlite_temp_master WHERE name LIKE 'kv%'",
             "kv_sql_txn_anchor");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  th_exec(db, "COMMIT");
  th_exec(db, "PRAGMA query_only=1; BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 2);
  th_exec(db, "COMMIT; PRAGMA query_only=0");
  kv_fail(db, "INSERT INTO temp.kv_sql_txn_anchor VALUES(1)", "holds no rows");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* As SQL.md says: a KV write runs in a write transaction of the database
** holding the table's schema.  Through the main declaration a second
** connection to the same file cannot write until the first ends its
** transaction; it can read.  Through the temp declarations (unqualified
** names) both write at once. */
START_TEST(test_kv_writes_take_the_schema_database_write_lock){
  char *zDir = th_tmpdir("kv-writelock");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  sqlite3 *db = th_open(zDb);
  sqlite3 *db2 = th_open(zDb);
  kv_text_eq(db, "PRAGMA journal_mode=WAL", "wal");
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO main.t VALUES('a', 1); BEGIN; "
              "INSERT INTO main.t VALUES('b', 1)");
  ck_assert_int_eq(kv_fail(db2, "INSERT INTO main.t VALUES('c', 1)",
                           "database is locked"), SQLITE_BUSY);
  ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM main.t"), 1);
  th_exec(db, "COMMIT");
  th_exec(db2, "INSERT INTO main.t VALUES('c', 1)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM main.t"), 3);
  th_exec(db, "BEGIN; INSERT INTO t VALUES('d', 1)");
  th_exec(db2, "INSERT INTO t VALUES('e', 1)");
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM t"), 5);
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* CREATE VIRTUAL TABLE t USING kv_btree(dir=zDir). */
static void kv_mk_btree(sqlite3 *db, const char *zDir){
  char *z = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_btree(dir='%q')",
                            zDir);
  th_exec(db, z);
  sqlite3_free(z);
}

/* SQLite keeps a transaction open when its COMMIT fails with SQLITE_BUSY
** (another connection reads the database file, rollback-journal mode),
** after the KV part was prepared: a transaction that writes the database
** file, here through the main declaration.  The transaction is still the same one:
** it reads its own writes, takes more, a retried COMMIT applies all of
** them, and a ROLLBACK instead would apply none. */
START_TEST(test_kv_transaction_goes_on_after_a_busy_commit){
  char *zDir = th_tmpdir("kv-busycommit");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  sqlite3 *db = th_open(zDb);
  sqlite3 *db2 = th_open(zDb);
  kv_mk_btree(db, zDir);
  th_exec(db, "CREATE TABLE plain(x); INSERT INTO t VALUES('a', 1)");
  th_exec(db2, "BEGIN; SELECT count(*) FROM plain");
  th_exec(db, "BEGIN; INSERT INTO main.t VALUES('b', 2)");
  ck_assert_int_eq(kv_fail(db, "COMMIT", "database is locked"), SQLITE_BUSY);
  ck_assert_int_eq(sqlite3_get_autocommit(db), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 2);
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='b'"), 2);
  th_exec(db, "INSERT INTO main.t VALUES('c', 3); UPDATE main.t SET value=4 "
              "WHERE key='b'");
  kv_rows_eq(db, "SELECT key||value AS x FROM t", "a1 b4 c3");
  ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM t"), 1);
  th_exec(db2, "COMMIT");
  th_exec(db, "COMMIT");
  kv_rows_eq(db2, "SELECT key||value AS x FROM t", "a1 b4 c3");
  th_exec(db2, "BEGIN; SELECT count(*) FROM plain");
  th_exec(db, "BEGIN; DELETE FROM main.t WHERE key='a'");
  ck_assert_int_eq(kv_fail(db, "COMMIT", "database is locked"), SQLITE_BUSY);
  th_exec(db, "ROLLBACK");
  th_exec(db2, "COMMIT");
  kv_rows_eq(db2, "SELECT key||value AS x FROM t", "a1 b4 c3");
  sqlite3_close(db);
  sqlite3_close(db2);
  db = th_open(":memory:");       /* the store reopens: nothing replays */
  kv_mk_btree(db, zDir);
  kv_rows_eq(db, "SELECT key||value AS x FROM t", "a1 b4 c3");
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A table created in a transaction whose COMMIT failed with SQLITE_BUSY
** is still the transaction's own: the retried COMMIT creates it (with the
** rows written before and after the failure), and a ROLLBACK instead
** leaves neither the table nor its files. */
START_TEST(test_kv_table_created_before_a_busy_commit_is_created_by_the_retry){
  char *zDir = th_tmpdir("kv-busycreate");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zLog = sqlite3_mprintf("%s/main.db-kv/kv_log", zDir);
  sqlite3 *db = th_open(zDb);
  sqlite3 *db2 = th_open(zDb);
  th_exec(db, "CREATE TABLE plain(x)");
  th_exec(db2, "BEGIN; SELECT count(*) FROM plain");
  th_exec(db, "BEGIN; CREATE VIRTUAL TABLE b USING kv_btree; "
              "INSERT INTO b VALUES(1, 1)");
  ck_assert_int_eq(kv_fail(db, "COMMIT", "database is locked"), SQLITE_BUSY);
  th_exec(db, "INSERT INTO b VALUES(2, 2)");
  th_exec(db2, "COMMIT");
  th_exec(db, "COMMIT");
  kv_rows_eq(db2, "SELECT key||value AS x FROM b", "11 22");
  th_exec(db2, "BEGIN; SELECT count(*) FROM plain");
  th_exec(db, "BEGIN; CREATE VIRTUAL TABLE l USING kv_log; "
              "INSERT INTO l VALUES(1, 1)");
  ck_assert_int_eq(kv_fail(db, "COMMIT", "database is locked"), SQLITE_BUSY);
  kv_rows_eq(db, "SELECT key||value AS x FROM l", "11");
  th_exec(db, "ROLLBACK");
  th_exec(db2, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE "
                              "name='l'"), 0);
  ck_assert_int_eq(th_count_suffix(zLog, ""), 2);      /* "." and ".." */
  sqlite3_close(db);
  sqlite3_close(db2);
  db = th_open(zDb);
  kv_rows_eq(db, "SELECT key||value AS x FROM b", "11 22");
  sqlite3_close(db);
  sqlite3_free(zLog);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* The anchor that enlists a transaction's reads cannot be dropped while it
** does (that would drop the reads from the conflict check); outside a
** transaction dropping it is harmless. */
START_TEST(test_kv_anchor_cannot_be_dropped_inside_its_transaction){
  char *zDir = th_tmpdir("kv-anchordrop");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  th_exec(db, "BEGIN; SELECT * FROM t WHERE key='a'; COMMIT");  /* creates */
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  kv_fail(db, "DROP TABLE temp.kv_sql_txn_anchor", 0);
  th_exec(db2, "UPDATE t SET value=2 WHERE key='a'");
  th_exec(db, "INSERT INTO t VALUES('b', 1)");
  ck_assert_int_eq(kv_fail(db, "COMMIT", "t key 'a'"), SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  th_exec(db, "DROP TABLE temp.kv_sql_txn_anchor");
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 2);
  th_exec(db, "COMMIT");
  kv_text_eq(db, "SELECT name FROM sqlite_temp_master WHERE name LIKE 'kv%'",
             "kv_sql_txn_anchor");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* A temp table of the anchor's name that is not the anchor makes reads in
** transactions fail with a plain error that says what to do; once it is
** dropped, reads join again. */
START_TEST(test_kv_foreign_anchor_table_fails_reads_clearly){
  char *zDir = th_tmpdir("kv-foreignanchor");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1); "
              "CREATE TEMP TABLE kv_sql_txn_anchor(x)");
  th_exec(db, "BEGIN");
  ck_assert_int_eq(kv_fail(db, "SELECT * FROM t WHERE key='a'",
                           "must be dropped"), SQLITE_ERROR);
  th_exec(db, "ROLLBACK; DROP TABLE temp.kv_sql_txn_anchor; BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  th_exec(db, "COMMIT");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Every message logged through SQLITE_CONFIG_LOG, one per line. */
static char zKvLog[4096];
static void kv_log_cb(void *pArg, int rc, const char *zMsg){
  size_t n = strlen(zKvLog);
  (void)pArg;
  snprintf(zKvLog+n, sizeof(zKvLog)-n, "(%d) %s\n", rc, zMsg);
}

/* The first read inside a transaction creates the anchor that enlists it
** without an error in SQLite's error log (the log is for failures), and
** so do later reads that find it. */
START_TEST(test_kv_first_read_in_a_transaction_logs_no_error){
  char *zDir = th_tmpdir("kv-anchorlog");
  sqlite3 *db;
  sqlite3_shutdown();
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_LOG, kv_log_cb, 0),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
  db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  zKvLog[0] = 0;
  th_exec(db, "BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  th_exec(db, "COMMIT; BEGIN");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='a'"), 1);
  th_exec(db, "COMMIT");
  ck_assert_msg(zKvLog[0]==0, "logged: %s", zKvLog);
  kv_text_eq(db, "SELECT name FROM sqlite_temp_master WHERE name LIKE 'kv%'",
             "kv_sql_txn_anchor");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* An authorizer that denies the UPDATE of the anchor. */
static int kv_deny_anchor(void *pArg, int op, const char *z1, const char *z2,
                          const char *z3, const char *z4){
  (void)pArg; (void)z2; (void)z3; (void)z4;
  if( op==SQLITE_UPDATE && z1 && strcmp(z1, "kv_sql_txn_anchor")==0 ){
    return SQLITE_DENY;
  }
  return SQLITE_OK;
}

/* An authorizer that denies the UPDATE by which a read joins its
** transaction fails the read, and the message says that it was not
** authorized. */
START_TEST(test_kv_read_join_denied_by_authorizer_says_not_authorized){
  char *zDir = th_tmpdir("kv-anchorauth");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('a', 1)");
  th_exec(db, "BEGIN; SELECT * FROM t WHERE key='a'; COMMIT");  /* creates */
  sqlite3_set_authorizer(db, kv_deny_anchor, 0);
  th_exec(db, "BEGIN");
  kv_fail(db, "SELECT * FROM t WHERE key='a'",
          "kv: a read of t inside a transaction could not join it: not"
          " authorized");
  th_exec(db, "ROLLBACK");
  sqlite3_set_authorizer(db, 0, 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_two_stores_in_one_transaction_is_an_error){
  char *zA = th_tmpdir("kv-storeA");
  char *zB = th_tmpdir("kv-storeB");
  sqlite3 *db = kv_db();
  kv_mk(db, "a", zA, 0);
  kv_mk(db, "b", zB, 0);
  th_exec(db, "BEGIN; INSERT INTO a VALUES(1,1)");
  kv_fail(db, "INSERT INTO b VALUES(1,1)", "one store only");
  th_exec(db, "SELECT * FROM b");                  /* reading is fine */
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM a"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b"), 0);
  /* A first read binds the transaction to its store as a first write
  ** does; the message says so instead of claiming a write. */
  th_exec(db, "BEGIN; SELECT * FROM a WHERE key=1");
  kv_fail(db, "INSERT INTO b VALUES(2,2)", "bound to store");
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b"), 0);
  sqlite3_close(db);
  sqlite3_free(zA);
  sqlite3_free(zB);
}
END_TEST

START_TEST(test_kv_drop_table_removes_it){
  char *zDir = th_tmpdir("kv-drop");
  sqlite3 *db = kv_db();
  char *zSql;
  kv_mk(db, "t", zDir, 1);
  th_exec(db, "INSERT INTO t VALUES(1,1)");
  zSql = sqlite3_mprintf("SELECT count(*) FROM kv_tables WHERE name='t' "
                         "AND dir LIKE '%%%q'", strrchr(zDir, '/')+1);
  ck_assert_int_eq(th_int(db, zSql), 1);
  th_exec(db, "DROP TABLE t");
  ck_assert_int_eq(th_int(db, zSql), 0);
  kv_mk(db, "t", zDir, 0);                          /* a new, empty table */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  ck_assert_int_eq(th_int(db, "SELECT persistence FROM kv_tables "
                              "WHERE name='t'"), 0);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_create_in_a_transaction_then_write_commits){
  /* SQLite puts a table it has just created into the open transaction
  ** without calling xBegin: writes to it in the same transaction work and
  ** commit with it. */
  char *zDir = th_tmpdir("kv-create-txn");
  sqlite3 *db = kv_db();
  char *zSql = sqlite3_mprintf("BEGIN; CREATE VIRTUAL TABLE t USING "
      "kv_memory(dir='%q', persistence=1); INSERT INTO t VALUES(1,'a'); "
      "COMMIT", zDir);
  th_exec(db, zSql);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "1=a");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
                              "WHERE name='t'"), 1);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_create_rolled_back_leaves_no_table){
  char *zDir = th_tmpdir("kv-create-rb");
  sqlite3 *db = kv_db();
  sqlite3 *db2;
  char *zSql = sqlite3_mprintf("BEGIN; CREATE VIRTUAL TABLE t USING "
      "kv_memory(dir='%q', persistence=1); INSERT INTO t VALUES(1,'a'); "
      "ROLLBACK", zDir);
  th_exec(db, zSql);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_schema"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables"), 0);
  sqlite3_close(db);
  /* Nothing reached the store either: a new connection of the store sees
  ** no table, and creating it again gives an empty one. */
  db2 = kv_db();
  kv_mk(db2, "t", zDir, 1);
  ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM t"), 0);
  ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM kv_tables"), 1);
  sqlite3_free(zSql);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_create_after_a_write_in_the_transaction_is_refused){
  char *zDir = th_tmpdir("kv-create-late");
  sqlite3 *db = kv_db();
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE u USING "
      "kv_memory(dir='%q')", zDir);
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "BEGIN; INSERT INTO t VALUES(1,1)");
  kv_fail(db, zSql, "create_table must come before every write");
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
                              "WHERE name='u'"), 0);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_drop_inside_a_transaction_is_refused_and_keeps_data){
  /* SQLite gives a dropped virtual table no rollback callback, so a DROP
  ** inside BEGIN..ROLLBACK could not be undone: it is refused. */
  char *zDir = th_tmpdir("kv-drop-txn");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 1);
  th_exec(db, "INSERT INTO t VALUES(1,'kept')");
  th_exec(db, "BEGIN");
  ck_assert_int_eq(kv_fail(db, "DROP TABLE t", 0), SQLITE_ERROR);
  th_exec(db, "ROLLBACK");
  kv_rows_eq(db, "SELECT value AS x FROM t", "kept");
  th_exec(db, "DROP TABLE t");                 /* outside: it works */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_sidecar_store_and_catalog_survive_reopen){
  char *zDir = th_tmpdir("kv-sidecar");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zSide = sqlite3_mprintf("%s/main.db-kv/tables_meta", zDir);
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE p USING kv_memory(persistence=1);"
              "CREATE VIRTUAL TABLE v USING kv_memory;"
              "INSERT INTO p VALUES('x', 1); INSERT INTO v VALUES('y', 2)");
  ck_assert_int_eq(access(zSide, F_OK), 0);
  sqlite3_close(db);
  db = th_open(zDb);
  /* The catalog is durable; kv_memory data is volatile: a clean close
  ** confirms and retires the WAL, so nothing is replayed. */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM p"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM v"), 0);
  ck_assert_int_eq(th_int(db, "SELECT persistence FROM kv_tables "
                              "WHERE name='p'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
                              "WHERE name IN ('p','v')"), 2);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zSide);
  sqlite3_free(zDir);
}
END_TEST

/* kv_memory range scans hand values to SQLite in place (SQLITE_STATIC):
** a blob read without a copy stays right while the same connection
** commits over it and while the scan moves on (the scan reads its
** snapshot), and aggregates that keep a value across rows and across
** many re-runs of the inner scan of a join (more than the cursor keeps
** open, so later runs copy) see the right bytes. */
START_TEST(test_kv_memory_values_in_place_stay_right){
  sqlite3 *db = kv_db();
  sqlite3_stmt *pStmt = 0;
  char *z;
  int i, n = 0;
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory;"
              "CREATE TEMP TABLE o(a);"
              "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<200) INSERT INTO t SELECT i, "
              "CAST(printf('blob-%04d', i) AS BLOB) FROM c;"
              "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM c "
              "WHERE i<19) INSERT INTO o SELECT 10*i+1 FROM c");
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key, value FROM t "
                                      "WHERE key>=1", -1, &pStmt, 0),
                   SQLITE_OK);
  while( sqlite3_step(pStmt)==SQLITE_ROW ){
    int k = sqlite3_column_int(pStmt, 0);
    const unsigned char *a = sqlite3_column_blob(pStmt, 1);
    char zWant[16];
    snprintf(zWant, sizeof(zWant), "blob-%04d", k);
    ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), 9);
    ck_assert_int_eq(memcmp(a, zWant, 9), 0);
    if( k==3 ){               /* rewrite every row under the open scan */
      th_exec(db, "UPDATE t SET value=zeroblob(9); DELETE FROM t "
                  "WHERE key>100");
      ck_assert_int_eq(memcmp(a, zWant, 9), 0);
    }
    ck_assert_int_eq(k, ++n);
  }
  ck_assert_int_eq(n, 200);           /* the scan's snapshot */
  sqlite3_finalize(pStmt);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE value="
                              "zeroblob(9)"), 100);
  th_exec(db, "DELETE FROM t; WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL "
              "SELECT i+1 FROM c WHERE i<200) INSERT INTO t SELECT i, "
              "printf('text-%04d', 1000-i) FROM c");
  for(i=0; i<2; i++){
    z = th_text(db, i==0
        ? "SELECT max(t.value)||','||min(t.value)||','||count(*) FROM o "
          "JOIN t ON t.key>=o.a AND t.key<o.a+5"
        : "SELECT group_concat(v) FROM (SELECT max(t.value) AS v FROM o "
          "JOIN t ON t.key>=o.a AND t.key<o.a+3 GROUP BY o.a ORDER BY o.a "
          "LIMIT 6)");
    ck_assert_str_eq(z, i==0 ? "text-0999,text-0805,100"
        : "text-0999,text-0989,text-0979,text-0969,text-0959,text-0949");
    sqlite3_free(z);
  }
  sqlite3_close(db);
}
END_TEST

/* kv_side_delete(k): deletes key k of table t through the connection
** given as user data (another connection on the same store), in the
** middle of the statement that calls it; returns k. */
static void kv_side_delete(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv){
  sqlite3 *db2 = (sqlite3*)sqlite3_user_data(ctx);
  char *z = sqlite3_mprintf("DELETE FROM t WHERE key=%lld",
                            sqlite3_value_int64(argv[0]));
  int rc = sqlite3_exec(db2, z, 0, 0, 0);
  (void)argc;
  sqlite3_free(z);
  if( rc!=SQLITE_OK ) sqlite3_result_error(ctx, sqlite3_errmsg(db2), -1);
  else sqlite3_result_value(ctx, argv[0]);
}

/* kv_memory point reads with no transaction hand the value to SQLite in
** place, pinned in the map: the bytes a statement holds stay right while
** the key is rewritten and deleted by the same connection and by another
** one on the store, until the statement lets them go, also when SQLite
** keeps a value past the cursor's move to the next point (min()/max()
** over an IN list whose keys another connection deletes as the statement
** reads them); a one-row UPDATE (whose cursor SQLite closes before it
** writes) moves the right value to a new key. */
START_TEST(test_kv_memory_point_values_pinned_stay_right){
  char *zDir = th_tmpdir("kv-pin");
  sqlite3 *db = kv_db(), *db2 = kv_db();
  sqlite3_stmt *pStmt = 0;
  const unsigned char *a, *b;
  char *z;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<50) INSERT INTO t SELECT i, printf('text-%04d', i) "
              "FROM c; INSERT INTO t VALUES(100, x'00ff0102')");
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT value FROM t WHERE key=?1",
                                      -1, &pStmt, 0), SQLITE_OK);
  sqlite3_bind_int(pStmt, 1, 5);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  a = sqlite3_column_text(pStmt, 0);
  ck_assert_str_eq((const char*)a, "text-0005");
  th_exec(db, "UPDATE t SET value='changed!!' WHERE key=5");
  th_exec(db2, "DELETE FROM t WHERE key=5");
  ck_assert_str_eq((const char*)a, "text-0005");
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_DONE);
  ck_assert_int_eq(sqlite3_reset(pStmt), SQLITE_OK);
  sqlite3_bind_int(pStmt, 1, 5);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_DONE);      /* deleted */
  sqlite3_reset(pStmt);
  sqlite3_bind_int(pStmt, 1, 100);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  b = sqlite3_column_blob(pStmt, 0);
  ck_assert_int_eq(sqlite3_column_bytes(pStmt, 0), 4);
  th_exec(db2, "UPDATE t SET value=x'' WHERE key=100");
  ck_assert_int_eq(memcmp(b, "\000\377\001\002", 4), 0);
  sqlite3_finalize(pStmt);

  th_exec(db, "UPDATE t SET key=1007 WHERE key=7; "
              "UPDATE t SET value=value||'+' WHERE key=8; "
              "DELETE FROM t WHERE key=9");
  z = th_text(db, "SELECT value FROM t WHERE key=1007");
  ck_assert_str_eq(z, "text-0007");
  sqlite3_free(z);
  z = th_text(db, "SELECT value FROM t WHERE key=8");
  ck_assert_str_eq(z, "text-0008+");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key IN "
                              "(7, 9, 1007)"), 1);
  z = th_text(db, "SELECT max(value)||','||min(value)||','||"
                  "group_concat(value, '/') FROM t WHERE key IN (3, 1, 2, 5)");
  ck_assert_str_eq(z, "text-0003,text-0001,"
                      "text-0001/text-0002/text-0003");
  sqlite3_free(z);
  ck_assert_int_eq(sqlite3_create_function(db, "kv_side_delete", 1,
                       SQLITE_UTF8, db2, kv_side_delete, 0, 0), SQLITE_OK);
  z = th_text(db, "SELECT max(value)||','||min(value)||','||"
                  "sum(kv_side_delete(key)) FROM t WHERE key IN (40, 30, 20)");
  ck_assert_str_eq(z, "text-0040,text-0020,90");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key IN "
                              "(20, 30, 40)"), 0);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Values as hosts fetch them (sqlite3_column_type, then
** sqlite3_column_text / _blob / _int64 / _double and _bytes, as Python's
** sqlite3 module does): text with an interior NUL keeps every byte, empty
** text and blob stay empty and of their type, and every text comes back
** NUL-terminated; from committed data (a scan and a point read) and from
** the open transaction's own writes, for each backend. */
static const char *const azTextBackend[] = { "kv_memory", "kv_btree",
                                             "kv_log" };

/* A database with table t of backend azTextBackend[i] in a new store
** directory (*pzDir, which the caller frees). */
static sqlite3 *kv_text_db(int i, char **pzDir){
  sqlite3 *db = kv_db();
  *pzDir = th_tmpdir("kv-text");
  th_execf(db, "CREATE VIRTUAL TABLE t USING %s(dir='%q')",
           azTextBackend[i], *pzDir);
  return db;
}

/* Wait (up to 10 s) until the rows are in the tables' own files (for
** kv_btree: its data file, not the overlay). */
static void kv_text_settle(sqlite3 *db){
  int i;
  for(i=0; i<1000; i++){
    if( th_int(db, "SELECT coalesce(sum(pending_confirmations),0) "
                   "+ coalesce(sum(overlay_entries),0) FROM kv_stats")==0 ){
      return;
    }
    usleep(10000);
  }
  ck_abort_msg("collectors did not write everything in 10 s");
}

/* The values of keys 1..9 (key 9 is written inside a transaction). */
static const struct { int eType; int n; const char *z; } aKvWant[] = {
  { SQLITE_TEXT,    10, "plain text" },
  { SQLITE_TEXT,     3, "a\0b" },
  { SQLITE_TEXT,     0, "" },
  { SQLITE_BLOB,     3, "\0\377\0" },
  { SQLITE_NULL,     0, 0 },
  { SQLITE_INTEGER,  0, 0 },             /* 42 */
  { SQLITE_FLOAT,    0, 0 },             /* 2.5 */
  { SQLITE_BLOB,     0, "" },
  { SQLITE_TEXT,     5, "own\0x" },
};

/* Check the row of pStmt (key, value) as a host fetches it. */
static void kv_value_row_check(sqlite3_stmt *pStmt){
  int k = sqlite3_column_int(pStmt, 0) - 1;
  int e = sqlite3_column_type(pStmt, 1);
  ck_assert(k>=0 && k<9);
  ck_assert_int_eq(e, aKvWant[k].eType);
  if( e==SQLITE_TEXT ){
    const unsigned char *z = sqlite3_column_text(pStmt, 1);
    ck_assert_ptr_nonnull(z);
    ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), aKvWant[k].n);
    ck_assert_int_eq(memcmp(z, aKvWant[k].z, aKvWant[k].n), 0);
    ck_assert_int_eq(z[aKvWant[k].n], 0);
  }else if( e==SQLITE_BLOB ){
    const void *a = sqlite3_column_blob(pStmt, 1);
    ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), aKvWant[k].n);
    if( aKvWant[k].n ) ck_assert_int_eq(memcmp(a, aKvWant[k].z, 3), 0);
  }else if( e==SQLITE_INTEGER ){
    ck_assert_int_eq(sqlite3_column_int64(pStmt, 1), 42);
  }else if( e==SQLITE_FLOAT ){
    ck_assert(sqlite3_column_double(pStmt, 1)==2.5);
  }
}

/* Read keys 1..nKey of t with a range scan, a full scan and point reads,
** checking every value. */
static void kv_values_check(sqlite3 *db, int nKey){
  static const char *const azSql[] = {
    "SELECT key, value FROM t WHERE key>=1",
    "SELECT key, value FROM t",
    "SELECT key, value FROM t WHERE key=?1",
  };
  int iSql;
  for(iSql=0; iSql<3; iSql++){
    sqlite3_stmt *pStmt = 0;
    int i, n = 0;
    ck_assert_int_eq(sqlite3_prepare_v2(db, azSql[iSql], -1, &pStmt, 0),
                     SQLITE_OK);
    for(i=1; i<=(iSql==2 ? nKey : 1); i++){
      sqlite3_bind_int(pStmt, 1, i);
      while( sqlite3_step(pStmt)==SQLITE_ROW ){
        kv_value_row_check(pStmt);
        n++;
      }
      ck_assert_int_eq(sqlite3_reset(pStmt), SQLITE_OK);
    }
    ck_assert_int_eq(n, nKey);
    sqlite3_finalize(pStmt);
  }
}

START_TEST(test_kv_values_reach_column_text_whole){
  char *zDir = 0;
  sqlite3 *db = kv_text_db(_i, &zDir);
  th_exec(db, "INSERT INTO t VALUES(1, 'plain text'),"
              "(2, CAST(x'610062' AS TEXT)), (3, ''), (4, x'00ff00'),"
              "(5, NULL), (6, 42), (7, 2.5), (8, x'')");
  kv_text_settle(db);
  kv_values_check(db, 8);
  th_exec(db, "BEGIN; INSERT INTO t VALUES(9, CAST(x'6f776e0078' AS TEXT));"
              "UPDATE t SET value=value||'' WHERE key IN (1,2,3)");
  kv_values_check(db, 9);             /* the transaction's own writes too */
  th_exec(db, "COMMIT");
  kv_values_check(db, 9);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A text that a statement holds (sqlite3_column_text's pointer, which is
** valid until the statement steps) stays right while the same connection
** rewrites and deletes every row under the open scan, and the scan goes on
** reading its snapshot; for each backend. */
START_TEST(test_kv_text_held_by_a_scan_survives_rewrites){
  char *zDir = 0;
  sqlite3 *db = kv_text_db(_i, &zDir);
  sqlite3_stmt *pStmt = 0;
  int n = 0;
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<300) INSERT INTO t SELECT i, printf('text-%04d', i) "
              "FROM c");
  kv_text_settle(db);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key, value FROM t "
                                      "WHERE key>=1", -1, &pStmt, 0),
                   SQLITE_OK);
  while( sqlite3_step(pStmt)==SQLITE_ROW ){
    int k = sqlite3_column_int(pStmt, 0);
    const unsigned char *z = sqlite3_column_text(pStmt, 1);
    char zWant[16];
    snprintf(zWant, sizeof(zWant), "text-%04d", k);
    ck_assert_str_eq((const char*)z, zWant);
    if( k==3 || k==250 ){
      th_exec(db, "UPDATE t SET value=printf('%0100d', key);"
                  "DELETE FROM t WHERE key>200");
      ck_assert_str_eq((const char*)z, zWant);
      ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), 9);
    }
    ck_assert_int_eq(k, ++n);
  }
  ck_assert_int_eq(n, 300);           /* the scan's snapshot */
  sqlite3_finalize(pStmt);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE length(value)"
                              "=100"), 200);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A kv_memory scan hands each text to SQLite as a terminated string in
** place: fetching it with sqlite3_column_text allocates nothing (no
** terminated copy per row), except a text with an interior NUL, which
** SQLite copies to terminate. */
START_TEST(test_kv_memory_column_text_allocates_nothing){
  sqlite3 *db = kv_db();
  sqlite3_stmt *pStmt = 0;
  int n = 0;
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory;"
              "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<100) INSERT INTO t SELECT i, printf('value-%010d', i) "
              "FROM c; UPDATE t SET value=CAST(x'610062' AS TEXT) "
              "WHERE key=100");
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key, value FROM t "
                                      "WHERE key>=1", -1, &pStmt, 0),
                   SQLITE_OK);
  while( sqlite3_step(pStmt)==SQLITE_ROW ){
    sqlite3_int64 nBefore = 0, nAfter = 0, nHi = 0;
    const unsigned char *z;
    int k = sqlite3_column_int(pStmt, 0);
    ck_assert_int_eq(sqlite3_status64(SQLITE_STATUS_MALLOC_COUNT, &nBefore,
                                      &nHi, 0), SQLITE_OK);
    z = sqlite3_column_text(pStmt, 1);
    ck_assert_int_eq(sqlite3_status64(SQLITE_STATUS_MALLOC_COUNT, &nAfter,
                                      &nHi, 0), SQLITE_OK);
    ck_assert_ptr_nonnull(z);
    if( k<100 ){
      ck_assert_int_eq(nAfter, nBefore);
      ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), 16);
    }else{
      ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), 3);
      ck_assert_int_eq(memcmp(z, "a\0b", 4), 0);
    }
    n++;
  }
  ck_assert_int_eq(n, 100);
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
}
END_TEST

/* SQLite's allocator with a count of the allocations it makes (xMalloc
** and xRealloc calls: a realloc may move a buffer as a malloc does). */
static sqlite3_mem_methods kvAllocDefault;
static sqlite3_int64 nKvAlloc = 0;
static void *kvCountMalloc(int n){
  nKvAlloc++;
  return kvAllocDefault.xMalloc(n);
}
static void *kvCountRealloc(void *p, int n){
  nKvAlloc++;
  return kvAllocDefault.xRealloc(p, n);
}
static void kv_alloc_count_install(void){
  sqlite3_mem_methods m;
  sqlite3_shutdown();
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_GETMALLOC, &kvAllocDefault),
                   SQLITE_OK);
  m = kvAllocDefault;
  m.xMalloc = kvCountMalloc;
  m.xRealloc = kvCountRealloc;
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_MALLOC, &m), SQLITE_OK);
  ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
}
/* Put SQLite's own allocator back (a later test of the same process, with
** CK_FORK=no, installs the counting one over the real one). */
static void kv_alloc_count_remove(void){
  sqlite3_shutdown();
  ck_assert_int_eq(sqlite3_config(SQLITE_CONFIG_MALLOC, &kvAllocDefault),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_initialize(), SQLITE_OK);
}

/* A kv_log scan hands each text to SQLite as a terminated string (a
** cached value has no NUL after it: the text goes from a terminated
** copy): fetching it with sqlite3_column_text allocates nothing, and
** neither does stepping from row to row, except around a text with an
** interior NUL, which SQLite terminates in a resized buffer (row 99; so
** the step to row 100 is not counted); every text and blob keeps its
** bytes. */
START_TEST(test_kv_log_column_text_allocates_nothing){
  char *zDir = 0;
  sqlite3 *db;
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 nStep = 0;
  int n = 0, iPass;
  kv_alloc_count_install();
  db = kv_text_db(2, &zDir);
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c "
              "WHERE i<100) INSERT INTO t SELECT i, printf('value-%010d', i) "
              "FROM c; UPDATE t SET value=CAST(x'610062' AS TEXT) "
              "WHERE key=99; UPDATE t SET value=x'00ff00' WHERE key=100");
  kv_text_settle(db);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key, value FROM t "
                                      "WHERE key>=1", -1, &pStmt, 0),
                   SQLITE_OK);
  for(iPass=0; iPass<2; iPass++){       /* the first pass fills the cache */
    sqlite3_int64 nBefore = nKvAlloc;
    n = 0;
    while( sqlite3_step(pStmt)==SQLITE_ROW ){
      const unsigned char *z;
      char zWant[32];
      int k = sqlite3_column_int(pStmt, 0);
      ck_assert_int_eq(k, ++n);
      if( iPass==1 && k>1 && k<100 ) nStep += nKvAlloc - nBefore;
      if( k==100 ){
        const unsigned char *a = sqlite3_column_blob(pStmt, 1);
        ck_assert_int_eq(sqlite3_column_type(pStmt, 1), SQLITE_BLOB);
        ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), 3);
        ck_assert_int_eq(memcmp(a, "\0\xff\0", 3), 0);
        nBefore = nKvAlloc;
        continue;
      }
      nBefore = nKvAlloc;
      z = sqlite3_column_text(pStmt, 1);
      ck_assert_ptr_nonnull(z);
      if( k<99 ){
        ck_assert_int_eq(nKvAlloc, nBefore);
        snprintf(zWant, sizeof(zWant), "value-%010d", k);
        ck_assert_str_eq((const char*)z, zWant);
        ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), 16);
      }else{
        ck_assert_int_eq(sqlite3_column_bytes(pStmt, 1), 3);
        ck_assert_int_eq(memcmp(z, "a\0b", 4), 0);
      }
      nBefore = nKvAlloc;
    }
    ck_assert_int_eq(sqlite3_reset(pStmt), SQLITE_OK);
    ck_assert_int_eq(n, 100);
  }
  ck_assert_msg(nStep==0, "steps to rows 2..99 allocated %lld times",
                (long long)nStep);
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  sqlite3_free(zDir);
  kv_alloc_count_remove();
}
END_TEST

START_TEST(test_kv_inmemory_db_needs_dir_for_persistence){
  sqlite3 *db = kv_db();
  kv_fail(db, "CREATE VIRTUAL TABLE t USING kv_memory(persistence=1)",
          "needs a store directory");
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory");
  th_exec(db, "INSERT INTO t VALUES(1,2)");
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key=1"), 2);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE name='t' "
                              "AND dir IS NULL"), 1);
  sqlite3_close(db);
}
END_TEST

/* dir= is an SQL string literal: a doubled quote inside stands for one
** quote, as in every other SQL string. */
START_TEST(test_kv_dir_argument_unquotes_doubled_quotes){
  char *zDir = th_tmpdir("kv-quote");
  sqlite3 *db = kv_db();
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE q1 USING "
      "kv_memory(dir='%q/it''s'); CREATE VIRTUAL TABLE q2 USING "
      "kv_memory(dir=\"%w/say \"\"hi\"\"\")", zDir, zDir);
  char *zWant = sqlite3_mprintf("%s/it's", zDir);
  th_exec(db, zSql);
  kv_text_eq(db, "SELECT substr(dir, -4) FROM kv_tables WHERE name='q1'",
             "it's");
  kv_text_eq(db, "SELECT substr(dir, -8) FROM kv_tables WHERE name='q2'",
             "say \"hi\"");
  ck_assert_int_eq(access(zWant, F_OK), 0);
  sqlite3_close(db);
  sqlite3_free(zWant);
  sqlite3_free(zSql);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ handles --- */

/* SELECT zExpr with %s replaced by the handle/dir, as text. */
static char *kv_call(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *zSql, *z;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  z = th_text(db, zSql);
  sqlite3_free(zSql);
  return z;
}

static sqlite3_int64 kv_intf(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *zSql;
  sqlite3_int64 v;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  v = th_int(db, zSql);
  sqlite3_free(zSql);
  return v;
}

static sqlite3_int64 kv_begin(sqlite3 *db, const char *zDir){
  char *zSql = sqlite3_mprintf("SELECT kv_begin('%q')", zDir);
  sqlite3_int64 h = th_int(db, zSql);
  sqlite3_free(zSql);
  return h;
}

static void kv_ok(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *zSql;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  th_exec(db, zSql);
  sqlite3_free(zSql);
}

static int kv_failf(sqlite3 *db, const char *zLike, const char *zFmt, ...){
  va_list ap;
  char *zSql;
  int rc;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  rc = kv_fail(db, zSql, zLike);
  sqlite3_free(zSql);
  return rc;
}

START_TEST(test_kv_vtab_of_a_removed_table_errors_and_drops){
  char *zDir = th_tmpdir("kv-gone");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  sqlite3 *db = th_open(zDb);
  sqlite3_int64 h;
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory");
  h = kv_intf(db, "SELECT kv_begin()");   /* the sidecar store */
  kv_ok(db, "SELECT kv_remove_table(%lld, 't'), kv_commit(%lld)", h, h);
  kv_fail(db, "SELECT * FROM t", "no such table: t (store ");
  kv_fail(db, "INSERT INTO t VALUES(1,1)", "no such table: t (store ");
  sqlite3_close(db);
  db = th_open(zDb);                       /* reconnects to a missing table */
  kv_fail(db, "SELECT * FROM t WHERE key=1", "no such table: t (store ");
  kv_fail(db, "SELECT * FROM t WHERE key>1", "no such table: t (store ");
  th_exec(db, "DROP TABLE t");
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory; INSERT INTO t VALUES(1,1)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST


/* ------------------------------------------- missing store directory --- */

/* Run zSql expecting the missing-store error of table zTab in store zDir:
** SQLITE_CANTOPEN and the full message. */
static void kv_fail_missing(sqlite3 *db, const char *zSql, const char *zDir,
                            const char *zTab){
  char *zWant = sqlite3_mprintf("kv: store %s of table %s is missing (moved "
      "or deleted?); restore it, or DROP TABLE %s", zDir, zTab, zTab);
  ck_assert_int_eq(kv_fail(db, zSql, 0), SQLITE_CANTOPEN);
  ck_assert_str_eq(sqlite3_errmsg(db), zWant);
  sqlite3_free(zWant);
}

/* The database file is reopened without its sidecar store (moved away):
** every read and write of the KV table fails with the missing-store error,
** ordinary tables keep working, and no store directory is created. */
START_TEST(test_kv_missing_sidecar_store_fails_and_creates_nothing){
  char *zDir = th_tmpdir("kv-nosidecar");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zSide = sqlite3_mprintf("%s-kv", zDb);
  char *zMoved = sqlite3_mprintf("%s/moved-kv", zDir);
  char *zAbs;                   /* the sidecar as the message names it */
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree;"
              "INSERT INTO t VALUES(1, 'a');"
              "CREATE TABLE plain(x); INSERT INTO plain VALUES(7)");
  sqlite3_close(db);
  ck_assert_int_eq(rename(zSide, zMoved), 0);
  db = th_open(zDb);
  zAbs = sqlite3_mprintf("%s-kv", sqlite3_db_filename(db, "main"));
  kv_fail_missing(db, "SELECT * FROM t", zAbs, "t");
  kv_fail_missing(db, "SELECT value FROM t WHERE key=1", zAbs, "t");
  kv_fail_missing(db, "INSERT INTO t VALUES(2, 'b')", zAbs, "t");
  kv_fail_missing(db, "DELETE FROM t", zAbs, "t");
  kv_fail_missing(db, "BEGIN; SELECT * FROM t", zAbs, "t");
  th_exec(db, "ROLLBACK");
  ck_assert_int_eq(th_int(db, "SELECT x FROM plain"), 7);
  th_exec(db, "INSERT INTO plain VALUES(8)");
  ck_assert_int_ne(access(zSide, F_OK), 0);
  sqlite3_close(db);
  ck_assert_int_ne(access(zSide, F_OK), 0);
  sqlite3_free(zAbs);
  sqlite3_free(zMoved);
  sqlite3_free(zSide);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A dir= store renamed away (an unmounted disk) fails its tables only:
** a table of another store of the same database keeps working, and the
** missing directory is not created. */
START_TEST(test_kv_missing_dir_store_fails_only_its_tables){
  char *zDir = th_tmpdir("kv-nodir");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zA = sqlite3_mprintf("%s/a", zDir);
  char *zAway = sqlite3_mprintf("%s/a-unmounted", zDir);
  char *zB = sqlite3_mprintf("%s/b", zDir);
  sqlite3 *db = th_open(zDb);
  kv_ok(db, "CREATE VIRTUAL TABLE t USING kv_btree(dir='%q');"
            "CREATE VIRTUAL TABLE u USING kv_btree(dir='%q');"
            "INSERT INTO t VALUES(1, 'a'); INSERT INTO u VALUES(1, 'b')",
        zA, zB);
  sqlite3_close(db);
  ck_assert_int_eq(rename(zA, zAway), 0);
  db = th_open(zDb);
  kv_fail_missing(db, "SELECT * FROM t", zA, "t");
  kv_fail_missing(db, "UPDATE t SET value = 'c'", zA, "t");
  kv_text_eq(db, "SELECT value FROM u WHERE key=1", "b");
  th_exec(db, "INSERT INTO u VALUES(2, 'x')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u"), 2);
  kv_fail_missing(db, "SELECT * FROM u, t", zA, "t");
  ck_assert_int_ne(access(zA, F_OK), 0);
  sqlite3_close(db);
  ck_assert_int_ne(access(zA, F_OK), 0);
  sqlite3_free(zB);
  sqlite3_free(zAway);
  sqlite3_free(zA);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* Number of entries of directory zDir (-1 if it cannot be read). */
static int kv_dir_entries(const char *zDir){
  DIR *d = opendir(zDir);
  struct dirent *e;
  int n = 0;
  if( d==0 ) return -1;
  while( (e = readdir(d))!=0 ){
    if( strcmp(e->d_name, ".")!=0 && strcmp(e->d_name, "..")!=0 ) n++;
  }
  closedir(d);
  return n;
}

/* A dir= store whose directory is there but empty (the mount point of a
** disk that is not mounted): every use of its table fails with
** SQLITE_CANTOPEN naming the directory, the queries find no store, and
** nothing is written into the empty directory; once the store is back
** the next statement reads it. */
START_TEST(test_kv_empty_store_dir_fails_and_creates_nothing){
  char *zDir = th_tmpdir("kv-emptydir");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zS = sqlite3_mprintf("%s/mnt", zDir);
  char *zAway = sqlite3_mprintf("%s/disk", zDir);
  char *zWant = sqlite3_mprintf("kv: store %s of table t holds no store "
      "files (disk not mounted? files deleted?); restore them, or DROP "
      "TABLE t", zS);
  char *zNoStore = sqlite3_mprintf("kv: no KV store at %s", zS);
  sqlite3 *db = th_open(zDb);
  kv_ok(db, "CREATE VIRTUAL TABLE t USING kv_btree(dir='%q');"
            "INSERT INTO t VALUES(1, 'a')", zS);
  sqlite3_close(db);
  ck_assert_int_eq(rename(zS, zAway), 0);
  ck_assert_int_eq(mkdir(zS, 0755), 0);
  db = th_open(zDb);
  ck_assert_int_eq(kv_fail(db, "SELECT * FROM t", 0), SQLITE_CANTOPEN);
  ck_assert_str_eq(sqlite3_errmsg(db), zWant);
  ck_assert_int_eq(kv_fail(db, "INSERT INTO t VALUES(2, 'b')", 0),
                   SQLITE_CANTOPEN);
  ck_assert_str_eq(sqlite3_errmsg(db), zWant);
  {
    char *zQ = sqlite3_mprintf("SELECT * FROM kv_query_with_version('t', "
                               "1, '%q')", zS);
    kv_fail(db, zQ, zNoStore);
    sqlite3_free(zQ);
  }
  ck_assert_int_eq(kv_dir_entries(zS), 0);
  sqlite3_close(db);
  ck_assert_int_eq(kv_dir_entries(zS), 0);
  ck_assert_int_eq(rmdir(zS), 0);
  ck_assert_int_eq(rename(zAway, zS), 0);
  db = th_open(zDb);
  kv_text_eq(db, "SELECT value FROM t WHERE key=1", "a");
  sqlite3_close(db);
  sqlite3_free(zNoStore);
  sqlite3_free(zWant);
  sqlite3_free(zAway);
  sqlite3_free(zS);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* DROP TABLE of a table whose store is missing drops it from the schema
** and creates nothing; a new CREATE then makes a new store as usual. */
START_TEST(test_kv_drop_table_of_a_missing_store_works){
  char *zDir = th_tmpdir("kv-nostore-drop");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zSide = sqlite3_mprintf("%s-kv", zDb);
  char *zMoved = sqlite3_mprintf("%s/moved-kv", zDir);
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory");
  sqlite3_close(db);
  ck_assert_int_eq(rename(zSide, zMoved), 0);
  db = th_open(zDb);
  th_exec(db, "DROP TABLE t");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM sqlite_schema "
                              "WHERE name='t'"), 0);
  ck_assert_int_ne(access(zSide, F_OK), 0);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory;"
              "INSERT INTO t VALUES(1, 1)");
  ck_assert_int_eq(access(zSide, F_OK), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  sqlite3_close(db);
  sqlite3_free(zMoved);
  sqlite3_free(zSide);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* A missing store that comes back (restored, remounted) serves the next
** statement of the same connection, with its data. */
START_TEST(test_kv_restored_store_works_at_the_next_statement){
  char *zDir = th_tmpdir("kv-restored");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zS = sqlite3_mprintf("%s/s", zDir);
  char *zAway = sqlite3_mprintf("%s/s-away", zDir);
  sqlite3 *db = th_open(zDb);
  kv_ok(db, "CREATE VIRTUAL TABLE t USING kv_btree(dir='%q');"
            "INSERT INTO t VALUES(1, 'a')", zS);
  sqlite3_close(db);
  ck_assert_int_eq(rename(zS, zAway), 0);
  db = th_open(zDb);
  kv_fail_missing(db, "SELECT * FROM t", zS, "t");
  ck_assert_int_eq(rename(zAway, zS), 0);
  kv_text_eq(db, "SELECT value FROM t WHERE key=1", "a");
  th_exec(db, "INSERT INTO t VALUES(2, 'b')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 2);
  sqlite3_close(db);
  sqlite3_free(zAway);
  sqlite3_free(zS);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST
/* Non-zero bytes of the WAL segments of store zDir (segments carry zero
** padding preallocated ahead of the appends; every record adds non-zero
** bytes). */
static long kv_wal_bytes(const char *zDir){
  char *zCmd = sqlite3_mprintf("cat '%q'/wal/*.log | tr -d '\\000' | wc -c",
                               zDir);
  FILE *f = popen(zCmd, "r");
  long n = -1;
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%ld", &n), 1);
  pclose(f);
  sqlite3_free(zCmd);
  return n;
}

START_TEST(test_kv_only_persistent_writes_reach_the_wal){
  char *zDir = th_tmpdir("kv-walbytes");
  sqlite3 *db = kv_db();
  sqlite3_int64 h;
  long n0, n1;
  kv_mk(db, "p", zDir, 1);
  kv_mk(db, "v", zDir, 0);
  th_exec(db, "INSERT INTO p VALUES(1, 1)");
  n0 = kv_wal_bytes(zDir);
  th_exec(db, "INSERT INTO v VALUES(1, 1); UPDATE v SET value=2");
  /* A writable root that only reads commits fully but appends nothing. */
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_get(%lld, 'p', 1), kv_commit(%lld)", h, h);
  n1 = kv_wal_bytes(zDir);
  ck_assert_int_eq(n0, n1);
  th_exec(db, "INSERT INTO p VALUES(2, 2)");
  ck_assert_int_gt(kv_wal_bytes(zDir), n1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_handles_read_write_commit){
  char *zDir = th_tmpdir("kv-handle");
  sqlite3 *db = kv_db();
  sqlite3_int64 h;
  char *z;
  kv_mk(db, "t", zDir, 0);
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'a', 1), kv_put(%lld, 't', 'b', x'ff')",
        h, h);
  z = kv_call(db, "SELECT kv_get(%lld, 't', 'a')", h);
  ck_assert_str_eq(z, "1");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);  /* not yet */
  z = kv_call(db, "SELECT quote(kv_delete(%lld, 't', 'b'))", h);
  ck_assert_str_eq(z, "X'FF'");
  sqlite3_free(z);
  z = kv_call(db, "SELECT quote(kv_delete(%lld, 't', 'zz'))", h);
  ck_assert_str_eq(z, "NULL");
  sqlite3_free(z);
  kv_ok(db, "SELECT kv_prepare(%lld)", h);
  kv_ok(db, "SELECT kv_commit(%lld)", h);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=1");
  kv_failf(db, "is finished", "SELECT kv_commit(%lld)", h);
  /* A read-only handle needs no commit; rolling it back is fine too. */
  h = kv_begin(db, zDir);
  z = kv_call(db, "SELECT kv_get(%lld, 't', 'a')", h);
  ck_assert_str_eq(z, "1");
  sqlite3_free(z);
  kv_ok(db, "SELECT kv_rollback(%lld)", h);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A handle passed back as a real with an integral value works like the
** integer: JavaScript hosts (better-sqlite3) bind every number as a real,
** so kv_begin()'s result comes back as 1.0. */
START_TEST(test_kv_handle_bound_as_an_integral_real_works){
  char *zDir = th_tmpdir("kv-hreal");
  sqlite3 *db = kv_db();
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 h;
  char *z;
  kv_mk(db, "t", zDir, 0);
  h = kv_begin(db, zDir);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT kv_put(?1, 't', 'a', 1),"
      " kv_put(?1, 't', 'b', 2), kv_delete(?1, 't', 'b'), kv_get(?1, 't',"
      " 'a'), kv_table_meta(?1, 't') IS NOT NULL", -1, &pStmt, 0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_bind_double(pStmt, 1, (double)h), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  ck_assert_int_eq(sqlite3_column_int(pStmt, 2), 2);
  ck_assert_int_eq(sqlite3_column_int(pStmt, 3), 1);
  ck_assert_int_eq(sqlite3_column_int(pStmt, 4), 1);
  sqlite3_finalize(pStmt);
  kv_ok(db, "SELECT kv_prepare(%lld.0), kv_commit(%lld.0)", h, h);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "a=1");
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld.0, 't', 'c', 3), kv_rollback(%lld.0)", h, h);
  kv_failf(db, "is finished", "SELECT kv_commit(%lld.0)", h);
  /* not an integer: refused, as text is */
  kv_failf(db, "handle must be an integer from kv_begin(), got real",
           "SELECT kv_get(%lld.5, 't', 'a')", h);
  z = kv_call(db, "SELECT count(*) FROM t");
  ck_assert_str_eq(z, "1");
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A prepared or failed handle refuses more operations with a message that
** names the handle the caller holds (not an internal transaction id) and
** says how to end it; kv_rollback still ends it. */
START_TEST(test_kv_prepared_and_failed_handles_name_the_handle){
  char *zDir = th_tmpdir("kv-hstate");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  sqlite3_int64 h, h2;
  char *zWant;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('k', 1)");
  kv_begin(db, zDir);                       /* handles and ids drift apart */
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'a', 1), kv_prepare(%lld)", h, h);
  zWant = sqlite3_mprintf("transaction handle %lld is prepared", h);
  kv_failf(db, zWant, "SELECT kv_put(%lld, 't', 'b', 1)", h);
  kv_failf(db, zWant, "SELECT kv_get(%lld, 't', 'a')", h);
  kv_failf(db, zWant, "SELECT kv_delete(%lld, 't', 'a')", h);
  kv_failf(db, zWant, "SELECT kv_prepare(%lld)", h);
  kv_failf(db, zWant, "SELECT kv_create_table(%lld, 'n', 'kv_memory')", h);
  sqlite3_free(zWant);
  kv_ok(db, "SELECT kv_rollback(%lld)", h);
  h2 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_get(%lld, 't', 'k'), kv_put(%lld, 't', 'k', 2)", h2, h2);
  th_exec(db2, "UPDATE t SET value = 3 WHERE key = 'k'");
  ck_assert_int_eq(kv_failf(db, "conflicts", "SELECT kv_commit(%lld)", h2),
                   SQLITE_BUSY_SNAPSHOT);
  zWant = sqlite3_mprintf("transaction handle %lld failed and was rolled "
                          "back", h2);
  kv_failf(db, zWant, "SELECT kv_put(%lld, 't', 'k', 4)", h2);
  kv_failf(db, zWant, "SELECT kv_commit(%lld)", h2);
  sqlite3_free(zWant);
  kv_ok(db, "SELECT kv_rollback(%lld)", h2);
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='k'"), 3);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_handle_conflicts_same_value_and_aba){
  char *zDir = th_tmpdir("kv-aba");
  sqlite3 *db = kv_db();
  sqlite3_int64 h1, h2, h3;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('k', 'A')");
  h1 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_get(%lld, 't', 'k')", h1);
  /* Two commits: A -> B -> A, the value ends where it started. */
  h2 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'k', 'B'), kv_commit(%lld)", h2, h2);
  h3 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'k', 'A'), kv_commit(%lld)", h3, h3);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'x', 1)", h1);
  ck_assert_int_eq(kv_failf(db, "t key 'k'", "SELECT kv_commit(%lld)", h1),
                   SQLITE_BUSY_SNAPSHOT);
  kv_failf(db, "failed and was rolled back", "SELECT kv_put(%lld,'t',1,1)", h1);
  kv_ok(db, "SELECT kv_rollback(%lld)", h1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key='x'"), 0);
  /* A blind same-value write conflicts too. */
  h1 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'k', 'A')", h1);
  h2 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'k', 'A'), kv_commit(%lld)", h2, h2);
  ck_assert_int_eq(kv_failf(db, "'k'", "SELECT kv_commit(%lld)", h1),
                   SQLITE_BUSY_SNAPSHOT);
  kv_ok(db, "SELECT kv_rollback(%lld)", h1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A table created and written by one transaction: once it committed, two
** later transactions writing one key of it still conflict (the table's
** count of bound transactions must come out of the creator's commit at
** zero, else the first writer's revision is not recorded and the second
** commit overwrites it unchecked).  Through handles and through SQL. */
START_TEST(test_kv_table_created_and_written_in_one_txn_still_conflicts){
  char *zDir = th_tmpdir("kv-create-write-conflict");
  sqlite3 *db = kv_db();
  sqlite3_int64 h, h1, h2;
  int i;
  for(i=0; i<2; i++){
    const char *zTab = i==0 ? "x" : "y";
    if( i==0 ){
      h = kv_begin(db, zDir);
      kv_ok(db, "SELECT kv_create_table(%lld, 'x', 'kv_memory')", h);
      kv_ok(db, "SELECT kv_put(%lld, 'x', 'k', 0), kv_commit(%lld)", h, h);
    }else{
      kv_ok(db, "BEGIN; CREATE VIRTUAL TABLE y USING kv_memory(dir='%q');"
                "INSERT INTO y VALUES('k', 0); COMMIT", zDir);
    }
    h1 = kv_begin(db, zDir);
    h2 = kv_begin(db, zDir);
    kv_ok(db, "SELECT kv_put(%lld, '%s', 'k', kv_get(%lld, '%s', 'k')+1)",
          h1, zTab, h1, zTab);
    kv_ok(db, "SELECT kv_put(%lld, '%s', 'k', kv_get(%lld, '%s', 'k')+1)",
          h2, zTab, h2, zTab);
    kv_ok(db, "SELECT kv_commit(%lld)", h1);
    ck_assert_int_eq(kv_failf(db, "key 'k'", "SELECT kv_commit(%lld)", h2),
                     SQLITE_BUSY_SNAPSHOT);
    kv_ok(db, "SELECT kv_rollback(%lld)", h2);
    ck_assert_int_eq(kv_intf(db, "SELECT value FROM kv_query_with_version("
                             "'%s', 'k', '%q')", zTab, zDir), 1);
  }
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Commits of many distinct keys under a busy workload: some transaction is
** always open on the table (each short, the next one begins before the
** previous ends), so the table never goes idle.  The revisions the
** conflict check keeps must still be bounded by what the open transactions
** can need, not grow with every key ever written; and conflicts are still
** found. */
static void kv_churn(sqlite3 *db, const char *zDir, int iFrom, int n,
                     sqlite3_int64 *phOld){
  int i;
  for(i=iFrom; i<iFrom+n; i++){
    sqlite3_int64 hNew = kv_begin(db, zDir), h = kv_begin(db, zDir);
    kv_ok(db, "SELECT kv_get(%lld, 't', 'zz')", hNew);
    kv_ok(db, "SELECT kv_put(%lld, 't', 'k%d', 1), kv_commit(%lld)", h, i, h);
    h = kv_begin(db, zDir);
    kv_ok(db, "SELECT kv_delete(%lld, 't', 'k%d'), kv_commit(%lld)", h, i, h);
    kv_ok(db, "SELECT kv_rollback(%lld)", *phOld);
    *phOld = hNew;
  }
}

START_TEST(test_kv_revisions_stay_bounded_under_a_busy_workload){
  char *zDir = th_tmpdir("kv-rev-busy");
  sqlite3 *db = kv_db();
  sqlite3_int64 hOld, h1, h2, nMem0, nMem1;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES('zz', 0)");
  hOld = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_get(%lld, 't', 'zz')", hOld);
  kv_churn(db, zDir, 0, 1000, &hOld);
  nMem0 = sqlite3_memory_used();
  kv_churn(db, zDir, 1000, 4000, &hOld);
  nMem1 = sqlite3_memory_used();
  /* 8000 more revisions kept whole grow it by over 300 kB */
  ck_assert_msg(nMem1 - nMem0 < 100000, "memory grew by %lld bytes",
                (long long)(nMem1 - nMem0));
  /* an open transaction still conflicts with a later commit */
  h1 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'zz', kv_get(%lld, 't', 'zz')+1)",
        h1, h1);
  kv_churn(db, zDir, 5000, 300, &hOld);
  h2 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'zz', 5), kv_commit(%lld)", h2, h2);
  kv_churn(db, zDir, 5300, 300, &hOld);
  ck_assert_int_eq(kv_failf(db, "key 'zz'", "SELECT kv_commit(%lld)", h1),
                   SQLITE_BUSY_SNAPSHOT);
  kv_ok(db, "SELECT kv_rollback(%lld), kv_rollback(%lld)", h1, hOld);
  ck_assert_int_eq(th_int(db, "SELECT value FROM t WHERE key='zz'"), 5);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_try_commit_returns_conflicts_as_json){
  char *zDir = th_tmpdir("kv-try");
  sqlite3 *db = kv_db();
  sqlite3_int64 h1, h2;
  char *z;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db, "u", zDir, 0);
  h1 = kv_begin(db, zDir);
  h2 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld,'u',x'01',1), kv_put(%lld,'t','b',1), "
            "kv_put(%lld,'t',2,1)", h1, h1, h1);
  kv_ok(db, "SELECT kv_put(%lld,'t',2,2), kv_put(%lld,'u',x'01',2), "
            "kv_put(%lld,'t','b',2)", h2, h2, h2);
  z = kv_call(db, "SELECT quote(kv_try_commit(%lld))", h2);
  ck_assert_str_eq(z, "NULL");
  sqlite3_free(z);
  z = kv_call(db, "SELECT kv_try_commit(%lld)", h1);
  ck_assert_str_eq(z, "[{\"table\":\"t\",\"key\":2},{\"table\":\"t\","
                   "\"key\":\"b\"},{\"table\":\"u\",\"key\":\"x'01'\"}]");
  sqlite3_free(z);
  kv_failf(db, "is finished", "SELECT kv_rollback(%lld)", h1);
  kv_rows_eq(db, "SELECT key||value AS x FROM t", "22 b2");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Conflicts on long keys: kv_try_commit's JSON names a blob key in full
** (the application must be able to find it); the error message shortens
** long keys visibly, with the key's size, and never splits a character. */
START_TEST(test_kv_conflicts_on_long_keys_are_exact_or_marked_short){
  char *zDir = th_tmpdir("kv-longkey");
  sqlite3 *db = kv_db();
  sqlite3_int64 h1, h2;
  char *z, *zWant;
  kv_mk(db, "t", zDir, 0);
  h1 = kv_begin(db, zDir);
  h2 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld,'t',zeroblob(40),1)", h1);
  kv_ok(db, "SELECT kv_put(%lld,'t',zeroblob(40),2), kv_commit(%lld)", h2, h2);
  z = kv_call(db, "SELECT kv_try_commit(%lld)", h1);
  zWant = sqlite3_mprintf("[{\"table\":\"t\",\"key\":\"x'%s'\"}]",
      "00000000000000000000000000000000000000000000000000000000000000000000"
      "000000000000");
  ck_assert_str_eq(z, zWant);
  sqlite3_free(zWant);
  sqlite3_free(z);
  h1 = kv_begin(db, zDir);
  h2 = kv_begin(db, zDir);
  /* 63 ASCII bytes, then a 2-byte character across the 64-byte cut. */
  kv_ok(db, "SELECT kv_put(%lld,'t',printf('%%.63c','a')||'\xc3\xa9z',1)",
        h1);
  kv_ok(db, "SELECT kv_put(%lld,'t',printf('%%.63c','a')||'\xc3\xa9z',2), "
            "kv_commit(%lld)", h2, h2);
  kv_failf(db, "aaa'... (66 bytes); the transaction", "SELECT kv_commit(%lld)",
           h1);
  kv_ok(db, "SELECT kv_rollback(%lld)", h1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_prepared_reservations_conflict){
  char *zDir = th_tmpdir("kv-resv");
  sqlite3 *db = kv_db();
  sqlite3_int64 h1, h2, h3, h4;
  kv_mk(db, "t", zDir, 0);
  h1 = kv_begin(db, zDir);
  h2 = kv_begin(db, zDir);
  h3 = kv_begin(db, zDir);
  h4 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 1, 'w'), kv_get(%lld, 't', 2)", h1, h1);
  kv_ok(db, "SELECT kv_get(%lld, 't', 1)", h2);       /* read vs write */
  kv_ok(db, "SELECT kv_put(%lld, 't', 2, 'w')", h3);  /* write vs read */
  kv_ok(db, "SELECT kv_get(%lld, 't', 2), kv_put(%lld, 't', 3, 1)", h4, h4);
  kv_ok(db, "SELECT kv_prepare(%lld)", h1);
  ck_assert_int_eq(kv_failf(db, "t key 1", "SELECT kv_prepare(%lld)", h2),
                   SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(kv_failf(db, "t key 2", "SELECT kv_prepare(%lld)", h3),
                   SQLITE_BUSY_SNAPSHOT);
  kv_ok(db, "SELECT kv_prepare(%lld)", h4);          /* read vs read: fine */
  kv_ok(db, "SELECT kv_commit(%lld), kv_commit(%lld)", h1, h4);
  kv_ok(db, "SELECT kv_rollback(%lld), kv_rollback(%lld)", h2, h3);
  kv_rows_eq(db, "SELECT key AS x FROM t", "1 3");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* kv_root_bind_set: tables bound together share one point: a commit to
** both after the bind is seen by neither; a set with a table the root has
** bound already, or a missing one, binds (or fails) table by table. */
START_TEST(test_kv_bind_set_snapshots_tables_at_one_point){
  char *zDir = th_tmpdir("kv-bindset");
  sqlite3 *db = kv_db();
  KvEngine *pEng = 0;
  KvRoot *r = 0, *w = 0;
  KvBuf buf = {0, 0, 0};
  const char *az[3] = { "a", "b", "nosuch" };
  int an[3] = { 1, 1, 6 };
  uint8_t k[] = {1}, v[] = {0, 0};
  char *zErr = 0;
  int bFound = 1;
  kv_mk(db, "a", zDir, 0);
  kv_mk(db, "b", zDir, 0);
  ck_assert_int_eq(kv_engine_open(zDir, &pEng, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(kv_root_bind_set(r, 2, az, an, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_begin(pEng, &w), SQLITE_OK);
  ck_assert_int_eq(kv_put(w, "a", 1, k, 1, v, 2, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_put(w, "b", 1, k, 1, v, 2, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(w, &zErr), SQLITE_OK);
  kv_root_free(w);
  ck_assert_int_eq(kv_get(pEng, r, "a", 1, k, 1, &buf, &bFound, &zErr), 0);
  ck_assert_int_eq(bFound, 0);
  ck_assert_int_eq(kv_get(pEng, r, "b", 1, k, 1, &buf, &bFound, &zErr), 0);
  ck_assert_int_eq(bFound, 0);
  /* bound already: each as kv_root_bind (no error, same snapshot) */
  ck_assert_int_eq(kv_root_bind_set(r, 2, az, an, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_get(pEng, r, "b", 1, k, 1, &buf, &bFound, &zErr), 0);
  ck_assert_int_eq(bFound, 0);
  kv_root_free(r);
  /* a missing table fails as kv_root_bind does, naming it */
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  ck_assert_int_eq(kv_root_bind_set(r, 3, az, an, &zErr), SQLITE_ERROR);
  ck_assert_ptr_nonnull(strstr(zErr, "no such table: nosuch"));
  sqlite3_free(zErr);
  zErr = 0;
  ck_assert_int_eq(kv_get(pEng, r, "a", 1, k, 1, &buf, &bFound, &zErr), 0);
  ck_assert_int_eq(bFound, 1);
  kv_root_free(r);
  kv_buf_free(&buf);
  kv_engine_unref(pEng);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_conflicts_are_complete_and_sorted){
  char *zDir = th_tmpdir("kv-sorted");
  sqlite3 *db = kv_db();
  KvEngine *pEng = 0;
  KvRoot *r1 = 0, *r2 = 0;
  const KvConflict *a;
  char *zErr = 0;
  int n, i;
  kv_mk(db, "b", zDir, 0);
  kv_mk(db, "a", zDir, 0);
  ck_assert_int_eq(kv_engine_open(zDir, &pEng, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_begin(pEng, &r1), SQLITE_OK);
  ck_assert_int_eq(kv_root_begin(pEng, &r2), SQLITE_OK);
  /* r1 touches b:3 b:1 a:2 (writes and reads); r2 writes them all. */
  for(i=0; i<2; i++){
    KvRoot *r = i ? r2 : r1;
    uint8_t k1[] = {1}, k2[] = {2}, k3[] = {3};
    uint8_t v[] = {0, 0};
    KvBuf buf = {0, 0, 0};
    int bFound;
    ck_assert_int_eq(kv_put(r, "b", 1, k3, 1, v, 2, &zErr), SQLITE_OK);
    ck_assert_int_eq(kv_put(r, "b", 1, k1, 1, v, 2, &zErr), SQLITE_OK);
    if( i==0 ){
      ck_assert_int_eq(kv_get(pEng, r, "a", 1, k2, 1, &buf, &bFound, &zErr),
                       SQLITE_OK);
      ck_assert_int_eq(kv_get(pEng, r, "b", 1, k1, 1, &buf, &bFound, &zErr),
                       SQLITE_OK);
    }else{
      ck_assert_int_eq(kv_put(r, "a", 1, k2, 1, v, 2, &zErr), SQLITE_OK);
    }
    kv_buf_free(&buf);
  }
  ck_assert_int_eq(kv_root_commit(r2, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_prepare(r1, &zErr), SQLITE_BUSY_SNAPSHOT);
  sqlite3_free(zErr);
  n = kv_root_conflicts(r1, &a);
  ck_assert_int_eq(n, 3);
  ck_assert(a[0].nTable==1 && a[0].zTable[0]=='a' && a[0].aKey[0]==2);
  ck_assert(a[1].zTable[0]=='b' && a[1].aKey[0]==1);
  ck_assert(a[2].zTable[0]=='b' && a[2].aKey[0]==3);
  ck_assert_int_eq(kv_root_state(r1), KV_ROOT_FAILED);
  kv_root_free(r1);
  kv_root_free(r2);
  kv_engine_unref(pEng);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_ddl_through_handles_is_atomic){
  char *zDir = th_tmpdir("kv-ddl");
  sqlite3 *db = kv_db();
  sqlite3_int64 h;
  char *z;
  h = kv_begin(db, zDir);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_create_table(%lld, "
                   "'n1', 'kv_memory', '{\"persistence\":1}')", h), 1);
  kv_ok(db, "SELECT kv_put(%lld, 'n1', 1, 'one')", h);
  z = kv_call(db, "SELECT kv_table_meta(%lld, 'n1')", h);
  ck_assert_msg(strstr(z, "\"type\":\"kv_memory\"") &&
                strstr(z, "\"persistence\":1"), "%s", z);
  sqlite3_free(z);
  kv_ok(db, "SELECT kv_rollback(%lld)", h);
  /* Rolled back: no catalog entry, nothing listed. */
  h = kv_begin(db, zDir);
  z = kv_call(db, "SELECT kv_table_meta(%lld, 'n1')", h);
  ck_assert_ptr_null(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
                              "WHERE name='n1'"), 0);
  /* Create + write + commit in one root. */
  kv_ok(db, "SELECT kv_create_table(%lld, 'n1', 'kv_memory'), "
            "kv_put(%lld, 'n1', 1, 'one'), kv_commit(%lld)", h, h, h);
  kv_mk(db, "n1", zDir, 0);
  kv_rows_eq(db, "SELECT key||value AS x FROM n1", "1one");
  /* Creating an existing table of the same kind reports 0. */
  h = kv_begin(db, zDir);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_create_table(%lld, "
                   "'n1', 'kv_memory')", h), 0);
  kv_failf(db, "exists as kv_memory with persistence=0",
           "SELECT kv_create_table(%lld, 'n1', 'kv_memory', "
           "'{\"persistence\":1}')", h);
  kv_ok(db, "SELECT kv_put(%lld, 'n1', 2, 'two')", h);
  kv_failf(db, "must come before every write",
           "SELECT kv_create_table(%lld, 'n2', 'kv_memory')", h);
  kv_failf(db, "must be alone", "SELECT kv_remove_table(%lld, 'n1')", h);
  kv_ok(db, "SELECT kv_commit(%lld)", h);
  /* remove_table alone in its root; nothing may follow it. */
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_remove_table(%lld, 'n1')", h);
  kv_failf(db, "must be alone", "SELECT kv_get(%lld, 'n1', 1)", h);
  kv_ok(db, "SELECT kv_commit(%lld)", h);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
                              "WHERE name='n1'"), 0);
  kv_fail(db, "SELECT * FROM n1", "no such table: n1");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_concurrent_remove_conflicts_with_writer){
  char *zDir = th_tmpdir("kv-rmconf");
  sqlite3 *db = kv_db();
  sqlite3_int64 h1, h2;
  kv_mk(db, "t", zDir, 0);
  h1 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 1, 1)", h1);
  h2 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_remove_table(%lld, 't'), kv_commit(%lld)", h2, h2);
  ck_assert_int_eq(kv_failf(db, "table t (created or removed concurrently)",
                            "SELECT kv_commit(%lld)", h1),
                   SQLITE_BUSY_SNAPSHOT);
  kv_ok(db, "SELECT kv_rollback(%lld)", h1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A table first touched by a write takes its read snapshot at the first
** read: that read sees what was committed in between (and the commit then
** conflicts on it, the write having bound earlier); a table removed in
** between cannot be read at all. */
START_TEST(test_kv_write_first_table_snapshots_at_first_read){
  char *zDir = th_tmpdir("kv-lazysnap");
  sqlite3 *db = kv_db();
  sqlite3_int64 h1;
  char *z;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db, "u", zDir, 0);
  h1 = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 'a', 1), kv_put(%lld, 'u', 'a', 1)",
        h1, h1);
  th_exec(db, "INSERT INTO t VALUES('b', 2)");
  z = kv_call(db, "SELECT kv_get(%lld, 't', 'b')", h1);
  ck_assert_str_eq(z, "2");
  sqlite3_free(z);
  th_exec(db, "DROP TABLE u");
  ck_assert_int_eq(kv_failf(db, "table u was removed or recreated",
                            "SELECT kv_get(%lld, 'u', 'z')", h1),
                   SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(kv_failf(db, "t key 'b'", "SELECT kv_commit(%lld)", h1),
                   SQLITE_BUSY_SNAPSHOT);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "b=2");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_handles_are_per_connection_and_rolled_back_at_close){
  char *zDir = th_tmpdir("kv-close");
  sqlite3 *db = kv_db();
  sqlite3 *db2 = kv_db();
  sqlite3_int64 h;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db2, "t", zDir, 0);
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 1, 1), kv_prepare(%lld)", h, h);
  kv_failf(db2, "unknown transaction handle", "SELECT kv_commit(%lld)", h);
  sqlite3_close(db);                       /* rolls h back */
  th_exec(db2, "INSERT INTO t VALUES(1, 2)");   /* no reservation left */
  ck_assert_int_eq(th_int(db2, "SELECT value FROM t WHERE key=1"), 2);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* kv_table_meta registers no read: a transaction that looked up a table's
** entry still commits after another one removed that table, or created the
** one it found missing. */
START_TEST(test_kv_table_meta_registers_no_read){
  char *zDir = th_tmpdir("kv-metaread");
  sqlite3 *db = kv_db(), *db2 = kv_db();
  sqlite3_int64 h, h2;
  kv_mk(db, "t", zDir, 0);
  kv_mk(db, "u", zDir, 0);
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_table_meta(%lld, 't'), kv_table_meta(%lld, 'n'), "
            "kv_put(%lld, 'u', 1, 'x')", h, h, h);
  h2 = kv_begin(db2, zDir);
  kv_ok(db2, "SELECT kv_remove_table(%lld, 't'), kv_commit(%lld)", h2, h2);
  h2 = kv_begin(db2, zDir);
  kv_ok(db2, "SELECT kv_create_table(%lld, 'n', 'kv_memory'), "
             "kv_commit(%lld)", h2, h2);
  kv_ok(db, "SELECT kv_commit(%lld)", h);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM u", "1=x");
  kv_rows_eq(db, "SELECT name AS x FROM kv_tables ORDER BY name", "n u");
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* A KV table exists with one type: attaching it from another database as
** another type, or creating it again as another type through a handle, is
** refused and leaves the table as it was. */
START_TEST(test_kv_table_of_another_type_is_refused){
  char *zDir = th_tmpdir("kv-wrongtype");
  sqlite3 *db = kv_db(), *db2 = kv_db();
  sqlite3_int64 h;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 'one')");
  kv_failf(db2, "table t exists as kv_memory with persistence=0; cannot "
           "attach it as kv_btree", "CREATE VIRTUAL TABLE t USING "
           "kv_btree(dir='%q')", zDir);
  kv_failf(db2, "cannot attach it as kv_log",
           "CREATE VIRTUAL TABLE t USING kv_log(dir='%q')", zDir);
  h = kv_begin(db, zDir);
  kv_failf(db, "table t exists as kv_memory with persistence=0, not kv_btree",
           "SELECT kv_create_table(%lld, 't', 'kv_btree')", h);
  kv_ok(db, "SELECT kv_commit(%lld)", h);
  kv_rows_eq(db, "SELECT name||type||persistence||rows AS x FROM kv_tables",
             "tkv_memory01");
  kv_rows_eq(db, "SELECT key||value AS x FROM t", "1one");
  ck_assert_int_eq(th_int(db2, "SELECT count(*) FROM sqlite_master"), 0);
  sqlite3_close(db);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}
END_TEST

/* Count the entries below zPath (recursively) whose name is zName. */
static int kv_count_named(const char *zPath, const char *zName){
  DIR *d = opendir(zPath);
  struct dirent *e;
  int n = 0;
  if( d==0 ) return 0;
  while( (e = readdir(d))!=0 ){
    char *zSub;
    if( strcmp(e->d_name, ".")==0 || strcmp(e->d_name, "..")==0 ) continue;
    if( strcmp(e->d_name, zName)==0 ) n++;
    zSub = sqlite3_mprintf("%s/%s", zPath, e->d_name);
    n += kv_count_named(zSub, zName);
    sqlite3_free(zSub);
  }
  closedir(d);
  return n;
}

/* Append to zList the entries below zPath, one a line, as zRel + name. */
static char *kv_tree_add(char *zList, const char *zPath, const char *zRel){
  DIR *d = opendir(zPath);
  struct dirent *e;
  if( d==0 ) return zList;
  while( (e = readdir(d))!=0 ){
    char *zSub, *zSubRel;
    if( strcmp(e->d_name, ".")==0 || strcmp(e->d_name, "..")==0 ) continue;
    zSub = sqlite3_mprintf("%s/%s", zPath, e->d_name);
    zSubRel = sqlite3_mprintf("%s%s/", zRel, e->d_name);
    ck_assert_ptr_nonnull(zSub);
    ck_assert_ptr_nonnull(zSubRel);
    zList = sqlite3_mprintf("%z%.*s\n", zList, (int)strlen(zSubRel)-1,
                            zSubRel);
    zList = kv_tree_add(zList, zSub, zSubRel);
    sqlite3_free(zSub);
    sqlite3_free(zSubRel);
  }
  closedir(d);
  return zList;
}

/* The entries below zPath (recursively, relative to it), sorted, joined
** by ' '. */
static char *kv_tree(const char *zPath){
  char *zList = kv_tree_add(sqlite3_mprintf(""), zPath, "");
  sqlite3 *db = th_open(":memory:");
  sqlite3_stmt *pStmt = 0;
  char *z;
  ck_assert_int_eq(sqlite3_prepare_v2(db, "WITH RECURSIVE s(n, rest) AS "
      "(SELECT NULL, ?1 UNION ALL SELECT substr(rest, 1, instr(rest, "
      "char(10))-1), substr(rest, instr(rest, char(10))+1) FROM s "
      "WHERE rest<>'') SELECT group_concat(n, ' ') FROM (SELECT n FROM s "
      "WHERE n IS NOT NULL ORDER BY n)", -1, &pStmt, 0), SQLITE_OK);
  sqlite3_bind_text(pStmt, 1, zList, -1, SQLITE_STATIC);
  ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
  z = sqlite3_mprintf("%s", sqlite3_column_text(pStmt, 0));
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  sqlite3_free(zList);
  return z;
}

/* Table names are data, never paths: names made of path syntax give
** kv_btree and kv_log tables (the types with files) whose files all stay
** inside the store, named by no part of the table name, and the tables
** work across a reopen. */
START_TEST(test_kv_table_names_never_become_paths){
  static const char *azName[] = { "../esc1", "../../esc2", "/esc3", "d/esc4" };
  static const char *azType[] = { "kv_log", "kv_btree", "kv_log",
                                  "kv_btree" };
  char *zTop = th_tmpdir("kv-pathnames");
  char *zDir = sqlite3_mprintf("%s/store", zTop);
  sqlite3 *db = kv_db();
  int i;
  for(i=0; i<4; i++){
    kv_ok(db, "CREATE VIRTUAL TABLE \"%w\" USING %s(dir='%q', "
              "persistence=1); INSERT INTO \"%w\" VALUES(%d, 'v')",
          azName[i], azType[i], zDir, azName[i], i);
  }
  sqlite3_close(db);
  db = kv_db();
  for(i=0; i<4; i++){
    kv_ok(db, "CREATE VIRTUAL TABLE \"%w\" USING %s(dir='%q')",
          azName[i], azType[i], zDir);
    ck_assert_int_eq(kv_intf(db, "SELECT key FROM \"%w\" WHERE value='v'",
                             azName[i]), i);
  }
  sqlite3_close(db);
  ck_assert_int_eq(kv_count_named(zTop, "store"), 1);
  ck_assert_int_eq(kv_count_named(zTop, "d"), 0);
  for(i=1; i<=4; i++){
    char zEsc[8];
    char *zUp = sqlite3_mprintf("%s/../esc%d", zTop, i);
    snprintf(zEsc, sizeof(zEsc), "esc%d", i);
    ck_assert_int_eq(kv_count_named(zTop, zEsc), 0);
    ck_assert_int_ne(access(zUp, F_OK), 0);
    sqlite3_free(zUp);
  }
  ck_assert_int_ne(access("/esc3", F_OK), 0);
  sqlite3_free(zDir);
  sqlite3_free(zTop);
}
END_TEST

/* True if task zTid of this process is alive and not exiting.  A thread
** stays listed in /proc/self/task for a moment after pthread_join()
** returns (the kernel wakes the joiner before it unlists the task), but
** it is flagged PF_EXITING (0x4, the 9th field of its stat) from the
** start of its exit. */
static int kv_thread_live(const char *zTid){
  char zPath[64], a[512], *z;
  unsigned int flags = 0;
  size_t n;
  FILE *f;
  snprintf(zPath, sizeof(zPath), "/proc/self/task/%s/stat", zTid);
  if( (f = fopen(zPath, "r"))==0 ) return 0;         /* gone meanwhile */
  n = fread(a, 1, sizeof(a)-1, f);
  fclose(f);
  a[n] = 0;
  z = strrchr(a, ')');                     /* the name may hold anything */
  if( z==0 || sscanf(z+1, " %*c %*d %*d %*d %*d %*d %u", &flags)!=1 ){
    return 0;
  }
  return (flags & 0x4)==0;
}

/* The number of threads of this process that are not exiting. */
static int kv_thread_count(void){
  DIR *d = opendir("/proc/self/task");
  struct dirent *e;
  int n = 0;
  ck_assert_ptr_nonnull(d);
  while( (e = readdir(d))!=0 ){
    if( e->d_name[0]!='.' && kv_thread_live(e->d_name) ) n++;
  }
  closedir(d);
  return n;
}

/* Stores start background threads (kv_btree and kv_log sync and
** maintenance); closing the last connection that uses a store joins every
** one of them before sqlite3_close() returns. */
static void *kv_thread_noop(void *p){ return p; }

START_TEST(test_kv_closing_last_user_joins_background_threads){
  char *zDir = th_tmpdir("kv-threads");
  pthread_t t;
  int nBase;
  /* A first thread may make the runtime start threads of its own (the
  ** ThreadSanitizer runtime does): count after one has come and gone. */
  ck_assert_int_eq(pthread_create(&t, 0, kv_thread_noop, 0), 0);
  pthread_join(t, 0);
  nBase = kv_thread_count();
  sqlite3 *db = kv_db(), *db2 = kv_db();
  kv_ok(db, "CREATE VIRTUAL TABLE b USING kv_btree(dir='%q'); "
            "CREATE VIRTUAL TABLE l USING kv_log(dir='%q'); "
            "CREATE VIRTUAL TABLE m USING kv_memory(dir='%q', persistence=1);"
            "INSERT INTO b VALUES(1,1); INSERT INTO l VALUES(1,1); "
            "INSERT INTO m VALUES(1,1)", zDir, zDir, zDir);
  kv_ok(db2, "SELECT kv_begin('%q')", zDir);
  ck_assert_int_gt(kv_thread_count(), nBase);
  sqlite3_close(db);
  sqlite3_close(db2);
  ck_assert_int_eq(kv_thread_count(), nBase);
  sqlite3_free(zDir);
}
END_TEST

/* The kv_* functions change state outside the database file, so they are
** SQLITE_DIRECTONLY: a view or a trigger that calls one fails, and
** the call (here a write through a live handle) has no effect. */
static const char *azDirect[] = {
  "kv_begin()", "kv_begin('%D')", "kv_get(%H, 't', 1)",
  "kv_put(%H, 't', 1, 'v')", "kv_delete(%H, 't', 1)", "kv_prepare(%H)",
  "kv_commit(%H)", "kv_rollback(%H)", "kv_try_commit(%H)",
  "kv_table_meta(%H, 't')", "kv_create_table(%H, 'n', 'kv_memory')",
  "kv_create_table(%H, 'n', 'kv_memory', '{}')", "kv_remove_table(%H, 't')",
};

static char *kv_subst(const char *zSql, sqlite3_int64 h, const char *zDir);

START_TEST(test_kv_functions_are_direct_only){
  char *zDir = th_tmpdir("kv-directonly");
  sqlite3 *db = kv_db();
  sqlite3_int64 h;
  char *zCall, *zName, *zLike;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "CREATE TABLE src(x); CREATE TABLE dst(y)");
  h = kv_begin(db, zDir);
  zCall = kv_subst(azDirect[_i], h, zDir);
  zName = sqlite3_mprintf("%.*s", (int)(strchr(zCall, '(')-zCall), zCall);
  zLike = sqlite3_mprintf("unsafe use of %s()", zName);
  kv_ok(db, "CREATE VIEW v AS SELECT %s AS r", zCall);
  kv_fail(db, "SELECT * FROM v", zLike);
  kv_ok(db, "CREATE TRIGGER tr AFTER INSERT ON src BEGIN "
            "INSERT INTO dst VALUES(%s); END", zCall);
  kv_fail(db, "INSERT INTO src VALUES(1)", zLike);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM src"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM dst"), 0);
  /* The handle is untouched: it still commits, with nothing in it. */
  kv_ok(db, "SELECT kv_commit(%lld)", h);
  kv_rows_eq(db, "SELECT name AS x FROM kv_tables", "t");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  sqlite3_free(zLike);
  sqlite3_free(zName);
  sqlite3_free(zCall);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* kv_memory has no data file: with persistence=1 its writes go to the root
** WAL only, so its store holds the lock file, the catalog and the WAL. */
START_TEST(test_kv_memory_tables_have_no_data_file){
  char *zDir = th_tmpdir("kv-nofile");
  sqlite3 *db = kv_db();
  char *z;
  long n0;
  kv_mk(db, "p", zDir, 1);
  kv_mk(db, "v", zDir, 0);
  n0 = kv_wal_bytes(zDir);
  th_exec(db, "INSERT INTO p VALUES(1, randomblob(5000)); "
              "INSERT INTO v VALUES(1, randomblob(5000))");
  ck_assert_int_ge(kv_wal_bytes(zDir), n0 + 4000);
  z = kv_tree(zDir);
  ck_assert_str_eq(z, "LOCK tables_meta wal wal/0000000000000001.log");
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A create that is rolled back leaves no file or directory behind, for the
** types with files too: a SQL ROLLBACK after a write to the new table, and
** a handle's kv_rollback after kv_prepare (which made the files).  (The
** store's shared kv_btree.db and kv_log/ folder exist from the first table
** of their type on.) */
START_TEST(test_kv_rolled_back_create_leaves_no_files){
  char *zDir = th_tmpdir("kv-ddlfiles");
  sqlite3 *db = kv_db();
  sqlite3_int64 h;
  char *zBefore, *zAfter;
  kv_mk(db, "t", zDir, 1);
  kv_ok(db, "CREATE VIRTUAL TABLE b0 USING kv_btree(dir='%q'); "
            "CREATE VIRTUAL TABLE l0 USING kv_log(dir='%q'); DROP TABLE l0; "
            "INSERT INTO b0 VALUES(1, 1); INSERT INTO t VALUES(1, 1)",
        zDir, zDir);
  zBefore = kv_tree(zDir);
  kv_ok(db, "BEGIN; CREATE VIRTUAL TABLE l USING kv_log(dir='%q'); "
            "CREATE VIRTUAL TABLE b USING kv_btree(dir='%q'); "
            "INSERT INTO l VALUES(1, 1); INSERT INTO b VALUES(1, 1); "
            "ROLLBACK", zDir, zDir);
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_create_table(%lld, 'l2', 'kv_log'), "
            "kv_create_table(%lld, 'b2', 'kv_btree'), "
            "kv_put(%lld, 'l2', 1, 1), kv_put(%lld, 'b2', 1, 1), "
            "kv_prepare(%lld), kv_rollback(%lld)", h, h, h, h, h, h);
  zAfter = kv_tree(zDir);
  ck_assert_str_eq(zBefore, zAfter);
  kv_rows_eq(db, "SELECT name AS x FROM kv_tables ORDER BY name", "b0 t");
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---------------------------------------------------------- bad input --- */

/* Each statement must fail with a message containing the text given, and
** change nothing.  %H is replaced by a live handle, %D by the store. */
static const struct { const char *zSql; const char *zLike; } aBad[] = {
  { "SELECT kv_get(NULL, 't', 1)", "handle must be an integer" },
  { "SELECT kv_get('1', 't', 1)", "handle must be an integer" },
  { "SELECT kv_get(1.5, 't', 1)", "handle must be an integer" },
  { "SELECT kv_put(1e300, 't', 1, 1)", "handle must be an integer" },
  { "SELECT kv_put(999, 't', 1, 1)", "unknown transaction handle 999" },
  { "SELECT kv_commit(-4)", "unknown transaction handle" },
  { "SELECT kv_get(%H, NULL, 1)", "table name must be text" },
  { "SELECT kv_get(%H, x'74', 1)", "table name must be text" },
  { "SELECT kv_get(%H, 'nosuch', 1)", "no such table: nosuch" },
  { "SELECT kv_put(%H, 't', NULL, 1)", "key must not be NULL" },
  { "SELECT kv_put(%H, 't', zeroblob(32769), 1)", "limit is 32768" },
  { "SELECT kv_put(%H, 't', 1, zeroblob(16777217))", "limit is 16777216" },
  { "SELECT kv_put(%H, '', 1, 1)", "1..4096 bytes" },
  { "SELECT kv_put(%H, printf('%.4097c', 'x'), 1, 1)", "got 4097" },
  { "SELECT kv_put(%H, CAST(x'ff61' AS TEXT), 1, 1)", "not valid UTF-8" },
  { "SELECT kv_put(%H, 'tv', CAST(x'ff61' AS TEXT), 1)",
    "text key is not valid UTF-8 (at byte 0)" },
  { "SELECT kv_get(%H, 'tv', CAST(x'61c0af' AS TEXT))",
    "text key is not valid UTF-8 (at byte 1)" },
  { "SELECT kv_delete(%H, 'tv', CAST(x'f4908080' AS TEXT))",
    "text key is not valid UTF-8" },
  { "INSERT INTO tv VALUES(CAST(x'eda080' AS TEXT), 1)",
    "text key is not valid UTF-8" },
  { "UPDATE tv SET key=CAST(x'80' AS TEXT) WHERE key=1",
    "text key is not valid UTF-8" },
  { "SELECT kv_get(%H, '.tables_meta', 't')", ".tables_meta is internal" },
  { "SELECT kv_put(%H, '.tables_meta', 't', 1)", ".tables_meta is internal" },
  { "SELECT kv_delete(%H, '.tables_meta', 't')", ".tables_meta is internal" },
  { "SELECT kv_remove_table(%H, '.tables_meta')", ".tables_meta is internal" },
  { "SELECT kv_create_table(%H, '.tables_meta', 'kv_memory')",
    ".tables_meta is internal" },
  { "SELECT kv_table_meta(%H, 5)", "table name must be text" },
  { "SELECT kv_table_meta(%H, '.tables_meta')", ".tables_meta is internal" },
  { "SELECT kv_table_meta(%H, '')", "1..4096 bytes" },
  { "SELECT kv_table_meta(%H, CAST(x'ff' AS TEXT))", "not valid UTF-8" },
  { "SELECT kv_create_table(%H, 'n', 'kv_nosuch')", "unknown table type" },
  { "SELECT kv_create_table(%H, 'n', 7)", "table type must be text" },
  { "SELECT kv_create_table(%H, 'n', 'kv_memory', 'nope')",
    "must be a JSON object" },
  { "SELECT kv_create_table(%H, 'n', 'kv_memory', '[1]')",
    "must be a JSON object" },
  { "SELECT kv_create_table(%H, 'n', 'kv_memory', '{\"x\":1}')",
    "unknown option 'x' (allowed: persistence)" },
  { "SELECT kv_create_table(%H, 'n', 'kv_btree', '{\"x\":1}')",
    "unknown option 'x' (allowed: persistence, accelerated_repair)" },
  { "SELECT kv_create_table(%H, 'n', 'kv_memory', "
    "'{\"accelerated_repair\":1}')", "applies to kv_btree tables only" },
  { "SELECT kv_create_table(%H, 'n', 'kv_log', '{\"accelerated_repair\":0}')",
    "applies to kv_btree tables only" },
  { "SELECT kv_create_table(%H, 'n', 'kv_memory', '{\"persistence\":2}')",
    "persistence must be 0 or 1" },
  { "SELECT kv_create_table(%H, 'n', 'kv_memory', "
    "'{\"persistence\":4294967296}')", "persistence must be 0 or 1" },
  { "SELECT kv_create_table(%H, 'n', 'kv_btree', "
    "'{\"accelerated_repair\":4294967297}')",
    "accelerated_repair must be 0 or 1" },
  { "SELECT kv_create_table(%H, 'n', 'kv_btree', "
    "'{\"accelerated_repair\":-1}')", "accelerated_repair must be 0 or 1" },
  { "SELECT kv_create_table(%H, 't', 'kv_memory', '{\"persistence\":1}')",
    "exists as kv_memory with persistence=0" },
  { "SELECT kv_remove_table(%H, 'nosuch')", "no such table" },
  { "SELECT kv_begin(5)", "store directory must be text" },
  { "SELECT kv_begin('')", "store directory must not be empty" },
  { "SELECT kv_begin('%D' || char(0) || 'x')",
    "store directory must not contain NUL" },
  { "CREATE VIRTUAL TABLE x1 USING kv_memory(dir='%D', persistence=2)",
    "bad argument" },
  { "CREATE VIRTUAL TABLE x2 USING kv_memory(dir='%D', color=1)",
    "bad argument" },
  { "CREATE VIRTUAL TABLE x3 USING kv_memory(dir='%D', zzz)", "bad argument" },
  { "CREATE VIRTUAL TABLE x4 USING kv_btree(dir='%D', color=1)",
    "expected dir=PATH, persistence=0|1 or accelerated_repair=0|1" },
  { "CREATE VIRTUAL TABLE x5 USING kv_log(dir='%D', accelerated_repair=1)",
    "expected dir=PATH or persistence=0|1" },
  { "CREATE VIRTUAL TABLE x6 USING kv_memory(dir='%D', dir='%D/other')",
    "argument dir is given twice" },
  { "CREATE VIRTUAL TABLE x7 USING kv_memory(persistence=0, dir='%D', "
    "persistence=1)", "argument persistence is given twice" },
  { "CREATE VIRTUAL TABLE x8 USING kv_btree(accelerated_repair=1, "
    "dir='%D', colour=1)", "bad argument 'colour=1'" },
  { "CREATE VIRTUAL TABLE only_kv USING kv_memory(dir='%D', persistence=1)",
    "cannot attach" },
  { "CREATE VIRTUAL TABLE \".tables_meta\" USING kv_memory(dir='%D')",
    "is internal" },
  { "INSERT INTO tv VALUES(NULL, 1)", "NULL" },
  { "INSERT INTO tv VALUES(zeroblob(40000), 1)", "limit is 32768" },
  { "ALTER TABLE tv RENAME TO tw", "cannot be renamed" },
};

static char *kv_subst(const char *zSql, sqlite3_int64 h, const char *zDir){
  char *z = sqlite3_mprintf("");
  const char *p;
  for(p=zSql; *p; p++){
    if( p[0]=='%' && p[1]=='H' ){ z = sqlite3_mprintf("%z%lld", z, h); p++; }
    else if( p[0]=='%' && p[1]=='D' ){ z = sqlite3_mprintf("%z%s", z, zDir); p++; }
    else z = sqlite3_mprintf("%z%c", z, *p);
  }
  return z;
}

START_TEST(test_kv_bad_input_is_rejected_and_changes_nothing){
  char *zDir = th_tmpdir("kv-bad");
  sqlite3 *db = kv_db();
  sqlite3_int64 h;
  char *zSql, *zBefore, *zAfter;
  const char *zState = "SELECT (SELECT group_concat(name||type||persistence"
      "||rows) FROM kv_tables) || '|' || (SELECT group_concat(key||value) "
      "FROM tv)";
  kv_mk(db, "t", zDir, 0);
  kv_mk(db, "tv", zDir, 0);
  th_exec(db, "INSERT INTO tv VALUES(1, 1)");
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_create_table(%lld, 'only_kv', 'kv_memory'), "
            "kv_commit(%lld)", h, h);
  h = kv_begin(db, zDir);
  zBefore = th_text(db, zState);
  zSql = kv_subst(aBad[_i].zSql, h, zDir);
  kv_fail(db, zSql, aBad[_i].zLike);
  zAfter = th_text(db, zState);
  ck_assert_str_eq(zBefore, zAfter);
  /* The handle still works (or was never involved). */
  kv_ok(db, "SELECT kv_commit(%lld)", h);
  sqlite3_free(zSql);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A text key must be valid UTF-8 (so every key can be shown as JSON); the
** same bytes as a blob are a key, and valid text with a NUL or a 4-byte
** character round-trips. */
START_TEST(test_kv_text_keys_must_be_utf8_blob_keys_need_not){
  char *zDir = th_tmpdir("kv-utf8key");
  sqlite3 *db = kv_db();
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(x'ff61', 'blob')");
  th_exec(db, "INSERT INTO t VALUES('a' || char(0) || 'b', 'nul')");
  th_exec(db, "INSERT INTO t VALUES(char(128512), 'emoji')");
  kv_fail(db, "INSERT INTO t VALUES(CAST(x'ff61' AS TEXT), 'bad')",
          "text key is not valid UTF-8");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=x'ff61' "
                              "AND value='blob'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT length(CAST(key AS BLOB)) FROM t "
                              "WHERE value='nul'"), 3);
  ck_assert_int_eq(th_int(db, "SELECT unicode(key) FROM t "
                              "WHERE value='emoji'"), 128512);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A child process that opens the store zDir (through a handle) and keeps
** it open until kvHolderStop.  Returns once the child has it open.  The
** store holds a kv_memory table with persistence=1, which processes do
** not share: other processes are kept out. */
typedef struct KvHolder KvHolder;
struct KvHolder { pid_t pid; int aDown[2]; };

static void kvHolderStart(KvHolder *p, const char *zDir){
  int aUp[2];
  char c = 0;
  ck_assert_int_eq(pipe(aUp), 0);
  ck_assert_int_eq(pipe(p->aDown), 0);
  p->pid = fork();
  if( p->pid==0 ){
    sqlite3 *dbc = kv_db();
    sqlite3_int64 h;
    th_execf(dbc, "CREATE VIRTUAL TABLE lg USING kv_memory(dir='%q', "
                  "persistence=1)", zDir);
    h = kv_begin(dbc, zDir);
    (void)h;
    if( write(aUp[1], "x", 1)!=1 ) _exit(1);
    if( read(p->aDown[0], &c, 1)!=1 ) _exit(1);
    sqlite3_close(dbc);
    _exit(0);
  }
  ck_assert_int_eq(read(aUp[0], &c, 1), 1);
  close(aUp[0]);
  close(aUp[1]);
}

static void kvHolderStop(KvHolder *p){
  ck_assert_int_eq(write(p->aDown[1], "x", 1), 1);
  waitpid(p->pid, 0, 0);
  close(p->aDown[0]);
  close(p->aDown[1]);
}

START_TEST(test_kv_second_process_gets_busy){
  char *zDir = th_tmpdir("kv-lock");
  KvHolder child;
  sqlite3 *db;
  kv_engine_test_join_wait(300);
  kvHolderStart(&child, zDir);
  db = kv_db();
  ck_assert_int_eq(kv_failf(db, "is locked by another process",
                            "SELECT kv_begin('%q')", zDir), SQLITE_BUSY);
  {               /* the message names the store's real path and the pid */
    char *zReal = realpath(zDir, 0);
    char *zWant = sqlite3_mprintf("kv: store %s is locked by another process"
                                  " (pid %d)", zReal, (int)child.pid);
    ck_assert_ptr_nonnull(zReal);
    ck_assert_msg(strstr(sqlite3_errmsg(db), zWant)!=0, "%s",
                  sqlite3_errmsg(db));
    sqlite3_free(zWant);
    free(zReal);
  }
  kvHolderStop(&child);
  kv_begin(db, zDir);                      /* free now */
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A user who takes LOCK for a stale leftover and deletes it while a
** process has the store open does not let a second process in: the
** store directory itself is locked too. */
START_TEST(test_kv_second_process_gets_busy_after_lock_file_deleted){
  char *zDir = th_tmpdir("kv-lockdel");
  char *zLock = sqlite3_mprintf("%s/LOCK", zDir);
  KvHolder child;
  sqlite3 *db;
  kvHolderStart(&child, zDir);
  ck_assert_int_eq(unlink(zLock), 0);
  db = kv_db();
  ck_assert_int_eq(kv_failf(db, "is locked by another process",
                            "SELECT kv_begin('%q')", zDir), SQLITE_BUSY);
  kvHolderStop(&child);
  kv_begin(db, zDir);                      /* free now, LOCK recreated */
  ck_assert_int_eq(access(zLock, F_OK), 0);
  sqlite3_close(db);
  sqlite3_free(zLock);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ threads --- */

typedef struct KvRace KvRace;
struct KvRace {
  const char *zDir;
  pthread_barrier_t *pBarrier;
  int rc;
};

static void *kvRaceThread(void *pArg){
  KvRace *p = (KvRace*)pArg;
  sqlite3 *db = 0;
  sqlite3_open(":memory:", &db);
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING "
                               "kv_memory(dir='%q')", p->zDir);
  sqlite3_exec(db, zSql, 0, 0, 0);
  sqlite3_free(zSql);
  sqlite3_exec(db, "BEGIN; UPDATE t SET value=value+1 WHERE key IN (1,2)",
               0, 0, 0);
  pthread_barrier_wait(p->pBarrier);
  p->rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
  if( p->rc!=SQLITE_OK ) p->rc = sqlite3_extended_errcode(db);
  sqlite3_close(db);
  return 0;
}

START_TEST(test_kv_two_threads_overlapping_keys_one_commits){
  char *zDir = th_tmpdir("kv-race");
  sqlite3 *db = kv_db();
  pthread_barrier_t barrier;
  pthread_t a[2];
  KvRace r[2];
  int i, nOk = 0;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "INSERT INTO t VALUES(1, 0), (2, 0)");
  pthread_barrier_init(&barrier, 0, 2);
  for(i=0; i<2; i++){
    r[i].zDir = zDir; r[i].pBarrier = &barrier; r[i].rc = -1;
    pthread_create(&a[i], 0, kvRaceThread, &r[i]);
  }
  for(i=0; i<2; i++) pthread_join(a[i], 0);
  for(i=0; i<2; i++){
    if( r[i].rc==SQLITE_OK ) nOk++;
    else ck_assert_int_eq(r[i].rc, SQLITE_BUSY_SNAPSHOT);
  }
  ck_assert_int_eq(nOk, 1);
  kv_rows_eq(db, "SELECT value AS x FROM t", "1 1");
  pthread_barrier_destroy(&barrier);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Point readers against a writer: every value a reader gets is one the
** writer wrote for that key, whole, while the writer replaces the entries
** the readers have pinned (ThreadSanitizer and ASan check the pins). */
#define PIN_KEYS    16
#define PIN_ROUNDS  400

typedef struct KvPinRace KvPinRace;
struct KvPinRace {
  const char *zDir;
  int bWriter;
  int nBad;
};

static void *kvPinRaceThread(void *pArg){
  KvPinRace *p = (KvPinRace*)pArg;
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  char *zSql;
  int i, k;
  sqlite3_open(":memory:", &db);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_memory(dir='%q')",
                         p->zDir);
  sqlite3_exec(db, zSql, 0, 0, 0);
  sqlite3_free(zSql);
  sqlite3_prepare_v2(db, p->bWriter
      ? "INSERT OR REPLACE INTO t VALUES(?1, printf('k%02d-r%06d-', ?1, ?2))"
      : "SELECT value FROM t WHERE key=?1", -1, &pStmt, 0);
  for(i=0; i<PIN_ROUNDS; i++){
    for(k=0; k<PIN_KEYS; k++){
      int rc;
      sqlite3_bind_int(pStmt, 1, k);
      if( p->bWriter ) sqlite3_bind_int(pStmt, 2, i);
      rc = sqlite3_step(pStmt);
      if( p->bWriter ){
        if( rc!=SQLITE_DONE ) p->nBad++;
      }else if( rc!=SQLITE_ROW ){
        p->nBad++;                      /* every key is always there */
      }else{
        const char *z = (const char*)sqlite3_column_text(pStmt, 0);
        char zWant[8];
        snprintf(zWant, sizeof(zWant), "k%02d-r", k);
        if( z==0 || sqlite3_column_bytes(pStmt, 0)!=12
         || memcmp(z, zWant, 5)!=0 || z[11]!='-' ){
          p->nBad++;
        }
      }
      sqlite3_reset(pStmt);
    }
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return 0;
}

START_TEST(test_kv_memory_pinned_point_reads_race_a_writer){
  char *zDir = th_tmpdir("kv-pin-race");
  sqlite3 *db = kv_db();
  pthread_t a[4];
  KvPinRace r[4];
  int i;
  kv_mk(db, "t", zDir, 0);
  th_exec(db, "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM c "
              "WHERE i<15) INSERT INTO t SELECT i, printf('k%02d-r%06d-', i, "
              "0) FROM c");
  for(i=0; i<4; i++){
    r[i].zDir = zDir; r[i].bWriter = i==0; r[i].nBad = 0;
    ck_assert_int_eq(pthread_create(&a[i], 0, kvPinRaceThread, &r[i]), 0);
  }
  for(i=0; i<4; i++) pthread_join(a[i], 0);
  for(i=0; i<4; i++) ck_assert_int_eq(r[i].nBad, 0);
  kv_rows_eq(db, "SELECT count(*) AS x FROM t "
                 "WHERE value LIKE '%-r000399-'", "16");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

#define BANK_ACCOUNTS 8
#define BANK_THREADS  4
#define BANK_MOVES    300

/* Transfers per thread: BANK_MOVES, or DEPOT_TORTURE_ITERS times that. */
static int kvBankMoves(void){
  const char *z = getenv("DEPOT_TORTURE_ITERS");
  int n = z ? atoi(z) : 0;
  return BANK_MOVES * (n>1 ? n : 1);
}

typedef struct KvBank KvBank;
struct KvBank {
  const char *zDir;
  unsigned int seed;
  int nMoves;
  int nOk, nConflict, nOther;
};

static void *kvBankThread(void *pArg){
  KvBank *p = (KvBank*)pArg;
  sqlite3 *db = 0;
  int i;
  char *zSql;
  sqlite3_open(":memory:", &db);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE acct USING "
                         "kv_memory(dir='%q')", p->zDir);
  sqlite3_exec(db, zSql, 0, 0, 0);
  sqlite3_free(zSql);
  for(i=0; i<p->nMoves; i++){
    int a = rand_r(&p->seed)%BANK_ACCOUNTS, b = rand_r(&p->seed)%BANK_ACCOUNTS;
    int amt = rand_r(&p->seed)%10 + 1, rc;
    zSql = sqlite3_mprintf("BEGIN; UPDATE acct SET value=value-%d WHERE key=%d;"
        "UPDATE acct SET value=value+%d WHERE key=%d; COMMIT", amt, a, amt, b);
    rc = sqlite3_exec(db, zSql, 0, 0, 0);
    sqlite3_free(zSql);
    if( rc==SQLITE_OK ) p->nOk++;
    else if( sqlite3_extended_errcode(db)==SQLITE_BUSY_SNAPSHOT ) p->nConflict++;
    else p->nOther++;
    if( !sqlite3_get_autocommit(db) ) sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
  }
  sqlite3_close(db);
  return 0;
}

START_TEST(test_kv_bank_transfers_keep_the_sum){
  char *zDir = th_tmpdir("kv-bank");
  sqlite3 *db = kv_db();
  pthread_t a[BANK_THREADS];
  KvBank b[BANK_THREADS];
  int i, nOk = 0, nConflict = 0;
  kv_mk(db, "acct", zDir, 0);
  for(i=0; i<BANK_ACCOUNTS; i++) kv_ok(db, "INSERT INTO acct VALUES(%d, 1000)", i);
  for(i=0; i<BANK_THREADS; i++){
    memset(&b[i], 0, sizeof(b[i]));
    b[i].zDir = zDir;
    b[i].seed = 17u*(i+1);
    b[i].nMoves = kvBankMoves();
    pthread_create(&a[i], 0, kvBankThread, &b[i]);
  }
  for(i=0; i<BANK_THREADS; i++){
    /* Readers see a consistent sum while transfers run. */
    ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"),
                     1000*BANK_ACCOUNTS);
  }
  for(i=0; i<BANK_THREADS; i++){
    pthread_join(a[i], 0);
    ck_assert_int_eq(b[i].nOther, 0);
    nOk += b[i].nOk;
    nConflict += b[i].nConflict;
  }
  ck_assert_int_eq(nOk + nConflict, BANK_THREADS*kvBankMoves());
  ck_assert_int_gt(nOk, 0);
  ck_assert_int_eq(th_int(db, "SELECT sum(value) FROM acct"),
                   1000*BANK_ACCOUNTS);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM acct"), BANK_ACCOUNTS);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------ crash, faults --- */

/* Child: create table c<i> and write pair i into the persistence=1 table
** "pairs" in one transaction, acknowledge i on fd, forever. */
static void kvCrashChild(const char *zDir, int fd){
  sqlite3 *db = th_open(":memory:");
  int i;
  char *zSql;
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE pairs USING "
                         "kv_memory(dir='%q', persistence=1)", zDir);
  if( sqlite3_exec(db, zSql, 0, 0, 0)!=SQLITE_OK ) _exit(1);
  sqlite3_free(zSql);
  for(i=1; ; i++){
    sqlite3_int64 h = kv_begin(db, zDir);
    zSql = sqlite3_mprintf(
        "SELECT kv_create_table(%lld, 'c%d', 'kv_memory', "
        "'{\"persistence\":1}'), kv_put(%lld, 'c%d', 'k', %d), "
        "kv_commit(%lld);"
        "BEGIN; INSERT INTO pairs VALUES('a%d', %d), ('b%d', %d); COMMIT;",
        h, i, h, i, i, h, i, i, i, i);
    if( sqlite3_exec(db, zSql, 0, 0, 0)!=SQLITE_OK ) _exit(2);
    sqlite3_free(zSql);
    if( write(fd, &i, sizeof(i))!=sizeof(i) ) _exit(3);
  }
}

START_TEST(test_kv_sigkill_keeps_every_acknowledged_commit){
  char *zDir = th_tmpdir("kv-kill");
  int aPipe[2], i, nAck = 0, v;
  pid_t pid;
  sqlite3 *db;
  sqlite3_int64 h;
  ck_assert_int_eq(pipe(aPipe), 0);
  pid = fork();
  if( pid==0 ){
    close(aPipe[0]);
    kvCrashChild(zDir, aPipe[1]);
  }
  close(aPipe[1]);
  while( nAck<40 && read(aPipe[0], &v, sizeof(v))==sizeof(v) ) nAck = v;
  kill(pid, SIGKILL);
  waitpid(pid, 0, 0);
  while( read(aPipe[0], &v, sizeof(v))==sizeof(v) ) nAck = v;
  ck_assert_int_ge(nAck, 40);
  db = kv_db();
  kv_mk(db, "pairs", zDir, 1);
  h = kv_begin(db, zDir);
  for(i=1; i<=nAck; i++){
    char *z = kv_call(db, "SELECT kv_get(%lld, 'c%d', 'k')", h, i);
    ck_assert_msg(z && atoi(z)==i, "table c%d lost its row", i);
    sqlite3_free(z);
    ck_assert_int_eq(kv_intf(db, "SELECT count(*) FROM pairs WHERE key IN "
                     "('a%d','b%d') AND value=%d", i, i, i), 2);
  }
  /* Whatever went past the acknowledgement is whole or absent. */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM pairs") % 2, 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM pairs p WHERE NOT EXISTS "
      "(SELECT 1 FROM pairs q WHERE q.key='b'||substr(p.key,2)) "
      "AND p.key LIKE 'a%'"), 0);
  kv_ok(db, "SELECT kv_rollback(%lld)", h);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

static const struct { int eKind; int err; int rcWant; } aFault[] = {
  { WAL_FAULT_WRITE, ENOSPC, SQLITE_FULL },
  { WAL_FAULT_WRITE, EIO,    SQLITE_IOERR_WRITE },
  { WAL_FAULT_FSYNC, EIO,    SQLITE_IOERR_FSYNC },
  { WAL_FAULT_SHORT, 0,      0 },
};

/* In a child: open the store, run zSql, check zCheck gives zWant, and
** exit without closing anything (a crash after the work). */
static void kv_crash_after(const char *zDir, const char *zSql,
                           const char *zCheck, const char *zWant){
  pid_t pid = fork();
  int st = 0;
  if( pid==0 ){
    sqlite3 *db = th_open(":memory:");
    char *zMk, *z;
    zMk = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING "
                          "kv_memory(dir='%q', persistence=1)", zDir);
    if( sqlite3_exec(db, zMk, 0, 0, 0)!=SQLITE_OK ) _exit(1);
    if( zSql && sqlite3_exec(db, zSql, 0, 0, 0)!=SQLITE_OK ) _exit(2);
    z = th_text(db, zCheck);
    if( !((z==0 && zWant==0) || (z && zWant && strcmp(z, zWant)==0)) ){
      fprintf(stderr, "kv_crash_after: got '%s', want '%s'\n",
              z ? z : "NULL", zWant ? zWant : "NULL");
    }
    _exit((z==0 && zWant==0) || (z && zWant && strcmp(z, zWant)==0) ? 0 : 3);
  }
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
}

/* Child side of the fault test: exit code says which step went wrong. */
static int kvFaultChild(const char *zDir, int iCase){
  WalFault *f = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  char *zSql;
  int rc;
  if( f==0 ) return 10;
  kv_engine_test_io(wal_fault_io(f));
  db = th_open(":memory:");
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_memory(dir='%q', "
                         "persistence=1); INSERT INTO t VALUES(1, 'kept')",
                         zDir);
  rc = sqlite3_exec(db, zSql, 0, 0, 0);
  sqlite3_free(zSql);
  if( rc!=SQLITE_OK ) return 11;
  wal_fault_arm(f, aFault[iCase].eKind, 1, aFault[iCase].err, 0);
  rc = sqlite3_exec(db, "BEGIN; INSERT INTO t VALUES(2, 'lost'); COMMIT",
                    0, 0, 0);
  if( rc==SQLITE_OK ) return 12;
  rc = sqlite3_extended_errcode(db);
  if( aFault[iCase].rcWant && rc!=aFault[iCase].rcWant ) return 13;
  if( strstr(sqlite3_errmsg(db), "wal")==0 ) return 14;
  {                                        /* it names the WAL file */
    char *zWal = sqlite3_mprintf("%s/wal/", zDir);
    const char *zAt = zWal ? strstr(sqlite3_errmsg(db), zWal) : 0;
    sqlite3_free(zWal);
    if( zAt==0 || strstr(zAt, ".log")==0 ) return 17;
  }
  if( !sqlite3_get_autocommit(db) ) return 15;
  wal_fault_arm(f, aFault[iCase].eKind, 0, 0, 0);
  if( sqlite3_exec(db, "INSERT INTO t VALUES(3, 'after')", 0, 0, 0) ){
    return 16;
  }
  return 0;                                /* crash: exit without closing */
}

START_TEST(test_kv_wal_failure_fails_commit_and_store_reopens){
  char *zDir = th_tmpdir("kv-fault");
  pid_t pid = fork();
  int st = 0;
  if( pid==0 ) _exit(kvFaultChild(zDir, _i));
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child step %d",
                WEXITSTATUS(st));
  /* The failed record is never replayed; the later one is.  (Record 1 is
  ** confirmed, so kv_memory may have let its segment retire.) */
  kv_crash_after(zDir, 0, "SELECT count(*) FROM t WHERE key=2", "0");
  kv_crash_after(zDir, 0, "SELECT value FROM t WHERE key=3", "after");
  sqlite3_free(zDir);
}
END_TEST

/* A kv_log table's collector syncs once per batch of commits, not once
** per commit: single-row autocommit upserts at kv_synchronous('normal') take two
** fsyncs (root WAL and log) per 20 ms, not two per few commits (root WAL and log), not two per commit. */
START_TEST(test_kv_log_collector_batches_commits){
  char *zDir = th_tmpdir("kv-log-batch");
  WalFault *f = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  sqlite3_stmt *pStmt = 0;
  char *zSql;
  struct timespec t0, t1;
  long long ms;
  int i, nBefore;
  ck_assert_ptr_nonnull(f);
  kv_engine_test_io(wal_fault_io(f));
  db = kv_db();
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_log(dir='%q');"
                         "SELECT kv_synchronous('normal')", zDir);
  th_exec(db, zSql);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t "
                   "VALUES(?1, printf('value-%010d', ?1))", -1, &pStmt, 0),
                   SQLITE_OK);
  for(i=0; i<2000; i++){
    sqlite3_bind_int(pStmt, 1, (i*7919)%500);
    ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_DONE);
    sqlite3_reset(pStmt);
  }
  nBefore = wal_fault_count(f, WAL_FAULT_FSYNC);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for(i=0; i<2000; i++){
    sqlite3_bind_int(pStmt, 1, (i*7919)%500);
    ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_DONE);
    sqlite3_reset(pStmt);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  sqlite3_finalize(pStmt);
  /* a pass (two fsyncs: the root WAL's, the log's) at most every 20 ms of
  ** the loop, and one more on each side of it */
  ms = (t1.tv_sec-t0.tv_sec)*1000 + (t1.tv_nsec-t0.tv_nsec)/1000000;
  ck_assert_int_le(wal_fault_count(f, WAL_FAULT_FSYNC) - nBefore,
                   2*(int)(ms/20 + 3));
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 500);
  sqlite3_close(db);
  kv_engine_test_io(0);
  wal_fault_free(f);
  sqlite3_free(zSql);
  sqlite3_free(zDir);
}
END_TEST

/* sqlite3_exec callback: fails (aborts the exec) unless the value is 0. */
static int kvCountIsZero(void *pArg, int nCol, char **az, char **azCol){
  (void)pArg; (void)azCol;
  return !(nCol==1 && az[0] && strcmp(az[0], "0")==0);
}

/* In a child: create kv_log and kv_btree tables in one transaction while
** the Nth write (of the WAL or of the tables' files) fails, for N = 1, 2,
** ... until the transaction commits.  Each failed COMMIT must leave the
** store's files as they were.  Returns 0, or the step that went wrong. */
static int kvFailedCreateChild(const char *zDir){
  WalFault *f = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  char *zBefore = 0, *zSql;
  int n, rc = SQLITE_OK;
  if( f==0 ) return 10;
  kv_engine_test_io(wal_fault_io(f));
  db = th_open(":memory:");
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE b0 USING kv_btree(dir='%q');"
      "CREATE VIRTUAL TABLE l0 USING kv_log(dir='%q'); DROP TABLE l0; "
      "INSERT INTO b0 VALUES(1, 1)", zDir, zDir);
  if( sqlite3_exec(db, zSql, 0, 0, 0)!=SQLITE_OK ) return 11;
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("BEGIN; "
      "CREATE VIRTUAL TABLE l USING kv_log(dir='%q'); "
      "CREATE VIRTUAL TABLE b USING kv_btree(dir='%q'); "
      "INSERT INTO l VALUES(1, 1); INSERT INTO b VALUES(1, 1); COMMIT",
      zDir, zDir);
  for(n=1; n<50; n++){
    char *zAfter;
    sqlite3_free(zBefore);
    zBefore = kv_tree(zDir);
    wal_fault_arm(f, WAL_FAULT_WRITE, n, EIO, 0);
    rc = sqlite3_exec(db, zSql, 0, 0, 0);
    wal_fault_arm(f, WAL_FAULT_WRITE, 0, 0, 0);
    if( rc==SQLITE_OK ) break;
    sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
    zAfter = kv_tree(zDir);
    if( strcmp(zBefore, zAfter)!=0 ){
      fprintf(stderr, "write %d: before '%s' after '%s'\n", n, zBefore, zAfter);
      return 12;
    }
    sqlite3_free(zAfter);
    if( sqlite3_exec(db, "SELECT count(*) FROM kv_tables WHERE name IN "
                     "('l','b')", kvCountIsZero, 0, 0)!=SQLITE_OK ){
      return 13;
    }
  }
  if( rc!=SQLITE_OK || n<2 ) return 14;     /* some write failed first */
  sqlite3_free(zBefore);
  sqlite3_free(zSql);
  sqlite3_close(db);
  return 0;
}

START_TEST(test_kv_create_failing_at_any_write_leaves_no_files){
  char *zDir = th_tmpdir("kv-createfault");
  pid_t pid = fork();
  int st = 0;
  if( pid==0 ) _exit(kvFailedCreateChild(zDir));
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child step %d",
                WEXITSTATUS(st));
  sqlite3_free(zDir);
}
END_TEST

/* A publication that fails after the WAL flush (out of memory applying the
** second table of a commit).  SQLite ignores an error of xCommit, so the
** COMMIT says OK; the store then fails every later operation with a
** message naming the failed commit, so no reader sees a state without it,
** or with half of it; closing every connection and opening the store again
** applies it from the WAL.  Through a handle, kv_commit reports it. */
START_TEST(test_kv_failed_publication_stops_store_until_reopen){
  char *zDir = th_tmpdir("kv-pubfail");
  char *zDir2 = th_tmpdir("kv-pubfail-h");
  sqlite3 *db = kv_db(), *db2 = kv_db();
  sqlite3_int64 h;
  kv_mk(db, "a", zDir, 1);
  kv_mk(db, "b", zDir, 1);
  kv_mk(db2, "a", zDir, 1);
  th_exec(db, "INSERT INTO a VALUES(1,'a1'); INSERT INTO b VALUES(1,'b1')");
  kv_engine_test_fail_apply(2);          /* b's part of the next commit */
  ck_assert_int_eq(th_try(db, "BEGIN; INSERT INTO a VALUES(2,'a2'); "
                   "INSERT INTO b VALUES(2,'b2'); COMMIT", 0), SQLITE_OK);
  /* a's part was published, b's was not: nobody may read that */
  kv_fail(db, "SELECT count(*) FROM a", "is stopped: publishing commit");
  kv_fail(db, "SELECT count(*) FROM b", "(table b: out of memory)");
  kv_fail(db2, "SELECT value FROM a WHERE key=2", "is stopped");
  kv_fail(db2, "INSERT INTO a VALUES(3,'a3')", "open it again to apply");
  h = kv_begin(db2, zDir);
  kv_failf(db2, "is stopped", "SELECT kv_get(%lld, 'a', 1)", h);
  kv_ok(db2, "SELECT kv_rollback(%lld)", h);
  sqlite3_close(db);
  sqlite3_close(db2);
  db = kv_db();
  kv_mk(db, "a", zDir, 1);
  kv_mk(db, "b", zDir, 1);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM a", "1=a1 2=a2");
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM b", "1=b1 2=b2");
  th_exec(db, "INSERT INTO a VALUES(3,'a3')");       /* writable again */
  sqlite3_close(db);
  /* an explicit handle: kv_commit itself returns the failure */
  db = kv_db();
  kv_mk(db, "c", zDir2, 1);
  h = kv_begin(db, zDir2);
  kv_ok(db, "SELECT kv_put(%lld, 'c', 1, 'c1')", h);
  kv_engine_test_fail_apply(1);
  kv_failf(db, "is stopped: publishing commit", "SELECT kv_commit(%lld)", h);
  kv_fail(db, "SELECT count(*) FROM c", "is stopped");
  sqlite3_close(db);
  db = kv_db();
  kv_mk(db, "c", zDir2, 1);
  kv_text_eq(db, "SELECT value FROM c WHERE key=1", "c1");
  sqlite3_close(db);
  sqlite3_free(zDir);
  sqlite3_free(zDir2);
}
END_TEST

START_TEST(test_kv_replay_is_idempotent_across_reopens){
  char *zDir = th_tmpdir("kv-replay");
  const char *zCheck = "SELECT group_concat(key||'='||value, ' ') FROM t";
  sqlite3 *db;
  int i;
  kv_crash_after(zDir, "INSERT INTO t VALUES(1,1),(2,2); UPDATE t SET value=9 "
                 "WHERE key=1; DELETE FROM t WHERE key=2; INSERT INTO t "
                 "VALUES(3,3)", zCheck, "1=9 3=3");
  for(i=0; i<3; i++) kv_crash_after(zDir, 0, zCheck, "1=9 3=3");
  /* A clean open and close replays once more, then retires the WAL. */
  db = kv_db();
  kv_mk(db, "t", zDir, 1);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t", "1=9 3=3");
  sqlite3_close(db);
  kv_crash_after(zDir, 0, "SELECT count(*) FROM t", "0");
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_corrupt_catalog_file_is_reported){
  char *zDir = th_tmpdir("kv-corrupt");
  char *zFile = sqlite3_mprintf("%s/tables_meta", zDir);
  sqlite3 *db = kv_db();
  FILE *f;
  long n;
  kv_mk(db, "t", zDir, 0);
  sqlite3_close(db);                       /* store closed */
  f = fopen(zFile, "r+b");
  ck_assert_ptr_nonnull(f);
  fseek(f, 0, SEEK_END);
  n = ftell(f);
  fseek(f, n/2, SEEK_SET);
  fputc(0x5a ^ fgetc(f), f);               /* flip bits mid-file */
  fclose(f);
  db = kv_db();
  ck_assert_int_eq(kv_failf(db, "catalog file", "SELECT kv_begin('%q')", zDir),
                   SQLITE_CORRUPT);
  /* Truncated to a few bytes: still a clear error, never a crash. */
  ck_assert_int_eq(truncate(zFile, 5), 0);
  ck_assert_int_eq(kv_failf(db, "is corrupt", "SELECT kv_begin('%q')", zDir),
                   SQLITE_CORRUPT);
  sqlite3_close(db);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------- rollback after prepare --- */

/* The three persistent backends, as the module arguments of table t. */
static const char *const azAbortBackend[] = {
  "kv_memory(dir='%q', persistence=1)",
  "kv_btree(dir='%q')",
  "kv_log(dir='%q')",
};

/* A connection with table t of backend iBackend on store zDir. */
static sqlite3 *kv_abort_db(const char *zDir, int iBackend){
  sqlite3 *db = kv_db();
  char *zMod = sqlite3_mprintf(azAbortBackend[iBackend], zDir);
  kv_ok(db, "CREATE VIRTUAL TABLE t USING %s", zMod);
  sqlite3_free(zMod);
  return db;
}

/* Handle: put key 2 = 'gone', kv_prepare, kv_rollback. */
static void kv_abort_prepared(sqlite3 *db, const char *zDir){
  sqlite3_int64 h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 2, 'gone')", h);
  kv_ok(db, "SELECT kv_prepare(%lld)", h);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_rollback(%lld)", h), 1);
}

/* The store as a fresh open sees it: key 1 kept, key 2 with value zWant2
** (absent when NULL).  After a clean close a kv_memory table reopens
** empty (its WAL records are confirmed at once, docs/SQL.md), so
** bClean with kv_memory expects no key 1. */
static void kv_abort_check_reopen(const char *zDir, int iBackend,
                                  int bClean, const char *zWant2){
  sqlite3 *db = kv_abort_db(zDir, iBackend);
  if( bClean && iBackend==0 ){
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=1"), 0);
  }else{
    kv_rows_eq(db, "SELECT value AS x FROM t WHERE key=1", "kept");
  }
  if( zWant2 ){
    kv_rows_eq(db, "SELECT value AS x FROM t WHERE key=2", zWant2);
  }else{
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=2"), 0);
  }
  sqlite3_close(db);
}

/* kv_prepare then kv_rollback: the rows never appear, not even after the
** store is closed and opened again (the WAL record is withdrawn), and the
** key's reservation is released at once. */
START_TEST(test_kv_prepare_then_rollback_is_not_replayed){
  char *zDir = th_tmpdir("kv-abort");
  sqlite3 *db = kv_abort_db(zDir, _i);
  sqlite3_int64 h;
  th_exec(db, "INSERT INTO t VALUES(1, 'kept')");
  kv_abort_prepared(db, zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=2"), 0);
  sqlite3_close(db);
  kv_abort_check_reopen(zDir, _i, 1, 0);
  /* nothing is left reserved: another root writes and commits the key */
  db = kv_abort_db(zDir, _i);
  kv_abort_prepared(db, zDir);
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 2, 'other'), kv_prepare(%lld), "
        "kv_commit(%lld)", h, h, h);
  kv_rows_eq(db, "SELECT value AS x FROM t WHERE key=2", "other");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* The same when the process is killed with SIGKILL right after
** kv_rollback returned. */
START_TEST(test_kv_prepare_then_rollback_survives_sigkill){
  char *zDir = th_tmpdir("kv-abort-kill");
  int aPipe[2], v = 0;
  pid_t pid;
  ck_assert_int_eq(pipe(aPipe), 0);
  pid = fork();
  if( pid==0 ){
    sqlite3 *db = kv_abort_db(zDir, _i);
    close(aPipe[0]);
    th_exec(db, "INSERT INTO t VALUES(1, 'kept')");
    kv_abort_prepared(db, zDir);
    v = 1;
    if( write(aPipe[1], &v, sizeof(v))!=sizeof(v) ) _exit(3);
    for(;;) pause();
  }
  close(aPipe[1]);
  ck_assert_int_eq(read(aPipe[0], &v, sizeof(v)), (int)sizeof(v));
  ck_assert_int_eq(v, 1);
  kill(pid, SIGKILL);
  waitpid(pid, 0, 0);
  close(aPipe[0]);
  kv_abort_check_reopen(zDir, _i, 0, 0);
  sqlite3_free(zDir);
}
END_TEST

static int kv_abort_commit_hook(void *pArg){
  (void)pArg;
  return 1;                     /* turn the COMMIT into a rollback */
}

/* SQL path: the vtab's xSync prepared (the WAL record is durable), then
** the main database's commit fails (a commit hook vetoes it, which SQLite
** checks after every xSync) and SQLite rolls back the KV table too: the
** row is gone now and after reopening. */
/* Child side of the SQL-path test: exit code names the failed step. */
static int kvAbortSqlChild(const char *zDir, int iBackend){
  sqlite3 *db = kv_abort_db(zDir, iBackend);
  th_exec(db, "INSERT INTO t VALUES(1, 'kept'); CREATE TABLE m(x)");
  sqlite3_commit_hook(db, kv_abort_commit_hook, 0);
  if( th_try(db, "BEGIN; INSERT INTO m VALUES(1); "
             "INSERT INTO t VALUES(2, 'gone'); COMMIT", 0)!=SQLITE_CONSTRAINT
   || sqlite3_extended_errcode(db)!=SQLITE_CONSTRAINT_COMMITHOOK ){
    return 11;
  }
  if( !sqlite3_get_autocommit(db) ) return 12;
  sqlite3_commit_hook(db, 0, 0);
  if( th_int(db, "SELECT count(*) FROM t WHERE key=2")!=0 ) return 13;
  if( th_int(db, "SELECT count(*) FROM m")!=0 ) return 14;
  th_exec(db, "INSERT INTO t VALUES(3, 'after')");
  return 0;                                /* crash: exit without closing */
}

/* SQL path: the vtab's xSync prepared (the WAL record is durable), then
** the main database's commit fails (a commit hook vetoes it, which SQLite
** runs after every xSync) and SQLite rolls the KV table back too: the
** row is absent at once and after a crash and reopen, while a later
** commit is kept. */
START_TEST(test_kv_sql_rollback_after_xsync_is_not_replayed){
  char *zDir = th_tmpdir("kv-abort-sql");
  pid_t pid = fork();
  int st = 0;
  sqlite3 *db;
  if( pid==0 ) _exit(kvAbortSqlChild(zDir, _i));
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child step %d",
                WEXITSTATUS(st));
  db = kv_abort_db(zDir, _i);
  kv_rows_eq(db, "SELECT value AS x FROM t ORDER BY key", "kept after");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* The versioned protocol takes the same path: kv_prepare_with_version
** then kv_rollback withdraws the record (kv_btree, clean reopen). */
START_TEST(test_kv_versioned_prepare_then_rollback_is_not_replayed){
  char *zDir = th_tmpdir("kv-abort-ver");
  sqlite3 *db = kv_abort_db(zDir, 1);
  sqlite3_int64 h;
  th_exec(db, "INSERT INTO t VALUES(1, 'kept')");
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 2, 'gone')", h);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_prepare_with_version(%lld, '[]')",
                           h), 1);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_rollback(%lld)", h), 1);
  sqlite3_close(db);
  kv_abort_check_reopen(zDir, 1, 1, 0);
  sqlite3_free(zDir);
}
END_TEST

/* Child side of the failed-abort test: the exit code names the step that
** went wrong. */
static int kvAbortFaultChild(const char *zDir, int iBackend){
  WalFault *f = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  sqlite3_int64 h;
  char *zSql, *zErr = 0;
  int rc;
  if( f==0 ) return 10;
  kv_engine_test_io(wal_fault_io(f));
  db = kv_abort_db(zDir, iBackend);
  th_exec(db, "INSERT INTO t VALUES(1, 'kept')");
  h = kv_begin(db, zDir);
  kv_ok(db, "SELECT kv_put(%lld, 't', 2, 'stays'), kv_prepare(%lld)", h, h);
  wal_fault_arm(f, WAL_FAULT_WRITE, 1, EIO, 1);       /* every write */
  zSql = sqlite3_mprintf("SELECT kv_rollback(%lld)", h);
  rc = th_try(db, zSql, &zErr);
  sqlite3_free(zSql);
  if( rc==SQLITE_OK ) return 11;
  if( zErr==0 || strstr(zErr, "is stopped: the rollback of prepared")==0
   || strstr(zErr, "applied when the store is next opened")==0 ){
    return 12;
  }
  sqlite3_free(zErr);
  zErr = 0;
  /* every later operation fails with that message; nothing shows key 2 */
  rc = th_try(db, "SELECT count(*) FROM t", &zErr);
  if( rc==SQLITE_OK || zErr==0 || strstr(zErr, "is stopped")==0 ) return 13;
  sqlite3_free(zErr);
  wal_fault_arm(f, WAL_FAULT_WRITE, 0, 0, 0);
  return 0;                                /* crash: exit without closing */
}

/* The abort record cannot be written (every WAL write fails): kv_rollback
** fails, the store stops with a message saying the transaction will be
** applied at the next open - and the next open does apply it. */
START_TEST(test_kv_failed_abort_write_stops_store){
  char *zDir = th_tmpdir("kv-abort-fault");
  pid_t pid = fork();
  int st = 0;
  if( pid==0 ) _exit(kvAbortFaultChild(zDir, _i));
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child step %d",
                WEXITSTATUS(st));
  kv_abort_check_reopen(zDir, _i, 0, "stays");
  sqlite3_free(zDir);
}
END_TEST

/* -------------------------------------------- read-only connections --- */

/* Append to *pz one line per entry below zDir (recursively): path, size
** and modification time in nanoseconds, sorted by the directory order;
** the whole text changes when any file is created, removed or written. */
static void kv_tree_state(const char *zDir, char **pz){
  DIR *d = opendir(zDir);
  struct dirent *e;
  if( d==0 ){
    *pz = sqlite3_mprintf("%z%s: absent\n", *pz, zDir);
    return;
  }
  while( (e = readdir(d))!=0 ){
    char *zPath;
    struct stat st;
    if( strcmp(e->d_name, ".")==0 || strcmp(e->d_name, "..")==0 ) continue;
    if( strcmp(e->d_name, "LOCK")==0 ) continue;  /* the holder's pid */
    zPath = sqlite3_mprintf("%s/%s", zDir, e->d_name);
    ck_assert_int_eq(stat(zPath, &st), 0);
    *pz = sqlite3_mprintf("%z%s %lld %lld.%09ld\n", *pz, zPath,
                          (long long)st.st_size, (long long)st.st_mtim.tv_sec,
                          (long)st.st_mtim.tv_nsec);
    if( S_ISDIR(st.st_mode) ) kv_tree_state(zPath, pz);
    sqlite3_free(zPath);
  }
  closedir(d);
}

static char *kv_store_state(const char *zDir){
  char *z = sqlite3_mprintf("");
  kv_tree_state(zDir, &z);
  ck_assert_ptr_nonnull(z);
  return z;
}

/* Database zDb with KV table t (kv_btree, in the sidecar store)
** holding 1='a' and 2='b', made by a writable connection that is closed
** again. */
static void kv_ro_fixture(const char *zDb){
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree;"
              "INSERT INTO t VALUES(1,'a'),(2,'b')");
  sqlite3_close(db);
}

/* A connection on zDb opened read-only: with a "mode=ro" URI (iMode 0)
** or with SQLITE_OPEN_READONLY (iMode 1). */
static sqlite3 *kv_ro_open(const char *zDb, int iMode){
  sqlite3 *db = 0;
  if( iMode==0 ){
    char *zUri = sqlite3_mprintf("file:%s?mode=ro", zDb);
    db = th_open(zUri);
    sqlite3_free(zUri);
  }else{
    sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
    ck_assert_int_eq(sqlite3_open_v2(zDb, &db, SQLITE_OPEN_READONLY, 0),
                     SQLITE_OK);
  }
  ck_assert_int_eq(sqlite3_db_readonly(db, "main"), 1);
  return db;
}

/* Expect SQLITE_READONLY and "kv: <zFunc> on a read-only connection
** (the database was opened read-only)" from zSql. */
static void kv_ro_refused(sqlite3 *db, const char *zFunc,
                          const char *zFmt, ...){
  char *zWant = sqlite3_mprintf("kv: %s on a read-only connection (the "
                                "database was opened read-only)", zFunc);
  char *zSql;
  va_list ap;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  ck_assert_int_eq(kv_fail(db, zSql, zWant), SQLITE_READONLY);
  sqlite3_free(zSql);
  sqlite3_free(zWant);
}

/* kv_text_eq of the SQL made by sqlite3_mprintf(zFmt, ...). */
static void kv_ro_text_eq(sqlite3 *db, const char *zWant,
                          const char *zFmt, ...){
  char *zSql;
  va_list ap;
  va_start(ap, zFmt);
  zSql = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  kv_text_eq(db, zSql, zWant);
  sqlite3_free(zSql);
}

START_TEST(test_kv_readonly_connection_refuses_every_handle_write){
  char *zDir = th_tmpdir("kv-ro-write");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zKv = sqlite3_mprintf("%s-kv", zDb);
  char *zBefore, *zAfter;
  sqlite3 *db;
  sqlite3_int64 h;
  kv_ro_fixture(zDb);
  zBefore = kv_store_state(zKv);
  db = kv_ro_open(zDb, _i);
  h = kv_intf(db, "SELECT kv_begin()");
  kv_ro_refused(db, "kv_put",
                "SELECT kv_put(%lld, 't', 3, 'c')", h);
  kv_ro_refused(db, "kv_put",
                "SELECT kv_put(%lld, 't', 1, 'z')", h);
  kv_ro_refused(db, "kv_delete",
                "SELECT kv_delete(%lld, 't', 1)", h);
  kv_ro_refused(db, "kv_create_table",
                "SELECT kv_create_table(%lld, 'u', 'kv_btree')", h);
  kv_ro_refused(db, "kv_create_table",
                "SELECT kv_create_table(%lld, 't', 'kv_memory')", h);
  kv_ro_refused(db, "kv_remove_table",
                "SELECT kv_remove_table(%lld, 't')", h);
  /* The handle still reads, and ends: it wrote nothing. */
  kv_ro_text_eq(db, "a", "SELECT kv_get(%lld, 't', 1)", h);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_commit(%lld)", h), 1);
  /* The SQL forms are refused too: through the temp declaration by the
  ** module, through the main one by SQLite itself. */
  ck_assert_int_eq(kv_fail(db, "INSERT INTO t VALUES(3,'c')",
                           "read-only connection") & 0xff, SQLITE_READONLY);
  ck_assert_int_eq(kv_fail(db, "DELETE FROM t", "read-only connection")
                   & 0xff, SQLITE_READONLY);
  ck_assert_int_eq(kv_fail(db, "INSERT INTO main.t VALUES(3,'c')",
                           "readonly") & 0xff, SQLITE_READONLY);
  ck_assert_int_eq(kv_fail(db, "DELETE FROM main.t", "readonly") & 0xff,
                   SQLITE_READONLY);
  sqlite3_close(db);
  zAfter = kv_store_state(zKv);
  ck_assert_str_eq(zAfter, zBefore);
  db = th_open(zDb);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t ORDER BY key",
             "1=a 2=b");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables"), 1);
  sqlite3_close(db);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_free(zKv);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_readonly_connection_reads_and_ends_read_only_handles){
  char *zDir = th_tmpdir("kv-ro-read");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zKv = sqlite3_mprintf("%s-kv", zDb);
  char *zBefore, *zAfter, *zMeta, *zSql;
  sqlite3 *db;
  sqlite3_int64 h1, h2, h3;
  kv_ro_fixture(zDb);
  zBefore = kv_store_state(zKv);
  db = kv_ro_open(zDb, _i);
  kv_rows_eq(db, "SELECT key||'='||value AS x FROM t ORDER BY key",
             "1=a 2=b");
  ck_assert_int_eq(th_int(db, "SELECT rows FROM kv_tables WHERE name='t'"),
                   2);
  ck_assert_int_ge(th_int(db, "SELECT count(*) FROM kv_stats"), 1);
  ck_assert_int_ge(th_int(db, "SELECT count(*) FROM kv_metrics"), 1);
  kv_text_eq(db, "SELECT value FROM kv_query_with_version('t', 2)", "b");
  h1 = kv_intf(db, "SELECT kv_begin()");
  h2 = kv_intf(db, "SELECT kv_begin()");
  h3 = kv_intf(db, "SELECT kv_begin()");
  kv_ro_text_eq(db, "b", "SELECT kv_get(%lld, 't', 2)", h1);
  zMeta = sqlite3_mprintf("SELECT kv_table_meta(%lld, 't')", h1);
  zMeta = th_text(db, zSql = zMeta);
  sqlite3_free(zSql);
  ck_assert_ptr_nonnull(zMeta);
  ck_assert_ptr_nonnull(strstr(zMeta, "\"type\":\"kv_btree\""));
  sqlite3_free(zMeta);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_prepare(%lld)", h1), 1);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_commit(%lld)", h1), 1);
  kv_ro_text_eq(db, 0, "SELECT kv_try_commit(%lld)", h2);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_rollback(%lld)", h3), 1);
  sqlite3_close(db);
  zAfter = kv_store_state(zKv);
  ck_assert_str_eq(zAfter, zBefore);
  sqlite3_free(zBefore);
  sqlite3_free(zAfter);
  sqlite3_free(zKv);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_begin_on_readonly_connection_creates_no_store){
  char *zDir = th_tmpdir("kv-ro-none");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  char *zKv = sqlite3_mprintf("%s-kv", zDb);
  char *zOther = sqlite3_mprintf("%s/other", zDir);
  char *zWant;
  struct stat st;
  sqlite3 *db = th_open(zDb);
  th_exec(db, "CREATE TABLE plain(x)");
  sqlite3_close(db);
  db = kv_ro_open(zDb, _i);
  zWant = sqlite3_mprintf("/main.db-kv (a read-only connection does not "
                          "create one)");
  ck_assert_int_eq(kv_fail(db, "SELECT kv_begin()", zWant), SQLITE_CANTOPEN);
  sqlite3_free(zWant);
  zWant = sqlite3_mprintf("kv: no KV store at %s (a read-only connection "
                          "does not create one)", zOther);
  ck_assert_int_eq(kv_fail(db, "SELECT kv_begin()", "kv: no KV store at "),
                   SQLITE_CANTOPEN);
  ck_assert_int_eq(kv_failf(db, zWant, "SELECT kv_begin('%q')", zOther),
                   SQLITE_CANTOPEN);
  sqlite3_free(zWant);
  sqlite3_close(db);
  ck_assert_int_ne(stat(zKv, &st), 0);
  ck_assert_int_ne(stat(zOther, &st), 0);
  sqlite3_free(zOther);
  sqlite3_free(zKv);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* PRAGMA query_only governs SQL statements, as in SQLite: INSERT into a
** KV table is refused under it, while the handle functions, whose writes
** are side effects of a SELECT, write as on any writable connection. */
START_TEST(test_kv_query_only_refuses_statements_not_handle_functions){
  char *zDir = th_tmpdir("kv-ro-pragma");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  sqlite3 *db;
  sqlite3_int64 h;
  kv_ro_fixture(zDb);
  db = th_open(zDb);
  th_exec(db, "PRAGMA query_only=1");
  ck_assert_int_eq(kv_fail(db, "INSERT INTO t VALUES(3,'c')", "readonly")
                   & 0xff, SQLITE_READONLY);
  h = kv_intf(db, "SELECT kv_begin()");
  kv_ok(db, "SELECT kv_put(%lld, 't', 3, 'c')", h);
  ck_assert_int_eq(kv_intf(db, "SELECT kv_commit(%lld)", h), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kv");
  TCase *tc = tcase_create("tables");
  tcase_add_test(tc, test_kv_roundtrip_keeps_types);
  tcase_add_test(tc, test_kv_keys_order_like_sqlite);
  tcase_add_test(tc, test_kv_range_and_in_constraints);
  tcase_add_test(tc, test_kv_memory_values_in_place_stay_right);
  tcase_add_test(tc, test_kv_memory_point_values_pinned_stay_right);
  tcase_add_test(tc, test_kv_memory_pinned_point_reads_race_a_writer);
  tcase_add_test(tc, test_kv_transaction_over_many_tables);
  tcase_add_loop_test(tc, test_kv_values_reach_column_text_whole, 0, 3);
  tcase_add_loop_test(tc, test_kv_text_held_by_a_scan_survives_rewrites, 0,
                      3);
  tcase_add_test(tc, test_kv_memory_column_text_allocates_nothing);
  tcase_add_test(tc, test_kv_log_column_text_allocates_nothing);
  tcase_add_test(tc, test_kv_in_list_of_only_nulls_matches_nothing);
  tcase_add_test(tc, test_kv_query_plan_pushes_down);
  tcase_add_loop_test(tc, test_kv_query_plan_pushes_down_each_operator,
                      0, (int)(sizeof(aPlan)/sizeof(aPlan[0])));
  tcase_add_test(tc, test_kv_plain_insert_of_existing_key_fails);
  tcase_add_test(tc, test_kv_update_and_delete);
  tcase_add_test(tc, test_kv_rollback_and_savepoints);
  tcase_add_test(tc, test_kv_scan_is_a_snapshot_with_own_writes);
  tcase_add_test(tc, test_kv_scan_in_progress_never_sees_later_commits);
  tcase_add_test(tc, test_kv_conflict_fails_commit_and_rolls_back);
  tcase_add_test(tc, test_kv_conflict_on_release_leaves_an_empty_transaction);
  tcase_add_test(tc, test_kv_read_before_first_write_conflicts_at_commit);
  tcase_add_test(tc, test_kv_read_only_transaction_ends_cleanly);
  tcase_add_test(tc, test_kv_selects_in_a_transaction_see_one_snapshot);
  tcase_add_test(tc, test_kv_savepoints_with_reads_first);
  tcase_add_test(tc, test_kv_or_ignore_counts_only_rows_written);
  tcase_add_test(tc, test_kv_rollback_to_outermost_savepoint_undoes_writes);
  tcase_add_test(tc, test_kv_rollback_to_savepoint_older_than_first_write_undoes_it);
  tcase_add_test(tc, test_kv_reads_in_transactions_do_not_lock_the_database);
  tcase_add_test(tc, test_kv_writes_take_the_schema_database_write_lock);
  tcase_add_test(tc, test_kv_transaction_goes_on_after_a_busy_commit);
  tcase_add_test(tc, test_kv_table_created_before_a_busy_commit_is_created_by_the_retry);
  tcase_add_test(tc, test_kv_anchor_cannot_be_dropped_inside_its_transaction);
  tcase_add_test(tc, test_kv_foreign_anchor_table_fails_reads_clearly);
  tcase_add_test(tc, test_kv_first_read_in_a_transaction_logs_no_error);
  tcase_add_test(tc, test_kv_read_join_denied_by_authorizer_says_not_authorized);
  tcase_add_test(tc, test_kv_two_stores_in_one_transaction_is_an_error);
  tcase_add_test(tc, test_kv_drop_table_removes_it);
  tcase_add_test(tc, test_kv_create_in_a_transaction_then_write_commits);
  tcase_add_test(tc, test_kv_create_rolled_back_leaves_no_table);
  tcase_add_test(tc, test_kv_create_after_a_write_in_the_transaction_is_refused);
  tcase_add_test(tc, test_kv_drop_inside_a_transaction_is_refused_and_keeps_data);
  tcase_add_test(tc, test_kv_sidecar_store_and_catalog_survive_reopen);
  tcase_add_test(tc, test_kv_vtab_of_a_removed_table_errors_and_drops);
  tcase_add_test(tc, test_kv_missing_sidecar_store_fails_and_creates_nothing);
  tcase_add_test(tc, test_kv_missing_dir_store_fails_only_its_tables);
  tcase_add_test(tc, test_kv_empty_store_dir_fails_and_creates_nothing);
  tcase_add_test(tc, test_kv_drop_table_of_a_missing_store_works);
  tcase_add_test(tc, test_kv_restored_store_works_at_the_next_statement);
  tcase_add_test(tc, test_kv_inmemory_db_needs_dir_for_persistence);
  tcase_add_test(tc, test_kv_dir_argument_unquotes_doubled_quotes);
  suite_add_tcase(s, tc);
  tc = tcase_create("handles");
  tcase_add_test(tc, test_kv_handles_read_write_commit);
  tcase_add_test(tc, test_kv_prepared_and_failed_handles_name_the_handle);
  tcase_add_test(tc, test_kv_handle_bound_as_an_integral_real_works);
  tcase_add_test(tc, test_kv_handle_conflicts_same_value_and_aba);
  tcase_add_test(tc, test_kv_table_created_and_written_in_one_txn_still_conflicts);
  tcase_add_test(tc, test_kv_revisions_stay_bounded_under_a_busy_workload);
  tcase_add_test(tc, test_kv_prepared_reservations_conflict);
  tcase_add_test(tc, test_kv_try_commit_returns_conflicts_as_json);
  tcase_add_test(tc, test_kv_conflicts_on_long_keys_are_exact_or_marked_short);
  tcase_add_test(tc, test_kv_conflicts_are_complete_and_sorted);
  tcase_add_test(tc, test_kv_bind_set_snapshots_tables_at_one_point);
  tcase_add_test(tc, test_kv_ddl_through_handles_is_atomic);
  tcase_add_test(tc, test_kv_concurrent_remove_conflicts_with_writer);
  tcase_add_test(tc, test_kv_write_first_table_snapshots_at_first_read);
  tcase_add_test(tc, test_kv_handles_are_per_connection_and_rolled_back_at_close);
  tcase_add_test(tc, test_kv_table_meta_registers_no_read);
  tcase_add_test(tc, test_kv_table_of_another_type_is_refused);
  tcase_add_test(tc, test_kv_table_names_never_become_paths);
  tcase_add_test(tc, test_kv_closing_last_user_joins_background_threads);
  tcase_add_loop_test(tc, test_kv_functions_are_direct_only,
                      0, (int)(sizeof(azDirect)/sizeof(azDirect[0])));
  tcase_add_test(tc, test_kv_rolled_back_create_leaves_no_files);
  tcase_add_test(tc, test_kv_memory_tables_have_no_data_file);
  suite_add_tcase(s, tc);
  tc = tcase_create("bad_input");
  tcase_add_loop_test(tc, test_kv_bad_input_is_rejected_and_changes_nothing,
                      0, (int)(sizeof(aBad)/sizeof(aBad[0])));
  suite_add_tcase(s, tc);
  tc = tcase_create("concurrency");
  tcase_add_test(tc, test_kv_text_keys_must_be_utf8_blob_keys_need_not);
  tcase_add_test(tc, test_kv_second_process_gets_busy);
  tcase_add_test(tc, test_kv_second_process_gets_busy_after_lock_file_deleted);
  tcase_add_test(tc, test_kv_two_threads_overlapping_keys_one_commits);
  tcase_add_test(tc, test_kv_bank_transfers_keep_the_sum);
  suite_add_tcase(s, tc);
  tc = tcase_create("durability");
  tcase_add_test(tc, test_kv_sigkill_keeps_every_acknowledged_commit);
  tcase_add_test(tc, test_kv_create_failing_at_any_write_leaves_no_files);
  tcase_add_test(tc, test_kv_log_collector_batches_commits);
  tcase_add_loop_test(tc, test_kv_wal_failure_fails_commit_and_store_reopens,
                      0, (int)(sizeof(aFault)/sizeof(aFault[0])));
  tcase_add_test(tc, test_kv_replay_is_idempotent_across_reopens);
  tcase_add_test(tc, test_kv_failed_publication_stops_store_until_reopen);
  tcase_add_test(tc, test_kv_only_persistent_writes_reach_the_wal);
  tcase_add_test(tc, test_kv_corrupt_catalog_file_is_reported);
  suite_add_tcase(s, tc);
  tc = tcase_create("abort");
  tcase_add_loop_test(tc, test_kv_prepare_then_rollback_is_not_replayed, 0, 3);
  tcase_add_loop_test(tc, test_kv_prepare_then_rollback_survives_sigkill,
                      0, 3);
  tcase_add_loop_test(tc, test_kv_sql_rollback_after_xsync_is_not_replayed,
                      0, 3);
  tcase_add_loop_test(tc, test_kv_failed_abort_write_stops_store, 0, 3);
  tcase_add_test(tc, test_kv_versioned_prepare_then_rollback_is_not_replayed);
  suite_add_tcase(s, tc);
  tc = tcase_create("readonly");
  tcase_add_loop_test(tc, test_kv_readonly_connection_refuses_every_handle_write,
                      0, 2);
  tcase_add_loop_test(tc,
      test_kv_readonly_connection_reads_and_ends_read_only_handles, 0, 2);
  tcase_add_loop_test(tc, test_kv_begin_on_readonly_connection_creates_no_store,
                      0, 2);
  tcase_add_test(tc, test_kv_query_only_refuses_statements_not_handle_functions);
  suite_add_tcase(s, tc);
  return s;
}
