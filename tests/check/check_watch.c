/*
** check_watch.c -- watch subscriptions of ext/depot_kv.h (ext/kv_watch.c):
** events in commit order with old values, key ranges, the bounded ring
** and its exact lag count, the blocking read and the eventfd, concurrent
** writers and a slow reader (this program is also run under TSan), TTL
** removals as delete events, and bad input.
*/
#include "config.h"
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "ext/depot_kv.h"

#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const azType[] = { "kv_memory", "kv_btree", "kv_log" };

static sqlite3 *wt_open(const char *zTag, char **pzDir){
  char *zDir = th_tmpdir(zTag);
  sqlite3 *db = th_openf("%s/db", zDir);
  sqlite3_busy_timeout(db, th_busy_ms(10000));
  if( pzDir ) *pzDir = zDir; else sqlite3_free(zDir);
  return db;
}

static void wt_table(sqlite3 *db, int iType){
  th_execf(db, "CREATE VIRTUAL TABLE t USING %s%s", azType[iType],
           iType==0 ? "(persistence=1)" : "");
}

static depot_kv_watch *wt_watch(sqlite3 *db, const depot_kv_value *pLo,
                                const depot_kv_value *pHi, unsigned flags,
                                int nCap){
  depot_kv_watch *w = 0;
  char *zErr = 0;
  int rc = depot_kv_watch_open(db, 0, "t", pLo, pHi, flags, nCap, &w, &zErr);
  ck_assert_msg(rc==SQLITE_OK, "depot_kv_watch_open: %s", zErr);
  return w;
}

/* The next event, which must exist now: its key as an integer. */
static const depot_kv_event *wt_next(depot_kv_watch *w){
  const depot_kv_event *e = 0;
  int rc = depot_kv_watch_next(w, 0, &e);
  ck_assert_int_eq(rc, SQLITE_ROW);
  ck_assert_int_eq(e->key.eType, SQLITE_INTEGER);
  return e;
}

static int wt_text_is(const depot_kv_value *v, const char *z){
  return v && v->eType==SQLITE_TEXT && v->n==(int)strlen(z)
      && memcmp(v->p, z, v->n)==0;
}

/* --------------------------------------------------------------- events -- */

START_TEST(test_watch_events_follow_commit_order_with_old_values){
  sqlite3 *db = wt_open("watch-order", 0);
  depot_kv_watch *w;
  const depot_kv_event *e;
  wt_table(db, _i);
  th_exec(db, "INSERT INTO t VALUES(9, 'before')");   /* not seen */
  w = wt_watch(db, 0, 0, DEPOT_KV_WATCH_OLD_VALUE, 100);
  th_exec(db, "INSERT INTO t VALUES(1, 'a')");
  th_exec(db, "UPDATE t SET value='b' WHERE key=1");
  th_exec(db, "DELETE FROM t WHERE key=1");
  th_exec(db, "BEGIN; INSERT INTO t VALUES(3, 'c'); INSERT INTO t "
              "VALUES(2, 'd'); COMMIT");
  th_exec(db, "BEGIN; INSERT INTO t VALUES(4, 'x'); ROLLBACK");
  e = wt_next(w);
  ck_assert(e->iSeq==1 && e->nLost==0 && e->key.i==1);
  ck_assert(e->pOld==0 && wt_text_is(e->pNew, "a"));
  e = wt_next(w);
  ck_assert(e->iSeq==2 && e->key.i==1);
  ck_assert(wt_text_is(e->pOld, "a") && wt_text_is(e->pNew, "b"));
  e = wt_next(w);
  ck_assert(e->iSeq==3 && wt_text_is(e->pOld, "b") && e->pNew==0);
  e = wt_next(w);                       /* one commit: its keys in order */
  ck_assert(e->iSeq==4 && e->key.i==2 && wt_text_is(e->pNew, "d"));
  e = wt_next(w);
  ck_assert(e->iSeq==5 && e->key.i==3 && wt_text_is(e->pNew, "c"));
  ck_assert_int_eq(depot_kv_watch_next(w, 0, &e), SQLITE_DONE);
  ck_assert_ptr_null(e);
  ck_assert_int_eq((int)depot_kv_watch_lost(w), 0);
  depot_kv_watch_close(w);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_watch_key_range_sees_only_its_keys){
  sqlite3 *db = wt_open("watch-range", 0);
  depot_kv_value lo, hi;
  depot_kv_watch *w;
  const depot_kv_event *e;
  memset(&lo, 0, sizeof(lo));
  memset(&hi, 0, sizeof(hi));
  lo.eType = SQLITE_INTEGER; lo.i = 10;
  hi.eType = SQLITE_FLOAT; hi.r = 20.0;
  wt_table(db, _i);
  w = wt_watch(db, &lo, &hi, 0, 100);
  th_exec(db, "INSERT INTO t VALUES(5,1),(10,1),(15,1),(20,1),(25,1),"
              "('text',1)");
  e = wt_next(w); ck_assert(e->key.i==10 && e->pOld==0);
  e = wt_next(w); ck_assert(e->key.i==15);
  e = wt_next(w); ck_assert(e->key.i==20);
  ck_assert_int_eq(depot_kv_watch_next(w, 0, &e), SQLITE_DONE);
  depot_kv_watch_close(w);
  sqlite3_close(db);
}
END_TEST

