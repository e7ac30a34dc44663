/*
** check_kvsync.c -- the "kvsync" suite: the durability of SQL commits on
** KV tables (kv_synchronous(), KV_SYNC_NORMAL / KV_SYNC_FULL in
** ext/kv/kv.h, deferred flushes of the root WAL in wal/wal.h).
**
** A NORMAL commit survives the death of its process (SIGKILL right after
** COMMIT returns) on every table type; a FULL commit flushes the WAL
** before it returns and a NORMAL one does not (flushes counted through
** the fault-injecting WalIo given to the stores, kv_engine_test_io); a
** failed flush of deferred records is reported to the commit that asked
** for it, stops the store, and a reopen loses nothing that was
** acknowledged durable; the level comes from the URI and the function.
*/
#include "config.h"
#define SQLITE_CORE 1  /* engine headers pull in sqlite3ext.h */
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "ext/kv/kv.h"
#include "ext/kv/kv_test.h"
#include "wal/wal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* CREATE statements of the three table types on store zDir (kv_memory
** persistent, so that its commits are logged). */
static char *ks_create(int iType, const char *zDir){
  static const char *const az[] = {
    "CREATE VIRTUAL TABLE t USING kv_btree(dir='%q')",
    "CREATE VIRTUAL TABLE t USING kv_log(dir='%q')",
    "CREATE VIRTUAL TABLE t USING kv_memory(dir='%q', persistence=1)",
  };
  return sqlite3_mprintf(az[iType], zDir);
}

/* A connection on an in-memory main database with table t of type iType
** on store zDir (created or attached). */
static sqlite3 *ks_open(int iType, const char *zDir){
  sqlite3 *db = th_open(":memory:");
  char *z = ks_create(iType, zDir);
  th_exec(db, z);
  sqlite3_free(z);
  return db;
}

/* A NORMAL commit is written to the WAL before COMMIT returns: the
** writer killed with SIGKILL right after it loses nothing. */
/* Assert that zSql answers the text zWant. */
static void ks_text_eq(sqlite3 *db, const char *zSql, const char *zWant){
  char *z = th_text(db, zSql);
  ck_assert_ptr_nonnull(z);
  ck_assert_str_eq(z, zWant);
  sqlite3_free(z);
}

START_TEST(test_kvsync_normal_commit_survives_sigkill){
  char *zDir = th_tmpdir("kvsynckill");
  sqlite3 *db;
  int st = 0;
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    /* child: no ck_assert (a failure is its exit code) */
    sqlite3 *dbC = 0;
    char *z = ks_create(_i, zDir);
    sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
    if( sqlite3_open(":memory:", &dbC)!=SQLITE_OK
     || sqlite3_exec(dbC, z, 0, 0, 0)!=SQLITE_OK
     || sqlite3_exec(dbC, "SELECT kv_synchronous('normal');"
                          "INSERT INTO t VALUES('k1', 'v1');"
                          "BEGIN; INSERT INTO t VALUES('k2', 'v2');"
                          "INSERT INTO t VALUES('k3', 'v3'); COMMIT",
                     0, 0, 0)!=SQLITE_OK ){
      _exit(3);
    }
    kill(getpid(), SIGKILL);
    _exit(4);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL,
                "child status %d", st);
  db = ks_open(_i, zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 3);
  ks_text_eq(db, "SELECT value FROM t WHERE key='k3'", "v3");
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* Flushes of the store's WAL so far. */
static int ks_flushes(WalFault *pF){
  return wal_fault_count(pF, WAL_FAULT_FSYNC);
}

