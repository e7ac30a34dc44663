/*
** bench_depot.c -- make bench workloads of the depot VFS.
**
**   depot_speed  a speedtest-style sequence of steps (bulk inserts without
**                and with an index, small transactions, updates, deletes,
**                point and range selects, a join, VACUUM) on a plain file
**                through the default unix VFS (baseline) and on a depot
**                database (candidate), both at synchronous=FULL (the
**                store's default).  Cost: total seconds of all steps; the
**                per-step times of every pair are printed on stderr.
**   depot_bytes  the same text-heavy table written to a plain file and to
**                a depot store.  Cost: bytes on disk relative to the plain
**                file (the baseline returns 1.0, the candidate its ratio).
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define SPEED_ROWS 20000
#define SPEED_NSTEP 10

static const char *const azSpeedStep[SPEED_NSTEP] = {
  "insert, no index", "insert, indexed", "200 small txns", "update range",
  "delete range", "point selects", "range selects", "join", "vacuum",
  "reopen + scan"
};

static double aStepTime[2][SPEED_NSTEP];

static sqlite3 *benchOpen(int bCandidate, const char *zDir, const char *zDb){
  sqlite3 *db = 0;
  char *z = bCandidate
    ? sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=%s", zDir, zDb)
    : sqlite3_mprintf("file:%s/%s.db", zDir, zDb);
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  depot_vfs_register();
  if( sqlite3_open_v2(z, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, 0)!=SQLITE_OK ){
    fprintf(stderr, "bench: open %s: %s\n", z, sqlite3_errmsg(db));
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(z);
  if( db ) sqlite3_exec(db, "PRAGMA synchronous=FULL", 0, 0, 0);
  return db;
}

/* Run zSql nRep times with ?1 = i (0..nRep-1); 0 or -1 on error. */
static int benchRepeat(sqlite3 *db, const char *zSql, int nRep){
  sqlite3_stmt *pStmt = 0;
  int i, rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, 0);
  for(i=0; rc==SQLITE_OK && i<nRep; i++){
    sqlite3_bind_int(pStmt, 1, i);
    while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){}
    rc = (rc==SQLITE_DONE) ? SQLITE_OK : rc;
    sqlite3_reset(pStmt);
  }
  if( rc!=SQLITE_OK ) fprintf(stderr, "bench: %s: %s\n", zSql, sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  return rc==SQLITE_OK ? 0 : -1;
}

static const char *const azSpeedSql[SPEED_NSTEP][2] = {
  { "BEGIN", "INSERT INTO t1 VALUES(?1, ?1*7%1000, printf('%d %s', ?1,"
    " substr('one two three four five six seven eight nine ten', ?1%30)))" },
  { "BEGIN", "INSERT INTO t2 VALUES(?1, ?1*13%5000, printf('name-%08d',"
    " ?1*7919%100000))" },
  { 0, "INSERT INTO t3 VALUES(?1, 'small transaction payload')" },
  { "BEGIN", "UPDATE t1 SET b=b+1, c=c||'x' WHERE a BETWEEN ?1*10 AND"
    " ?1*10+4" },
  { "BEGIN", "DELETE FROM t2 WHERE a BETWEEN ?1*20 AND ?1*20+4" },
  { 0, "SELECT c FROM t1 WHERE a=?1*3%20000" },
  { 0, "SELECT count(*), max(c) FROM t2 WHERE b BETWEEN ?1*10 AND ?1*10+50" },
  { 0, "SELECT count(*), sum(t1.b) FROM t1 JOIN t2 ON t2.b=t1.b WHERE"
    " t1.a<?1*2000+2000" },
  { 0, "VACUUM" },
  { 0, "SELECT count(*), sum(length(c)) FROM t1" },
};
static const int aSpeedRep[SPEED_NSTEP] = {
  SPEED_ROWS, SPEED_ROWS, 200, 1000, 1000, 5000, 500, 5, 1, 3
};

