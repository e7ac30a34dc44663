/*
** check_kvbtree.c -- the "kvbtree" suite: the persistent KV backends
** kv_btree and kv_log (ext/kv_btree.c, ext/kv_log.c) through SQL, and
** kv_stats: restart, drop durability, overlay and collector (back-pressure,
** failed writes retried), delete's old value, conflicts, corrupt files,
** a child limited by RLIMIT_FSIZE, and SIGKILL of a child writing to all
** three backends.
**
** The SIGKILL test runs KB_KILL_ROUNDS (4) children in make check, each
** killed at a random point (seeded by the round number; at most 0.4 s after
** its first acknowledged commit) while committing
** to a kv_memory, a kv_btree and a kv_log table (8 KiB log files, so its
** background compaction runs every ten or so transactions), with
** collection and compaction running; DEPOT_TORTURE_ITERS=n runs 4*n rounds.
** Odd rounds create the kv_btree table with accelerated_repair=1.
*/
#include "config.h"
#define SQLITE_CORE 1
#include "tests/check/harness.h"
#include "ext/kv/kv.h"
#include "ext/kv/kv_test.h"
#include "ext/kv/logstore.h"
#include "wal/wal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KB_KILL_ROUNDS 4

/* ------------------------------------------------------------ helpers --- */

static void kb_exec(sqlite3 *db, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  th_exec(db, z);
  sqlite3_free(z);
}


/* CREATE VIRTUAL TABLE zTab USING zType(dir=zDir). */
static void kb_mk(sqlite3 *db, const char *zTab, const char *zType,
                  const char *zDir){
  kb_exec(db, "CREATE VIRTUAL TABLE \"%w\" USING %s(dir='%q')", zTab, zType,
          zDir);
}

/* A stat of table zTab (or of the store row when zTab is NULL). */
static sqlite3_int64 kb_stat(sqlite3 *db, const char *zCol, const char *zTab){
  if( zTab ) return th_intf(db, "SELECT coalesce(%s,-1) FROM kv_stats WHERE "
                               "tbl=%Q", zCol, zTab);
  return th_intf(db, "SELECT coalesce(%s,-1) FROM kv_stats WHERE tbl IS NULL "
                    "AND store IS NOT NULL", zCol);
}

/* Wait (up to 10 s) until the collectors have confirmed everything. */
static void kb_settle(sqlite3 *db){
  int i;
  for(i=0; i<1000; i++){
    if( th_intf(db, "SELECT coalesce(sum(pending_confirmations),0) "
                   "+ coalesce(sum(wal_unconfirmed),0) FROM kv_stats")==0 ){
      return;
    }
    usleep(10000);
  }
  ck_abort_msg("collectors did not confirm everything in 10 s");
}

/* Wait (up to 10 s) until table zTab's collector has failed at least
** nMin times; fails the test if it has not. */
static void kb_wait_errors(sqlite3 *db, const char *zTab, int nMin){
  int i;
  for(i=0; i<1000 && kb_stat(db, "collector_errors", zTab)<nMin; i++){
    usleep(10000);
  }
  ck_assert_int_ge(kb_stat(db, "collector_errors", zTab), nMin);
}

/* Write n rows k -> 'v<k>-<tag>' in one transaction. */
static void kb_fill(sqlite3 *db, const char *zTab, int iFirst, int n,
                    const char *zTag){
  kb_exec(db, "BEGIN; WITH RECURSIVE c(i) AS (SELECT %d UNION ALL SELECT i+1 "
              "FROM c WHERE i<%d) INSERT OR REPLACE INTO \"%w\" "
              "SELECT i, 'v'||i||'-%q' FROM c; COMMIT", iFirst,
              iFirst+n-1, zTab, zTag);
}

/* --------------------------------------------------------- restart --- */

static void kb_restart(const char *zType){
  char *zDir = th_tmpdir(zType);
  sqlite3 *db = th_open(":memory:");
  char *z;
  kb_mk(db, "t", zType, zDir);
  kb_fill(db, "t", 1, 1000, "a");
  kb_fill(db, "t", 500, 10, "b");
  th_exec(db, "DELETE FROM t WHERE key BETWEEN 900 AND 949");
  sqlite3_close(db);
  db = th_open(":memory:");
  kb_mk(db, "t", zType, zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 950);
  z = th_text(db, "SELECT value FROM t WHERE key=505");
  ck_assert_str_eq(z, "v505-b");
  sqlite3_free(z);
  z = th_text(db, "SELECT value FROM t WHERE key=10");
  ck_assert_str_eq(z, "v10-a");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=920"), 0);
  /* everything was confirmed before the close: nothing to replay */
  ck_assert_int_eq(kb_stat(db, "wal_unconfirmed", 0), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}

START_TEST(test_kvbtree_data_survives_reopen)
{
  kb_restart("kv_btree");
}
END_TEST

START_TEST(test_kvlog_data_survives_reopen)
{
  kb_restart("kv_log");
}
END_TEST

/* Reads merge the overlay with the data file: ranges, descending order,
** deletes still in the overlay hiding collected rows. */
START_TEST(test_kvbtree_scan_merges_overlay_and_data_file)
{
  char *zDir = th_tmpdir("kvbtree_scan");
  sqlite3 *db = th_open(":memory:");
  char *z;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 20, "a");
  kb_settle(db);                          /* rows 1..20 in the data file */
  kv_btree_test_fail_writes(1000000);     /* keep the next ones in overlay */
  th_exec(db, "BEGIN; DELETE FROM t WHERE key IN (3,4,15);"
              "INSERT OR REPLACE INTO t VALUES(5,'new5'),(25,'v25'),(0,'v0');"
              "COMMIT");
  ck_assert_int_gt(kb_stat(db, "overlay_entries", "t"), 0);
  z = th_text(db, "SELECT group_concat(key) FROM (SELECT key FROM t "
                  "WHERE key BETWEEN 1 AND 7 ORDER BY key)");
  ck_assert_str_eq(z, "1,2,5,6,7");
  sqlite3_free(z);
  z = th_text(db, "SELECT group_concat(key) FROM (SELECT key FROM t "
                  "WHERE key>=14 ORDER BY key DESC)");
  ck_assert_str_eq(z, "25,20,19,18,17,16,14");
  sqlite3_free(z);
  z = th_text(db, "SELECT value FROM t WHERE key=5");
  ck_assert_str_eq(z, "new5");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 19);
  kv_btree_test_fail_writes(0);
  kb_settle(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 19);
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "t"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A long scan sees one snapshot.  Connection 1 walks the table (rows come
** from the data file in batches) while connection 2 rewrites every value,
** deletes and adds rows, and, for kv_btree, the collector moves all of it
** into the data file: the walk still returns exactly the rows and values
** of its start, in key order, and the value of its current row, read
** before the commit, is unchanged after it.  A new scan sees the commit. */
static void kb_scan_one_snapshot(const char *zType){
  char *zDir = th_tmpdir(zType);
  sqlite3 *db1 = th_open(":memory:");
  sqlite3 *db2 = th_open(":memory:");
  sqlite3_stmt *pStmt = 0;
  char *zHeld = 0;
  const unsigned char *zCur;
  int i, rc;
  kb_mk(db1, "t", zType, zDir);
  kb_mk(db2, "t", zType, zDir);
  kb_fill(db1, "t", 1, 2000, "old");
  if( strcmp(zType, "kv_memory")!=0 ) kb_settle(db1);
  ck_assert_int_eq(sqlite3_prepare_v2(db1, "SELECT key, value FROM t", -1,
                                      &pStmt, 0), SQLITE_OK);
  for(i=1; i<=300; i++){
    ck_assert_int_eq(sqlite3_step(pStmt), SQLITE_ROW);
    ck_assert_int_eq(sqlite3_column_int(pStmt, 0), i);
  }
  zCur = sqlite3_column_text(pStmt, 1);
  zHeld = sqlite3_mprintf("%s", zCur);
  ck_assert_str_eq(zHeld, "v300-old");
  kb_fill(db2, "t", 1, 2500, "new");
  th_exec(db2, "DELETE FROM t WHERE key BETWEEN 500 AND 599");
  if( strcmp(zType, "kv_memory")!=0 ) kb_settle(db2);
  ck_assert_str_eq((const char*)zCur, zHeld);
  ck_assert_str_eq((const char*)sqlite3_column_text(pStmt, 1), "v300-old");
  for(i=301; (rc = sqlite3_step(pStmt))==SQLITE_ROW; i++){
    char *zWant = sqlite3_mprintf("v%d-old", i);
    ck_assert_int_eq(sqlite3_column_int(pStmt, 0), i);
    ck_assert_str_eq((const char*)sqlite3_column_text(pStmt, 1), zWant);
    sqlite3_free(zWant);
  }
  ck_assert_int_eq(rc, SQLITE_DONE);
  ck_assert_int_eq(i, 2001);
  sqlite3_finalize(pStmt);
  ck_assert_int_eq(th_int(db1, "SELECT count(*) FROM t"), 2400);
  ck_assert_int_eq(th_int(db1, "SELECT count(*) FROM t WHERE value "
                               "LIKE '%-new'"), 2400);
  sqlite3_free(zHeld);
  sqlite3_close(db1);
  sqlite3_close(db2);
  sqlite3_free(zDir);
}

START_TEST(test_kvbtree_long_scan_sees_one_snapshot)
{
  kb_scan_one_snapshot("kv_btree");
}
END_TEST

START_TEST(test_kvlog_long_scan_sees_one_snapshot)
{
  kb_scan_one_snapshot("kv_log");
}
END_TEST

START_TEST(test_kvmemory_long_scan_sees_one_snapshot)
{
  kb_scan_one_snapshot("kv_memory");
}
END_TEST

/* Reads after a full scan (which leaves the table's rows decoded with
** the reader until the collector's next commit) give what the data file
** and the overlay hold: point reads, ranges both ways, keys the overlay
** deletes or adds; after the collector's commit, the new rows. */
START_TEST(test_kvbtree_reads_after_full_scan_see_overlay_and_next_commit)
{
  char *zDir = th_tmpdir("kvbtree_scancache");
  sqlite3 *db = th_open(":memory:");
  char *z;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 500, "a");
  kb_settle(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 500);
  ck_assert_int_eq(th_int(db, "SELECT sum(key) FROM t"), 125250);
  z = th_text(db, "SELECT value FROM t WHERE key=250");
  ck_assert_str_eq(z, "v250-a");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=501"), 0);
  z = th_text(db, "SELECT group_concat(key) FROM (SELECT key FROM t WHERE "
                  "key>497 ORDER BY key)");
  ck_assert_str_eq(z, "498,499,500");
  sqlite3_free(z);
  z = th_text(db, "SELECT group_concat(key) FROM (SELECT key FROM t WHERE "
                  "key<=3 ORDER BY key DESC)");
  ck_assert_str_eq(z, "3,2,1");
  sqlite3_free(z);
  z = th_text(db, "SELECT group_concat(key) FROM (SELECT key FROM t WHERE "
                  "key>=10 AND key<13)");
  ck_assert_str_eq(z, "10,11,12");
  sqlite3_free(z);
  kv_btree_test_fail_writes(1000000);     /* keep the next ones in overlay */
  th_exec(db, "DELETE FROM t WHERE key=11; INSERT OR REPLACE INTO t "
              "VALUES(12,'new12'),(600,'v600')");
  z = th_text(db, "SELECT group_concat(key||'='||value) FROM (SELECT * FROM "
                  "t WHERE key>=10 AND key<13)");
  ck_assert_str_eq(z, "10=v10-a,12=new12");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 500);
  ck_assert_int_eq(th_int(db, "SELECT max(key) FROM t"), 600);
  kv_btree_test_fail_writes(0);
  kb_settle(db);
  kb_fill(db, "t", 1, 5, "b");
  kb_settle(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 500);
  z = th_text(db, "SELECT group_concat(value) FROM (SELECT value FROM t "
                  "WHERE key<=12 AND key>=4 ORDER BY key DESC)");
  ck_assert_str_eq(z, "new12,v10-a,v9-a,v8-a,v7-a,v6-a,v5-b,v4-b");
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A table just created (nothing collected yet) reads as empty. */
/* A data-file read that fails in the middle of a scan or a point read is
** an error naming the table and the data file, never the end of the
** table: before, a failing scan ended silently and a table whose rows had
** all been collected read as empty. */
START_TEST(test_kvbtree_data_file_read_error_fails_scan)
{
  char *zDir = th_tmpdir("kvbtree_readerr");
  sqlite3 *db = th_open(":memory:");
  char *zErr = 0;
  int rc;
  kb_mk(db, "b", "kv_btree", zDir);
  kb_fill(db, "b", 1, 50, "a");
  kb_settle(db);                      /* every row in the data file only */
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "b"), 0);
  kv_btree_test_fail_reads(1);        /* the first step of the walk */
  rc = th_try(db, "SELECT coalesce(max(key),0) FROM b", &zErr);
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "kv_btree: scan of table b in the data file")
                && strstr(zErr, "kv_btree.db"), "message: %s", zErr);
  sqlite3_free(zErr); zErr = 0;
  kv_btree_test_fail_reads(10);       /* a step after 9 rows */
  rc = th_try(db, "SELECT count(*) FROM b", &zErr);
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  sqlite3_free(zErr); zErr = 0;
  kv_btree_test_fail_reads(1);        /* a point read */
  rc = th_try(db, "SELECT value FROM b WHERE key=7", &zErr);
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  ck_assert_msg(zErr && strstr(zErr, "kv_btree: read of table b"),
                "message: %s", zErr);
  sqlite3_free(zErr);
  kv_btree_test_fail_reads(0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b"), 50);
  ck_assert_int_eq(th_int(db, "SELECT max(key) FROM b"), 50);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Bounded walks of one table in a row warm the reader's scan cache: the
** whole table is read into it once, and later range and point reads are
** served from it (a data-file read that would fail is not made), merged
** with the overlay; a collected commit drops it and reads see the new
** rows. */
START_TEST(test_kvbtree_range_reads_warm_the_scan_cache)
{
  char *zDir = th_tmpdir("kvbtree_warm");
  sqlite3 *db = th_open(":memory:");
  char *z;
  int i;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 500, "a");
  kb_settle(db);                      /* every row in the data file only */
  for(i=0; i<40; i++){
    char *zSql = sqlite3_mprintf("SELECT sum(key) FROM t WHERE key>=%d "
                                 "AND key<%d", 10*i+1, 10*i+4);
    ck_assert_int_eq(th_int(db, zSql), 3*(10*i+1)+3);
    sqlite3_free(zSql);
  }
  kv_btree_test_fail_reads(1);        /* no data-file read comes */
  z = th_text(db, "SELECT group_concat(value) FROM (SELECT value FROM t "
                  "WHERE key>497)");
  ck_assert_str_eq(z, "v498-a,v499-a,v500-a");
  sqlite3_free(z);
  z = th_text(db, "SELECT group_concat(key) FROM (SELECT key FROM t "
                  "WHERE key<4 ORDER BY key DESC)");
  ck_assert_str_eq(z, "3,2,1");
  sqlite3_free(z);
  kv_btree_test_fail_reads(0);
  kv_btree_test_fail_writes(1000000);     /* keep the next ones in overlay */
  th_exec(db, "DELETE FROM t WHERE key=11; INSERT OR REPLACE INTO t "
              "VALUES(12,'new12')");
  z = th_text(db, "SELECT group_concat(key||'='||value) FROM (SELECT * FROM "
                  "t WHERE key>=10 AND key<14)");
  ck_assert_str_eq(z, "10=v10-a,12=new12,13=v13-a");
  sqlite3_free(z);
  kv_btree_test_fail_writes(0);
  kb_settle(db);
  kb_fill(db, "t", 13, 2, "b");
  kb_settle(db);                      /* a new state of the data file */
  z = th_text(db, "SELECT group_concat(key||'='||value) FROM (SELECT * FROM "
                  "t WHERE key>=10 AND key<16)");
  ck_assert_str_eq(z, "10=v10-a,12=new12,13=v13-b,14=v14-b,15=v15-a");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 499);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A range statement's cursor keeps its iterator between runs: a run that
