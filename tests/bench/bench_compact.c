/*
** bench_compact.c -- make bench workloads of compaction and reclaim.
**
**   compact_space  baseline: the live size of a depot database (pages x
**                  page size) after DEPOT_BENCH_COMPACT_COMMITS (default
**                  100000) small commits (one row of 40 random hex bytes
**                  upserted into 20000 keys per commit); candidate: the
**                  store's stored_bytes after depot_compact and depot_gc,
**                  with time targets off (depot_pitr_policy retention 0:
**                  a build longer than the 300 s interval would otherwise
**                  keep a version per interval, which is the policy's
**                  space, not compaction's).  Cost: bytes.  Target: at most 2x.  Also printed: the
**                  stored bytes before compaction and both file sizes.
**   compact_read   baseline: a cold full read (new connection, decoded-
**                  page cache and read-ahead off: the work per page that
**                  the layout decides, on one thread) of a
**                  DEPOT_BENCH_COMPACT_MB (default
**                  100) MB database with 100 commits of history per MB
**                  (10000 for 100 MB: one 1 MB insert per MB, then commits
**                  that each rewrite 10 random rows), before compaction;
**                  candidate: the same read of a
**                  copy of it after depot_compact and depot_gc.  Cost:
**                  seconds.  Target: at most 0.5 (2x faster).
**   compact_pitr   baseline: the restore lookup (depot_fork at an ISO-8601
**                  time: the target resolution and fork that depot_restore
**                  does before it repoints the name) on a database with
**                  1000 commits of history; candidate: the
**                  same with DEPOT_BENCH_PITR_COMMITS (default 100000).
**                  Every commit is a point in time (interval 0); the target
**                  is in the middle of the history.  Cost: seconds per
**                  restore (mean of 20).  Target: within 2x.
**   compact_commits baseline: DEPOT_BENCH_COMMITS (default 500) commits,
**                  each rewriting 5 random rows, on a compacted 20 MB
**                  database with background compaction off; candidate:
**                  the same with compact_after=5, the background compactor
**                  compacting and reclaiming while the commits go on.
**                  Cost: seconds of the commits (the compactor is then
**                  left to finish before the next run).
**
** The databases are built once per bench process with the outer store at
** synchronous=OFF (the build is not what is measured) and background
** compaction off, in a directory next to the run's scratch directory that
** is removed when the process ends.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *zCmpDir = 0;           /* this process's data directory */

static void cmpCleanup(void){
  if( zCmpDir ){
    char *z = sqlite3_mprintf("rm -rf '%s'", zCmpDir);
    if( z && system(z)!=0 ) fprintf(stderr, "bench: cannot remove %s\n",
                                    zCmpDir);
    sqlite3_free(z);
  }
}

static const char *cmpDir(const char *zDir){
  if( zCmpDir==0 ){
    char *z;
    zCmpDir = sqlite3_mprintf("%s.compactdata", zDir);
    z = sqlite3_mprintf("rm -rf '%s' && mkdir -p '%s'", zCmpDir, zCmpDir);
    if( z==0 || system(z)!=0 ) fprintf(stderr, "bench: cannot make %s\n",
                                       zCmpDir);
    sqlite3_free(z);
    atexit(cmpCleanup);
  }
  return zCmpDir;
}

static long envLong(const char *zName, long iDefault){
  const char *z = getenv(zName);
  long v = z ? atol(z) : 0;
  return v>0 ? v : iDefault;
}

static sqlite3 *cmpOpen(const char *zStore, const char *zBranch,
                        const char *zExtra){
  sqlite3 *db = 0;
  char *z = sqlite3_mprintf("file:%s?vfs=depot&db=app&branch=%s%s", zStore,
                            zBranch, zExtra ? zExtra : "");
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  depot_vfs_register();
  if( sqlite3_open_v2(z ? z : "", &db, SQLITE_OPEN_READWRITE
                      |SQLITE_OPEN_CREATE|SQLITE_OPEN_URI, 0)!=SQLITE_OK ){
    fprintf(stderr, "bench: open %s: %s\n", z ? z : "", sqlite3_errmsg(db));
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(z);
  return db;
}

static int cmpExec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "bench: %s: %s\n", zSql, zErr ? zErr : "");
  }
  sqlite3_free(zErr);
  return rc;
}

static sqlite3_int64 cmpInt(sqlite3 *db, const char *zSql){
  sqlite3_stmt *pS = 0;
  sqlite3_int64 v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &pS, 0)==SQLITE_OK
   && sqlite3_step(pS)==SQLITE_ROW ){
    v = sqlite3_column_int64(pS, 0);
  }else{
    fprintf(stderr, "bench: %s: %s\n", zSql, sqlite3_errmsg(db));
  }
  sqlite3_finalize(pS);
  return v;
}

