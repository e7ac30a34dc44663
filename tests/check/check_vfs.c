/*
** check_vfs.c -- the "vfs" suite, unit level: the outer store interface on
** its embedded backend, the page-blob codec (round trips, every truncation,
** every bit flip), the key layout and row codecs, the decoded-page cache
** and the transaction write buffer.
*/
#include "config.h"
#include "tests/check/harness.h"
#include "vfs/store/store.h"
#include "vfs/ltx.h"
#include "vfs/layout.h"
#include "vfs/pcache.h"
#include "vfs/txbuf.h"
#include "vfs/vfs_test.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static Store *open_store(const char *zTag, int nMaxValue){
  char *zDir = th_tmpdir(zTag);
  char *zPath = sqlite3_mprintf("%s/store.db", zDir);
  StoreSqliteConfig cfg;
  Store *p = 0;
  char *zErr = 0;
  int rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.bCreate = 1;
  cfg.iSynchronous = 1;
  cfg.nMaxValue = nMaxValue;
  rc = store_sqlite_open(zPath, &cfg, &p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "open: %s", zErr ? zErr : "");
  sqlite3_free(zDir);
  sqlite3_free(zPath);
  return p;
}

static void put_s(Store *p, const char *zKey, const char *zVal){
  ck_assert_int_eq(store_put(p, zKey, (int)strlen(zKey), zVal,
                             (int)strlen(zVal)), SQLITE_OK);
}

static char *get_s(Store *p, const char *zKey){
  void *pVal = 0;
  int nVal = 0;
  char *z;
  ck_assert_int_eq(store_get(p, zKey, (int)strlen(zKey), &pVal, &nVal),
                   SQLITE_OK);
  if( pVal==0 ) return 0;
  z = sqlite3_mprintf("%.*s", nVal, (char*)pVal);
  sqlite3_free(pVal);
  return z;
}

/* store_data_version(): equal across read transactions while nothing
** changed; moved by another handle's commit and by the handle's own. */
static uint64_t data_version(Store *p){
  uint64_t v = 0;
  ck_assert_int_eq(store_begin(p, 0), SQLITE_OK);
  ck_assert_int_eq(store_data_version(p, &v), SQLITE_OK);
  ck_assert_int_eq(store_rollback(p), SQLITE_OK);
  ck_assert_uint_ne(v, 0);
  return v;
}

START_TEST(test_store_data_version_moves_on_every_change){
  char *zDir = th_tmpdir("store-dv");
  char *zPath = sqlite3_mprintf("%s/store.db", zDir);
  StoreSqliteConfig cfg;
  Store *a = 0, *b = 0;
  uint64_t v0, v1, v2;
  memset(&cfg, 0, sizeof(cfg));
  cfg.bCreate = 1;
  ck_assert_int_eq(store_sqlite_open(zPath, &cfg, &a, 0), SQLITE_OK);
  ck_assert_int_eq(store_sqlite_open(zPath, &cfg, &b, 0), SQLITE_OK);
  ck_assert_int_eq(store_data_version(a, &v0), SQLITE_NOTFOUND);  /* no txn */
  v0 = data_version(a);
  ck_assert_uint_eq(data_version(a), v0);
  ck_assert_int_eq(store_begin(b, 1), SQLITE_OK);
  put_s(b, "k", "1");
  ck_assert_int_eq(store_commit(b), SQLITE_OK);
  v1 = data_version(a);
  ck_assert_uint_ne(v1, v0);
  ck_assert_uint_eq(data_version(a), v1);
  ck_assert_int_eq(store_begin(a, 1), SQLITE_OK);
  put_s(a, "k", "2");
  ck_assert_int_eq(store_commit(a), SQLITE_OK);
  v2 = data_version(a);
  ck_assert_uint_ne(v2, v1);
  ck_assert_uint_eq(data_version(a), v2);
  store_close(a);
  store_close(b);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_store_put_get_clear_round_trip){
  Store *p = open_store("store-rt", 0);
  char *z;
  put_s(p, "a", "1");
  put_s(p, "b", "");
  put_s(p, "a", "2");
  z = get_s(p, "a"); ck_assert_str_eq(z, "2"); sqlite3_free(z);
  z = get_s(p, "b"); ck_assert_str_eq(z, ""); sqlite3_free(z);
  ck_assert_ptr_null(get_s(p, "c"));
  ck_assert_int_eq(store_clear(p, "a", 1), SQLITE_OK);
  ck_assert_ptr_null(get_s(p, "a"));
  store_close(p);
}
END_TEST

typedef struct ScanLog ScanLog;
struct ScanLog { char z[256]; int nStop; };

static int scan_row(void *pArg, const unsigned char *pKey, int nKey,
                    const unsigned char *pVal, int nVal){
  ScanLog *p = (ScanLog*)pArg;
  size_t n = strlen(p->z);
  (void)pVal; (void)nVal;
  snprintf(p->z+n, sizeof(p->z)-n, "%.*s,", nKey, (const char*)pKey);
  return p->nStop>0 && --p->nStop==0;
}

START_TEST(test_store_scan_orders_bounds_and_limits){
  Store *p = open_store("store-scan", 0);
  ScanLog log;
  const char *az[] = { "k3", "k1", "k2", "k10", "j9", "l0" };
  int i;
  for(i=0; i<6; i++) put_s(p, az[i], "v");
  memset(&log, 0, sizeof(log));
  ck_assert_int_eq(store_scan(p, "k", 1, "l", 1, 0, -1, scan_row, &log), 0);
  ck_assert_str_eq(log.z, "k1,k10,k2,k3,");
  memset(&log, 0, sizeof(log));
  store_scan(p, "k", 1, "l", 1, STORE_SCAN_REVERSE, 2, scan_row, &log);
  ck_assert_str_eq(log.z, "k3,k2,");
  memset(&log, 0, sizeof(log));
  store_scan(p, "k2", 2, 0, 0, 0, -1, scan_row, &log);
  ck_assert_str_eq(log.z, "k2,k3,l0,");
  memset(&log, 0, sizeof(log));
  log.nStop = 1;
  store_scan(p, "a", 1, 0, 0, STORE_SCAN_REVERSE, -1, scan_row, &log);
  ck_assert_str_eq(log.z, "l0,");
  ck_assert_int_eq(store_clear_range(p, "k1", 2, "k3", 2), SQLITE_OK);
  memset(&log, 0, sizeof(log));
  store_scan(p, "", 0, 0, 0, 0, -1, scan_row, &log);
  ck_assert_str_eq(log.z, "j9,k3,l0,");
  store_close(p);
}
END_TEST

/* Keys k00..k19, the odd ones with values of 129 + i bytes (past the
** 128 bytes of depot_kv_small), the even ones of i bytes ("k08" has 128).
** Each value is its key's last digit repeated. */
static int mixed_len(int i){
  return (i%2) ? 129+i : (i==8 ? 128 : i);
}

static void put_mixed(Store *p){
  char zKey[8], aVal[200];
  int i, n;
  for(i=0; i<20; i++){
    snprintf(zKey, sizeof(zKey), "k%02d", i);
    n = mixed_len(i);
    memset(aVal, '0'+i%10, n);
    ck_assert_int_eq(store_put(p, zKey, 3, aVal, n), SQLITE_OK);
  }
}

typedef struct MixedLog MixedLog;
struct MixedLog { char z[512]; int bBad; };

/* Logs "kNN," per row, and notes a value of the wrong size or bytes. */
static int mixed_row(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  MixedLog *p = (MixedLog*)pArg;
  size_t n = strlen(p->z);
  int i = (pKey[1]-'0')*10 + (pKey[2]-'0'), j;
  int nWant = mixed_len(i);
  snprintf(p->z+n, sizeof(p->z)-n, "%.*s,", nKey, (const char*)pKey);
  if( nVal!=nWant ) p->bBad = 1;
  for(j=0; j<nVal; j++) if( pVal[j]!='0'+i%10 ) p->bBad = 1;
  return 0;
}

static char *mixed_scan(Store *p, const char *zLo, const char *zHi,
                        int flags, int nLimit){
  MixedLog log;
  memset(&log, 0, sizeof(log));
  ck_assert_int_eq(store_scan(p, zLo, (int)strlen(zLo), zHi,
                              zHi ? (int)strlen(zHi) : 0, flags, nLimit,
                              mixed_row, &log), SQLITE_OK);
  ck_assert_int_eq(log.bBad, 0);
  return sqlite3_mprintf("%s", log.z);
}

/* The same answers whichever index a row's value size puts it in. */
static void check_mixed(Store *p){
  char *z;
  void *pVal = 0;
  int i, nVal = 0;
  z = mixed_scan(p, "k", "l", 0, -1);
  ck_assert_str_eq(z, "k00,k01,k02,k03,k04,k05,k06,k07,k08,k09,k10,k11,"
                   "k12,k13,k14,k15,k16,k17,k18,k19,");
  sqlite3_free(z);
  z = mixed_scan(p, "k05", "k11", STORE_SCAN_REVERSE, -1);
  ck_assert_str_eq(z, "k10,k09,k08,k07,k06,k05,");
  sqlite3_free(z);
  z = mixed_scan(p, "k07", "k13", 0, 3);
  ck_assert_str_eq(z, "k07,k08,k09,");
  sqlite3_free(z);
  z = mixed_scan(p, "k16", 0, 0, -1);
  ck_assert_str_eq(z, "k16,k17,k18,k19,");
  sqlite3_free(z);
  z = mixed_scan(p, "k00", 0, STORE_SCAN_REVERSE, 3);
  ck_assert_str_eq(z, "k19,k18,k17,");
  sqlite3_free(z);
  z = mixed_scan(p, "k02", "k03", 0, 1);
  ck_assert_str_eq(z, "k02,");
  sqlite3_free(z);
  z = mixed_scan(p, "k03", "k04", STORE_SCAN_REVERSE, 1);
  ck_assert_str_eq(z, "k03,");
  sqlite3_free(z);
  for(i=0; i<20; i++){
    char zKey[8];
    int nWant = mixed_len(i);
    snprintf(zKey, sizeof(zKey), "k%02d", i);
    ck_assert_int_eq(store_get(p, zKey, 3, &pVal, &nVal), SQLITE_OK);
    ck_assert_ptr_nonnull(pVal);
    ck_assert_int_eq(nVal, nWant);
    ck_assert_int_eq(nVal==0 || ((char*)pVal)[nVal-1]=='0'+i%10, 1);
    sqlite3_free(pVal);
  }
  ck_assert_int_eq(store_get(p, "k20", 3, &pVal, &nVal), SQLITE_OK);
  ck_assert_ptr_null(pVal);
  {
    char aPart[4];
    int nGot = 0;
    ck_assert_int_eq(store_get_range(p, "k17", 3, 100, 4, aPart, &nGot),
                     SQLITE_OK);
    ck_assert_int_eq(nGot, 4);
    ck_assert_int_eq(memcmp(aPart, "7777", 4), 0);
  }
}

