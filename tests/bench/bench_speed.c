/*
** bench_speed.c -- make bench-speed: a speedtest1-class workload at real
** database sizes, the depot VFS against the unix VFS in the same run.
**
** Usage: tests/bench/speed_bench [--sizes MB[,MB...]] [--runs N]
**                                [--history MB] [--commits N] [--no-history]
**                                [--depot-params K=V&...]
**                                [--store-uri postgresql://...]
**
** For every size (default 25 and 100: the plain file the workload leaves
** is about that many megabytes) and every run, two child processes run the
** same sequence of steps, one on a plain file through the unix VFS, one on
** a depot store (vfs=depot on the connection, store_sync=full, both
** connections at PRAGMA synchronous=FULL).  Each child reports its per-step
** wall times, CPU times (user + system, every thread: the CPU ratio
** holds still on a loaded machine where wall times swing) and its peak
** RSS as of the end of each step (so the step that raised it shows); the parent takes the child's overall peak RSS from
** wait4() (the ru_maxrss of that child alone), and prints the depot
** child's memory by structure after VACUUM, where its peak RSS is, and
** whether that peak holds the bound of vfs/depot_vfs.h (the unix child's
** peak + the depot child's limits + DEPOT_MEMORY_SLACK_KB).  The
** tables show per step the medians
** over the runs and the ratio of the medians, the totals, the peak RSS of
** both sides, and then the depot child's store file: its physical bytes
** (store file plus -wal) after the workload and after depot_compact +
** depot_gc (+ depot_vacuum where the build has it; after any background
** compaction the workload started has finished) against
** depot_stats.stored_bytes and against the plain file.
**
** The history workload builds a database of --history MB with --commits
** commits after the bulk load (each an UPDATE of a few rows), in both
** VFSs, then measures in fresh child processes the open of the database
** plus one full scan of its largest table (process-cold: the OS page cache
** is warm for both, as after any earlier use of the files).
**
** --store-uri postgresql://... puts the depot side's store on that
** PostgreSQL server (a schema per run, dropped never: use a scratch
** database), and prints the round trips the depot workload made.
**
** Steps (N rows per table, N = 3400 per MB of the target size):
**   t1(a INT, b INT, c TEXT) no index; t2(a INTEGER PRIMARY KEY, b, c);
**   t3(a INT, b INT, c TEXT) with indexes on b and c; c is the English
**   words of a random number (text-heavy, like speedtest1's).
*/
#include "config.h"
#include "ext/depot.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"                 /* depot_compact_background_pending() */
#include "vfs/store/store.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <malloc.h>
#include <time.h>
#include <unistd.h>

#define SP_MAX_RUN   15
#define SP_MAX_SIZE  4
#define SP_NSTEP     18

static const char *const azStep[SP_NSTEP] = {
  "insert N, no index",
  "insert N, INTEGER PRIMARY KEY",
  "insert N, two indexes",
  "300 one-row txns",
  "IPK point selects (txn each)",
  "text point selects (txn each)",
  "IPK range selects",
  "text range selects (indexed)",
  "unindexed range scans",
  "CREATE INDEX x2",
  "4-way joins",
  "update by IPK",
  "update text, 1/4 of rows",
  "update indexed range",
  "delete 1/5 of rows",
  "PRAGMA integrity_check",
  "VACUUM",
  "reopen + full scan",
};

/* What a child writes back to the parent. */
typedef struct SpResult SpResult;
struct SpResult {
  int ok;
  double aStep[SP_NSTEP];
  double aCpu[SP_NSTEP];     /* user + system CPU seconds of each step */
  long aRssKb[SP_NSTEP];     /* the child's peak RSS after each step */
  long long nPlain;          /* unix: the file after the workload */
  long long nPhysBefore;     /* depot: store + -wal after the workload */
  long long nPhysAfter;      /* depot: after compact + gc (+ vacuum) */
  long long nStored;         /* depot: depot_stats.stored_bytes after gc */
  long long nTrips;          /* depot: round trips to a PostgreSQL store */
  double rOpenScan;          /* history: open + scan seconds */
  double rOpenScanCpu;       /* history: its CPU seconds */
  char zMem[700];            /* depot: depot_memory and the heap after
                             ** VACUUM (the step of the peak RSS) */
  long long nLimit;          /* depot: the sum of depot_memory's limits,
                             ** the write buffer's twice */
};

static double spNow(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec/1e9;
}

