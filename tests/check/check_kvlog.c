/*
** check_kvlog.c -- the "kvlog" suite: the kv_log storage engine
** (ext/kv/logstore.h): append/sync/reopen, newest-wins load, torn tails,
** corruption reports, snapshots and cursors, compaction and its crash
** safety (stopped at every step in-process, killed at every step in a
** child, failed writes and syncs), SIGKILL of a child running a stream
** of applies, syncs and compactions, and the compaction of a store two
** handles share (as two processes would).
**
** The SIGKILL test kills 4 children in make check, each at a random point
** 0-80 ms into its run (its open included), all continuing one store;
** DEPOT_TORTURE_ITERS=n in the environment runs n kills instead (1500 have
** been run while developing it).
*/
#include "config.h"
#define SQLITE_CORE 1  /* map.h pulls in sqlite3ext.h through kv.h */
#include "tests/check/harness.h"
#include "ext/kv/logstore.h"
#include "ext/kv/map.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers -- */

static KvLogStore *tk_open_cfg(const char *zDir, const KvLogConfig *pCfg){
  KvLogStore *p = 0;
  char *zErr = 0;
  int rc = kv_logstore_open(zDir, pCfg, &p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "open %s: rc=%d %s", zDir, rc,
                zErr ? zErr : "");
  sqlite3_free(zErr);
  return p;
}

static KvLogStore *tk_open(const char *zDir, int64_t szFile){
  KvLogConfig cfg;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szFile = szFile;
  cfg.szDeadTrigger = -1;
  return tk_open_cfg(zDir, &cfg);
}

/* Open expecting failure; returns rc and the message. */
static int tk_open_fails(const char *zDir, char **pzErr){
  KvLogStore *p = 0;
  int rc = kv_logstore_open(zDir, 0, &p, pzErr);
  ck_assert_ptr_null(p);
  return rc;
}

static void tk_put(KvLogStore *p, uint64_t cid, const char *zKey,
                   const char *zVal){
  KvLogAction a;
  char *zErr = 0;
  int rc;
  memset(&a, 0, sizeof(a));
  a.bDelete = (zVal==0);
  a.aKey = (const uint8_t*)zKey; a.nKey = (int)strlen(zKey);
  a.aVal = (const uint8_t*)zVal; a.nVal = zVal ? (int)strlen(zVal) : 0;
  rc = kv_logstore_apply(p, cid, 1, &a, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "apply %s: rc=%d %s", zKey, rc,
                zErr ? zErr : "");
}

static void tk_sync(KvLogStore *p){
  char *zErr = 0;
  int rc = kv_logstore_sync(p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "sync: rc=%d %s", rc, zErr ? zErr : "");
}

/* The value of zKey as a sqlite3_malloc'd string, or NULL if absent. */
static char *tk_get(KvLogStore *p, const char *zKey){
  KvLogBuf buf = {0, 0, 0};
  char *zErr = 0;
  char *zOut = 0;
  int bFound = 0;
  int rc = kv_logstore_get(p, zKey, (int)strlen(zKey), &buf, 0, &bFound,
                           &zErr);
  ck_assert_msg(rc==SQLITE_OK, "get %s: rc=%d %s", zKey, rc,
                zErr ? zErr : "");
  if( bFound ) zOut = sqlite3_mprintf("%.*s", buf.n, (char*)buf.a);
  kv_logbuf_free(&buf);
  return zOut;
}

static void tk_expect(KvLogStore *p, const char *zKey, const char *zVal){
  char *z = tk_get(p, zKey);
  if( zVal==0 ){
    ck_assert_msg(z==0, "%s: expected absent, got %s", zKey, z);
  }else{
    ck_assert_msg(z!=0, "%s: expected %s, got nothing", zKey, zVal);
    ck_assert_str_eq(z, zVal);
  }
  sqlite3_free(z);
}

static KvLogStats tk_stats(KvLogStore *p){
  KvLogStats st;
  kv_logstore_stats(p, &st);
  return st;
}

static void tk_compact(KvLogStore *p){
  char *zErr = 0;
  int rc = kv_logstore_compact(p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "compact: rc=%d %s", rc, zErr ? zErr : "");
}

static char *tk_file(const char *zDir, unsigned iNum, const char *zExt){
  return sqlite3_mprintf("%s/%08u.%s", zDir, iNum, zExt);
}

static int tk_exists(const char *zPath){
  struct stat st;
  return stat(zPath, &st)==0;
}

static int64_t tk_size(const char *zPath){
  struct stat st;
  ck_assert_int_eq(stat(zPath, &st), 0);
  return (int64_t)st.st_size;
}

static int tk_count_files(const char *zDir, const char *zSuffix){
  DIR *d = opendir(zDir);
  struct dirent *e;
  int n = 0;
  ck_assert_ptr_nonnull(d);
  while( (e = readdir(d))!=0 ){
    size_t l = strlen(e->d_name), s = strlen(zSuffix);
    if( l>s && strcmp(e->d_name+l-s, zSuffix)==0 ) n++;
  }
  closedir(d);
  return n;
}

/* Every data file of zDir is at most szFile bytes. */
static void tk_assert_files_bounded(const char *zDir, int64_t szFile){
  DIR *d = opendir(zDir);
  struct dirent *e;
  ck_assert_ptr_nonnull(d);
  while( (e = readdir(d))!=0 ){
    if( strstr(e->d_name, ".klog") || strstr(e->d_name, ".kmrg") ){
      char *z = sqlite3_mprintf("%s/%s", zDir, e->d_name);
      ck_assert_msg(tk_size(z)<=szFile, "%s is %lld bytes", z,
                    (long long)tk_size(z));
      sqlite3_free(z);
    }
  }
  closedir(d);
}

static void tk_flip(const char *zPath, int64_t iOff){
  int fd = open(zPath, O_RDWR);
  unsigned char c;
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pread(fd, &c, 1, iOff), 1);
  c ^= 0x5a;
  ck_assert_int_eq(pwrite(fd, &c, 1, iOff), 1);
  close(fd);
}

static void tk_truncate(const char *zPath, int64_t n){
  ck_assert_int_eq(truncate(zPath, n), 0);
}

static void tk_append_bytes(const char *zPath, const void *p, size_t n){
  int fd = open(zPath, O_WRONLY|O_APPEND);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq((int)write(fd, p, n), (int)n);
  close(fd);
}

/* ------------------------------------------- deterministic workload -- */

/* Transaction cid of the generated stream: 1..4 actions over NKEY keys,
** about one in five a delete. */
#define TK_NKEY 97
typedef struct TkModel TkModel;
struct TkModel { char *az[TK_NKEY]; };

static int tk_gen(uint64_t cid, KvLogAction *aA, char aaKey[][16],
                  char aaVal[][48]){
  int n = 1 + (int)(cid%4), j;
  for(j=0; j<n; j++){
    int k = (int)((cid*7 + (uint64_t)j*13) % TK_NKEY);
    memset(&aA[j], 0, sizeof(aA[j]));
    snprintf(aaKey[j], 16, "key%03d", k);
    aA[j].aKey = (const uint8_t*)aaKey[j];
    aA[j].nKey = (int)strlen(aaKey[j]);
    if( (cid+j)%5==0 ){
      aA[j].bDelete = 1;
    }else{
      snprintf(aaVal[j], 48, "v%llu.%d%.*s", (unsigned long long)cid, j,
               (int)(cid%17), "xxxxxxxxxxxxxxxxxx");
      aA[j].aVal = (const uint8_t*)aaVal[j];
      aA[j].nVal = (int)strlen(aaVal[j]);
    }
  }
  return n;
}

static void tk_model_apply(TkModel *m, uint64_t cid){
  KvLogAction aA[4];
  char aaKey[4][16], aaVal[4][48];
  int n = tk_gen(cid, aA, aaKey, aaVal), j;
  for(j=0; j<n; j++){
    int k = atoi(aaKey[j]+3);
    sqlite3_free(m->az[k]);
    m->az[k] = aA[j].bDelete ? 0 : sqlite3_mprintf("%s", aaVal[j]);
  }
}

static void tk_model_free(TkModel *m){
  int k;
  for(k=0; k<TK_NKEY; k++) sqlite3_free(m->az[k]);
  memset(m, 0, sizeof(*m));
}

static int tk_apply_gen(KvLogStore *p, uint64_t cid, char **pzErr){
  KvLogAction aA[4];
  char aaKey[4][16], aaVal[4][48];
  int n = tk_gen(cid, aA, aaKey, aaVal);
  return kv_logstore_apply(p, cid, n, aA, pzErr);
}

static void tk_apply_range(KvLogStore *p, uint64_t iFrom, uint64_t iTo){
  uint64_t c;
  for(c=iFrom; c<=iTo; c++){
    char *zErr = 0;
    int rc = tk_apply_gen(p, c, &zErr);
    ck_assert_msg(rc==SQLITE_OK, "apply %llu: %d %s", (unsigned long long)c,
                  rc, zErr ? zErr : "");
  }
}

/* The store holds exactly the model state after transactions 1..nCid. */
static void tk_check_model(KvLogStore *p, uint64_t nCid){
  TkModel m;
  uint64_t c;
  int k, nLive = 0;
  memset(&m, 0, sizeof(m));
  for(c=1; c<=nCid; c++) tk_model_apply(&m, c);
  for(k=0; k<TK_NKEY; k++){
    char zKey[16];
    snprintf(zKey, sizeof(zKey), "key%03d", k);
    tk_expect(p, zKey, m.az[k]);
    if( m.az[k] ) nLive++;
  }
  ck_assert_int_eq(tk_stats(p).nLive, nLive);
  tk_model_free(&m);
}

/* ------------------------------------------------------ round trips -- */