/* Values of up to 128 bytes live in their keys' cells, bigger ones in
** depot_blobs: scans read both alike in key order, forwards and
** backwards, within bounds and limits, as do gets and range reads; a value
** that grows past 128 bytes or shrinks under it, or is cleared, leaves no
** depot_blobs row behind.  A store of format 1 (one rowid table) reads the
** same read-only, and a writable open migrates it to format 2. */
START_TEST(test_store_small_and_big_values_read_alike){
  char *zDir = th_tmpdir("store-split");
  char *zPath = sqlite3_mprintf("%s/store.db", zDir);
  char *zOld = sqlite3_mprintf("%s/old.db", zDir);
  StoreSqliteConfig cfg;
  Store *p = 0, *pRo = 0;
  sqlite3 *raw;
  char aBig[300], aPart[8];
  int nGot = 0;
  memset(&cfg, 0, sizeof(cfg));
  cfg.bCreate = 1;
  ck_assert_int_eq(store_sqlite_open(zPath, &cfg, &p, 0), SQLITE_OK);
  put_mixed(p);
  check_mixed(p);
  /* k02 grows past the cell and shrinks back; k03 goes and comes back */
  memset(aBig, 'x', sizeof(aBig));
  ck_assert_int_eq(store_put(p, "k02", 3, aBig, 300), SQLITE_OK);
  ck_assert_int_eq(store_clear(p, "k03", 3), SQLITE_OK);
  {
    MixedLog log;
    memset(&log, 0, sizeof(log));
    ck_assert_int_eq(store_scan(p, "k01", 3, "k05", 3, 0, -1, mixed_row,
                                &log), SQLITE_OK);
    ck_assert_str_eq(log.z, "k01,k02,k04,");
    ck_assert_int_eq(log.bBad, 1);     /* k02's 300 bytes of 'x' */
  }
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  put_mixed(p);
  ck_assert_int_eq(store_commit(p), SQLITE_OK);
  check_mixed(p);
  /* range reads: of a big value, of an inline one, past the end */
  ck_assert_int_eq(store_get_range(p, "k19", 3, 140, 8, aPart, &nGot),
                   SQLITE_OK);
  ck_assert_int_eq(nGot, 8);
  ck_assert_int_eq(memcmp(aPart, "99999999", 8), 0);
  ck_assert_int_eq(store_get_range(p, "k06", 3, 4, 8, aPart, &nGot),
                   SQLITE_OK);
  ck_assert_int_eq(nGot, 2);
  ck_assert_int_eq(memcmp(aPart, "66", 2), 0);
  ck_assert_int_eq(store_get_range(p, "k20", 3, 0, 8, aPart, &nGot),
                   SQLITE_OK);
  ck_assert_int_eq(nGot, -1);
  store_close(p);
  raw = th_open(zPath);
  ck_assert_int_eq(th_int(raw, "PRAGMA user_version"), 2);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM depot_keys"
                   " WHERE blob IS NULL"), 10);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM depot_blobs"), 10);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM depot_keys JOIN"
                   " depot_blobs ON id=blob"), 10);
  /* the same rows as a format-1 store */
  th_execf(raw, "ATTACH %Q AS old;"
           "CREATE TABLE old.depot_kv(key BLOB PRIMARY KEY, value BLOB);"
           "INSERT INTO old.depot_kv SELECT key, value FROM main.depot_kv;"
           "PRAGMA old.user_version=1; PRAGMA old.journal_mode=WAL;"
           "DETACH old", zOld);
  th_text_is(raw, "PRAGMA integrity_check", "ok");
  sqlite3_close(raw);
  cfg.bCreate = 0;
  cfg.bReadOnly = 1;
  ck_assert_int_eq(store_sqlite_open(zOld, &cfg, &pRo, 0), SQLITE_OK);
  check_mixed(pRo);
  raw = th_open(zOld);
  ck_assert_int_eq(th_int(raw, "PRAGMA user_version"), 1);
  sqlite3_close(raw);
  cfg.bReadOnly = 0;
  ck_assert_int_eq(store_sqlite_open(zOld, &cfg, &p, 0), SQLITE_OK);
  check_mixed(p);
  store_close(p);
  /* the read-only handle, open across the migration, follows it: in a
  ** transaction and outside one */
  ck_assert_int_eq(store_begin(pRo, 0), SQLITE_OK);
  check_mixed(pRo);
  ck_assert_int_eq(store_rollback(pRo), SQLITE_OK);
  check_mixed(pRo);
  store_close(pRo);
  raw = th_open(zOld);
  ck_assert_int_eq(th_int(raw, "PRAGMA user_version"), 2);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM sqlite_schema WHERE"
                   " name='depot_kv' AND type='view'"), 1);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM depot_blobs"), 10);
  th_text_is(raw, "PRAGMA integrity_check", "ok");
  sqlite3_close(raw);
  sqlite3_free(zOld);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* A format-1 store of nRow keys "r%05d": every third value 4000 bytes of
** its key's last digit, the others 9 bytes. */
static void make_format1_store(const char *zPath, int nRow){
  sqlite3 *raw = th_open(zPath);
  th_execf(raw, "PRAGMA journal_mode=WAL;"
           "CREATE TABLE depot_kv(key BLOB PRIMARY KEY, value BLOB);"
           "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM n"
           " WHERE i<%d-1)"
           " INSERT INTO depot_kv SELECT CAST(printf('r%%05d', i) AS BLOB),"
           " CAST(CASE WHEN i%%3=0 THEN replace(printf('%%.4000c', 'x'), 'x',"
           " i%%10) ELSE printf('v%%08d', i) END AS BLOB) FROM n;"
           "PRAGMA user_version=1", nRow);
  sqlite3_close(raw);
}

typedef struct RowCheck RowCheck;
struct RowCheck { int n; int bBad; };

static int check_row(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  RowCheck *p = (RowCheck*)pArg;
  char zKey[16], zVal[16];
  int i = p->n++, j;
  snprintf(zKey, sizeof(zKey), "r%05d", i);
  if( nKey!=6 || memcmp(pKey, zKey, 6)!=0 ) p->bBad = 1;
  if( i%3==0 ){
    if( nVal!=4000 ) p->bBad = 1;
    for(j=0; j<nVal; j++) if( pVal[j]!='0'+i%10 ) p->bBad = 1;
  }else{
    snprintf(zVal, sizeof(zVal), "v%08d", i);
    if( nVal!=9 || memcmp(pVal, zVal, 9)!=0 ) p->bBad = 1;
  }
  return 0;
}

/* Every row of make_format1_store(zPath, nRow) read through a writable
** open of zPath (which migrates the store if needed); the file then is
** format 2 and passes integrity_check. */
static void assert_rows_and_format2(const char *zPath, int nRow){
  StoreSqliteConfig cfg;
  Store *p = 0;
  RowCheck chk;
  sqlite3 *raw;
  memset(&cfg, 0, sizeof(cfg));
  ck_assert_int_eq(store_sqlite_open(zPath, &cfg, &p, 0), SQLITE_OK);
  memset(&chk, 0, sizeof(chk));
  ck_assert_int_eq(store_scan(p, "", 0, 0, 0, 0, -1, check_row, &chk),
                   SQLITE_OK);
  ck_assert_int_eq(chk.n, nRow);
  ck_assert_int_eq(chk.bBad, 0);
  store_close(p);
  raw = th_open(zPath);
  ck_assert_int_eq(th_int(raw, "PRAGMA user_version"), 2);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM depot_blobs"),
                   (nRow+2)/3);
  th_text_is(raw, "PRAGMA integrity_check", "ok");
  sqlite3_close(raw);
}

/* Forks a process that opens store zPath writable at synchronous=FULL
** (migrating it), closes it and exits 0 (1 if the open failed); returns
** its pid. */
static pid_t fork_open(const char *zPath){
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    StoreSqliteConfig cfg;
    Store *p = 0;
    int rc;
    memset(&cfg, 0, sizeof(cfg));
    cfg.iSynchronous = 2;
    rc = store_sqlite_open(zPath, &cfg, &p, 0);
    if( rc==SQLITE_OK ) store_close(p);
    _exit(rc==SQLITE_OK ? 0 : 1);
  }
  return pid;
}

