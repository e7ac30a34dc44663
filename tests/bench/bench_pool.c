/*
** bench_pool.c -- make bench workloads of the connection pool and the
** async runner (ext/depot_pool.h).
**
**   pool_acquire     POOL_ACQ uncontended acquire+release pairs of a read
**                    lease (pool of 4 readers on a WAL file, one thread),
**                    cost the thread's CPU seconds per pair.  The
**                    baseline is the target itself, a fixed 1 µs per
**                    pair, so the ratio is the cost in µs and <= 1.00
**                    meets "at most 1 µs"; stderr has the write lease's
**                    figure and wall times too.
**   pool_read_file   POOL_QUERIES range reads (each sums 200 rows of a
**                    POOL_ROWS-row table) on a plain WAL file: baseline
**                    through one reader lease in one thread, candidate
**                    split over 4 reader leases in 4 threads.  Cost: wall
**                    seconds; ratio <= 0.59 is at least 1.7x the reads per
**                    second.  Every connection reads the table once
**                    before the clock starts (warm page caches); stderr
**                    has each run's CPU seconds and the cores it kept
**                    busy, which a loaded machine caps below 2.
**   pool_read_depot  the same on a depot database (vfs=depot).
**   async_overhead   POOL_STMTS point reads of a 1000-row table (in the
**                    page cache) through the async runner (one worker, up
**                    to 64 in flight, submitted as a recipe, completions
**                    taken from its descriptor) against the same reads in
**                    a direct sqlite3_step loop on one prepared statement,
**                    in 7 alternated rounds of the candidate run; the
**                    candidate's cost is the median difference of the
**                    process's CPU seconds (all threads) per statement,
**                    which the load of a shared machine does not inflate
**                    as it does wall time; the baseline is the 10 µs
**                    target, so <= 1.00 meets "at most 10 µs".  stderr has
**                    the figures, wall time too, the same for SQL submits,
**                    and the round trip of one statement at a time.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include "ext/depot_pool.h"
#include "vfs/depot_vfs.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_ACQ      500000
#define POOL_ROWS     50000
#define POOL_QUERIES  32000
#define POOL_SPAN     200
#define POOL_THREADS  4
#define POOL_STMTS    20000
#define POOL_INFLIGHT 64

/* Create table t(k INTEGER PRIMARY KEY, v) of nRow rows at zUri. */
static int bpLoad(const char *zUri, int bWal, int nRow){
  sqlite3 *db = 0;
  int rc;
  depot_vfs_register();
  rc = sqlite3_open_v2(zUri, &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE
                       |SQLITE_OPEN_URI, 0);
  if( rc==SQLITE_OK && bWal ){
    rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL", 0, 0, 0);
  }
  if( rc==SQLITE_OK ){
    char *z = sqlite3_mprintf("CREATE TABLE t(k INTEGER PRIMARY KEY, v);"
        "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c"
        " WHERE i<%d) INSERT INTO t SELECT i, printf('%%.60c-%%d', 'x', i)"
        " FROM c", nRow);
    rc = sqlite3_exec(db, z, 0, 0, 0);
    sqlite3_free(z);
  }
  if( rc!=SQLITE_OK ) fprintf(stderr, "pool bench: load %s: %s\n", zUri,
                              sqlite3_errmsg(db));
  sqlite3_close(db);
  return rc;
}

static depot_pool *bpOpen(const char *zUri, int nReader){
  depot_pool_options o;
  depot_pool *p = 0;
  char *zErr = 0;
  memset(&o, 0, sizeof(o));
  o.nReader = nReader;
  if( depot_pool_open(zUri, &o, &p, &zErr)!=SQLITE_OK ){
    fprintf(stderr, "pool bench: depot_pool_open %s: %s\n", zUri, zErr);
    sqlite3_free(zErr);
    return 0;
  }
  return p;
}

/* ------------------------------------------------------- pool_acquire --- */

/* CPU seconds of the calling thread so far. */
static double bpThreadCpu(void){
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec/1e9;
}

/* CPU seconds per acquire+release of a lease of kind eKind on p (the
** thread's CPU time: a loaded machine's preemptions do not count);
** *pWall: wall seconds per pair. */
static double bpAcquireLoop(depot_pool *p, int eKind, double *pWall){
  depot_lease l;
  double t0 = bench_now(), c0 = bpThreadCpu();
  int i;
  for(i=0; i<POOL_ACQ; i++){
    if( depot_pool_acquire(p, eKind, 0, "bench", &l, 0)!=SQLITE_OK
     || depot_lease_release(&l)!=SQLITE_OK ){
      fprintf(stderr, "pool bench: acquire/release failed\n");
      return -1;
    }
  }
  *pWall = (bench_now() - t0)/POOL_ACQ;
  return (bpThreadCpu() - c0)/POOL_ACQ;
}