/* User + system CPU seconds of this process (every thread) so far. */
static double spCpu(void){
  struct rusage ru;
  if( getrusage(RUSAGE_SELF, &ru)!=0 ) return 0;
  return (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec/1e6
       + (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec/1e6;
}

static long long spFileBytes(const char *zPath){
  struct stat st;
  return stat(zPath, &st)==0 ? (long long)st.st_size : 0;
}

/* ---- the text of a number, speedtest1 style ---- */

static const char *const azOnes[] = { "zero", "one", "two", "three", "four",
  "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
  "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
  "nineteen" };
static const char *const azTens[] = { "", "ten", "twenty", "thirty", "forty",
  "fifty", "sixty", "seventy", "eighty", "ninety" };

static void spWords(unsigned n, char *z, int nz){
  int i = 0;
#define SP_ADD(s) i += snprintf(z+i, nz>i ? nz-i : 0, "%s%s", i?" ":"", s)
  if( n>=1000000 ){ spWords(n/1000000, z, nz); i = (int)strlen(z);
                    SP_ADD("million"); n %= 1000000; }
  if( n>=1000 ){ char zSub[200]; spWords(n/1000, zSub, sizeof(zSub));
                 SP_ADD(zSub); SP_ADD("thousand"); n %= 1000; }
  if( n>=100 ){ SP_ADD(azOnes[n/100]); SP_ADD("hundred"); n %= 100; }
  if( n>=20 ){ SP_ADD(azTens[n/10]); n %= 10; }
  if( n>0 || i==0 ) SP_ADD(azOnes[n]);
#undef SP_ADD
}

/* ---- one side's workload ---- */

static unsigned spRandState = 1;
static unsigned spRand(void){
  spRandState = spRandState*1103515245u + 12345u;
  return (spRandState>>8) & 0xffffff;
}

/* URI parameters added to every depot open (--depot-params). */
static const char *zSpParams = "";

/* --store-uri: the depot side's store is this PostgreSQL server, in a
** schema of its own for each run (zSpPgStore, set by spReset()). */
static const char *zSpStoreUri = 0;
static char *zSpPgStore = 0;
static int iSpPgRun = 0;

/* The depot side's store: the PostgreSQL store of this run, or the file
** <zDir>/store.depot (sqlite3_malloc'd). */
static char *spStorePath(const char *zDir){
  if( zSpPgStore ) return sqlite3_mprintf("%s", zSpPgStore);
  return sqlite3_mprintf("%s/store.depot", zDir);
}

/* The store's physical bytes: the file plus its -wal, or for a
** PostgreSQL store depot_stats.physical_bytes. */
static long long spStorePhys(const char *zDir){
  long long n = 0;
  if( zSpPgStore ){
    sqlite3 *db = 0;
    sqlite3_stmt *p = 0;
    if( sqlite3_open(":memory:", &db)==SQLITE_OK
     && sqlite3_prepare_v2(db, "SELECT physical_bytes FROM depot_stats(?1)",
                           -1, &p, 0)==SQLITE_OK ){
      sqlite3_bind_text(p, 1, zSpPgStore, -1, SQLITE_STATIC);
      if( sqlite3_step(p)==SQLITE_ROW ) n = sqlite3_column_int64(p, 0);
    }
    sqlite3_finalize(p);
    sqlite3_close(db);
  }else{
    char *zS = sqlite3_mprintf("%s/store.depot", zDir);
    char *zW = sqlite3_mprintf("%s/store.depot-wal", zDir);
    n = spFileBytes(zS) + spFileBytes(zW);
    sqlite3_free(zS);
    sqlite3_free(zW);
  }
  return n;
}

static sqlite3 *spOpen(int bDepot, const char *zDir, int bSyncOff){
  sqlite3 *db = 0;
  char *z;
  if( bDepot && zSpPgStore ){
    sqlite3_str *s = sqlite3_str_new(0);
    const char *c;
    sqlite3_str_appendf(s, "file:%s/app?vfs=depot&db=speed%s%s&store=", zDir,
                        zSpParams[0] ? "&" : "", zSpParams);
    for(c=zSpPgStore; *c; c++){
      if( *c=='&' ) sqlite3_str_appendall(s, "%26");
      else sqlite3_str_appendchar(s, 1, *c);
    }
    z = sqlite3_str_finish(s);
  }else{
    z = bDepot
      ? sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=speed%s%s", zDir,
                        zSpParams[0] ? "&" : "", zSpParams)
      : sqlite3_mprintf("file:%s/speed.db", zDir);
  }
  if( sqlite3_open_v2(z, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                      |SQLITE_OPEN_URI, 0)!=SQLITE_OK ){
    fprintf(stderr, "speed: open %s: %s\n", z, sqlite3_errmsg(db));
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(z);
  if( db ){
    sqlite3_exec(db, bSyncOff ? "PRAGMA synchronous=OFF"
                              : "PRAGMA synchronous=FULL", 0, 0, 0);
  }
  return db;
}

static int spExec(sqlite3 *db, const char *zSql){
  char *zErr = 0;
  int rc = sqlite3_exec(db, zSql, 0, 0, &zErr);
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "speed: %s: %s\n", zSql, zErr ? zErr : "");
    sqlite3_free(zErr);
    return -1;
  }
  return 0;
}

static sqlite3_stmt *spPrep(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)!=SQLITE_OK ){
    fprintf(stderr, "speed: prepare %s: %s\n", zSql, sqlite3_errmsg(db));
    return 0;
  }
  return p;
}

/* Step the statement to its end and reset it; 0 or -1. */
static int spStep(sqlite3 *db, sqlite3_stmt *p){
  int rc;
  while( (rc = sqlite3_step(p))==SQLITE_ROW ){}
  sqlite3_reset(p);
  if( rc!=SQLITE_DONE ){
    fprintf(stderr, "speed: %s: %s\n", sqlite3_sql(p), sqlite3_errmsg(db));
    return -1;
  }
  return 0;
}