/* fork_open(zPath), killed after nDelayUs microseconds (negative: left to
** finish, which must succeed).  Returns the microseconds from the fork to
** its end. */
static int64_t open_in_child(const char *zPath, int nDelayUs){
  struct timespec t0, t1;
  pid_t pid;
  int st = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  pid = fork_open(zPath);
  if( nDelayUs>=0 ){
    usleep(nDelayUs);
    kill(pid, SIGKILL);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  if( nDelayUs<0 ) ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (int64_t)(t1.tv_sec-t0.tv_sec)*1000000
       + (t1.tv_nsec-t0.tv_nsec)/1000;
}

/* A process killed while its writable open migrates a format-1 store
** leaves the store as it was or migrated, never in between: the next open
** finds every row with its value, and the file passes integrity_check.
** The kills fall at fractions of the time an open that migrates takes. */
START_TEST(test_store_migration_killed_loses_nothing){
  static const int aPct[] = { 10, 30, 50, 70, 90, 95 };
  char *zDir = th_tmpdir("store-migrate-kill");
  char *zPath = sqlite3_mprintf("%s/store.db", zDir);
  char *zRm = sqlite3_mprintf("rm -f '%q' '%q-wal' '%q-shm'", zPath, zPath,
                              zPath);
  int nRow = th_under_tsan() || th_under_asan() ? 2000 : th_scaled(9000, 3);
  int k, nOld = 0;
  int64_t nFullUs;
  make_format1_store(zPath, nRow);
  nFullUs = open_in_child(zPath, -1);
  for(k=0; k<(int)(sizeof(aPct)/sizeof(aPct[0])); k++){
    sqlite3 *raw;
    ck_assert_int_eq(system(zRm), 0);
    make_format1_store(zPath, nRow);
    open_in_child(zPath, (int)(nFullUs*aPct[k]/100));
    raw = th_open(zPath);
    if( th_int(raw, "PRAGMA user_version")!=2 ) nOld++;
    th_text_is(raw, "PRAGMA integrity_check", "ok");
    sqlite3_close(raw);
    assert_rows_and_format2(zPath, nRow);
  }
  /* the early kills fall before the migration commits */
  ck_assert_int_gt(nOld, 0);
  sqlite3_free(zRm);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* A migrating open whose Nth write or Nth sync fails (N from 1 up, in
** steps that grow by half, until an open hits no failure) reports the
** error and leaves the store format 1 or wholly format 2, readable: the
** next open finds every row. */
START_TEST(test_store_migration_io_errors_lose_nothing){
  char *zDir = th_tmpdir("store-migrate-ioerr");
  char *zPath = sqlite3_mprintf("%s/store.db", zDir);
  char *zRm = sqlite3_mprintf("rm -f '%q' '%q-wal' '%q-shm'", zPath, zPath,
                              zPath);
  int nRow = th_under_tsan() || th_under_asan() ? 500 : th_scaled(1500, 3);
  int bSync, nFailed = 0;
  th_fault_vfs();
  for(bSync=0; bSync<2; bSync++){
    int n;
    for(n=1; n<100000; n += (n+1)/2){
      StoreSqliteConfig cfg;
      Store *p = 0;
      char *zErr = 0;
      int rc;
      ck_assert_int_eq(system(zRm), 0);
      make_format1_store(zPath, nRow);
      memset(&cfg, 0, sizeof(cfg));
      cfg.iSynchronous = 2;
      th_fault_hits = 0;
      if( bSync ) th_fault_syncs = n; else th_fault_writes = n;
      rc = store_sqlite_open(zPath, &cfg, &p, &zErr);
      th_fault_writes = th_fault_syncs = 0;
      if( rc==SQLITE_OK ){
        store_close(p);
      }else{
        nFailed++;
        ck_assert_int_eq(rc & 0xff, SQLITE_IOERR);
        ck_assert_ptr_nonnull(zErr);
        ck_assert_msg(strstr(zErr, "store")!=0, "%s", zErr);
      }
      sqlite3_free(zErr);
      {
        sqlite3 *raw = th_open(zPath);
        int v = (int)th_int(raw, "PRAGMA user_version");
        ck_assert(v==1 || v==2);
        th_text_is(raw, "PRAGMA integrity_check", "ok");
        sqlite3_close(raw);
      }
      assert_rows_and_format2(zPath, nRow);
      if( th_fault_hits==0 ) break;
    }
  }
  ck_assert_int_gt(nFailed, 5);
  sqlite3_free(zRm);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* Two processes opening a format-1 store writable at once: one migrates
** it, the other waits for that and finds nothing left to do; both opens
** succeed and every row is there once. */
START_TEST(test_store_migration_by_two_processes_at_once){
  char *zDir = th_tmpdir("store-migrate-two");
  char *zPath = sqlite3_mprintf("%s/store.db", zDir);
  int nRow = th_under_tsan() || th_under_asan() ? 2000 : th_scaled(9000, 3);
  int i;
  pid_t aPid[2];
  make_format1_store(zPath, nRow);
  for(i=0; i<2; i++) aPid[i] = fork_open(zPath);
  for(i=0; i<2; i++){
    int st = 0;
    ck_assert_int_eq(waitpid(aPid[i], &st, 0), aPid[i]);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st)==0);
  }
  assert_rows_and_format2(zPath, nRow);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* The milliseconds since t0. */
static int64_t ms_since(const struct timespec *t0){
  struct timespec t1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (int64_t)(t1.tv_sec-t0->tv_sec)*1000
       + (t1.tv_nsec-t0->tv_nsec)/1000000;
}

/* A writable open of a format-1 store whose write lock another connection
** holds (as one migrating it does, for as long as the copy takes) does not
** wait for it: it waits at most a second, then reads the old tables, and
** its first write migrates the store, waiting for the lock like any write
** (SQLITE_BUSY with the migration named after the busy timeout; inside a
** transaction begun before the migration, SQLITE_BUSY at once).  A
** migration another handle made meanwhile is followed, not redone. */
START_TEST(test_store_open_while_the_write_lock_is_held_migrates_later){
  char *zDir = th_tmpdir("store-migrate-later");
  char *zPath = sqlite3_mprintf("%s/store.db", zDir);
  StoreSqliteConfig cfg;
  Store *p = 0, *q = 0;
  sqlite3 *raw;
  RowCheck chk;
  struct timespec t0;
  int64_t nMs;
  make_format1_store(zPath, 300);
  raw = th_open(zPath);
  th_exec(raw, "BEGIN IMMEDIATE");
  memset(&cfg, 0, sizeof(cfg));
  cfg.nBusyMs = 300;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(store_sqlite_open(zPath, &cfg, &p, 0), SQLITE_OK);
  nMs = ms_since(&t0);
  ck_assert_int_lt(nMs, 1000);        /* min(busy timeout, 1 s) */
  memset(&chk, 0, sizeof(chk));
  ck_assert_int_eq(store_scan(p, "", 0, 0, 0, 0, -1, check_row, &chk),
                   SQLITE_OK);
  ck_assert_int_eq(chk.n, 300);
  ck_assert_int_eq(chk.bBad, 0);
  /* a write waits for the lock, then fails naming the migration */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(store_put(p, "r00001", 6, "v00000001", 9) & 0xff,
                   SQLITE_BUSY);
  ck_assert_int_ge(ms_since(&t0), 250);
  ck_assert_ptr_nonnull(strstr(store_errmsg(p), "format 2"));
  ck_assert_int_eq(store_begin(p, 1) & 0xff, SQLITE_BUSY);
  /* in a read transaction of the old tables: busy at once */
  ck_assert_int_eq(store_begin(p, 0), SQLITE_OK);
  clock_gettime(CLOCK_MONOTONIC, &t0);
  ck_assert_int_eq(store_put(p, "r00001", 6, "v00000001", 9), SQLITE_BUSY);
  ck_assert_int_lt(ms_since(&t0), 250);
  ck_assert_ptr_nonnull(strstr(store_errmsg(p), "being migrated"));
  ck_assert_int_eq(store_rollback(p), SQLITE_OK);
  ck_assert_int_eq(th_int(raw, "PRAGMA user_version"), 1);
  th_exec(raw, "ROLLBACK");
  /* the lock is free: the first write migrates */
  ck_assert_int_eq(store_put(p, "r00001", 6, "v00000001", 9), SQLITE_OK);
  ck_assert_int_eq(th_int(raw, "PRAGMA user_version"), 2);
  ck_assert_int_eq(th_int(raw, "SELECT count(*) FROM depot_blobs"), 100);
  memset(&chk, 0, sizeof(chk));
  ck_assert_int_eq(store_scan(p, "", 0, 0, 0, 0, -1, check_row, &chk),
                   SQLITE_OK);
  ck_assert_int_eq(chk.n, 300);
  ck_assert_int_eq(chk.bBad, 0);
  store_close(p);
  sqlite3_close(raw);
  assert_rows_and_format2(zPath, 300);

  /* deferred, then another handle migrates: the first follows */
  sqlite3_free(zPath);
  zPath = sqlite3_mprintf("%s/store2.db", zDir);
  make_format1_store(zPath, 300);
  raw = th_open(zPath);
  th_exec(raw, "BEGIN IMMEDIATE");
  ck_assert_int_eq(store_sqlite_open(zPath, &cfg, &p, 0), SQLITE_OK);
  th_exec(raw, "ROLLBACK");
  sqlite3_close(raw);
  ck_assert_int_eq(store_sqlite_open(zPath, &cfg, &q, 0), SQLITE_OK);
  store_close(q);
  memset(&chk, 0, sizeof(chk));
  ck_assert_int_eq(store_scan(p, "", 0, 0, 0, 0, -1, check_row, &chk),
                   SQLITE_OK);
  ck_assert_int_eq(chk.n, 300);
  ck_assert_int_eq(chk.bBad, 0);
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "r00002", 6, "v00000002", 9), SQLITE_OK);
  ck_assert_int_eq(store_commit(p), SQLITE_OK);
  store_close(p);
  assert_rows_and_format2(zPath, 300);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_store_rollback_discards_and_commit_keeps){
  Store *p = open_store("store-txn", 0);
  char *z;
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  ck_assert_int_eq(store_begin(p, 1), SQLITE_MISUSE);
  put_s(p, "x", "1");
  ck_assert_int_eq(store_rollback(p), SQLITE_OK);
  ck_assert_ptr_null(get_s(p, "x"));
  ck_assert_int_eq(store_begin(p, 1), SQLITE_OK);
  put_s(p, "x", "2");
  ck_assert_int_eq(store_commit(p), SQLITE_OK);
  z = get_s(p, "x"); ck_assert_str_eq(z, "2"); sqlite3_free(z);
  store_close(p);
}
END_TEST

START_TEST(test_store_add_counts_and_rejects_non_counters){
  Store *p = open_store("store-add", 0);
  int64_t v = 0;
  ck_assert_int_eq(store_add(p, "c", 1, 5, &v), SQLITE_OK);
  ck_assert_int_eq(v, 5);
  ck_assert_int_eq(store_add(p, "c", 1, -7, &v), SQLITE_OK);
  ck_assert_int_eq(v, -2);
  put_s(p, "bad", "xyz");
  ck_assert_int_eq(store_add(p, "bad", 3, 1, &v), SQLITE_CORRUPT);
  store_close(p);
}
END_TEST

START_TEST(test_store_value_over_max_is_toobig){
  Store *p = open_store("store-big", 100);
  char a[101];
  memset(a, 'x', sizeof(a));
  ck_assert_int_eq(store_max_value(p), 100);
  ck_assert_int_eq(store_put(p, "k", 1, a, 100), SQLITE_OK);
  ck_assert_int_eq(store_put(p, "k", 1, a, 101), SQLITE_TOOBIG);
  ck_assert_ptr_nonnull(strstr(store_errmsg(p), "101"));
  store_close(p);
}
END_TEST

START_TEST(test_store_missing_file_without_create_fails){
  char *zDir = th_tmpdir("store-missing");
  char *zPath = sqlite3_mprintf("%s/none.db", zDir);
  StoreSqliteConfig cfg;
  Store *p = 0;
  char *zErr = 0;
  memset(&cfg, 0, sizeof(cfg));
  ck_assert_int_ne(store_sqlite_open(zPath, &cfg, &p, &zErr), SQLITE_OK);
  ck_assert_ptr_null(p);
  ck_assert_ptr_nonnull(zErr);
  sqlite3_free(zErr); sqlite3_free(zPath); sqlite3_free(zDir);
}
END_TEST