double bench_pool_acquire(int bCandidate, const char *zDir){
  char *zUri;
  depot_pool *p;
  double rRead, rWrite, wRead, wWrite;
  if( !bCandidate ) return 1e-6;               /* the target: 1 µs */
  zUri = sqlite3_mprintf("file:%s/acq.db", zDir);
  p = bpLoad(zUri, 1, POOL_ROWS)==SQLITE_OK ? bpOpen(zUri, 4) : 0;
  sqlite3_free(zUri);
  if( p==0 ) return -1;
  rWrite = bpAcquireLoop(p, DEPOT_LEASE_WRITE, &wWrite);
  rRead = bpAcquireLoop(p, DEPOT_LEASE_READ, &wRead);
  fprintf(stderr, "pool_acquire: CPU per acquire+release: read lease %.3f"
          " us (target 1 us: %s), write lease %.3f us; wall: %.3f us, %.3f"
          " us\n", rRead*1e6, rRead>0 && rRead<=1e-6 ? "met" : "NOT MET",
          rWrite*1e6, wRead*1e6, wWrite*1e6);
  depot_pool_close(p, 0);
  return rRead;
}

/* ---------------------------------------------------- pool_read_* --- */

typedef struct BpReader BpReader;
struct BpReader {
  depot_pool *p;
  int iFirst, nQuery;      /* queries iFirst..iFirst+nQuery-1 */
  pthread_barrier_t *pBar; /* all leased and warm: start */
  sqlite3_int64 iSum;
  int rc;
};

/* The reads of one reader: lease, warm the page cache, wait for the
** others, run its share of the queries. */
static void *bpReaderMain(void *pArg){
  BpReader *r = (BpReader*)pArg;
  depot_lease l;
  sqlite3_stmt *pStmt = 0;
  int i;
  r->rc = depot_pool_acquire(r->p, DEPOT_LEASE_READ, 10000, "bench", &l, 0);
  if( r->rc==SQLITE_OK ){
    r->rc = sqlite3_exec(l.db, "SELECT sum(length(v)) FROM t", 0, 0, 0);
  }
  if( r->rc==SQLITE_OK ){
    r->rc = sqlite3_prepare_v2(l.db, "SELECT sum(length(v)) FROM t"
        " WHERE k BETWEEN ?1 AND ?1+?2-1", -1, &pStmt, 0);
  }
  pthread_barrier_wait(r->pBar);
  for(i=0; r->rc==SQLITE_OK && i<r->nQuery; i++){
    int q = r->iFirst + i;
    sqlite3_bind_int(pStmt, 1, 1 + (int)((q*7919LL) % (POOL_ROWS-POOL_SPAN)));
    sqlite3_bind_int(pStmt, 2, POOL_SPAN);
    if( sqlite3_step(pStmt)==SQLITE_ROW ){
      r->iSum += sqlite3_column_int64(pStmt, 0);
    }
    r->rc = sqlite3_reset(pStmt);
  }
  if( r->rc!=SQLITE_OK ){
    fprintf(stderr, "pool bench: reader: %s\n",
            l.db ? sqlite3_errmsg(l.db) : "no lease");
  }
  sqlite3_finalize(pStmt);
  depot_lease_release(&l);
  return 0;
}

/* CPU seconds of the process so far (all threads). */
static double bpCpu(void){
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec/1e9;
}

/* POOL_QUERIES reads of the database at zUri over nThread reader leases
** (1 or POOL_THREADS) in as many threads; wall seconds. */
static double bpReadRun(const char *zUri, int nThread){
  depot_pool *p = bpOpen(zUri, POOL_THREADS);
  pthread_t aTh[POOL_THREADS];
  BpReader aR[POOL_THREADS];
  pthread_barrier_t bar;
  double t0 = 0, t1, c0, c1;
  int i, rc = SQLITE_OK;
  if( p==0 ) return -1;
  pthread_barrier_init(&bar, 0, nThread+1);
  for(i=0; i<nThread; i++){
    aR[i].p = p;
    aR[i].nQuery = POOL_QUERIES/nThread;
    aR[i].iFirst = i*aR[i].nQuery;
    aR[i].pBar = &bar;
    aR[i].iSum = 0;
    aR[i].rc = SQLITE_OK;
    pthread_create(&aTh[i], 0, bpReaderMain, &aR[i]);
  }
  pthread_barrier_wait(&bar);
  t0 = bench_now();
  c0 = bpCpu();
  for(i=0; i<nThread; i++){
    pthread_join(aTh[i], 0);
    if( aR[i].rc!=SQLITE_OK ) rc = aR[i].rc;
  }
  t1 = bench_now();
  c1 = bpCpu();
  fprintf(stderr, "%s: %d thread(s): %.3f s wall, %.3f s cpu (%.2f cores"
          " busy)\n", strstr(zUri, "vfs=depot") ? "pool_read_depot"
          : "pool_read_file", nThread, t1-t0, c1-c0, (c1-c0)/(t1-t0));
  pthread_barrier_destroy(&bar);
  depot_pool_close(p, 0);
  return rc==SQLITE_OK ? t1 - t0 : -1;
}

