/*
** bench_kvversion.c -- make bench workloads of the key-version protocol:
** versioned against ordinary 2PC through SQL, at 1, 16 and 256 keys per
** transaction, on a kv_memory table in an in-memory store (no WAL: the
** protocol's CPU cost alone), on a kv_memory table with persistence=1
** (the "durable" rows: each commit is one root-WAL append and fdatasync)
** and on a kv_btree table (always persistent, so durable the same way).
**
** Each transaction reads its keys, writes each of them once and commits,
** and both sides read their keys with ONE statement over the same JSON
** key list (built by the same code on both sides, inside the timed part).
** Baseline (ordinary): kv_begin, then
**   SELECT kv_get(h, 't', value) FROM json_each(keys)
** stepping every row, kv_put of every key, kv_prepare, kv_commit.
** Candidate (versioned):
**   SELECT key, value, version FROM kv_query_with_versions('t', keys)
** stepping every row and appending it to the read-set JSON (with plain
** appends, as an efficient client would; the key list is built by the
** same code on both sides), kv_begin,
** kv_put of every key, kv_prepare_with_version with the read set,
** kv_commit_with_version (whose receipts are checked and rendered as
** JSON).  The table is preloaded with 4096 keys; transactions walk them in
** order.  Cost: the time of a fixed number of keys over all transactions
** (KVV_TOTAL_KEYS in memory, a sixteenth of it on the persistent tables,
** whose commits each wait for a sync; those rows, kv_btree and the durable
** kv_memory ones, run at least 32 transactions, so 8192 keys at 256 keys
** per transaction: a sample of fewer commits is mostly their flush times).
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"

#include <stdio.h>
#include <string.h>

#define KVV_TABLE_KEYS 4096
#define KVV_TOTAL_KEYS 16384

typedef struct BenchV BenchV;
struct BenchV {
  sqlite3 *db;
  sqlite3_stmt *pBegin, *pGet, *pQuery, *pPut, *pPrep, *pCommit;
  sqlite3_stmt *pPrepV, *pCommitV;
};

static int benchvStep(sqlite3_stmt *p){
  int rc = sqlite3_step(p);
  if( rc==SQLITE_ROW || rc==SQLITE_DONE ) rc = SQLITE_OK;
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "bench_kvversion: %s\n",
            sqlite3_errmsg(sqlite3_db_handle(p)));
  }
  sqlite3_reset(p);
  return rc;
}

static void benchvClose(BenchV *b){
  sqlite3_finalize(b->pBegin); sqlite3_finalize(b->pGet);
  sqlite3_finalize(b->pQuery); sqlite3_finalize(b->pPut);
  sqlite3_finalize(b->pPrep); sqlite3_finalize(b->pCommit);
  sqlite3_finalize(b->pPrepV); sqlite3_finalize(b->pCommitV);
  sqlite3_close(b->db);
}

/* zType: the table type and arguments; zDir: a scratch directory for a
** persistent one (the main database is zDir/main.db, so the handles and
** queries use its sidecar store).  Plain "kv_memory" runs on an in-memory
** main database, so its store is in memory too. */
static int benchvOpen(BenchV *b, const char *zType, const char *zDir){
  static const char *azSql[] = {
    "SELECT kv_begin()",
    "SELECT kv_get(?1, 't', value) FROM json_each(?2)",
    "SELECT key, value, version FROM kv_query_with_versions('t', ?2)",
    "SELECT kv_put(?1, 't', ?2, ?3)",
    "SELECT kv_prepare(?1)",
    "SELECT kv_commit(?1)",
    "SELECT kv_prepare_with_version(?1, ?2)",
    "SELECT kv_commit_with_version(?1)",
  };
  sqlite3_stmt **ap[8];
  int i, rc;
  memset(b, 0, sizeof(*b));
  ap[0] = &b->pBegin; ap[1] = &b->pGet; ap[2] = &b->pQuery; ap[3] = &b->pPut;
  ap[4] = &b->pPrep; ap[5] = &b->pCommit; ap[6] = &b->pPrepV;
  ap[7] = &b->pCommitV;
  char *zPath = sqlite3_mprintf("%s/main.db", zDir);
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING %s; "
      "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM c WHERE "
      "i<4095) INSERT INTO t SELECT i, i FROM c", zType);
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  rc = (zPath && zSql) ? SQLITE_OK : SQLITE_NOMEM;
  if( rc==SQLITE_OK ){
    rc = sqlite3_open(strcmp(zType, "kv_memory")==0 ? ":memory:" : zPath,
                      &b->db);
  }
  if( rc==SQLITE_OK ) rc = sqlite3_exec(b->db, zSql, 0, 0, 0);
  sqlite3_free(zPath);
  sqlite3_free(zSql);
  for(i=0; rc==SQLITE_OK && i<8; i++){
    rc = sqlite3_prepare_v2(b->db, azSql[i], -1, ap[i], 0);
  }
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "bench_kvversion: %s\n", sqlite3_errmsg(b->db));
    benchvClose(b);
  }
  return rc;
}