/* ---- the page-blob codec ---- */

static uint32_t rnd_state = 1;
static uint32_t rnd(void){
  rnd_state ^= rnd_state<<13; rnd_state ^= rnd_state>>17;
  rnd_state ^= rnd_state<<5;
  return rnd_state;
}

/* n pages of size sz: even pages text-like, odd pages random bytes. */
static unsigned char **make_pages(int n, uint32_t sz){
  unsigned char **ap = malloc(sizeof(void*)*n);
  int i; uint32_t j;
  for(i=0; i<n; i++){
    ap[i] = malloc(sz);
    for(j=0; j<sz; j++){
      ap[i][j] = (i%2) ? (unsigned char)rnd() : (unsigned char)("the quick brown fox "[j%20]);
    }
  }
  return ap;
}

static void free_pages(unsigned char **ap, int n){
  int i;
  for(i=0; i<n; i++) free(ap[i]);
  free(ap);
}

static void encode(int n, uint32_t sz, unsigned char **ap, unsigned char **ppBlob,
                   int64_t *pn, LtxFrameRef *aRef, uint32_t *aPgno){
  LtxHeader h;
  ZSTD_CCtx *c = ZSTD_createCCtx();
  int i;
  memset(&h, 0, sizeof(h));
  h.szPage = sz; h.nPage = 100; h.iMinTxid = h.iMaxTxid = 7;
  h.iTimeMs = 1234; h.nFrame = (uint32_t)n;
  for(i=0; i<n; i++) aPgno[i] = (uint32_t)(3*i+1);
  ck_assert_int_eq(ltx_encode(&h, aPgno, (const unsigned char*const*)ap,
                              0xabcdef, c, 1, ppBlob, pn, aRef), SQLITE_OK);
  ZSTD_freeCCtx(c);
}

static const uint32_t aPageSize[] = { 512, 1024, 4096, 16384, 65536 };

START_TEST(test_ltx_round_trip_every_page_size){
  uint32_t sz = aPageSize[_i];
  unsigned char **ap = make_pages(5, sz);
  unsigned char *aBlob = 0, *pOut = malloc(sz);
  int64_t nBlob = 0;
  LtxFrameRef aRef[5];
  uint32_t aPgno[5];
  LtxHeader h;
  LtxTrailer t;
  ZSTD_DCtx *d = ZSTD_createDCtx();
  char *zErr = 0;
  int i;
  encode(5, sz, ap, &aBlob, &nBlob, aRef, aPgno);
  ck_assert_int_eq(ltx_verify(aBlob, nBlob, d, &h, &t, &zErr), SQLITE_OK);
  ck_assert_uint_eq(h.szPage, sz);
  ck_assert_uint_eq(h.nFrame, 5);
  ck_assert_uint_eq(h.iMaxTxid, 7);
  ck_assert(t.iDbChecksum==0xabcdef);
  for(i=0; i<5; i++){
    uint64_t c = 0;
    ck_assert_int_eq(ltx_decode_frame(aBlob+aRef[i].iOffset, aRef[i].nByte,
                     aPgno[i], sz, d, pOut, &c, &zErr), SQLITE_OK);
    ck_assert_int_eq(memcmp(pOut, ap[i], sz), 0);
    ck_assert(c==ltx_crc64(0, ap[i], sz));
  }
  /* Text pages compress; random pages are stored raw. */
  ck_assert_uint_lt(aRef[0].nByte, sz/2);
  ck_assert_uint_eq(aRef[1].nByte, sz+LTX_FRAME_HEADER);
  free(pOut); free_pages(ap, 5); sqlite3_free(aBlob); ZSTD_freeDCtx(d);
}
END_TEST

START_TEST(test_ltx_every_truncation_is_corrupt){
  unsigned char **ap = make_pages(3, 512);
  unsigned char *aBlob = 0;
  int64_t nBlob = 0, n;
  LtxFrameRef aRef[3];
  uint32_t aPgno[3];
  ZSTD_DCtx *d = ZSTD_createDCtx();
  encode(3, 512, ap, &aBlob, &nBlob, aRef, aPgno);
  for(n=0; n<nBlob; n++){
    char *zErr = 0;
    unsigned char *aCopy = malloc(n ? n : 1);   /* exact size for ASan */
    memcpy(aCopy, aBlob, n);
    ck_assert_int_eq(ltx_verify(aCopy, n, d, 0, 0, &zErr), SQLITE_CORRUPT);
    ck_assert_ptr_nonnull(zErr);
    sqlite3_free(zErr);
    free(aCopy);
  }
  free_pages(ap, 3); sqlite3_free(aBlob); ZSTD_freeDCtx(d);
}
END_TEST

START_TEST(test_ltx_every_bit_flip_is_corrupt){
  unsigned char **ap = make_pages(3, 512);
  unsigned char *aBlob = 0;
  int64_t nBlob = 0, i;
  LtxFrameRef aRef[3];
  uint32_t aPgno[3];
  ZSTD_DCtx *d = ZSTD_createDCtx();
  int b;
  encode(3, 512, ap, &aBlob, &nBlob, aRef, aPgno);
  for(i=0; i<nBlob; i++){
    for(b=0; b<8; b++){
      char *zErr = 0;
      aBlob[i] ^= (unsigned char)(1<<b);
      ck_assert_msg(ltx_verify(aBlob, nBlob, d, 0, 0, &zErr)==SQLITE_CORRUPT,
                    "flip of byte %lld bit %d not detected", (long long)i, b);
      sqlite3_free(zErr);
      aBlob[i] ^= (unsigned char)(1<<b);
    }
  }
  free_pages(ap, 3); sqlite3_free(aBlob); ZSTD_freeDCtx(d);
}
END_TEST

START_TEST(test_ltx_frame_bit_flip_is_corrupt_or_harmless){
  unsigned char **ap = make_pages(2, 1024);
  unsigned char *aBlob = 0, out[1024];
  int64_t nBlob = 0;
  LtxFrameRef aRef[2];
  uint32_t aPgno[2], i, f;
  ZSTD_DCtx *d = ZSTD_createDCtx();
  encode(2, 1024, ap, &aBlob, &nBlob, aRef, aPgno);
  for(f=0; f<2; f++){
    unsigned char *a = aBlob+aRef[f].iOffset;
    for(i=0; i<aRef[f].nByte; i++){
      char *zErr = 0;
      int rc;
      a[i] ^= 0x10;
      /* A flip zstd tolerates must still yield the exact page. */
      rc = ltx_decode_frame(a, aRef[f].nByte, aPgno[f], 1024, d, out, 0, &zErr);
      ck_assert(rc==SQLITE_CORRUPT || (rc==SQLITE_OK
                && memcmp(out, ap[f], 1024)==0));
      sqlite3_free(zErr);
      a[i] ^= 0x10;
    }
  }
  free_pages(ap, 2); sqlite3_free(aBlob); ZSTD_freeDCtx(d);
}
END_TEST

START_TEST(test_ltx_crc64_matches_reference_vector){
  /* CRC-64/XZ of "123456789". */
  ck_assert(ltx_crc64(0, "123456789", 9)==0x995DC9BBDF1939FAULL);
  ck_assert(ltx_crc64(ltx_crc64(0, "1234", 4), "56789", 5)
            ==0x995DC9BBDF1939FAULL);
}
END_TEST

/* The folding path (long inputs) gives the tables' result at every length
** around its block sizes, at every alignment, continuing from any crc. */
START_TEST(test_ltx_crc64_folding_matches_tables){
  unsigned char a[4200];
  size_t i, n, iOff;
  uint64_t s = 0x9E3779B97F4A7C15ULL;
  for(i=0; i<sizeof(a); i++){
    s = s*6364136223846793005ULL + 1442695040888963407ULL;
    a[i] = (unsigned char)(s>>56);
  }
  for(iOff=0; iOff<16; iOff++){
    for(n=0; n<600; n++){
      ck_assert(ltx_crc64(0, a+iOff, n)==ltx_crc64_table(0, a+iOff, n));
      ck_assert(ltx_crc64(s, a+iOff, n)==ltx_crc64_table(s, a+iOff, n));
    }
  }
  for(n=4000; n<4160; n++){
    ck_assert(ltx_crc64(0, a, n)==ltx_crc64_table(0, a, n));
  }
  memset(a, 0xff, 4096);
  ck_assert(ltx_crc64(7, a, 4096)==ltx_crc64_table(7, a, 4096));
  ck_assert(ltx_crc64(ltx_crc64(0, a, 1000), a+1000, 3096)
            ==ltx_crc64(0, a, 4096));
}
END_TEST

/* The CRC of two pieces joined, from the CRC of each and the length of
** the second, is the CRC of the joined bytes, at every split and for
** empty pieces; a blob's CRC over its pages is built that way. */
START_TEST(test_ltx_crc64_combine_matches_joined_bytes){
  unsigned char a[4200];
  size_t i, n, nB;
  uint64_t s = 0x2545F4914F6CDD1DULL, acc = 0, x4k = ltx_crc64_shift(4096);
  for(i=0; i<sizeof(a); i++){
    s = s*6364136223846793005ULL + 1442695040888963407ULL;
    a[i] = (unsigned char)(s>>56);
  }
  for(n=0; n<300; n++){
    for(nB=0; n+nB<=300; nB+=7){
      ck_assert(ltx_crc64_combine(ltx_crc64(0, a, n), ltx_crc64(0, a+n, nB),
                                  ltx_crc64_shift(nB))
                ==ltx_crc64(0, a, n+nB));
    }
  }
  ck_assert(ltx_crc64_combine(ltx_crc64(0, a, 104), ltx_crc64(0, a+104, 4096),
                              x4k)==ltx_crc64(0, a, 4200));
  /* page by page, as the encoder does */
  for(i=0; i<3; i++){
    acc = ltx_crc64_combine(acc, ltx_crc64(0, a+i*32, 4096), x4k);
  }
  {
    uint64_t want = 0;
    for(i=0; i<3; i++) want = ltx_crc64(want, a+i*32, 4096);
    ck_assert(acc==want);
  }
}
END_TEST

/* ---- layout ---- */