static double speedRun(int bCandidate, const char *zDir){
  sqlite3 *db = benchOpen(bCandidate, zDir, "speed");
  double t, total = 0;
  int i, rc = db ? 0 : -1;
  if( rc==0 ) rc = sqlite3_exec(db, "CREATE TABLE t1(a INTEGER PRIMARY KEY,"
      " b INT, c TEXT); CREATE TABLE t2(a INTEGER PRIMARY KEY, b INT, c TEXT);"
      " CREATE INDEX t2b ON t2(b); CREATE INDEX t2c ON t2(c);"
      " CREATE TABLE t3(a, b)", 0, 0, 0);
  for(i=0; rc==0 && i<SPEED_NSTEP; i++){
    t = bench_now();
    if( i==SPEED_NSTEP-1 ){
      sqlite3_close(db);
      db = benchOpen(bCandidate, zDir, "speed");
      if( db==0 ){ rc = -1; break; }
    }
    if( azSpeedSql[i][0] ) sqlite3_exec(db, azSpeedSql[i][0], 0, 0, 0);
    rc = benchRepeat(db, azSpeedSql[i][1], aSpeedRep[i]);
    if( rc==0 && azSpeedSql[i][0] ) rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
    aStepTime[bCandidate][i] = bench_now() - t;
    total += aStepTime[bCandidate][i];
  }
  sqlite3_close(db);
  if( rc!=0 ) return -1;
  if( bCandidate ){
    fprintf(stderr, "depot_speed per-step ratios (depot/unix):");
    for(i=0; i<SPEED_NSTEP; i++){
      fprintf(stderr, " %s %.2f%s", azSpeedStep[i],
              aStepTime[1][i]/aStepTime[0][i], i<SPEED_NSTEP-1 ? ";" : "\n");
    }
  }
  return total;
}

double bench_depot_speed(int bCandidate, const char *zDir){
  return speedRun(bCandidate, zDir);
}

/* ---- stored bytes ---- */

static sqlite3_int64 fileBytes(const char *zDir, const char *zName){
  char *z = sqlite3_mprintf("%s/%s", zDir, zName);
  struct stat st;
  sqlite3_int64 n = stat(z, &st)==0 ? (sqlite3_int64)st.st_size : 0;
  sqlite3_free(z);
  return n;
}

static int bytesFill(int bCandidate, const char *zDir){
  sqlite3 *db = benchOpen(bCandidate, zDir, "text");
  int rc = db ? 0 : -1;
  if( rc==0 ) rc = sqlite3_exec(db, "CREATE TABLE doc(id INTEGER PRIMARY KEY,"
      " title TEXT, body TEXT)", 0, 0, 0);
  if( rc==0 ) rc = sqlite3_exec(db, "BEGIN", 0, 0, 0);
  if( rc==0 ) rc = benchRepeat(db, "INSERT INTO doc VALUES(?1, printf("
      "'Chapter %d: on the %s', ?1, substr('storage replication branching"
      " compression durability', 1+?1%40, 20)), printf('%s %s %s %d',"
      " 'The depot keeps every committed page of the database in its store,',"
      " substr('and a reader that pins a snapshot sees exactly the pages of"
      " that commit while writers continue to publish new versions.', 1+?1%50),"
      " 'Compaction and forks come later; this paragraph is filler text.',"
      " ?1*7919))", 20000);
  if( rc==0 ) rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
  sqlite3_close(db);
  return rc;
}

double bench_depot_bytes(int bCandidate, const char *zDir){
  sqlite3_int64 nPlain, nStore;
  (void)bCandidate;
  if( bytesFill(0, zDir) || bytesFill(1, zDir) ) return -1;
  nPlain = fileBytes(zDir, "text.db");
  nStore = fileBytes(zDir, "store.depot") + fileBytes(zDir, "store.depot-wal");
  if( nPlain<=0 || nStore<=0 ) return -1;
  if( bCandidate ){
    fprintf(stderr, "depot_bytes: plain file %lld bytes, depot store %lld"
            " bytes, ratio %.3f\n", nPlain, nStore, (double)nStore/nPlain);
    return (double)nStore/(double)nPlain;
  }
  return 1.0;
}