** fails on a data-file read leaves it reusable, and later runs (other
** bounds, inside a transaction with its own writes) read the right rows. */
START_TEST(test_kvbtree_range_cursor_is_reused_after_an_error)
{
  char *zDir = th_tmpdir("kvbtree_reuse");
  sqlite3 *db = th_open(":memory:");
  sqlite3_stmt *pStmt = 0;
  int i, rc;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 100, "a");
  kb_settle(db);
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT key FROM t WHERE key>=?1 "
                                      "AND key<?1+3", -1, &pStmt, 0),
                   SQLITE_OK);
  sqlite3_bind_int(pStmt, 1, 10);
  kv_btree_test_fail_reads(1);
  rc = sqlite3_step(pStmt);
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  sqlite3_reset(pStmt);
  kv_btree_test_fail_reads(0);
  for(i=0; i<2; i++){
    int k, n = 0;
    if( i==1 ){
      th_exec(db, "BEGIN; DELETE FROM t WHERE key=21; INSERT INTO t "
                  "VALUES(20.5,'x')");
    }
    sqlite3_bind_int(pStmt, 1, 20);
    while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
      double r = sqlite3_column_double(pStmt, 0);
      k = (int)(r*2);
      ck_assert_int_eq(k, i==0 ? 40+2*n : (n==0 ? 40 : n==1 ? 41 : 44));
      n++;
    }
    ck_assert_int_eq(rc, SQLITE_DONE);
    ck_assert_int_eq(n, 3);
    sqlite3_reset(pStmt);
  }
  th_exec(db, "COMMIT");
  sqlite3_finalize(pStmt);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 100);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvbtree_new_table_is_empty)
{
  char *zDir = th_tmpdir("kvbtree_new");
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key=1"), 0);
  ck_assert_int_eq(th_int(db, "SELECT kv_stats.row_count FROM kv_stats "
                              "WHERE tbl='t'"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A point read remembers a table missing from the data file only for its
** read transaction: once the collector has written the table, later
** transactions (on the same pooled reader) find its rows there. */
START_TEST(test_kvbtree_point_read_sees_table_written_after_absent_read)
{
  char *zDir = th_tmpdir("kvbtree_absent");
  sqlite3 *db = th_open(":memory:");
  char *z;
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key='k'"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key='k'"), 0);
  th_exec(db, "INSERT INTO t VALUES('k','A')");
  kb_settle(db);
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "t"), 0);
  z = th_text(db, "SELECT value FROM t WHERE key='k'");
  ck_assert_str_eq(z, "A");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key='n'"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ drop --- */

static void kb_drop(const char *zType){
  char *zDir = th_tmpdir(zType);
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "t", zType, zDir);
  kb_fill(db, "t", 1, 100, "a");
  th_exec(db, "DROP TABLE t");
  sqlite3_close(db);
  db = th_open(":memory:");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables"), 0);
  kb_mk(db, "t2", zType, zDir);           /* opens the store */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables "
                              "WHERE name='t'"), 0);
  kb_mk(db, "t", zType, zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}

START_TEST(test_kvbtree_drop_survives_reopen)
{
  kb_drop("kv_btree");
}
END_TEST

START_TEST(test_kvlog_drop_survives_reopen)
{
  kb_drop("kv_log");
}
END_TEST

/* DROP while the collector cannot write returns; the physical table is
** dropped once writes succeed, and a new table of that name is empty. */
START_TEST(test_kvbtree_drop_while_collector_fails_returns)
{
  char *zDir = th_tmpdir("kvbtree_dropfail");
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 100, "a");
  kb_settle(db);
  kv_btree_test_fail_writes(1000000000);
  th_exec(db, "DROP TABLE t");
  kv_btree_test_fail_writes(0);
  kb_mk(db, "u", "kv_btree", zDir);
  th_exec(db, "INSERT INTO u VALUES(1, 1)");
  kb_settle(db);
  sqlite3_close(db);
  db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 0);
  kb_mk(db, "u", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u"), 1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A child drops the table and is killed right after DROP returns: the
** reopened store no longer has it. */
START_TEST(test_kvbtree_drop_then_sigkill_removes_table)
{
  char *zDir = th_tmpdir("kvbtree_dropkill");
  sqlite3 *db;
  pid_t pid;
  int st;
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *c = th_open(":memory:");
    kb_mk(c, "b", "kv_btree", zDir);
    kb_mk(c, "l", "kv_log", zDir);
    kb_fill(c, "b", 1, 50, "x");
    kb_fill(c, "l", 1, 50, "x");
    th_exec(c, "DROP TABLE b; DROP TABLE l");
    raise(SIGKILL);
    _exit(3);
  }
  waitpid(pid, &st, 0);
  ck_assert(WIFSIGNALED(st));
  db = th_open(":memory:");
  kb_mk(db, "other", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE "
                              "name IN ('b','l')"), 0);
  kb_mk(db, "b", "kv_btree", zDir);
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------- collector --- */

/* A default VFS whose open of a file named kv_btree.db fails, as on a
** full disk, while kbFullArmed is set; its last system error is then
** ENOSPC. */
static sqlite3_vfs *pKbRoot;
static sqlite3_vfs kbFullVfs;
static int kbFullArmed, kbFullHit;
static int kbFullOpen(sqlite3_vfs *v, const char *z, sqlite3_file *f, int fl,
                      int *pOut){
  size_t n = z ? strlen(z) : 0;
  (void)v;
  if( kbFullArmed && n>=11 && strcmp(z+n-11, "kv_btree.db")==0 ){
    kbFullHit = 1;
    return SQLITE_CANTOPEN;
  }
  return pKbRoot->xOpen(pKbRoot, z, f, fl, pOut);
}
static int kbFullLastError(sqlite3_vfs *v, int n, char *z){
  (void)v;
  if( kbFullHit ) return ENOSPC;
  return pKbRoot->xGetLastError ? pKbRoot->xGetLastError(pKbRoot, n, z) : 0;
}

/* A store whose data file cannot be opened because the disk is full
** fails the open with SQLITE_FULL and a message naming the data file and
** the cause (it said only "disk I/O error"); with space again it opens
** with every row. */
START_TEST(test_kvbtree_data_file_open_on_full_disk_is_sqlite_full)
{
  char *zDir = th_tmpdir("kvbtree_openfull");
  char *zErr = 0;
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING "
                               "kv_btree(dir='%q')", zDir);
  sqlite3 *db = th_open(":memory:");
  int rc;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 20, "a");
  sqlite3_close(db);
  pKbRoot = sqlite3_vfs_find(0);
  kbFullVfs = *pKbRoot;
  kbFullVfs.zName = "kvbtree-full";
  kbFullVfs.xOpen = kbFullOpen;
  kbFullVfs.xGetLastError = kbFullLastError;
  ck_assert_int_eq(sqlite3_vfs_register(&kbFullVfs, 1), SQLITE_OK);
  db = th_open(":memory:");
  kbFullArmed = 1;
  rc = th_try(db, zSql, &zErr);
  kbFullArmed = 0;
  ck_assert_int_eq(kbFullHit, 1);
  ck_assert_int_eq(rc & 0xff, SQLITE_FULL);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "kv_btree.db")!=0, "%s", zErr);
  ck_assert_msg(strstr(zErr, "No space left on device")!=0, "%s", zErr);
  sqlite3_free(zErr);
  kbFullHit = 0;
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 20);
  sqlite3_close(db);
  sqlite3_free(zSql);
  sqlite3_free(zDir);
}
END_TEST

/* Failed data-file writes confirm nothing, show in kv_stats, are retried
** and lose nothing. */
START_TEST(test_kvbtree_failed_collector_write_is_retried)
{
  char *zDir = th_tmpdir("kvbtree_fail");
  sqlite3 *db = th_open(":memory:");
  /* _i: accelerated_repair, which defers syncs but never confirmations */
  kb_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree(dir='%q', "
              "accelerated_repair=%d)", zDir, _i);
  kv_btree_test_fail_writes(1000000);
  kb_fill(db, "t", 1, 200, "a");
  kb_fill(db, "t", 201, 200, "a");
  kb_wait_errors(db, "t", 1);         /* the collector tries and fails */
  ck_assert_int_eq(kb_stat(db, "pending_confirmations", "t"), 2);
  ck_assert_int_eq(kb_stat(db, "wal_unconfirmed", 0), 2);
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "t"), 400);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats WHERE tbl='t' "
                              "AND last_error LIKE 'data-file write: %'"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 400);
  kv_btree_test_fail_writes(3);
  kb_settle(db);
  ck_assert_int_ge(kb_stat(db, "collector_errors", "t"), 3);
  ck_assert_int_eq(kv_btree_test_fail_writes_left(), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 400);
  sqlite3_close(db);
  db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 400);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* While the collector cannot write, nothing is confirmed: a reopen