/* Insert N rows into zTab (a, b, c) in one transaction; bOrdered: a=1..N
** in order, else b random.  Returns 0 or -1. */
static int spInsert(sqlite3 *db, const char *zTab, int N){
  char zSql[100], zText[300];
  sqlite3_stmt *p;
  int i, rc = 0;
  snprintf(zSql, sizeof(zSql), "INSERT INTO %s VALUES(?1,?2,?3)", zTab);
  if( (p = spPrep(db, zSql))==0 ) return -1;
  if( spExec(db, "BEGIN") ){ sqlite3_finalize(p); return -1; }
  for(i=1; rc==0 && i<=N; i++){
    unsigned b = spRand() % (unsigned)(N*4);
    spWords(b, zText, sizeof(zText));
    sqlite3_bind_int(p, 1, i);
    sqlite3_bind_int(p, 2, (int)b);
    sqlite3_bind_text(p, 3, zText, -1, SQLITE_TRANSIENT);
    rc = spStep(db, p);
  }
  sqlite3_finalize(p);
  if( rc==0 ) rc = spExec(db, "COMMIT");
  return rc;
}

/* The depot child's memory after a step into zOut: each depot_memory
** row's bytes (MiB), their sum, what sqlite3_malloc() has out (SQLite's
** and the depot's), the heap malloc has handed out and what it holds from
** the system (glibc mallinfo2), and the RSS now. */
static void spMemory(sqlite3 *db, char *zOut, int nOut){
  sqlite3_stmt *p = 0;
  sqlite3_str *s = sqlite3_str_new(0);
  double rSum = 0;
  struct mallinfo2 mi = mallinfo2();
  long nRssKb = 0;
  FILE *f = fopen("/proc/self/statm", "r");
  if( f ){
    long a = 0, b = 0;
    if( fscanf(f, "%ld %ld", &a, &b)==2 ){
      nRssKb = b*(sysconf(_SC_PAGESIZE)/1024);
    }
    fclose(f);
  }
  if( sqlite3_prepare_v2(db, "SELECT name, bytes FROM depot_memory", -1, &p,
                         0)==SQLITE_OK ){
    while( sqlite3_step(p)==SQLITE_ROW ){
      double r = sqlite3_column_int64(p, 1)/1048576.0;
      rSum += r;
      if( r>=0.05 ){
        sqlite3_str_appendf(s, "%s %.1f, ", sqlite3_column_text(p, 0), r);
      }
    }
  }
  sqlite3_finalize(p);
  sqlite3_str_appendf(s, "sum %.1f MiB; sqlite3_malloc in use %.1f MiB;"
      " malloc in use %.1f MiB of %.1f MiB taken from the system;"
      " RSS %.1f MiB",
      rSum, sqlite3_memory_used()/1048576.0,
      (double)mi.uordblks/1048576.0 + (double)mi.hblkhd/1048576.0,
      (double)mi.arena/1048576.0 + (double)mi.hblkhd/1048576.0,
      nRssKb/1024.0);
  {
    char *z = sqlite3_str_finish(s);
    snprintf(zOut, nOut, "%s", z ? z : "");
    sqlite3_free(z);
  }
}

/* Run zSql nRep times, binding ?1 = f(i) and ?2 = words or number; if
** bTxn, all inside one transaction. */
typedef void (*SpBindFn)(sqlite3_stmt*, int i, int N);

static void bindIpk(sqlite3_stmt *p, int i, int N){
  (void)i;
  sqlite3_bind_int(p, 1, 1 + (int)(spRand() % (unsigned)N));
}
static void bindText(sqlite3_stmt *p, int i, int N){
  char z[300];
  (void)i;
  spWords(spRand() % (unsigned)(N*4), z, sizeof(z));
  sqlite3_bind_text(p, 1, z, -1, SQLITE_TRANSIENT);
}
static void bindTextRange(sqlite3_stmt *p, int i, int N){
  char z[300];
  int n;
  (void)i;
  spWords(spRand() % (unsigned)(N*4), z, sizeof(z));
  sqlite3_bind_text(p, 1, z, -1, SQLITE_TRANSIENT);
  n = (int)strlen(z);
  if( n>4 ) z[n-2]++;        /* a few neighbours in text order */
  sqlite3_bind_text(p, 2, z, -1, SQLITE_TRANSIENT);
}
static void bindB(sqlite3_stmt *p, int i, int N){
  (void)i;
  sqlite3_bind_int(p, 1, (int)(spRand() % (unsigned)(N*4)));
}
static void bindSeq(sqlite3_stmt *p, int i, int N){
  (void)N;
  sqlite3_bind_int(p, 1, 1000000 + i);
}

