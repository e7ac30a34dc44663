/*
** async_loop.c -- an epoll event loop that runs many queries through the
** async runner of depot_pool.h while a 5 ms timer keeps firing on time.
**
** The loop waits on two descriptors: a timerfd (period 5 ms) and the
** runner's completion descriptor (depot_async_fd).  It keeps up to 64
** queries in flight (one in a hundred slow: a count to a million), and
** on every timer tick measures how late the tick came.  The loop itself
** never calls SQLite: every statement runs on the runner's workers.
**
**     async_loop DBFILE [QUERIES [MAX_LATE_MS]]
**
** Prints the queries run, the ticks and the worst lateness; exits 1 when a
** query failed or a tick came more than MAX_LATE_MS (default 150) late.
** Build: cc async_loop.c $(pkg-config --cflags --libs depot sqlite3).
*/
#include <sqlite3.h>
#include "depot.h"
#include "depot_pool.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* One query in SLOW_EVERY counts to SLOW_N (a few hundred ms): were the
** loop to wait for one, a tick would come that much late. */
#define SLOW_EVERY 100
#define SLOW_N 1000000LL
#define SLOW_SQL "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1" \
                 " FROM c WHERE i<?1) SELECT sum(i) FROM c"

static int64_t nowUs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000000 + ts.tv_nsec/1000;
}

int main(int argc, char **argv){
  const char *zDb = argc>1 ? argv[1] : "async_loop.db";
  int nQuery = argc>2 ? atoi(argv[2]) : 2000;
  int iMaxLateMs = argc>3 ? atoi(argv[3]) : 150;
  depot_pool_options po;
  depot_pool *pPool = 0;
  depot_async *pAsync = 0;
  char *zErr = 0;
  sqlite3 *db;
  int nSent = 0, nDone = 0, nFail = 0, nTick = 0;
  int64_t iWorstLateUs = 0, iNextTick;
  const int64_t iPeriodUs = 5000;
  struct itimerspec its;
  struct epoll_event ev, aEv[4];
  int ep, tfd;

  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  /* A table of 50k rows for the fast queries. */
  unlink(zDb);
  if( sqlite3_open(zDb, &db)!=SQLITE_OK ) return 1;
  sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE n(x);"
               "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM c"
               " WHERE i<50000) INSERT INTO n SELECT i FROM c", 0, 0, 0);
  sqlite3_close(db);

  memset(&po, 0, sizeof(po));
  po.nReader = 4;
  po.zName = "loop";
  if( depot_pool_open(zDb, &po, &pPool, &zErr)!=SQLITE_OK
   || depot_async_open(pPool, 2, 0, &pAsync, &zErr)!=SQLITE_OK ){
    fprintf(stderr, "async_loop: %s\n", zErr);
    return 1;
  }

  ep = epoll_create1(0);
  tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
  memset(&its, 0, sizeof(its));
  its.it_value.tv_nsec = iPeriodUs*1000;
  its.it_interval.tv_nsec = iPeriodUs*1000;
  timerfd_settime(tfd, 0, &its, 0);
  iNextTick = nowUs() + iPeriodUs;
  ev.events = EPOLLIN; ev.data.fd = tfd;
  epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &ev);
  ev.events = EPOLLIN; ev.data.fd = depot_async_fd(pAsync);
  epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev);

  while( nDone<nQuery ){
    int i, n;
    while( nSent<nQuery && nSent-nDone<64 ){
      depot_async_stmt s;
      depot_value v;
      int bSlow = nSent%SLOW_EVERY==0;
      memset(&s, 0, sizeof(s));
      memset(&v, 0, sizeof(v));
      v.eType = SQLITE_INTEGER;
      v.i = bSlow ? SLOW_N : 100;
      s.zSql = bSlow ? SLOW_SQL : "SELECT sum(x) FROM n WHERE x<=?1";
      s.nParam = 1;
      s.aParam = &v;
      s.iTimeoutMs = 60000;
      s.iTag = (sqlite3_uint64)nSent;
      if( depot_async_submit(pAsync, &s, &zErr)!=SQLITE_OK ){
        fprintf(stderr, "async_loop: submit: %s\n", zErr);
        return 1;
      }
      nSent++;
    }
    n = epoll_wait(ep, aEv, 4, 100);
    for(i=0; i<n; i++){
      if( aEv[i].data.fd==tfd ){
        uint64_t nExp;
        int64_t iLate = nowUs() - iNextTick;
        if( read(tfd, &nExp, sizeof(nExp))!=sizeof(nExp) ) continue;
        if( iLate>iWorstLateUs ) iWorstLateUs = iLate;
        iNextTick += iPeriodUs*(int64_t)nExp;
        nTick += (int)nExp;
      }else{
        depot_async_completion *ac[32];
        int j, m;
        while( (m = depot_async_poll(pAsync, ac, 32))>0 ){
          for(j=0; j<m; j++){
            sqlite3_int64 iWant = ac[j]->iTag%SLOW_EVERY==0
                                  ? SLOW_N*(SLOW_N+1)/2 : 100LL*101/2;
            if( ac[j]->rc!=SQLITE_OK || ac[j]->nRow!=1
             || sqlite3_value_int64(ac[j]->aValue[0])!=iWant ){
              nFail++;
            }
            depot_async_completion_free(ac[j]);
            nDone++;
          }
        }
      }
    }
  }
  printf("async_loop: %d queries (%d failed), %d ticks, worst tick %.1f ms"
         " late (bound %d ms)\n", nDone, nFail, nTick, iWorstLateUs/1000.0,
         iMaxLateMs);
  close(tfd);
  close(ep);
  depot_async_free(pAsync);
  if( depot_pool_close(pPool, &zErr)!=SQLITE_OK ){
    fprintf(stderr, "async_loop: %s\n", zErr);
    return 1;
  }
  unlink(zDb);
  return (nFail || iWorstLateUs > (int64_t)iMaxLateMs*1000) ? 1 : 0;
}