START_TEST(test_layout_pidx_keys_sort_by_page_then_txid){
  unsigned char a[LAYOUT_MAX_KEY], b[LAYOUT_MAX_KEY];
  int na = layout_key_pidx(a, 1, 2, 0xffffffffffULL);
  int nb = layout_key_pidx(b, 1, 3, 1);
  ck_assert_int_eq(na, nb);
  ck_assert_int_lt(memcmp(a, b, na), 0);
  nb = layout_key_pidx(b, 1, 2, 0x10000000000ULL);
  ck_assert_int_lt(memcmp(a, b, na), 0);
  nb = layout_key_pidx(b, 2, 1, 1);
  ck_assert_int_lt(memcmp(a, b, na), 0);
  ck_assert_int_eq(a[0], 0x02);
  ck_assert_int_eq(a[1], LAYOUT_P_BR);
}
END_TEST

START_TEST(test_layout_rows_round_trip_and_reject_bad_bytes){
  unsigned char a[LAYOUT_MAX_ROW];
  DbHead h = { 9, 4096, 77, 0x1234, 5 }, h2;
  CommitRow c, c2;
  BranchRecord br, br2;
  PidxValue pv = { 100, 200, 65536 }, pv2;
  int n;
  n = layout_head_encode(a, &h);
  ck_assert_int_eq(layout_head_decode(a, n, &h2), SQLITE_OK);
  ck_assert(h2.iTxid==9 && h2.nPage==77 && h2.iChecksum==0x1234);
  ck_assert_int_eq(layout_head_decode(a, n-1, &h2), SQLITE_CORRUPT);
  a[0] = 2;
  ck_assert_int_eq(layout_head_decode(a, n, &h2), SQLITE_CORRUPT);
  memset(&c, 0, sizeof(c));
  c.iTxid = 3; c.szChunk = 100; c.nBlob = 250; c.nChunk = 3;
  n = layout_commit_encode(a, &c);
  ck_assert_int_eq(layout_commit_decode(a, n, &c2), SQLITE_OK);
  ck_assert(c2.iTxid==3 && c2.nChunk==3);
  a[32] ^= 1;   /* chunk count no longer matches */
  ck_assert_int_eq(layout_commit_decode(a, n, &c2), SQLITE_CORRUPT);
  memset(&br, 0, sizeof(br));
  strcpy(br.zDb, "app"); strcpy(br.zBranch, "main");
  n = layout_branch_encode(a, &br);
  ck_assert_int_eq(layout_branch_decode(a, n, &br2), SQLITE_OK);
  ck_assert_str_eq(br2.zBranch, "main");
  ck_assert_int_eq(layout_branch_decode(a, n+1, &br2), SQLITE_CORRUPT);
  n = layout_pidx_encode(a, &pv);
  ck_assert_int_eq(layout_pidx_decode(a, n, &pv2), SQLITE_OK);
  ck_assert_uint_eq(pv2.szChunk, 65536);
  ck_assert_int_eq(layout_pidx_decode(a, 11, &pv2), SQLITE_CORRUPT);
}
END_TEST

/* A BRANCHES row whose database or branch name is empty or holds a NUL
** is corrupt, not silently cut short (found by the layout fuzz target). */
START_TEST(test_layout_branch_row_with_bad_name_is_corrupt){
  unsigned char a[LAYOUT_MAX_ROW];
  BranchRecord br, br2;
  int n;
  memset(&br, 0, sizeof(br));
  strcpy(br.zDb, "app"); strcpy(br.zBranch, "main");
  n = layout_branch_encode(a, &br);
  ck_assert_int_eq(layout_branch_decode(a, n, &br2), SQLITE_OK);
  a[19] = 0;                              /* "a\0p" as the database name */
  ck_assert_int_eq(layout_branch_decode(a, n, &br2), SQLITE_CORRUPT);
  a[19] = 'p';
  a[23] = 0;                              /* "m\0in" as the branch name */
  ck_assert_int_eq(layout_branch_decode(a, n, &br2), SQLITE_CORRUPT);
  br.zBranch[0] = 0;                      /* an empty branch name */
  n = layout_branch_encode(a, &br);
  ck_assert_int_eq(layout_branch_decode(a, n, &br2), SQLITE_CORRUPT);
}
END_TEST

/* A COMMITS row whose blob size is near 2^64 is corrupt: the chunk count
** check must not wrap (found by the layout fuzz target). */
START_TEST(test_layout_commit_row_with_huge_blob_size_is_corrupt){
  unsigned char a[LAYOUT_MAX_ROW];
  CommitRow c, c2;
  int n;
  memset(&c, 0, sizeof(c));
  c.iTxid = 1; c.szChunk = 65536; c.nChunk = 0;
  c.nBlob = ~(uint64_t)0 - 10;    /* (nBlob+szChunk-1) wraps to a small n */
  n = layout_commit_encode(a, &c);
  ck_assert_int_eq(layout_commit_decode(a, n, &c2), SQLITE_CORRUPT);
  c.nBlob = 65537; c.nChunk = 2;
  n = layout_commit_encode(a, &c);
  ck_assert_int_eq(layout_commit_decode(a, n, &c2), SQLITE_OK);
}
END_TEST

START_TEST(test_layout_names_must_be_1_to_255_bytes){
  char z[300];
  ck_assert_int_eq(layout_name_ok(""), 0);
  ck_assert_int_eq(layout_name_ok(0), 0);
  memset(z, 'a', 255); z[255] = 0;
  ck_assert_int_eq(layout_name_ok(z), 1);
  z[255] = 'a'; z[256] = 0;
  ck_assert_int_eq(layout_name_ok(z), 0);
}
END_TEST

/* ---- page cache and write buffer ---- */

START_TEST(test_cache_keeps_recent_pages_within_limit){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(4, 512));
  unsigned char a[512], b[512];
  uint32_t i;
  for(i=1; i<=10; i++){
    memset(a, (int)i, sizeof(a));
    depot_cache_put(c, 1, i, 5, 512, a);
  }
  ck_assert_int_eq(depot_cache_get(c, 1, 1, 5, 512, b), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 10, 5, 512, b), 1);
  ck_assert_int_eq(b[0], 10);
  ck_assert_int_eq(depot_cache_get(c, 1, 10, 6, 512, b), 0);
  ck_assert_int_eq(depot_cache_get(c, 2, 10, 5, 512, b), 0);
  depot_cache_set_limit(c, 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 10, 5, 512, b), 0);
  depot_cache_free(c);
}
END_TEST

/* A scan's pages never evict a scan's pages: a second pass of a scan
** longer than the cache hits on the pages the first pass left; a scan
** shorter than the cache evicts other reads' pages and fits whole. */
START_TEST(test_cache_scan_pages_do_not_flush_it){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(4, 512));
  unsigned char a[512], b[512];
  uint32_t i, nHit = 0;
  int iPass;
  for(iPass=0; iPass<2; iPass++){
    for(i=1; i<=10; i++){
      if( depot_cache_get(c, 1, i, 5, 512, b) ){
        ck_assert_int_eq(b[0], (int)i);
        nHit++;
        continue;
      }
      memset(a, (int)i, sizeof(a));
      depot_cache_put_scan(c, 1, i, 5, 512, a);
    }
  }
  ck_assert_uint_eq(nHit, 4);
  depot_cache_put(c, 1, 20, 5, 512, a);         /* not a scan: evicts */
  ck_assert_int_eq(depot_cache_get(c, 1, 20, 5, 512, b), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 5, 512)
                   + depot_cache_has(c, 1, 2, 5, 512)
                   + depot_cache_has(c, 1, 3, 5, 512)
                   + depot_cache_has(c, 1, 4, 5, 512), 3);
  depot_cache_free(c);
  c = depot_cache_new(depot_cache_bytes_for(4, 512));
  for(i=1; i<=4; i++) depot_cache_put(c, 1, i, 6, 512, a);
  for(iPass=0; iPass<2; iPass++){
    for(i=11; i<=13; i++){
      if( !depot_cache_get(c, 1, i, 5, 512, b) ){
        ck_assert_int_eq(iPass, 0);
        depot_cache_put_scan(c, 1, i, 5, 512, a);
      }
    }
  }
  ck_assert_int_eq(depot_cache_has(c, 1, 4, 6, 512), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 6, 512), 0);
  depot_cache_free(c);
}
END_TEST

/* The limit counts every byte the cache holds (pages, entry headers,
** table): at a limit of three 4 KiB pages, 1,000 pages put and read back
** keep the cache within it, holding the three most recent, and a smaller
** limit evicts at once down to it. */
START_TEST(test_cache_tiny_limit_holds_within_it){
  int64_t nLimit = depot_cache_bytes_for(3, 4096);
  DepotCache *c = depot_cache_new(nLimit);
  unsigned char a[4096], b[4096];
  uint32_t i;
  for(i=1; i<=1000; i++){
    memset(a, (int)(i & 0xff), sizeof(a));
    depot_cache_put(c, 1, i, 9, 4096, a);
    ck_assert_int_le(depot_cache_used(c), nLimit);
    ck_assert_int_eq(depot_cache_get(c, 1, i, 9, 4096, b), 1);
    ck_assert_int_eq(b[4095], (int)(i & 0xff));
  }
  ck_assert_int_eq(depot_cache_used(c), nLimit);
  ck_assert_int_eq(depot_cache_has(c, 1, 998, 9, 4096), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 997, 9, 4096), 0);
  depot_cache_set_limit(c, depot_cache_bytes_for(1, 4096));
  ck_assert_int_le(depot_cache_used(c), depot_cache_bytes_for(1, 4096));
  ck_assert_int_eq(depot_cache_has(c, 1, 1000, 9, 4096), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 999, 9, 4096), 0);
  depot_cache_free(c);
}
END_TEST

/* depot_cache_drop() removes one version of one page and nothing else;
** dropping what the cache does not hold changes nothing. */
START_TEST(test_cache_drop_removes_one_version){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(8, 512));
  unsigned char a[512], b[512];
  int64_t nUsed;
  memset(a, 7, sizeof(a));
  depot_cache_put(c, 1, 3, 5, 512, a);
  depot_cache_put(c, 1, 3, 6, 512, a);
  depot_cache_put(c, 2, 3, 5, 512, a);
  nUsed = depot_cache_used(c);
  depot_cache_drop(c, 1, 3, 5);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 5, 512), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 3, 6, 512, b), 1);
  ck_assert_int_eq(b[0], 7);
  ck_assert_int_eq(depot_cache_has(c, 2, 3, 5, 512), 1);
  ck_assert_int_lt(depot_cache_used(c), nUsed);
  nUsed = depot_cache_used(c);
  depot_cache_drop(c, 1, 3, 5);
  depot_cache_drop(c, 1, 4, 6);
  ck_assert_int_eq(depot_cache_used(c), nUsed);
  depot_cache_put(c, 1, 3, 5, 512, a);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 5, 512), 1);
  depot_cache_free(c);
}
END_TEST

