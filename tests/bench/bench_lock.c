/*
** bench_lock.c -- make bench workloads of the depot write lock.
**
**   lock_commit  one-row autocommit transactions on a depot database
**                (store_sync=normal, so no fsync hides the cost), without
**                the writer lock (baseline) and with it (candidate), in the
**                same program: the bench is linked with
**                -Wl,--wrap=store_writer_lock,--wrap=store_writer_unlock
**                (tests/bench/local.mk), and the wrappers skip the lock
**                during baseline runs.  Cost: seconds per transaction; the
**                time spent inside the lock calls is printed on stderr.
**   lock_procs   4 processes each doing autocommit INSERTs with a busy
**                timeout into one plain file in WAL mode (baseline) and
**                into one depot database (candidate), both at their
**                default synchronous=FULL.  Cost: wall seconds for all.
**   lock_procs_normal  the same at synchronous=NORMAL on both sides (the
**                store's store_sync=normal): the CPU and locking path
**                without an fsync per commit.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LOCK_COMMITS 3000
#define LOCK_PROCS 4
#define LOCK_PROC_ROWS 250

/* ---- the lock calls, wrapped at link time ---- */

int __real_store_writer_lock(Store*, const void*, int);
int __real_store_writer_unlock(Store*, const void*, int);
int __wrap_store_writer_lock(Store*, const void*, int);
int __wrap_store_writer_unlock(Store*, const void*, int);

static int benchLockOff = 0;         /* baseline: skip the lock */
static double benchLockTime = 0;     /* seconds inside the lock calls */
static int benchLockCalls = 0;

int __wrap_store_writer_lock(Store *p, const void *pKey, int nKey){
  double t0;
  int rc;
  if( benchLockOff ) return SQLITE_OK;
  t0 = bench_now();
  rc = __real_store_writer_lock(p, pKey, nKey);
  benchLockTime += bench_now() - t0;
  benchLockCalls++;
  return rc;
}

int __wrap_store_writer_unlock(Store *p, const void *pKey, int nKey){
  double t0;
  int rc;
  if( benchLockOff ) return SQLITE_OK;
  t0 = bench_now();
  rc = __real_store_writer_unlock(p, pKey, nKey);
  benchLockTime += bench_now() - t0;
  return rc;
}

static sqlite3 *lockOpen(const char *zName, int ms){
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  depot_vfs_register();
  if( sqlite3_open_v2(zName, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, 0)!=SQLITE_OK ){
    fprintf(stderr, "bench: open %s: %s\n", zName, sqlite3_errmsg(db));
    sqlite3_close(db);
    return 0;
  }
  sqlite3_busy_timeout(db, ms);
  return db;
}

double bench_lock_commit(int bCandidate, const char *zDir){
  char *zName = sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=c"
                                "&store_sync=normal", zDir);
  sqlite3 *db = lockOpen(zName, 10000);
  sqlite3_stmt *pStmt = 0;
  double t0, t1;
  int i, rc = SQLITE_OK;
  sqlite3_free(zName);
  if( db==0 ) return -1;
  benchLockOff = !bCandidate;
  benchLockTime = 0;
  benchLockCalls = 0;
  if( sqlite3_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB)", 0, 0,
                   0)!=SQLITE_OK
   || sqlite3_prepare_v2(db, "INSERT INTO t(b) VALUES(randomblob(60))", -1,
                         &pStmt, 0)!=SQLITE_OK ){
    fprintf(stderr, "bench: lock_commit: %s\n", sqlite3_errmsg(db));
    sqlite3_close(db);
    return -1;
  }
  t0 = bench_now();
  for(i=0; i<LOCK_COMMITS && rc==SQLITE_OK; i++){
    rc = sqlite3_step(pStmt)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(pStmt);
  }
  t1 = bench_now();
  if( rc!=SQLITE_OK ) fprintf(stderr, "bench: lock_commit: %s\n",
                              sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  benchLockOff = 0;
  if( rc!=SQLITE_OK ) return -1;
  if( bCandidate ){
    fprintf(stderr, "lock_commit: %.1f us per transaction, of which %.2f us"
            " in %d lock+unlock calls (%.2f us per transaction)\n",
            (t1-t0)/LOCK_COMMITS*1e6, benchLockTime/LOCK_COMMITS*1e6,
            benchLockCalls, benchLockTime/LOCK_COMMITS*1e6);
  }
  return (t1-t0)/LOCK_COMMITS;
}

