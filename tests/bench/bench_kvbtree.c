/*
** bench_kvbtree.c -- make bench workloads of kv_btree tables through SQL.
**
** kv_btree_upsert: 20 transactions of 1000 "INSERT OR REPLACE" point
**   upserts (integer keys spread over 50000, text values).  Baseline: the
**   same statement on a WITHOUT ROWID table in a file database (WAL mode,
**   synchronous=NORMAL).  Candidate: a kv_btree table.  The timed region
**   is the 20 transactions and their COMMITs on both sides: the collector
**   runs meanwhile (its CPU and I/O compete inside the region), and what it
**   has not yet written when the last COMMIT returns is left out, as the
**   baseline leaves out the checkpoint of its WAL's tail.
** kv_btree_upsert_drained: the same, and then the baseline runs
**   "PRAGMA wal_checkpoint(FULL)" (every row in the main file, synced) while
**   the candidate waits until its collector has written, synced and
**   confirmed everything.
** kv_btree_read: 20000 point reads "SELECT value FROM t WHERE key=?" of
**   random present keys out of 50000 rows.  Baseline: the same file table.
**   Candidate: a kv_btree table whose rows are all in its data file.
** kv_btree_stream: 200 transactions of 1000 upserts (random 200-byte
**   values, 200000 distinct keys) into a store whose overlay limit is set to
**   20000 entries: 10x the limit, so committers wait for the collector.
**   Baseline: the plain file table.  Compare the peak RSS column.
*/
#include "config.h"
#define SQLITE_CORE 1  /* kv_test.h pulls in sqlite3ext.h through kv.h */
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include "ext/kv/kv_test.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KB_TXN     20
#define KB_ROWS    1000
#define KB_KEYS    50000
#define KB_READS   20000
#define KB_STREAM_TXN 200
#define KB_STREAM_LIMIT 20000

/* A connection set up for one side: table t, plain or kv_btree. */
static sqlite3 *kbOpen(int bCandidate, const char *zDir){
  sqlite3 *db = 0;
  char *zFile = sqlite3_mprintf("%s/plain.db", zDir);
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_btree("
                               "dir='%q/store')", zDir);
  int rc;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  rc = sqlite3_open(bCandidate ? ":memory:" : zFile, &db);
  if( rc==SQLITE_OK && bCandidate ) rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc==SQLITE_OK && !bCandidate ){
    rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE t(key PRIMARY KEY NOT NULL, value) WITHOUT ROWID",
        0, 0, 0);
  }
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "kv_btree bench: %s\n", db ? sqlite3_errmsg(db) : "oom");
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zFile);
  sqlite3_free(zSql);
  return db;
}