** replays the WAL and repairs the data file. */
START_TEST(test_kvbtree_unconfirmed_batches_replayed_at_open)
{
  char *zDir = th_tmpdir("kvbtree_unconf");
  sqlite3 *db;
  pid_t pid;
  int st;
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *c = th_open(":memory:");
    kb_mk(c, "t", "kv_btree", zDir);
    kv_btree_test_fail_writes(1000000000);
    kb_fill(c, "t", 1, 300, "a");
    if( kb_stat(c, "wal_unconfirmed", 0)<1 ) _exit(4);
    if( kb_stat(c, "pending_confirmations", "t")<1 ) _exit(5);
    raise(SIGKILL);
    _exit(3);
  }
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFSIGNALED(st), "child status %d", st);
  db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 300);
  kb_settle(db);
  ck_assert_int_eq(kb_stat(db, "wal_unconfirmed", 0), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A write stream far past the overlay limit: committers wait, the overlay
** stays bounded, every row arrives. */
START_TEST(test_kvbtree_overlay_is_bounded)
{
  char *zDir = th_tmpdir("kvbtree_bound");
  char *zReal = realpath(zDir, 0);
  sqlite3 *db = th_open(":memory:");
  sqlite3_int64 nMax = 0;
  int i;
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(kv_btree_test_overlay_limit(zReal, 200), SQLITE_OK);
  for(i=0; i<50; i++){
    sqlite3_int64 n;
    kb_fill(db, "t", i*100, 100, "s");
    n = kb_stat(db, "overlay_entries", "t");
    if( n>nMax ) nMax = n;
  }
  /* the limit is checked before a batch goes in */
  ck_assert_int_le(nMax, 200+100);
  kb_settle(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 5000);
  sqlite3_close(db);
  free(zReal);
  sqlite3_free(zDir);
}
END_TEST

/* Batches queued while the collector fails are collected together once it
** recovers: every table's overlay ends empty, and the data file holds the
** newest value of each key (a later batch of the same key wins). */
START_TEST(test_kvbtree_batched_collection_keeps_newest_and_empties_overlay)
{
  char *zDir = th_tmpdir("kvbtree_batched");
  sqlite3 *db = th_open(":memory:");
  char *z;
  int i;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_mk(db, "u", "kv_btree", zDir);
  kb_fill(db, "t", 1, 100, "a");
  kb_settle(db);
  kv_btree_test_fail_writes(1000000);
  for(i=0; i<6; i++){
    kb_fill(db, "t", 1+i*10, 50, i%2 ? "odd" : "even");
    kb_fill(db, "u", 1, 20, i%2 ? "odd" : "even");
  }
  th_exec(db, "DELETE FROM t WHERE key BETWEEN 95 AND 100");
  ck_assert_int_gt(kb_stat(db, "overlay_entries", "t"), 0);
  kv_btree_test_fail_writes(0);
  kb_settle(db);
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "t"), 0);
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "u"), 0);
  sqlite3_close(db);
  db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  kb_mk(db, "u", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 94);
  z = th_text(db, "SELECT value FROM t WHERE key=60");
  ck_assert_str_eq(z, "v60-odd");
  sqlite3_free(z);
  z = th_text(db, "SELECT value FROM t WHERE key=8");
  ck_assert_str_eq(z, "v8-even");
  sqlite3_free(z);
  z = th_text(db, "SELECT value FROM t WHERE key=94");
  ck_assert_str_eq(z, "v94-odd");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM u WHERE value LIKE "
                              "'%-odd'"), 20);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A transaction that read a key while it was only in the overlay keeps
** reading that value after the collector has written newer values and
** emptied the overlay. */
START_TEST(test_kvbtree_snapshot_reads_through_collection)
{
  char *zDir = th_tmpdir("kvbtree_snapcoll");
  sqlite3 *db = th_open(":memory:");
  char *z;
  kb_mk(db, "t", "kv_btree", zDir);
  kv_btree_test_fail_writes(1000000);
  th_exec(db, "INSERT INTO t VALUES('k','A')");
  kb_exec(db, "SELECT kv_begin('%q')", zDir);
  z = th_text(db, "SELECT kv_get(1,'t','k')");
  ck_assert_str_eq(z, "A");
  sqlite3_free(z);
  th_exec(db, "INSERT OR REPLACE INTO t VALUES('k','B'),('n','N')");
  kv_btree_test_fail_writes(0);
  kb_settle(db);
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "t"), 0);
  z = th_text(db, "SELECT kv_get(1,'t','k')");
  ck_assert_str_eq(z, "A");
  sqlite3_free(z);
  ck_assert_int_eq(th_int(db, "SELECT kv_get(1,'t','n') IS NULL"), 1);
  th_exec(db, "SELECT kv_rollback(1)");
  z = th_text(db, "SELECT value FROM t WHERE key='k'");
  ck_assert_str_eq(z, "B");
  sqlite3_free(z);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* -------------------------------------------- delete, conflicts --- */

