/*
** check_pool.c -- the "pool" suite: the connection pool and the async
** runner of ext/depot_pool.h, one behaviour per test.
**
** Pool: options (init SQL and xInit on every connection, read-only
** readers, read-write readers, no readers), a lease dropped by its thread
** returns its slot and permit, a thread exiting inside a transaction has
** it rolled back, release from another thread, the scope helper, a busy
** pool times out at pool_acquire within the timeout without burning CPU,
** an 8-slot pool recovers from a storm of cancelled callers, release
** resets the slot before a waiter gets it, double and foreign releases
** are refused, connections marked broken, failed with IOERR, CORRUPT or
** NOTADB, or inside a transaction are replaced, the leak detector counts
** with the tag, close reports held leases, readiness fails fast naming
** its stage (pool_acquire, open, init_sql), the depot_pool_status listing,
** a pool on a depot database (vfs=depot URI), leases writing KV tables
** concurrently (disjoint keys commit, a conflict is SQLITE_BUSY_SNAPSHOT).
**
** Async: the completion descriptor is an eventfd readable while
** completions wait, exactly one completion (a late one refused), a
** timeout interrupts its statement (the connection stays), a late
** completion poisons its connection, transactions run in order and
** commit, a timeout inside a transaction rolls it back (in inline mode
** alike), shutdown rolls back a held transaction, drains within its grace
** and interrupts past it, pool-level calls inside a transaction callback
** are refused, the holding and pending_async gauges, recipes prepared
** once per connection, SQL submits kept prepared too (and following a
** schema change), inline mode matches async mode, the runner on a depot
** database and on a KV table.
** Run it under ThreadSanitizer too (--enable-tsan).
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot_pool.h"
#include "ext/depot.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static sqlite3_int64 nowMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (sqlite3_int64)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

static void sleepMs(int ms){
  struct timespec ts;
  ts.tv_sec = ms/1000;
  ts.tv_nsec = (long)(ms%1000)*1000000;
  nanosleep(&ts, 0);
}

/* The log lines of a pool, joined (xLog sink). */
typedef struct LogBuf LogBuf;
struct LogBuf {
  pthread_mutex_t mu;
  char z[8192];
};
static LogBuf gLog = { PTHREAD_MUTEX_INITIALIZER, {0} };

static void logSink(void *pArg, int iLevel, const char *zMsg){
  LogBuf *p = (LogBuf*)pArg;
  (void)iLevel;
  pthread_mutex_lock(&p->mu);
  if( strlen(p->z)+strlen(zMsg)+2 < sizeof(p->z) ){
    strcat(p->z, zMsg);
    strcat(p->z, "\n");
  }
  pthread_mutex_unlock(&p->mu);
}

static int logHas(const char *zNeedle){
  int b;
  pthread_mutex_lock(&gLog.mu);
  b = strstr(gLog.z, zNeedle)!=0;
  pthread_mutex_unlock(&gLog.mu);
  return b;
}

/* sleep_ms(N): sleeps N ms (not interruptible), returns N. */
static void sleepFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  (void)argc;
  sleepMs(sqlite3_value_int(argv[0]));
  sqlite3_result_int(ctx, sqlite3_value_int(argv[0]));
}

/* fail_with(N): fails with SQLite result code N (what a damaged file or
** a failing disk would return). */
static void failFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  (void)argc;
  sqlite3_result_error(ctx, "injected failure", -1);
  sqlite3_result_error_code(ctx, sqlite3_value_int(argv[0]));
}

/* Set: xInit fails (the stage init_sql of a connection (re)opened). */
static int gInitFail = 0;

static int initConn(void *pArg, sqlite3 *db, int bWriter){
  (void)pArg; (void)bWriter;
  if( __atomic_load_n(&gInitFail, __ATOMIC_ACQUIRE) ) return SQLITE_ERROR;
  sqlite3_create_function(db, "fail_with", 1, SQLITE_UTF8, 0, failFunc, 0, 0);
  return sqlite3_create_function(db, "sleep_ms", 1, SQLITE_UTF8, 0,
                                 sleepFunc, 0, 0);
}

/* A fresh WAL database file zTag/app.db with table t(k,v) of rows 1..10;
** returns its path (sqlite3_free). */
static char *poolFile(const char *zTag){
  char *zDir = th_tmpdir(zTag);
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  th_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(k INTEGER PRIMARY KEY,"
          " v); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c"
          " WHERE i<10) INSERT INTO t SELECT i, 'v'||i FROM c");
  sqlite3_close(db);
  sqlite3_free(zDir);
  return zDb;
}

/* The options of the tests' pools: busy_timeout by init SQL, the test
** functions by xInit, the log into gLog (emptied), name zTag. */
static depot_pool_options poolOptions(const char *zTag, int nReader,
                                      int iLeakMs){
  depot_pool_options o;
  memset(&o, 0, sizeof(o));
  o.nReader = nReader;
  o.iLeakMs = iLeakMs;
  o.zInitSql = "PRAGMA busy_timeout=5000";
  o.xInit = initConn;
  o.xLog = logSink;
  o.pLogArg = &gLog;
  o.zName = zTag;
  pthread_mutex_lock(&gLog.mu);
  gLog.z[0] = 0;
  pthread_mutex_unlock(&gLog.mu);
  return o;
}

static depot_pool *poolOpenOpt(const char *zPath, depot_pool_options *pO){
  depot_pool *p = 0;
  char *zErr = 0;
  int rc = depot_pool_open(zPath, pO, &p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "depot_pool_open: %s", zErr);
  return p;
}

/* A pool on poolFile(zTag); nReader readers, leak threshold iLeakMs (0:
** default). */
static depot_pool *poolNew(const char *zTag, int nReader, int iLeakMs){
  char *zDb = poolFile(zTag);
  depot_pool_options o = poolOptions(zTag, nReader, iLeakMs);
  depot_pool *p = poolOpenOpt(zDb, &o);
  sqlite3_free(zDb);
  return p;
}

static void poolDone(depot_pool *p){
  char *zErr = 0;
  int rc = depot_pool_close(p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "depot_pool_close: %s", zErr);
}

static depot_pool_stats poolStats(depot_pool *p){
  depot_pool_stats st;
  depot_pool_status(p, &st);
  return st;
}

/* ------------------------------------------------------------ leases --- */

static void *holdAndExit(void *pArg){
  depot_pool *p = (depot_pool*)pArg;
  depot_lease l;
  if( depot_pool_acquire(p, DEPOT_LEASE_WRITE, 1000, "dropped", &l, 0) ){
    return (void*)1;
  }
  return 0;                      /* exits holding the lease */
}

START_TEST(test_pool_dropped_lease_returns_slot_and_permit){
  depot_pool *p = poolNew("pool_drop", 1, 0);
  depot_lease l;
  pthread_t th;
  void *r;
  pthread_create(&th, 0, holdAndExit, p);
  pthread_join(th, &r);
  ck_assert_ptr_null(r);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "next", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t"), 10);
  ck_assert_int_eq(depot_lease_release(&l), SQLITE_OK);
  ck_assert(logHas("released at the exit of its thread"));
  poolDone(p);
}
END_TEST

START_TEST(test_pool_acquire_times_out_at_pool_acquire){
  depot_pool *p = poolNew("pool_busy", 1, 0);
  depot_lease l, l2;
  char *zErr = 0;
  struct timespec c0, c1;
  sqlite3_int64 t0, dt, cpuUs;
  int rc;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "holder", &l,
                                      0), SQLITE_OK);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
  t0 = nowMs();
  rc = depot_pool_acquire(p, DEPOT_LEASE_WRITE, 200, "waiter", &l2, &zErr);
  dt = nowMs() - t0;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
  cpuUs = (c1.tv_sec-c0.tv_sec)*1000000 + (c1.tv_nsec-c0.tv_nsec)/1000;
  ck_assert_int_eq(rc, SQLITE_BUSY);
  ck_assert_msg(strncmp(zErr, "pool_acquire: timeout: write lease after ",
                        41)==0, "%s", zErr);
  ck_assert_msg(strstr(zErr, "in use 1/1 writers, 0/1 readers, ")!=0, "%s",
                zErr);
  ck_assert_msg(atoi(zErr+41)>=190 && atoi(zErr+41)<=dt, "%s", zErr);
  ck_assert_msg(dt>=190 && dt<200+(th_under_tsan() ? 300 : 100),
                "waited %lld ms", dt);
  ck_assert_msg(cpuUs < 20000, "waiting used %lld us of CPU", cpuUs);
  ck_assert_int_eq(poolStats(p).nTimeout, 1);
  ck_assert_int_ge(poolStats(p).iLongestWaitUs, 190000);
  sqlite3_free(zErr);
  depot_lease_release(&l);
  poolDone(p);
}
END_TEST