/* Run sqlite3 statement p with handle h bound as ?1. */
static int benchvH(sqlite3_stmt *p, sqlite3_int64 h){
  sqlite3_bind_int64(p, 1, h);
  return benchvStep(p);
}

/* The JSON key list of keys iFirst..iFirst+nKey-1 (NULL on OOM). */
static char *benchvKeys(int iFirst, int nKey){
  sqlite3_str *p = sqlite3_str_new(0);
  int i;
  sqlite3_str_appendchar(p, 1, '[');
  for(i=0; i<nKey; i++){
    sqlite3_str_appendf(p, "%s%d", i ? "," : "", (iFirst+i)%KVV_TABLE_KEYS);
  }
  sqlite3_str_appendchar(p, 1, ']');
  return sqlite3_str_finish(p);
}

/* Step p to its end; SQLITE_OK or the error (reported). */
static int benchvDrain(sqlite3_stmt *p, int *pnRow){
  int rc;
  *pnRow = 0;
  while( (rc = sqlite3_step(p))==SQLITE_ROW ) (*pnRow)++;
  return benchvStep(p)==SQLITE_OK && rc==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
}

/* One ordinary transaction over keys iFirst..iFirst+nKey-1. */
static int benchvOrdinary(BenchV *b, int iFirst, int nKey, int iRound){
  sqlite3_int64 h = 0;
  int i, nRow = 0, rc = SQLITE_OK;
  if( sqlite3_step(b->pBegin)==SQLITE_ROW ) h = sqlite3_column_int64(b->pBegin, 0);
  sqlite3_reset(b->pBegin);
  sqlite3_bind_int64(b->pGet, 1, h);
  sqlite3_bind_text(b->pGet, 2, benchvKeys(iFirst, nKey), -1, sqlite3_free);
  rc = benchvDrain(b->pGet, &nRow);
  if( rc==SQLITE_OK && nRow!=nKey ) rc = SQLITE_ERROR;
  for(i=0; rc==SQLITE_OK && i<nKey; i++){
    sqlite3_bind_int64(b->pPut, 1, h);
    sqlite3_bind_int(b->pPut, 2, (iFirst+i)%KVV_TABLE_KEYS);
    sqlite3_bind_int(b->pPut, 3, iRound);
    rc = benchvStep(b->pPut);
  }
  if( rc==SQLITE_OK ) rc = benchvH(b->pPrep, h);
  if( rc==SQLITE_OK ) rc = benchvH(b->pCommit, h);
  return rc;
}

/* The read-set text a versioned client builds (NUL-terminated). */
typedef struct BenchvText BenchvText;
struct BenchvText {
  char *z;
  int n, nAlloc;
  int rc;                         /* SQLITE_NOMEM once an append failed */
};

static void benchvAppend(BenchvText *p, const char *z, int n){
  if( p->rc!=SQLITE_OK ) return;
  if( p->n+n+1>p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 4096;
    char *zNew;
    while( nNew<p->n+n+1 ) nNew *= 2;
    if( (zNew = sqlite3_realloc64(p->z, nNew))==0 ){
      p->rc = SQLITE_NOMEM;
      return;
    }
    p->z = zNew;
    p->nAlloc = nNew;
  }
  memcpy(p->z+p->n, z, n);
  p->n += n;
  p->z[p->n] = 0;
}

/* Append integer v in decimal. */
static void benchvAppendInt(BenchvText *p, sqlite3_int64 v){
  char a[24];
  sqlite3_uint64 u = v<0 ? (sqlite3_uint64)0-(sqlite3_uint64)v
                         : (sqlite3_uint64)v;
  int i = (int)sizeof(a);
  do{ a[--i] = (char)('0'+u%10); u /= 10; }while( u );
  if( v<0 ) a[--i] = '-';
  benchvAppend(p, a+i, (int)sizeof(a)-i);
}

