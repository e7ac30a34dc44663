/*
** bench_derived.c -- make bench workloads of derived data (ext/kv_derived.c):
** inserts and updates into a KV source with one secondary index and one
** counter.
**
** Rows: integer keys, JSON values {"email":"u<k>@x","grp":"g<k%50>",
** "n":<k%100>}; KD_TXN transactions of KD_ROWS inserts, then KD_TXN
** transactions of KD_ROWS updates (each a new email, group and n) of the
** same keys.  File databases, WAL, synchronous=NORMAL; KV commits at
** kv_synchronous('normal').
**
** derived_vs_sqlite   baseline: a plain table t(key INTEGER PRIMARY KEY,
**                     value) with an index on json_extract(value,
**                     '$.email') and a counter table c(grp PRIMARY KEY,
**                     cnt, total) kept by AFTER INSERT/UPDATE triggers;
**                     candidate: a kv_btree table with a kv_index on the
**                     same expression and a kv_counter by $.grp summing $.n
** derived_vs_plain    baseline: the kv_btree table without carriers;
**                     candidate: with them (what the carriers cost)
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include <sqlite3.h>

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define KD_TXN   10
#define KD_ROWS  1000

static int kdExec(sqlite3 *db, const char *zSql){
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ) fprintf(stderr, "derived bench: %s: %s\n", zSql,
                              sqlite3_errmsg(db));
  return rc;
}

/* Open zDir/zName with the extension, WAL, synchronous=NORMAL and
** kv_synchronous('normal'), so both sides defer the flush alike. */
static sqlite3 *kdOpen(const char *zDir, const char *zName){
  char *zFile = sqlite3_mprintf("%s/%s", zDir, zName);
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(zFile, &db)!=SQLITE_OK
   || kdExec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                 "SELECT kv_synchronous('normal')")!=SQLITE_OK ){
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zFile);
  return db;
}

/* eMode 0: plain SQLite with index and triggers; 1: KV source alone;
** 2: KV source with a kv_index and a kv_counter. */
static int kdSchema(sqlite3 *db, int eMode){
  if( eMode==0 ){
    return kdExec(db,
      "CREATE TABLE t(key INTEGER PRIMARY KEY, value);"
      "CREATE INDEX t_email ON t(json_extract(value, '$.email'));"
      "CREATE TABLE c(grp PRIMARY KEY, cnt, total) WITHOUT ROWID;"
      "CREATE TRIGGER t_i AFTER INSERT ON t BEGIN"
      "  INSERT INTO c VALUES(json_extract(new.value, '$.grp'), 1,"
      "    json_extract(new.value, '$.n'))"
      "  ON CONFLICT(grp) DO UPDATE SET cnt=cnt+1, total=total+excluded.total;"
      " END;"
      "CREATE TRIGGER t_u AFTER UPDATE ON t BEGIN"
      "  UPDATE c SET cnt=cnt-1, total=total-json_extract(old.value, '$.n')"
      "  WHERE grp=json_extract(old.value, '$.grp');"
      "  INSERT INTO c VALUES(json_extract(new.value, '$.grp'), 1,"
      "    json_extract(new.value, '$.n'))"
      "  ON CONFLICT(grp) DO UPDATE SET cnt=cnt+1, total=total+excluded.total;"
      " END;");
  }
  if( kdExec(db, "CREATE VIRTUAL TABLE t USING kv_btree")!=SQLITE_OK ){
    return SQLITE_ERROR;
  }
  if( eMode==2 ){
    return kdExec(db,
      "CREATE VIRTUAL TABLE t_email USING kv_index(source=t, "
      "  expr='json_extract(value, ''$.email'')');"
      "CREATE VIRTUAL TABLE c USING kv_counter(source=t, "
      "  group='json_extract(value, ''$.grp'')', "
      "  sum='json_extract(value, ''$.n'')');"
      "SELECT kv_attach_all()");
  }
  return kdExec(db, "SELECT kv_attach_all()");
}

/* The timed part: KD_TXN transactions of inserts, then of updates. */
static int kdWork(sqlite3 *db){
  sqlite3_stmt *pIns = 0, *pUpd = 0;
  int i, j, rc;
  rc = sqlite3_prepare_v2(db, "INSERT INTO t VALUES(?1, json_object("
      "'email', 'u'||?1||'@x', 'grp', 'g'||(?1%50), 'n', ?1%100))", -1,
      &pIns, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "UPDATE t SET value=json_object("
        "'email', 'v'||?1||'@x', 'grp', 'g'||(?1%47), 'n', ?1%13) "
        "WHERE key=?1", -1, &pUpd, 0);
  }
  for(i=0; rc==SQLITE_OK && i<2*KD_TXN; i++){
    sqlite3_stmt *p = i<KD_TXN ? pIns : pUpd;
    rc = kdExec(db, "BEGIN");
    for(j=0; rc==SQLITE_OK && j<KD_ROWS; j++){
      sqlite3_bind_int(p, 1, (i%KD_TXN)*KD_ROWS + j);
      rc = sqlite3_step(p)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
      sqlite3_reset(p);
    }
    if( rc==SQLITE_OK ) rc = kdExec(db, "COMMIT");
  }
  if( rc!=SQLITE_OK ) fprintf(stderr, "derived bench: %s\n",
                              sqlite3_errmsg(db));
  sqlite3_finalize(pIns);
  sqlite3_finalize(pUpd);
  return rc;
}

static double kdRun(int eMode, const char *zDir){
  sqlite3 *db = kdOpen(zDir, "app.db");
  double t0, t = -1;
  if( db==0 ) return -1;
  if( kdSchema(db, eMode)==SQLITE_OK ){
    t0 = bench_now();
    if( kdWork(db)==SQLITE_OK ) t = bench_now() - t0;
  }
  sqlite3_close(db);
  return t;
}

double bench_derived_vs_sqlite(int bCandidate, const char *zDir){
  return kdRun(bCandidate ? 2 : 0, zDir);
}

double bench_derived_vs_plain(int bCandidate, const char *zDir){
  return kdRun(bCandidate ? 2 : 1, zDir);
}