/* Storm: callers that take a lease then are cancelled (pthread_cancel
** while they hold it), or exit holding it, or time out waiting.  None
** releases: the exit destructor returns every lease. */
static void *stormCaller(void *pArg){
  depot_pool *p = (depot_pool*)pArg;
  depot_lease l;
  if( depot_pool_acquire(p, DEPOT_LEASE_READ, 50, "storm", &l, 0)==SQLITE_OK ){
    sqlite3_exec(l.db, "SELECT count(*) FROM t", 0, 0, 0);
    sleepMs(5);                  /* a cancellation point, holding the lease */
  }
  return 0;
}

START_TEST(test_pool_storm_of_cancelled_callers_recovers){
  depot_pool *p = poolNew("pool_storm", 8, 0);
  depot_lease al[8];
  depot_pool_stats st;
  const char *zSan = getenv("DEPOT_SANITIZER");
  int bNoCancel = zSan && (strcmp(zSan, "tsan")==0 || strcmp(zSan, "asan")==0);
  int round, i;
  for(round=0; round<th_scaled(20, 4); round++){
    pthread_t th[24];
    for(i=0; i<24; i++) pthread_create(&th[i], 0, stormCaller, p);
    /* The sanitizers do not follow a thread cancelled while it unwinds:
    ** ThreadSanitizer misses the locks it takes (a false race in the exit
    ** destructor), AddressSanitizer's thread teardown overflows its
    ** alternate signal stack.  There every caller leaves holding its
    ** lease instead, through the same thread-exit release path. */
    if( !bNoCancel ) for(i=0; i<24; i+=2) pthread_cancel(th[i]);
    for(i=0; i<24; i++) pthread_join(th[i], 0);
  }
  st = poolStats(p);
  ck_assert_int_eq(st.nInUse, 0);
  ck_assert_int_eq(st.nWaiting, 0);
  for(i=0; i<8; i++){              /* every reader slot comes at once */
    ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "after",
                                        &al[i], 0), SQLITE_OK);
    ck_assert_int_eq(th_int(al[i].db, "SELECT count(*) FROM t"), 10);
  }
  for(i=0; i<8; i++) ck_assert_int_eq(depot_lease_release(&al[i]), SQLITE_OK);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_double_and_foreign_release_refused){
  depot_pool *p = poolNew("pool_dbl", 1, 0);
  depot_pool *q = poolNew("pool_dbl2", 1, 0);
  depot_lease l, copy, m;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "a", &l, 0),
                   SQLITE_OK);
  copy = l;
  ck_assert_int_eq(depot_lease_release(&l), SQLITE_OK);
  ck_assert_int_eq(depot_lease_release(&l), SQLITE_OK);   /* emptied */
  ck_assert_int_eq(depot_lease_release(&copy), SQLITE_MISUSE);
  ck_assert_int_eq(poolStats(p).nBadRelease, 1);
  ck_assert(logHas("double release refused"));
  ck_assert_int_eq(depot_pool_acquire(q, DEPOT_LEASE_READ, 0, "b", &m, 0),
                   SQLITE_OK);
  ck_assert_int_eq(depot_pool_release(p, &m), SQLITE_MISUSE);
  ck_assert_int_eq(poolStats(p).nBadRelease, 2);
  ck_assert_int_eq(poolStats(q).nInUse, 1);               /* untouched */
  ck_assert_int_eq(depot_pool_release(q, &m), SQLITE_OK);
  poolDone(q);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_lease_scope_releases){
  depot_pool *p = poolNew("pool_scope", 1, 0);
  {
    DEPOT_LEASE_SCOPE(l);
    ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "scope", &l,
                                        0), SQLITE_OK);
    ck_assert_int_eq(poolStats(p).nInUse, 1);
  }
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_broken_connection_is_replaced){
  depot_pool *p = poolNew("pool_broken", 1, 0);
  depot_lease l;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "a", &l, 0),
                   SQLITE_OK);
  th_exec(l.db, "CREATE TEMP TABLE mine(x)");
  ck_assert_int_eq(depot_lease_mark_broken(&l), SQLITE_OK);
  depot_lease_release(&l);
  ck_assert_int_eq(poolStats(p).nBroken, 1);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "b", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM temp.sqlite_schema"
                                " WHERE name='mine'"), 0);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t"), 10);
  /* Inside a transaction at release: closed as well. */
  th_exec(l.db, "BEGIN; INSERT INTO t(v) VALUES('x')");
  depot_lease_release(&l);
  ck_assert_int_eq(poolStats(p).nBroken, 2);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "c", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t"), 10);
  depot_lease_release(&l);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_leak_detector_counts_with_tag){
  depot_pool *p = poolNew("pool_leak", 1, 50);
  depot_lease l;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "handler.c:42",
                                      &l, 0), SQLITE_OK);
  sleepMs(80);
  ck_assert_int_eq(poolStats(p).nLeaked, 1);
  ck_assert_int_eq(poolStats(p).nLeaked, 1);             /* counted once */
  ck_assert(logHas("handler.c:42"));
  depot_lease_release(&l);
  ck_assert_int_eq(poolStats(p).nLeaked, 1);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_ready_fails_fast_with_stage){
  depot_pool *p = poolNew("pool_ready", 1, 0);
  depot_pool *q = 0;
  depot_pool_options o;
  depot_lease l;
  char *zWhy = 0;
  sqlite3_int64 t0;
  ck_assert_int_eq(depot_pool_ready(p, 100, &zWhy), SQLITE_OK);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "hog", &l, 0),
                   SQLITE_OK);
  t0 = nowMs();
  ck_assert_int_eq(depot_pool_ready(p, 100, &zWhy), SQLITE_BUSY);
  ck_assert_msg(nowMs()-t0 < 100+(th_under_tsan() ? 300 : 100), "slow");
  ck_assert_msg(strncmp(zWhy, "pool_acquire: ", 14)==0, "%s", zWhy);
  sqlite3_free(zWhy);
  depot_lease_release(&l);
  memset(&o, 0, sizeof(o));
  o.zInitSql = "SELECT no_such_function()";
  zWhy = 0;
  ck_assert_int_ne(depot_pool_open(":memory:", &o, &q, &zWhy), SQLITE_OK);
  ck_assert_ptr_null(q);
  ck_assert_msg(strncmp(zWhy, "init_sql: ", 10)==0, "%s", zWhy);
  sqlite3_free(zWhy);
  zWhy = 0;
  ck_assert_int_ne(depot_pool_open("/nonexistent/dir/x.db", 0, &q, &zWhy),
                   SQLITE_OK);
  ck_assert_msg(strncmp(zWhy, "open: ", 6)==0, "%s", zWhy);
  sqlite3_free(zWhy);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_status_listing_names_pools){
  depot_pool *p = poolNew("pool_sql", 2, 0);
  depot_lease l;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "a", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT size*100+readers*10+in_use"
                   " FROM depot_pool_status('pool_sql')"), 321);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM depot_pool_status"
                   " WHERE name='pool_sql'"), 1);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM"
                   " depot_pool_status('nope')"), 0);
  depot_lease_release(&l);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_init_sql_and_read_only_readers){
  char *zDb = poolFile("pool_opts");
  depot_pool_options o = poolOptions("pool_opts", 1, 0);
  depot_pool *p = poolOpenOpt(zDb, &o);
  depot_lease w, r;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "w", &w, 0),
                   SQLITE_OK);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r", &r, 0),
                   SQLITE_OK);
  ck_assert_ptr_ne(w.db, r.db);
  /* init SQL and xInit ran on both */
  ck_assert_int_eq(th_int(w.db, "PRAGMA busy_timeout"), 5000);
  ck_assert_int_eq(th_int(r.db, "PRAGMA busy_timeout"), 5000);
  ck_assert_int_eq(th_int(r.db, "SELECT sleep_ms(1)"), 1);
  /* the reader is read-only, the writer is not */
  ck_assert_int_eq(sqlite3_db_readonly(r.db, "main"), 1);
  ck_assert_int_eq(sqlite3_db_readonly(w.db, "main"), 0);
  ck_assert_int_eq(th_try(r.db, "INSERT INTO t(v) VALUES('no')", 0) & 0xff,
                   SQLITE_READONLY);
  depot_lease_release(&r);
  depot_lease_release(&w);
  poolDone(p);
  /* bReadWriteReaders: read-write readers */
  o = poolOptions("pool_opts2", 1, 0);
  o.bReadWriteReaders = 1;
  p = poolOpenOpt(zDb, &o);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r", &r, 0),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_db_readonly(r.db, "main"), 0);
  depot_lease_release(&r);
  poolDone(p);
  sqlite3_free(zDb);
}
END_TEST