/* ------------------------------------------------------------------ lag -- */

START_TEST(test_watch_slow_subscriber_gets_exact_lag){
  sqlite3 *db = wt_open("watch-lag", 0);
  depot_kv_watch *w;
  const depot_kv_event *e;
  int i;
  wt_table(db, _i);
  w = wt_watch(db, 0, 0, 0, 4);
  for(i=1; i<=10; i++) th_execf(db, "INSERT INTO t VALUES(%d, %d)", i, i);
  e = wt_next(w);
  ck_assert_int_eq((int)e->nLost, 6);   /* 1..6 dropped */
  ck_assert(e->key.i==7 && e->iSeq==7);
  for(i=8; i<=10; i++){
    e = wt_next(w);
    ck_assert(e->key.i==i && e->nLost==0);
  }
  ck_assert_int_eq((int)depot_kv_watch_lost(w), 6);
  ck_assert_int_eq(depot_kv_watch_next(w, 0, &e), SQLITE_DONE);
  /* within capacity again: nothing lost */
  th_exec(db, "INSERT INTO t VALUES(11, 0), (12, 0)");
  e = wt_next(w); ck_assert(e->key.i==11 && e->nLost==0);
  e = wt_next(w); ck_assert(e->key.i==12 && e->nLost==0);
  /* a resynchronising scan sees every row */
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM t"), 12);
  depot_kv_watch_close(w);
  sqlite3_close(db);
}
END_TEST

/* ------------------------------------------------ blocking and eventfd -- */

static int wt_readable(depot_kv_watch *w){
  struct pollfd p;
  p.fd = depot_kv_watch_fd(w);
  p.events = POLLIN;
  p.revents = 0;
  return poll(&p, 1, 0)==1 && (p.revents & POLLIN);
}

typedef struct WtReader WtReader;
struct WtReader { depot_kv_watch *w; int rc; sqlite3_int64 iKey; };
static void *wt_block(void *pArg){
  WtReader *r = (WtReader*)pArg;
  const depot_kv_event *e = 0;
  r->rc = depot_kv_watch_next(r->w, -1, &e);
  if( r->rc==SQLITE_ROW ) r->iKey = e->key.i;
  return 0;
}

