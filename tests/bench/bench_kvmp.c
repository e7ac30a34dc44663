/*
** bench_kvmp.c -- make bench workloads of a KV store shared by processes
** (forked children, each with its own connection and store).
**
** kvmp_point_read   KM_POINT autocommit "SELECT value FROM t WHERE key=?1"
**                   of random keys of a kv_btree table of KM_ROWS rows:
**                   baseline with no other process, candidate while a
**                   second process commits one-row updates to the same
**                   table as fast as it can (so every read first catches
**                   up with its commits: the cost of following the log).
** kvmp_4proc_commit KM_COMMITS one-row autocommit upserts of disjoint keys
**                   of a kv_btree table at kv_synchronous('full'):
**                   baseline one process, candidate four processes with
**                   a quarter each at once; cost per commit in wall time
**                   (at most 1: four processes commit at least as many
**                   rows a second as one).
** kvmp_log_point_read, kvmp_log_4proc_commit: the same over a kv_log
**                   table (a reader follows the frames the writer
**                   appends to the log file).
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include <sqlite3.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define KM_ROWS     10000
#define KM_POINT    20000
#define KM_COMMITS  2000
#define KM_PROCS    4

static int kmExec(sqlite3 *db, const char *zSql){
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ) fprintf(stderr, "kvmp bench: %s: %s\n", zSql,
                              sqlite3_errmsg(db));
  return rc;
}

static sqlite3 *kmOpen(const char *zDir){
  char *zFile = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(zFile, &db)!=SQLITE_OK
   || kmExec(db, "PRAGMA journal_mode=WAL; PRAGMA busy_timeout=10000")
      !=SQLITE_OK ){
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zFile);
  return db;
}

/* The table t, of type zType, with KM_ROWS rows; the store is closed
** again. */
static int kmSetupType(const char *zDir, const char *zType){
  sqlite3 *db = kmOpen(zDir);
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING %s;"
      "WITH RECURSIVE c(i) AS (SELECT 0 UNION ALL SELECT i+1 FROM c "
      "WHERE i<9999) INSERT INTO t SELECT i, printf('value-%%010d', i) "
      "FROM c", zType);
  int rc = db && zSql ? kmExec(db, zSql) : SQLITE_CANTOPEN;
  sqlite3_free(zSql);
  sqlite3_close(db);
  return rc;
}

static const char *kmType = "kv_btree";   /* the table type of a run */

static int kmSetup(const char *zDir){
  return kmSetupType(zDir, kmType);
}

/* A forked writer: one-row updates until killed. */
static void kmWriter(const char *zDir, int fdReady){
  sqlite3 *db = kmOpen(zDir);
  sqlite3_stmt *p = 0;
  unsigned int seed = 7;
  char c = 'x';
  if( db==0 || sqlite3_prepare_v2(db, "UPDATE t SET value=value||'' "
                                  "WHERE key=?1", -1, &p, 0) ){
    _exit(1);
  }
  if( write(fdReady, &c, 1)!=1 ) _exit(1);
  for(;;){
    sqlite3_bind_int(p, 1, rand_r(&seed)%KM_ROWS);
    sqlite3_step(p);
    sqlite3_reset(p);
  }
}

double bench_kvmp_point_read(int bCandidate, const char *zDir){
  sqlite3 *db;
  sqlite3_stmt *p = 0;
  unsigned int seed = 1;
  pid_t pid = 0;
  int aPipe[2], i, rc = kmSetup(zDir);
  double t0, t1 = -1;
  char c;
  if( rc!=SQLITE_OK ) return -1;
  if( bCandidate ){
    if( pipe(aPipe)!=0 ) return -1;
    pid = fork();
    if( pid==0 ){ close(aPipe[0]); kmWriter(zDir, aPipe[1]); }
    close(aPipe[1]);
    if( pid<0 || read(aPipe[0], &c, 1)!=1 ) return -1;
    close(aPipe[0]);
  }
  db = kmOpen(zDir);
  if( db && sqlite3_prepare_v2(db, "SELECT value FROM t WHERE key=?1", -1,
                               &p, 0)==SQLITE_OK ){
    t0 = bench_now();
    for(i=0; i<KM_POINT; i++){
      sqlite3_bind_int(p, 1, rand_r(&seed)%KM_ROWS);
      if( sqlite3_step(p)!=SQLITE_ROW ) break;
      sqlite3_reset(p);
    }
    if( i==KM_POINT ) t1 = bench_now() - t0;
    else fprintf(stderr, "kvmp bench: read: %s\n", sqlite3_errmsg(db));
  }
  sqlite3_finalize(p);
  sqlite3_close(db);
  if( pid>0 ){
    kill(pid, SIGKILL);
    waitpid(pid, 0, 0);
  }
  return t1;
}

/* A forked committer of nCommit upserts of keys iFirst..; exit 0 if all
** committed. */
static void kmCommitter(const char *zDir, int iFirst, int nCommit, int fdGo){
  sqlite3 *db = kmOpen(zDir);
  sqlite3_stmt *p = 0;
  char c;
  int i;
  if( db==0 || kmExec(db, "SELECT kv_synchronous('full')")
   || sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t VALUES(?1, 'v')", -1,
                         &p, 0) ){
    _exit(1);
  }
  /* join the store before the clock starts */
  if( kmExec(db, "SELECT count(*) FROM t WHERE key=0") ) _exit(1);
  if( read(fdGo, &c, 1)!=1 ) _exit(1);
  for(i=0; i<nCommit; i++){
    sqlite3_bind_int(p, 1, KM_ROWS + iFirst + i);
    if( sqlite3_step(p)!=SQLITE_DONE ){
      fprintf(stderr, "kvmp bench: commit: %s\n", sqlite3_errmsg(db));
      _exit(2);
    }
    sqlite3_reset(p);
  }
  sqlite3_finalize(p);
  sqlite3_close(db);
  _exit(0);
}

double bench_kvmp_4proc_commit(int bCandidate, const char *zDir){
  int nProc = bCandidate ? KM_PROCS : 1;
  pid_t aPid[KM_PROCS];
  int aGo[2], i, st, bOk = 1;
  double t0, t1;
  char zGo[KM_PROCS];
  if( kmSetup(zDir)!=SQLITE_OK || pipe(aGo)!=0 ) return -1;
  for(i=0; i<nProc; i++){
    aPid[i] = fork();
    if( aPid[i]==0 ){
      close(aGo[1]);
      kmCommitter(zDir, i*(KM_COMMITS/nProc), KM_COMMITS/nProc, aGo[0]);
    }
  }
  close(aGo[0]);
  usleep(300000);                 /* every process opened and joined */
  memset(zGo, 'g', sizeof(zGo));
  t0 = bench_now();
  if( write(aGo[1], zGo, nProc)!=nProc ) bOk = 0;
  for(i=0; i<nProc; i++){
    if( waitpid(aPid[i], &st, 0)!=aPid[i] || !WIFEXITED(st)
     || WEXITSTATUS(st)!=0 ){
      bOk = 0;
    }
  }
  t1 = bench_now();
  close(aGo[1]);
  return bOk ? (t1 - t0)/KM_COMMITS : -1;
}

double bench_kvmp_log_point_read(int bCandidate, const char *zDir){
  double t;
  kmType = "kv_log";
  t = bench_kvmp_point_read(bCandidate, zDir);
  kmType = "kv_btree";
  return t;
}

double bench_kvmp_log_4proc_commit(int bCandidate, const char *zDir){
  double t;
  kmType = "kv_log";
  t = bench_kvmp_4proc_commit(bCandidate, zDir);
  kmType = "kv_btree";
  return t;
}
