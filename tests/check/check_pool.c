/*
** check_pool.c -- the "pool" suite: the connection pool and the async
** runner of ext/depot_pool.h, one behaviour per test.  Leases: a lease
** dropped by its thread returns its slot and permit, a busy pool times
** out at pool_acquire within the timeout without burning CPU, an 8-slot
** pool recovers from a storm of cancelled callers, double and foreign
** releases are refused, the scope helper releases, a broken connection
** is replaced, the leak detector counts, readiness fails fast naming its
** stage, the depot_pool_status listing.  Async: results on the eventfd
** queue, exactly one completion (a late one refused), a late completion
** poisons its connection, a timeout inside a transaction rolls it back,
** shutdown rolls back a held transaction, pool-level calls inside a
** transaction callback are refused, inline mode matches async mode.
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

static int initConn(void *pArg, sqlite3 *db, int bWriter){
  (void)pArg; (void)bWriter;
  return sqlite3_create_function(db, "sleep_ms", 1, SQLITE_UTF8, 0,
                                 sleepFunc, 0, 0);
}

/* A pool on a fresh WAL database file with table t(k,v) of rows 1..10;
** nReader readers, leak threshold iLeakMs (0: default). */
static depot_pool *poolNew(const char *zTag, int nReader, int iLeakMs){
  char *zDir = th_tmpdir(zTag);
  char *zDb = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = th_open(zDb);
  depot_pool_options o;
  depot_pool *p = 0;
  char *zErr = 0;
  int rc;
  th_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(k INTEGER PRIMARY KEY,"
          " v); WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c"
          " WHERE i<10) INSERT INTO t SELECT i, 'v'||i FROM c");
  sqlite3_close(db);
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
  rc = depot_pool_open(zDb, &o, &p, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "depot_pool_open: %s", zErr);
  sqlite3_free(zDb);
  sqlite3_free(zDir);
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
  ck_assert_msg(strstr(zErr, "in use 1/1 writers")!=0, "%s", zErr);
  ck_assert_msg(dt>=190 && dt<200+(th_under_tsan() ? 300 : 100),
                "waited %lld ms", dt);
  ck_assert_msg(cpuUs < 20000, "waiting used %lld us of CPU", cpuUs);
  ck_assert_int_eq(poolStats(p).nTimeout, 1);
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

START_TEST(test_async_late_completion_poisons_connection){
  depot_pool *p = poolNew("async_late", 1, 0);
  depot_async *a = asyncNew(p, 0);
  depot_async_completion *c;
  submit(a, "SELECT sleep_ms(400)", 0, 50, 7, 0);
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
  submit(a, "SELECT sleep_ms(300)", 0, 30, 9, 0);
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
  suite_add_tcase(s, tc);
  return s;
}