/* kv_delete's old value: cached value, then NULL for a repeated delete,
** the data file's value for a key only there. */
START_TEST(test_kvbtree_delete_returns_old_value_three_states)
{
  char *zDir = th_tmpdir("kvbtree_del");
  sqlite3 *db = th_open(":memory:");
  char *z;
  kb_mk(db, "t", "kv_btree", zDir);
  th_exec(db, "INSERT INTO t VALUES('a','va'),('b','vb')");
  kb_settle(db);                          /* both in the data file only */
  ck_assert_int_eq(th_intf(db, "SELECT kv_begin('%q')", zDir), 1);
  z = th_text(db, "SELECT kv_delete(1,'t','a')");   /* from the data file */
  ck_assert_str_eq(z, "va");
  sqlite3_free(z);
  z = th_text(db, "SELECT kv_delete(1,'t','a')");   /* repeated: NULL */
  ck_assert_ptr_null(z);
  th_exec(db, "SELECT kv_put(1,'t','c','vc')");
  z = th_text(db, "SELECT kv_delete(1,'t','c')");   /* cached value */
  ck_assert_str_eq(z, "vc");
  sqlite3_free(z);
  z = th_text(db, "SELECT kv_delete(1,'t','zz')");  /* absent */
  ck_assert_ptr_null(z);
  th_exec(db, "SELECT kv_commit(1)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* The old value of a delete comes from the data file when the
** transaction has no write of the key: a failing read there is an error of
** kv_delete and of DELETE (never taken for an absent key: NULL), and the key
** is not deleted. */
START_TEST(test_kvbtree_delete_with_data_file_read_error_fails)
{
  char *zDir = th_tmpdir("kvbtree_delerr");
  sqlite3 *db = th_open(":memory:");
  char *zErr = 0;
  int rc;
  kb_mk(db, "t", "kv_btree", zDir);
  th_exec(db, "INSERT INTO t VALUES('a','va'),('b','vb')");
  kb_settle(db);                          /* both in the data file only */
  ck_assert_int_eq(kb_stat(db, "overlay_entries", "t"), 0);
  ck_assert_int_eq(th_intf(db, "SELECT kv_begin('%q')", zDir), 1);
  kv_btree_test_fail_reads(1);
  rc = th_try(db, "SELECT kv_delete(1,'t','a')", &zErr);
  kv_btree_test_fail_reads(0);
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  ck_assert_msg(zErr && strstr(zErr, "kv_btree: read of table t"),
                "message: %s", zErr);
  sqlite3_free(zErr); zErr = 0;
  th_exec(db, "SELECT kv_rollback(1)");
  kv_btree_test_fail_reads(1);
  rc = th_try(db, "DELETE FROM t WHERE key='b'", &zErr);
  kv_btree_test_fail_reads(0);
  ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
  ck_assert_msg(zErr && strstr(zErr, "kv_btree"), "message: %s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key IN "
                              "('a','b')"), 2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Conflicts by revision: a same-value rewrite of a key another root read
** conflicts; a key read twice and never rewritten does not. */
START_TEST(test_kvbtree_conflict_baseline_by_revision)
{
  char *zDir = th_tmpdir("kvbtree_conflict");
  sqlite3 *db = th_open(":memory:");
  char *zErr = 0;
  int rc;
  kb_mk(db, "t", "kv_btree", zDir);
  th_exec(db, "INSERT INTO t VALUES('k','A'),('u','U')");
  kb_settle(db);
  kb_exec(db, "SELECT kv_begin('%q'), kv_begin('%q')", zDir, zDir);
  th_exec(db, "SELECT kv_get(1,'t','k'), kv_get(1,'t','u'), kv_get(1,'t','u')");
  th_exec(db, "SELECT kv_put(1,'t','x','1')");
  /* root 2 rewrites k with the same value, A -> B -> A */
  th_exec(db, "SELECT kv_put(2,'t','k','B')");
  th_exec(db, "SELECT kv_commit(2)");
  kb_exec(db, "SELECT kv_begin('%q')", zDir);
  th_exec(db, "SELECT kv_put(3,'t','k','A'), kv_commit(3)");
  rc = th_try(db, "SELECT kv_commit(1)", &zErr);
  ck_assert_int_eq(rc & 0xff, SQLITE_BUSY);
  ck_assert_msg(zErr && strstr(zErr, "'k'"), "%s", zErr ? zErr : "");
  ck_assert_msg(strstr(zErr, "'u'")==0, "%s", zErr);
  sqlite3_free(zErr);
  kb_exec(db, "SELECT kv_begin('%q')", zDir);
  th_exec(db, "SELECT kv_get(4,'t','u'), kv_get(4,'t','u'), "
              "kv_put(4,'t','y','2'), kv_commit(4)");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------ bad input --- */

/* The baseline of a point read and of a delete's old-value read, both from
** the data file: a commit of the same value by another transaction since
** the snapshot still conflicts. */
START_TEST(test_kvbtree_same_value_commit_conflicts_with_read_and_delete)
{
  char *zDir = th_tmpdir("kvbtree_samevalue");
  sqlite3 *db = th_open(":memory:");
  static const char *azOp[2] = {
    "SELECT kv_get(%d,'t','k')", "SELECT kv_delete(%d,'t','k')"
  };
  char *zErr = 0, *zSql;
  int i, rc, h;
  kb_mk(db, "t", "kv_btree", zDir);
  th_exec(db, "INSERT INTO t VALUES('k','A')");
  kb_settle(db);
  for(i=0; i<2; i++){
    h = (int)th_intf(db, "SELECT kv_begin('%q')", zDir);
    kb_exec(db, azOp[i], h);
    kb_exec(db, "SELECT kv_put(%d,'t','x%d',1)", h, i);
    kb_exec(db, "SELECT kv_begin('%q')", zDir);
    kb_exec(db, "SELECT kv_put(%d,'t','k','A'), kv_commit(%d)", h+1, h+1);
    zSql = sqlite3_mprintf("SELECT kv_commit(%d)", h);
    rc = th_try(db, zSql, &zErr);
    ck_assert_int_eq(rc & 0xff, SQLITE_BUSY);
    ck_assert_msg(zErr && strstr(zErr, "t key 'k'"), "%s", zErr);
    sqlite3_free(zErr); zErr = 0;
    sqlite3_free(zSql);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A kv_btree table with no physical table yet hands out versions like any
** other: an absent key's first observation, then the version of a commit. */
START_TEST(test_kvbtree_new_table_gives_versions)
{
  char *zDir = th_tmpdir("kvbtree_newver");
  sqlite3 *db = th_open(":memory:");
  char *zV1, *zV2, *zV3;
  kb_mk(db, "t", "kv_btree", zDir);
  zV1 = th_text(db, "SELECT version FROM kv_query_with_version('t', 'k', "
                    "(SELECT store FROM kv_stats WHERE tbl='t'))");
  zV2 = th_text(db, "SELECT version FROM kv_query_with_version('t', 'k', "
                    "(SELECT store FROM kv_stats WHERE tbl='t'))");
  ck_assert_msg(zV1 && zV1[0]=='d' && zV1[1]==':', "%s", zV1);
  ck_assert_str_eq(zV1, zV2);         /* the same, not a new one */
  th_exec(db, "INSERT INTO t VALUES('k', 1)");
  zV3 = th_text(db, "SELECT version FROM kv_query_with_version('t', 'k', "
                    "(SELECT store FROM kv_stats WHERE tbl='t'))");
  ck_assert_msg(zV3 && zV3[0]=='u' && strcmp(zV3+2, zV1+2)>0, "%s", zV3);
  sqlite3_free(zV1);
  sqlite3_free(zV2);
  sqlite3_free(zV3);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvbtree_refuses_non_persistent_and_bad_args)
{
  char *zDir = th_tmpdir("kvbtree_bad");
  sqlite3 *db = th_open(":memory:");
  char *zSql, *zErr = 0;
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_btree(dir='%q', "
                         "persistence=0)", zDir);
  ck_assert_int_ne(th_try(db, zSql, &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "persistence=1"), "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_log(dir='%q', "
                         "accelerated_repair=1)", zDir);
  ck_assert_int_ne(th_try(db, zSql, &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "bad argument"), "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  sqlite3_free(zSql);
  zSql = sqlite3_mprintf("SELECT kv_begin('%q'), kv_create_table(1, 'x', "
                         "'kv_btree', '{\"persistence\":0}')", zDir);
  ck_assert_int_ne(th_try(db, zSql, &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "persistence=1"), "%s", zErr);
  sqlite3_free(zSql);
  sqlite3_free(zErr); zErr = 0;
  kb_mk(db, "b", "kv_btree", zDir);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE b2 USING kv_log(dir='%q')",
                         zDir);
  th_exec(db, zSql);
  sqlite3_free(zSql);
  /* a table of one type cannot be attached as another */
  th_exec(db, "DROP TABLE b2");
  sqlite3_close(db);
  db = th_open(":memory:");
  /* nor with an accelerated_repair other than the one it was created with
  ** (it would be ignored: the stored option decides) */
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE b USING kv_btree(dir='%q', "
                         "accelerated_repair=1)", zDir);
  ck_assert_int_ne(th_try(db, zSql, &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "kv: table b exists as kv_btree with "
                "accelerated_repair=0; cannot attach it with "
                "accelerated_repair=1"), "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  sqlite3_free(zSql);
  kb_exec(db, "CREATE VIRTUAL TABLE b USING kv_btree(dir='%q', "
              "accelerated_repair=0)", zDir);
  sqlite3_close(db);
  db = th_open(":memory:");
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE b USING kv_log(dir='%q')", zDir);
  ck_assert_int_ne(th_try(db, zSql, &zErr), SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "exists as kv_btree"), "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Without dir=, a table in an in-memory main database or in the temp
** schema (of a file database too) lands in the connection's in-memory
** store: kv_btree and kv_log say that this is why, and what to give. */
START_TEST(test_kvbtree_in_memory_store_error_says_to_give_dir)
{
  char *zDir = th_tmpdir("kvbtree_memstore");
  char *zDb = sqlite3_mprintf("%s/main.db", zDir);
  sqlite3 *db = th_open(":memory:");
  sqlite3 *dbF = th_open(zDb);
  static const char *azSql[] = {
    "CREATE VIRTUAL TABLE t USING kv_btree",
    "CREATE VIRTUAL TABLE t USING kv_log",
    "CREATE VIRTUAL TABLE temp.t USING kv_btree",
  };
  char *zErr = 0;
  int i;
  for(i=0; i<3; i++){
    ck_assert_int_eq(th_try(i<2 ? db : dbF, azSql[i], &zErr), SQLITE_ERROR);
    ck_assert_msg(zErr && strstr(zErr, "need a store directory (dir=PATH)")
                  && strstr(zErr, "in memory"), "%s", zErr ? zErr : "");
    sqlite3_free(zErr); zErr = 0;
  }
  ck_assert_int_eq(th_int(dbF, "SELECT count(*) FROM kv_tables"), 0);
  sqlite3_close(dbF);
  sqlite3_close(db);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
}
END_TEST

/* accelerated_repair: fewer synced commits, same data after reopen, and
** nothing stays unconfirmed. */
START_TEST(test_kvbtree_accelerated_repair_keeps_data)
{
  char *zDir = th_tmpdir("kvbtree_accel");
  sqlite3 *db = th_open(":memory:");
  int i;
  kb_exec(db, "CREATE VIRTUAL TABLE t USING kv_btree(dir='%q', "
              "accelerated_repair=1)", zDir);
  for(i=0; i<40; i++) kb_exec(db, "INSERT INTO t VALUES(%d, 'x')", i);
  kb_settle(db);
  sqlite3_close(db);
  db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 40);
  ck_assert_int_eq(kb_stat(db, "wal_unconfirmed", 0), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---------------------------------------------------- corrupt files --- */

static void kb_flip(const char *zPath, off_t iOff){
  int fd = open(zPath, O_RDWR);
  unsigned char c[64];
  int i;
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, c, sizeof(c), iOff), (ssize_t)sizeof(c));
  for(i=0; i<(int)sizeof(c); i++) c[i] ^= 0x5a;
  ck_assert_int_eq(pwrite(fd, c, sizeof(c), iOff), (ssize_t)sizeof(c));
  close(fd);
}

/* Attaching table t of type zType in store zDir fails with SQLITE_CORRUPT
** (any extended code) and a message holding zLike and zLike2 (if given). */
static void kb_open_corrupt(const char *zDir, const char *zType,
                            const char *zLike, const char *zLike2){
  sqlite3 *db = th_open(":memory:");
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING %s(dir='%q')",
                               zType, zDir);
  char *zErr = 0;
  ck_assert_int_eq(th_try(db, zSql, &zErr) & 0xff, SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, zLike) && (!zLike2 || strstr(zErr, zLike2)),
                "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_free(zSql);
  sqlite3_close(db);
}

START_TEST(test_kvbtree_corrupt_data_file_fails_open)
{
  char *zDir = th_tmpdir("kvbtree_corrupt");
  char *zFile = sqlite3_mprintf("%s/kv_btree.db", zDir);
  char *zSql, *zErr = 0;
  sqlite3 *db = th_open(":memory:");
  struct stat stt;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 3000, "a");
  sqlite3_close(db);
  ck_assert_int_eq(stat(zFile, &stt), 0);
  ck_assert_int_gt(stt.st_size, 8192);
  kb_flip(zFile, 2*4096);                /* page 3 header: t1's root */
  kb_flip(zFile, stt.st_size-4096);      /* the last page's header */
  db = th_open(":memory:");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats"), 0);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_btree(dir='%q')",
                         zDir);
  ck_assert_int_eq(th_try(db, zSql, &zErr) & 0xff, SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "kv_btree.db"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* A data file whose first page (the database header) is damaged is damage
** like any other: SQLITE_CORRUPT and "data file ... is damaged", not
** SQLite's SQLITE_NOTADB. */
START_TEST(test_kvbtree_data_file_with_damaged_header_fails_open_as_corrupt)
{
  char *zDir = th_tmpdir("kvbtree_header");
  char *zFile = sqlite3_mprintf("%s/kv_btree.db", zDir);
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 100, "a");
  sqlite3_close(db);
  kb_flip(zFile, 0);                     /* "SQLite format 3" and more */
  kb_open_corrupt(zDir, "kv_btree", "kv_btree: data file ",
                  "kv_btree.db is damaged: ");
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* A data file cut short is damage too: SQLITE_CORRUPT naming the file. */
START_TEST(test_kvbtree_truncated_data_file_fails_open)
{
  char *zDir = th_tmpdir("kvbtree_trunc");
  char *zFile = sqlite3_mprintf("%s/kv_btree.db", zDir);
  sqlite3 *db = th_open(":memory:");
  struct stat stt;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 3000, "a");
  sqlite3_close(db);
  ck_assert_int_eq(stat(zFile, &stt), 0);
  ck_assert_int_eq(truncate(zFile, stt.st_size/2), 0);
  kb_open_corrupt(zDir, "kv_btree", "kv_btree.db", 0);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* A data file cut inside its last page (here by one byte) holds whole
** pages no more: SQLite would read the missing bytes as zeros and return a
** wrong value without complaint, so the open refuses it. */
START_TEST(test_kvbtree_data_file_cut_inside_a_page_fails_open)
{
  char *zDir = th_tmpdir("kvbtree_cut1");
  char *zFile = sqlite3_mprintf("%s/kv_btree.db", zDir);
  sqlite3 *db = th_open(":memory:");
  struct stat stt;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 100, "a");
  sqlite3_close(db);
  ck_assert_int_eq(stat(zFile, &stt), 0);
  ck_assert_int_eq(truncate(zFile, stt.st_size-1), 0);
  kb_open_corrupt(zDir, "kv_btree", "kv_btree.db", "not a whole number of");
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* The catalog lists a kv_btree table, so its data file was made before
** the catalog was saved: a data file that is gone (_i 0) or empty (_i 1)
** after a clean close was deleted or truncated, and the open says so
** instead of showing the table empty.  It stays refused on a second try. */
START_TEST(test_kvbtree_missing_or_empty_data_file_fails_open)
{
  char *zDir = th_tmpdir("kvbtree_gone");
  char *zFile = sqlite3_mprintf("%s/kv_btree.db", zDir);
  char *zSql, *zErr = 0;
  sqlite3 *db = th_open(":memory:");
  int i;
  kb_mk(db, "t", "kv_btree", zDir);
  kb_fill(db, "t", 1, 100, "a");
  sqlite3_close(db);
  if( _i==0 ) ck_assert_int_eq(unlink(zFile), 0);
  else ck_assert_int_eq(truncate(zFile, 0), 0);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_btree(dir='%q')",
                         zDir);
  for(i=0; i<2; i++){
    db = th_open(":memory:");
    ck_assert_int_eq(th_try(db, zSql, &zErr) & 0xff, SQLITE_CORRUPT);
    ck_assert_msg(zErr && strstr(zErr, "kv_btree.db")
                  && strstr(zErr, _i==0 ? "is missing" : "is empty"),
                  "%s", zErr ? zErr : "");
    sqlite3_free(zErr);
    zErr = 0;
    sqlite3_close(db);
  }
  sqlite3_free(zSql);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_corrupt_log_fails_open)
{
  char *zDir = th_tmpdir("kvlog_corrupt");
  char *zFile = sqlite3_mprintf("%s/kv_log/1/00000001.klog", zDir);
  char *zSql, *zErr = 0;
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "t", "kv_log", zDir);
  kb_fill(db, "t", 1, 300, "a");
  kb_fill(db, "t", 301, 300, "b");
  sqlite3_close(db);
  kb_flip(zFile, 0);                     /* its header */
  db = th_open(":memory:");
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_log(dir='%q')", zDir);
  ck_assert_int_eq(th_try(db, zSql, &zErr) & 0xff, SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "00000001.klog")
                && strstr(zErr, "offset"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* Offset of the first occurrence of zNeedle in file zPath (fails if none). */
static off_t kb_find(const char *zPath, const char *zNeedle){
  struct stat st;
  int fd = open(zPath, O_RDONLY);
  char *a;
  off_t i, n = (off_t)strlen(zNeedle);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(fstat(fd, &st), 0);
  a = malloc(st.st_size+1);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(pread(fd, a, st.st_size, 0), (ssize_t)st.st_size);
  close(fd);
  for(i=0; i+n<=st.st_size && memcmp(&a[i], zNeedle, n)!=0; i++){}
  ck_assert_msg(i+n<=st.st_size, "%s not found in %s", zNeedle, zPath);
  free(a);
  return i;
}

/* A record damaged after the open checked it (open verifies every
** checksum): a scan reaching it and a point read of it fail with
** SQLITE_CORRUPT naming the log file and the record's offset; before, the
** scan ended there as if the table had ended.  The first scan cached the
** records it checked, which would read as they were checked: the cache
** lets go of them before the damage, so the reads go to the file. */
START_TEST(test_kvlog_damaged_record_fails_scan_and_read)
{
  char *zDir = th_tmpdir("kvlog_damaged");
  char *zFile = sqlite3_mprintf("%s/kv_log/1/00000001.klog", zDir);
  sqlite3 *db = th_open(":memory:");
  char *zErr = 0;
  int fd;
  off_t iOff;
  int64_t nLimit;
  kb_mk(db, "l", "kv_log", zDir);
  kb_fill(db, "l", 1, 20, "a");
  kb_settle(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 20);
  nLimit = kv_logstore_cache_limit(0);
  kv_logstore_cache_limit(nLimit);
  /* damage the value of key 7 in place: one byte of "v7-a" */
  iOff = kb_find(zFile, "v7-a");
  fd = open(zFile, O_RDWR);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, "w", 1, iOff), 1);
  close(fd);
  ck_assert_int_eq(th_try(db, "SELECT count(*) FROM l", &zErr) & 0xff,
                   SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "00000001.klog is corrupt at offset")
                && strstr(zErr, "checksum"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr); zErr = 0;
  /* keys away from it still read (a walk reads the record of the key it
  ** lands on, also the first one past its bound); the damaged one fails */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l WHERE key<6"), 5);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l WHERE key>7"), 13);
  ck_assert_int_eq(th_try(db, "SELECT value FROM l WHERE key=7", &zErr)
                   & 0xff, SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "00000001.klog is corrupt at offset"),
                "%s", zErr ? zErr : "");
  sqlite3_free(zErr); zErr = 0;
  /* the next point reads (their snapshot handles are reused) read good
  ** keys whole and still find the damaged one damaged */
  ck_assert_int_eq(th_int(db, "SELECT value='v8-a' FROM l WHERE key=8"), 1);
  ck_assert_int_eq(th_try(db, "SELECT value FROM l WHERE key=7", &zErr)
                   & 0xff, SQLITE_CORRUPT);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(th_int(db, "SELECT value='v6-a' FROM l WHERE key=6"), 1);
  ck_assert_int_eq(th_try(db, "SELECT key FROM l ORDER BY key DESC", &zErr)
                   & 0xff, SQLITE_CORRUPT);
  sqlite3_free(zErr);
  sqlite3_close(db);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* rm -rf of a path below the test directory (test cleanup of damage). */
static void kb_rmrf(const char *zPath){
  char *z = sqlite3_mprintf("rm -rf '%q'", zPath);
  ck_assert_int_eq(system(z), 0);
  sqlite3_free(z);
}

/* The catalog lists a kv_log table, so its directory was made (and
** synced) before the catalog was saved: a directory that is gone - the
** whole <store>/kv_log folder (_i 0) or the table's own directory and
** marker (_i 1) - was deleted, and the open says so instead of showing
** the table empty.  It creates nothing, so a second open refuses too. */
START_TEST(test_kvlog_missing_log_directory_fails_open)
{
  char *zDir = th_tmpdir("kvlog_gone");
  char *zSql, *zErr = 0, *zGone;
  sqlite3 *db = th_open(":memory:");
  int i;
  kb_mk(db, "l", "kv_log", zDir);
  kb_fill(db, "l", 1, 20, "a");
  sqlite3_close(db);
  zGone = sqlite3_mprintf(_i==0 ? "%s/kv_log" : "%s/kv_log/1", zDir);
  kb_rmrf(zGone);
  sqlite3_free(zGone);
  if( _i==1 ){
    zGone = sqlite3_mprintf("%s/kv_log/1.synced", zDir);
    ck_assert_int_eq(unlink(zGone), 0);
    sqlite3_free(zGone);
  }
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE l USING kv_log(dir='%q')",
                         zDir);
  for(i=0; i<2; i++){
    db = th_open(":memory:");
    ck_assert_int_eq(th_try(db, zSql, &zErr) & 0xff, SQLITE_CORRUPT);
    ck_assert_msg(zErr && strstr(zErr, "kv_log/1 is missing")
                  && strstr(zErr, "table l"), "%s", zErr ? zErr : "");
    sqlite3_free(zErr);
    zErr = 0;
    sqlite3_close(db);
  }
  sqlite3_free(zSql);
  sqlite3_free(zDir);
}
END_TEST

/* Read all of zPath into a sqlite3_malloc'd buffer. */
static char *kb_slurp(const char *zPath, int *pn){
  char *a = sqlite3_malloc(1<<20);
  int fd = open(zPath, O_RDONLY);
  ck_assert_int_ge(fd, 0);
  *pn = (int)read(fd, a, 1<<20);
  ck_assert_int_gt(*pn, 0);
  close(fd);
  return a;
}

/* A crash after DROP TABLE deleted a kv_log table's directory and before
** the catalog file was saved leaves a catalog that still lists the table
** and a WAL that drops it: the open replays the drop and is not mistaken
** for a missing directory.  (The crash is made by restoring the catalog
** file saved before the drop, after a child dropped and exited without
** closing.) */
START_TEST(test_kvlog_drop_replayed_over_older_catalog_opens)
{
  char *zDir = th_tmpdir("kvlog_dropcat");
  char *zCat = sqlite3_mprintf("%s/tables_meta", zDir);
  char *aCat;
  int nCat, fd, st;
  pid_t pid;
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  kb_mk(db, "keep", "kv_log", zDir);
  kb_fill(db, "l", 1, 20, "a");
  kb_fill(db, "keep", 1, 5, "k");
  sqlite3_close(db);
  aCat = kb_slurp(zCat, &nCat);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    char *z = sqlite3_mprintf("CREATE VIRTUAL TABLE l USING kv_log(dir='%q');"
                              "DROP TABLE l", zDir);
    sqlite3 *dbc = th_open(":memory:");
    _exit(sqlite3_exec(dbc, z, 0, 0, 0)==SQLITE_OK ? 0 : 1);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  fd = open(zCat, O_WRONLY|O_TRUNC);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, aCat, nCat), nCat);
  close(fd);
  db = th_open(":memory:");
  kb_mk(db, "keep", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM keep"), 5);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE "
                              "name='l'"), 0);
  sqlite3_close(db);
  sqlite3_free(aCat);
  sqlite3_free(zCat);
  sqlite3_free(zDir);
}
END_TEST