static double bpRead(int bCandidate, const char *zDir, int bDepot){
  char *zUri = bDepot
      ? sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=app", zDir)
      : sqlite3_mprintf("file:%s/app.db", zDir);
  double r = bpLoad(zUri, !bDepot, POOL_ROWS)==SQLITE_OK
           ? bpReadRun(zUri, bCandidate ? POOL_THREADS : 1) : -1;
  sqlite3_free(zUri);
  return r;
}

double bench_pool_read_file(int bCandidate, const char *zDir){
  return bpRead(bCandidate, zDir, 0);
}

double bench_pool_read_depot(int bCandidate, const char *zDir){
  return bpRead(bCandidate, zDir, 1);
}

/* ---------------------------------------------------- async_overhead --- */

#define BP_POINT_SQL "SELECT v FROM t WHERE k=?1"
#define BP_ASYNC_ROWS 1000       /* every page stays in the page cache */
#define BP_ROUNDS 7

/* The key of statement i. */
static int bpKey(int i){
  return 1 + (int)((i*7919LL) % BP_ASYNC_ROWS);
}

/* Seconds per statement of nStmt point reads stepped directly on one
** prepared statement of a reader lease of p; *pCpu: CPU seconds of the
** process per statement. */
static double bpDirect(depot_pool *p, int nStmt, double *pCpu){
  depot_lease l;
  sqlite3_stmt *pStmt = 0;
  sqlite3_int64 n = 0;
  double t0, t1, c0;
  int i, rc;
  if( depot_pool_acquire(p, DEPOT_LEASE_READ, 1000, "bench", &l, 0) ){
    return -1;
  }
  rc = sqlite3_prepare_v2(l.db, BP_POINT_SQL, -1, &pStmt, 0);
  t0 = bench_now();
  c0 = bpCpu();
  for(i=0; rc==SQLITE_OK && i<nStmt; i++){
    sqlite3_bind_int(pStmt, 1, bpKey(i));
    while( sqlite3_step(pStmt)==SQLITE_ROW ){
      n += sqlite3_column_bytes(pStmt, 0);
    }
    rc = sqlite3_reset(pStmt);
  }
  t1 = bench_now();
  *pCpu = (bpCpu() - c0)/nStmt;
  sqlite3_finalize(pStmt);
  depot_lease_release(&l);
  if( rc!=SQLITE_OK || n==0 ) return -1;
  return (t1 - t0)/nStmt;
}

/* Seconds per statement of nStmt point reads through runner a, at most
** nFlight in flight, as recipe pRecipe (NULL: SQL submits); *pCpu: CPU
** seconds of the process (caller and runner threads) per statement. */
static double bpAsync(depot_async *a, depot_recipe *pRecipe, int nStmt,
                      int nFlight, double *pCpu){
  int nSent = 0, nDone = 0, nFail = 0;
  double t0 = bench_now(), c0 = bpCpu();
  while( nDone<nStmt ){
    depot_async_completion *ac[POOL_INFLIGHT];
    struct pollfd pfd;
    int j, m;
    while( nSent<nStmt && nSent-nDone<nFlight ){
      depot_async_stmt s;
      depot_value v;
      memset(&s, 0, sizeof(s));
      memset(&v, 0, sizeof(v));
      v.eType = SQLITE_INTEGER;
      v.i = bpKey(nSent);
      if( pRecipe ) s.pRecipe = pRecipe; else s.zSql = BP_POINT_SQL;
      s.nParam = 1;
      s.aParam = &v;
      s.iTimeoutMs = 60000;
      s.iTag = (sqlite3_uint64)nSent;
      if( depot_async_submit(a, &s, 0)!=SQLITE_OK ) return -1;
      nSent++;
    }
    pfd.fd = depot_async_fd(a);
    pfd.events = POLLIN;
    if( poll(&pfd, 1, 10000)<=0 ) return -1;
    m = depot_async_poll(a, ac, POOL_INFLIGHT);
    for(j=0; j<m; j++){
      if( ac[j]->rc!=SQLITE_OK || ac[j]->nRow!=1 ) nFail++;
      depot_async_completion_free(ac[j]);
    }
    nDone += m;
  }
  if( nFail ){
    fprintf(stderr, "pool bench: %d async statements failed\n", nFail);
    return -1;
  }
  *pCpu = (bpCpu() - c0)/nStmt;
  return (bench_now() - t0)/nStmt;
}