static sqlite3_int64 fileSize(const char *zPath){
  struct stat st;
  char *zWal = sqlite3_mprintf("%s-wal", zPath);
  sqlite3_int64 n = stat(zPath, &st)==0 ? (sqlite3_int64)st.st_size : 0;
  if( zWal && stat(zWal, &st)==0 ) n += st.st_size;
  sqlite3_free(zWal);
  return n;
}

/* Compact and reclaim the whole store zStore through connection db. */
static int cmpCompactGc(sqlite3 *db, const char *zStore){
  char *z = sqlite3_mprintf("SELECT depot_compact(%Q), depot_gc(%Q)", zStore,
                            zStore);
  int rc = z ? cmpExec(db, z) : SQLITE_NOMEM;
  sqlite3_free(z);
  return rc;
}

static sqlite3_int64 storedBytes(sqlite3 *db, const char *zStore){
  char *z = sqlite3_mprintf("SELECT stored_bytes FROM depot_stats(%Q)",
                            zStore);
  sqlite3_int64 n = z ? cmpInt(db, z) : -1;
  sqlite3_free(z);
  return n;
}

/* ---- compact_space ---- */

static int bSpaceBuilt = 0;
static sqlite3_int64 nSpaceLive = 0, nSpaceStored = 0;

static int spaceBuild(const char *zDir){
  char *zStore = sqlite3_mprintf("%s/space.depot", cmpDir(zDir));
  long nCommit = envLong("DEPOT_BENCH_COMPACT_COMMITS", 100000), i;
  sqlite3 *db = zStore ? cmpOpen(zStore, "main",
                                 "&store_sync=off&compact_after=0") : 0;
  sqlite3_stmt *pS = 0;
  sqlite3_int64 nBefore, nFileBefore;
  char *z;
  double t0 = bench_now();
  int rc = db ? cmpExec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
              : SQLITE_CANTOPEN;
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t"
      " VALUES(abs(random())%20000, hex(randomblob(20)))", -1, &pS, 0);
  for(i=0; rc==SQLITE_OK && i<nCommit; i++){
    rc = sqlite3_step(pS)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(pS);
  }
  sqlite3_finalize(pS);
  if( rc==SQLITE_OK ){
    nSpaceLive = cmpInt(db, "SELECT page_count*page_size FROM"
                            " pragma_page_count, pragma_page_size");
    nBefore = storedBytes(db, zStore);
    nFileBefore = fileSize(zStore);
    fprintf(stderr, "compact_space: %ld commits built in %.1f s; live %lld"
            " bytes, stored %lld bytes (store file %lld) before compaction\n",
            nCommit, bench_now()-t0, (long long)nSpaceLive,
            (long long)nBefore, (long long)nFileBefore);
    t0 = bench_now();
    z = sqlite3_mprintf("SELECT depot_pitr_policy(%Q, 300, 0)", zStore);
    rc = z ? cmpExec(db, z) : SQLITE_NOMEM;
    sqlite3_free(z);
    if( rc==SQLITE_OK ) rc = cmpCompactGc(db, zStore);
    nSpaceStored = storedBytes(db, zStore);
    fprintf(stderr, "compact_space: compaction and GC %.1f s; stored %lld"
            " bytes (%.2fx live), store file %lld bytes\n", bench_now()-t0,
            (long long)nSpaceStored, (double)nSpaceStored/(double)nSpaceLive,
            (long long)fileSize(zStore));
  }
  sqlite3_close(db);
  sqlite3_free(zStore);
  bSpaceBuilt = rc==SQLITE_OK ? 1 : -1;
  return rc;
}

double bench_compact_space(int bCandidate, const char *zDir){
  if( bSpaceBuilt==0 ) spaceBuild(zDir);
  if( bSpaceBuilt<0 || nSpaceLive<=0 ) return -1.0;
  return (double)(bCandidate ? nSpaceStored : nSpaceLive);
}

/* ---- compact_read ---- */

static int bReadBuilt = 0;
static char *zReadBefore = 0, *zReadAfter = 0;