/* Table ids name files (kv_log/<id>, the data file's t<id>).  When the
** catalog file is lost, the tables created next must not get the ids of
** files still in the store, or they would show another table's rows. */
START_TEST(test_kv_new_tables_never_take_ids_of_files_in_the_store)
{
  char *zDir = th_tmpdir("kv_lostcat");
  char *zCat = sqlite3_mprintf("%s/tables_meta", zDir);
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "a", "kv_log", zDir);
  kb_mk(db, "b", "kv_btree", zDir);
  kb_fill(db, "a", 1, 20, "a");
  kb_fill(db, "b", 1, 30, "b");
  sqlite3_close(db);
  ck_assert_int_eq(unlink(zCat), 0);
  db = th_open(":memory:");
  kb_mk(db, "x", "kv_log", zDir);
  kb_mk(db, "y", "kv_btree", zDir);
  kb_mk(db, "z", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM x"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM y"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM z"), 0);
  ck_assert_int_eq(th_int(db, "SELECT sum(rows) FROM kv_tables"), 0);
  kb_fill(db, "y", 1, 3, "y");
  sqlite3_close(db);
  db = th_open(":memory:");
  kb_mk(db, "y", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM y"), 3);
  sqlite3_close(db);
  sqlite3_free(zCat);
  sqlite3_free(zDir);
}
END_TEST

/* A kv_log file cut after its records were synced: the open reports the
** loss instead of silently dropping the tail. */
START_TEST(test_kvlog_truncated_synced_log_fails_open)
{
  char *zDir = th_tmpdir("kvlog_trunc");
  char *zFile = sqlite3_mprintf("%s/kv_log/1/00000001.klog", zDir);
  char *zSql, *zErr = 0;
  sqlite3 *db = th_open(":memory:");
  struct stat stt;
  kb_mk(db, "t", "kv_log", zDir);
  kb_fill(db, "t", 1, 300, "a");
  kb_fill(db, "t", 301, 300, "b");
  sqlite3_close(db);
  ck_assert_int_eq(stat(zFile, &stt), 0);
  ck_assert_int_eq(truncate(zFile, stt.st_size-100), 0);
  db = th_open(":memory:");
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_log(dir='%q')", zDir);
  ck_assert_int_eq(th_try(db, zSql, &zErr) & 0xff, SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "lost synced records"), "%s",
                zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_free(zSql);
  sqlite3_close(db);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------- RLIMIT_FSIZE --- */

/* A real child whose files may not grow past a limit (RLIMIT_FSIZE) that
** the root WAL fits under and the kv_btree data file does not: every
** commit is acknowledged, the collector's writes fail and confirm nothing
** (the WAL keeps the records), the child does not crash, and a reopen
** without the limit repairs the data file from the WAL.  (1 MiB segments:
** the WAL rotates and retires nothing meanwhile, but no segment reaches
** the limit.) */
START_TEST(test_kvbtree_fsize_limited_child_repairs_on_reopen)
{
  char *zDir = th_tmpdir("kvbtree_fsize");
  sqlite3 *db = th_open(":memory:");
  int fds[2], st, nOk = 0, v, i;
  pid_t pid;
  kb_mk(db, "b", "kv_btree", zDir);
  kb_mk(db, "l", "kv_log", zDir);
  sqlite3_close(db);
  ck_assert_int_eq(pipe(fds), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    struct rlimit rl;
    sqlite3 *c;
    close(fds[0]);
    signal(SIGXFSZ, SIG_IGN);
    c = th_open(":memory:");
    kb_mk(c, "b", "kv_btree", zDir);
    kb_mk(c, "l", "kv_log", zDir);
    /* 1 MiB root-WAL segments fit under the limit (so do the 400 kv_log
    ** records); the data file, 400 values of 20000 bytes, does not */
    kb_exec(c, "SELECT kv_store_options('%q', "
               "'{\"wal_segment_bytes\":1048576}')", zDir);
    rl.rlim_cur = rl.rlim_max = 2*1024*1024;
    if( setrlimit(RLIMIT_FSIZE, &rl) ) _exit(2);
    for(i=0; i<400; i++){
      char *z = sqlite3_mprintf("BEGIN; INSERT OR REPLACE INTO b VALUES(%d, "
          "randomblob(20000)); INSERT OR REPLACE INTO l VALUES(%d, "
          "randomblob(2000)); COMMIT", i, i);
      int rc = sqlite3_exec(c, z, 0, 0, 0);
      sqlite3_free(z);
      if( rc==SQLITE_OK ){
        if( write(fds[1], &i, sizeof(i))!=sizeof(i) ) _exit(6);
      }else{
        sqlite3_exec(c, "ROLLBACK", 0, 0, 0);
      }
    }
    /* the limit must have failed data-file writes, confirming none */
    for(i=0; i<500 && kb_stat(c, "collector_errors", "b")==0; i++){
      usleep(10000);
    }
    if( kb_stat(c, "collector_errors", "b")==0 ) _exit(7);
    if( kb_stat(c, "wal_unconfirmed", 0)<=0 ) _exit(8);
    _exit(0);
  }
  close(fds[1]);
  while( read(fds[0], &v, sizeof(v))==sizeof(v) ){
    ck_assert_int_eq(v, nOk);         /* no commit failed */
    nOk++;
  }
  close(fds[0]);
  waitpid(pid, &st, 0);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  ck_assert_int_eq(nOk, 400);
  db = th_open(":memory:");
  kb_mk(db, "b", "kv_btree", zDir);
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b WHERE "
                              "length(value)=20000"), nOk);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), nOk);
  kb_settle(db);
  sqlite3_close(db);
  db = th_open(":memory:");
  kb_mk(db, "b", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b"), nOk);
  ck_assert_int_eq(kb_stat(db, "wal_unconfirmed", 0), 0);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------- SIGKILL --- */

/* Child: transactions i=1.. each writing key i to all three tables (and
** deleting key i-7), acknowledging i on the pipe after COMMIT returns. */
/* The kill test's kv_btree table is created with accelerated_repair=1. */
static int kbKillAccel = 0;

static void kb_kill_child(const char *zDir, int wfd, int iFirst){
  sqlite3 *c;
  int i;
  kv_log_test_file_size(8*1024);    /* rolls and compactions every ~10 txns */
  c = th_open(":memory:");
  kb_exec(c, "CREATE VIRTUAL TABLE m USING kv_memory(dir='%q', "
             "persistence=1)", zDir);
  kb_exec(c, "CREATE VIRTUAL TABLE b USING kv_btree(dir='%q', "
             "accelerated_repair=%d)", zDir, kbKillAccel);
  kb_mk(c, "l", "kv_log", zDir);
  for(i=iFirst; ; i++){
    char *z = sqlite3_mprintf("BEGIN;"
        "INSERT OR REPLACE INTO m VALUES(%d, 'm%d');"
        "INSERT OR REPLACE INTO b VALUES(%d, 'b%d'||zeroblob(%d));"
        "INSERT OR REPLACE INTO l VALUES(%d, 'l%d'||zeroblob(%d));"
        "DELETE FROM m WHERE key=%d; DELETE FROM b WHERE key=%d;"
        "DELETE FROM l WHERE key=%d; COMMIT",
        i, i, i, i, i%200, i, i, 300+i%500, i-7, i-7, i-7);
    if( sqlite3_exec(c, z, 0, 0, 0)!=SQLITE_OK ) _exit(5);
    sqlite3_free(z);
    if( write(wfd, &i, sizeof(i))!=sizeof(i) ) _exit(6);
  }
}

/* The SQLite error log of the checking process (the last 4 KiB): replay
** skips, collector and read errors show up here. */
static char kbLog[4096];
static void kb_log_cb(void *pArg, int rc, const char *zMsg){
  size_t n = strlen(kbLog), m = strlen(zMsg) + 24;
  (void)pArg;
  if( n+m>=sizeof(kbLog) ){ kbLog[0] = 0; n = 0; }
  snprintf(kbLog+n, sizeof(kbLog)-n, "[%d] %s\n", rc, zMsg);
}

/* What the store holds, for a failed kill check: the catalog entry of b,
** its kv_stats row, the data file's tables and their row counts. */
static char *kb_kill_diag(sqlite3 *db, const char *zDir){
  char *zQ = sqlite3_mprintf("SELECT kv_table_meta(kv_begin(%Q), 'b')", zDir);
  char *zMeta = th_text(db, zQ);
  char *zStat = th_text(db, "SELECT printf('overlay %d pending %d errors %d "
      "(%s)', overlay_entries, pending_confirmations, collector_errors, "
      "last_error) FROM kv_stats WHERE tbl='b'");
  char *zPath = sqlite3_mprintf("%s/kv_btree.db", zDir);
  char *zFile = 0, *z;
  sqlite3 *pData = 0;
  if( sqlite3_open_v2(zPath, &pData, SQLITE_OPEN_READONLY, 0)==SQLITE_OK ){
    sqlite3_stmt *pStmt = 0;
    if( sqlite3_prepare_v2(pData, "SELECT name FROM sqlite_schema WHERE "
                           "type='table'", -1, &pStmt, 0)==SQLITE_OK ){
      while( sqlite3_step(pStmt)==SQLITE_ROW ){
        const char *zT = (const char*)sqlite3_column_text(pStmt, 0);
        char *zCount = sqlite3_mprintf("SELECT count(*) FROM \"%w\"", zT);
        sqlite3_stmt *pCnt = 0;
        long long n = -1;
        if( sqlite3_prepare_v2(pData, zCount, -1, &pCnt, 0)==SQLITE_OK
         && sqlite3_step(pCnt)==SQLITE_ROW ){
          n = sqlite3_column_int64(pCnt, 0);
        }
        sqlite3_finalize(pCnt);
        sqlite3_free(zCount);
        zFile = sqlite3_mprintf("%z %s:%lld", zFile, zT, n);
      }
    }
    sqlite3_finalize(pStmt);
  }
  sqlite3_close(pData);
  z = sqlite3_mprintf("meta %s; stats %s; data file:%s; log:\n%s", zMeta,
                      zStat, zFile ? zFile : " (unreadable)", kbLog);
  sqlite3_free(zQ);
  sqlite3_free(zMeta);
  sqlite3_free(zStat);
  sqlite3_free(zPath);
  sqlite3_free(zFile);
  return z;
}

/* After a kill: every acknowledged transaction is there, none partial.
** b and l hold exactly keys max(1,iMax-6)..iMax with their values.  m is
** kv_memory (volatile: a clean close forgets it), so it is only checked
** for the last transaction if the killed life (from iFirst) wrote it, and
** for agreeing with b where it has rows.  bSegRetire: the WAL rotates so
** often that the segment holding the last transaction may have retired
** before the kill (its records were all confirmed once the next commit
** opened a new segment), and a kv_memory row lives only as long as its
** WAL segment (docs/SQL.md, "Durability"), so m may lack that row.
** Returns the last transaction found. */
static int kb_kill_check(const char *zDir, int nAck, int iFirst,
                         int bSegRetire){
  sqlite3 *db = th_open(":memory:");
  int nB, nL, iMax, nWin;
  kb_exec(db, "CREATE VIRTUAL TABLE m USING kv_memory(dir='%q', "
              "persistence=1)", zDir);
  kb_mk(db, "b", "kv_btree", zDir);
  kb_mk(db, "l", "kv_log", zDir);
  iMax = (int)th_int(db, "SELECT coalesce(max(key),0) FROM b");
  if( iMax<nAck || iMax>nAck+1 ){
    ck_abort_msg("after ack %d the last transaction in b is %d: %s", nAck,
                 iMax, kb_kill_diag(db, zDir));
  }
  nWin = iMax<7 ? iMax : 7;
  nB = (int)th_intf(db, "SELECT count(*) FROM b WHERE key>%d AND "
      "substr(value,1,length('b'||key))='b'||key", iMax-7);
  nL = (int)th_intf(db, "SELECT count(*) FROM l WHERE key>%d AND "
      "substr(value,1,length('l'||key))='l'||key", iMax-7);
  if( nB!=nWin || nL!=nWin || th_int(db, "SELECT count(*) FROM b")!=nWin
   || th_int(db, "SELECT count(*) FROM l")!=nWin ){
    char *zB = th_text(db, "SELECT group_concat(key) FROM b");
    char *zL = th_text(db, "SELECT group_concat(key) FROM l");
    ck_abort_msg("after ack %d (max %d): b %d (%s), l %d (%s): %s", nAck,
                 iMax, nB, zB, nL, zL, kb_kill_diag(db, zDir));
  }
  if( iMax>=iFirst && !bSegRetire ){   /* written in the life just killed */
    ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM m WHERE key=%d AND "
                                "value='m%d'", iMax, iMax), 1);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM m LEFT JOIN b "
      "USING(key) WHERE b.key IS NULL OR m.value<>'m'||key"), 0);
  kb_settle(db);
  ck_assert_int_eq(kb_stat(db, "wal_unconfirmed", 0), 0);
  sqlite3_close(db);
  return iMax;
}

