/*
** bench_fork.c -- make bench workloads of forks.
**
**   fork_size    baseline: fork a 1 MB database; candidate: fork a large
**                one (DEPOT_BENCH_FORK_MB, default 1024 MB, built once per
**                bench process with 1 MB blobs in 64 MB transactions; if
**                building takes longer than DEPOT_BENCH_FORK_BUILD_S
**                seconds, default 60, it stops there and says so).  Cost: seconds per fork (mean of 20 forks).
**                Target: within 2x; the absolute times are printed.
**                The first candidate run also copies the large database
**                to a plain file (VACUUM INTO through the unix VFS) and
**                prints the fork/copy ratio.
**   fork_read_1, fork_read_4, fork_read_16
**                baseline: read every row of a 32 MB database on its own
**                branch; candidate: the same through a fork 1, 4 or 16
**                levels deep (each level has one commit of its own, so the
**                chain really has that many levels).  Decoded-page cache
**                off, so every page read walks the chain.  Cost: seconds.
**
** The databases live in a directory next to the run's scratch directory
** (kept across the runs of one workload, removed when its process ends).
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FORK_NREP 20
#define FORK_BUILD_LIMIT_S forkBuildLimit()

/* Seconds the large database may take to build (DEPOT_BENCH_FORK_BUILD_S). */
static double forkBuildLimit(void){
  const char *z = getenv("DEPOT_BENCH_FORK_BUILD_S");
  double r = z ? atof(z) : 0.0;
  return r>0 ? r : 60.0;
}
#define READ_MB 32

static char *zForkDir = 0;          /* this process's data directory */
static int bBuiltSmall = 0, bBuiltLarge = 0, bBuiltChain = 0;
static int nLargeMb = 0;            /* size actually built */
static int nForkSeq = 0;            /* names of forks taken */

static void forkCleanup(void){
  if( zForkDir ){
    char *z = sqlite3_mprintf("rm -rf '%s'", zForkDir);
    if( z && system(z)!=0 ) fprintf(stderr, "bench: cannot remove %s\n",
                                    zForkDir);
    sqlite3_free(z);
  }
}

/* The data directory, made on first use next to zDir. */
static const char *forkDir(const char *zDir){
  if( zForkDir==0 ){
    char *z;
    zForkDir = sqlite3_mprintf("%s.forkdata", zDir);
    z = sqlite3_mprintf("rm -rf '%s' && mkdir -p '%s'", zForkDir, zForkDir);
    if( z==0 || system(z)!=0 ) fprintf(stderr, "bench: cannot make %s\n",
                                       zForkDir);
    sqlite3_free(z);
    atexit(forkCleanup);
  }
  return zForkDir;
}

static sqlite3 *forkOpen(const char *zStore, const char *zDb,
                         const char *zBranch, const char *zExtra){
  sqlite3 *db = 0;
  char *z = sqlite3_mprintf("file:%s?vfs=depot&db=%s&branch=%s%s", zStore,
                            zDb, zBranch, zExtra ? zExtra : "");
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  depot_vfs_register();
  if( sqlite3_open_v2(z ? z : "", &db, SQLITE_OPEN_READWRITE
                      |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0)!=SQLITE_OK ){
    fprintf(stderr, "bench: open %s: %s\n", z, sqlite3_errmsg(db));
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(z);
  return db;
}

static int forkExec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc!=SQLITE_OK ) fprintf(stderr, "bench: %s: %s\n", zSql, zErr);
  sqlite3_free(zErr);
  return rc;
}

/* Database zDb of size about nMb MB: 1 MB blobs (half compressible), 64 per
** transaction; stops after FORK_BUILD_LIMIT_S.  Returns the MB built. */
static int forkBuild(const char *zStore, const char *zDb, int nMb){
  sqlite3 *db = forkOpen(zStore, zDb, "main", "&cache_kb=0");
  double t0 = bench_now();
  int n = 0;
  if( db==0 || forkExec(db, "CREATE TABLE t(a INTEGER PRIMARY KEY, b BLOB)") ){
    sqlite3_close(db);
    return -1;
  }
  while( n<nMb && bench_now()-t0<FORK_BUILD_LIMIT_S ){
    int nStep = nMb-n<64 ? nMb-n : 64;
    char *z = sqlite3_mprintf("WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL"
        " SELECT i+1 FROM c WHERE i<%d) INSERT INTO t(b) SELECT"
        " randomblob(524288)||zeroblob(524288) FROM c", nStep);
    int rc = z ? forkExec(db, z) : SQLITE_NOMEM;
    sqlite3_free(z);
    if( rc ) break;
    n += nStep;
  }
  sqlite3_close(db);
  return n;
}

static char *forkStore(const char *zDir){
  return sqlite3_mprintf("%s/store.depot", forkDir(zDir));
}

static int forkPrepare(const char *zDir){
  char *zStore = forkStore(zDir);
  const char *zMb = getenv("DEPOT_BENCH_FORK_MB");
  int nWant = zMb ? atoi(zMb) : 1024, rc = 0;
  if( !bBuiltSmall ){
    bBuiltSmall = forkBuild(zStore, "small", 1)==1;
    if( !bBuiltSmall ) rc = -1;
  }
  if( rc==0 && !bBuiltLarge ){
    double t0 = bench_now();
    nLargeMb = forkBuild(zStore, "large", nWant>0 ? nWant : 1024);
    bBuiltLarge = nLargeMb>0;
    fprintf(stderr, "fork: built a %d MB database in %.1f s%s\n", nLargeMb,
            bench_now()-t0, nLargeMb<nWant ? " (stopped at the ~60 s build"
            " limit: the large database is smaller than asked)" : "");
    if( !bBuiltLarge ) rc = -1;
  }
  sqlite3_free(zStore);
  return rc;
}