static int spRepeat(sqlite3 *db, const char *zSql, int nRep, int bTxn,
                    SpBindFn xBind, int N){
  sqlite3_stmt *p = spPrep(db, zSql);
  int i, rc = p ? 0 : -1;
  if( rc==0 && bTxn ) rc = spExec(db, "BEGIN");
  for(i=0; rc==0 && i<nRep; i++){
    xBind(p, i, N);
    rc = spStep(db, p);
  }
  sqlite3_finalize(p);
  if( rc==0 && bTxn ) rc = spExec(db, "COMMIT");
  return rc;
}

/* DEPOT_SPEED_MARKS set: each child writes to stderr, per step, its pid
** and the CLOCK_MONOTONIC times the step started and ended (a profiler
** recording with that clock, as `perf record -k CLOCK_MONOTONIC`, then
** reports one step of one side). */
static int bSpMarks = 0;

static int spWorkload(int bDepot, const char *zDir, int N, SpResult *pR){
  sqlite3 *db = spOpen(bDepot, zDir, 0);
  double t, c;
  int i, rc = db ? 0 : -1;
  spRandState = 12345;
  if( rc==0 ) rc = spExec(db, "CREATE TABLE t1(a INTEGER, b INTEGER,"
      " c TEXT); CREATE TABLE t2(a INTEGER PRIMARY KEY, b INTEGER, c TEXT);"
      " CREATE TABLE t3(a INTEGER, b INTEGER, c TEXT);"
      " CREATE INDEX t3b ON t3(b); CREATE INDEX t3c ON t3(c);"
      " CREATE TABLE t4(a INTEGER, c TEXT)");
  for(i=0; rc==0 && i<SP_NSTEP; i++){
    t = spNow();
    c = spCpu();
    switch( i ){
      case 0: rc = spInsert(db, "t1", N); break;
      case 1: rc = spInsert(db, "t2", N); break;
      case 2: rc = spInsert(db, "t3", N); break;
      case 3: rc = spRepeat(db, "INSERT INTO t4 VALUES(?1, 'one small"
                  " transaction of one row')", 300, 0, bindSeq, N); break;
      case 4: rc = spRepeat(db, "SELECT b, c FROM t2 WHERE a=?1",
                            N/5, 0, bindIpk, N); break;
      case 5: rc = spRepeat(db, "SELECT a, b FROM t3 WHERE c=?1",
                            N/10, 0, bindText, N); break;
      case 6: rc = spRepeat(db, "SELECT count(*), avg(b), sum(length(c))"
                  " FROM t2 WHERE a BETWEEN ?1 AND ?1+100", N/50, 0,
                  bindIpk, N); break;
      case 7: rc = spRepeat(db, "SELECT count(*), avg(b) FROM t3 WHERE c"
                  " BETWEEN ?1 AND ?2", N/50, 0, bindTextRange, N); break;
      case 8: rc = spRepeat(db, "SELECT count(*), avg(b) FROM t1 WHERE b"
                  " BETWEEN ?1 AND ?1+1000", 10, 0, bindB, N); break;
      case 9: rc = spExec(db, "CREATE INDEX t1b ON t1(b);"
                          " CREATE INDEX t1c ON t1(c)"); break;
      case 10: rc = spRepeat(db, "SELECT count(*), sum(t4x.b) FROM t1"
                  " JOIN t2 ON t2.a=t1.a JOIN t3 ON t3.b=t1.b"
                  " JOIN t2 AS t4x ON t4x.a=t3.a"
                  " WHERE t1.rowid BETWEEN ?1 AND ?1+50", N/200, 0,
                  bindIpk, N); break;
      case 11: rc = spRepeat(db, "UPDATE t2 SET b=b+1 WHERE a=?1", N/5, 1,
                             bindIpk, N); break;
      case 12: rc = spExec(db, "UPDATE t1 SET c=upper(c) WHERE a%4=0");
               break;
      case 13: rc = spRepeat(db, "UPDATE t3 SET b=b+1 WHERE rowid BETWEEN"
                  " ?1 AND ?1+10", N/100, 1, bindIpk, N); break;
      case 14: rc = spExec(db, "DELETE FROM t3 WHERE a%5=0;"
                           " DELETE FROM t2 WHERE a%5=0"); break;
      case 15: rc = spExec(db, "PRAGMA integrity_check"); break;
      case 16:
        rc = spExec(db, "VACUUM");
        if( rc==0 && bDepot ){
          /* the limits of the bound of vfs/depot_vfs.h: the budget twice */
          sqlite3_stmt *pL = spPrep(db, "SELECT sum(limit_bytes) + (SELECT"
              " max(limit_bytes, 0) FROM depot_memory WHERE"
              " name='write_buffer') FROM depot_memory WHERE limit_bytes>0");
          spMemory(db, pR->zMem, sizeof(pR->zMem));
          if( pL && sqlite3_step(pL)==SQLITE_ROW ){
            pR->nLimit = sqlite3_column_int64(pL, 0);
          }
          sqlite3_finalize(pL);
        }
        break;
      case 17:
        sqlite3_close(db);
        db = spOpen(bDepot, zDir, 0);
        rc = db ? spExec(db, "SELECT count(*), sum(length(c)) FROM t1")
                : -1;
        break;
    }
    pR->aStep[i] = spNow() - t;
    pR->aCpu[i] = spCpu() - c;
    if( bSpMarks ){
      fprintf(stderr, "speed: mark pid %d %s step %d %.6f %.6f\n",
              (int)getpid(), bDepot ? "depot" : "unix", i, t, spNow());
    }
    {
      struct rusage ru;
      pR->aRssKb[i] = getrusage(RUSAGE_SELF, &ru)==0 ? ru.ru_maxrss : 0;
    }
  }
  sqlite3_close(db);
  return rc;
}