START_TEST(test_watch_blocking_read_and_eventfd){
  sqlite3 *db = wt_open("watch-block", 0);
  depot_kv_watch *w;
  const depot_kv_event *e;
  WtReader r;
  pthread_t th;
  wt_table(db, 0);
  w = wt_watch(db, 0, 0, 0, 8);
  ck_assert_int_ge(depot_kv_watch_fd(w), 0);
  ck_assert_int_eq(depot_kv_watch_next(w, 30, &e), SQLITE_DONE);
  ck_assert(!wt_readable(w));
  th_exec(db, "INSERT INTO t VALUES(1, 1), (2, 2)");
  ck_assert(wt_readable(w));
  e = wt_next(w); ck_assert(e->key.i==1);
  ck_assert(wt_readable(w));            /* one more queued */
  e = wt_next(w); ck_assert(e->key.i==2);
  ck_assert(!wt_readable(w));
  /* a reader blocked without a timeout wakes at the next commit */
  memset(&r, 0, sizeof(r));
  r.w = w;
  ck_assert_int_eq(pthread_create(&th, 0, wt_block, &r), 0);
  usleep(20000);
  th_exec(db, "INSERT INTO t VALUES(3, 3)");
  pthread_join(th, 0);
  ck_assert_int_eq(r.rc, SQLITE_ROW);
  ck_assert_int_eq((int)r.iKey, 3);
  /* a removed table ends the watch */
  th_exec(db, "DROP TABLE main.t");
  ck_assert(wt_readable(w));
  ck_assert_int_eq(depot_kv_watch_next(w, -1, &e), SQLITE_ABORT);
  depot_kv_watch_close(w);
  sqlite3_close(db);
}
END_TEST

/* -------------------------------------------------------------- threads -- */

#define WT_WRITERS 3
#define WT_ROWS    150

typedef struct WtWriter WtWriter;
struct WtWriter { const char *zDir; int iWriter; };
static void *wt_write(void *pArg){
  WtWriter *p = (WtWriter*)pArg;
  sqlite3 *db = th_openf("%s/db", p->zDir);
  int i, n = th_scaled(WT_ROWS, 5);
  sqlite3_busy_timeout(db, th_busy_ms(10000));
  for(i=0; i<n; i++){
    th_execf(db, "INSERT INTO t VALUES(%d, %d)", p->iWriter*100000 + i, i);
  }
  sqlite3_close(db);
  return 0;
}