/* A FULL commit (the default) flushes the WAL before it returns; a NORMAL
** one does not, and the next FULL commit flushes once for both. */
START_TEST(test_kvsync_full_commit_flushes_normal_does_not){
  char *zDir = th_tmpdir("kvsyncfull");
  WalFault *pF = wal_fault_new(0);
  sqlite3 *db;
  int n;
  kv_engine_test_io(wal_fault_io(pF));
  db = ks_open(2, zDir);
  ks_text_eq(db, "SELECT kv_synchronous()", "full");
  th_exec(db, "INSERT INTO t VALUES('warm', 1)");   /* preallocation */
  n = ks_flushes(pF);
  th_exec(db, "INSERT INTO t VALUES('full', 1)");
  ck_assert_int_eq(ks_flushes(pF), n+1);
  ks_text_eq(db, "SELECT kv_synchronous('normal')", "normal");
  n = ks_flushes(pF);
  th_exec(db, "INSERT INTO t VALUES('normal-1', 1)");
  th_exec(db, "BEGIN; INSERT INTO t VALUES('normal-2', 1); COMMIT");
  ck_assert_int_eq(ks_flushes(pF), n);
  ks_text_eq(db, "SELECT kv_synchronous(2)", "full");
  th_exec(db, "INSERT INTO t VALUES('full-2', 1)");
  ck_assert_int_eq(ks_flushes(pF), n+1);
  sqlite3_close(db);
  kv_engine_test_io(0);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* A failed flush of deferred records fails the commit that asked for it
** with the I/O error, stops the store (the next commit fails too), and
** the reopened store has every commit acknowledged durable, not the one
** that failed. */
START_TEST(test_kvsync_failed_deferred_flush_is_reported){
  char *zDir = th_tmpdir("kvsyncfail");
  WalFault *pF = wal_fault_new(0);
  sqlite3 *db;
  char *zErr = 0;
  kv_engine_test_io(wal_fault_io(pF));
  db = ks_open(2, zDir);
  th_exec(db, "INSERT INTO t VALUES('durable', 1)");
  th_exec(db, "SELECT kv_synchronous('normal')");
  th_exec(db, "INSERT INTO t VALUES('deferred', 1)");
  th_exec(db, "SELECT kv_synchronous('full')");
  wal_fault_arm(pF, WAL_FAULT_FSYNC, 1, EIO, 0);
  ck_assert_int_eq(th_try(db, "INSERT INTO t VALUES('failed', 1)", &zErr),
                   SQLITE_IOERR);
  ck_assert_msg(zErr && strstr(zErr, "fdatasync"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_ne(th_try(db, "INSERT INTO t VALUES('later', 1)", &zErr),
                   SQLITE_OK);
  ck_assert_msg(zErr && strstr(zErr, "reopen"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  sqlite3_close(db);
  kv_engine_test_io(0);
  db = ks_open(2, zDir);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t WHERE key='durable'"),
                   1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t "
                              "WHERE key IN ('failed', 'later')"), 0);
  sqlite3_close(db);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* The URI parameter kv_synchronous sets a connection's first level; bad
** levels are refused. */
START_TEST(test_kvsync_level_from_uri_and_function){
  char *zDir = th_tmpdir("kvsyncuri");
  char *zUri = sqlite3_mprintf("file:%s/app.db?kv_synchronous=normal", zDir);
  sqlite3 *db = th_open(zUri);
  char *zErr = 0;
  ks_text_eq(db, "SELECT kv_synchronous()", "normal");
  ks_text_eq(db, "SELECT kv_synchronous('EXTRA')", "full");
  ck_assert_int_eq(th_try(db, "SELECT kv_synchronous('off')", &zErr),
                   SQLITE_ERROR);
  ck_assert_msg(zErr && strstr(zErr, "no 'off'"), "%s", zErr ? zErr : "");
  sqlite3_free(zErr);
  ks_text_eq(db, "SELECT kv_synchronous()", "full");
  sqlite3_close(db);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvsync");
  TCase *tc = tcase_create("durability");
  tcase_add_loop_test(tc, test_kvsync_normal_commit_survives_sigkill, 0, 3);
  tcase_add_test(tc, test_kvsync_full_commit_flushes_normal_does_not);
  tcase_add_test(tc, test_kvsync_failed_deferred_flush_is_reported);
  tcase_add_test(tc, test_kvsync_level_from_uri_and_function);
  suite_add_tcase(s, tc);
  return s;
}