static int bpCmp(const void *a, const void *b){
  double x = *(const double*)a, y = *(const double*)b;
  return x<y ? -1 : x>y ? 1 : 0;
}

static double bpMedian(double *a, int n){
  qsort(a, n, sizeof(double), bpCmp);
  return a[n/2];
}

double bench_async_overhead(int bCandidate, const char *zDir){
  char *zUri;
  depot_pool *p;
  depot_async *a = 0;
  depot_async_options o;
  depot_recipe *pRecipe = 0;
  double aDirect[BP_ROUNDS], aRecipe[BP_ROUNDS], aSql[BP_ROUNDS];
  double aCpuDirect[BP_ROUNDS], aCpuRecipe[BP_ROUNDS], aCpuSql[BP_ROUNDS];
  double aOver[BP_ROUNDS], aOverSql[BP_ROUNDS], aWall[BP_ROUNDS];
  double rTrip = -1, rOver, x;
  int i, n = POOL_STMTS/BP_ROUNDS, bOk = 1;
  if( !bCandidate ) return 10e-6;              /* the target: 10 µs */
  zUri = sqlite3_mprintf("file:%s/async.db", zDir);
  p = bpLoad(zUri, 1, BP_ASYNC_ROWS)==SQLITE_OK ? bpOpen(zUri, 4) : 0;
  sqlite3_free(zUri);
  if( p==0 ) return -1;
  memset(&o, 0, sizeof(o));
  if( depot_async_open(p, 1, &o, &a, 0)!=SQLITE_OK
   || depot_async_recipe_new(BP_POINT_SQL, &pRecipe)!=SQLITE_OK ){
    bOk = 0;
  }
  if( bOk ){
    bpDirect(p, 1000, &x);                             /* warm up */
    bpAsync(a, pRecipe, 1000, POOL_INFLIGHT, &x);
    bpAsync(a, 0, 1000, POOL_INFLIGHT, &x);
  }
  /* Alternated rounds, so that a burst of load elsewhere hits both. */
  for(i=0; bOk && i<BP_ROUNDS; i++){
    aDirect[i] = bpDirect(p, n, &aCpuDirect[i]);
    aRecipe[i] = bpAsync(a, pRecipe, n, POOL_INFLIGHT, &aCpuRecipe[i]);
    aSql[i] = bpAsync(a, 0, n, POOL_INFLIGHT, &aCpuSql[i]);
    if( aDirect[i]<=0 || aRecipe[i]<=0 || aSql[i]<=0 ) bOk = 0;
    aOver[i] = aCpuRecipe[i] - aCpuDirect[i];
    aOverSql[i] = aCpuSql[i] - aCpuDirect[i];
    aWall[i] = aRecipe[i] - aDirect[i];
  }
  if( bOk ) rTrip = bpAsync(a, pRecipe, POOL_STMTS/20, 1, &x);
  depot_async_recipe_free(pRecipe);
  depot_async_free(a);
  depot_pool_close(p, 0);
  if( !bOk || rTrip<=0 ) return -1;
  rOver = bpMedian(aOver, BP_ROUNDS);
  fprintf(stderr, "async_overhead: CPU per statement: direct step loop"
          " %.2f us, runner (1 worker, %d in flight) recipe %.2f us"
          " (overhead %.2f us, target 10 us: %s), SQL submits %.2f us"
          " (overhead %.2f us); wall per statement: direct %.2f us, recipe"
          " %.2f us (overhead %.2f us), SQL %.2f us; one at a time %.2f us"
          " round trip (medians of %d rounds)\n",
          bpMedian(aCpuDirect, BP_ROUNDS)*1e6, POOL_INFLIGHT,
          bpMedian(aCpuRecipe, BP_ROUNDS)*1e6, rOver*1e6,
          rOver<=10e-6 ? "met" : "NOT MET", bpMedian(aCpuSql, BP_ROUNDS)*1e6,
          bpMedian(aOverSql, BP_ROUNDS)*1e6, bpMedian(aDirect, BP_ROUNDS)*1e6,
          bpMedian(aRecipe, BP_ROUNDS)*1e6, bpMedian(aWall, BP_ROUNDS)*1e6,
          bpMedian(aSql, BP_ROUNDS)*1e6, rTrip*1e6, BP_ROUNDS);
  return rOver>1e-9 ? rOver : 1e-9;      /* the framework wants a cost > 0 */
}