START_TEST(test_pool_reads_use_the_writer_without_readers){
  depot_pool *p = poolNew("pool_noreaders", -1, 0);
  depot_pool *m = 0;
  depot_lease r, w;
  char *zErr = 0;
  ck_assert_int_eq(poolStats(p).nSize, 1);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r", &r, 0),
                   SQLITE_OK);
  ck_assert_int_eq(r.iSlot, 0);                 /* the writer's slot */
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "w", &w,
                                      &zErr), SQLITE_BUSY);
  sqlite3_free(zErr);
  depot_lease_release(&r);
  poolDone(p);
  ck_assert_int_eq(depot_pool_open(":memory:", 0, &m, 0), SQLITE_OK);
  ck_assert_int_eq(poolStats(m).nReader, 0);    /* would share nothing */
  poolDone(m);
}
END_TEST

typedef struct Handoff Handoff;
struct Handoff { depot_lease l; int rc; };

static void *releaseElsewhere(void *pArg){
  Handoff *h = (Handoff*)pArg;
  h->rc = depot_lease_release(&h->l);
  return 0;
}

START_TEST(test_pool_release_from_another_thread){
  depot_pool *p = poolNew("pool_xthread", 1, 0);
  Handoff h;
  pthread_t th;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "handed", &h.l,
                                      0), SQLITE_OK);
  th_exec(h.l.db, "INSERT INTO t(v) VALUES('mine')");
  pthread_create(&th, 0, releaseElsewhere, &h);
  pthread_join(th, 0);
  ck_assert_int_eq(h.rc, SQLITE_OK);
  ck_assert_ptr_null(h.l.pPool);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  ck_assert_int_eq(poolStats(p).nBadRelease, 0);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "next", &h.l,
                                      0), SQLITE_OK);
  ck_assert_int_eq(th_int(h.l.db, "SELECT count(*) FROM t"), 11);
  depot_lease_release(&h.l);
  poolDone(p);
}
END_TEST

/* A caller blocked in acquire, handed the slot by a release. */
typedef struct Waiter Waiter;
struct Waiter {
  depot_pool *p;
  sqlite3_stmt *pOld;       /* a statement the previous holder left busy */
  int rc, bBusy, nTemp;
};

static void *waitForWriter(void *pArg){
  Waiter *w = (Waiter*)pArg;
  depot_lease l;
  w->rc = depot_pool_acquire(w->p, DEPOT_LEASE_WRITE, 5000, "waiter", &l, 0);
  if( w->rc==SQLITE_OK ){
    w->nTemp = (int)th_int(l.db, "SELECT count(*) FROM temp.sqlite_schema"
                                 " WHERE name='mine'");
    depot_lease_release(&l);
  }
  return 0;
}

static void *waitForReader(void *pArg){
  Waiter *w = (Waiter*)pArg;
  depot_lease l;
  w->rc = depot_pool_acquire(w->p, DEPOT_LEASE_READ, 5000, "waiter", &l, 0);
  if( w->rc==SQLITE_OK ){
    w->bBusy = sqlite3_stmt_busy(w->pOld);    /* the same connection */
    depot_lease_release(&l);
  }
  return 0;
}

/* Release resets the slot before the permit goes back: a waiter it wakes
** finds the previous holder's statements reset, and a broken connection
** already closed and replaced. */
START_TEST(test_pool_release_resets_before_waiter_gets_slot){
  depot_pool *p = poolNew("pool_reset", 1, 0);
  depot_lease l;
  Waiter w;
  pthread_t th;
  memset(&w, 0, sizeof(w));
  w.p = p;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "a", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_prepare_v2(l.db, "SELECT k FROM t", -1, &w.pOld,
                                      0), SQLITE_OK);
  ck_assert_int_eq(sqlite3_step(w.pOld), SQLITE_ROW);
  ck_assert(sqlite3_stmt_busy(w.pOld));
  pthread_create(&th, 0, waitForReader, &w);
  while( poolStats(p).nWaiting==0 ) sleepMs(1);
  depot_lease_release(&l);
  pthread_join(th, 0);
  ck_assert_int_eq(w.rc, SQLITE_OK);
  ck_assert_int_eq(w.bBusy, 0);
  sqlite3_finalize(w.pOld);
  /* a broken writer: the waiter gets a fresh connection */
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "b", &l, 0),
                   SQLITE_OK);
  th_exec(l.db, "CREATE TEMP TABLE mine(x)");
  w.nTemp = -1;
  pthread_create(&th, 0, waitForWriter, &w);
  while( poolStats(p).nWaiting==0 ) sleepMs(1);
  depot_lease_mark_broken(&l);
  depot_lease_release(&l);
  pthread_join(th, 0);
  ck_assert_int_eq(w.rc, SQLITE_OK);
  ck_assert_int_eq(w.nTemp, 0);
  poolDone(p);
}
END_TEST

/* A connection whose last statement failed with SQLITE_IOERR,
** SQLITE_CORRUPT or SQLITE_NOTADB is closed at release and replaced. */
START_TEST(test_pool_failed_connection_is_replaced){
  static const int aCode[] = { SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_NOTADB };
  static const char *azWhy[] = { "SQLITE_IOERR", "SQLITE_CORRUPT",
                                 "SQLITE_NOTADB" };
  depot_pool *p = poolNew("pool_failed", 1, 0);
  depot_lease l;
  int i;
  for(i=0; i<3; i++){
    char *z = sqlite3_mprintf("SELECT fail_with(%d)", aCode[i]);
    ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "f", &l, 0),
                     SQLITE_OK);
    th_exec(l.db, "CREATE TEMP TABLE mine(x)");
    ck_assert_int_eq(th_try(l.db, z, 0), aCode[i]);
    depot_lease_release(&l);
    ck_assert_int_eq(poolStats(p).nBroken, i+1);
    ck_assert_msg(logHas(azWhy[i]), "log lacks %s", azWhy[i]);
    ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "g", &l, 0),
                     SQLITE_OK);
    ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM temp.sqlite_schema"
                                  " WHERE name='mine'"), 0);
    ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t"), 10);
    depot_lease_release(&l);
    sqlite3_free(z);
  }
  /* another error (a constraint) keeps the connection */
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "h", &l, 0),
                   SQLITE_OK);
  ck_assert_int_ne(th_try(l.db, "INSERT INTO t(k) VALUES(1)", 0), SQLITE_OK);
  depot_lease_release(&l);
  ck_assert_int_eq(poolStats(p).nBroken, 3);
  poolDone(p);
}
END_TEST

static void *holdInTransactionAndExit(void *pArg){
  depot_pool *p = (depot_pool*)pArg;
  depot_lease l;
  if( depot_pool_acquire(p, DEPOT_LEASE_WRITE, 1000, "tx", &l, 0) ){
    return (void*)1;
  }
  if( sqlite3_exec(l.db, "BEGIN; INSERT INTO t(v) VALUES('lost')", 0, 0, 0) ){
    return (void*)2;
  }
  return 0;                      /* exits inside the transaction */
}

START_TEST(test_pool_thread_exit_in_transaction_rolls_back){
  depot_pool *p = poolNew("pool_txexit", 1, 0);
  depot_lease l;
  pthread_t th;
  void *r;
  pthread_create(&th, 0, holdInTransactionAndExit, p);
  pthread_join(th, &r);
  ck_assert_ptr_null(r);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  ck_assert_int_eq(poolStats(p).nBroken, 1);
  ck_assert(logHas("inside a transaction"));
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "x", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t WHERE v='lost'"), 0);
  depot_lease_release(&l);
  poolDone(p);
}
END_TEST