START_TEST(test_kvbtree_sigkill_all_backends_loses_no_ack)
{
  int nRound = KB_KILL_ROUNDS, r;
  const char *zIters = getenv("DEPOT_TORTURE_ITERS");
  /* before the first use of SQLite in this process (else ignored) */
  sqlite3_config(SQLITE_CONFIG_LOG, kb_log_cb, (void*)0);
  if( zIters && atoi(zIters)>0 ) nRound *= atoi(zIters);
  for(r=0; r<nRound; r++){
    char *zDir = th_tmpdir("kvbtree_kill");
    int fds[2], st, nAck = 0, v, iRun, iLast;
    pid_t pid;
    srand(1000+r);
    kbKillAccel = r%2;
    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if( pid==0 ){
      close(fds[0]);
      kb_kill_child(zDir, fds[1], 1);
      _exit(0);
    }
    close(fds[1]);
    /* two lives per store: kill, reopen and continue, kill again */
    for(iRun=0; iRun<2; iRun++){
      /* after the life's first acknowledged commit (a slow build, such as
      ** ThreadSanitizer's, would otherwise often kill before it) */
      if( read(fds[0], &v, sizeof(v))==sizeof(v) ) nAck = v;
      usleep(rand()%400000);
      kill(pid, SIGKILL);
      while( read(fds[0], &v, sizeof(v))==sizeof(v) ) nAck = v;
      close(fds[0]);
      waitpid(pid, &st, 0);
      ck_assert(WIFSIGNALED(st));
      if( iRun==1 ) break;
      iLast = kb_kill_check(zDir, nAck, 1, 0);
      nAck = iLast;
      ck_assert_int_eq(pipe(fds), 0);
      pid = fork();
      ck_assert_int_ge(pid, 0);
      if( pid==0 ){
        /* continue above the keys already there */
        close(fds[0]);
        kb_kill_child(zDir, fds[1], iLast+1);
        _exit(0);
      }
      close(fds[1]);
    }
    kb_kill_check(zDir, nAck, iLast+1, 0);
    sqlite3_free(zDir);
  }
}
END_TEST

/* Files in <zDir>/wal whose name ends in zSuffix. */
static int kb_wal_files(const char *zDir, const char *zSuffix){
  char *zWal = sqlite3_mprintf("%s/wal", zDir);
  int n = th_count_suffix(zWal, zSuffix);
  sqlite3_free(zWal);
  return n;
}

/* The kill rounds above with 16 KiB root-WAL segments, so that the WAL
** rotates and retires many times in every life: every acknowledged
** commit survives, the live segments come down to at most 2 once the
** collectors have confirmed everything, and retired segments are deleted
** (_i 0) or kept as *.log.bak only when the store is so configured (_i 1). */
START_TEST(test_kv_sigkill_with_small_wal_segments_retires_and_loses_no_ack)
{
  char *zDir = th_tmpdir(_i ? "kv_killseg_bak" : "kv_killseg");
  int r, fds[2], st, nAck = 0, v, iLast = 0;
  pid_t pid;
  sqlite3 *db;
  kv_engine_test_wal_config(16*1024, _i);
  srand(2000+_i);
  for(r=0; r<3; r++){
    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if( pid==0 ){
      close(fds[0]);
      kb_kill_child(zDir, fds[1], iLast+1);
      _exit(0);
    }
    close(fds[1]);
    /* at least 60 commits a life, so the WAL rotates several times
    ** however slow the build, then a random moment */
    while( nAck<iLast+60 && read(fds[0], &v, sizeof(v))==sizeof(v) ){
      nAck = v;
    }
    usleep(rand()%300000);
    kill(pid, SIGKILL);
    while( read(fds[0], &v, sizeof(v))==sizeof(v) ) nAck = v;
    close(fds[0]);
    waitpid(pid, &st, 0);
    ck_assert(WIFSIGNALED(st));
    ck_assert_int_gt(nAck, iLast);
    iLast = nAck = kb_kill_check(zDir, nAck, iLast+1, 1);
    db = th_open(":memory:");
    kb_mk(db, "b", "kv_btree", zDir);
    kb_settle(db);
    ck_assert_int_le(kb_stat(db, "wal_segments", 0), 2);
    ck_assert_int_le(kb_wal_files(zDir, ".log"), 2);
    sqlite3_close(db);
    ck_assert_int_eq(kb_wal_files(zDir, ".log"), 1);
    if( _i==0 ) ck_assert_int_eq(kb_wal_files(zDir, ".bak"), 0);
  }
  /* 16 KiB segments: hundreds of commits rotated many times */
  if( _i==1 ) ck_assert_int_gt(kb_wal_files(zDir, ".bak"), 3);
  kv_engine_test_wal_config(0, 0);
  sqlite3_free(zDir);
}
END_TEST

/* --------------------------------------------- injected log faults --- */