/* After the depot workload: the store's physical bytes before and after
** compact + gc (+ depot_vacuum, if the build has it), stored_bytes. */
static int spStoreBytes(const char *zDir, SpResult *pR){
  char *zStore = spStorePath(zDir);
  sqlite3 *db = 0;
  sqlite3_stmt *p = 0;
  int rc;
  pR->nPhysBefore = spStorePhys(zDir);
  /* a background compaction the workload's commits started finishes
  ** first: run alongside, it holds the store's write lock and pins the
  ** blobs and -wal frames the explicit compact + gc + vacuum would free */
  while( depot_compact_background_pending()>0 ) usleep(10000);
  rc = sqlite3_open(":memory:", &db);
  if( rc==SQLITE_OK ){
    char *zSql = sqlite3_mprintf("SELECT depot_compact(%Q);"
                                 " SELECT depot_gc(%Q);", zStore, zStore);
    rc = spExec(db, zSql) ? SQLITE_ERROR : SQLITE_OK;
    sqlite3_free(zSql);
  }
  if( rc==SQLITE_OK
   && sqlite3_prepare_v2(db, "SELECT depot_vacuum(?1)", -1, &p, 0)
      ==SQLITE_OK ){
    sqlite3_bind_text(p, 1, zStore, -1, SQLITE_STATIC);
    if( sqlite3_step(p)!=SQLITE_ROW ){
      fprintf(stderr, "speed: depot_vacuum: %s\n", sqlite3_errmsg(db));
      rc = SQLITE_ERROR;
    }
    sqlite3_finalize(p);
    p = 0;
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "SELECT stored_bytes FROM depot_stats(?1)",
                            -1, &p, 0);
  }
  if( rc==SQLITE_OK ){
    sqlite3_bind_text(p, 1, zStore, -1, SQLITE_STATIC);
    if( sqlite3_step(p)==SQLITE_ROW ) pR->nStored = sqlite3_column_int64(p,0);
    sqlite3_finalize(p);
  }
  sqlite3_close(db);
  pR->nPhysAfter = spStorePhys(zDir);
  sqlite3_free(zStore);
  return rc==SQLITE_OK ? 0 : -1;
}

/* ---- the history workload ---- */

static int spHistoryBuild(int bDepot, const char *zDir, int N, int nCommit){
  sqlite3 *db = spOpen(bDepot, zDir, 1);
  sqlite3_stmt *p = 0;
  int i, rc = db ? 0 : -1;
  spRandState = 777;
  if( rc==0 ) rc = spExec(db, "CREATE TABLE t1(a INTEGER PRIMARY KEY,"
                          " b INTEGER, c TEXT)");
  if( rc==0 ) rc = spInsert(db, "t1", N);
  if( rc==0 ) p = spPrep(db, "UPDATE t1 SET b=b+1, c=c||'!' WHERE a=?1");
  for(i=0; rc==0 && p && i<nCommit; i++){
    sqlite3_bind_int(p, 1, 1 + (int)(spRand() % (unsigned)N));
    rc = spStep(db, p);
  }
  sqlite3_finalize(p);
  sqlite3_close(db);
  return rc;
}

static int spHistoryScan(int bDepot, const char *zDir, SpResult *pR){
  double t = spNow(), c = spCpu();
  sqlite3 *db = spOpen(bDepot, zDir, 0);
  int rc = db ? spExec(db, "SELECT count(*), sum(length(c)), sum(b) FROM t1")
              : -1;
  sqlite3_close(db);
  pR->rOpenScan = spNow() - t;
  pR->rOpenScanCpu = spCpu() - c;
  return rc;
}

/* ---- the parent ---- */

/* Run xChild in a forked child; its SpResult comes back through a pipe,
** its peak RSS (KiB) from wait4(). */
typedef int (*SpChildFn)(int bDepot, const char *zDir, int N, int nCommit,
                         SpResult*);

static int spFork(SpChildFn xChild, int bDepot, const char *zDir, int N,
                  int nCommit, SpResult *pR, long *pRssKb){
  int fd[2], st = 0;
  pid_t pid;
  struct rusage ru;
  memset(pR, 0, sizeof(*pR));
  if( pipe(fd)!=0 ) return -1;
  fflush(stdout);
  fflush(stderr);
  pid = fork();
  if( pid==0 ){
    SpResult r;
    close(fd[0]);
    memset(&r, 0, sizeof(r));
    sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
    depot_vfs_register();
    r.ok = xChild(bDepot, zDir, N, nCommit, &r)==0;
    if( write(fd[1], &r, sizeof(r))!=(ssize_t)sizeof(r) ) _exit(2);
    _exit(0);
  }
  close(fd[1]);
  if( read(fd[0], pR, sizeof(*pR))!=(ssize_t)sizeof(*pR) ) pR->ok = 0;
  close(fd[0]);
  memset(&ru, 0, sizeof(ru));
  wait4(pid, &st, 0, &ru);
  *pRssKb = ru.ru_maxrss;
  return pR->ok ? 0 : -1;
}