START_TEST(test_pool_close_reports_held_leases){
  char *zDb = poolFile("pool_close");
  depot_pool_options o = poolOptions("pool_close", 1, 0);
  depot_pool *p;
  depot_lease l, m;
  char *zErr = 0;
  sqlite3_int64 t0;
  o.iCloseMs = 100;
  p = poolOpenOpt(zDb, &o);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "handler.c:7",
                                      &l, 0), SQLITE_OK);
  t0 = nowMs();
  ck_assert_int_eq(depot_pool_close(p, &zErr), SQLITE_BUSY);
  ck_assert_msg(nowMs()-t0 >= 90, "close waited %lld ms", nowMs()-t0);
  ck_assert_msg(strstr(zErr, "1 lease(s) still held")
                && strstr(zErr, "read \"handler.c:7\""), "%s", zErr);
  sqlite3_free(zErr);
  zErr = 0;
  /* still refusing acquires, still valid */
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "late", &m,
                                      &zErr), SQLITE_MISUSE);
  sqlite3_free(zErr);
  ck_assert_int_eq(depot_lease_release(&l), SQLITE_OK);
  ck_assert_int_eq(depot_pool_close(p, 0), SQLITE_OK);
  sqlite3_free(zDb);
}
END_TEST

/* Readiness of a pool whose reader must reopen: "init_sql: " when the
** connection's init fails, "open: " when the file cannot be opened. */
START_TEST(test_pool_ready_names_open_and_init_sql){
  char *zDb = poolFile("pool_ready2");
  char *zAway = sqlite3_mprintf("%s.away", zDb);
  depot_pool_options o = poolOptions("pool_ready2", 1, 0);
  depot_pool *p = poolOpenOpt(zDb, &o);
  depot_lease l;
  char *zWhy = 0;
  /* the reader is broken, so the probe reopens it */
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r", &l, 0),
                   SQLITE_OK);
  depot_lease_mark_broken(&l);
  depot_lease_release(&l);
  __atomic_store_n(&gInitFail, 1, __ATOMIC_RELEASE);
  ck_assert_int_ne(depot_pool_ready(p, 100, &zWhy), SQLITE_OK);
  __atomic_store_n(&gInitFail, 0, __ATOMIC_RELEASE);
  ck_assert_msg(zWhy && strncmp(zWhy, "init_sql: ", 10)==0, "%s", zWhy);
  sqlite3_free(zWhy);
  zWhy = 0;
  ck_assert_int_eq(rename(zDb, zAway), 0);
  ck_assert_int_ne(depot_pool_ready(p, 100, &zWhy), SQLITE_OK);
  ck_assert_msg(zWhy && strncmp(zWhy, "open: ", 6)==0, "%s", zWhy);
  sqlite3_free(zWhy);
  zWhy = 0;
  ck_assert_int_eq(rename(zAway, zDb), 0);
  ck_assert_int_eq(depot_pool_ready(p, 100, &zWhy), SQLITE_OK);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  poolDone(p);
  sqlite3_free(zAway);
  sqlite3_free(zDb);
}
END_TEST

/* A pool on a depot database: the writer commits, the readers (opened
** read-only) see each commit at their next read transaction. */
START_TEST(test_pool_on_depot_database){
  char *zDir = th_tmpdir("pool_depot");
  char *zUri = sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=app", zDir);
  depot_pool_options o = poolOptions("pool_depot", 2, 0);
  depot_pool *p = poolOpenOpt(zUri, &o);
  depot_lease w, r1, r2;
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "w", &w, 0),
                   SQLITE_OK);
  th_exec(w.db, "CREATE TABLE t(k INTEGER PRIMARY KEY, v);"
                "INSERT INTO t(v) VALUES('a'), ('b')");
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r1", &r1, 0),
                   SQLITE_OK);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r2", &r2, 0),
                   SQLITE_OK);
  ck_assert_int_eq(sqlite3_db_readonly(r1.db, "main"), 1);
  ck_assert_int_eq(th_int(r1.db, "SELECT count(*) FROM t"), 2);
  th_exec(w.db, "INSERT INTO t(v) VALUES('c')");
  ck_assert_int_eq(th_int(r1.db, "SELECT count(*) FROM t"), 3);
  ck_assert_int_eq(th_int(r2.db, "SELECT count(*) FROM t"), 3);
  /* a reader inside a read transaction keeps its snapshot */
  th_exec(r2.db, "BEGIN");
  ck_assert_int_eq(th_int(r2.db, "SELECT count(*) FROM t"), 3);
  th_exec(w.db, "INSERT INTO t(v) VALUES('d')");
  ck_assert_int_eq(th_int(r2.db, "SELECT count(*) FROM t"), 3);
  th_exec(r2.db, "COMMIT");
  ck_assert_int_eq(th_int(r2.db, "SELECT count(*) FROM t"), 4);
  depot_lease_release(&r2);
  depot_lease_release(&r1);
  depot_lease_release(&w);
  ck_assert_int_eq(depot_pool_ready(p, 100, 0), SQLITE_OK);
  ck_assert_int_eq(poolStats(p).nBroken, 0);
  poolDone(p);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

/* KV tables through a pool: a file with kv_btree table acct (keys 1..40,
** value 0); readers read-write so they may write KV tables. */
static depot_pool *poolKv(const char *zTag){
  char *zDir = th_tmpdir(zTag);
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  depot_pool_options o = poolOptions(zTag, 3, 0);
  depot_pool *p;
  th_exec(db, "PRAGMA journal_mode=WAL;"
              "CREATE VIRTUAL TABLE acct USING kv_btree;"
              "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c"
              " WHERE i<40) INSERT INTO acct SELECT i, 0 FROM c");
  sqlite3_close(db);
  o.bReadWriteReaders = 1;
  o.zInitSql = 0;                /* no busy timeout: a file lock would show */
  p = poolOpenOpt(zDb, &o);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
  return p;
}

typedef struct KvWriter KvWriter;
struct KvWriter {
  depot_pool *p;
  int eKind;
  int iKey;                      /* first key; 10 keys from it */
  pthread_barrier_t *pBar;
  int rc;
  char zErr[200];
};

/* In one transaction, add 1 to keys iKey..iKey+9, waiting for the other
** writers inside it before the COMMIT. */
static void *kvWriterMain(void *pArg){
  KvWriter *w = (KvWriter*)pArg;
  depot_lease l;
  char *z;
  w->rc = depot_pool_acquire(w->p, w->eKind, 5000, "kv", &l, 0);
  if( w->rc ){
    pthread_barrier_wait(w->pBar);
    return 0;
  }
  z = sqlite3_mprintf("BEGIN; UPDATE acct SET value=value+1 WHERE key>=%d"
                      " AND key<%d", w->iKey, w->iKey+10);
  w->rc = sqlite3_exec(l.db, z, 0, 0, 0);
  sqlite3_free(z);
  pthread_barrier_wait(w->pBar);      /* every transaction is open */
  if( w->rc==SQLITE_OK ) w->rc = sqlite3_exec(l.db, "COMMIT", 0, 0, 0);
  if( w->rc ){
    w->rc = sqlite3_extended_errcode(l.db);
    snprintf(w->zErr, sizeof(w->zErr), "%s", sqlite3_errmsg(l.db));
  }
  if( !sqlite3_get_autocommit(l.db) ) sqlite3_exec(l.db, "ROLLBACK", 0, 0, 0);
  depot_lease_release(&l);
  return 0;
}

/* Run writers of aKey[] (writer lease first, then reader leases) at once;
** their results in aRc[]. */
static void kvRun(depot_pool *p, int n, const int *aKey, int *aRc){
  KvWriter aW[3];
  pthread_t aTh[3];
  pthread_barrier_t bar;
  int i;
  pthread_barrier_init(&bar, 0, n);
  for(i=0; i<n; i++){
    memset(&aW[i], 0, sizeof(aW[i]));
    aW[i].p = p;
    aW[i].eKind = i==0 ? DEPOT_LEASE_WRITE : DEPOT_LEASE_READ;
    aW[i].iKey = aKey[i];
    aW[i].pBar = &bar;
    pthread_create(&aTh[i], 0, kvWriterMain, &aW[i]);
  }
  for(i=0; i<n; i++){
    pthread_join(aTh[i], 0);
    ck_assert_msg(aW[i].rc==SQLITE_OK || aW[i].rc==SQLITE_BUSY_SNAPSHOT,
                  "writer %d: rc=%d %s", i, aW[i].rc, aW[i].zErr);
    aRc[i] = aW[i].rc;
  }
  pthread_barrier_destroy(&bar);
}

/* The writer lease and two reader leases write disjoint keys of a KV
** table in transactions open at the same time: all commit. */
START_TEST(test_pool_kv_leases_write_concurrently){
  depot_pool *p = poolKv("pool_kv");
  static const int aKey[3] = { 1, 11, 21 };
  int aRc[3], i;
  depot_lease l;
  for(i=0; i<th_scaled(10, 5); i++){
    kvRun(p, 3, aKey, aRc);
    ck_assert_int_eq(aRc[0], SQLITE_OK);
    ck_assert_int_eq(aRc[1], SQLITE_OK);
    ck_assert_int_eq(aRc[2], SQLITE_OK);
  }
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT sum(value) FROM acct"),
                   30*th_scaled(10, 5));
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM acct WHERE key>30"
                                " AND value<>0"), 0);
  depot_lease_release(&l);
  ck_assert_int_eq(poolStats(p).nBroken, 0);
  poolDone(p);
}
END_TEST

