/*
** bench_kvlib.c -- make bench workloads of the KV codec and map.
**
** kv_map_put: 100 transactions of 1000 upserts each (random integer keys
** out of 200k, short text values).
**   baseline   INSERT OR REPLACE through a prepared statement into a
**              WITHOUT ROWID table of an in-memory SQLite database, one
**              BEGIN/COMMIT per transaction;
**   candidate  the same keys and values encoded with kv_codec and put into
**              a per-transaction write-set map, which is then applied to
**              the shared map as a commit does (sharing the entries'
**              bytes, kv_map_put_from): a reader holds a snapshot
**              of the published version meanwhile, so the commit copies
**              the paths it touches and the snapshot is released after.
** The keys and values are built as sqlite3_value objects before the timed
** region on both sides (a virtual table receives them ready-made).
*/
#include "config.h"
#include "tests/bench/bench.h"
#define SQLITE_CORE 1
#include "ext/kv/codec.h"
#include "ext/kv/map.h"

#include <stdio.h>
#include <stdlib.h>

#define KVB_TXN   100
#define KVB_ROWS  1000
#define KVB_SPACE 200000

/* The workload's keys and values, the same for every run. */
typedef struct KvbData KvbData;
struct KvbData {
  sqlite3 *db;
  sqlite3_value **apKey;
  sqlite3_value **apVal;
};

static int kvbDataInit(KvbData *p){
  sqlite3_stmt *pStmt = 0;
  uint64_t x = 88172645463325252ull;
  int i, n = KVB_TXN*KVB_ROWS;
  p->apKey = calloc(n, sizeof(sqlite3_value*));
  p->apVal = calloc(n, sizeof(sqlite3_value*));
  if( p->apKey==0 || p->apVal==0 ) return SQLITE_NOMEM;
  if( sqlite3_open(":memory:", &p->db)!=SQLITE_OK ) return SQLITE_ERROR;
  if( sqlite3_prepare_v2(p->db, "SELECT ?1, printf('value-%08d', ?1)", -1,
                         &pStmt, 0)!=SQLITE_OK ) return SQLITE_ERROR;
  for(i=0; i<n; i++){
    x ^= x<<13; x ^= x>>7; x ^= x<<17;
    sqlite3_bind_int64(pStmt, 1, (sqlite3_int64)(x % KVB_SPACE));
    if( sqlite3_step(pStmt)!=SQLITE_ROW ) break;
    p->apKey[i] = sqlite3_value_dup(sqlite3_column_value(pStmt, 0));
    p->apVal[i] = sqlite3_value_dup(sqlite3_column_value(pStmt, 1));
    sqlite3_reset(pStmt);
    if( p->apKey[i]==0 || p->apVal[i]==0 ) break;
  }
  sqlite3_finalize(pStmt);
  return i==n ? SQLITE_OK : SQLITE_NOMEM;
}

static void kvbDataFree(KvbData *p){
  int i;
  for(i=0; i<KVB_TXN*KVB_ROWS; i++){
    if( p->apKey ) sqlite3_value_free(p->apKey[i]);
    if( p->apVal ) sqlite3_value_free(p->apVal[i]);
  }
  free(p->apKey);
  free(p->apVal);
  sqlite3_close(p->db);
}

static double kvbBaseline(KvbData *pData){
  sqlite3 *db = 0;
  sqlite3_stmt *pIns = 0;
  double t0, t1 = -1;
  int t, i, rc = SQLITE_OK;
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ) goto done;
  sqlite3_exec(db, "CREATE TABLE t(key PRIMARY KEY NOT NULL, value) "
                   "WITHOUT ROWID", 0, 0, 0);
  if( sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t VALUES(?1, ?2)", -1,
                         &pIns, 0)!=SQLITE_OK ) goto done;
  t0 = bench_now();
  for(t=0; t<KVB_TXN && rc==SQLITE_OK; t++){
    sqlite3_exec(db, "BEGIN", 0, 0, 0);
    for(i=t*KVB_ROWS; i<(t+1)*KVB_ROWS; i++){
      sqlite3_bind_value(pIns, 1, pData->apKey[i]);
      sqlite3_bind_value(pIns, 2, pData->apVal[i]);
      if( sqlite3_step(pIns)!=SQLITE_DONE ) rc = SQLITE_ERROR;
      sqlite3_reset(pIns);
    }
    if( sqlite3_exec(db, "COMMIT", 0, 0, 0)!=SQLITE_OK ) rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ) t1 = bench_now() - t0;