/* One versioned transaction over the same keys. */
static int benchvVersioned(BenchV *b, int iFirst, int nKey, int iRound){
  static const char zHead[] = "{\"table\":\"t\",\"key\":";
  static const char zMid[] = ",\"version\":\"";
  BenchvText json = {0, 0, 0, SQLITE_OK};
  sqlite3_int64 h = 0;
  char *zJson;
  int i, rc = SQLITE_OK;
  benchvAppend(&json, "[", 1);
  sqlite3_bind_text(b->pQuery, 2, benchvKeys(iFirst, nKey), -1, sqlite3_free);
  for(i=0; sqlite3_step(b->pQuery)==SQLITE_ROW; i++){
    if( i ) benchvAppend(&json, ",", 1);
    benchvAppend(&json, zHead, (int)sizeof(zHead)-1);
    benchvAppendInt(&json, sqlite3_column_int64(b->pQuery, 0));
    benchvAppend(&json, zMid, (int)sizeof(zMid)-1);
    benchvAppend(&json, (const char*)sqlite3_column_text(b->pQuery, 2),
                 sqlite3_column_bytes(b->pQuery, 2));
    benchvAppend(&json, "\"}", 2);
  }
  rc = sqlite3_reset(b->pQuery);
  if( rc==SQLITE_OK && i!=nKey ) rc = SQLITE_ERROR;
  benchvAppend(&json, "]", 1);
  if( rc==SQLITE_OK ) rc = json.rc;
  zJson = json.z;
  if( sqlite3_step(b->pBegin)==SQLITE_ROW ) h = sqlite3_column_int64(b->pBegin, 0);
  sqlite3_reset(b->pBegin);
  for(i=0; rc==SQLITE_OK && i<nKey; i++){
    sqlite3_bind_int64(b->pPut, 1, h);
    sqlite3_bind_int(b->pPut, 2, (iFirst+i)%KVV_TABLE_KEYS);
    sqlite3_bind_int(b->pPut, 3, iRound);
    rc = benchvStep(b->pPut);
  }
  sqlite3_bind_int64(b->pPrepV, 1, h);
  sqlite3_bind_text(b->pPrepV, 2, zJson, -1, sqlite3_free);
  if( rc==SQLITE_OK ) rc = benchvStep(b->pPrepV);
  if( rc==SQLITE_OK ) rc = benchvH(b->pCommitV, h);
  return rc;
}

static double benchvRun(int bCandidate, int nKey, const char *zType,
                        const char *zDir){
  BenchV b;
  double t0, t1;
  int nTotal = strcmp(zType, "kv_memory")==0 ? KVV_TOTAL_KEYS
                                              : KVV_TOTAL_KEYS/16;
  int i, rc, nTxn;
  if( strcmp(zType, "kv_memory")!=0 && nTotal<32*nKey ){
    nTotal = 32*nKey;             /* durable rows: at least 32 commits */
  }
  nTxn = nTotal/nKey;
  if( benchvOpen(&b, zType, zDir)!=SQLITE_OK ) return -1;
  t0 = bench_now();
  for(i=0, rc=SQLITE_OK; rc==SQLITE_OK && i<nTxn; i++){
    rc = bCandidate ? benchvVersioned(&b, i*nKey, nKey, i)
                    : benchvOrdinary(&b, i*nKey, nKey, i);
  }
  t1 = bench_now();
  benchvClose(&b);
  return rc==SQLITE_OK ? t1-t0 : -1;
}

double bench_kvversion_1(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 1, "kv_memory", zDir);
}

double bench_kvversion_16(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 16, "kv_memory", zDir);
}

double bench_kvversion_256(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 256, "kv_memory", zDir);
}

double bench_kvversion_btree_1(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 1, "kv_btree", zDir);
}

double bench_kvversion_btree_16(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 16, "kv_btree", zDir);
}

double bench_kvversion_btree_256(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 256, "kv_btree", zDir);
}

double bench_kvversion_durable_1(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 1, "kv_memory(persistence=1)", zDir);
}

double bench_kvversion_durable_16(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 16, "kv_memory(persistence=1)", zDir);
}

double bench_kvversion_durable_256(int bCandidate, const char *zDir){
  return benchvRun(bCandidate, 256, "kv_memory(persistence=1)", zDir);
}