/* ---- processes ---- */

/* Child: LOCK_PROC_ROWS autocommit INSERTs once the parent writes to
** fdGo; zPragma (or NULL) is run first. */
static void lockInserter(const char *zName, const char *zPragma, int iWho,
                         int fdGo){
  sqlite3 *db = lockOpen(zName, 60000);
  sqlite3_stmt *pStmt = 0;
  char c;
  int i;
  if( db==0 || read(fdGo, &c, 1)!=1 ) _exit(2);
  if( zPragma && sqlite3_exec(db, zPragma, 0, 0, 0)!=SQLITE_OK ) _exit(5);
  if( sqlite3_prepare_v2(db, "INSERT INTO t(who, b) VALUES(?1,"
                         " randomblob(60))", -1, &pStmt, 0)!=SQLITE_OK ){
    _exit(3);
  }
  sqlite3_bind_int(pStmt, 1, iWho);
  for(i=0; i<LOCK_PROC_ROWS; i++){
    if( sqlite3_step(pStmt)!=SQLITE_DONE ){
      fprintf(stderr, "bench: insert: %s\n", sqlite3_errmsg(db));
      _exit(4);
    }
    sqlite3_reset(pStmt);
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  _exit(0);
}

static double lockProcs(int bCandidate, const char *zDir, int bFull){
  char *zName = bCandidate
    ? sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=p&store_sync=%s",
                      zDir, bFull ? "full" : "normal")
    : sqlite3_mprintf("file:%s/plain.db", zDir);
  const char *zPragma = bCandidate ? 0 : bFull ? "PRAGMA synchronous=FULL"
                                              : "PRAGMA synchronous=NORMAL";
  sqlite3 *db = lockOpen(zName, 10000);
  pid_t aPid[LOCK_PROCS];
  int aGo[2], i, st, bOk = 1;
  double t0, t1;
  if( db==0 || pipe(aGo)!=0 ){
    sqlite3_free(zName);
    sqlite3_close(db);
    return -1;
  }
  if( !bCandidate ) sqlite3_exec(db, "PRAGMA journal_mode=WAL", 0, 0, 0);
  sqlite3_exec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, who INT, b BLOB)",
               0, 0, 0);
  sqlite3_close(db);
  for(i=0; i<LOCK_PROCS; i++){
    aPid[i] = fork();
    if( aPid[i]==0 ) lockInserter(zName, zPragma, i, aGo[0]);
  }
  usleep(100000);                   /* all open, none started */
  t0 = bench_now();
  for(i=0; i<LOCK_PROCS; i++){
    if( write(aGo[1], "g", 1)!=1 ) bOk = 0;
  }
  for(i=0; i<LOCK_PROCS; i++){
    if( waitpid(aPid[i], &st, 0)!=aPid[i] || !WIFEXITED(st)
     || WEXITSTATUS(st)!=0 ){
      bOk = 0;
    }
  }
  t1 = bench_now();
  close(aGo[0]);
  close(aGo[1]);
  sqlite3_free(zName);
  return bOk ? t1-t0 : -1;
}

double bench_lock_procs(int bCandidate, const char *zDir){
  return lockProcs(bCandidate, zDir, 1);
}

double bench_lock_procs_normal(int bCandidate, const char *zDir){
  return lockProcs(bCandidate, zDir, 0);
}