done:
  if( t1<0 ) fprintf(stderr, "kv_map_put baseline: %s\n", sqlite3_errmsg(db));
  sqlite3_finalize(pIns);
  sqlite3_close(db);
  return t1;
}

/* One transaction's write set: rows [iFirst, iFirst+KVB_ROWS). */
static int kvbWriteSet(KvbData *pData, int iFirst, KvBuf *pK, KvBuf *pV,
                       KvMap **ppWs){
  int i, rc = SQLITE_OK;
  for(i=iFirst; i<iFirst+KVB_ROWS && rc==SQLITE_OK; i++){
    kv_buf_reset(pK);
    kv_buf_reset(pV);
    rc = kv_key_encode(pData->apKey[i], pK, 0);
    if( rc==SQLITE_OK ) rc = kv_value_encode(pData->apKey[i],
                                             pData->apVal[i], pV, 0);
    if( rc==SQLITE_OK ) rc = kv_map_put(ppWs, pK->a, pK->n, pV->a, pV->n,
                                        0, 0);
  }
  return rc;
}

/* Apply write set pWs to *ppShared as commit number rev. */
static int kvbApply(KvMap *pWs, KvMap **ppShared, uint64_t rev){
  KvMapCursor *pCur = kv_map_cursor_new(pWs);
  KvMapEntry e;
  int ok, rc = pCur ? SQLITE_OK : SQLITE_NOMEM;
  for(ok=pCur ? kv_map_cursor_seek(pCur, KV_SEEK_FIRST, 0, 0) : 0;
      ok && rc==SQLITE_OK; ok=kv_map_cursor_next(pCur)){
    kv_map_cursor_entry(pCur, &e);
    if( e.bTomb ){
      rc = kv_map_remove(ppShared, e.aKey, e.nKey);
    }else{
      rc = kv_map_put_from(ppShared, pCur, rev, 0);
    }
  }
  kv_map_cursor_free(pCur);
  return rc;
}

static double kvbCandidate(KvbData *pData){
  KvMap *pShared = kv_map_new();
  KvBuf k = {0}, v = {0};
  double t0, t1 = -1;
  int t, rc = pShared ? SQLITE_OK : SQLITE_NOMEM;
  t0 = bench_now();
  for(t=0; t<KVB_TXN && rc==SQLITE_OK; t++){
    KvMap *pWs = kv_map_new();
    KvMap *pSnap = kv_map_ref(pShared);     /* a reader's snapshot */
    rc = pWs ? kvbWriteSet(pData, t*KVB_ROWS, &k, &v, &pWs) : SQLITE_NOMEM;
    if( rc==SQLITE_OK ) rc = kvbApply(pWs, &pShared, (uint64_t)t+1);
    kv_map_unref(pSnap);
    kv_map_unref(pWs);
  }
  if( rc==SQLITE_OK ) t1 = bench_now() - t0;
  else fprintf(stderr, "kv_map_put candidate: error %d\n", rc);
  kv_map_unref(pShared);
  kv_buf_free(&k);
  kv_buf_free(&v);
  return t1;
}

double bench_kv_map_put(int bCandidate, const char *zDir){
  KvbData data = {0, 0, 0};
  double r = -1;
  (void)zDir;
  if( kvbDataInit(&data)==SQLITE_OK ){
    r = bCandidate ? kvbCandidate(&data) : kvbBaseline(&data);
  }else{
    fprintf(stderr, "kv_map_put: cannot build the workload's values\n");
  }
  kvbDataFree(&data);
  return r;
}