/* kv_log through the injectable I/O layer: a failed log sync confirms
** nothing and is counted, and the next COMMIT to that table fails at its
** prepare (the log refuses writes; nothing reaches the WAL); a log append
** failing after the WAL flush stops the store, so readers get that error
** instead of a state without the commit; the next open (real I/O) has
** every row whose WAL record was flushed. */
START_TEST(test_kvlog_injected_write_and_sync_faults_repair_on_reopen)
{
  char *zDir = th_tmpdir("kvlog_fault");
  WalFault *pF = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  char *zErr = 0;
  int i, nSync;
  ck_assert_ptr_nonnull(pF);
  kv_engine_test_io(wal_fault_io(pF));
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  th_exec(db, "INSERT INTO l VALUES(1, 'one')");
  kb_settle(db);
  /* the 2nd fsync from now is the collector's log sync (the 1st is the
  ** commit's WAL flush) */
  nSync = wal_fault_count(pF, WAL_FAULT_FSYNC);
  wal_fault_arm(pF, WAL_FAULT_FSYNC, 2, EIO, 0);
  th_exec(db, "INSERT INTO l VALUES(2, 'two')");
  for(i=0; i<1000 && kb_stat(db, "collector_errors", "l")==0; i++){
    usleep(10000);
  }
  ck_assert_int_ge(wal_fault_count(pF, WAL_FAULT_FSYNC), nSync+2);
  ck_assert_int_eq(kb_stat(db, "collector_errors", "l"), 1);
  ck_assert_int_ge(kb_stat(db, "wal_unconfirmed", 0), 1);
  /* the log store now refuses reads and writes of the table until the
  ** store is reopened, and the reopen repairs it */
  ck_assert_int_ne(th_try(db, "INSERT INTO l VALUES(3, 'three')", &zErr),
                   SQLITE_OK);
  ck_assert_ptr_nonnull(strstr(zErr, "reopen the store"));
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_ne(th_try(db, "SELECT count(*) FROM l", 0), SQLITE_OK);
  sqlite3_close(db);
  kv_engine_test_io(0);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 2);
  kb_settle(db);
  sqlite3_close(db);
  /* a failed append (the 6th write from now: the 1st to 4th extend the
  ** WAL segment by 4 MiB of zeros, 1 MiB a write, which a reopened log
  ** always does before its first append, the 5th is the WAL append) */
  kv_engine_test_io(wal_fault_io(pF));
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  wal_fault_arm(pF, WAL_FAULT_WRITE, 6, ENOSPC, 0);
  th_try(db, "INSERT INTO l VALUES(4, 'four')", &zErr);
  sqlite3_free(zErr);
  ck_assert_int_ne(th_try(db, "SELECT count(*) FROM l WHERE key=4", 0),
                   SQLITE_OK);
  sqlite3_close(db);
  kv_engine_test_io(0);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 3);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l WHERE key=4"), 1);
  kb_settle(db);
  ck_assert_int_eq(kb_stat(db, "wal_unconfirmed", 0), 0);
  sqlite3_close(db);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* The path of the one "<id>.synced" marker in zDir/kv_log (sqlite3_malloc'd). */
static char *kb_marker(const char *zDir){
  char *zLog = sqlite3_mprintf("%s/kv_log", zDir), *zRes = 0;
  DIR *d = opendir(zLog);
  struct dirent *e;
  while( d && (e = readdir(d))!=0 ){
    size_t n = strlen(e->d_name);
    if( n>7 && strcmp(e->d_name+n-7, ".synced")==0 && zRes==0 ){
      zRes = sqlite3_mprintf("%s/%s", zLog, e->d_name);
    }
  }
  if( d ) closedir(d);
  sqlite3_free(zLog);
  ck_assert_ptr_nonnull(zRes);
  return zRes;
}

/* A WalIo over POSIX whose writes to kv_log merged files (".kmrg", the
** output of a compaction) fail with ENOSPC while kbMrgFull is set: a disk
** with no room for a compaction, while log appends still fit.  With
** kbFullSuffix set to ".klog", writes to the log files fail instead. */
static int kbMrgFull = 0;
static int kbMrgFd[256];                  /* 1: fd is a file that fails */
static const char *kbFullSuffix = ".kmrg";

static int kbMrgOpen(void *pCtx, const char *zPath, int flags, int mode){
  const WalIo *pBase = wal_io_posix();
  size_t n = strlen(zPath), nSuffix = strlen(kbFullSuffix);
  int fd = pBase->xOpen(pBase->pCtx, zPath, flags, mode);
  (void)pCtx;
  if( fd>=0 && fd<256 ){
    __atomic_store_n(&kbMrgFd[fd],
                     n>nSuffix && strcmp(zPath+n-nSuffix, kbFullSuffix)==0,
                     __ATOMIC_SEQ_CST);
  }
  return fd;
}
static ssize_t kbMrgPwrite(void *pCtx, int fd, const void *p, size_t n,
                           off_t off){
  const WalIo *pBase = wal_io_posix();
  (void)pCtx;
  if( fd>=0 && fd<256 && __atomic_load_n(&kbMrgFd[fd], __ATOMIC_SEQ_CST)
   && __atomic_load_n(&kbMrgFull, __ATOMIC_SEQ_CST) ){
    errno = ENOSPC;
    return -1;
  }
  return pBase->xPwrite(pBase->pCtx, fd, p, n, off);
}
static ssize_t kbMrgPread(void *pCtx, int fd, void *p, size_t n, off_t off){
  (void)pCtx;
  return wal_io_posix()->xPread(wal_io_posix()->pCtx, fd, p, n, off);
}
static int kbMrgFsync(void *pCtx, int fd){
  (void)pCtx;
  return wal_io_posix()->xFsync(wal_io_posix()->pCtx, fd);
}
static int kbMrgFtruncate(void *pCtx, int fd, off_t n){
  (void)pCtx;
  return wal_io_posix()->xFtruncate(wal_io_posix()->pCtx, fd, n);
}
static int kbMrgFstatSize(void *pCtx, int fd, off_t *pSize){
  (void)pCtx;
  return wal_io_posix()->xFstatSize(wal_io_posix()->pCtx, fd, pSize);
}
static int kbMrgClose(void *pCtx, int fd){
  (void)pCtx;
  if( fd>=0 && fd<256 ) __atomic_store_n(&kbMrgFd[fd], 0, __ATOMIC_SEQ_CST);
  return wal_io_posix()->xClose(wal_io_posix()->pCtx, fd);
}
static int kbMrgUnlink(void *pCtx, const char *zPath){
  (void)pCtx;
  return wal_io_posix()->xUnlink(wal_io_posix()->pCtx, zPath);
}
static int kbMrgRename(void *pCtx, const char *zFrom, const char *zTo){
  (void)pCtx;
  return wal_io_posix()->xRename(wal_io_posix()->pCtx, zFrom, zTo);
}
static int kbMrgMkdir(void *pCtx, const char *zPath, int mode){
  (void)pCtx;
  return wal_io_posix()->xMkdir(wal_io_posix()->pCtx, zPath, mode);
}
static int kbMrgSyncDir(void *pCtx, const char *zDir){
  (void)pCtx;
  return wal_io_posix()->xSyncDir(wal_io_posix()->pCtx, zDir);
}
static const WalIo kbMrgIo = {
  0, kbMrgOpen, kbMrgPwrite, kbMrgPread, kbMrgFsync, kbMrgFtruncate,
  kbMrgFstatSize, kbMrgClose, kbMrgUnlink, kbMrgRename, kbMrgMkdir,
  kbMrgSyncDir
};

/* Found on a filled tmpfs: a kv_log append that failed while a commit was
** published stopped the store with only "(database or disk is full)", and
** an open of the store while the disk was still full failed with "kv:
** cannot replay WAL record N of store S (rc=13)": neither said which file
** could not be written, or why.  Both now name the log file and the
** cause; once there is room the open applies the commit. */
START_TEST(test_kvlog_failed_append_is_named_when_store_stops_and_at_replay)
{
  char *zDir = th_tmpdir("kvlog_append_full");
  char *zSql, *zErr = 0;
  sqlite3 *db;
  int rc;
  kv_engine_test_io(&kbMrgIo);
  kbFullSuffix = ".klog";
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  th_exec(db, "INSERT INTO l VALUES(1, 'one')");
  __atomic_store_n(&kbMrgFull, 1, __ATOMIC_SEQ_CST);
  th_try(db, "INSERT INTO l VALUES(2, 'two')", 0);   /* acknowledged */
  rc = th_try(db, "SELECT count(*) FROM l", &zErr);
  ck_assert_int_eq(rc, SQLITE_FULL);
  ck_assert_msg(zErr && strstr(zErr, "is stopped") && strstr(zErr, ".klog")
                && strstr(zErr, "No space left on device"), "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  sqlite3_close(db);
  /* still full: the open cannot replay the commit, and says why */
  db = th_open(":memory:");
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE l USING kv_log(dir='%q')", zDir);
  rc = th_try(db, zSql, &zErr);
  ck_assert_int_eq(rc, SQLITE_FULL);
  ck_assert_msg(zErr && strstr(zErr, "replay") && strstr(zErr, "table l")
                && strstr(zErr, ".klog")
                && strstr(zErr, "No space left on device"), "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  sqlite3_close(db);
  /* room again: the commit is applied */
  __atomic_store_n(&kbMrgFull, 0, __ATOMIC_SEQ_CST);
  db = th_open(":memory:");
  th_exec(db, zSql);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 2);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l WHERE key=2"), 1);
  sqlite3_close(db);
  kv_engine_test_io(0);
  sqlite3_free(zSql);
  sqlite3_free(zDir);
}
END_TEST

/* Flip the first byte of every copy of zNeedle in file zPath (a missing
** file counts 0); returns the number of copies changed. */
static int kb_flip_all(const char *zPath, const char *zNeedle){
  int fd = open(zPath, O_RDWR), n = 0;
  size_t nNeedle = strlen(zNeedle);
  struct stat st;
  char *a;
  off_t i;
  if( fd<0 ) return 0;
  ck_assert_int_eq(fstat(fd, &st), 0);
  a = malloc(st.st_size ? (size_t)st.st_size : 1);
  ck_assert_ptr_nonnull(a);
  ck_assert_int_eq(pread(fd, a, st.st_size, 0), st.st_size);
  for(i=0; i+(off_t)nNeedle<=st.st_size; i++){
    if( memcmp(a+i, zNeedle, nNeedle)==0 ){
      a[i] ^= 0x20;
      ck_assert_int_eq(pwrite(fd, a+i, 1, i), 1);
      n++;
    }
  }
  free(a);
  close(fd);
  return n;
}

/* Found by flipping bytes of a kv_btree.db at random offsets: a changed
** byte inside a stored value is no damage SQLite can see (its pages hold
** no checksums), so the value came back changed, with no error.  Values
** now carry a CRC-32C: the point read and the scan fail with
** SQLITE_CORRUPT naming the table and the file, and other rows read. */
START_TEST(test_kvbtree_flipped_value_byte_is_corrupt_not_a_wrong_value)
{
  char *zDir = th_tmpdir("kvbtree_flip");
  char *zFile = sqlite3_mprintf("%s/kv_btree.db", zDir);
  char *zWal = sqlite3_mprintf("%s/kv_btree.db-wal", zDir);
  char *zErr = 0, *zVal;
  sqlite3 *db = th_open(":memory:");
  int n;
  kb_mk(db, "t", "kv_btree", zDir);
  th_exec(db, "INSERT INTO t VALUES(1, 'plain-value-one'), "
              "(2, 'needle-value-0123456789'), (3, 'plain-value-three')");
  kb_settle(db);
  sqlite3_close(db);
  n = kb_flip_all(zFile, "needle-value-0123456789")
    + kb_flip_all(zWal, "needle-value-0123456789");
  ck_assert_int_ge(n, 1);
  db = th_open(":memory:");
  kb_mk(db, "t", "kv_btree", zDir);
  zVal = th_text(db, "SELECT value FROM t WHERE key=1");
  ck_assert_str_eq(zVal, "plain-value-one");
  sqlite3_free(zVal);
  ck_assert_int_eq(th_try(db, "SELECT value FROM t WHERE key=2", &zErr),
                   SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "table t") && strstr(zErr, zFile)
                && strstr(zErr, "checksum"), "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  /* the next point reads (their snapshot handles are reused) read the
  ** good rows whole and still find the damaged one damaged */
  zVal = th_text(db, "SELECT value FROM t WHERE key=3");
  ck_assert_str_eq(zVal, "plain-value-three");
  sqlite3_free(zVal);
  ck_assert_int_eq(th_try(db, "SELECT value FROM t WHERE key=2", &zErr),
                   SQLITE_CORRUPT);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(th_try(db, "SELECT group_concat(value) FROM t", &zErr),
                   SQLITE_CORRUPT);
  ck_assert_msg(zErr && strstr(zErr, "checksum"), "%s", zErr);
  sqlite3_free(zErr); zErr = 0;
  /* a new value for the key replaces the damaged one */
  th_exec(db, "INSERT OR REPLACE INTO t VALUES(2, 'fresh')");
  kb_settle(db);
  zVal = th_text(db, "SELECT group_concat(value, ',') FROM t");
  ck_assert_str_eq(zVal, "plain-value-one,fresh,plain-value-three");
  sqlite3_free(zVal);
  sqlite3_close(db);
  sqlite3_free(zWal);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* Found on a filled tmpfs: after a SIGKILL, the open's replay of the
** store's table creates rewrote the catalog file although it already held
** them, so on a full disk the store could not be opened at all ("kv: write
** of catalog file .../tables_meta.tmp failed: No space left on device"),
** not even to read.  A catalog that the replay leaves unchanged is now
** synced again instead of rewritten, and the store opens. */
START_TEST(test_kv_reopen_after_crash_on_full_disk_needs_no_catalog_rewrite)
{
  char *zDir = th_tmpdir("kv_catalog_full");
  sqlite3 *db;
  pid_t pid;
  int st;
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    sqlite3 *c = th_open(":memory:");
    kb_exec(c, "CREATE VIRTUAL TABLE m USING kv_memory(dir='%q', "
               "persistence=1)", zDir);
    kb_mk(c, "b", "kv_btree", zDir);
    kb_fill(c, "m", 1, 20, "x");
    kb_fill(c, "b", 1, 20, "x");
    raise(SIGKILL);
    _exit(3);
  }
  waitpid(pid, &st, 0);
  ck_assert(WIFSIGNALED(st));
  kv_engine_test_io(&kbMrgIo);
  kbFullSuffix = ".tmp";                /* tables_meta.tmp cannot be written */
  __atomic_store_n(&kbMrgFull, 1, __ATOMIC_SEQ_CST);
  db = th_open(":memory:");
  kb_exec(db, "CREATE VIRTUAL TABLE m USING kv_memory(dir='%q', "
              "persistence=1)", zDir);
  kb_mk(db, "b", "kv_btree", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM m"), 20);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM b"), 20);
  sqlite3_close(db);
  __atomic_store_n(&kbMrgFull, 0, __ATOMIC_SEQ_CST);
  kv_engine_test_io(0);
  sqlite3_free(zDir);
}
END_TEST

/* Overwrite keys 1..20 of table l (500-byte values, tag iRound) in one
** transaction. */
static void kb_overwrite20(sqlite3 *db, int iRound){
  kb_exec(db, "BEGIN; WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 "
              "FROM c WHERE i<20) INSERT OR REPLACE INTO l SELECT i, "
              "'r%d-'||i||'-'||hex(zeroblob(250)) FROM c; COMMIT", iRound);
}

/* Found on a full disk: a kv_log table's background compaction that failed
** (no room for its merged files) was only logged; kv_stats showed no error,
** so a store that stopped reclaiming space looked healthy.  Its failures
** now count in collector_errors and show in last_error; the table keeps
** every row and is read and written as before, and once there is room the
** compaction runs and the dead bytes go. */
START_TEST(test_kvlog_failed_background_compaction_shows_in_kv_stats)
{
  char *zDir = th_tmpdir("kvlog_compact_full");
  sqlite3 *db;
  char *zLast;
  int i, r = 0;
  kv_log_test_file_size(8*1024);
  kv_engine_test_io(&kbMrgIo);
  __atomic_store_n(&kbMrgFull, 1, __ATOMIC_SEQ_CST);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  for(r=1; r<=2000 && kb_stat(db, "collector_errors", "l")==0; r++){
    kb_overwrite20(db, r);
    if( r>20 ) usleep(5000);
  }
  ck_assert_int_ge(kb_stat(db, "collector_errors", "l"), 1);
  zLast = th_text(db, "SELECT last_error FROM kv_stats WHERE tbl='l'");
  ck_assert_ptr_nonnull(zLast);
  ck_assert_msg(strstr(zLast, "compaction")!=0
                && strstr(zLast, ".kmrg")!=0
                && strstr(zLast, "No space left on device")!=0, "%s", zLast);
  sqlite3_free(zLast);
  /* nothing lost, the table still takes writes */
  kb_overwrite20(db, ++r);
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM l WHERE value LIKE "
                               "'r%d-%%'", r), 20);
  /* room again: a later compaction reclaims the dead bytes */
  __atomic_store_n(&kbMrgFull, 0, __ATOMIC_SEQ_CST);
  for(i=0; i<1000 && kb_stat(db, "stored_bytes", "l")>=64*1024; i++){
    kb_overwrite20(db, ++r);
    usleep(5000);
  }
  ck_assert_int_lt(kb_stat(db, "stored_bytes", "l"), 64*1024);
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM l WHERE value LIKE "
                               "'r%d-%%'", r), 20);
  sqlite3_close(db);
  kv_engine_test_io(0);
  kv_log_test_file_size(0);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_intf(db, "SELECT count(*) FROM l WHERE value LIKE "
                               "'r%d-%%'", r), 20);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Found by the I/O-error sweep: after a kv_log table failed to publish a
** commit (acknowledged: it is in the WAL), later statements read the table
** without that commit, so a DELETE of one of its keys deleted nothing and
** committed - and the reopen brought the key back (a bank transfer created
** money).  The store now stops (every statement on it fails) until the
** reopen, which applies the commit from the WAL. */
START_TEST(test_kvlog_failed_publication_refuses_the_table_until_reopen)
{
  char *zDir = th_tmpdir("kvlog_lost_pub");
  WalFault *pF = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  char *zErr = 0;
  ck_assert_ptr_nonnull(pF);
  kv_engine_test_io(wal_fault_io(pF));
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  th_exec(db, "INSERT INTO l VALUES(1, 'one')");
  kb_settle(db);
  /* the 2nd write from now is the log append (the 1st: the WAL record) */
  wal_fault_arm(pF, WAL_FAULT_WRITE, 2, EIO, 0);
  th_exec(db, "INSERT INTO l VALUES(2, 'two')");   /* acknowledged */
  ck_assert_int_ne(th_try(db, "DELETE FROM l WHERE key=2", &zErr), SQLITE_OK);
  ck_assert_ptr_nonnull(zErr);
  ck_assert_msg(strstr(zErr, "is stopped: publishing commit")
                && strstr(zErr, "open it again"), "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_close(db);
  kv_engine_test_io(0);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 2);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l WHERE key=2"
                              " AND value='two'"), 1);
  sqlite3_close(db);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* Found by the crash-torture runner: a kv_log (or kv_btree) table whose
