/*
** bench_kv.c -- make bench workloads of KV tables through SQL.
**
** kv_memory_upsert: 20 transactions of 1000 "INSERT OR REPLACE" point
**   upserts each (integer keys, text values).  Baseline: the same statement
**   on a plain WITHOUT ROWID table in an in-memory database.  Candidate: a
**   kv_memory table (persistence=0) of the connection's in-memory store.
** kv_group_commit: 800 durable single-key commits (autocommit INSERT OR
**   REPLACE into a persistence=1 kv_memory table, so each is one WAL append
**   + fdatasync).  Baseline: one thread.  Candidate: 8 threads on their own
**   connections (opened, with their statements prepared, before the timed
**   region), sharing flushes through group commit.  Every thread takes the
**   number of its next commit from one shared counter (so no thread runs
**   alone at the end because its share was larger) and writes its own
**   key.  The threads start together at a barrier; the clock runs from the
**   barrier to the last commit.  Cost is time per commit.
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define UPSERT_TXN   20
#define UPSERT_ROWS  1000
#define GROUP_TOTAL  800
#define GROUP_THREADS 8

static sqlite3 *benchOpen(void){
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(":memory:", &db)!=SQLITE_OK ){
    sqlite3_close(db);
    return 0;
  }
  return db;
}

double bench_kv_memory_upsert(int bCandidate, const char *zDir){
  sqlite3 *db = benchOpen();
  sqlite3_stmt *pStmt = 0;
  double t0, t1 = -1;
  int i, j, rc;
  (void)zDir;
  if( db==0 ) return -1;
  rc = sqlite3_exec(db, bCandidate
      ? "CREATE VIRTUAL TABLE t USING kv_memory"
      : "CREATE TABLE t(key PRIMARY KEY NOT NULL, value) WITHOUT ROWID",
      0, 0, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO t VALUES(?1, "
                            "printf('value-%d', ?1))", -1, &pStmt, 0);
  }
  t0 = bench_now();
  for(i=0; rc==SQLITE_OK && i<UPSERT_TXN; i++){
    rc = sqlite3_exec(db, "BEGIN", 0, 0, 0);
    for(j=0; rc==SQLITE_OK && j<UPSERT_ROWS; j++){
      sqlite3_bind_int(pStmt, 1, (int)(((unsigned)(i*UPSERT_ROWS+j)*2654435761u)
                                       % 50000u));
      rc = sqlite3_step(pStmt)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
      sqlite3_reset(pStmt);
    }
    if( rc==SQLITE_OK ) rc = sqlite3_exec(db, "COMMIT", 0, 0, 0);
  }
  if( rc==SQLITE_OK ) t1 = bench_now() - t0;
  else fprintf(stderr, "kv_memory_upsert: %s\n", sqlite3_errmsg(db));
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return t1;
}

typedef struct GroupArg GroupArg;
struct GroupArg {
  sqlite3 *db;                 /* own connection, set up before timing */
  sqlite3_stmt *pStmt;
  pthread_barrier_t *pStart;   /* shared: the start line */
  int *pnNext;                 /* shared: number of the next commit */
  int rc;
};

static void *benchGroupThread(void *pArg){
  GroupArg *p = (GroupArg*)pArg;
  int i;
  pthread_barrier_wait(p->pStart);
  while( p->rc==SQLITE_OK
      && (i = __atomic_fetch_add(p->pnNext, 1, __ATOMIC_RELAXED))<GROUP_TOTAL ){
    sqlite3_bind_int(p->pStmt, 1, i);
    p->rc = sqlite3_step(p->pStmt)==SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
    sqlite3_reset(p->pStmt);
  }
  if( p->rc!=SQLITE_OK ){
    fprintf(stderr, "kv_group_commit: %s\n", sqlite3_errmsg(p->db));
  }
  return 0;
}

/* Open a thread's connection on the store and prepare its statement. */
static int benchGroupSetup(GroupArg *p, const char *zDir){
  char *zSql = sqlite3_mprintf("CREATE VIRTUAL TABLE t USING kv_memory(dir="
                               "'%q/store', persistence=1)", zDir);
  memset(p, 0, sizeof(*p));
  p->db = benchOpen();
  p->rc = p->db ? sqlite3_exec(p->db, zSql, 0, 0, 0) : SQLITE_NOMEM;
  if( p->rc==SQLITE_OK ){
    p->rc = sqlite3_prepare_v2(p->db, "INSERT OR REPLACE INTO t "
                               "VALUES(?1, 'v')", -1, &p->pStmt, 0);
  }
  sqlite3_free(zSql);
  return p->rc;
}

double bench_kv_group_commit(int bCandidate, const char *zDir){
  int nThread = bCandidate ? GROUP_THREADS : 1;
  pthread_t aTid[GROUP_THREADS];
  GroupArg aArg[GROUP_THREADS];
  pthread_barrier_t start;
  double t0, t1 = -1;
  int i, nNext = 0, rc = SQLITE_OK;
  for(i=0; i<nThread; i++){
    if( benchGroupSetup(&aArg[i], zDir) ) rc = SQLITE_ERROR;
    aArg[i].pnNext = &nNext;
  }
  if( rc==SQLITE_OK ){
    pthread_barrier_init(&start, 0, (unsigned)nThread+1);
    for(i=0; i<nThread; i++){
      aArg[i].pStart = &start;
      pthread_create(&aTid[i], 0, benchGroupThread, &aArg[i]);
    }
    pthread_barrier_wait(&start);
    t0 = bench_now();
    for(i=0; i<nThread; i++) pthread_join(aTid[i], 0);
    t1 = (bench_now() - t0) / GROUP_TOTAL;
    pthread_barrier_destroy(&start);
  }
  for(i=0; i<nThread; i++){
    if( aArg[i].rc!=SQLITE_OK ) t1 = -1;
    sqlite3_finalize(aArg[i].pStmt);
    sqlite3_close(aArg[i].db);
  }
  return t1;
}