/* Seconds per fork of database zDb (mean of FORK_NREP). */
static double forkTime(const char *zDir, const char *zDb){
  char *zStore = forkStore(zDir);
  sqlite3 *db = 0;
  double t = -1;
  int i, rc = sqlite3_open(":memory:", &db);
  double t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<FORK_NREP; i++){
    char *z = sqlite3_mprintf("SELECT depot_fork(%Q,%Q,'main','f%d')", zStore,
                              zDb, ++nForkSeq);
    rc = z ? forkExec(db, z) : SQLITE_NOMEM;
    sqlite3_free(z);
  }
  if( rc==SQLITE_OK ) t = (bench_now()-t0)/FORK_NREP;
  sqlite3_close(db);
  sqlite3_free(zStore);
  return t;
}

/* Seconds of a VACUUM INTO copy of the large database (once). */
static double forkCopyTime(const char *zDir){
  char *zStore = forkStore(zDir);
  char *zCopy = sqlite3_mprintf("%s/copy.db", forkDir(zDir));
  char *z = sqlite3_mprintf("VACUUM INTO 'file:%q?vfs=unix'", zCopy);
  sqlite3 *db = forkOpen(zStore, "large", "main", "&cache_kb=0");
  double t0 = bench_now(), t;
  t = (db && z && forkExec(db, z)==SQLITE_OK) ? bench_now()-t0 : -1;
  if( zCopy ) unlink(zCopy);
  sqlite3_close(db);
  sqlite3_free(z);
  sqlite3_free(zCopy);
  sqlite3_free(zStore);
  return t;
}

double bench_fork_size(int bCandidate, const char *zDir){
  static double tCopy = 0;
  double t;
  if( forkPrepare(zDir) ) return -1;
  t = forkTime(zDir, bCandidate ? "large" : "small");
  if( t<0 ) return -1;
  fprintf(stderr, "fork_size: fork of the %s database: %.3f ms%s\n",
          bCandidate ? "large" : "1 MB", t*1000,
          t>0.010 ? " (over the 10 ms target)" : "");
  if( bCandidate && tCopy==0 ){
    tCopy = forkCopyTime(zDir);
    if( tCopy>0 ){
      fprintf(stderr, "fork_size: VACUUM INTO copy of the %d MB database:"
              " %.3f s; fork/copy ratio %.2e\n", nLargeMb, tCopy, t/tCopy);
    }
  }
  return t;
}

/* ---- reading through forks ---- */

/* Database "rd" of READ_MB MB and branches d1..d16, each a fork of the one
** before with one commit of its own. */
static int chainPrepare(const char *zDir){
  char *zStore = forkStore(zDir);
  sqlite3 *db = 0;
  int i, rc = 0;
  if( bBuiltChain ) goto done;
  if( forkBuild(zStore, "rd", READ_MB)!=READ_MB ){ rc = -1; goto done; }
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ){ rc = -1; goto done; }
  for(i=1; rc==0 && i<=16; i++){
    char zFrom[16], *z;
    sqlite3 *pLevel;
    if( i==1 ) snprintf(zFrom, sizeof(zFrom), "main");
    else snprintf(zFrom, sizeof(zFrom), "d%d", i-1);
    z = sqlite3_mprintf("SELECT depot_fork(%Q,'rd',%Q,'d%d')", zStore, zFrom,
                        i);
    rc = z ? forkExec(db, z) : -1;
    sqlite3_free(z);
    if( rc ) break;
    z = sqlite3_mprintf("d%d", i);
    pLevel = z ? forkOpen(zStore, "rd", z, 0) : 0;
    sqlite3_free(z);
    z = sqlite3_mprintf("CREATE TABLE level%d(x)", i);
    rc = (pLevel && z) ? forkExec(pLevel, z) : -1;
    sqlite3_close(pLevel);
    sqlite3_free(z);
  }
  sqlite3_close(db);
  bBuiltChain = rc==0;
done:
  sqlite3_free(zStore);
  return rc;
}

static double chainRead(const char *zDir, int nDepth){
  char *zStore = forkStore(zDir), zBranch[16];
  sqlite3 *db;
  double t0, t = -1;
  if( nDepth ) snprintf(zBranch, sizeof(zBranch), "d%d", nDepth);
  else snprintf(zBranch, sizeof(zBranch), "main");
  db = forkOpen(zStore, "rd", zBranch, "&cache_kb=0");
  t0 = bench_now();
  if( db && forkExec(db, "SELECT sum(length(b)) FROM t")==SQLITE_OK ){
    t = bench_now()-t0;
  }
  sqlite3_close(db);
  sqlite3_free(zStore);
  return t;
}

static double forkRead(int bCandidate, const char *zDir, int nDepth){
  if( chainPrepare(zDir) ) return -1;
  return chainRead(zDir, bCandidate ? nDepth : 0);
}

double bench_fork_read_1(int bCandidate, const char *zDir){
  return forkRead(bCandidate, zDir, 1);
}
double bench_fork_read_4(int bCandidate, const char *zDir){
  return forkRead(bCandidate, zDir, 4);
}
double bench_fork_read_16(int bCandidate, const char *zDir){
  return forkRead(bCandidate, zDir, 16);
}
