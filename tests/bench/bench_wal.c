/*
** bench_wal.c -- make bench workloads of the root WAL (wal/).
**
**   wal_group_commit   baseline: 1 thread doing BW_NAPPEND durable appends
**                      of a small record; candidate: 8 threads doing
**                      BW_NAPPEND each, all at once.  Cost: seconds per
**                      append, so the ratio is the inverse of the commit
**                      rate gain from group commit (target <= 0.25, i.e.
**                      8 threads reach at least 4x the commits/s of 1).
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "wal/wal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sqlite3.h>

#define BW_NAPPEND 150          /* appends per thread and run */
#define BW_NTHREAD 8

typedef struct BwThread BwThread;
struct BwThread {
  Wal *pWal;
  pthread_barrier_t *pStart;
  int iThread;
  int rc;
};

/* BW_NAPPEND appends of one 16-byte put, each flushed before it returns. */
static void *bwAppender(void *pArg){
  BwThread *t = (BwThread*)pArg;
  WalRecordBuilder *pRec = wal_record_new((uint64_t)t->iThread);
  uint64_t cid;
  int i;
  if( pRec==0 ){ t->rc = SQLITE_NOMEM; return 0; }
  t->rc = wal_record_table(pRec, "bench", 5);
  if( t->rc==SQLITE_OK ){
    t->rc = wal_record_action(pRec, 0, "key-0001", 8, "value-01", 8);
  }
  pthread_barrier_wait(t->pStart);
  for(i=0; i<BW_NAPPEND && t->rc==SQLITE_OK; i++){
    t->rc = wal_append(t->pWal, pRec, 0, 0, 0, &cid, 0);
  }
  wal_record_free(pRec);
  return 0;
}

/* One durable append of the bench's record. */
static int bwWarmUp(Wal *pWal){
  WalRecordBuilder *pRec = wal_record_new(0);
  uint64_t cid;
  int rc = pRec ? wal_record_table(pRec, "bench", 5) : SQLITE_NOMEM;
  if( rc==SQLITE_OK ){
    rc = wal_record_action(pRec, 0, "key-0001", 8, "value-01", 8);
  }
  if( rc==SQLITE_OK ) rc = wal_append(pWal, pRec, 0, 0, 0, &cid, 0);
  wal_record_free(pRec);
  return rc;
}

double bench_wal_group_commit(int bCandidate, const char *zDir){
  int nThread = bCandidate ? BW_NTHREAD : 1;
  BwThread aT[BW_NTHREAD];
  pthread_t aId[BW_NTHREAD];
  pthread_barrier_t start;
  Wal *pWal = 0;
  char *zErr = 0;
  double t0, t1;
  int i, rc = wal_open(zDir, 0, &pWal, &zErr);
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "wal_group_commit: %s\n", zErr ? zErr : "open failed");
    sqlite3_free(zErr);
    return -1;
  }
  /* One untimed append first: the first append to a new log extends its
  ** segment file by a whole preallocation chunk (and flushes that), a cost
  ** each side would otherwise spread over a different number of appends
  ** (150 for the one thread, 1200 for the eight). */
  rc = bwWarmUp(pWal);
  if( rc!=SQLITE_OK ){
    fprintf(stderr, "wal_group_commit: first append failed: %d\n", rc);
    wal_close(pWal);
    return -1;
  }
  pthread_barrier_init(&start, 0, (unsigned)nThread+1);
  for(i=0; i<nThread; i++){
    memset(&aT[i], 0, sizeof(aT[i]));
    aT[i].pWal = pWal;
    aT[i].pStart = &start;
    aT[i].iThread = i;
    pthread_create(&aId[i], 0, bwAppender, &aT[i]);
  }
  pthread_barrier_wait(&start);
  t0 = bench_now();
  for(i=0; i<nThread; i++) pthread_join(aId[i], 0);
  t1 = bench_now();
  pthread_barrier_destroy(&start);
  wal_close(pWal);
  for(i=0; i<nThread; i++){
    if( aT[i].rc!=SQLITE_OK ){
      fprintf(stderr, "wal_group_commit: append failed: %d\n", aT[i].rc);
      return -1;
    }
  }
  return (t1 - t0) / (double)(nThread*BW_NAPPEND);
}