/* nMb commits of 1000 rows of 1000 hex characters (1 MB each), then
** commits that each rewrite 10 random rows, 100 commits per MB in all. */
static int readBuild(const char *zDir){
  long nMb = envLong("DEPOT_BENCH_COMPACT_MB", 100), nCommit = nMb*100, i;
  sqlite3 *db, *pCopy = 0;
  double t0 = bench_now();
  char *zUpd;
  int rc;
  zReadBefore = sqlite3_mprintf("%s/before.depot", cmpDir(zDir));
  zReadAfter = sqlite3_mprintf("%s/after.depot", cmpDir(zDir));
  zUpd = sqlite3_mprintf("WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT"
      " i+1 FROM g WHERE i<10) UPDATE t SET v=hex(randomblob(500)) WHERE k IN"
      " (SELECT abs(random())%%%ld+1 FROM g)", nMb*1000);
  db = cmpOpen(zReadBefore, "main", "&store_sync=off&compact_after=0");
  rc = db ? cmpExec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
          : SQLITE_CANTOPEN;
  for(i=0; rc==SQLITE_OK && i<nMb; i++){
    rc = cmpExec(db, "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1"
        " FROM g WHERE i<1000) INSERT INTO t(v) SELECT hex(randomblob(500))"
        " FROM g");
  }
  for(i=nMb; rc==SQLITE_OK && i<nCommit; i++){
    rc = zUpd ? cmpExec(db, zUpd) : SQLITE_NOMEM;
  }
  sqlite3_free(zUpd);
  sqlite3_close(db);
  if( rc==SQLITE_OK ){
    char *z = sqlite3_mprintf("VACUUM INTO %Q", zReadAfter);
    rc = sqlite3_open_v2(zReadBefore, &pCopy, SQLITE_OPEN_READONLY, 0);
    if( rc==SQLITE_OK ) rc = z ? cmpExec(pCopy, z) : SQLITE_NOMEM;
    sqlite3_close(pCopy);
    sqlite3_free(z);
  }
  if( rc==SQLITE_OK ){
    db = cmpOpen(zReadAfter, "main", "&compact_after=0");
    fprintf(stderr, "compact_read: %ld MB in %ld commits built in %.1f s\n",
            nMb, nCommit, bench_now()-t0);
    t0 = bench_now();
    rc = db ? cmpCompactGc(db, zReadAfter) : SQLITE_CANTOPEN;
    fprintf(stderr, "compact_read: compaction and GC of the copy %.1f s\n",
            bench_now()-t0);
    sqlite3_close(db);
  }
  bReadBuilt = rc==SQLITE_OK ? 1 : -1;
  return rc;
}

double bench_compact_read(int bCandidate, const char *zDir){
  sqlite3 *db;
  double t0, t;
  sqlite3_int64 n;
  if( bReadBuilt==0 ) readBuild(zDir);
  if( bReadBuilt<0 ) return -1.0;
  db = cmpOpen(bCandidate ? zReadAfter : zReadBefore, "main",
               "&cache_kb=0&compact_after=0&readahead=0");
  if( db==0 ) return -1.0;
  t0 = bench_now();
  n = cmpInt(db, "SELECT sum(length(v)) FROM t");
  t = bench_now() - t0;
  sqlite3_close(db);
  fprintf(stderr, "compact_read: %s %.3f s (%lld bytes read)\n",
          bCandidate ? "after " : "before", t, (long long)n);
  return n>0 ? t : -1.0;
}

/* ---- compact_pitr ---- */

#define PITR_NREP 20

static char *azPitrStore[2];
static char *azPitrTarget[2];
static int abPitrBuilt[2];
static int nPitrSeq = 0;

/* A store with nCommit commits, every one a point in time; the ISO time of
** the middle commit in azPitrTarget[i]. */
static int pitrBuild(const char *zDir, int i, long nCommit){
  sqlite3 *db;
  sqlite3_stmt *pS = 0;
  long k;
  char *z;
  int rc;
  azPitrStore[i] = sqlite3_mprintf("%s/pitr%d.depot", cmpDir(zDir), i);
  db = cmpOpen(azPitrStore[i], "main", "&store_sync=off&compact_after=0");
  rc = db ? cmpExec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT)")
          : SQLITE_CANTOPEN;
  z = sqlite3_mprintf("SELECT depot_pitr_policy(%Q, 0, 86400)",
                      azPitrStore[i]);
  if( rc==SQLITE_OK ) rc = z ? cmpExec(db, z) : SQLITE_NOMEM;
  sqlite3_free(z);
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t"
      " VALUES(abs(random())%1000, hex(randomblob(20)))", -1, &pS, 0);
  for(k=0; rc==SQLITE_OK && k<nCommit; k++){
    rc = sqlite3_step(pS)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(pS);
  }
  sqlite3_finalize(pS);
  z = sqlite3_mprintf("SELECT strftime('%%Y-%%m-%%dT%%H:%%M:%%f', time)||'Z'"
      " FROM depot_commits(%Q,'app','main') WHERE txid=%ld", azPitrStore[i],
      nCommit/2);
  if( rc==SQLITE_OK && z ){
    sqlite3_stmt *pT = 0;
    if( sqlite3_prepare_v2(db, z, -1, &pT, 0)==SQLITE_OK
     && sqlite3_step(pT)==SQLITE_ROW ){
      azPitrTarget[i] = sqlite3_mprintf("%s", sqlite3_column_text(pT, 0));
    }
    sqlite3_finalize(pT);
  }
  sqlite3_free(z);
  sqlite3_close(db);
  abPitrBuilt[i] = rc==SQLITE_OK && azPitrTarget[i] ? 1 : -1;
  return rc;
}

