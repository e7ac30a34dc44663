/*
** bench_twopc.c -- make bench workloads of mixed transactions (ext/
** kv_coord.c): one SQLite transaction that writes a table of the database
** file and a kv_btree table, whose KV part is committed conditionally on a
** marker row in the file.  All report-only but twopc_kv_only.
**
** Every run opens a fresh file database (WAL, synchronous=NORMAL, as the
** kvsql workloads) with table orders(id INTEGER PRIMARY KEY, qty) and the
** kv_btree table stock declared in main (reached through its temp
** declaration), then times TP_TXN transactions of prepared statements:
**   file   BEGIN; INSERT INTO orders; COMMIT
**   mixed  BEGIN; INSERT INTO orders; INSERT OR REPLACE INTO stock; COMMIT
**   kv     BEGIN; INSERT OR REPLACE INTO stock; COMMIT
**
** twopc_mixed_vs_file    baseline file, candidate mixed
** twopc_mixed_vs_before  baseline mixed with the marker step switched off
**                        (kv_coord_test_off: the commit as it was before
**                        the marker), candidate mixed
** twopc_kv_only          baseline kv with the marker step switched off,
**                        candidate kv: a KV-only commit pays nothing
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include <sqlite3.h>

#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#define TP_TXN 2000

/* The test hook of ext/kv_coord.c (declared in ext/kv_sql.h, which needs
** the extension's view of the SQLite API). */
void kv_coord_test_off(int bOff);

static double tpNow(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (double)tv.tv_sec + tv.tv_usec*1e-6;
}

static int tpExec(sqlite3 *db, const char *zSql){
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ) fprintf(stderr, "twopc bench: %s: %s\n", zSql,
                              sqlite3_errmsg(db));
  return rc;
}

/* eKind 0 file, 1 mixed, 2 kv; bOff: the marker step switched off. */
static double tpRun(const char *zDir, int eKind, int bOff){
  char *zFile = sqlite3_mprintf("%s/shop.db", zDir);
  static const char *const azStep[] = {
    "BEGIN", "INSERT INTO orders VALUES(?1, ?1)",
    "INSERT OR REPLACE INTO stock VALUES(?1 % 1000, ?1)", "COMMIT"
  };
  sqlite3_stmt *aStmt[4] = {0, 0, 0, 0};
  sqlite3 *db = 0;
  double t0 = 0, rCost = -1;
  int i, j, rc;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  rc = sqlite3_open(zFile, &db);
  if( rc==SQLITE_OK ){
    rc = tpExec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
        "CREATE TABLE orders(id INTEGER PRIMARY KEY, qty);"
        "CREATE VIRTUAL TABLE stock USING kv_btree");
  }
  sqlite3_close(db);                  /* reopened: stock is declared in temp */
  db = 0;
  if( rc==SQLITE_OK ) rc = sqlite3_open(zFile, &db);
  if( rc==SQLITE_OK ) rc = tpExec(db, "PRAGMA synchronous=NORMAL");
  for(i=0; rc==SQLITE_OK && i<4; i++){
    rc = sqlite3_prepare_v2(db, azStep[i], -1, &aStmt[i], 0);
  }
  kv_coord_test_off(bOff);
  if( rc==SQLITE_OK ) t0 = tpNow();
  for(j=1; rc==SQLITE_OK && j<=TP_TXN; j++){
    for(i=0; rc==SQLITE_OK && i<4; i++){
      if( (i==1 && eKind==2) || (i==2 && eKind==0) ) continue;
      sqlite3_bind_int(aStmt[i], 1, j);
      rc = sqlite3_step(aStmt[i]);
      rc = sqlite3_reset(aStmt[i]);
    }
  }
  if( rc==SQLITE_OK ) rCost = tpNow() - t0;
  else fprintf(stderr, "twopc bench: %s\n", sqlite3_errmsg(db));
  kv_coord_test_off(0);
  for(i=0; i<4; i++) sqlite3_finalize(aStmt[i]);
  sqlite3_close(db);
  sqlite3_free(zFile);
  return rCost;
}

double bench_twopc_mixed_vs_file(int bCandidate, const char *zDir){
  return tpRun(zDir, bCandidate ? 1 : 0, 0);
}

double bench_twopc_mixed_vs_before(int bCandidate, const char *zDir){
  return tpRun(zDir, 1, !bCandidate);
}

double bench_twopc_kv_only(int bCandidate, const char *zDir){
  return tpRun(zDir, 2, !bCandidate);
}