static int childWorkload(int bDepot, const char *zDir, int N, int nCommit,
                         SpResult *pR){
  char *z;
  int rc;
  (void)nCommit;
  rc = spWorkload(bDepot, zDir, N, pR);
  pR->nTrips = store_pg_round_trips();
  if( rc==0 && bDepot ) rc = spStoreBytes(zDir, pR);
  if( rc==0 && !bDepot ){
    z = sqlite3_mprintf("%s/speed.db", zDir);
    pR->nPlain = spFileBytes(z);
    sqlite3_free(z);
  }
  return rc;
}
static int childHistoryBuild(int bDepot, const char *zDir, int N,
                             int nCommit, SpResult *pR){
  (void)pR;
  return spHistoryBuild(bDepot, zDir, N, nCommit);
}
static int childHistoryScan(int bDepot, const char *zDir, int N,
                            int nCommit, SpResult *pR){
  (void)N; (void)nCommit;
  return spHistoryScan(bDepot, zDir, pR);
}

static void spReset(const char *zDir){
  char *zCmd = sqlite3_mprintf("rm -rf '%q' && mkdir -p '%q'", zDir, zDir);
  if( zSpStoreUri ){
    sqlite3_free(zSpPgStore);
    zSpPgStore = sqlite3_mprintf("%s%sschema=speed_%d_%d", zSpStoreUri,
        strchr(zSpStoreUri, '?') ? "&" : "?", (int)getpid(), ++iSpPgRun);
  }
  if( system(zCmd)!=0 ) fprintf(stderr, "speed: cannot reset %s\n", zDir);
  sqlite3_free(zCmd);
}

static int cmpD(const void *a, const void *b){
  double x = *(const double*)a, y = *(const double*)b;
  return x<y ? -1 : x>y ? 1 : 0;
}
static double spMedian(const double *aIn, int n){
  double a[SP_MAX_RUN];
  memcpy(a, aIn, n*sizeof(double));
  qsort(a, n, sizeof(double), cmpD);
  return (n%2) ? a[n/2] : (a[n/2-1]+a[n/2])/2;
}

static double spLoad(void){
  double a = -1;
  FILE *f = fopen("/proc/loadavg", "r");
  if( f ){
    if( fscanf(f, "%lf", &a)!=1 ) a = -1;
    fclose(f);
  }
  return a;
}