/* Fill page a of szPage bytes with a pattern of (pgno, owner). */
static void cache_pattern(unsigned char *a, uint32_t szPage, uint32_t pgno,
                          uint64_t iOwner){
  uint32_t i;
  for(i=0; i<szPage; i++) a[i] = (unsigned char)(pgno*31 + iOwner*7 + i);
}

/* Put page (1, pgno, iOwner) of szPage bytes with its pattern. */
static void cache_put_pattern(DepotCache *c, uint32_t pgno, uint64_t iOwner,
                              uint32_t szPage){
  unsigned char a[8192];
  cache_pattern(a, szPage, pgno, iOwner);
  depot_cache_put(c, 1, pgno, iOwner, szPage, a);
}

/* 1 when the cache holds page (1, pgno, iOwner) with its pattern. */
static int cache_holds(DepotCache *c, uint32_t pgno, uint64_t iOwner,
                       uint32_t szPage){
  unsigned char a[8192], b[8192];
  if( !depot_cache_get(c, 1, pgno, iOwner, szPage, b) ) return 0;
  cache_pattern(a, szPage, pgno, iOwner);
  return memcmp(a, b, szPage)==0;
}

/* The pages (1, pgno, iOwner) with pgno from lo to hi (by iStep) that the
** cache holds, each asserted to read back with its pattern. */
static uint32_t cache_check_held(DepotCache *c, uint32_t lo, uint32_t hi,
                                 uint32_t iStep, uint64_t iOwner,
                                 uint32_t szPage){
  uint32_t i, nHeld = 0;
  for(i=lo; i<=hi; i+=iStep){
    if( depot_cache_has(c, 1, i, iOwner, szPage) ){
      ck_assert_int_eq(cache_holds(c, i, iOwner, szPage), 1);
      nHeld++;
    }
  }
  return nHeld;
}

/* Pages of two sizes share one cache (entries come from slabs of each
** size): every page reads back as it was put, and the cache holds at
** most its pages plus one partly used slab of each size. */
START_TEST(test_cache_slabs_hold_pages_of_two_sizes){
  int64_t nLimit = 32*1024*1024;
  DepotCache *c = depot_cache_new(nLimit);
  uint32_t i;
  for(i=1; i<=2000; i++){
    cache_put_pattern(c, i, 4, 4096);
    if( i%4==0 ){
      cache_put_pattern(c, i, 8, 8192);
    }
  }
  for(i=1; i<=2000; i++){
    ck_assert_int_eq(cache_holds(c, i, 4, 4096), 1);
    ck_assert_int_eq(cache_holds(c, i, 8, 8192), i%4==0);
  }
  ck_assert_int_le(depot_cache_used(c),
                   depot_cache_bytes_for(2000, 4096)
                   + depot_cache_bytes_for(500, 8192) + 2*256*1024);
  depot_cache_free(c);
}
END_TEST

/* Pages of one size evicting those of another (whose slabs they cannot
** reuse) keep the cache within its limit, plus 1/16 of it, plus a slab;
** the pages it keeps read back as they were put. */
START_TEST(test_cache_slabs_of_another_size_are_given_back){
  int64_t nLimit = 8*1024*1024;
  DepotCache *c = depot_cache_new(nLimit);
  uint32_t i;
  for(i=1; i<=2100; i++){
    cache_put_pattern(c, i, 4, 4096);
  }
  /* every other page recently used: evictions leave every slab half
  ** used */
  cache_check_held(c, 2, 2100, 2, 4, 4096);
  for(i=1; i<=2100; i++){
    cache_put_pattern(c, i, 8, 8192);
    ck_assert_int_le(depot_cache_used(c), nLimit + nLimit/16 + 256*1024);
  }
  for(i=2100; i>2000; i--) ck_assert_int_eq(cache_holds(c, i, 8, 8192), 1);
  cache_check_held(c, 1, 2100, 1, 4, 4096);
  depot_cache_free(c);
}
END_TEST

/* A cache that keeps being refilled past its limit, with pages dropped
** in between, stays within its limit plus one slab, and serves every
** page it has as it was put. */
START_TEST(test_cache_churn_stays_within_limit_and_a_slab){
  int64_t nLimit = 8*1024*1024;
  DepotCache *c = depot_cache_new(nLimit);
  uint32_t i;
  for(i=1; i<=12000; i++){
    cache_put_pattern(c, i, 1, 4096);
    if( i%3==0 ) depot_cache_drop(c, 1, i-1, 1);
    ck_assert_int_le(depot_cache_used(c), nLimit + nLimit/64);
  }
  /* most of 8 MiB of pages */
  ck_assert_int_gt(cache_check_held(c, 1, 12000, 1, 1, 4096), 1500);
  depot_cache_free(c);
}
END_TEST

/* Lowering the limit gives back the room of the slabs the evictions left
** partly used: the cache then holds at most the new limit, and the pages
** it kept read back as they were put, also after more puts. */
START_TEST(test_cache_lowered_limit_gives_slab_room_back){
  DepotCache *c = depot_cache_new(16*1024*1024);
  int64_t nLow = 1024*1024;
  uint32_t i;
  for(i=1; i<=3500; i++){
    cache_put_pattern(c, i, 2, 4096);
  }
  for(i=1; i<=3500; i+=2) depot_cache_drop(c, 1, i, 2);  /* every slab */
  depot_cache_set_limit(c, nLow);
  ck_assert_int_le(depot_cache_used(c), nLow);
  ck_assert_int_gt(cache_check_held(c, 1, 3500, 1, 2, 4096), 100);
  for(i=4000; i<4500; i++){
    cache_put_pattern(c, i, 2, 4096);
    ck_assert_int_le(depot_cache_used(c), nLow);
  }
  ck_assert_int_eq(cache_holds(c, 4499, 2, 4096), 1);
  depot_cache_free(c);
}
END_TEST

/* A bulk transaction's pages (one branch and owner) never evict its own:
** past the limit its first pages stay and the rest are not added, while
** they evict other entries; a read's page evicts them as any other. */
START_TEST(test_cache_bulk_pages_keep_the_first_part){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(4, 512));
  unsigned char a[512], b[512];
  uint32_t i;
  memset(a, 0, sizeof(a));
  depot_cache_put(c, 1, 100, 3, 512, a);
  depot_cache_put_scan(c, 1, 101, 3, 512, a);
  for(i=1; i<=10; i++){
    memset(a, (int)i, sizeof(a));
    depot_cache_put_bulk(c, 1, i, 7, 512, a);
  }
  ck_assert_int_eq(depot_cache_has(c, 1, 100, 3, 512), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 101, 3, 512), 0);
  for(i=1; i<=4; i++){
    ck_assert_int_eq(depot_cache_get(c, 1, i, 7, 512, b), 1);
    ck_assert_int_eq(b[0], (int)i);
  }
  for(i=5; i<=10; i++){
    ck_assert_int_eq(depot_cache_has(c, 1, i, 7, 512), 0);
  }
  depot_cache_put_bulk(c, 1, 11, 8, 512, a);    /* another owner evicts */
  ck_assert_int_eq(depot_cache_has(c, 1, 11, 8, 512), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 7, 512), 0);
  depot_cache_put(c, 1, 12, 7, 512, a);         /* a read evicts */
  ck_assert_int_eq(depot_cache_has(c, 1, 12, 7, 512), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, 7, 512), 0);
  depot_cache_free(c);
}
END_TEST

static int keep_even(void *pArg, uint32_t pgno){
  (void)pArg;
  return pgno%2==0;
}

/* depot_cache_rekey() gives the entries of one branch and owner that the
** callback keeps the new owner, with their content, and drops the others
** (all of them without a callback); an entry already under the new key
** wins; other branches and owners stay as they were.  A staged entry
** (DEPOT_CACHE_STAGED) is kept from scans' pages until it is rekeyed. */
START_TEST(test_cache_rekey_moves_kept_entries){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(16, 512));
  unsigned char a[512], b[512];
  uint64_t iStaged = 7|DEPOT_CACHE_STAGED;
  uint32_t i;
  for(i=1; i<=4; i++){
    memset(a, (int)i, sizeof(a));
    depot_cache_put(c, 1, i, iStaged, 512, a);
  }
  memset(a, 0x44, sizeof(a));
  depot_cache_put(c, 1, 4, 7, 512, a);          /* already published */
  depot_cache_put(c, 2, 2, iStaged, 512, a);    /* another branch */
  depot_cache_put(c, 1, 2, 6, 512, a);          /* another owner */
  depot_cache_rekey(c, 1, iStaged, 7, keep_even, 0);
  for(i=1; i<=4; i++){
    ck_assert_int_eq(depot_cache_has(c, 1, i, iStaged, 512), 0);
  }
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 7, 512), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 7, 512), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 2, 7, 512, b), 1);
  ck_assert_int_eq(b[0], 2);
  ck_assert_int_eq(depot_cache_get(c, 1, 4, 7, 512, b), 1);
  ck_assert_int_eq(b[0], 0x44);
  ck_assert_int_eq(depot_cache_has(c, 2, 2, iStaged, 512), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, 6, 512), 1);
  memset(a, 1, sizeof(a));
  depot_cache_put(c, 2, 5, iStaged, 512, a);
  depot_cache_rekey(c, 2, iStaged, 7, 0, 0);
  ck_assert_int_eq(depot_cache_has(c, 2, 2, iStaged, 512), 0);
  ck_assert_int_eq(depot_cache_has(c, 2, 5, iStaged, 512), 0);
  ck_assert_int_eq(depot_cache_has(c, 2, 5, 7, 512), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, 7, 512), 1);
  depot_cache_free(c);
  /* a staged page counts as a scan's (a scan's page does not evict it)
  ** until it is published */
  c = depot_cache_new(depot_cache_bytes_for(2, 512));
  depot_cache_put_bulk(c, 1, 2, iStaged, 512, a);
  depot_cache_put_bulk(c, 1, 4, iStaged, 512, a);
  depot_cache_put_scan(c, 1, 9, 3, 512, a);
  ck_assert_int_eq(depot_cache_has(c, 1, 9, 3, 512), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, iStaged, 512), 1);
  depot_cache_rekey(c, 1, iStaged, 7, keep_even, 0);
  depot_cache_put_scan(c, 1, 9, 3, 512, a);
  ck_assert_int_eq(depot_cache_has(c, 1, 9, 3, 512), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, 7, 512), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 4, 7, 512), 1);
  depot_cache_free(c);
}
END_TEST