/* Wait until every collector has confirmed everything. */
static int kbDrain(sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT coalesce(sum(pending_"
      "confirmations),0) + coalesce(sum(overlay_entries),0) FROM kv_stats",
      -1, &pStmt, 0);
  while( rc==SQLITE_OK ){
    sqlite3_int64 n = -1;
    if( sqlite3_step(pStmt)==SQLITE_ROW ) n = sqlite3_column_int64(pStmt, 0);
    sqlite3_reset(pStmt);
    if( n==0 ) break;
    if( n<0 ) rc = SQLITE_ERROR;
    usleep(1000);
  }
  sqlite3_finalize(pStmt);
  return rc;
}

/* nTxn transactions of KB_ROWS upserts; keys from iKey0 (bSpread: spread
** over KB_KEYS), values of nVal bytes. */
static int kbUpserts(sqlite3 *db, int nTxn, int bSpread, int nVal){
  sqlite3_stmt *pStmt = 0;
  int i, j, rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t VALUES(?1, "
      "substr(printf('value-%d-%.200c', ?1, 'x'), 1, ?2))", -1, &pStmt, 0);
  for(i=0; rc==SQLITE_OK && i<nTxn; i++){
    rc = sqlite3_exec(db, "BEGIN", 0, 0, 0);
    for(j=0; rc==SQLITE_OK && j<KB_ROWS; j++){
      int k = i*KB_ROWS + j;
      if( bSpread ) k = (int)(((unsigned)k*2654435761u) % KB_KEYS);
      sqlite3_bind_int(pStmt, 1, k);
      sqlite3_bind_int(pStmt, 2, nVal);
      rc = sqlite3_step(pStmt)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
      sqlite3_reset(pStmt);
    }
    if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
  }
  sqlite3_finalize(pStmt);
  return rc;
}

/* The upsert workload; bDrain: also fold everything into the main/data
** file inside the timed region. */
static double kbUpsertRun(int bCandidate, const char *zDir, int bDrain){
  sqlite3 *db = kbOpen(bCandidate, zDir);
  double t0, t1 = -1;
  int rc;
  if( db==0 ) return -1;
  t0 = bench_now();
  rc = kbUpserts(db, KB_TXN, 1, 16);
  if( rc==SQLITE_OK && bDrain ){
    rc = bCandidate ? kbDrain(db)
       : sqlite3_exec(db, "PRAGMA wal_checkpoint(FULL)", 0, 0, 0);
  }
  if( rc==SQLITE_OK ) t1 = bench_now() - t0;
  else fprintf(stderr, "kv_btree_upsert: %s\n", sqlite3_errmsg(db));
  if( rc==SQLITE_OK && bCandidate && kbDrain(db)!=SQLITE_OK ) t1 = -1;
  sqlite3_close(db);
  return t1;
}

double bench_kv_btree_upsert(int bCandidate, const char *zDir){
  return kbUpsertRun(bCandidate, zDir, 0);
}

double bench_kv_btree_upsert_drained(int bCandidate, const char *zDir){
  return kbUpsertRun(bCandidate, zDir, 1);
}

double bench_kv_btree_read(int bCandidate, const char *zDir){
  sqlite3 *db = kbOpen(bCandidate, zDir);
  sqlite3_stmt *pStmt = 0;
  double t0, t1 = -1;
  int i, rc;
  unsigned x = 12345;
  if( db==0 ) return -1;
  rc = kbUpserts(db, KB_KEYS/KB_ROWS, 0, 16);
  if( rc==SQLITE_OK && bCandidate ) rc = kbDrain(db);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "SELECT value FROM t WHERE key=?1", -1,
                            &pStmt, 0);
  }
  t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<KB_READS; i++){
    x = x*1103515245u + 12345u;
    sqlite3_bind_int(pStmt, 1, (int)((x>>8) % KB_KEYS));
    rc = sqlite3_step(pStmt)==SQLITE_ROW ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(pStmt);
  }
  if( rc==SQLITE_OK ) t1 = bench_now() - t0;
  else fprintf(stderr, "kv_btree_read: %s\n", sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return t1;
}

double bench_kv_btree_stream(int bCandidate, const char *zDir){
  sqlite3 *db = kbOpen(bCandidate, zDir);
  char *zStore = sqlite3_mprintf("%s/store", zDir);
  char zReal[PATH_MAX];
  double t0, t1 = -1;
  int rc = SQLITE_OK;
  if( db==0 || zStore==0 ){ sqlite3_close(db); sqlite3_free(zStore); return -1; }
  if( bCandidate ){
    rc = realpath(zStore, zReal)
       ? kv_btree_test_overlay_limit(zReal, KB_STREAM_LIMIT) : SQLITE_ERROR;
  }
  t0 = bench_now();
  if( rc==SQLITE_OK ) rc = kbUpserts(db, KB_STREAM_TXN, 0, 200);
  if( rc==SQLITE_OK && bCandidate ) rc = kbDrain(db);
  if( rc==SQLITE_OK ) t1 = bench_now() - t0;
  else fprintf(stderr, "kv_btree_stream: rc=%d %s\n", rc, sqlite3_errmsg(db));
  sqlite3_close(db);
  sqlite3_free(zStore);
  return t1;
}