** files could not be made was still committed - the catalog record was
** flushed before the backend opened its files, SQLite ignored the failed
** publication, the table then answered "no such table", and the next open
** of the store failed on it.  The create must fail with the I/O error
** and leave no table. */
START_TEST(test_kv_create_of_table_whose_files_cannot_be_made_fails_cleanly)
{
  char *zDir = th_tmpdir("kv_create_fail");
  char *zBlock = sqlite3_mprintf("%s/kv_log", zDir);
  sqlite3 *db = th_open(":memory:");
  char *zErr = 0, *zSql;
  int rc, fd;
  kb_mk(db, "m", "kv_memory", zDir);
  fd = open(zBlock, O_WRONLY|O_CREAT, 0644);        /* kv_log/ is a file */
  ck_assert_int_ge(fd, 0);
  close(fd);
  zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE l USING kv_log(dir='%q')", zDir);
  rc = th_try(db, zSql, &zErr);
  sqlite3_free(zSql);
  ck_assert_msg(rc!=SQLITE_OK, "the create succeeded");
  ck_assert_ptr_nonnull(zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE name='l'"), 0);
  sqlite3_close(db);
  ck_assert_int_eq(unlink(zBlock), 0);
  db = th_open(":memory:");                         /* the store reopens */
  kb_mk(db, "m", "kv_memory", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_tables WHERE name='l'"), 0);
  kb_mk(db, "l", "kv_log", zDir);
  th_exec(db, "INSERT INTO l VALUES(1, 'one')");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 1);
  sqlite3_close(db);
  sqlite3_free(zBlock);
  sqlite3_free(zDir);
}
END_TEST

/* Found by the crash-torture runner: a short write of a kv_log table's
** "synced" marker left a torn marker, and every later open of the store
** failed with "... .synced is corrupt at offset 0".  The marker is now
** emptied after a failed write, and the store reopens with every row. */
START_TEST(test_kvlog_short_write_of_synced_marker_keeps_store_openable)
{
  char *zDir = th_tmpdir("kvlog_marker_short");
  WalFault *pF = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  char *zMark;
  struct stat st;
  int nWrite;
  ck_assert_ptr_nonnull(pF);
  kv_engine_test_io(wal_fault_io(pF));
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  th_exec(db, "INSERT INTO l VALUES(1, 'one')");
  kb_settle(db);
  nWrite = wal_fault_count(pF, WAL_FAULT_WRITE);
  th_exec(db, "INSERT INTO l VALUES(2, 'two')");
  kb_settle(db);
  /* the marker write is the last write of a settled commit */
  nWrite = wal_fault_count(pF, WAL_FAULT_WRITE) - nWrite;
  wal_fault_arm(pF, WAL_FAULT_SHORT, nWrite, 0, 0);
  th_exec(db, "INSERT INTO l VALUES(3, 'three')");
  kb_settle(db);
  zMark = kb_marker(zDir);
  ck_assert_int_eq(stat(zMark, &st), 0);
  ck_assert_int_eq((int)st.st_size, 0);              /* emptied, not torn */
  sqlite3_close(db);
  kv_engine_test_io(0);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 3);
  sqlite3_close(db);
  wal_fault_free(pF);
  sqlite3_free(zMark);
  sqlite3_free(zDir);
}
END_TEST

/* Found by the I/O-error sweep: a failed read of the "synced" marker at
** open was reported as SQLITE_CORRUPT ("... is corrupt at offset 0"); it
** is an I/O error, and the store opens once the read succeeds. */
START_TEST(test_kvlog_failed_read_of_synced_marker_is_an_io_error)
{
  char *zDir = th_tmpdir("kvlog_marker_read");
  WalFault *pF = wal_fault_new(wal_io_posix());
  sqlite3 *db;
  int n, nRead, nHit = 0;
  ck_assert_ptr_nonnull(pF);
  kv_engine_test_io(wal_fault_io(pF));
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  th_exec(db, "INSERT INTO l VALUES(1, 'one')");
  sqlite3_close(db);
  nRead = wal_fault_count(pF, WAL_FAULT_READ);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  sqlite3_close(db);
  nRead = wal_fault_count(pF, WAL_FAULT_READ) - nRead;
  ck_assert_int_gt(nRead, 0);
  for(n=1; n<=nRead; n++){                  /* fail each read of the open */
    char *zErr = 0;
    char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE l USING kv_log(dir='%q')",
                                 zDir);
    int rc;
    db = th_open(":memory:");
    wal_fault_arm(pF, WAL_FAULT_READ, n, EIO, 0);
    rc = th_try(db, zSql, &zErr);
    sqlite3_free(zSql);
    wal_fault_arm(pF, WAL_FAULT_READ, 0, 0, 0);
    if( rc!=SQLITE_OK && zErr && strstr(zErr, ".synced") ){
      nHit++;
      ck_assert_msg((rc&0xff)==SQLITE_IOERR, "rc=%d: %s", rc, zErr);
    }
    sqlite3_free(zErr);
    sqlite3_close(db);
  }
  ck_assert_int_eq(nHit, 1);
  kv_engine_test_io(0);
  db = th_open(":memory:");
  kb_mk(db, "l", "kv_log", zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM l"), 1);
  sqlite3_close(db);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* -------------------------------------------------------- kv_stats --- */

/* kv_stats is read-only: writes fail and the counters stay. */
START_TEST(test_kv_stats_is_read_only)
{
  char *zDir = th_tmpdir("kvstats_ro");
  sqlite3 *db = th_open(":memory:");
  static const char *azSql[] = {
    "INSERT INTO kv_stats(tbl) VALUES('x')",
    "UPDATE kv_stats SET row_count=5",
    "DELETE FROM kv_stats",
  };
  char *zErr = 0;
  int i;
  kb_mk(db, "b", "kv_btree", zDir);
  kb_fill(db, "b", 1, 3, "a");
  for(i=0; i<3; i++){
    ck_assert_int_eq(th_try(db, azSql[i], &zErr), SQLITE_ERROR);
    ck_assert_msg(zErr && strstr(zErr, "table kv_stats may not be modified"),
                  "%s: %s", azSql[i], zErr);
    sqlite3_free(zErr); zErr = 0;
  }
  ck_assert_int_eq(kb_stat(db, "row_count", "b"), 3);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats WHERE "
                              "store IS NOT NULL"), 2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kv_stats_rows_per_store_and_table)
{
  char *zDir = th_tmpdir("kvstats");
  sqlite3 *db = th_open(":memory:");
  kb_mk(db, "b", "kv_btree", zDir);
  kb_mk(db, "l", "kv_log", zDir);
  kb_fill(db, "b", 1, 10, "a");
  kb_fill(db, "l", 1, 20, "a");
  kb_settle(db);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats WHERE "
                              "type='store' AND wal_segments>=1"), 1);
  ck_assert_int_eq(kb_stat(db, "row_count", "b"), 10);
  ck_assert_int_eq(kb_stat(db, "row_count", "l"), 20);
  ck_assert_int_gt(kb_stat(db, "stored_bytes", "l"), 20*4);
  ck_assert_int_gt(kb_stat(db, "stored_bytes", "b"), 10*4);
  ck_assert_int_eq(kb_stat(db, "collector_errors", "b"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_stats WHERE "
                              "tbl='b' AND wal_segments IS NULL"), 1);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvbtree");
  TCase *tc = tcase_create("kvbtree");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_kvbtree_data_survives_reopen);
  tcase_add_test(tc, test_kvlog_data_survives_reopen);
  tcase_add_test(tc, test_kvbtree_scan_merges_overlay_and_data_file);
  tcase_add_test(tc, test_kvbtree_long_scan_sees_one_snapshot);
  tcase_add_test(tc, test_kvbtree_reads_after_full_scan_see_overlay_and_next_commit);
  tcase_add_test(tc, test_kvlog_long_scan_sees_one_snapshot);
  tcase_add_test(tc, test_kvmemory_long_scan_sees_one_snapshot);
  tcase_add_test(tc, test_kvbtree_new_table_is_empty);
  tcase_add_test(tc, test_kvbtree_point_read_sees_table_written_after_absent_read);
  tcase_add_test(tc, test_kvbtree_data_file_read_error_fails_scan);
  tcase_add_test(tc, test_kvbtree_range_reads_warm_the_scan_cache);
  tcase_add_test(tc, test_kvbtree_range_cursor_is_reused_after_an_error);
  tcase_add_test(tc, test_kvbtree_drop_survives_reopen);
  tcase_add_test(tc, test_kvlog_drop_survives_reopen);
  tcase_add_test(tc, test_kvbtree_drop_then_sigkill_removes_table);
  tcase_add_test(tc, test_kvbtree_drop_while_collector_fails_returns);
  tcase_add_loop_test(tc, test_kvbtree_failed_collector_write_is_retried,
                      0, 2);
  tcase_add_test(tc, test_kvbtree_data_file_open_on_full_disk_is_sqlite_full);
  tcase_add_test(tc, test_kvbtree_unconfirmed_batches_replayed_at_open);
  tcase_add_test(tc, test_kvbtree_overlay_is_bounded);
  tcase_add_test(tc,
      test_kvbtree_batched_collection_keeps_newest_and_empties_overlay);
  tcase_add_test(tc, test_kvbtree_snapshot_reads_through_collection);
  tcase_add_test(tc, test_kvbtree_delete_returns_old_value_three_states);
  tcase_add_test(tc, test_kvbtree_delete_with_data_file_read_error_fails);
  tcase_add_test(tc, test_kvbtree_conflict_baseline_by_revision);
  tcase_add_test(tc,
      test_kvbtree_same_value_commit_conflicts_with_read_and_delete);
  tcase_add_test(tc, test_kvbtree_new_table_gives_versions);
  tcase_add_test(tc, test_kvbtree_refuses_non_persistent_and_bad_args);
  tcase_add_test(tc, test_kvbtree_in_memory_store_error_says_to_give_dir);
  tcase_add_test(tc, test_kvbtree_accelerated_repair_keeps_data);
  tcase_add_test(tc, test_kvbtree_corrupt_data_file_fails_open);
  tcase_add_test(tc, test_kvbtree_data_file_with_damaged_header_fails_open_as_corrupt);
  tcase_add_test(tc, test_kvbtree_truncated_data_file_fails_open);
  tcase_add_test(tc, test_kvbtree_data_file_cut_inside_a_page_fails_open);
  tcase_add_loop_test(tc, test_kvbtree_missing_or_empty_data_file_fails_open,
                      0, 2);
  tcase_add_test(tc, test_kvlog_corrupt_log_fails_open);
  tcase_add_test(tc, test_kvlog_truncated_synced_log_fails_open);
  tcase_add_loop_test(tc, test_kvlog_missing_log_directory_fails_open, 0, 2);
  tcase_add_test(tc, test_kvlog_drop_replayed_over_older_catalog_opens);
  tcase_add_test(tc, test_kv_new_tables_never_take_ids_of_files_in_the_store);
  tcase_add_test(tc, test_kvlog_damaged_record_fails_scan_and_read);
  tcase_add_test(tc, test_kvbtree_fsize_limited_child_repairs_on_reopen);
  tcase_add_test(tc, test_kvbtree_sigkill_all_backends_loses_no_ack);
  tcase_add_loop_test(tc,
      test_kv_sigkill_with_small_wal_segments_retires_and_loses_no_ack, 0, 2);
  tcase_add_test(tc, test_kv_stats_rows_per_store_and_table);
  tcase_add_test(tc, test_kv_stats_is_read_only);
  tcase_add_test(tc, test_kvlog_injected_write_and_sync_faults_repair_on_reopen);
  tcase_add_test(tc, test_kv_create_of_table_whose_files_cannot_be_made_fails_cleanly);
  tcase_add_test(tc, test_kvlog_short_write_of_synced_marker_keeps_store_openable);
  tcase_add_test(tc, test_kvlog_failed_read_of_synced_marker_is_an_io_error);
  tcase_add_test(tc, test_kvlog_failed_publication_refuses_the_table_until_reopen);
  tcase_add_test(tc, test_kvlog_failed_background_compaction_shows_in_kv_stats);
  tcase_add_test(tc,
      test_kvlog_failed_append_is_named_when_store_stops_and_at_replay);
  tcase_add_test(tc,
      test_kvbtree_flipped_value_byte_is_corrupt_not_a_wrong_value);
  tcase_add_test(tc,
      test_kv_reopen_after_crash_on_full_disk_needs_no_catalog_rewrite);
  suite_add_tcase(s, tc);
  return s;
}