/* ---- the cache's spill file ---- */

/* Fill a 4096-byte page with bytes derived from (pgno, owner). */
static void spill_page(unsigned char *a, uint32_t pgno, uint64_t iOwner){
  int i;
  for(i=0; i<4096; i++) a[i] = (unsigned char)(pgno*7 + iOwner*13 + i);
}

/* The spilled pages' headers (under 80 bytes each) count in the limit: the
** tests below give the cache room for its pages and 1000 (3000) bytes. */

/* Pages evicted from a cache of 3 pages go to the spill file: every one
** of 40 pages is served afterwards, with its own bytes, while the cache
** stays within its limit, and the reads came from the file. */
START_TEST(test_cache_spill_serves_evicted_pages){
  int64_t nLimit = depot_cache_bytes_for(3, 4096) + 3000;
  DepotCache *c = depot_cache_new(nLimit);
  unsigned char a[4096], b[4096];
  int64_t nW0, nR0, nW1, nR1;
  uint32_t i;
  depot_cache_set_spill_limit(c, 64*4096);
  ck_assert_int_eq(depot_cache_spill_limit(c), 64*4096);
  depot_cache_spill_counters(&nW0, &nR0);
  for(i=1; i<=40; i++){
    spill_page(a, i, 9);
    depot_cache_put(c, 1, i, 9, 4096, a);
    ck_assert_int_le(depot_cache_used(c), nLimit);
  }
  for(i=1; i<=40; i++){
    ck_assert_int_eq(depot_cache_has(c, 1, i, 9, 4096), 1);
    memset(b, 0, sizeof(b));
    ck_assert_int_eq(depot_cache_get(c, 1, i, 9, 4096, b), 1);
    spill_page(a, i, 9);
    ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  }
  ck_assert_int_eq(depot_cache_get(c, 1, 41, 9, 4096, b), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 5, 8, 4096, b), 0);
  depot_cache_spill_counters(&nW1, &nR1);
  ck_assert_int_ge(nW1-nW0, 37);
  ck_assert_int_ge(nR1-nR0, 37);
  ck_assert_int_le(depot_cache_spill_bytes(c), 64*4096);
  ck_assert_int_ge(depot_cache_spill_bytes(c), 37*4096);
  depot_cache_free(c);
}
END_TEST

/* The spill file holds at most its limit: past it the least recently
** used spilled page gives its slot up (and misses); a lower limit drops
** every spilled page; 0 turns spilling off; pages of another size than
** the first spilled are not spilled. */
START_TEST(test_cache_spill_limit_drops_the_oldest){
  int64_t nLimit = depot_cache_bytes_for(2, 4096) + 1000;
  DepotCache *c = depot_cache_new(nLimit);
  unsigned char a[4096], b[4096];
  uint32_t i;
  depot_cache_set_spill_limit(c, 4*4096);
  for(i=1; i<=20; i++){
    spill_page(a, i, 3);
    depot_cache_put(c, 1, i, 3, 4096, a);
  }
  ck_assert_int_le(depot_cache_spill_bytes(c), 4*4096);
  for(i=1; i<=20; i++){
    ck_assert_int_eq(depot_cache_has(c, 1, i, 3, 4096), i>=15);
  }
  ck_assert_int_eq(depot_cache_get(c, 1, 15, 3, 4096, b), 1);
  spill_page(a, 15, 3);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  depot_cache_set_spill_limit(c, 4096);          /* below what it has */
  ck_assert_int_eq(depot_cache_spill_bytes(c), 0);
  depot_cache_set_spill_limit(c, 0);
  for(i=21; i<=30; i++){
    spill_page(a, i, 3);
    depot_cache_put(c, 1, i, 3, 4096, a);
  }
  ck_assert_int_eq(depot_cache_spill_bytes(c), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 21, 3, 4096), 0);
  depot_cache_free(c);
  /* slots take the first spilled page's size */
  c = depot_cache_new(depot_cache_bytes_for(1, 4096) + 1000);
  depot_cache_set_spill_limit(c, 64*4096);
  spill_page(a, 1, 1);
  depot_cache_put(c, 1, 1, 1, 4096, a);
  depot_cache_put(c, 1, 2, 1, 4096, a);          /* spills page 1 */
  depot_cache_put(c, 1, 3, 1, 2048, a);          /* spills page 2 */
  depot_cache_put(c, 1, 4, 1, 4096, a);          /* 2048: not spilled */
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 1, 4096), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, 1, 4096), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 1, 2048), 0);
  depot_cache_free(c);
}
END_TEST

/* A spilled page that is read goes back to memory and keeps its slot:
** evicted again, it is not written again. */
START_TEST(test_cache_spill_read_keeps_the_slot){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(1, 4096) + 1000);
  unsigned char a[4096], b[4096];
  int64_t nW0, nR0, nW1, nR1;
  depot_cache_set_spill_limit(c, 64*4096);
  depot_cache_spill_counters(&nW0, &nR0);
  spill_page(a, 1, 4);
  depot_cache_put(c, 1, 1, 4, 4096, a);
  spill_page(a, 2, 4);
  depot_cache_put(c, 1, 2, 4, 4096, a);          /* writes page 1 */
  ck_assert_int_eq(depot_cache_get(c, 1, 1, 4, 4096, b), 1); /* writes 2 */
  ck_assert_int_eq(depot_cache_get(c, 1, 2, 4, 4096, b), 1); /* 1: none */
  ck_assert_int_eq(depot_cache_get(c, 1, 1, 4, 4096, b), 1); /* 2: none */
  spill_page(a, 1, 4);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  depot_cache_spill_counters(&nW1, &nR1);
  ck_assert_int_eq(nW1-nW0, 2);
  ck_assert_int_eq(nR1-nR0, 3);
  ck_assert_int_eq(depot_cache_spill_bytes(c), 2*4096);
  depot_cache_free(c);
}
END_TEST

/* A scan's read of a spilled page (depot_cache_get_scan()) serves its
** bytes from the slot and leaves it there: the page in memory stays, no
** slot is written; an ordinary read then brings it back to memory. */
START_TEST(test_cache_scan_read_of_spilled_page_stays_spilled){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(1, 4096) + 1000);
  unsigned char a[4096], b[4096];
  int64_t nW0, nR0, nW1, nR1;
  depot_cache_set_spill_limit(c, 64*4096);
  spill_page(a, 1, 4);
  depot_cache_put(c, 1, 1, 4, 4096, a);
  spill_page(a, 2, 4);
  depot_cache_put(c, 1, 2, 4, 4096, a);          /* writes page 1 */
  depot_cache_spill_counters(&nW0, &nR0);
  ck_assert_int_eq(depot_cache_get_scan(c, 1, 1, 4, 4096, b), 1);
  ck_assert_int_eq(depot_cache_get_scan(c, 1, 1, 4, 4096, b), 1);
  spill_page(a, 1, 4);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  depot_cache_spill_counters(&nW1, &nR1);
  ck_assert_int_eq(nW1-nW0, 0);                  /* page 2 stayed */
  ck_assert_int_eq(nR1-nR0, 2);
  ck_assert_int_eq(depot_cache_get_scan(c, 1, 2, 4, 4096, b), 1);
  depot_cache_spill_counters(&nW1, &nR1);
  ck_assert_int_eq(nR1-nR0, 2);                  /* from memory */
  ck_assert_int_eq(depot_cache_get(c, 1, 1, 4, 4096, b), 1);  /* writes 2 */
  depot_cache_spill_counters(&nW1, &nR1);
  ck_assert_int_eq(nW1-nW0, 1);
  ck_assert_int_eq(nR1-nR0, 3);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  depot_cache_free(c);
}
END_TEST

/* depot_cache_put_spill() puts a page in the spill file only: it is
** served from there, rekeyed or dropped as any spilled page, and the
** cache's memory holds its header only. */
START_TEST(test_cache_put_spill_bypasses_memory){
  int64_t nLimit = depot_cache_bytes_for(1, 4096) + 1000;
  DepotCache *c = depot_cache_new(nLimit);
  unsigned char a[4096], b[4096];
  uint64_t iStaged = 3|DEPOT_CACHE_STAGED;
  uint32_t i;
  int64_t nUsed0;
  spill_page(a, 7, 1);
  depot_cache_put(c, 1, 7, 1, 4096, a);          /* fills the memory */
  nUsed0 = depot_cache_used(c);
  depot_cache_put_spill(c, 1, 1, iStaged, 4096, a);
  ck_assert_int_eq(depot_cache_has(c, 1, 1, iStaged, 4096), 0);  /* off */
  depot_cache_set_spill_limit(c, 64*4096);
  for(i=1; i<=4; i++){
    spill_page(a, i, 3);
    depot_cache_put_spill(c, 1, i, iStaged, 4096, a);
  }
  ck_assert_int_le(depot_cache_used(c), nUsed0 + 4*100);
  ck_assert_int_eq(depot_cache_has(c, 1, 7, 1, 4096), 1);
  depot_cache_rekey(c, 1, iStaged, 3, keep_even, 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 3, 4096), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 3, 4096), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, iStaged, 4096), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 2, 3, 4096, b), 1);
  spill_page(a, 2, 3);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 4, 3, 4096, b), 1);
  spill_page(a, 4, 3);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  depot_cache_free(c);
  /* it takes free slots only: a full file keeps the pages it has */
  c = depot_cache_new(nLimit);
  depot_cache_set_spill_limit(c, 2*4096);
  for(i=1; i<=3; i++){
    spill_page(a, i, 3);
    depot_cache_put_spill(c, 1, i, 3, 4096, a);
  }
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 3, 4096), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 2, 3, 4096), 1);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 3, 4096), 0);
  ck_assert_int_eq(depot_cache_spill_bytes(c), 2*4096);
  depot_cache_free(c);
}
END_TEST

