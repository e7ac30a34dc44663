/*
** bench_kvlogsql.c -- make bench workloads of kv_log tables through SQL.
**
** Both workloads load 1M distinct text keys ("k" + 9 digits, in a
** scrambled order) with 24-byte text values, as 100 transactions of
** 10,000 "INSERT INTO t VALUES(?1, ?2)" steps of one prepared statement.
** The main database is a file (main.db) in both cases.
**
** kv_log_sql_load: the load.
**   baseline   a WITHOUT ROWID table in main.db (WAL mode,
**              synchronous=FULL: each COMMIT is synced, as each kv_log
**              COMMIT is in the root WAL);
**   candidate  a kv_log table (dir=<scratch>/store); the timed region ends
**              when the collector has synced the log and confirmed every
**              transaction (kv_stats shows nothing pending).
** kv_log_sql_reopen: after the same load (not timed) the connection is
**   closed - for kv_log that closes the store, its collector drains - and
**   the timed region opens main.db again and runs the first query, a point
**   read of one key.  For kv_log the first query connects the table, which
**   opens the store: the catalog, the WAL (nothing to replay after a clean
**   close) and the log files, whose every record is read to rebuild the
**   index.  With 1M keys the candidate median is the reopen time per
**   million keys.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define KLS_KEYS   1000000
#define KLS_BATCH  10000

/* Key i of the load order: a permutation of 0..KLS_KEYS-1. */
static int klsKey(int i, char *zKey){
  unsigned v = (unsigned)(((unsigned long long)i * 700001ull) % KLS_KEYS);
  return snprintf(zKey, 16, "k%09u", v);
}

static int klsVal(int i, char *zVal){
  return snprintf(zVal, 32, "value-%08d-abcdefghi", i);
}

/* Open zDir/main.db; with bCreate, create table t on the given side. */
static sqlite3 *klsOpen(int bCandidate, const char *zDir, int bCreate){
  sqlite3 *db = 0;
  char *zFile = sqlite3_mprintf("%s/main.db", zDir);
  char *zSql = bCandidate
    ? sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_log(dir='%q/store')",
                      zDir)
    : sqlite3_mprintf("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                      "CREATE TABLE t(key PRIMARY KEY NOT NULL, value) "
                      "WITHOUT ROWID");
  int rc = (zFile && zSql) ? SQLITE_OK : SQLITE_NOMEM;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( rc==SQLITE_OK ) rc = sqlite3_open(zFile, &db);
  if( rc==SQLITE_OK && !bCandidate && !bCreate ){
    rc = sqlite3_exec(db, "PRAGMA synchronous=FULL", 0, 0, 0);
  }
  if( rc==SQLITE_OK && bCreate ) rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "kv_log sql bench: %s\n", db ? sqlite3_errmsg(db) : "oom");
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zFile);
  sqlite3_free(zSql);
  return db;
}

/* Wait until every collector has confirmed everything. */
static int klsDrain(sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  int rc = sqlite3_prepare_v2(db, "SELECT coalesce(sum(pending_"
      "confirmations),0) FROM kv_stats", -1, &pStmt, 0);
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

/* The 1M-key load: 100 transactions of 10,000 inserts. */
static int klsLoad(sqlite3 *db){
  sqlite3_stmt *pStmt = 0;
  char zKey[16], zVal[32];
  int i, rc = sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?1, ?2)", -1,
                                 &pStmt, 0);
  for(i=0; rc==SQLITE_OK && i<KLS_KEYS; i++){
    if( i%KLS_BATCH==0 ) rc = sqlite3_exec(db, "BEGIN", 0, 0, 0);
    sqlite3_bind_text(pStmt, 1, zKey, klsKey(i, zKey), SQLITE_STATIC);
    sqlite3_bind_text(pStmt, 2, zVal, klsVal(i, zVal), SQLITE_STATIC);
    if( rc==SQLITE_OK && sqlite3_step(pStmt)!=SQLITE_DONE ) rc = SQLITE_ERROR;
    sqlite3_reset(pStmt);
    if( rc==SQLITE_OK && i%KLS_BATCH==KLS_BATCH-1 ){
      rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
    }
  }
  if( rc!=SQLITE_OK ) fprintf(stderr, "kv_log sql load: %s\n",
                              sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  return rc;
}

/* Load (timed into *pCost when pCost is not NULL) and close. */
static int klsLoadAndClose(int bCandidate, const char *zDir, double *pCost){
  sqlite3 *db = klsOpen(bCandidate, zDir, 1);
  double t0 = bench_now();
  int rc = db ? klsLoad(db) : SQLITE_ERROR;
  if( rc==SQLITE_OK && bCandidate ) rc = klsDrain(db);
  if( pCost ) *pCost = bench_now() - t0;
  sqlite3_close(db);
  return rc;
}

double bench_kvlog_sql_load(int bCandidate, const char *zDir){
  double cost = -1;
  int rc = klsLoadAndClose(bCandidate, zDir, &cost);
  return rc==SQLITE_OK ? cost : -1;
}

/* Open main.db again and read one key; checks the value. */
static int klsReopen(int bCandidate, const char *zDir, double *pCost){
  sqlite3 *db;
  sqlite3_stmt *pStmt = 0;
  char zKey[16], zVal[32];
  int nKey = klsKey(KLS_KEYS/2, zKey), nVal = klsVal(KLS_KEYS/2, zVal);
  double t0 = bench_now();
  int rc;
  db = klsOpen(bCandidate, zDir, 0);
  rc = db ? sqlite3_prepare_v2(db, "SELECT value FROM t WHERE key=?1", -1,
                               &pStmt, 0) : SQLITE_ERROR;
  if( rc==SQLITE_OK ){
    sqlite3_bind_text(pStmt, 1, zKey, nKey, SQLITE_STATIC);
    if( sqlite3_step(pStmt)!=SQLITE_ROW
     || sqlite3_column_bytes(pStmt, 0)!=nVal
     || memcmp(sqlite3_column_text(pStmt, 0), zVal, nVal)!=0 ){
      rc = SQLITE_ERROR;
    }
  }
  *pCost = bench_now() - t0;
  if( rc!=SQLITE_OK ) fprintf(stderr, "kv_log sql reopen: %s\n",
                              db ? sqlite3_errmsg(db) : "cannot open");
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return rc;
}

double bench_kvlog_sql_reopen(int bCandidate, const char *zDir){
  double cost = -1;
  int rc = klsLoadAndClose(bCandidate, zDir, 0);
  if( rc==SQLITE_OK ) rc = klsReopen(bCandidate, zDir, &cost);
  return rc==SQLITE_OK ? cost : -1;
}