/* The speed tables of one size; returns the total ratio (or -1). */
static double spSize(int nMb, int nRun, const char *zTmp, int *pnMiss){
  SpResult aR[2][SP_MAX_RUN];
  long aRss[2][SP_MAX_RUN];
  double aT[SP_MAX_RUN], aU[SP_MAX_RUN], aTot[2][SP_MAX_RUN];
  double aTotCpu[2][SP_MAX_RUN];
  double rTotU, rTotD, rRatio;
  char *zDir = sqlite3_mprintf("%s/speed-%d", zTmp, nMb);
  int N = nMb*3400;
  int r, i, s, nOver = 0;
  printf("\n### size %d MB (N = %d rows per table, %d run%s, load %.2f)\n\n",
         nMb, N, nRun, nRun>1 ? "s" : "", spLoad());
  for(r=0; r<nRun; r++){
    for(s=0; s<2; s++){
      spReset(zDir);
      if( spFork(childWorkload, s, zDir, N, 0, &aR[s][r], &aRss[s][r]) ){
        fprintf(stderr, "speed: %s run failed\n", s ? "depot" : "unix");
        sqlite3_free(zDir);
        return -1;
      }
      aTot[s][r] = aTotCpu[s][r] = 0;
      for(i=0; i<SP_NSTEP; i++){
        aTot[s][r] += aR[s][r].aStep[i];
        aTotCpu[s][r] += aR[s][r].aCpu[i];
      }
    }
  }
  spReset(zDir);
  rmdir(zDir);
  sqlite3_free(zDir);
  printf("| step | unix s | depot s | depot/unix | CPU s unix, depot |"
         " CPU depot/unix | peak RSS MiB unix, depot |\n"
         "|---|---|---|---|---|---|---|\n");
  for(i=0; i<SP_NSTEP; i++){
    double u, d, ru, rd, cu, cd;
    for(r=0; r<nRun; r++){ aU[r] = aR[0][r].aStep[i];
                           aT[r] = aR[1][r].aStep[i]; }
    u = spMedian(aU, nRun);
    d = spMedian(aT, nRun);
    for(r=0; r<nRun; r++){ aU[r] = aR[0][r].aCpu[i];
                           aT[r] = aR[1][r].aCpu[i]; }
    cu = spMedian(aU, nRun);
    cd = spMedian(aT, nRun);
    for(r=0; r<nRun; r++){ aU[r] = aR[0][r].aRssKb[i]/1024.0;
                           aT[r] = aR[1][r].aRssKb[i]/1024.0; }
    ru = spMedian(aU, nRun);
    rd = spMedian(aT, nRun);
    printf("| %s | %.3f | %.3f | %.2f%s | %.3f, %.3f | %.2f | %.1f, %.1f |\n",
           azStep[i], u, d, u>0 ? d/u : 0,
           (u>0 && d/u>1.5) ? " (> 1.5)" : "", cu, cd, cu>0 ? cd/cu : 0,
           ru, rd);
    if( u>0 && d/u>1.5 ) nOver++;
  }
  rTotU = spMedian(aTot[0], nRun);
  rTotD = spMedian(aTot[1], nRun);
  rRatio = rTotD/rTotU;
  {
    double cu = spMedian(aTotCpu[0], nRun), cd = spMedian(aTotCpu[1], nRun);
    printf("| **total** | %.3f | %.3f | **%.3f** | %.3f, %.3f | **%.3f** |"
           " |\n\n", rTotU, rTotD, rRatio, cu, cd, cu>0 ? cd/cu : 0);
  }
  {
    double aRu[SP_MAX_RUN], aRd[SP_MAX_RUN], aPl[SP_MAX_RUN],
           aPb[SP_MAX_RUN], aPa[SP_MAX_RUN], aSt[SP_MAX_RUN];
    double pl, pb, pa, st;
    for(r=0; r<nRun; r++){
      aRu[r] = aRss[0][r]/1024.0; aRd[r] = aRss[1][r]/1024.0;
      aPl[r] = (double)aR[0][r].nPlain; aPb[r] = (double)aR[1][r].nPhysBefore;
      aPa[r] = (double)aR[1][r].nPhysAfter; aSt[r] = (double)aR[1][r].nStored;
    }
    pl = spMedian(aPl, nRun); pb = spMedian(aPb, nRun);
    pa = spMedian(aPa, nRun); st = spMedian(aSt, nRun);
    printf("total ratio %.3f (target <= 1.10: %s); steps over 1.5x: %d"
           " (target 0: %s)\n", rRatio, rRatio<=1.10 ? "met" : "NOT MET",
           nOver, nOver==0 ? "met" : "NOT MET");
    if( zSpStoreUri ){
      double aTr[SP_MAX_RUN];
      for(r=0; r<nRun; r++) aTr[r] = (double)aR[1][r].nTrips;
      printf("depot store on PostgreSQL: %.0f round trips in the workload"
             " (median)\n", spMedian(aTr, nRun));
    }
    printf("peak RSS: unix %.1f MiB, depot %.1f MiB (+%.1f MiB)\n",
           spMedian(aRu, nRun), spMedian(aRd, nRun),
           spMedian(aRd, nRun)-spMedian(aRu, nRun));
    {
      /* the bound of vfs/depot_vfs.h, run by run: unix peak + limits +
      ** DEPOT_MEMORY_SLACK_KB */
      int nHeld = 0;
      double rBound = 0, rLim = aR[1][0].nLimit/1048576.0;
      for(r=0; r<nRun; r++){
        double b = aRu[r] + aR[1][r].nLimit/1048576.0
                 + DEPOT_MEMORY_SLACK_KB/1024.0;
        if( r==0 || b>rBound ) rBound = b;
        nHeld += aRd[r]<=b;
      }
      printf("peak RSS bound: unix peak + limits (budget twice) %.1f MiB"
             " + %d MiB = %.1f"
             " MiB; depot %.1f MiB: %s (%d of %d runs)\n", rLim,
             DEPOT_MEMORY_SLACK_KB/1024, rBound, spMedian(aRd, nRun),
             nHeld==nRun ? "holds" : "NOT MET", nHeld, nRun);
      if( nHeld<nRun ) (*pnMiss)++;
    }
    if( aR[1][0].zMem[0] ){
      printf("depot memory after VACUUM (run 1, MiB): %s\n", aR[1][0].zMem);
    }
    printf("bytes: plain file %.1f MB; depot store after the workload"
           " %.1f MB; after compact+gc(+vacuum) %.1f MB; stored_bytes"
           " %.1f MB\n", pl/1e6, pb/1e6, pa/1e6, st/1e6);
    printf("physical/stored %.2f (target <= 1.5: %s); physical/plain %.2f"
           " (target <= 0.5: %s)\n", st>0 ? pa/st : 0,
           st>0 && pa/st<=1.5 ? "met" : "NOT MET", pl>0 ? pa/pl : 0,
           pl>0 && pa/pl<=0.5 ? "met" : "NOT MET");
    if( rRatio>1.10 ) (*pnMiss)++;
    if( nOver ) (*pnMiss)++;
  }
  return rRatio;
}