/* A child forked from a process whose cache has spilled pages does not
** use the parent's file: its copies of those entries miss, it spills to
** a file of its own, and the parent's pages are intact afterwards. */
START_TEST(test_cache_spill_after_fork_uses_a_file_of_its_own){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(1, 4096) + 1000);
  unsigned char a[4096], b[4096];
  uint32_t i;
  pid_t pid;
  int st = 0;
  depot_cache_set_spill_limit(c, 64*4096);
  for(i=1; i<=4; i++){
    spill_page(a, i, 8);
    depot_cache_put(c, 1, i, 8, 4096, a);
  }
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    int bad = 0;
    if( depot_cache_get(c, 1, 1, 8, 4096, b)!=0 ) bad |= 1;
    for(i=1; i<=4; i++){                   /* other bytes, same keys */
      memset(a, 0xEE, sizeof(a));
      depot_cache_put(c, 1, i, 8, 4096, a);
    }
    if( depot_cache_get(c, 1, 2, 8, 4096, b)!=1 || b[0]!=0xEE ) bad |= 2;
    _exit(bad);
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  for(i=1; i<=3; i++){
    ck_assert_int_eq(depot_cache_get(c, 1, i, 8, 4096, b), 1);
    spill_page(a, i, 8);
    ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  }
  depot_cache_free(c);
}
END_TEST

/* A spilled page is dropped by depot_cache_drop() and moved or dropped by
** depot_cache_rekey() as a page in memory is; staged pages never spill. */
START_TEST(test_cache_spill_drop_and_rekey){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(1, 4096) + 1000);
  unsigned char a[4096], b[4096];
  uint64_t iStaged = 7|DEPOT_CACHE_STAGED;
  uint32_t i;
  depot_cache_set_spill_limit(c, 64*4096);
  for(i=1; i<=6; i++){
    spill_page(a, i, 5);
    depot_cache_put(c, 1, i, 5, 4096, a);
  }
  depot_cache_drop(c, 1, 2, 5);
  ck_assert_int_eq(depot_cache_get(c, 1, 2, 5, 4096, b), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 3, 5, 4096, b), 1);
  depot_cache_rekey(c, 1, 5, 6, keep_even, 0);
  for(i=1; i<=6; i++){
    ck_assert_int_eq(depot_cache_has(c, 1, i, 5, 4096), 0);
    ck_assert_int_eq(depot_cache_has(c, 1, i, 6, 4096), i%2==0 && i!=2);
  }
  ck_assert_int_eq(depot_cache_get(c, 1, 4, 6, 4096, b), 1);
  spill_page(a, 4, 5);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  /* staged pages are dropped, not spilled, when evicted */
  for(i=1; i<=3; i++){
    spill_page(a, i, 1);
    depot_cache_put_bulk(c, 2, i, iStaged, 4096, a);
  }
  depot_cache_put(c, 2, 9, 1, 4096, a);
  ck_assert_int_eq(depot_cache_has(c, 2, 1, iStaged, 4096)
                   + depot_cache_has(c, 2, 2, iStaged, 4096)
                   + depot_cache_has(c, 2, 3, iStaged, 4096), 0);
  depot_cache_free(c);
}
END_TEST

/* A failed spill write drops the page it was to keep, a failed read the
** page it was to serve: each then misses, and the cache goes on. */
START_TEST(test_cache_spill_io_errors_drop_pages){
  DepotCache *c = depot_cache_new(depot_cache_bytes_for(1, 4096) + 1000);
  unsigned char a[4096], b[4096];
  uint32_t i;
  depot_cache_set_spill_limit(c, 64*4096);
  spill_page(a, 1, 2);
  depot_cache_put(c, 1, 1, 2, 4096, a);
  depot_cache_test_spill_fail = 1;
  depot_cache_put(c, 1, 2, 2, 4096, a);          /* page 1's write fails */
  ck_assert_int_eq(depot_cache_test_spill_fail, 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 1, 2, 4096), 0);
  for(i=3; i<=5; i++) depot_cache_put(c, 1, i, 2, 4096, a);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 2, 4096), 1);   /* spilled */
  depot_cache_test_spill_fail = 1;
  ck_assert_int_eq(depot_cache_get(c, 1, 3, 2, 4096, b), 0);
  ck_assert_int_eq(depot_cache_has(c, 1, 3, 2, 4096), 0);
  ck_assert_int_eq(depot_cache_get(c, 1, 4, 2, 4096, b), 1);
  ck_assert_int_eq(memcmp(a, b, sizeof(a)), 0);
  depot_cache_test_spill_fail = 0;
  depot_cache_free(c);
}
END_TEST

/* txbuf_rewritten() tells a page put again while the buffer held it from
** a page put once, and forgets it when the page leaves the buffer. */
START_TEST(test_txbuf_rewritten_marks_pages_put_again){
  TxBuf t;
  unsigned char a[512];
  memset(&t, 0, sizeof(t));
  memset(a, 1, sizeof(a));
  ck_assert_int_eq(txbuf_put(&t, 3, a, 512), SQLITE_OK);
  ck_assert_int_eq(txbuf_put(&t, 4, a, 512), SQLITE_OK);
  ck_assert_int_eq(txbuf_rewritten(&t, 3, 512), 0);
  a[0] = 2;
  ck_assert_int_eq(txbuf_put(&t, 3, a, 512), SQLITE_OK);
  ck_assert_int_eq(txbuf_rewritten(&t, 3, 512), 1);
  ck_assert_int_eq(txbuf_rewritten(&t, 4, 512), 0);
  ck_assert_int_eq(txbuf_rewritten(&t, 5, 512), 0);
  ck_assert_int_eq(txbuf_get(&t, 3)[0], 2);
  txbuf_drop(&t, 3);
  ck_assert_int_eq(txbuf_rewritten(&t, 3, 512), 0);
  ck_assert_int_eq(txbuf_put(&t, 3, a, 512), SQLITE_OK);
  ck_assert_int_eq(txbuf_rewritten(&t, 3, 512), 0);
  txbuf_clear(&t);
}
END_TEST

START_TEST(test_txbuf_truncate_drops_pages_above){
  TxBuf t;
  unsigned char a[512];
  uint32_t *aPgno = 0, n = 0, i;
  memset(&t, 0, sizeof(t));
  for(i=1; i<=200; i++){
    memset(a, (int)i, sizeof(a));
    ck_assert_int_eq(txbuf_put(&t, i*2, a, 512), SQLITE_OK);
  }
  ck_assert_int_eq(txbuf_get(&t, 20)[0], 10);
  ck_assert_int_eq(txbuf_truncate(&t, 100), SQLITE_OK);
  ck_assert_ptr_null(txbuf_get(&t, 102));
  ck_assert_ptr_nonnull(txbuf_get(&t, 100));
  ck_assert_int_eq(txbuf_sorted(&t, &aPgno, &n), SQLITE_OK);
  ck_assert_uint_eq(n, 50);
  for(i=1; i<n; i++) ck_assert_uint_lt(aPgno[i-1], aPgno[i]);
  sqlite3_free(aPgno);
  txbuf_clear(&t);
  ck_assert_ptr_null(txbuf_get(&t, 2));
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("vfs");
  TCase *tc = tcase_create("store");
  tcase_add_test(tc, test_store_put_get_clear_round_trip);
  tcase_add_test(tc, test_store_data_version_moves_on_every_change);
  tcase_add_test(tc, test_store_scan_orders_bounds_and_limits);
  tcase_add_test(tc, test_store_small_and_big_values_read_alike);
  tcase_add_test(tc, test_store_migration_killed_loses_nothing);
  tcase_add_test(tc, test_store_migration_io_errors_lose_nothing);
  tcase_add_test(tc, test_store_migration_by_two_processes_at_once);
  tcase_add_test(tc, test_store_open_while_the_write_lock_is_held_migrates_later);
  tcase_add_test(tc, test_store_rollback_discards_and_commit_keeps);
  tcase_add_test(tc, test_store_add_counts_and_rejects_non_counters);
  tcase_add_test(tc, test_store_value_over_max_is_toobig);
  tcase_add_test(tc, test_store_missing_file_without_create_fails);
  suite_add_tcase(s, tc);
  tc = tcase_create("ltx");
  tcase_add_loop_test(tc, test_ltx_round_trip_every_page_size, 0,
                      (int)(sizeof(aPageSize)/sizeof(aPageSize[0])));
  tcase_add_test(tc, test_ltx_every_truncation_is_corrupt);
  tcase_add_test(tc, test_ltx_every_bit_flip_is_corrupt);
  tcase_add_test(tc, test_ltx_frame_bit_flip_is_corrupt_or_harmless);
  tcase_add_test(tc, test_ltx_crc64_matches_reference_vector);
  tcase_add_test(tc, test_ltx_crc64_folding_matches_tables);
  tcase_add_test(tc, test_ltx_crc64_combine_matches_joined_bytes);
  suite_add_tcase(s, tc);
  tc = tcase_create("layout");
  tcase_add_test(tc, test_layout_pidx_keys_sort_by_page_then_txid);
  tcase_add_test(tc, test_layout_rows_round_trip_and_reject_bad_bytes);
  tcase_add_test(tc, test_layout_names_must_be_1_to_255_bytes);
  tcase_add_test(tc, test_layout_branch_row_with_bad_name_is_corrupt);
  tcase_add_test(tc, test_layout_commit_row_with_huge_blob_size_is_corrupt);
  tcase_add_test(tc, test_cache_keeps_recent_pages_within_limit);
  tcase_add_test(tc, test_cache_tiny_limit_holds_within_it);
  tcase_add_test(tc, test_cache_scan_pages_do_not_flush_it);
  tcase_add_test(tc, test_cache_drop_removes_one_version);
  tcase_add_test(tc, test_cache_slabs_hold_pages_of_two_sizes);
  tcase_add_test(tc, test_cache_slabs_of_another_size_are_given_back);
  tcase_add_test(tc, test_cache_churn_stays_within_limit_and_a_slab);
  tcase_add_test(tc, test_cache_lowered_limit_gives_slab_room_back);
  tcase_add_test(tc, test_cache_rekey_moves_kept_entries);
  tcase_add_test(tc, test_cache_spill_serves_evicted_pages);
  tcase_add_test(tc, test_cache_spill_limit_drops_the_oldest);
  tcase_add_test(tc, test_cache_spill_read_keeps_the_slot);
  tcase_add_test(tc, test_cache_scan_read_of_spilled_page_stays_spilled);
  tcase_add_test(tc, test_cache_spill_drop_and_rekey);
  tcase_add_test(tc, test_cache_put_spill_bypasses_memory);
  tcase_add_test(tc, test_cache_spill_after_fork_uses_a_file_of_its_own);
  tcase_add_test(tc, test_cache_spill_io_errors_drop_pages);
  tcase_add_test(tc, test_cache_bulk_pages_keep_the_first_part);
  tcase_add_test(tc, test_txbuf_rewritten_marks_pages_put_again);
  tcase_add_test(tc, test_txbuf_truncate_drops_pages_above);
  suite_add_tcase(s, tc);
  return s;
}
