/*
** bench_kvlog.c -- make bench workloads of the kv_log storage engine.
**
** Both workloads use the same 1M distinct keys ("k" + 9 digits, in a
** scrambled order) with 24-byte values.
**
** kv_log_load: load the 1M keys as 100 transactions of 10,000 keys, each
** made durable before the next.
**   baseline   INSERT into a WITHOUT ROWID table of a SQLite file database
**              (WAL mode, synchronous=FULL: each COMMIT is synced), one
**              BEGIN/COMMIT per 10,000 rows;
**   candidate  kv_logstore_apply() of each 10,000-action transaction, then
**              kv_logstore_sync().
**
** kv_log_reopen: the loaded data is opened again (the load is not timed).
**   baseline   open the SQLite file and SELECT count(*) of the table;
**   candidate  kv_logstore_open() (reads every record, newest to oldest,
**              and rebuilds the index) and kv_logstore_close().
** With 1M keys the candidate median is the reopen time per million keys.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/kv/logstore.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#define KLB_KEYS   1000000
#define KLB_BATCH  10000

/* Key i of the load order: a permutation of 0..KLB_KEYS-1. */
static int klbKey(int i, char *zKey){
  unsigned v = (unsigned)(((unsigned long long)i * 700001ull) % KLB_KEYS);
  return snprintf(zKey, 16, "k%09u", v);
}

static int klbVal(int i, char *zVal){
  return snprintf(zVal, 32, "value-%08d-abcdefghi", i);
}

static int klbSqliteLoad(const char *zDir, double *pCost){
  char *zDb = sqlite3_mprintf("%s/base.db", zDir);
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  double t0;
  int i, rc;
  char zKey[16], zVal[32];
  rc = sqlite3_open(zDb, &db);
  if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL;"
      "PRAGMA synchronous=FULL;"
      "CREATE TABLE t(k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID", 0, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db,
      "INSERT INTO t VALUES(?1, ?2)", -1, &pStmt, 0);
  t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<KLB_KEYS; i++){
    if( i%KLB_BATCH==0 ) sqlite3_exec(db, "BEGIN", 0, 0, 0);
    sqlite3_bind_blob(pStmt, 1, zKey, klbKey(i, zKey), SQLITE_STATIC);
    sqlite3_bind_blob(pStmt, 2, zVal, klbVal(i, zVal), SQLITE_STATIC);
    if( sqlite3_step(pStmt)!=SQLITE_DONE ) rc = SQLITE_ERROR;
    sqlite3_reset(pStmt);
    if( i%KLB_BATCH==KLB_BATCH-1 ) rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
  }
  *pCost = bench_now() - t0;
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  sqlite3_free(zDb);
  if( rc ) fprintf(stderr, "bench: sqlite load failed (%d)\n", rc);
  return rc;
}

static int klbLogLoad(const char *zDir, double *pCost){
  char *zStore = sqlite3_mprintf("%s/log", zDir);
  KvLogStore *p = 0;
  KvLogAction *aA = sqlite3_malloc64(sizeof(KvLogAction)*KLB_BATCH);
  char *aBuf = sqlite3_malloc64((sqlite3_uint64)KLB_BATCH*48);
  char *zErr = 0;
  double t0;
  int i, j, rc = (aA && aBuf && zStore) ? SQLITE_OK : SQLITE_NOMEM;
  if( rc==SQLITE_OK ) rc = kv_logstore_open(zStore, 0, &p, &zErr);
  t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<KLB_KEYS; i+=KLB_BATCH){
    for(j=0; j<KLB_BATCH; j++){
      char *zKey = aBuf + j*48, *zVal = zKey + 16;
      memset(&aA[j], 0, sizeof(aA[j]));
      aA[j].aKey = (const uint8_t*)zKey; aA[j].nKey = klbKey(i+j, zKey);
      aA[j].aVal = (const uint8_t*)zVal; aA[j].nVal = klbVal(i+j, zVal);
    }
    rc = kv_logstore_apply(p, (uint64_t)(i/KLB_BATCH+1), KLB_BATCH, aA,
                           &zErr);
    if( rc==SQLITE_OK ) rc = kv_logstore_sync(p, &zErr);
  }
  *pCost = bench_now() - t0;
  if( rc ) fprintf(stderr, "bench: kv_log load failed: %s\n", zErr);
  kv_logstore_close(p);
  sqlite3_free(zErr);
  sqlite3_free(aA);
  sqlite3_free(aBuf);
  sqlite3_free(zStore);
  return rc;
}

double bench_kvlog_load(int bCandidate, const char *zDir){
  double cost = -1;
  int rc = bCandidate ? klbLogLoad(zDir, &cost) : klbSqliteLoad(zDir, &cost);
  return rc==SQLITE_OK ? cost : -1;
}

static int klbSqliteReopen(const char *zDir, double *pCost){
  char *zDb = sqlite3_mprintf("%s/base.db", zDir);
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  double t0 = bench_now();
  int rc = sqlite3_open(zDb, &db);
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db, "SELECT count(*) FROM t",
                                              -1, &pStmt, 0);
  if( rc==SQLITE_OK && (sqlite3_step(pStmt)!=SQLITE_ROW
                        || sqlite3_column_int(pStmt, 0)!=KLB_KEYS) ){
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  *pCost = bench_now() - t0;
  sqlite3_free(zDb);
  return rc;
}

static int klbLogReopen(const char *zDir, double *pCost){
  char *zStore = sqlite3_mprintf("%s/log", zDir);
  KvLogStore *p = 0;
  KvLogStats st;
  char *zErr = 0;
  double t0 = bench_now();
  int rc = kv_logstore_open(zStore, 0, &p, &zErr);
  if( rc==SQLITE_OK ){
    kv_logstore_stats(p, &st);
    if( st.nLive!=KLB_KEYS ) rc = SQLITE_ERROR;
  }
  kv_logstore_close(p);
  *pCost = bench_now() - t0;
  if( rc ) fprintf(stderr, "bench: kv_log reopen failed: %s\n",
                   zErr ? zErr : "wrong key count");
  sqlite3_free(zErr);
  sqlite3_free(zStore);
  return rc;
}

double bench_kvlog_reopen(int bCandidate, const char *zDir){
  double cost = -1;
  int rc = bCandidate ? klbLogLoad(zDir, &cost) : klbSqliteLoad(zDir, &cost);
  if( rc==SQLITE_OK ){
    rc = bCandidate ? klbLogReopen(zDir, &cost)
                    : klbSqliteReopen(zDir, &cost);
  }
  return rc==SQLITE_OK ? cost : -1;
}