START_TEST(test_kvlog_apply_sync_reopen_round_trip){
  char *zDir = th_tmpdir("kvlog-rt");
  KvLogStore *p = tk_open(zDir, 0);
  KvLogAction a[2];
  uint8_t aBin[3] = { 0, 0xff, 0 };
  KvLogBuf buf = {0, 0, 0};
  uint64_t cid = 0;
  int bFound = 0;
  memset(a, 0, sizeof(a));
  a[0].aKey = (const uint8_t*)"alpha"; a[0].nKey = 5;
  a[0].aVal = (const uint8_t*)"one"; a[0].nVal = 3;
  a[1].aKey = aBin; a[1].nKey = 3;
  a[1].aVal = 0; a[1].nVal = 0;                      /* empty value */
  ck_assert_int_eq(kv_logstore_apply(p, 7, 2, a, 0), SQLITE_OK);
  tk_expect(p, "alpha", "one");                      /* visible at once */
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 0);
  tk_expect(p, "alpha", "one");
  ck_assert_int_eq(kv_logstore_get(p, aBin, 3, &buf, &cid, &bFound, 0),
                   SQLITE_OK);
  ck_assert_int_eq(bFound, 1);
  ck_assert_int_eq(buf.n, 0);
  ck_assert_uint_eq(cid, 7);
  ck_assert_uint_eq(tk_stats(p).maxCid, 7);
  ck_assert_int_eq(tk_stats(p).nLive, 2);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_newest_wins_across_files_and_after_reopen){
  char *zDir = th_tmpdir("kvlog-newest");
  KvLogStore *p = tk_open(zDir, 600);     /* tiny files: many rolls */
  tk_apply_range(p, 1, 400);
  ck_assert_int_gt(tk_stats(p).nFile, 10);
  tk_assert_files_bounded(zDir, 600);
  tk_check_model(p, 400);
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 600);
  tk_check_model(p, 400);
  ck_assert_uint_eq(tk_stats(p).maxCid, 400);
  tk_apply_range(p, 401, 450);             /* appends continue after load */
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 600);
  tk_check_model(p, 450);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_delete_hides_older_records_after_reopen){
  char *zDir = th_tmpdir("kvlog-del");
  KvLogStore *p = tk_open(zDir, 200);
  tk_put(p, 1, "k", "old");
  tk_put(p, 2, "other", "x");
  tk_put(p, 3, "k", 0);                   /* delete, in a later file */
  tk_expect(p, "k", 0);
  ck_assert_int_eq(tk_stats(p).nTomb, 1);
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 200);
  tk_expect(p, "k", 0);
  tk_expect(p, "other", "x");
  ck_assert_int_eq(tk_stats(p).nLive, 1);
  ck_assert_int_eq(tk_stats(p).nTomb, 1);
  tk_put(p, 4, "k", "new");               /* re-insert after delete */
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 200);
  tk_expect(p, "k", "new");
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_cids_must_increase){
  char *zDir = th_tmpdir("kvlog-cid");
  KvLogStore *p = tk_open(zDir, 0);
  KvLogAction a;
  char *zErr = 0;
  memset(&a, 0, sizeof(a));
  a.aKey = (const uint8_t*)"k"; a.nKey = 1;
  tk_put(p, 10, "k", "v");
  ck_assert_int_eq(kv_logstore_apply(p, 10, 1, &a, &zErr), SQLITE_MISUSE);
  ck_assert_ptr_nonnull(strstr(zErr, "commit id 10 is not above"));
  sqlite3_free(zErr);
  ck_assert_int_eq(kv_logstore_apply(p, 9, 0, 0, 0), SQLITE_OK); /* no-op */
  tk_expect(p, "k", "v");
  ck_assert_uint_eq(tk_stats(p).maxCid, 10);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_bad_arguments_change_nothing){
  char *zDir = th_tmpdir("kvlog-bad");
  KvLogStore *p = tk_open(zDir, 0);
  KvLogAction a;
  char *zErr = 0;
  uint8_t *aBig = sqlite3_malloc(KVLOG_MAX_KEY+1);
  KvLogStats st0, st1;
  ck_assert_ptr_nonnull(aBig);
  memset(aBig, 'k', KVLOG_MAX_KEY+1);
  tk_put(p, 1, "k", "v");
  tk_sync(p);
  st0 = tk_stats(p);
  memset(&a, 0, sizeof(a));
  ck_assert_int_eq(kv_logstore_apply(p, 2, 1, &a, &zErr), SQLITE_MISUSE);
  ck_assert_ptr_nonnull(strstr(zErr, "kv_log: key must be 1.."));
  sqlite3_free(zErr); zErr = 0;
  a.aKey = aBig; a.nKey = KVLOG_MAX_KEY+1;
  ck_assert_int_eq(kv_logstore_apply(p, 2, 1, &a, &zErr), SQLITE_TOOBIG);
  sqlite3_free(zErr); zErr = 0;
  a.nKey = 1; a.nVal = -1;
  ck_assert_int_eq(kv_logstore_apply(p, 2, 1, &a, &zErr), SQLITE_MISUSE);
  sqlite3_free(zErr); zErr = 0;
  a.nVal = KVLOG_MAX_VALUE+1; a.aVal = aBig;
  ck_assert_int_eq(kv_logstore_apply(p, 2, 1, &a, &zErr), SQLITE_TOOBIG);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(kv_logstore_apply(p, 2, 1, 0, &zErr), SQLITE_MISUSE);
  sqlite3_free(zErr); zErr = 0;
  st1 = tk_stats(p);
  ck_assert_int_eq(st0.szStored, st1.szStored);
  ck_assert_uint_eq(st0.maxCid, st1.maxCid);
  ck_assert_int_eq(st1.bFailed, 0);
  tk_expect(p, "k", "v");
  tk_put(p, 2, "k", "w");                 /* still writable */
  kv_logstore_close(p);
  ck_assert_int_eq(tk_open_fails("", &zErr), SQLITE_MISUSE);
  sqlite3_free(zErr); zErr = 0;
  ck_assert_int_eq(tk_open_fails(0, &zErr), SQLITE_MISUSE);
  sqlite3_free(zErr);
  sqlite3_free(aBig);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_large_value_round_trip){
  char *zDir = th_tmpdir("kvlog-large");
  KvLogStore *p = tk_open(zDir, 1024*1024);
  int n = 3*1024*1024 + 17, i;               /* larger than a read window */
  uint8_t *aVal = sqlite3_malloc(n);
  KvLogAction a;
  KvLogBuf buf = {0, 0, 0};
  int bFound = 0;
  ck_assert_ptr_nonnull(aVal);
  for(i=0; i<n; i++) aVal[i] = (uint8_t)(i*31 + 7);
  memset(&a, 0, sizeof(a));
  a.aKey = (const uint8_t*)"big"; a.nKey = 3;
  a.aVal = aVal; a.nVal = n;
  tk_put(p, 1, "small", "s");
  ck_assert_int_eq(kv_logstore_apply(p, 2, 1, &a, 0), SQLITE_OK);
  tk_put(p, 3, "after", "a");
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 1024*1024);
  ck_assert_int_eq(kv_logstore_get(p, "big", 3, &buf, 0, &bFound, 0),
                   SQLITE_OK);
  ck_assert_int_eq(bFound, 1);
  ck_assert_int_eq(buf.n, n);
  ck_assert(memcmp(buf.a, aVal, n)==0);
  tk_expect(p, "small", "s");
  tk_expect(p, "after", "a");
  kv_logbuf_free(&buf);
  sqlite3_free(aVal);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* --------------------------------------------------- tails, corruption -- */

START_TEST(test_kvlog_torn_tail_of_newest_file_is_cut){
  char *zDir = th_tmpdir("kvlog-torn");
  KvLogStore *p = tk_open(zDir, 0);
  char *zFile = tk_file(zDir, 1, "klog");
  int64_t sz;
  tk_put(p, 1, "a", "1");
  tk_put(p, 2, "b", "2");
  tk_sync(p);
  sz = tk_size(zFile);
  tk_put(p, 3, "c", "3");
  tk_sync(p);
  kv_logstore_close(p);
  tk_truncate(zFile, tk_size(zFile)-3);     /* tear transaction 3 */
  tk_append_bytes(zFile, "garbage", 7);
  p = tk_open(zDir, 0);
  tk_expect(p, "a", "1");
  tk_expect(p, "b", "2");
  tk_expect(p, "c", 0);
  ck_assert_uint_eq(tk_stats(p).maxCid, 2);
  ck_assert_int_eq(tk_size(zFile), sz);    /* cut back to the last whole */
  tk_put(p, 3, "c", "again");
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 0);
  tk_expect(p, "c", "again");
  kv_logstore_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_partial_transaction_at_tail_is_cut){
  char *zDir = th_tmpdir("kvlog-partial");
  KvLogStore *p = tk_open(zDir, 0);
  char *zFile = tk_file(zDir, 1, "klog");
  KvLogAction a[3];
  int64_t sz;
  memset(a, 0, sizeof(a));
  a[0].aKey = (const uint8_t*)"x"; a[0].nKey = 1;
  a[0].aVal = (const uint8_t*)"1"; a[0].nVal = 1;
  a[1].aKey = (const uint8_t*)"y"; a[1].nKey = 1;
  a[1].aVal = (const uint8_t*)"2"; a[1].nVal = 1;
  a[2].aKey = (const uint8_t*)"z"; a[2].nKey = 1;
  a[2].aVal = (const uint8_t*)"3"; a[2].nVal = 1;
  tk_put(p, 1, "w", "0");
  tk_sync(p);
  sz = tk_size(zFile);
  ck_assert_int_eq(kv_logstore_apply(p, 2, 3, a, 0), SQLITE_OK);
  tk_sync(p);
  kv_logstore_close(p);
  /* Cut inside the third frame: frames 1 and 2 are whole but the
  ** transaction is not, so all of it goes. */
  tk_truncate(zFile, tk_size(zFile)-5);
  p = tk_open(zDir, 0);
  tk_expect(p, "w", "0");
  tk_expect(p, "x", 0);
  tk_expect(p, "y", 0);
  tk_expect(p, "z", 0);
  ck_assert_uint_eq(tk_stats(p).maxCid, 1);
  ck_assert_int_eq(tk_size(zFile), sz);
  kv_logstore_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_torn_header_of_new_file_is_repaired){
  char *zDir = th_tmpdir("kvlog-hdr");
  KvLogStore *p = tk_open(zDir, 100);
  char *zFile2 = tk_file(zDir, 2, "klog");
  tk_put(p, 1, "a", "0123456789012345678901234567890123456789"
                    "0123456789012345678901234567890123456789");
  tk_put(p, 2, "b", "2");                 /* rolls to file 2 */
  tk_sync(p);
  kv_logstore_close(p);
  ck_assert(tk_exists(zFile2));
  tk_truncate(zFile2, _i);                /* header torn, or never written */
  p = tk_open(zDir, 100);
  tk_expect(p, "a", "0123456789012345678901234567890123456789"
                    "0123456789012345678901234567890123456789");
  tk_expect(p, "b", 0);
  tk_put(p, 3, "c", "3");
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 100);
  tk_expect(p, "c", "3");
  kv_logstore_close(p);
  sqlite3_free(zFile2);
  sqlite3_free(zDir);
}
END_TEST

/* The newest file's header: all zero (never written; no sync of the file
** can have completed, so its records are cut) versus damaged (the file may
** hold synced records: SQLITE_CORRUPT, nothing is cut). */
START_TEST(test_kvlog_newest_header_zero_is_cut_damaged_is_corrupt){
  char *zDir = th_tmpdir("kvlog-newhdr");
  KvLogStore *p = tk_open(zDir, 100);
  char *zFile2 = tk_file(zDir, 2, "klog");
  char *zErr = 0;
  uint8_t aZero[16];
  int64_t sz;
  int fd;
  tk_put(p, 1, "a", "0123456789012345678901234567890123456789"
                    "0123456789012345678901234567890123456789");
  tk_put(p, 2, "b", "2");                   /* file 2 */
  tk_sync(p);
  kv_logstore_close(p);
  sz = tk_size(zFile2);
  if( _i==0 ){
    memset(aZero, 0, sizeof(aZero));
    fd = open(zFile2, O_RDWR);
    ck_assert_int_eq(pwrite(fd, aZero, 16, 0), 16);
    close(fd);
    p = tk_open(zDir, 100);
    tk_expect(p, "b", 0);
    ck_assert_int_eq(tk_size(zFile2), 16);
    kv_logstore_close(p);
  }else{
    tk_flip(zFile2, 2);
    ck_assert_int_eq(tk_open_fails(zDir, &zErr), SQLITE_CORRUPT);
    ck_assert_msg(strstr(zErr, "00000002.klog is corrupt at offset 0: bad "
                         "magic")!=0, "%s", zErr);
    ck_assert_int_eq(tk_size(zFile2), sz);  /* nothing cut */
    sqlite3_free(zErr);
  }
  sqlite3_free(zFile2);
  sqlite3_free(zDir);
}
END_TEST

