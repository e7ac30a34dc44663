/*
** bench_ttl.c -- make bench workload of per-entry TTL (ext/kv_ttl.c): the
** cost of removing expired rows.
**
** ttl_sweep_vs_sqlite
**   Both sides hold TT_ROWS rows, every other one (TT_ROWS/2) past its
**   deadline, in a file database (WAL, synchronous=NORMAL; KV commits at
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

#define TT_ROWS 20000
#define TT_T0   1000000

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

/* The rows: even keys expire at TT_T0+1000, odd ones at TT_T0+2000. */
static int ttLoad(sqlite3 *db, int bKv){
  char *z;
  int rc;
  if( !bKv ){
    z = sqlite3_mprintf(
      "CREATE TABLE t(key INTEGER PRIMARY KEY, value, deadline INTEGER);"
      "CREATE INDEX t_deadline ON t(deadline);"
      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c WHERE "
      "i<%d) INSERT INTO t SELECT i, printf('%%.40c%%d', 'v', i), "
      "%d + 1000*(1 + i%%2) FROM c", TT_ROWS, TT_T0);
  }else{
    z = sqlite3_mprintf(
      "SELECT kv_clock('fixed', %d);"
      "CREATE VIRTUAL TABLE t USING kv_btree(ttl_ms=1000);"
      "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+2 FROM c WHERE "
      "i<%d) INSERT INTO t SELECT i, printf('%%.40c%%d', 'v', i) FROM c;"
      "SELECT kv_clock('fixed', %d);"
      "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+2 FROM c WHERE "
      "i<%d) INSERT INTO t SELECT i, printf('%%.40c%%d', 'v', i) FROM c;"
      "SELECT kv_clock('fixed', %d);",
      TT_T0, TT_ROWS-2, TT_T0+1000, TT_ROWS-1, TT_T0+1000);
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

double bench_ttl_sweep_vs_sqlite(int bCandidate, const char *zDir){
  sqlite3 *db;
  double t0, t = -1;
  int n = 0;
  kv_ttl_test_interval(3600*1000);     /* no background pass meanwhile */
  if( (db = ttOpen(zDir))==0 ) return -1;
  if( ttLoad(db, bCandidate)==SQLITE_OK ){
    t0 = bench_now();
    if( ttSweep(db, bCandidate, &n)==SQLITE_OK ) t = bench_now() - t0;
  }
  if( t>0 && n!=TT_ROWS/2 ){
    fprintf(stderr, "ttl bench: removed %d rows, expected %d\n", n,
            TT_ROWS/2);
    t = -1;
  }
  if( t>0 ){
    fprintf(stderr, "ttl_sweep: %s: %.2f us per removed row\n",
            bCandidate ? "kv_sweep (kv_btree)" : "SQLite DELETE batches",
            t*1e6/n);
  }
  if( bCandidate ) ttExec(db, "SELECT kv_clock('wall')");
  sqlite3_close(db);
  return t;
}