static int spHistory(int nMb, int nCommit, int nRun, const char *zTmp){
  char *zDir = sqlite3_mprintf("%s/speed-history", zTmp);
  SpResult r;
  long rss;
  double aU[SP_MAX_RUN], aD[SP_MAX_RUN], aCu[SP_MAX_RUN], aCd[SP_MAX_RUN];
  double u, d, cu, cd, tb;
  int i, N = nMb*20000;
  printf("\n### cold open + full scan: %d MB table, %d commits of history"
         " (load %.2f)\n\n", nMb, nCommit, spLoad());
  spReset(zDir);
  for(i=0; i<2; i++){
    tb = spNow();
    if( spFork(childHistoryBuild, i, zDir, N, nCommit, &r, &rss) ){
      fprintf(stderr, "speed: history build failed\n");
      return -1;
    }
    printf("build (%s, synchronous=OFF): %.1f s\n", i ? "depot" : "unix",
           spNow()-tb);
  }
  {
    char *zP = sqlite3_mprintf("%s/speed.db", zDir);
    printf("plain file %.1f MB, store %.1f MB\n", spFileBytes(zP)/1e6,
           spStorePhys(zDir)/1e6);
    sqlite3_free(zP);
  }
  for(i=0; i<nRun; i++){
    if( spFork(childHistoryScan, 0, zDir, N, 0, &r, &rss) ) return -1;
    aU[i] = r.rOpenScan;
    aCu[i] = r.rOpenScanCpu;
    if( spFork(childHistoryScan, 1, zDir, N, 0, &r, &rss) ) return -1;
    aD[i] = r.rOpenScan;
    aCd[i] = r.rOpenScanCpu;
  }
  u = spMedian(aU, nRun);
  d = spMedian(aD, nRun);
  cu = spMedian(aCu, nRun);
  cd = spMedian(aCd, nRun);
  printf("open + scan CPU: unix %.3f s, depot %.3f s, ratio %.2f\n", cu, cd,
         cu>0 ? cd/cu : 0);
  printf("open + scan: unix %.3f s, depot %.3f s, ratio %.2f (target <= 1.3:"
         " %s)\n", u, d, d/u, d/u<=1.3 ? "met" : "NOT MET");
  spReset(zDir);
  rmdir(zDir);
  sqlite3_free(zDir);
  return d/u<=1.3 ? 0 : 1;
}

int main(int argc, char **argv){
  const char *zTmp = getenv("DEPOT_TEST_TMPDIR");
  int aSize[SP_MAX_SIZE] = { 25, 100 };
  double aRatio[SP_MAX_SIZE];
  int nSize = 2, nRun = 3, nHistMb = 100, nCommit = 10000, bHist = 1;
  int i, nMiss = 0;
  if( zTmp==0 || zTmp[0]==0 ) zTmp = "tests/tmp";
  bSpMarks = getenv("DEPOT_SPEED_MARKS")!=0;
  mkdir(zTmp, 0777);
  for(i=1; i<argc; i++){
    if( strcmp(argv[i], "--sizes")==0 && i+1<argc ){
      char *z = argv[++i];
      nSize = 0;
      while( *z && nSize<SP_MAX_SIZE ){
        aSize[nSize++] = atoi(z);
        z += strcspn(z, ",");
        if( *z==',' ) z++;
      }
    }else if( strcmp(argv[i], "--runs")==0 && i+1<argc ){
      nRun = atoi(argv[++i]);
      if( nRun<1 ) nRun = 1;
      if( nRun>SP_MAX_RUN ) nRun = SP_MAX_RUN;
    }else if( strcmp(argv[i], "--history")==0 && i+1<argc ){
      nHistMb = atoi(argv[++i]);
    }else if( strcmp(argv[i], "--commits")==0 && i+1<argc ){
      nCommit = atoi(argv[++i]);
    }else if( strcmp(argv[i], "--no-history")==0 ){
      bHist = 0;
    }else if( strcmp(argv[i], "--depot-params")==0 && i+1<argc ){
      zSpParams = argv[++i];
    }else if( strcmp(argv[i], "--store-uri")==0 && i+1<argc ){
      zSpStoreUri = argv[++i];
    }else{
      fprintf(stderr, "usage: %s [--sizes MB,MB] [--runs N] [--history MB]"
              " [--commits N] [--no-history] [--depot-params K=V&...]"
              " [--store-uri postgresql://...]\n",
              argv[0]);
      return 2;
    }
  }
  printf("speed bench: SQLite %s, depot vs unix, synchronous=FULL both,"
         " %ld cores, load %.2f%s%s\n", sqlite3_libversion(),
         sysconf(_SC_NPROCESSORS_ONLN), spLoad(),
         zSpParams[0] ? ", depot params " : "", zSpParams);
  for(i=0; i<nSize; i++){
    aRatio[i] = spSize(aSize[i], nRun, zTmp, &nMiss);
    if( aRatio[i]<0 ) return 1;
  }
  if( nSize>1 ){
    double g = aRatio[nSize-1]/aRatio[0];
    printf("\nlarge/small total ratio: %.3f (target <= 1.10: %s)\n", g,
           g<=1.10 ? "met" : "NOT MET");
    if( g>1.10 ) nMiss++;
  }
  if( bHist ){
    int rc = spHistory(nHistMb, nCommit, nRun, zTmp);
    if( rc<0 ) return 1;
    nMiss += rc;
  }
  printf("\ntargets not met: %d\n", nMiss);
  return 0;
}