/* A store of three files (1 and 2 older, 3 newest), closed. */
static char *tk_three_files(void){
  char *zDir = th_tmpdir("kvlog-corrupt");
  KvLogStore *p = tk_open(zDir, 120);
  tk_put(p, 1, "a", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  tk_put(p, 2, "b", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
  tk_put(p, 3, "c", "cccccccccccccccccccccccccccccccccccccccccccccccccccccc");
  tk_sync(p);
  ck_assert_int_eq(tk_stats(p).nFile, 3);
  kv_logstore_close(p);
  return zDir;
}

/* Flipped bytes anywhere in an older file: header, frame length, checksum,
** flags, cid, key length, key, value. */
static const int64_t aFlipOff[] = { 0, 9, 12, 16, 19, 21, 24, 30, 34, 40, 60 };

START_TEST(test_kvlog_flipped_byte_in_older_file_is_corrupt){
  char *zDir = tk_three_files();
  char *zFile = tk_file(zDir, 1, "klog");
  char *zErr = 0;
  int rc;
  char zOff[64];
  tk_flip(zFile, aFlipOff[_i]);
  rc = tk_open_fails(zDir, &zErr);
  ck_assert_int_eq(rc, SQLITE_CORRUPT);
  ck_assert_msg(strstr(zErr, "00000001.klog")!=0, "%s", zErr);
  snprintf(zOff, sizeof(zOff), "at offset %lld",
           (long long)(aFlipOff[_i]<16 ? 0 : 16));
  ck_assert_msg(strstr(zErr, zOff)!=0, "%s (want %s)", zErr, zOff);
  sqlite3_free(zErr);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_truncated_older_file_is_corrupt){
  char *zDir = tk_three_files();
  char *zFile = tk_file(zDir, 2, "klog");
  char *zErr = 0;
  int rc;
  tk_truncate(zFile, tk_size(zFile) - 1 - _i*7);
  rc = tk_open_fails(zDir, &zErr);
  ck_assert_int_eq(rc, SQLITE_CORRUPT);
  ck_assert_msg(strstr(zErr, "00000002.klog is corrupt at offset 16")!=0,
                "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* Whole frames but no "last" flag at the end of an older file: a
** transaction lost its tail there, which a synced file cannot show. */
START_TEST(test_kvlog_older_file_ending_inside_a_transaction_is_corrupt){
  char *zDir = th_tmpdir("kvlog-midtxn");
  KvLogStore *p = tk_open(zDir, 40);
  char *zFile = tk_file(zDir, 1, "klog");
  char *zErr = 0;
  KvLogAction a[2];
  memset(a, 0, sizeof(a));
  a[0].aKey = (const uint8_t*)"x"; a[0].nKey = 1;
  a[0].aVal = (const uint8_t*)"1"; a[0].nVal = 1;
  a[1].aKey = (const uint8_t*)"y"; a[1].nKey = 1;
  a[1].aVal = (const uint8_t*)"2"; a[1].nVal = 1;
  ck_assert_int_eq(kv_logstore_apply(p, 1, 2, a, 0), SQLITE_OK);
  tk_put(p, 2, "z", "3");                   /* rolls to file 2 */
  tk_sync(p);
  kv_logstore_close(p);
  ck_assert_int_eq(tk_size(zFile), 16+2*23);
  tk_truncate(zFile, 16+23);                /* drop the last frame whole */
  ck_assert_int_eq(tk_open_fails(zDir, &zErr), SQLITE_CORRUPT);
  ck_assert_msg(strstr(zErr, "00000001.klog is corrupt at offset 16: file "
                       "ends inside a transaction")!=0, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_huge_length_in_older_file_is_corrupt_not_allocated){
  char *zDir = tk_three_files();
  char *zFile = tk_file(zDir, 1, "klog");
  char *zErr = 0;
  int fd = open(zFile, O_RDWR);
  uint8_t a[4] = { 0xff, 0xff, 0xff, 0x7f };
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(pwrite(fd, a, 4, 16), 4);
  close(fd);
  ck_assert_int_eq(tk_open_fails(zDir, &zErr), SQLITE_CORRUPT);
  ck_assert_ptr_nonnull(strstr(zErr, "impossible record length"));
  sqlite3_free(zErr);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_corruption_found_by_a_read_is_reported){
  char *zDir = th_tmpdir("kvlog-readcorrupt");
  KvLogStore *p = tk_open(zDir, 0);
  char *zFile = tk_file(zDir, 1, "klog");
  KvLogBuf buf = {0, 0, 0};
  char *zErr = 0;
  int bFound = 0;
  tk_put(p, 1, "key", "value");
  tk_sync(p);
  tk_flip(zFile, 16+8+13+3+2);           /* a byte of the value */
  ck_assert_int_eq(kv_logstore_get(p, "key", 3, &buf, 0, &bFound, &zErr),
                   SQLITE_CORRUPT);
  ck_assert_ptr_nonnull(strstr(zErr, "00000001.klog is corrupt at offset 16"));
  ck_assert_int_eq(bFound, 0);
  sqlite3_free(zErr);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* A walk that steps and reads in one call (kv_logcursor_step_row, the
** scans' path) checks each record it reads: the records before a damaged
** value come back whole, the damaged one is SQLITE_CORRUPT with its
** offset; _i==1 walks backward from the end.  A tombstone is stepped over. */
START_TEST(test_kvlog_walk_finds_a_damaged_value){
  char *zDir = th_tmpdir("kvlog-walkcorrupt");
  KvLogStore *p = tk_open(zDir, 0);
  char *zFile = tk_file(zDir, 1, "klog");
  static const char *azKey[] = { "a", "b", "c", "d", "e" };
  KvLogSnap *pSnap = 0;
  KvLogCursor *pCur = 0;
  KvLogBuf buf = {0, 0, 0};
  const uint8_t *aKey, *aVal;
  int nKey, nVal, i, rc, nOk = 0;
  char *zErr = 0;
  for(i=0; i<5; i++) tk_put(p, (uint64_t)i+1, azKey[i], "value");
  tk_put(p, 6, "bb", "value");
  tk_put(p, 7, "bb", 0);                 /* a tombstone between b and c */
  tk_sync(p);
  /* 16-byte file header, then frames of 8 + 13 + key + value bytes */
  tk_flip(zFile, 16 + 2*27 + 8+13+1+2);  /* a byte of c's value */
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  ck_assert_int_eq(kv_logsnap_cursor(pSnap, &pCur), SQLITE_OK);
  kv_logcursor_seek(pCur, _i ? KV_SEEK_LAST : KV_SEEK_FIRST, 0, 0);
  ck_assert_int_eq(kv_logcursor_row(pCur, &aKey, &nKey, &buf, &aVal, &nVal,
                                    &zErr), SQLITE_OK);
  nOk++;
  while( (rc = kv_logcursor_step_row(pCur, _i, &aKey, &nKey, &buf, &aVal,
                                     &nVal, &zErr))==SQLITE_OK ){
    ck_assert_int_eq(nKey, 1);
    ck_assert_int_eq(nVal, 5);
    ck_assert(memcmp(aVal, "value", 5)==0);
    nOk++;
  }
  ck_assert_int_eq(rc, SQLITE_CORRUPT);
  ck_assert_int_eq(nOk, 2);              /* a, b  or  e, d */
  ck_assert_msg(zErr && strstr(zErr, "00000001.klog is corrupt at offset 70"),
                "%s", zErr ? zErr : "(no message)");
  sqlite3_free(zErr);
  kv_logcursor_free(pCur);
  kv_logsnap_free(pSnap);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* Cursors one after another (the second reuses the first's allocation
** and window buffer) each read their own snapshot: the second sees the
** values written after the first walked, the first walk's old values do
** not come back from its window. */
START_TEST(test_kvlog_cursor_after_cursor_reads_its_own_snapshot){
  char *zDir = th_tmpdir("kvlog-csrreuse");
  KvLogStore *p = tk_open(zDir, 0);
  KvLogBuf buf = {0, 0, 0};
  const uint8_t *aKey, *aVal;
  int nKey, nVal, i, j, rc;
  char *zErr = 0;
  char zKey[16], zVal[32];
  for(i=0; i<200; i++){
    snprintf(zKey, sizeof(zKey), "k%03d", i);
    snprintf(zVal, sizeof(zVal), "old-%03d", i);
    tk_put(p, (uint64_t)i+1, zKey, zVal);
  }
  tk_sync(p);
  for(j=0; j<3; j++){
    KvLogSnap *pSnap = 0;
    KvLogCursor *pCur = 0;
    int n = 0;
    ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
    ck_assert_int_eq(kv_logsnap_cursor(pSnap, &pCur), SQLITE_OK);
    kv_logcursor_seek(pCur, KV_SEEK_FIRST, 0, 0);
    rc = kv_logcursor_row(pCur, &aKey, &nKey, &buf, &aVal, &nVal, &zErr);
    while( rc==SQLITE_OK ){
      snprintf(zVal, sizeof(zVal), "%s-%03d", (j>0 && n%2==0) ? "new" : "old",
               n);
      ck_assert_int_eq(nVal, 7);
      ck_assert_msg(memcmp(aVal, zVal, 7)==0, "walk %d row %d: %.*s", j, n,
                    nVal, aVal);
      n++;
      rc = kv_logcursor_step_row(pCur, 0, &aKey, &nKey, &buf, &aVal, &nVal,
                                 &zErr);
    }
    ck_assert_int_eq(rc, SQLITE_DONE);
    ck_assert_int_eq(n, 200);
    kv_logcursor_free(pCur);
    kv_logsnap_free(pSnap);
    if( j==0 ){
      for(i=0; i<200; i+=2){
        snprintf(zKey, sizeof(zKey), "k%03d", i);
        snprintf(zVal, sizeof(zVal), "new-%03d", i);
        tk_put(p, (uint64_t)i+1000, zKey, zVal);
      }
      tk_sync(p);
    }
  }
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_corrupt_manifest_is_corrupt){
  char *zDir = th_tmpdir("kvlog-man");
  KvLogStore *p = tk_open(zDir, 100);
  char *zMan = sqlite3_mprintf("%s/MANIFEST", zDir);
  char *zErr = 0;
  tk_apply_range(p, 1, 20);
  tk_sync(p);
  tk_compact(p);
  kv_logstore_close(p);
  ck_assert(tk_exists(zMan));
  tk_flip(zMan, _i==0 ? 3 : tk_size(zMan)-6);
  ck_assert_int_eq(tk_open_fails(zDir, &zErr), SQLITE_CORRUPT);
  ck_assert_msg(strstr(zErr, "MANIFEST is corrupt at offset")!=0, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zMan);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_missing_merged_file_is_corrupt){
  char *zDir = th_tmpdir("kvlog-missing");
  KvLogStore *p = tk_open(zDir, 100);
  char *zErr = 0;
  DIR *d;
  struct dirent *e;
  tk_apply_range(p, 1, 20);
  tk_sync(p);
  tk_compact(p);
  kv_logstore_close(p);
  d = opendir(zDir);
  while( (e = readdir(d))!=0 ){
    if( strstr(e->d_name, ".kmrg") ){
      char *z = sqlite3_mprintf("%s/%s", zDir, e->d_name);
      unlink(z);
      sqlite3_free(z);
      break;
    }
  }
  closedir(d);
  ck_assert_int_eq(tk_open_fails(zDir, &zErr), SQLITE_CORRUPT);
  ck_assert_ptr_nonnull(strstr(zErr, "listed in MANIFEST but missing"));
  sqlite3_free(zErr);
  sqlite3_free(zDir);
}
END_TEST

/* _i==0: MANIFEST deleted after a compaction; _i==1: the first log file
** deleted from a store that never compacted. */
START_TEST(test_kvlog_lost_manifest_or_first_file_is_corrupt){
  char *zDir = th_tmpdir("kvlog-lost");
  KvLogStore *p = tk_open(zDir, 100);
  char *zPath = _i==0 ? sqlite3_mprintf("%s/MANIFEST", zDir)
                      : tk_file(zDir, 1, "klog");
  char *zErr = 0;
  tk_apply_range(p, 1, 20);
  tk_sync(p);
  if( _i==0 ) tk_compact(p);
  kv_logstore_close(p);
  ck_assert_int_eq(unlink(zPath), 0);
  ck_assert_int_eq(tk_open_fails(zDir, &zErr), SQLITE_CORRUPT);
  ck_assert_msg(strstr(zErr, "00000001.klog is corrupt at offset 0: missing")
                !=0, "%s", zErr);
  sqlite3_free(zErr);
  sqlite3_free(zPath);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------ snapshots, cursors -- */

START_TEST(test_kvlog_snapshot_does_not_see_later_writes){
  char *zDir = th_tmpdir("kvlog-snap");
  KvLogStore *p = tk_open(zDir, 0);
  KvLogSnap *pSnap = 0, *pCopy = 0;
  KvLogBuf buf = {0, 0, 0};
  int bFound = 0;
  tk_put(p, 1, "a", "1");
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  tk_put(p, 2, "a", "2");
  tk_put(p, 3, "b", "3");
  ck_assert_int_eq(kv_logsnap_get(pSnap, "a", 1, &buf, 0, &bFound, 0), 0);
  ck_assert_int_eq(bFound, 1);
  ck_assert_int_eq(buf.n, 1);
  ck_assert_int_eq(buf.a[0], '1');
  ck_assert_int_eq(kv_logsnap_get(pSnap, "b", 1, &buf, 0, &bFound, 0), 0);
  ck_assert_int_eq(bFound, 0);
  ck_assert_int_eq(kv_logsnap_count(pSnap), 1);
  tk_expect(p, "a", "2");
  ck_assert_int_eq(kv_logsnap_dup(pSnap, &pCopy), SQLITE_OK);
  kv_logsnap_free(pSnap);                   /* the copy stands alone */
  tk_compact(p);
  ck_assert_int_eq(kv_logsnap_get(pCopy, "a", 1, &buf, 0, &bFound, 0), 0);
  ck_assert_int_eq(bFound, 1);
  ck_assert_int_eq(buf.a[0], '1');
  kv_logsnap_free(pCopy);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_cursor_walks_live_keys_in_order){
  char *zDir = th_tmpdir("kvlog-cursor");
  KvLogStore *p = tk_open(zDir, 0);
  KvLogSnap *pSnap = 0;
  KvLogCursor *pCur = 0;
  KvLogBuf buf = {0, 0, 0};
  const uint8_t *aKey;
  int nKey, bOn, n = 0;
  uint64_t cid;
  tk_put(p, 1, "b", "B");
  tk_put(p, 2, "d", "D");
  tk_put(p, 3, "c", "C");
  tk_put(p, 4, "c", 0);                   /* tombstone between b and d */
  tk_put(p, 5, "a", "A");
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  ck_assert_int_eq(kv_logsnap_cursor(pSnap, &pCur), SQLITE_OK);
  kv_logsnap_free(pSnap);                 /* the cursor keeps its state */
  for(bOn = kv_logcursor_seek(pCur, KV_SEEK_FIRST, 0, 0); bOn;
      bOn = kv_logcursor_next(pCur)){
    kv_logcursor_key(pCur, &aKey, &nKey, &cid);
    ck_assert_int_eq(kv_logcursor_value(pCur, &buf, 0), SQLITE_OK);
    ck_assert_int_eq(nKey, 1);
    ck_assert_int_eq(buf.a[0], aKey[0]-'a'+'A');
    ck_assert_int_eq(aKey[0], "abd"[n]);
    n++;
  }
  ck_assert_int_eq(n, 3);
  ck_assert_int_eq(kv_logcursor_seek(pCur, KV_SEEK_GE, "c", 1), 1);
  kv_logcursor_key(pCur, &aKey, &nKey, &cid);
  ck_assert_int_eq(aKey[0], 'd');
  ck_assert_uint_eq(cid, 2);
  ck_assert_int_eq(kv_logcursor_seek(pCur, KV_SEEK_LE, "c", 1), 1);
  kv_logcursor_key(pCur, &aKey, &nKey, 0);
  ck_assert_int_eq(aKey[0], 'b');
  ck_assert_int_eq(kv_logcursor_prev(pCur), 1);
  kv_logcursor_key(pCur, &aKey, &nKey, 0);
  ck_assert_int_eq(aKey[0], 'a');
  ck_assert_int_eq(kv_logcursor_prev(pCur), 0);
  ck_assert_int_eq(kv_logcursor_seek(pCur, KV_SEEK_GT, "d", 1), 0);
  ck_assert_int_eq(kv_logcursor_valid(pCur), 0);
  kv_logcursor_free(pCur);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* --------------------------------------------------------- compaction -- */

START_TEST(test_kvlog_compaction_keeps_live_data_and_reclaims_dead_bytes){
  char *zDir = th_tmpdir("kvlog-compact");
  KvLogStore *p = tk_open(zDir, 2000);
  KvLogStats st0, st1;
  tk_apply_range(p, 1, 1500);
  tk_sync(p);
  st0 = tk_stats(p);
  ck_assert_int_gt(st0.szDead, st0.szLive);
  ck_assert_int_gt(st0.nTomb, 0);
  tk_compact(p);
  st1 = tk_stats(p);
  ck_assert_int_eq(st1.nCompaction, 1);
  ck_assert_int_eq(st1.szDead, 0);
  ck_assert_int_eq(st1.nTomb, 0);
  ck_assert_int_eq(st1.nLive, st0.nLive);
  ck_assert_int_eq(st1.szLive, st0.szLive);
  ck_assert_int_lt(st1.szStored, st0.szStored/4);
  ck_assert_int_lt(st1.nFile, st0.nFile);
  ck_assert_int_eq(tk_count_files(zDir, ".klog"), 1);  /* only the active */
  ck_assert_int_gt(tk_count_files(zDir, ".kmrg"), 1);
  tk_assert_files_bounded(zDir, 2000);
  tk_check_model(p, 1500);
  tk_apply_range(p, 1501, 1600);
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 2000);
  tk_check_model(p, 1600);
  ck_assert_uint_eq(tk_stats(p).maxCid, 1600);
  tk_compact(p);                            /* merges merged files again */
  tk_check_model(p, 1600);
  kv_logstore_close(p);
  p = tk_open(zDir, 2000);
  tk_check_model(p, 1600);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_max_cid_survives_compaction_of_deletes){
  char *zDir = th_tmpdir("kvlog-maxcid");
  KvLogStore *p = tk_open(zDir, 0);
  tk_put(p, 1, "a", "1");
  tk_put(p, 2, "b", "2");
  tk_put(p, 3, "b", 0);                     /* newest: a delete only */
  tk_sync(p);
  tk_compact(p);                            /* drops the tombstone */
  ck_assert_int_eq(tk_stats(p).nTomb, 0);
  ck_assert_uint_eq(tk_stats(p).maxCid, 3);
  kv_logstore_close(p);
  p = tk_open(zDir, 0);
  ck_assert_uint_eq(tk_stats(p).maxCid, 3);
  tk_expect(p, "a", "1");
  tk_expect(p, "b", 0);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_compaction_runs_while_a_snapshot_cursor_is_open){
  char *zDir = th_tmpdir("kvlog-compact-snap");
  KvLogStore *p = tk_open(zDir, 1000);
  KvLogSnap *pSnap = 0;
  KvLogCursor *pCur = 0;
  KvLogBuf buf = {0, 0, 0};
  char *zOld = tk_file(zDir, 1, "klog");
  TkModel m;
  uint64_t c;
  int bOn, n = 0, nLive = 0, k;
  memset(&m, 0, sizeof(m));
  for(c=1; c<=300; c++) tk_model_apply(&m, c);
  for(k=0; k<TK_NKEY; k++) nLive += m.az[k]!=0;
  tk_apply_range(p, 1, 300);
  tk_sync(p);
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  ck_assert_int_eq(kv_logsnap_cursor(pSnap, &pCur), SQLITE_OK);
  bOn = kv_logcursor_seek(pCur, KV_SEEK_FIRST, 0, 0);
  tk_compact(p);
  tk_apply_range(p, 301, 400);              /* overwrite after compaction */
  tk_compact(p);
  ck_assert(tk_exists(zOld));               /* still used by the snapshot */
  for(; bOn; bOn = kv_logcursor_next(pCur)){
    const uint8_t *aKey;
    int nKey;
    kv_logcursor_key(pCur, &aKey, &nKey, 0);
    k = atoi((const char*)aKey+3);
    ck_assert_int_eq(kv_logcursor_value(pCur, &buf, 0), SQLITE_OK);
    ck_assert_ptr_nonnull(m.az[k]);
    ck_assert_int_eq(buf.n, (int)strlen(m.az[k]));
    ck_assert(memcmp(buf.a, m.az[k], buf.n)==0);
    n++;
  }
  ck_assert_int_eq(n, nLive);
  kv_logcursor_free(pCur);
  kv_logsnap_free(pSnap);
  ck_assert(!tk_exists(zOld));              /* deleted with the last user */
  tk_check_model(p, 400);
  kv_logbuf_free(&buf);
  tk_model_free(&m);
  kv_logstore_close(p);
  sqlite3_free(zOld);
  sqlite3_free(zDir);
}
END_TEST

/* Appends from another thread while compactions run. */
typedef struct TkWriter TkWriter;
struct TkWriter { KvLogStore *p; uint64_t iFrom, iTo; int rc; };

static void *tk_writer_main(void *pArg){
  TkWriter *w = (TkWriter*)pArg;
  uint64_t c;
  for(c=w->iFrom; c<=w->iTo && w->rc==SQLITE_OK; c++){
    w->rc = tk_apply_gen(w->p, c, 0);
    if( w->rc==SQLITE_OK && c%16==0 ) w->rc = kv_logstore_sync(w->p, 0);
  }
  return 0;
}

/* Reads from another thread while files are merged away under it: point
** reads and full cursor walks of snapshots never fail. */
typedef struct TkReader TkReader;
struct TkReader {
  KvLogStore *p;
  int bStop;                      /* __atomic access */
  int rc;
  int nRead;                      /* __atomic access */
};

static int tk_reader_walk(KvLogStore *p, KvLogBuf *pBuf){
  KvLogSnap *pSnap = 0;
  KvLogCursor *pCur = 0;
  int rc = kv_logstore_snapshot(p, &pSnap), bOn;
  if( rc==SQLITE_OK ) rc = kv_logsnap_cursor(pSnap, &pCur);
  kv_logsnap_free(pSnap);
  for(bOn = rc==SQLITE_OK ? kv_logcursor_seek(pCur, KV_SEEK_FIRST, 0, 0) : 0;
      bOn && rc==SQLITE_OK; bOn = kv_logcursor_next(pCur)){
    rc = kv_logcursor_value(pCur, pBuf, 0);
  }
  kv_logcursor_free(pCur);
  return rc;
}

static void *tk_reader_main(void *pArg){
  TkReader *r = (TkReader*)pArg;
  KvLogBuf buf = {0, 0, 0};
  while( r->rc==SQLITE_OK && !__atomic_load_n(&r->bStop, __ATOMIC_ACQUIRE) ){
    char zKey[16];
    int bFound;
    int n = __atomic_load_n(&r->nRead, __ATOMIC_RELAXED);
    snprintf(zKey, sizeof(zKey), "key%03d", n % TK_NKEY);
    r->rc = kv_logstore_get(r->p, zKey, 6, &buf, 0, &bFound, 0);
    if( r->rc==SQLITE_OK && n%50==0 ){
      r->rc = tk_reader_walk(r->p, &buf);
    }
    __atomic_store_n(&r->nRead, n+1, __ATOMIC_RELEASE);
  }
  kv_logbuf_free(&buf);
  return 0;
}

START_TEST(test_kvlog_compaction_concurrent_with_appends){
  char *zDir = th_tmpdir("kvlog-compact-conc");
  KvLogStore *p = tk_open(zDir, 1500);
  TkWriter w;
  TkReader r;
  pthread_t t, tr;
  int i;
  tk_apply_range(p, 1, 500);
  w.p = p; w.iFrom = 501; w.iTo = 3000; w.rc = SQLITE_OK;
  memset(&r, 0, sizeof(r));
  r.p = p;
  ck_assert_int_eq(pthread_create(&t, 0, tk_writer_main, &w), 0);
  ck_assert_int_eq(pthread_create(&tr, 0, tk_reader_main, &r), 0);
  /* the compactions start once the reader has read (a thread can start
  ** late: it could otherwise be told to stop before its first read) */
  for(i=0; i<60000 && __atomic_load_n(&r.nRead, __ATOMIC_ACQUIRE)==0; i++){
    usleep(1000);
  }
  for(i=0; i<8; i++) tk_compact(p);
  pthread_join(t, 0);
  __atomic_store_n(&r.bStop, 1, __ATOMIC_RELEASE);
  pthread_join(tr, 0);
  ck_assert_int_eq(w.rc, SQLITE_OK);
  ck_assert_int_eq(r.rc, SQLITE_OK);
  ck_assert_int_gt(r.nRead, 0);
  ck_assert_int_eq(tk_stats(p).nCompaction, 8);
  tk_check_model(p, 3000);
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 1500);
  tk_check_model(p, 3000);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

static int tk_stop_at(void *pCtx, int eStep){
  return eStep==*(int*)pCtx;
}

/* Stopping (as a crash would) at each step, then reopening, gives the same
** live data; the error is reported and the store keeps working. */
START_TEST(test_kvlog_compaction_stopped_at_each_step_reopens_same){
  char *zDir = th_tmpdir("kvlog-stop");
  int eStop = _i;
  KvLogConfig cfg;
  KvLogStore *p;
  char *zErr = 0;
  int rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szFile = 800;
  cfg.szDeadTrigger = -1;
  cfg.xStep = tk_stop_at;
  cfg.pStepCtx = &eStop;
  p = tk_open_cfg(zDir, &cfg);
  tk_apply_range(p, 1, 300);
  tk_sync(p);
  rc = kv_logstore_compact(p, &zErr);
  ck_assert_int_eq(rc, SQLITE_ABORT);
  ck_assert_ptr_nonnull(strstr(zErr, "stopped at step"));
  sqlite3_free(zErr);
  tk_check_model(p, 300);
  tk_apply_range(p, 301, 320);
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 800);
  tk_check_model(p, 320);
  tk_compact(p);                            /* and a later one succeeds */
  tk_check_model(p, 320);
  kv_logstore_close(p);
  p = tk_open(zDir, 800);
  tk_check_model(p, 320);
  ck_assert_int_eq(tk_count_files(zDir, ".tmp"), 0);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

static int tk_kill_at(void *pCtx, int eStep){
  if( eStep==*(int*)pCtx ) raise(SIGKILL);
  return 0;
}

/* A child killed by SIGKILL at each compaction step: the reopened store
** holds every synced transaction, no more and no less. */
START_TEST(test_kvlog_compaction_killed_at_each_step_reopens_same){
  char *zDir = th_tmpdir("kvlog-kill-step");
  int eStep = _i;
  pid_t pid;
  int st = 0;
  KvLogStore *p;
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    KvLogConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.szFile = 700;
    cfg.szDeadTrigger = -1;
    cfg.xStep = tk_kill_at;
    cfg.pStepCtx = &eStep;
    if( kv_logstore_open(zDir, &cfg, &p, 0) ) _exit(2);
    for(uint64_t c=1; c<=250; c++) if( tk_apply_gen(p, c, 0) ) _exit(3);
    if( kv_logstore_sync(p, 0) ) _exit(4);
    kv_logstore_compact(p, 0);
    _exit(5);                               /* not reached: killed */
  }
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st)==SIGKILL, "status %d", st);
  p = tk_open(zDir, 700);
  tk_check_model(p, 250);
  ck_assert_uint_eq(tk_stats(p).maxCid, 250);
  tk_compact(p);
  tk_check_model(p, 250);
  kv_logstore_close(p);
  p = tk_open(zDir, 700);
  tk_check_model(p, 250);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------- injected I/O -- */

START_TEST(test_kvlog_compaction_write_or_sync_fault_keeps_old_set){
  char *zDir = th_tmpdir("kvlog-compact-fault");
  WalFault *pF = wal_fault_new(wal_io_posix());
  KvLogConfig cfg;
  KvLogStore *p;
  char *zErr = 0;
  int rc, eKind = (_i%2) ? WAL_FAULT_FSYNC : WAL_FAULT_WRITE;
  int nth = 1 + _i/2;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szFile = 900;
  cfg.szDeadTrigger = -1;
  cfg.pIo = wal_fault_io(pF);
  p = tk_open_cfg(zDir, &cfg);
  tk_apply_range(p, 1, 300);
  tk_sync(p);
  wal_fault_arm(pF, eKind, nth, _i%3==0 ? ENOSPC : EIO, 0);
  rc = kv_logstore_compact(p, &zErr);
  if( rc!=SQLITE_OK ){
    ck_assert_msg(rc==SQLITE_FULL || (rc&0xff)==SQLITE_IOERR, "rc=%d", rc);
    ck_assert_msg(strstr(zErr, zDir)!=0, "%s", zErr);
    ck_assert_int_eq(tk_stats(p).nCompactError, 1);
  }
  sqlite3_free(zErr);
  wal_fault_arm(pF, eKind, 0, 0, 0);
  if( !tk_stats(p).bFailed ){
    tk_check_model(p, 300);
    tk_apply_range(p, 301, 330);
    tk_sync(p);
    kv_logstore_close(p);
    p = tk_open(zDir, 900);
    tk_check_model(p, 330);
  }else{
    kv_logstore_close(p);
    p = tk_open(zDir, 900);
    tk_check_model(p, 300);
  }
  ck_assert_int_eq(tk_count_files(zDir, ".tmp"), 0);
  kv_logstore_close(p);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_write_fault_publishes_nothing){
  char *zDir = th_tmpdir("kvlog-wfault");
  WalFault *pF = wal_fault_new(wal_io_posix());
  KvLogConfig cfg;
  KvLogStore *p;
  char *zErr = 0;
  int rc;
  int aKind[3] = { WAL_FAULT_WRITE, WAL_FAULT_SHORT, WAL_FAULT_WRITE };
  int aErr[3] = { EIO, 0, ENOSPC };
  memset(&cfg, 0, sizeof(cfg));
  cfg.szDeadTrigger = -1;
  cfg.pIo = wal_fault_io(pF);
  p = tk_open_cfg(zDir, &cfg);
  tk_put(p, 1, "a", "1");
  tk_sync(p);
  wal_fault_arm(pF, aKind[_i], 1, aErr[_i], 0);
  if( aKind[_i]==WAL_FAULT_SHORT ){
    /* Half written; the continuation of the write fails. */
    wal_fault_arm(pF, WAL_FAULT_WRITE, 2, EIO, 0);
  }
  rc = tk_apply_gen(p, 2, &zErr);
  ck_assert_int_eq(rc, _i==2 ? SQLITE_FULL : SQLITE_IOERR_WRITE);
  ck_assert_ptr_nonnull(strstr(zErr, "00000001.klog"));
  sqlite3_free(zErr);
  tk_expect(p, "a", "1");
  ck_assert_uint_eq(tk_stats(p).maxCid, 1);
  ck_assert_int_eq(tk_stats(p).bFailed, 0);
  tk_put(p, 2, "b", "2");                   /* the next apply works */
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 0);
  tk_expect(p, "a", "1");
  tk_expect(p, "b", "2");
  ck_assert_uint_eq(tk_stats(p).maxCid, 2);
  kv_logstore_close(p);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_write_and_truncate_fault_refuses_until_reopen){
  char *zDir = th_tmpdir("kvlog-tfault");
  WalFault *pF = wal_fault_new(wal_io_posix());
  KvLogConfig cfg;
  KvLogStore *p;
  char *zErr = 0;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szDeadTrigger = -1;
  cfg.pIo = wal_fault_io(pF);
  p = tk_open_cfg(zDir, &cfg);
  tk_put(p, 1, "a", "1");
  tk_sync(p);
  wal_fault_arm(pF, WAL_FAULT_SHORT, 1, 0, 0);
  wal_fault_arm(pF, WAL_FAULT_WRITE, 2, EIO, 0);
  wal_fault_arm(pF, WAL_FAULT_TRUNCATE, 1, EIO, 0);
  ck_assert_int_eq(tk_apply_gen(p, 2, 0), SQLITE_IOERR_WRITE);
  ck_assert_int_eq(tk_stats(p).bFailed, 1);
  ck_assert_int_eq(tk_apply_gen(p, 3, &zErr), SQLITE_IOERR);
  ck_assert_ptr_nonnull(strstr(zErr, "reopen"));
  sqlite3_free(zErr);
  ck_assert_int_eq(kv_logstore_sync(p, 0), SQLITE_IOERR);
  tk_expect(p, "a", "1");                   /* reads still work */
  kv_logstore_close(p);
  p = tk_open(zDir, 0);                     /* the half record is cut */
  tk_expect(p, "a", "1");
  ck_assert_uint_eq(tk_stats(p).maxCid, 1);
  tk_put(p, 2, "b", "2");
  kv_logstore_close(p);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_sync_fault_reverts_and_refuses_until_reopen){
  char *zDir = th_tmpdir("kvlog-sfault");
  WalFault *pF = wal_fault_new(wal_io_posix());
  KvLogConfig cfg;
  KvLogStore *p;
  char *zErr = 0;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szDeadTrigger = -1;
  cfg.pIo = wal_fault_io(pF);
  p = tk_open_cfg(zDir, &cfg);
  tk_put(p, 1, "a", "1");
  tk_sync(p);
  tk_put(p, 2, "a", "2");
  tk_put(p, 3, "b", "3");
  wal_fault_arm(pF, WAL_FAULT_FSYNC, 1, EIO, 0);
  ck_assert_int_eq(kv_logstore_sync(p, &zErr), SQLITE_IOERR_FSYNC);
  ck_assert_ptr_nonnull(strstr(zErr, "sync of"));
  ck_assert_ptr_nonnull(strstr(zErr, "00000001.klog"));
  sqlite3_free(zErr);
  tk_expect(p, "a", "1");                   /* back to the last sync */
  tk_expect(p, "b", 0);
  ck_assert_uint_eq(tk_stats(p).maxCid, 1);
  ck_assert_int_eq(tk_apply_gen(p, 4, 0), SQLITE_IOERR);
  kv_logstore_close(p);
  p = tk_open(zDir, 0);
  /* The unsynced records reached the page cache whole, so the reopen keeps
  ** them (and reports them durable: open syncs what it loaded). */
  tk_expect(p, "a", "2");
  tk_expect(p, "b", "3");
  ck_assert_uint_eq(tk_stats(p).maxCid, 3);
  kv_logstore_close(p);
  wal_fault_free(pF);
  sqlite3_free(zDir);
}
END_TEST

/* A WalIo that fails the rename or the directory sync on demand. */
typedef struct TkIo TkIo;
struct TkIo {
  WalIo io;
  const WalIo *pBase;
  int bFailRename;            /* fail every rename */
  int bFailDirAfterRename;    /* fail the directory sync after a rename */
  int bArmed;
  int nRead;                  /* preads since the count was cleared */
  size_t aRead[64];           /* their sizes (the first 64) */
};

static int tkRename(void *pCtx, const char *a, const char *b){
  TkIo *t = (TkIo*)pCtx;
  if( t->bFailRename ){ errno = EIO; return -1; }
  if( t->bFailDirAfterRename ) t->bArmed = 1;
  return t->pBase->xRename(t->pBase->pCtx, a, b);
}
static int tkSyncDir(void *pCtx, const char *z){
  TkIo *t = (TkIo*)pCtx;
  if( t->bArmed ){ t->bArmed = 0; errno = EIO; return -1; }
  return t->pBase->xSyncDir(t->pBase->pCtx, z);
}
#define TK_FWD(name, sig, args) \
  static int tk##name sig { TkIo *t = (TkIo*)pCtx; \
    return t->pBase->x##name args; }
TK_FWD(Open, (void *pCtx, const char *z, int f, int m),
       (t->pBase->pCtx, z, f, m))
TK_FWD(Fsync, (void *pCtx, int fd), (t->pBase->pCtx, fd))
TK_FWD(Ftruncate, (void *pCtx, int fd, off_t n), (t->pBase->pCtx, fd, n))
TK_FWD(FstatSize, (void *pCtx, int fd, off_t *p), (t->pBase->pCtx, fd, p))
TK_FWD(Close, (void *pCtx, int fd), (t->pBase->pCtx, fd))
TK_FWD(Unlink, (void *pCtx, const char *z), (t->pBase->pCtx, z))
TK_FWD(Mkdir, (void *pCtx, const char *z, int m), (t->pBase->pCtx, z, m))
static ssize_t tkPwrite(void *pCtx, int fd, const void *a, size_t n,
                        off_t o){
  TkIo *t = (TkIo*)pCtx;
  return t->pBase->xPwrite(t->pBase->pCtx, fd, a, n, o);
}
static ssize_t tkPread(void *pCtx, int fd, void *a, size_t n, off_t o){
  TkIo *t = (TkIo*)pCtx;
  if( t->nRead<64 ) t->aRead[t->nRead] = n;
  t->nRead++;
  return t->pBase->xPread(t->pBase->pCtx, fd, a, n, o);
}

static void tk_io_init(TkIo *t){
  memset(t, 0, sizeof(*t));
  t->pBase = wal_io_posix();
  t->io.pCtx = t;
  t->io.xOpen = tkOpen; t->io.xPwrite = tkPwrite; t->io.xPread = tkPread;
  t->io.xFsync = tkFsync; t->io.xFtruncate = tkFtruncate;
  t->io.xFstatSize = tkFstatSize; t->io.xClose = tkClose;
  t->io.xUnlink = tkUnlink; t->io.xRename = tkRename;
  t->io.xMkdir = tkMkdir; t->io.xSyncDir = tkSyncDir;
}

/* _i==0: the rename fails; _i==1: the directory sync after it fails. */
START_TEST(test_kvlog_compaction_rename_or_dirsync_fault_is_safe){
  char *zDir = th_tmpdir("kvlog-renamefault");
  TkIo t;
  KvLogConfig cfg;
  KvLogStore *p;
  char *zErr = 0;
  int rc;
  tk_io_init(&t);
  memset(&cfg, 0, sizeof(cfg));
  cfg.szFile = 900;
  cfg.szDeadTrigger = -1;
  cfg.pIo = &t.io;
  p = tk_open_cfg(zDir, &cfg);
  tk_apply_range(p, 1, 300);
  tk_sync(p);
  if( _i==0 ) t.bFailRename = 1;
  else t.bFailDirAfterRename = 1;
  rc = kv_logstore_compact(p, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "compaction should fail");
  sqlite3_free(zErr);
  t.bFailRename = 0;
  t.bFailDirAfterRename = 0;
  tk_check_model(p, 300);
  tk_apply_range(p, 301, 340);
  tk_sync(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 900);
  tk_check_model(p, 340);
  tk_compact(p);
  kv_logstore_close(p);
  p = tk_open(zDir, 900);
  tk_check_model(p, 340);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* A walk reads its values through a read-ahead window that starts at
** KL_WINDOW_FIRST bytes and doubles at every refill up to KL_WINDOW_BYTES:
** a short range reads 4 KiB, a long walk few times; every value is right. */
START_TEST(test_kvlog_walk_window_starts_small_and_doubles){
  char *zDir = th_tmpdir("kvlog-window");
  TkIo t;
  KvLogConfig cfg;
  KvLogStore *p;
  KvLogSnap *pSnap = 0;
  KvLogCursor *pCur = 0;
  KvLogBuf buf = {0, 0, 0};
  const uint8_t *aKey;
  int nKey, bOn, n = 0, i;
  char zKey[16], zVal[64];
  tk_io_init(&t);
  memset(&cfg, 0, sizeof(cfg));
  cfg.szDeadTrigger = -1;
  cfg.pIo = &t.io;
  p = tk_open_cfg(zDir, &cfg);
  for(i=0; i<4000; i++){
    snprintf(zKey, sizeof(zKey), "k%06d", i);
    snprintf(zVal, sizeof(zVal), "value-%06d-padding-padding-padding", i);
    tk_put(p, (uint64_t)i+1, zKey, zVal);
  }
  tk_sync(p);
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  ck_assert_int_eq(kv_logsnap_cursor(pSnap, &pCur), SQLITE_OK);
  kv_logsnap_free(pSnap);
  t.nRead = 0;
  for(bOn = kv_logcursor_seek(pCur, KV_SEEK_FIRST, 0, 0); bOn;
      bOn = kv_logcursor_next(pCur)){
    kv_logcursor_key(pCur, &aKey, &nKey, 0);
    ck_assert_int_eq(kv_logcursor_value(pCur, &buf, 0), SQLITE_OK);
    snprintf(zKey, sizeof(zKey), "k%06d", n);
    snprintf(zVal, sizeof(zVal), "value-%06d-padding-padding-padding", n);
    ck_assert_int_eq(nKey, (int)strlen(zKey));
    ck_assert_int_eq(memcmp(aKey, zKey, nKey), 0);
    ck_assert_int_eq(buf.n, (int)strlen(zVal));
    ck_assert_int_eq(memcmp(buf.a, zVal, buf.n), 0);
    n++;
  }
  ck_assert_int_eq(n, 4000);
  ck_assert_int_ge(t.nRead, 6);       /* 4+8+16+32+64 KiB < the values */
  ck_assert_int_lt(t.nRead, 64);
  for(i=0; i<5; i++){               /* at the end of the file a read */
    ck_assert_uint_eq(t.aRead[i], (size_t)4096 << i);  /* asks the rest */
  }
  for(i=5; i<t.nRead; i++) ck_assert_uint_le(t.aRead[i], 65536);
  kv_logcursor_free(pCur);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* A real child whose files may not grow past 64 KiB (RLIMIT_FSIZE, with
** SIGXFSZ ignored so the write fails with EFBIG): the apply that hits the
** limit fails with SQLITE_FULL naming the file, the child survives, and a
** reopen holds every transaction synced before. */
START_TEST(test_kvlog_file_size_limit_fails_cleanly_in_a_child){
  char *zDir = th_tmpdir("kvlog-fsize");
  int fd[2];
  pid_t pid;
  int st = 0;
  uint64_t c, cSynced = 0;
  KvLogStore *p;
  ck_assert_int_eq(pipe(fd), 0);
  pid = fork();
  ck_assert_int_ge(pid, 0);
  if( pid==0 ){
    struct rlimit rl;
    char *zErr = 0;
    int rc = SQLITE_OK;
    close(fd[0]);
    signal(SIGXFSZ, SIG_IGN);
    rl.rlim_cur = rl.rlim_max = 64*1024;
    if( setrlimit(RLIMIT_FSIZE, &rl) ) _exit(2);
    if( kv_logstore_open(zDir, 0, &p, 0) ) _exit(3);
    for(c=1; rc==SQLITE_OK; c++){
      rc = tk_apply_gen(p, c, &zErr);
      if( rc==SQLITE_OK ) rc = kv_logstore_sync(p, &zErr);
      if( rc==SQLITE_OK && write(fd[1], &c, sizeof(c))!=sizeof(c) ) _exit(4);
    }
    if( rc!=SQLITE_FULL || strstr(zErr, "00000001.klog")==0 ) _exit(5);
    if( tk_apply_gen(p, c, 0)!=SQLITE_FULL ) _exit(6);  /* still failing */
    kv_logstore_close(p);
    _exit(0);
  }
  close(fd[1]);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st)==0, "child status %d", st);
  while( read(fd[0], &c, sizeof(c))==(ssize_t)sizeof(c) ) cSynced = c;
  close(fd[0]);
  ck_assert_uint_gt(cSynced, 100);
  p = tk_open(zDir, 0);
  ck_assert_uint_eq(tk_stats(p).maxCid, cSynced);
  tk_check_model(p, cSynced);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ SIGKILL -- */

static int tk_rounds(void){
  const char *z = getenv("DEPOT_TORTURE_ITERS");
  int n = z ? atoi(z) : 0;
  return n>0 ? n : 4;
}

/* Child: apply the generated stream, sync every few transactions and
** report the synced CID on fd, compact now and then (and in the
** background).  Runs until killed. */
static void tk_kill_child(const char *zDir, int fd, unsigned seed){
  KvLogConfig cfg;
  KvLogStore *p = 0;
  uint64_t c;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szFile = 1200 + (seed%5)*300;
  cfg.szDeadTrigger = 2000;
  cfg.bBackground = 1;
  if( kv_logstore_open(zDir, &cfg, &p, 0) ) _exit(2);
  {
    KvLogStats st;
    kv_logstore_stats(p, &st);
    c = st.maxCid;
  }
  for(c=c+1; ; c++){
    if( tk_apply_gen(p, c, 0) ) _exit(3);
    if( (c+seed)%7==0 ){
      if( kv_logstore_sync(p, 0) ) _exit(4);
      if( write(fd, &c, sizeof(c))!=(ssize_t)sizeof(c) ) _exit(5);
    }
    if( (c+seed)%151==0 && kv_logstore_compact(p, 0) ) _exit(6);
  }
}

START_TEST(test_kvlog_sigkill_during_apply_sync_compaction_loses_no_sync){
  char *zDir = th_tmpdir("kvlog-sigkill");
  int nRound = tk_rounds(), r;
  srand(12345);
  for(r=0; r<nRound; r++){
    int fd[2];
    pid_t pid;
    int st;
    uint64_t c, cSynced = 0;
    KvLogStore *p;
    KvLogStats s;
    ck_assert_int_eq(pipe(fd), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if( pid==0 ){
      close(fd[0]);
      tk_kill_child(zDir, fd[1], (unsigned)r);
    }
    close(fd[1]);
    usleep((useconds_t)(rand()%80000));
    kill(pid, SIGKILL);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFSIGNALED(st), "child exited with %d", WEXITSTATUS(st));
    while( read(fd[0], &c, sizeof(c))==(ssize_t)sizeof(c) ) cSynced = c;
    close(fd[0]);
    p = tk_open(zDir, 0);
    kv_logstore_stats(p, &s);
    ck_assert_msg(s.maxCid>=cSynced, "round %d: synced %llu, found %llu",
                  r, (unsigned long long)cSynced,
                  (unsigned long long)s.maxCid);
    tk_check_model(p, s.maxCid);      /* exactly the prefix 1..maxCid */
    kv_logstore_close(p);
  }
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------- background, stats -- */

START_TEST(test_kvlog_background_compaction_when_dead_bytes_pass_trigger){
  char *zDir = th_tmpdir("kvlog-bg");
  KvLogConfig cfg;
  KvLogStore *p;
  int i;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szFile = 1000;
  cfg.szDeadTrigger = 4000;
  cfg.bBackground = 1;
  p = tk_open_cfg(zDir, &cfg);
  tk_apply_range(p, 1, 1000);
  tk_sync(p);
  for(i=0; i<500 && tk_stats(p).nCompaction==0; i++) usleep(10000);
  ck_assert_int_gt(tk_stats(p).nCompaction, 0);
  tk_check_model(p, 1000);
  kv_logstore_close(p);                     /* joins the thread */
  p = tk_open(zDir, 1000);
  tk_check_model(p, 1000);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_stats_and_compaction_due){
  char *zDir = th_tmpdir("kvlog-stats");
  KvLogConfig cfg;
  KvLogStore *p;
  KvLogStats st;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szDeadTrigger = 100;
  p = tk_open_cfg(zDir, &cfg);
  tk_put(p, 1, "a", "1");
  kv_logstore_stats(p, &st);
  ck_assert_int_eq(st.nLive, 1);
  ck_assert_int_eq(st.nFile, 1);
  ck_assert_int_eq(st.szLive, 8+13+1+1);
  ck_assert_int_eq(st.szStored, 16+st.szLive);
  ck_assert_int_eq(st.szDead, 0);
  ck_assert_int_eq(kv_logstore_compaction_due(p), 0);
  for(int i=2; i<40; i++) tk_put(p, (uint64_t)i, "a", "1");
  kv_logstore_stats(p, &st);
  ck_assert_int_eq(st.nLive, 1);
  ck_assert_int_eq(st.szDead, 38*(8+13+1+1));
  ck_assert_int_eq(kv_logstore_compaction_due(p), 1);
  tk_compact(p);
  ck_assert_int_eq(kv_logstore_compaction_due(p), 0);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_leftovers_are_deleted_at_open){
  char *zDir = th_tmpdir("kvlog-garbage");
  KvLogStore *p = tk_open(zDir, 0);
  char *zTmp = sqlite3_mprintf("%s/MANIFEST.tmp", zDir);
  char *zMrg = tk_file(zDir, 50, "kmrg");
  char *zOther = sqlite3_mprintf("%s/notes.txt", zDir);
  tk_put(p, 1, "a", "1");
  tk_sync(p);
  kv_logstore_close(p);
  ck_assert_int_eq(creat(zTmp, 0644)>=0, 1);
  ck_assert_int_eq(creat(zMrg, 0644)>=0, 1);
  ck_assert_int_eq(creat(zOther, 0644)>=0, 1);
  p = tk_open(zDir, 0);
  ck_assert(!tk_exists(zTmp));
  ck_assert(!tk_exists(zMrg));
  ck_assert(tk_exists(zOther));             /* not ours: left alone */
  tk_expect(p, "a", "1");
  kv_logstore_close(p);
  sqlite3_free(zTmp); sqlite3_free(zMrg); sqlite3_free(zOther);
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_kvlog_destroy_removes_the_directory){
  char *zDir = th_tmpdir("kvlog-destroy");
  char *zSub = sqlite3_mprintf("%s/t", zDir);
  KvLogStore *p = tk_open(zSub, 100);
  KvLogSnap *pSnap = 0;
  char *zErr = 0;
  tk_apply_range(p, 1, 50);
  tk_sync(p);
  tk_compact(p);
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  ck_assert_int_eq(kv_logstore_destroy(p, &zErr), SQLITE_OK);
  ck_assert(!tk_exists(zSub));
  ck_assert_int_eq(tk_apply_gen(p, 51, &zErr), SQLITE_MISUSE);
  ck_assert_ptr_nonnull(strstr(zErr, "destroyed"));
  sqlite3_free(zErr);
  kv_logsnap_free(pSnap);
  kv_logstore_close(p);
  sqlite3_free(zSub);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------- several processes -- */

static int64_t tk_now_ms(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

/* Follow what other handles appended (bWriter: as the one about to
** append), up to cidMax (0: all). */
static void tk_follow(KvLogStore *p, int bWriter, uint64_t cidMax){
  char *zErr = 0;
  int rc = kv_logstore_follow(p, bWriter, cidMax, 0, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "follow: rc=%d %s", rc, zErr ? zErr : "");
}

/* Two handles of one shared store (as two processes would have it): the
** one that compacts keeps the files its compaction replaced while the
** other one has not read past them, the other one switches to the merged
** files once it has, and the next compaction then removes them; both
** read every key right throughout, and a merged file and a log file may
** have the same number. */
START_TEST(test_kvlog_shared_compaction_waits_for_follower_then_removes){
  char *zDir = th_tmpdir("kvlog-shcmp");
  char *zFirst = tk_file(zDir, 1, "klog");
  char aVal[64];
  KvLogConfig cfg;
  KvLogStore *pA, *pB;
  int64_t iEnd;
  uint64_t cid;
  int i;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szFile = 512;
  cfg.szDeadTrigger = -1;
  cfg.bShared = 1;
  pA = tk_open_cfg(zDir, &cfg);
  cfg.bBackground = 1;
  pB = tk_open_cfg(zDir, &cfg);
  for(cid=1; cid<=60; cid++){
    char zKey[8];
    snprintf(zKey, sizeof(zKey), "k%d", (int)(cid%4));
    snprintf(aVal, sizeof(aVal), "%040llu", (unsigned long long)cid);
    tk_follow(pA, 1, 0);
    tk_put(pA, cid, zKey, aVal);
  }
  tk_sync(pA);
  tk_follow(pB, 0, 20);                    /* B lags behind */
  tk_compact(pA);
  ck_assert_int_eq(tk_stats(pA).nCompaction, 1);
  ck_assert_msg(tk_exists(zFirst), "a file B may still read was removed");
  for(i=0; i<4; i++){
    char zKey[8];
    snprintf(zKey, sizeof(zKey), "k%d", i);
    snprintf(aVal, sizeof(aVal), "%040llu", (unsigned long long)(i ? 56+i : 60));
    tk_expect(pA, zKey, aVal);
  }
  tk_follow(pB, 0, 0);                     /* B reads past them ... */
  iEnd = tk_now_ms() + 5000;
  while( tk_stats(pB).nFile>tk_stats(pA).nFile ){
    kv_logstore_tick(pB, 0);               /* ... and loads the MANIFEST */
    ck_assert_msg(tk_now_ms()<iEnd, "B kept %d files, A has %d",
                  tk_stats(pB).nFile, tk_stats(pA).nFile);
    usleep(5000);
  }
  tk_compact(pA);                          /* removes them */
  ck_assert_msg(!tk_exists(zFirst), "a replaced file is still there");
  ck_assert_int_le(tk_count_files(zDir, ".klog"), 2);
  tk_follow(pB, 1, 0);                     /* B appends too */
  tk_put(pB, 61, "k1", "from B");
  tk_sync(pB);
  tk_follow(pA, 0, 0);
  for(i=0; i<4; i++){
    char zKey[8];
    snprintf(zKey, sizeof(zKey), "k%d", i);
    snprintf(aVal, sizeof(aVal), "%040llu", (unsigned long long)(i ? 56+i : 60));
    tk_expect(pA, zKey, i==1 ? "from B" : aVal);
    tk_expect(pB, zKey, i==1 ? "from B" : aVal);
  }
  kv_logstore_close(pB);
  kv_logstore_close(pA);
  sqlite3_free(zFirst);
  sqlite3_free(zDir);
}
END_TEST

/* --------------------------------------------------------- read cache -- */

/* Walk the whole store: every value must be "v-<key>" (keys from
** tk_fill_keys); returns the rc that ended the walk (SQLITE_DONE at the
** end) with *pn the rows read, *pzErr the message of an error. */
static int tk_walk(KvLogStore *p, int *pn, char **pzErr){
  KvLogSnap *pSnap = 0;
  KvLogCursor *pCur = 0;
  KvLogBuf buf = {0, 0, 0};
  const uint8_t *aKey, *aVal;
  int nKey, nVal, rc;
  char zVal[64];
  *pn = 0;
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  ck_assert_int_eq(kv_logsnap_cursor(pSnap, &pCur), SQLITE_OK);
  kv_logsnap_free(pSnap);
  if( !kv_logcursor_seek(pCur, KV_SEEK_FIRST, 0, 0) ){
    rc = SQLITE_DONE;
  }else{
    rc = kv_logcursor_row(pCur, &aKey, &nKey, &buf, &aVal, &nVal, pzErr);
  }
  while( rc==SQLITE_OK ){
    snprintf(zVal, sizeof(zVal), "v-%.*s", nKey, (const char*)aKey);
    ck_assert_int_eq(nVal, (int)strlen(zVal));
    ck_assert_msg(memcmp(aVal, zVal, nVal)==0, "row %d: %.*s", *pn, nVal,
                  (const char*)aVal);
    (*pn)++;
    rc = kv_logcursor_step_row(pCur, 0, &aKey, &nKey, &buf, &aVal, &nVal,
                               pzErr);
  }
  kv_logcursor_free(pCur);
  kv_logbuf_free(&buf);
  return rc;
}

/* Keys k00000.. (6 bytes), values "v-<key>" (8 bytes): frames of 35
** bytes, the first at offset 16; cids from cid0 on. */
static void tk_fill_keys(KvLogStore *p, int n, uint64_t cid0){
  char zKey[16], zVal[32];
  int i;
  for(i=0; i<n; i++){
    snprintf(zKey, sizeof(zKey), "k%05d", i);
    snprintf(zVal, sizeof(zVal), "v-%s", zKey);
    tk_put(p, cid0+(uint64_t)i, zKey, zVal);
  }
  tk_sync(p);
}

/* A record is checked when it is first read into the cache: damage made
** to the file after that is not seen while the cache holds the record -
** reads return the bytes that were checked, never the damaged ones -
** and is reported (SQLITE_CORRUPT with file and offset) by the next read
** once the cache has let go of it (here: the limit set to 0), at every
** read after that. */
START_TEST(test_kvlog_record_damaged_after_caching_reads_as_cached){
  char *zDir = th_tmpdir("kvlog-cachedamage");
  KvLogStore *p = tk_open(zDir, 0);
  char *zFile = tk_file(zDir, 1, "klog");
  int64_t nOld;
  char *zErr = 0;
  int n;
  tk_fill_keys(p, 100, 1);
  ck_assert_int_eq(tk_walk(p, &n, &zErr), SQLITE_DONE);
  ck_assert_int_eq(n, 100);
  ck_assert_int_gt(kv_logstore_cache_used(), 100*35);
  tk_flip(zFile, 16 + 50*35 + 8+13+6+3);   /* a byte of k00050's value */
  ck_assert_int_eq(tk_walk(p, &n, &zErr), SQLITE_DONE);
  ck_assert_int_eq(n, 100);
  tk_expect(p, "k00050", "v-k00050");
  nOld = kv_logstore_cache_limit(0);
  ck_assert_int_eq(kv_logstore_cache_used(), 0);
  ck_assert_int_eq(tk_walk(p, &n, &zErr), SQLITE_CORRUPT);
  ck_assert_int_eq(n, 50);
  ck_assert_msg(zErr && strstr(zErr, "00000001.klog is corrupt at offset 1766"),
                "%s", zErr ? zErr : "(no message)");
  sqlite3_free(zErr);
  zErr = 0;
  kv_logstore_cache_limit(nOld);
  ck_assert_int_eq(tk_walk(p, &n, &zErr), SQLITE_CORRUPT);   /* again */
  ck_assert_int_eq(n, 50);
  sqlite3_free(zErr);
  kv_logstore_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* A damaged record read from the cache is reported at every read, by a
** get as by a walk: a failed check is not remembered as a pass. */
START_TEST(test_kvlog_damaged_record_in_cache_is_reported_at_every_read){
  char *zDir = th_tmpdir("kvlog-cachebad");
  KvLogStore *p = tk_open(zDir, 0);
  char *zFile = tk_file(zDir, 1, "klog");
  KvLogBuf buf = {0, 0, 0};
  char *zErr = 0;
  int i, n, bFound;
  tk_fill_keys(p, 100, 1);
  tk_flip(zFile, 16 + 20*35 + 8+13+6+3);   /* a byte of k00020's value */
  tk_expect(p, "k00019", "v-k00019");       /* caches the bytes around */
  for(i=0; i<2; i++){
    bFound = 1;
    ck_assert_int_eq(kv_logstore_get(p, "k00020", 6, &buf, 0, &bFound, &zErr),
                     SQLITE_CORRUPT);
    ck_assert_int_eq(bFound, 0);
    ck_assert_ptr_nonnull(strstr(zErr, "corrupt at offset 716"));
    sqlite3_free(zErr);
    zErr = 0;
    ck_assert_int_eq(tk_walk(p, &n, &zErr), SQLITE_CORRUPT);
    ck_assert_int_eq(n, 20);
    ck_assert_ptr_nonnull(strstr(zErr, "corrupt at offset 716"));
    sqlite3_free(zErr);
    zErr = 0;
  }
  tk_expect(p, "k00021", "v-k00021");
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* The cache stays within its limit, dropping the least recently used
** chunks, while walks and gets read every value right: two cursors walk
** side by side over 4000 records with an 8 KiB limit (each keeps reading
** a chunk the other's reads pushed out), and with the limit 0 nothing is
** cached. */
START_TEST(test_kvlog_cache_limit_bounds_the_cache_reads_stay_right){
  char *zDir = th_tmpdir("kvlog-cachelimit");
  KvLogStore *p = tk_open(zDir, 0);
  int64_t nOld = kv_logstore_cache_limit(8192);
  KvLogSnap *pSnap = 0;
  KvLogCursor *apCur[2] = {0, 0};
  KvLogBuf buf = {0, 0, 0};
  const uint8_t *aKey, *aVal;
  int nKey, nVal, i, j, n;
  char *zErr = 0;
  char zVal[32];
  ck_assert_int_eq(kv_logstore_cache_limit(-1), 8192);
  tk_fill_keys(p, 4000, 1);
  ck_assert_int_eq(kv_logstore_snapshot(p, &pSnap), SQLITE_OK);
  for(j=0; j<2; j++){
    ck_assert_int_eq(kv_logsnap_cursor(pSnap, &apCur[j]), SQLITE_OK);
    ck_assert(kv_logcursor_seek(apCur[j], j ? KV_SEEK_LAST : KV_SEEK_FIRST,
                                0, 0));
  }
  for(i=0; i<4000; i++){
    for(j=0; j<2; j++){
      int rc = i==0 ? kv_logcursor_row(apCur[j], &aKey, &nKey, &buf, &aVal,
                                       &nVal, &zErr)
                    : kv_logcursor_step_row(apCur[j], j, &aKey, &nKey, &buf,
                                            &aVal, &nVal, &zErr);
      ck_assert_int_eq(rc, SQLITE_OK);
      snprintf(zVal, sizeof(zVal), "v-k%05d", j ? 3999-i : i);
      ck_assert_int_eq(nVal, (int)strlen(zVal));
      ck_assert(memcmp(aVal, zVal, nVal)==0);
    }
    ck_assert_int_le(kv_logstore_cache_used(), 8192);
  }
  for(j=0; j<2; j++) kv_logcursor_free(apCur[j]);
  kv_logsnap_free(pSnap);
  tk_expect(p, "k01234", "v-k01234");
  ck_assert_int_gt(kv_logstore_cache_used(), 0);
  kv_logstore_cache_limit(0);
  ck_assert_int_eq(tk_walk(p, &n, &zErr), SQLITE_DONE);
  ck_assert_int_eq(n, 4000);
  tk_expect(p, "k03999", "v-k03999");
  ck_assert_int_eq(kv_logstore_cache_used(), 0);
  kv_logstore_cache_limit(nOld);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* A log file cut short under an open store: what the cache holds still
** reads (it was checked), a record past the new end is SQLITE_CORRUPT
** ("record beyond the end of the file"), and nothing crashes. */
START_TEST(test_kvlog_file_truncated_under_the_cache_is_corrupt_past_it){
  char *zDir = th_tmpdir("kvlog-cachetrunc");
  KvLogStore *p = tk_open(zDir, 0);
  char *zFile = tk_file(zDir, 1, "klog");
  KvLogBuf buf = {0, 0, 0};
  char *zErr = 0;
  int bFound = 1;
  tk_fill_keys(p, 1000, 1);
  tk_expect(p, "k00000", "v-k00000");     /* caches 4 KiB from offset 16 */
  tk_truncate(zFile, 16 + 10*35);
  tk_expect(p, "k00050", "v-k00050");
  ck_assert_int_eq(kv_logstore_get(p, "k00900", 6, &buf, 0, &bFound, &zErr),
                   SQLITE_CORRUPT);
  ck_assert_int_eq(bFound, 0);
  ck_assert_msg(zErr && strstr(zErr, "record beyond the end of the file"),
                "%s", zErr ? zErr : "(no message)");
  sqlite3_free(zErr);
  kv_logbuf_free(&buf);
  kv_logstore_close(p);
  sqlite3_free(zFile);
  sqlite3_free(zDir);
}
END_TEST

/* A WalIo whose armed write writes, lets a get read the store while the
** bytes are in the file, then fails. */
typedef struct TkMidIo TkMidIo;
struct TkMidIo {
  WalIo io;
  const WalIo *pBase;
  KvLogStore *p;
  int bArmed;
};
static ssize_t tkmPwrite(void *pCtx, int fd, const void *a, size_t n,
                         off_t o){
  TkMidIo *t = (TkMidIo*)pCtx;
  ssize_t r = t->pBase->xPwrite(t->pBase->pCtx, fd, a, n, o);
  if( t->bArmed ){
    t->bArmed = 0;
    tk_expect(t->p, "a", "1");
    errno = EIO;
    return -1;
  }
  return r;
}

/* The cache holds no byte past a file's published end: a get that reads
** while a transaction is being written (and then fails, so the file is
** cut back) caches none of its frames, and the next transaction, written
** at the same offset with other values, reads back as written. */
START_TEST(test_kvlog_cache_never_holds_bytes_past_the_published_end){
  char *zDir = th_tmpdir("kvlog-cacheend");
  TkMidIo t;
  KvLogConfig cfg;
  KvLogStore *p;
  KvLogAction a;
  char *zErr = 0;
  memset(&t, 0, sizeof(t));
  t.pBase = wal_io_posix();
  t.io = *t.pBase;             /* the POSIX methods take no context */
  t.io.pCtx = &t;
  t.io.xPwrite = tkmPwrite;
  memset(&cfg, 0, sizeof(cfg));
  cfg.szDeadTrigger = -1;
  cfg.pIo = &t.io;
  p = tk_open_cfg(zDir, &cfg);
  t.p = p;
  tk_put(p, 1, "a", "1");
  tk_sync(p);
  memset(&a, 0, sizeof(a));
  a.aKey = (const uint8_t*)"b"; a.nKey = 1;
  a.aVal = (const uint8_t*)"x"; a.nVal = 1;
  t.bArmed = 1;
  ck_assert_int_eq(kv_logstore_apply(p, 2, 1, &a, &zErr), SQLITE_IOERR_WRITE);
  sqlite3_free(zErr);
  tk_expect(p, "b", 0);
  tk_put(p, 2, "b", "2");
  tk_expect(p, "b", "2");
  tk_expect(p, "a", "1");
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

/* Threads that walk and get (values "v-<key>", as tk_fill_keys writes
** them) count what reads wrong or fails, while another rewrites keys. */
typedef struct TkCacheReader TkCacheReader;
struct TkCacheReader {
  KvLogStore *p;
  int nWalk;
  int nBad;                       /* wrong values and failed reads */
  int nRow;
};

static void *tk_cache_reader_main(void *pArg){
  TkCacheReader *r = (TkCacheReader*)pArg;
  KvLogBuf buf = {0, 0, 0};
  int i;
  for(i=0; i<r->nWalk; i++){
    KvLogSnap *pSnap = 0;
    KvLogCursor *pCur = 0;
    const uint8_t *aKey, *aVal;
    int nKey, nVal, rc, bFound = 0;
    char zVal[32], zKey[16];
    if( kv_logstore_snapshot(r->p, &pSnap)!=SQLITE_OK
     || kv_logsnap_cursor(pSnap, &pCur)!=SQLITE_OK ){
      r->nBad++;
      kv_logsnap_free(pSnap);
      break;
    }
    kv_logsnap_free(pSnap);
    rc = kv_logcursor_seek(pCur, (i&1) ? KV_SEEK_LAST : KV_SEEK_FIRST, 0, 0)
         ? kv_logcursor_row(pCur, &aKey, &nKey, &buf, &aVal, &nVal, 0)
         : SQLITE_DONE;
    while( rc==SQLITE_OK ){
      snprintf(zVal, sizeof(zVal), "v-%.*s", nKey, (const char*)aKey);
      if( nVal!=(int)strlen(zVal) || memcmp(aVal, zVal, nVal)!=0 ) r->nBad++;
      r->nRow++;
      rc = kv_logcursor_step_row(pCur, i&1, &aKey, &nKey, &buf, &aVal, &nVal,
                                 0);
    }
    if( rc!=SQLITE_DONE ) r->nBad++;
    kv_logcursor_free(pCur);
    snprintf(zKey, sizeof(zKey), "k%05d", (i*997)%3000);
    snprintf(zVal, sizeof(zVal), "v-%s", zKey);
    if( kv_logstore_get(r->p, zKey, 6, &buf, 0, &bFound, 0)!=SQLITE_OK
     || !bFound || buf.n!=8 || memcmp(buf.a, zVal, 8)!=0 ){
      r->nBad++;
    }
  }
  kv_logbuf_free(&buf);
  return 0;
}

static void *tk_cache_writer_main(void *pArg){
  TkWriter *w = (TkWriter*)pArg;
  uint64_t c;
  for(c=w->iFrom; c<=w->iTo && w->rc==SQLITE_OK; c++){
    char zKey[16], zVal[32];
    KvLogAction a;
    snprintf(zKey, sizeof(zKey), "k%05d", (int)((c*7919)%3000));
    snprintf(zVal, sizeof(zVal), "v-%s", zKey);
    memset(&a, 0, sizeof(a));
    a.aKey = (const uint8_t*)zKey; a.nKey = 6;
    a.aVal = (const uint8_t*)zVal; a.nVal = 8;
    w->rc = kv_logstore_apply(w->p, c, 1, &a, 0);
  }
  return 0;
}

/* Three threads walk (forward and backward) and get while a fourth
** rewrites keys, under a 12 KiB cache limit: chunks are dropped from the
** cache while other threads' walks still read them, and every read is
** right; the cache stays within its limit. */
START_TEST(test_kvlog_cache_shared_by_threads_under_a_small_limit){
  char *zDir = th_tmpdir("kvlog-cachethreads");
  KvLogStore *p = tk_open(zDir, 0);
  int64_t nOld = kv_logstore_cache_limit(12288);
  TkCacheReader ar[3];
  pthread_t at[3], tw;
  TkWriter w;
  int i;
  tk_fill_keys(p, 3000, 1);
  w.p = p; w.iFrom = 3001; w.iTo = 9000; w.rc = SQLITE_OK;
  ck_assert_int_eq(pthread_create(&tw, 0, tk_cache_writer_main, &w), 0);
  for(i=0; i<3; i++){
    memset(&ar[i], 0, sizeof(ar[i]));
    ar[i].p = p;
    ar[i].nWalk = 20;
    ck_assert_int_eq(pthread_create(&at[i], 0, tk_cache_reader_main, &ar[i]),
                     0);
  }
  for(i=0; i<3; i++) pthread_join(at[i], 0);
  pthread_join(tw, 0);
  ck_assert_int_eq(w.rc, SQLITE_OK);
  for(i=0; i<3; i++){
    ck_assert_int_eq(ar[i].nBad, 0);
    ck_assert_int_eq(ar[i].nRow, 20*3000);
  }
  ck_assert_int_le(kv_logstore_cache_used(), 12288);
  kv_logstore_cache_limit(nOld);
  kv_logstore_close(p);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("kvlog");
  TCase *tc = tcase_create("kvlog");
  tcase_add_test(tc, test_kvlog_apply_sync_reopen_round_trip);
  tcase_add_test(tc, test_kvlog_newest_wins_across_files_and_after_reopen);
  tcase_add_test(tc, test_kvlog_delete_hides_older_records_after_reopen);
  tcase_add_test(tc, test_kvlog_cids_must_increase);
  tcase_add_test(tc, test_kvlog_bad_arguments_change_nothing);
  tcase_add_test(tc, test_kvlog_large_value_round_trip);
  tcase_add_test(tc, test_kvlog_torn_tail_of_newest_file_is_cut);
  tcase_add_test(tc, test_kvlog_partial_transaction_at_tail_is_cut);
  tcase_add_loop_test(tc, test_kvlog_torn_header_of_new_file_is_repaired,
                      0, 16);
  tcase_add_loop_test(tc,
      test_kvlog_newest_header_zero_is_cut_damaged_is_corrupt, 0, 2);
  tcase_add_loop_test(tc, test_kvlog_flipped_byte_in_older_file_is_corrupt,
                      0, (int)(sizeof(aFlipOff)/sizeof(aFlipOff[0])));
  tcase_add_loop_test(tc, test_kvlog_truncated_older_file_is_corrupt, 0, 4);
  tcase_add_test(tc,
      test_kvlog_older_file_ending_inside_a_transaction_is_corrupt);
  tcase_add_test(tc,
      test_kvlog_huge_length_in_older_file_is_corrupt_not_allocated);
  tcase_add_test(tc, test_kvlog_corruption_found_by_a_read_is_reported);
  tcase_add_loop_test(tc, test_kvlog_walk_finds_a_damaged_value, 0, 2);
  tcase_add_test(tc, test_kvlog_cursor_after_cursor_reads_its_own_snapshot);
  tcase_add_loop_test(tc, test_kvlog_corrupt_manifest_is_corrupt, 0, 2);
  tcase_add_test(tc, test_kvlog_missing_merged_file_is_corrupt);
  tcase_add_loop_test(tc, test_kvlog_lost_manifest_or_first_file_is_corrupt,
                      0, 2);
  tcase_add_test(tc, test_kvlog_snapshot_does_not_see_later_writes);
  tcase_add_test(tc, test_kvlog_cursor_walks_live_keys_in_order);
  tcase_add_test(tc, test_kvlog_walk_window_starts_small_and_doubles);
  tcase_add_test(tc,
      test_kvlog_compaction_keeps_live_data_and_reclaims_dead_bytes);
  tcase_add_test(tc, test_kvlog_max_cid_survives_compaction_of_deletes);
  tcase_add_test(tc,
      test_kvlog_compaction_runs_while_a_snapshot_cursor_is_open);
  tcase_add_test(tc, test_kvlog_compaction_concurrent_with_appends);
  tcase_add_loop_test(tc,
      test_kvlog_compaction_stopped_at_each_step_reopens_same,
      KVLOG_STEP_ROLLED, KVLOG_STEP_COMMITTED+1);
  tcase_add_loop_test(tc,
      test_kvlog_compaction_killed_at_each_step_reopens_same,
      KVLOG_STEP_ROLLED, KVLOG_STEP_SWAPPED+1);
  tcase_add_loop_test(tc,
      test_kvlog_compaction_write_or_sync_fault_keeps_old_set, 0, 12);
  tcase_add_loop_test(tc, test_kvlog_write_fault_publishes_nothing, 0, 3);
  tcase_add_test(tc, test_kvlog_write_and_truncate_fault_refuses_until_reopen);
  tcase_add_test(tc, test_kvlog_sync_fault_reverts_and_refuses_until_reopen);
  tcase_add_loop_test(tc,
      test_kvlog_compaction_rename_or_dirsync_fault_is_safe, 0, 2);
  tcase_add_test(tc, test_kvlog_file_size_limit_fails_cleanly_in_a_child);
  tcase_add_test(tc,
      test_kvlog_sigkill_during_apply_sync_compaction_loses_no_sync);
  tcase_add_test(tc,
      test_kvlog_background_compaction_when_dead_bytes_pass_trigger);
  tcase_add_test(tc, test_kvlog_stats_and_compaction_due);
  tcase_add_test(tc, test_kvlog_leftovers_are_deleted_at_open);
  tcase_add_test(tc, test_kvlog_destroy_removes_the_directory);
  tcase_add_test(tc, test_kvlog_shared_compaction_waits_for_follower_then_removes);
  tcase_add_test(tc, test_kvlog_record_damaged_after_caching_reads_as_cached);
  tcase_add_test(tc,
                 test_kvlog_damaged_record_in_cache_is_reported_at_every_read);
  tcase_add_test(tc, test_kvlog_cache_limit_bounds_the_cache_reads_stay_right);
  tcase_add_test(tc,
                 test_kvlog_file_truncated_under_the_cache_is_corrupt_past_it);
  tcase_add_test(tc, test_kvlog_cache_never_holds_bytes_past_the_published_end);
  tcase_add_test(tc, test_kvlog_cache_shared_by_threads_under_a_small_limit);
  suite_add_tcase(s, tc);
  return s;
}