/* Two leases writing the same keys in overlapping transactions: one
** commits, the other gets SQLITE_BUSY_SNAPSHOT and its lease goes back
** to the pool as usual. */
START_TEST(test_pool_kv_conflicting_keys_busy_snapshot){
  depot_pool *p = poolKv("pool_kvconflict");
  static const int aKey[2] = { 5, 5 };
  int aRc[2];
  depot_lease l;
  kvRun(p, 2, aKey, aRc);
  ck_assert_msg((aRc[0]==SQLITE_OK) != (aRc[1]==SQLITE_OK),
                "rc %d and %d", aRc[0], aRc[1]);
  ck_assert(aRc[0]==SQLITE_BUSY_SNAPSHOT || aRc[1]==SQLITE_BUSY_SNAPSHOT);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 0, "r", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT sum(value) FROM acct"), 10);
  depot_lease_release(&l);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  ck_assert_int_eq(poolStats(p).nBroken, 0);
  poolDone(p);
}
END_TEST

/* ------------------------------------------------------------- async --- */

/* Wait (poll on the fd) for one completion, at most ms. */
static depot_async_completion *waitOne(depot_async *a, int ms){
  depot_async_completion *c = 0;
  sqlite3_int64 tEnd = nowMs() + ms;
  while( depot_async_poll(a, &c, 1)==0 ){
    struct pollfd pfd;
    int left = (int)(tEnd - nowMs());
    if( left<=0 ) return 0;
    pfd.fd = depot_async_fd(a);
    pfd.events = POLLIN;
    poll(&pfd, 1, left);
  }
  return c;
}

static depot_async *asyncNew(depot_pool *p, int bInline){
  depot_async_options o;
  depot_async *a = 0;
  char *zErr = 0;
  memset(&o, 0, sizeof(o));
  o.bInline = bInline;
  o.iGraceMs = 500;
  ck_assert_int_eq(depot_async_open(p, 2, &o, &a, &zErr), SQLITE_OK);
  return a;
}

static void submit(depot_async *a, const char *zSql, int bWrite, int ms,
                   sqlite3_uint64 iTag, depot_tx tx){
  depot_async_stmt s;
  char *zErr = 0;
  memset(&s, 0, sizeof(s));
  s.zSql = zSql;
  s.bWrite = bWrite;
  s.iTimeoutMs = ms;
  s.iTag = iTag;
  s.tx = tx;
  ck_assert_msg(depot_async_submit(a, &s, &zErr)==SQLITE_OK, "%s", zErr);
}

/* A write whose slow function outlasts its timeout: the interrupt comes
** while the function runs, and the INSERT after it checks for none, so
** the statement completes late. */
#define LATE_SQL(ms) "INSERT INTO t(v) VALUES(sleep_ms(" #ms "))"