double bench_compact_pitr(int bCandidate, const char *zDir){
  long nCommit = bCandidate ? envLong("DEPOT_BENCH_PITR_COMMITS", 100000)
                            : 1000;
  sqlite3 *db;
  double t0, t;
  int i, rc = SQLITE_OK;
  if( abPitrBuilt[bCandidate]==0 ){
    t0 = bench_now();
    pitrBuild(zDir, bCandidate, nCommit);
    fprintf(stderr, "compact_pitr: %ld commits built in %.1f s\n", nCommit,
            bench_now()-t0);
  }
  if( abPitrBuilt[bCandidate]<0 ) return -1.0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ) return -1.0;
  t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<PITR_NREP; i++){
    char *z = sqlite3_mprintf("SELECT depot_fork(%Q,'app','main','r%d',%Q)",
                              azPitrStore[bCandidate], ++nPitrSeq,
                              azPitrTarget[bCandidate]);
    rc = z ? cmpExec(db, z) : SQLITE_NOMEM;
    sqlite3_free(z);
  }
  t = (bench_now() - t0)/PITR_NREP;
  sqlite3_close(db);
  fprintf(stderr, "compact_pitr: %ld commits: %.3f ms per restore\n", nCommit,
          t*1000);
  return rc==SQLITE_OK ? t : -1.0;
}

/* ---- compact_commits ---- */

static char *zCommitsBase = 0;
static int bCommitsBuilt = 0;

/* 20000 rows of 1000 hex characters (about 20 MB), compacted. */
static int commitsBuild(const char *zDir){
  sqlite3 *db;
  int rc;
  zCommitsBase = sqlite3_mprintf("%s/commits.depot", cmpDir(zDir));
  db = zCommitsBase ? cmpOpen(zCommitsBase, "main",
                              "&store_sync=off&compact_after=0") : 0;
  rc = db ? cmpExec(db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v TEXT);"
      "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM g"
      " WHERE i<20000) INSERT INTO t(v) SELECT hex(randomblob(500)) FROM g")
          : SQLITE_CANTOPEN;
  if( rc==SQLITE_OK ) rc = cmpCompactGc(db, zCommitsBase);
  sqlite3_close(db);
  bCommitsBuilt = rc==SQLITE_OK ? 1 : -1;
  return rc;
}

/* Wait until the background compactor has had nothing to do for 1 s. */
static void commitsDrain(void){
  int64_t n = depot_compact_background_runs();
  int nQuiet = 0;
  while( nQuiet<5 ){
    usleep(200000);
    if( depot_compact_background_runs()==n ){
      nQuiet++;
    }else{
      n = depot_compact_background_runs();
      nQuiet = 0;
    }
  }
}

double bench_compact_commits(int bCandidate, const char *zDir){
  long nCommit = envLong("DEPOT_BENCH_COMMITS", 500), i;
  char *zStore = sqlite3_mprintf("%s/s.depot", zDir), *zCp;
  sqlite3 *db = 0;
  double t0 = 0, t = -1.0;
  int rc = SQLITE_OK;
  if( bCommitsBuilt==0 ) commitsBuild(zDir);
  zCp = sqlite3_mprintf("cp '%s' '%s'", zCommitsBase ? zCommitsBase : "",
                        zStore ? zStore : "");
  if( bCommitsBuilt<0 || !zStore || !zCp || system(zCp)!=0 ) rc = SQLITE_ERROR;
  if( rc==SQLITE_OK ){
    db = cmpOpen(zStore, "main", bCandidate ? "&compact_after=5"
                                            : "&compact_after=0");
    if( db==0 ) rc = SQLITE_CANTOPEN;
  }
  t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<nCommit; i++){
    rc = cmpExec(db, "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i+1"
        " FROM g WHERE i<5) UPDATE t SET v=hex(randomblob(500)) WHERE k IN"
        " (SELECT abs(random())%20000+1 FROM g)");
  }
  if( rc==SQLITE_OK ) t = bench_now() - t0;
  if( rc==SQLITE_OK && bCandidate ){
    fprintf(stderr, "compact_commits: stored %lld bytes, %lld background"
            " jobs so far\n", (long long)storedBytes(db, zStore),
            (long long)depot_compact_background_runs());
  }
  sqlite3_close(db);
  commitsDrain();
  sqlite3_free(zStore);
  sqlite3_free(zCp);
  return t;
}
