/*
** bench_ttl.c -- make bench workload of per-entry TTL (ext/kv_ttl.c): the
** cost of removing expired rows.
**
** ttl_sweep_vs_sqlite, ttl_sweep_200k_vs_sqlite
**   Both sides hold 20k (200k) rows, TT_EXPIRED (10k) of them past their
**   deadline (every 2nd, every 20th key), in a file database (WAL, synchronous=NORMAL; KV commits at
**   kv_synchronous('normal')), and remove the expired ones in batches of
**   256 rows, one transaction per batch; the timed part is the removal.
**   baseline:  a plain table t(key INTEGER PRIMARY KEY, value, deadline)
**              with an index on deadline, emptied by DELETE ... WHERE key
**              IN (SELECT key FROM t WHERE deadline<=?1 LIMIT 256) until
**              nothing is left to delete;
**   candidate: a kv_btree table declared with ttl_ms, swept by kv_sweep()
**              (batches of 256 root transactions).
**   Each run also prints its cost per removed row in microseconds.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include <sqlite3.h>

#include <stdint.h>
#include <stdio.h>

#define TT_EXPIRED 10000
#define TT_T0      1000000

void kv_ttl_test_interval(int64_t iMs);   /* libdepot_core's test hook */

static int ttExec(sqlite3 *db, const char *zSql){
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ) fprintf(stderr, "ttl bench: %s: %s\n", zSql,
                              sqlite3_errmsg(db));
  return rc;
}

static sqlite3 *ttOpen(const char *zDir){
  char *zFile = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(zFile, &db)!=SQLITE_OK
   || ttExec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                 "SELECT kv_synchronous('normal')")!=SQLITE_OK ){
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zFile);
  return db;
}

/* nRows rows, keys 0..nRows-1: every k-th key (k = nRows/TT_EXPIRED)
** expires at TT_T0+1000, the others at TT_T0+2000. */
static int ttLoad(sqlite3 *db, int bKv, int nRows){
  int k = nRows/TT_EXPIRED;
  char *z;
  int rc;
  if( !bKv ){
    z = sqlite3_mprintf(
      "CREATE TABLE t(key INTEGER PRIMARY KEY, value, deadline INTEGER);"
      "CREATE INDEX t_deadline ON t(deadline);"
      "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM c WHERE "
      "i<%d) INSERT INTO t SELECT i, printf('%%.40c%%d', 'v', i), "
      "%d + 1000*(1 + (i%%%d<>0)) FROM c", nRows-1, TT_T0, k);
  }else{
    z = sqlite3_mprintf(
      "SELECT kv_clock('fixed', %d);"
      "CREATE VIRTUAL TABLE t USING kv_btree(ttl_ms=1000);"
      "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+%d FROM c WHERE "
      "i<%d) INSERT INTO t SELECT i, printf('%%.40c%%d', 'v', i) FROM c;"
      "SELECT kv_clock('fixed', %d);"
      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE "
      "i<%d) INSERT INTO t SELECT i, printf('%%.40c%%d', 'v', i) FROM c "
      "WHERE i%%%d<>0;"
      "SELECT kv_clock('fixed', %d);",
      TT_T0, k, nRows-k, TT_T0+1000, nRows-1, k, TT_T0+1000);
  }
  rc = z ? ttExec(db, z) : SQLITE_NOMEM;
  sqlite3_free(z);
  return rc;
}

/* Remove the expired rows; *pn counts them. */
static int ttSweep(sqlite3 *db, int bKv, int *pn){
  sqlite3_stmt *p = 0;
  int rc;
  *pn = 0;
  if( bKv ){
    rc = sqlite3_prepare_v2(db, "SELECT kv_sweep('t')", -1, &p, 0);
    if( rc==SQLITE_OK && sqlite3_step(p)==SQLITE_ROW ){
      *pn = sqlite3_column_int(p, 0);
    }
    rc = sqlite3_finalize(p);
  }else{
    rc = sqlite3_prepare_v2(db, "DELETE FROM t WHERE key IN (SELECT key "
        "FROM t WHERE deadline<=?1 LIMIT 256)", -1, &p, 0);
    sqlite3_bind_int(p, 1, TT_T0+1000);
    while( rc==SQLITE_OK ){
      rc = sqlite3_step(p)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
      sqlite3_reset(p);
      if( rc!=SQLITE_OK || sqlite3_changes(db)==0 ) break;
      *pn += sqlite3_changes(db);
    }
    sqlite3_finalize(p);
  }
  if( rc!=SQLITE_OK ) fprintf(stderr, "ttl bench: %s\n", sqlite3_errmsg(db));
  return rc;
}

static double ttRun(int bCandidate, const char *zDir, int nRows){
  sqlite3 *db;
  double t0, t = -1;
  int n = 0;
  kv_ttl_test_interval(3600*1000);     /* no background pass meanwhile */
  if( (db = ttOpen(zDir))==0 ) return -1;
  if( ttLoad(db, bCandidate, nRows)==SQLITE_OK ){
    t0 = bench_now();
    if( ttSweep(db, bCandidate, &n)==SQLITE_OK ) t = bench_now() - t0;
  }
  if( t>0 && n!=TT_EXPIRED ){
    fprintf(stderr, "ttl bench: removed %d rows, expected %d\n", n,
            TT_EXPIRED);
    t = -1;
  }
  if( t>0 ){
    fprintf(stderr, "ttl_sweep %dk rows: %s: %.2f us per removed row\n",
            nRows/1000, bCandidate ? "kv_sweep (kv_btree)"
                                   : "SQLite DELETE batches", t*1e6/n);
  }
  if( bCandidate ) ttExec(db, "SELECT kv_clock('wall')");
  sqlite3_close(db);
  return t;
}

double bench_ttl_sweep_vs_sqlite(int bCandidate, const char *zDir){
  return ttRun(bCandidate, zDir, 20000);
}
double bench_ttl_sweep_200k_vs_sqlite(int bCandidate, const char *zDir){
  return ttRun(bCandidate, zDir, 200000);
}