START_TEST(test_async_late_completion_poisons_connection){
  depot_pool *p = poolNew("async_late", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  submit(a, LATE_SQL(400), 1, 50, 7, 0);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(c->iTag, 7);
  ck_assert(c->bTimeout && c->bRetryable);
  depot_async_completion_free(c);
  sleepMs(600);
  ck_assert_int_eq(poolStats(p).nBroken, 1);
  ck_assert(logHas("poisoned"));
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

START_TEST(test_async_double_completion_refused){
  depot_pool *p = poolNew("async_dbl", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  submit(a, LATE_SQL(300), 1, 30, 9, 0);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  depot_async_completion_free(c);
  sleepMs(500);
  ck_assert_ptr_null(waitOne(a, 10));          /* exactly one completion */
  ck_assert(logHas("second completion of tag 9 refused"));
  ck_assert_int_eq(poolStats(p).nPendingAsync, 0);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

START_TEST(test_async_shutdown_rolls_back_held_transaction){
  depot_pool *p = poolNew("async_exit", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  depot_lease l;
  depot_tx tx;
  ck_assert_int_eq(depot_async_tx_begin(a, 1000, 1, &tx, 0), SQLITE_OK);
  submit(a, "INSERT INTO t(v) VALUES('held')", 1, 1000, 2, tx);
  c = waitOne(a, 2000); ck_assert_int_eq(c->rc, SQLITE_OK);
  depot_async_completion_free(c);
  c = waitOne(a, 2000); ck_assert_int_eq(c->rc, SQLITE_OK);
  ck_assert_int_eq(c->nChange, 1);
  depot_async_completion_free(c);
  ck_assert_int_eq(poolStats(p).nHolding, 1);
  depot_async_free(a);                         /* no COMMIT */
  ck_assert_int_eq(poolStats(p).nHolding, 0);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "x", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t"), 10);
  depot_lease_release(&l);
  poolDone(p);
}
END_TEST

START_TEST(test_async_timeout_in_transaction_rolls_back){
  depot_pool *p = poolNew("async_txto", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  depot_lease l;
  depot_tx tx;
  int i;
  ck_assert_int_eq(depot_async_tx_begin(a, 1000, 1, &tx, 0), SQLITE_OK);
  submit(a, "INSERT INTO t(v) VALUES('x')", 1, 1000, 2, tx);
  submit(a, "SELECT sleep_ms(300)", 1, 50, 3, tx);
  submit(a, "INSERT INTO t(v) VALUES('y')", 1, 1000, 4, tx);
  ck_assert_int_eq(depot_async_tx_end(a, tx, 1, 1000, 5, 0), SQLITE_OK);
  for(i=1; i<=5; i++){
    c = waitOne(a, 3000);
    ck_assert_ptr_nonnull(c);
    switch( (int)c->iTag ){
      case 1: case 2: ck_assert_int_eq(c->rc, SQLITE_OK); break;
      case 3: ck_assert(c->bTimeout); break;
      default: ck_assert_int_eq(c->rc, SQLITE_ABORT); break;
    }
    depot_async_completion_free(c);
  }
  sleepMs(100);
  ck_assert_int_eq(poolStats(p).nHolding, 0);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 0, "x", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t"), 10);
  depot_lease_release(&l);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

typedef struct TxCb TxCb;
struct TxCb { depot_async *a; depot_pool *p; int rcSubmit, rcAcquire, n; };

static void txCallback(void *pArg, depot_async_completion *c){
  TxCb *x = (TxCb*)pArg;
  depot_async_stmt s;
  depot_lease l;
  x->n++;
  if( c->iTag!=1 ) return;           /* the BEGIN's completion */
  memset(&s, 0, sizeof(s));
  s.zSql = "SELECT 1";
  x->rcSubmit = depot_async_submit(x->a, &s, 0);
  x->rcAcquire = depot_pool_acquire(x->p, DEPOT_LEASE_READ, 0, "cb", &l, 0);
  s.tx = c->tx;                       /* its own token is fine */
  ck_assert_int_eq(depot_async_submit(x->a, &s, 0), SQLITE_OK);
}

START_TEST(test_async_pool_call_inside_tx_callback_refused){
  depot_pool *p = poolNew("async_txcb", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  TxCb x;
  depot_tx tx;
  sqlite3_int64 tEnd = nowMs() + 3000;
  memset(&x, 0, sizeof(x));
  x.a = a;
  x.p = p;
  ck_assert_int_eq(depot_async_tx_begin(a, 1000, 1, &tx, 0), SQLITE_OK);
  while( x.n<2 && nowMs()<tEnd ){
    depot_async_dispatch(a, txCallback, &x, 8);
    sleepMs(5);
  }
  ck_assert_int_eq(x.n, 2);
  ck_assert_int_eq(x.rcSubmit, SQLITE_MISUSE);
  ck_assert_int_eq(x.rcAcquire, SQLITE_MISUSE);
  ck_assert_int_eq(depot_async_tx_end(a, tx, 0, 1000, 3, 0), SQLITE_OK);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  depot_async_completion_free(c);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* The rows of a script run through a runner, as text. */
static char *runScript(depot_pool *p, int bInline){
  static const char *azSql[] = {
    "SELECT k, v FROM t WHERE k<=?1 ORDER BY k",
    "INSERT INTO t(v) VALUES(?2)",
    "SELECT count(*), max(v) FROM t",
    "SELECT no_such_column FROM t",
  };
  depot_async *a = asyncNew(p, bInline);
  sqlite3_str *pOut = sqlite3_str_new(0);
  depot_value av[2];
  int i, j;
  memset(av, 0, sizeof(av));
  av[0].eType = SQLITE_INTEGER; av[0].i = 3;
  av[1].eType = SQLITE_TEXT; av[1].p = "new"; av[1].n = -1;
  for(i=0; i<4; i++){
    depot_async_stmt s;
    depot_async_completion *c;
    memset(&s, 0, sizeof(s));
    s.zSql = azSql[i];
    s.nParam = i==1 ? 2 : i==0 ? 1 : 0;
    s.aParam = av;
    s.bWrite = i==1;
    s.iTimeoutMs = 2000;
    s.iTag = i;
    ck_assert_int_eq(depot_async_submit(a, &s, 0), SQLITE_OK);
    c = waitOne(a, 3000);
    ck_assert_ptr_nonnull(c);
    sqlite3_str_appendf(pOut, "[%llu rc=%d n=%lld %s]", c->iTag, c->rc,
                        c->nChange, c->zErr ? c->zErr : "");
    for(j=0; j<c->nRow*c->nCol; j++){
      sqlite3_str_appendf(pOut, " %s", sqlite3_value_text(c->aValue[j]));
    }
    depot_async_completion_free(c);
  }
  depot_async_free(a);
  return sqlite3_str_finish(pOut);
}

START_TEST(test_async_inline_matches_async){
  depot_pool *p = poolNew("async_inl", 2, 0);
  depot_pool *q = poolNew("async_inl2", 2, 0);
  char *zA = runScript(p, 0);
  char *zB = runScript(q, 1);
  ck_assert_str_eq(zA, zB);
  ck_assert_msg(strstr(zA, " 1 v1 2 v2 3 v3")!=0, "%s", zA);
  ck_assert_msg(strstr(zA, " 11 v9")!=0, "%s", zA);
  sqlite3_free(zA);
  sqlite3_free(zB);
  poolDone(q);
  poolDone(p);
}
END_TEST

/* A count to 10^9: long, and stopped at once by an interrupt. */
#define LONG_SQL "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1" \
                 " FROM c WHERE i<1000000000) SELECT count(*) FROM c"

/* The completion descriptor is an eventfd, readable exactly while
** completions wait in the queue. */
START_TEST(test_async_fd_is_eventfd_readable_while_completions_wait){
  depot_pool *p = poolNew("async_fd", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c = 0;
  struct pollfd pfd;
  char zPath[64], zLink[128];
  ssize_t n;
  snprintf(zPath, sizeof(zPath), "/proc/self/fd/%d", depot_async_fd(a));
  n = readlink(zPath, zLink, sizeof(zLink)-1);
  ck_assert_int_gt(n, 0);
  zLink[n] = 0;
  ck_assert_msg(strstr(zLink, "eventfd")!=0, "%s", zLink);
  pfd.fd = depot_async_fd(a);
  pfd.events = POLLIN;
  ck_assert_int_eq(poll(&pfd, 1, 0), 0);
  submit(a, "SELECT 1", 0, 1000, 1, 0);
  submit(a, "SELECT 2", 0, 1000, 2, 0);
  ck_assert_int_eq(poll(&pfd, 1, 2000), 1);
  while( poolStats(p).nPendingAsync>0 ) sleepMs(1);
  ck_assert_int_eq(depot_async_poll(a, &c, 1), 1);
  depot_async_completion_free(c);
  ck_assert_int_eq(poll(&pfd, 1, 0), 1);          /* one still waits */
  ck_assert_int_eq(depot_async_poll(a, &c, 1), 1);
  depot_async_completion_free(c);
  ck_assert_int_eq(poll(&pfd, 1, 0), 0);          /* drained */
  ck_assert_int_eq(depot_async_poll(a, &c, 1), 0);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* A timed-out statement is interrupted: its completion says timeout at
** once, the statement stops, and its connection stays in the pool. */
START_TEST(test_async_timeout_interrupts_statement){
  depot_pool *p = poolNew("async_intr", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  sqlite3_int64 t0 = nowMs();
  int iSlack = th_under_tsan() ? 1500 : 500;
  submit(a, LONG_SQL, 0, 50, 1, 0);
  c = waitOne(a, 5000);
  ck_assert_ptr_nonnull(c);
  ck_assert(c->bTimeout && c->bRetryable);
  ck_assert_int_eq(c->rc, SQLITE_INTERRUPT);
  ck_assert_msg(nowMs()-t0 < 50+iSlack, "timeout after %lld ms", nowMs()-t0);
  depot_async_completion_free(c);
  /* the reader is free again soon: the statement stopped */
  submit(a, "SELECT count(*) FROM t", 0, 2000, 2, 0);
  c = waitOne(a, 3000);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(c->rc, SQLITE_OK);
  ck_assert_int_eq(sqlite3_value_int(c->aValue[0]), 10);
  depot_async_completion_free(c);
  ck_assert_msg(nowMs()-t0 < 50+2*iSlack, "took %lld ms", nowMs()-t0);
  ck_assert_int_eq(poolStats(p).nBroken, 0);
  ck_assert(logHas("stopped after its timeout"));
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* Statements bound to a token run in submit order on the transaction's
** writer, and its COMMIT makes them visible. */
START_TEST(test_async_transaction_runs_in_order_and_commits){
  depot_pool *p = poolNew("async_txok", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  depot_lease l;
  depot_tx tx;
  int i;
  ck_assert_int_eq(depot_async_tx_begin(a, 1000, 1, &tx, 0), SQLITE_OK);
  ck_assert(tx!=0);
  submit(a, "INSERT INTO t(k, v) VALUES(100, 'a')", 1, 1000, 2, tx);
  submit(a, "UPDATE t SET v=v||'b' WHERE k=100", 1, 1000, 3, tx);
  submit(a, "SELECT v FROM t WHERE k=100", 1, 1000, 4, tx);
  ck_assert_int_eq(depot_async_tx_end(a, tx, 1, 1000, 5, 0), SQLITE_OK);
  for(i=1; i<=5; i++){
    c = waitOne(a, 3000);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->iTag, i);                 /* in order */
    ck_assert_msg(c->rc==SQLITE_OK, "tag %d: %s", i, c->zErr);
    ck_assert(c->tx==tx);
    if( i==4 ) ck_assert_str_eq((const char*)sqlite3_value_text(c->aValue[0]),
                                "ab");
    depot_async_completion_free(c);
  }
  /* ended: the token is refused now */
  ck_assert_int_eq(depot_async_tx_end(a, tx, 1, 1000, 6, 0), SQLITE_MISUSE);
  while( poolStats(p).nHolding>0 ) sleepMs(1);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 1000, "r", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t WHERE v='ab'"), 1);
  depot_lease_release(&l);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* holding and pending_async, in the struct and in depot_pool_status. */
START_TEST(test_async_status_shows_holding_and_pending){
  depot_pool *p = poolNew("async_gauge", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  depot_lease l;
  depot_tx tx;
  ck_assert_int_eq(depot_async_tx_begin(a, 1000, 1, &tx, 0), SQLITE_OK);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(c->rc, SQLITE_OK);
  depot_async_completion_free(c);
  submit(a, "SELECT sleep_ms(100)", 0, 2000, 2, 0);
  ck_assert_int_eq(poolStats(p).nHolding, 1);
  ck_assert_int_eq(poolStats(p).nPendingAsync, 1);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  depot_async_completion_free(c);
  ck_assert_int_eq(poolStats(p).nPendingAsync, 0);
  /* the only reader is ours: a read submitted now waits for it */
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 2000, "r", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT holding*10+pending_async"
                   " FROM depot_pool_status('async_gauge')"), 10);
  submit(a, "SELECT 1", 0, 2000, 3, 0);
  ck_assert_int_eq(th_int(l.db, "SELECT holding*10+pending_async"
                   " FROM depot_pool_status('async_gauge')"), 11);
  depot_lease_release(&l);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(c->rc, SQLITE_OK);
  depot_async_completion_free(c);
  ck_assert_int_eq(depot_async_tx_end(a, tx, 0, 1000, 4, 0), SQLITE_OK);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  depot_async_completion_free(c);
  while( poolStats(p).nHolding>0 ) sleepMs(1);
  ck_assert_int_eq(poolStats(p).nPendingAsync, 0);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* Shutdown drains: work in flight finishes within the grace, later
** submits are refused, and with bClosePool the pool closes after it. */
START_TEST(test_async_shutdown_drains_then_closes_pool){
  depot_pool *p = poolNew("async_drain", 2, 0);
  depot_async_options o;
  depot_async *a = 0;
  depot_async_completion *ac[8];
  depot_async_stmt s;
  char *zErr = 0;
  int i, n;
  memset(&o, 0, sizeof(o));
  o.iGraceMs = 5000;
  o.bClosePool = 1;
  ck_assert_int_eq(depot_async_open(p, 2, &o, &a, 0), SQLITE_OK);
  for(i=0; i<4; i++) submit(a, "SELECT sleep_ms(50)", 0, 5000, i, 0);
  depot_async_shutdown(a);
  n = depot_async_poll(a, ac, 8);
  ck_assert_int_eq(n, 4);
  for(i=0; i<n; i++){
    ck_assert_int_eq(ac[i]->rc, SQLITE_OK);
    depot_async_completion_free(ac[i]);
  }
  memset(&s, 0, sizeof(s));
  s.zSql = "SELECT 1";
  ck_assert_int_eq(depot_async_submit(a, &s, &zErr), SQLITE_MISUSE);
  ck_assert_msg(strstr(zErr, "shutting down")!=0, "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(depot_async_free(a), SQLITE_OK);   /* closes p */
}
END_TEST

/* Past the grace, running work is interrupted and waiting work aborted;
** every submitted statement has its completion. */
START_TEST(test_async_shutdown_interrupts_after_grace){
  depot_pool *p = poolNew("async_grace", 1, 0);
  depot_async_options o;
  depot_async *a = 0;
  depot_async_completion *ac[8];
  sqlite3_int64 t0;
  int i, n, nInt = 0, nAbort = 0;
  memset(&o, 0, sizeof(o));
  o.iGraceMs = 100;
  ck_assert_int_eq(depot_async_open(p, 1, &o, &a, 0), SQLITE_OK);
  submit(a, LONG_SQL, 0, 60000, 1, 0);
  submit(a, "SELECT 1", 0, 60000, 2, 0);        /* queued behind it */
  sleepMs(50);
  t0 = nowMs();
  depot_async_shutdown(a);
  ck_assert_msg(nowMs()-t0 < 100+(th_under_tsan() ? 3000 : 1000),
                "shutdown took %lld ms", nowMs()-t0);
  n = depot_async_poll(a, ac, 8);
  ck_assert_int_eq(n, 2);
  for(i=0; i<n; i++){
    if( ac[i]->rc==SQLITE_INTERRUPT ) nInt++;
    if( ac[i]->rc==SQLITE_ABORT ) nAbort++;
    depot_async_completion_free(ac[i]);
  }
  ck_assert_int_eq(nInt, 1);
  ck_assert_int_eq(nAbort, 1);
  ck_assert_int_eq(poolStats(p).nInUse, 0);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* Recipes: the same rows as SQL submits, the statement prepared once per
** connection and kept there, an error of its SQL in the completion, and
** a recipe freed while its submits wait. */
START_TEST(test_async_recipe_prepared_once_per_connection){
  depot_pool *p = poolNew("async_recipe", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_recipe *r = 0, *bad = 0;
  depot_async_completion *c;
  depot_async_stmt s;
  depot_value v;
  depot_lease l;
  sqlite3_stmt *pStmt = 0;
  int i, nRun = -1, nKept = 0;
  ck_assert_int_eq(depot_async_recipe_new("SELECT v FROM t WHERE k=?1", &r),
                   SQLITE_OK);
  memset(&s, 0, sizeof(s));
  memset(&v, 0, sizeof(v));
  v.eType = SQLITE_INTEGER;
  s.pRecipe = r;
  s.nParam = 1;
  s.aParam = &v;
  s.iTimeoutMs = 2000;
  for(i=1; i<=5; i++){
    v.i = i;
    s.iTag = i;
    ck_assert_int_eq(depot_async_submit(a, &s, 0), SQLITE_OK);
    c = waitOne(a, 2000);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->rc, SQLITE_OK);
    ck_assert_int_eq(c->nRow, 1);
    ck_assert_str_eq(c->azCol[0], "v");
    ck_assert_int_eq(strcmp((const char*)sqlite3_value_text(c->aValue[0]),
                            i==1 ? "v1" : i==2 ? "v2" : i==3 ? "v3"
                            : i==4 ? "v4" : "v5"), 0);
    depot_async_completion_free(c);
  }
  /* the reader keeps one statement of it, run 5 times */
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_READ, 1000, "r", &l, 0),
                   SQLITE_OK);
  while( (pStmt = sqlite3_next_stmt(l.db, pStmt))!=0 ){
    if( strcmp(sqlite3_sql(pStmt), "SELECT v FROM t WHERE k=?1")==0 ){
      nKept++;
      nRun = sqlite3_stmt_status(pStmt, SQLITE_STMTSTATUS_RUN, 0);
    }
  }
  depot_lease_release(&l);
  ck_assert_int_eq(nKept, 1);
  ck_assert_int_eq(nRun, 5);
  /* both forms set: refused */
  s.zSql = "SELECT 1";
  ck_assert_int_eq(depot_async_submit(a, &s, 0), SQLITE_MISUSE);
  s.zSql = 0;
  /* freed right after its submit: the submit keeps it */
  v.i = 7;
  s.iTag = 7;
  ck_assert_int_eq(depot_async_submit(a, &s, 0), SQLITE_OK);
  depot_async_recipe_free(r);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(c->rc, SQLITE_OK);
  ck_assert_str_eq((const char*)sqlite3_value_text(c->aValue[0]), "v7");
  depot_async_completion_free(c);
  /* an error of its SQL comes back in the completion */
  ck_assert_int_eq(depot_async_recipe_new("SELECT nope FROM t", &bad),
                   SQLITE_OK);
  s.pRecipe = bad;
  s.nParam = 0;
  s.iTag = 8;
  ck_assert_int_eq(depot_async_submit(a, &s, 0), SQLITE_OK);
  c = waitOne(a, 2000);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(c->rc, SQLITE_ERROR);
  ck_assert_msg(strstr(c->zErr, "no such column")!=0, "%s", c->zErr);
  depot_async_completion_free(c);
  depot_async_recipe_free(bad);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* The statements of the SQL of one statement found in the connection's
** kept statements, and the runs of the last one. */
static int keptCount(depot_pool *p, int eKind, const char *zSql, int *pnRun){
  depot_lease l;
  sqlite3_stmt *pStmt = 0;
  int n = 0;
  ck_assert_int_eq(depot_pool_acquire(p, eKind, 1000, "k", &l, 0), SQLITE_OK);
  while( (pStmt = sqlite3_next_stmt(l.db, pStmt))!=0 ){
    if( strcmp(sqlite3_sql(pStmt), zSql)==0 ){
      n++;
      if( pnRun ) *pnRun = sqlite3_stmt_status(pStmt, SQLITE_STMTSTATUS_RUN, 0);
    }
  }
  depot_lease_release(&l);
  return n;
}

/* SQL submits reuse the statement kept on the connection, which follows
** a schema change; SQL of two statements runs the first and is not kept. */
START_TEST(test_async_sql_submits_keep_their_statement){
  depot_pool *p = poolNew("async_keep", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  int i, nRun = 0;
  for(i=0; i<3; i++){
    submit(a, "SELECT * FROM t WHERE k=1", 1, 2000, i, 0);
    c = waitOne(a, 2000);
    ck_assert_ptr_nonnull(c);
    ck_assert_int_eq(c->rc, SQLITE_OK);
    ck_assert_int_eq(c->nCol, 2);
    depot_async_completion_free(c);
  }
  ck_assert_int_eq(keptCount(p, DEPOT_LEASE_WRITE, "SELECT * FROM t WHERE k=1",
                             &nRun), 1);
  ck_assert_int_eq(nRun, 3);
  submit(a, "ALTER TABLE t ADD COLUMN w DEFAULT 'x'", 1, 2000, 3, 0);
  c = waitOne(a, 2000);
  ck_assert_int_eq(c->rc, SQLITE_OK);
  depot_async_completion_free(c);
  submit(a, "SELECT * FROM t WHERE k=1", 1, 2000, 4, 0);
  c = waitOne(a, 2000);
  ck_assert_int_eq(c->rc, SQLITE_OK);
  ck_assert_int_eq(c->nCol, 3);                 /* the new column too */
  ck_assert_str_eq(c->azCol[2], "w");
  ck_assert_str_eq((const char*)sqlite3_value_text(c->aValue[2]), "x");
  depot_async_completion_free(c);
  submit(a, "SELECT 41+1; SELECT 2", 1, 2000, 5, 0);
  c = waitOne(a, 2000);
  ck_assert_int_eq(c->rc, SQLITE_OK);
  ck_assert_int_eq(sqlite3_value_int(c->aValue[0]), 42);
  depot_async_completion_free(c);
  ck_assert_int_eq(keptCount(p, DEPOT_LEASE_WRITE, "SELECT 41+1;", 0), 0);
  depot_async_free(a);
  poolDone(p);
}
END_TEST

/* A timeout inside a transaction, in async and in inline mode: the same
** completions (the timeout, then the rest of the transaction aborted),
** and nothing of it committed. */
static char *runTxTimeout(depot_pool *p, int bInline){
  depot_async *a = asyncNew(p, bInline);
  sqlite3_str *pOut = sqlite3_str_new(0);
  depot_async_completion *c;
  depot_lease l;
  depot_tx tx;
  int i;
  ck_assert_int_eq(depot_async_tx_begin(a, 1000, 1, &tx, 0), SQLITE_OK);
  submit(a, "INSERT INTO t(v) VALUES('x')", 1, 1000, 2, tx);
  submit(a, LONG_SQL, 1, 50, 3, tx);
  if( !bInline ) sleepMs(th_under_tsan() ? 1500 : 300); /* the rollback */
  ck_assert_int_eq(depot_async_submit(a, &(depot_async_stmt){
      .zSql = "INSERT INTO t(v) VALUES('y')", .bWrite = 1,
      .iTimeoutMs = 1000, .iTag = 4, .tx = tx }, 0), SQLITE_OK);
  ck_assert_int_eq(depot_async_tx_end(a, tx, 1, 1000, 5, 0), SQLITE_OK);
  for(i=1; i<=5; i++){
    c = waitOne(a, 5000);
    ck_assert_ptr_nonnull(c);
    sqlite3_str_appendf(pOut, "[%llu rc=%d to=%d %s]", c->iTag, c->rc,
                        c->bTimeout, c->bTimeout ? c->zErr : "");
    depot_async_completion_free(c);
  }
  depot_async_free(a);
  ck_assert_int_eq(poolStats(p).nHolding, 0);
  ck_assert_int_eq(depot_pool_acquire(p, DEPOT_LEASE_WRITE, 1000, "x", &l, 0),
                   SQLITE_OK);
  ck_assert_int_eq(th_int(l.db, "SELECT count(*) FROM t"), 10);
  depot_lease_release(&l);
  return sqlite3_str_finish(pOut);
}

START_TEST(test_async_inline_times_out_transaction_alike){
  depot_pool *p = poolNew("async_inltx", 1, 0);
  depot_pool *q = poolNew("async_inltx2", 1, 0);
  char *zA = runTxTimeout(p, 0);
  char *zB = runTxTimeout(q, 1);
  ck_assert_str_eq(zA, zB);
  ck_assert_msg(strstr(zA, "[3 rc=9 to=1 timeout]")!=0, "%s", zA);
  ck_assert_msg(strstr(zA, "[5 rc=4 to=0 ]")!=0, "%s", zA);
  sqlite3_free(zA);
  sqlite3_free(zB);
  poolDone(q);
  poolDone(p);
}
END_TEST

/* The runner on a depot database and on a KV table: a transaction's
** writes commit, the readers' submits see them. */
START_TEST(test_async_on_depot_database_and_kv_table){
  char *zDir = th_tmpdir("async_depot");
  char *zUri = sqlite3_mprintf("file:%s/store.depot?vfs=depot&db=app", zDir);
  depot_pool_options o = poolOptions("async_depot", 2, 0);
  depot_pool *p = poolOpenOpt(zUri, &o);
  depot_pool *q = poolKv("async_kv");
  int k;
  for(k=0; k<2; k++){
    depot_pool *x = k==0 ? p : q;
    depot_async *a = asyncNew(x, 0);
    depot_async_completion *c;
    depot_tx tx;
    int i;
    if( k==0 ){
      submit(a, "CREATE TABLE acct(key INTEGER PRIMARY KEY, value)", 1, 2000,
             0, 0);
      c = waitOne(a, 2000);
      ck_assert_msg(c && c->rc==SQLITE_OK, "%s", c ? c->zErr : "none");
      depot_async_completion_free(c);
    }
    ck_assert_int_eq(depot_async_tx_begin(a, 2000, 1, &tx, 0), SQLITE_OK);
    submit(a, "INSERT OR REPLACE INTO acct VALUES(100, 7)", 1, 2000, 2, tx);
    submit(a, "INSERT OR REPLACE INTO acct VALUES(101, 8)", 1, 2000, 3, tx);
    ck_assert_int_eq(depot_async_tx_end(a, tx, 1, 2000, 4, 0), SQLITE_OK);
    for(i=1; i<=4; i++){
      c = waitOne(a, 3000);
      ck_assert_ptr_nonnull(c);
      ck_assert_msg(c->rc==SQLITE_OK, "pool %d tag %llu: %s", k, c->iTag,
                    c->zErr);
      depot_async_completion_free(c);
    }
    submit(a, "SELECT sum(value) FROM acct WHERE key>=100", 0, 2000, 5, 0);
    c = waitOne(a, 3000);
    ck_assert_ptr_nonnull(c);
    ck_assert_msg(c->rc==SQLITE_OK, "%s", c->zErr);
    ck_assert_int_eq(sqlite3_value_int(c->aValue[0]), 15);
    depot_async_completion_free(c);
    depot_async_free(a);
  }
  poolDone(q);
  poolDone(p);
  sqlite3_free(zUri);
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("pool");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_pool_dropped_lease_returns_slot_and_permit);
  tcase_add_test(tc, test_pool_acquire_times_out_at_pool_acquire);
  tcase_add_test(tc, test_pool_storm_of_cancelled_callers_recovers);
  tcase_add_test(tc, test_pool_double_and_foreign_release_refused);
  tcase_add_test(tc, test_pool_lease_scope_releases);
  tcase_add_test(tc, test_pool_broken_connection_is_replaced);
  tcase_add_test(tc, test_pool_leak_detector_counts_with_tag);
  tcase_add_test(tc, test_pool_ready_fails_fast_with_stage);
  tcase_add_test(tc, test_pool_status_listing_names_pools);
  tcase_add_test(tc, test_async_late_completion_poisons_connection);
  tcase_add_test(tc, test_async_double_completion_refused);
  tcase_add_test(tc, test_async_shutdown_rolls_back_held_transaction);
  tcase_add_test(tc, test_async_timeout_in_transaction_rolls_back);
  tcase_add_test(tc, test_async_pool_call_inside_tx_callback_refused);
  tcase_add_test(tc, test_async_inline_matches_async);
  tcase_add_test(tc, test_pool_init_sql_and_read_only_readers);
  tcase_add_test(tc, test_pool_reads_use_the_writer_without_readers);
  tcase_add_test(tc, test_pool_release_from_another_thread);
  tcase_add_test(tc, test_pool_release_resets_before_waiter_gets_slot);
  tcase_add_test(tc, test_pool_failed_connection_is_replaced);
  tcase_add_test(tc, test_pool_thread_exit_in_transaction_rolls_back);
  tcase_add_test(tc, test_pool_close_reports_held_leases);
  tcase_add_test(tc, test_pool_ready_names_open_and_init_sql);
  tcase_add_test(tc, test_pool_on_depot_database);
  tcase_add_test(tc, test_pool_kv_leases_write_concurrently);
  tcase_add_test(tc, test_pool_kv_conflicting_keys_busy_snapshot);
  tcase_add_test(tc, test_async_fd_is_eventfd_readable_while_completions_wait);
  tcase_add_test(tc, test_async_timeout_interrupts_statement);
  tcase_add_test(tc, test_async_transaction_runs_in_order_and_commits);
  tcase_add_test(tc, test_async_status_shows_holding_and_pending);
  tcase_add_test(tc, test_async_shutdown_drains_then_closes_pool);
  tcase_add_test(tc, test_async_shutdown_interrupts_after_grace);
  tcase_add_test(tc, test_async_recipe_prepared_once_per_connection);
  tcase_add_test(tc, test_async_sql_submits_keep_their_statement);
  tcase_add_test(tc, test_async_inline_times_out_transaction_alike);
  tcase_add_test(tc, test_async_on_depot_database_and_kv_table);
  suite_add_tcase(s, tc);
  return s;
}