/* Writers commit while a slow reader drains a small ring: every event is
** either read, in commit order per writer, or counted as lost. */
START_TEST(test_watch_concurrent_writers_and_slow_reader_account_every_event){
  char *zDir = 0;
  sqlite3 *db = wt_open("watch-threads", &zDir);
  WtWriter aW[WT_WRITERS];
  pthread_t aTh[WT_WRITERS];
  depot_kv_watch *w;
  const depot_kv_event *e;
  sqlite3_int64 aLast[WT_WRITERS];
  sqlite3_uint64 nRead = 0, nLost = 0, iSeq = 0;
  int i, nTotal = WT_WRITERS*th_scaled(WT_ROWS, 5), nDone = 0;
  wt_table(db, _i);
  w = wt_watch(db, 0, 0, DEPOT_KV_WATCH_OLD_VALUE, 16);
  for(i=0; i<WT_WRITERS; i++){
    aW[i].zDir = zDir;
    aW[i].iWriter = i;
    aLast[i] = -1;
    ck_assert_int_eq(pthread_create(&aTh[i], 0, wt_write, &aW[i]), 0);
  }
  while( nRead + nLost < (sqlite3_uint64)nTotal ){
    int rc = depot_kv_watch_next(w, 2000, &e);
    ck_assert_int_eq(rc, SQLITE_ROW);
    ck_assert(e->iSeq > iSeq);
    ck_assert(e->iSeq == iSeq + e->nLost + 1);
    iSeq = e->iSeq;
    nLost += e->nLost;
    nRead++;
    {
      int k = (int)(e->key.i / 100000);
      ck_assert(e->key.i % 100000 > aLast[k]);   /* per writer: in order */
      aLast[k] = e->key.i % 100000;
    }
    if( (nRead % 7)==0 ) usleep(1000);           /* a slow subscriber */
  }
  for(i=0; i<WT_WRITERS; i++){ pthread_join(aTh[i], 0); nDone++; }
  ck_assert_int_eq(nDone, WT_WRITERS);
  ck_assert_int_eq((int)(nRead + nLost), nTotal);
  ck_assert_int_eq((int)depot_kv_watch_lost(w), (int)nLost);
  ck_assert_int_eq(depot_kv_watch_next(w, 0, &e), SQLITE_DONE);
  depot_kv_watch_close(w);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ---------------------------------------------------------------- TTL --- */

START_TEST(test_watch_sees_ttl_removals_as_deletes){
  sqlite3 *db = wt_open("watch-ttl", 0);
  depot_kv_watch *w;
  const depot_kv_event *e;
  th_exec(db, "SELECT kv_clock('fixed', 5000)");
  th_exec(db, "CREATE VIRTUAL TABLE t USING kv_memory(ttl_ms=10)");
  th_exec(db, "INSERT INTO t VALUES(1, 'a')");
  w = wt_watch(db, 0, 0, DEPOT_KV_WATCH_OLD_VALUE, 8);
  th_exec(db, "SELECT kv_clock('fixed', 5010)");
  ck_assert_int_eq(th_int(db, "SELECT kv_sweep('t')"), 1);
  e = wt_next(w);
  ck_assert(e->key.i==1 && wt_text_is(e->pOld, "a") && e->pNew==0);
  th_exec(db, "SELECT kv_clock('wall')");
  depot_kv_watch_close(w);
  sqlite3_close(db);
}
END_TEST

/* ------------------------------------------------------------ bad input -- */

START_TEST(test_watch_bad_input_is_refused){
  sqlite3 *db = wt_open("watch-bad", 0);
  depot_kv_watch *w = (depot_kv_watch*)&w;
  depot_kv_value vNull;
  const depot_kv_event *e;
  char *zErr = 0;
  memset(&vNull, 0, sizeof(vNull));
  vNull.eType = SQLITE_NULL;
  wt_table(db, 0);
  th_exec(db, "CREATE TABLE plain(x)");
  ck_assert_int_eq(depot_kv_watch_open(db, 0, "nosuch", 0, 0, 0, 8, &w,
                                       &zErr), SQLITE_ERROR);
  ck_assert_ptr_null(w);
  ck_assert_msg(strstr(zErr, "no such table: nosuch")!=0, "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(depot_kv_watch_open(db, 0, "plain", 0, 0, 0, 8, &w,
                                       &zErr), SQLITE_ERROR);
  ck_assert_msg(strstr(zErr, "is not a KV table")!=0, "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(depot_kv_watch_open(db, 0, "t", 0, 0, 0, 0, &w, &zErr),
                   SQLITE_MISUSE);
  ck_assert_msg(strstr(zErr, "capacity must be 1..")!=0, "%s", zErr);
  sqlite3_free(zErr);
  ck_assert_int_eq(depot_kv_watch_open(db, 0, "t", 0, 0, 0x10, 8, &w, &zErr),
                   SQLITE_MISUSE);
  sqlite3_free(zErr);
  ck_assert_int_eq(depot_kv_watch_open(db, 0, "t", &vNull, 0, 0, 8, &w,
                                       &zErr), SQLITE_MISUSE);
  sqlite3_free(zErr);
  ck_assert_int_eq(depot_kv_watch_open(0, 0, "t", 0, 0, 0, 8, &w, 0),
                   SQLITE_MISUSE);
  ck_assert_int_eq(depot_kv_watch_next(0, 0, &e), SQLITE_MISUSE);
  ck_assert_int_eq(depot_kv_watch_fd(0), -1);
  depot_kv_watch_close(0);
  /* nothing was registered: writes go on, and a later watch sees them */
  th_exec(db, "INSERT INTO t VALUES(1, 1)");
  sqlite3_close(db);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("watch");
  TCase *tc = tcase_create("watch");
  tcase_set_timeout(tc, 300);
  tcase_add_loop_test(tc,
      test_watch_events_follow_commit_order_with_old_values, 0, 3);
  tcase_add_loop_test(tc, test_watch_key_range_sees_only_its_keys, 0, 3);
  tcase_add_loop_test(tc, test_watch_slow_subscriber_gets_exact_lag, 0, 3);
  tcase_add_test(tc, test_watch_blocking_read_and_eventfd);
  tcase_add_loop_test(tc,
      test_watch_concurrent_writers_and_slow_reader_account_every_event, 0, 3);
  tcase_add_test(tc, test_watch_sees_ttl_removals_as_deletes);
  tcase_add_test(tc, test_watch_bad_input_is_refused);
  suite_add_tcase(s, tc);
  return s;
}
