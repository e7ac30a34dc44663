/*
** bench_queue.c -- make bench workload of queues (ext/kv_queue.c): enqueue,
** lease and ack throughput against a plain SQLite table used as a queue.
**
** Both sides: QB_MSG messages enqueued one per autocommit statement, then
** leased QB_BATCH at a time (each lease one transaction) and acked one by
** one (each ack one transaction).  File databases, WAL,
** synchronous=NORMAL; the KV side commits at kv_synchronous('normal'),
** the same durability (each commit is written to its WAL file, flushed
** later).
**
** queue_vs_sqlite   baseline: q(id INTEGER PRIMARY KEY, payload,
**                   visible_at, lease, attempts); enqueue INSERT, lease
**                   UPDATE ... WHERE id IN (SELECT id ... WHERE
**                   visible_at<=now ORDER BY id LIMIT n) RETURNING, ack
**                   DELETE ... WHERE id=? AND lease=?;
**                   candidate: a kv_queue with kv_enqueue, kv_queue_lease,
**                   kv_queue_ack
*/
#include "config.h"
#include "tests/bench/bench.h"
#include "ext/depot.h"
#include <sqlite3.h>

#include <stdio.h>
#include <stdlib.h>

#define QB_MSG    4000
#define QB_BATCH  10

static int qbExec(sqlite3 *db, const char *zSql){
  int rc = sqlite3_exec(db, zSql, 0, 0, 0);
  if( rc!=SQLITE_OK ) fprintf(stderr, "queue bench: %s: %s\n", zSql,
                              sqlite3_errmsg(db));
  return rc;
}

static sqlite3 *qbOpen(const char *zDir){
  char *zFile = sqlite3_mprintf("%s/app.db", zDir);
  sqlite3 *db = 0;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  if( sqlite3_open(zFile, &db)!=SQLITE_OK
   || qbExec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                 "SELECT kv_synchronous('normal')")!=SQLITE_OK ){
    sqlite3_close(db);
    db = 0;
  }
  sqlite3_free(zFile);
  return db;
}

static int qbStep(sqlite3 *db, sqlite3_stmt *p){
  int rc = sqlite3_step(p);
  if( rc==SQLITE_ROW || rc==SQLITE_DONE ) return rc;
  fprintf(stderr, "queue bench: %s\n", sqlite3_errmsg(db));
  return rc;
}

/* The timed part on either side. */
static int qbWork(sqlite3 *db, int bKv){
  sqlite3_stmt *pEnq = 0, *pLease = 0, *pAck = 0;
  sqlite3_int64 aId[QB_BATCH], aLease[QB_BATCH];
  int i, n, nAcked = 0, rc;
  rc = sqlite3_prepare_v2(db, bKv ? "SELECT kv_enqueue('q', ?1)"
      : "INSERT INTO q(payload, visible_at, lease, attempts) VALUES(?1, "
        "CAST((julianday('now')-2440587.5)*86400000 AS INTEGER), 0, 0)", -1, &pEnq, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, bKv
        ? "SELECT id, lease_id, payload FROM kv_queue_lease('q', ?1, 30000)"
        : "UPDATE q SET lease=abs(random()), attempts=attempts+1, "
          "visible_at=CAST((julianday('now')-2440587.5)*86400000 AS INTEGER)+30000 "
          "WHERE id IN (SELECT id FROM q WHERE visible_at<="
          "CAST((julianday('now')-2440587.5)*86400000 AS INTEGER) ORDER BY id LIMIT ?1) "
          "RETURNING id, lease, payload", -1, &pLease, 0);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_prepare_v2(db, bKv ? "SELECT kv_queue_ack('q', ?1, ?2)"
        : "DELETE FROM q WHERE id=?1 AND lease=?2", -1, &pAck, 0);
  }
  for(i=0; rc==SQLITE_OK && i<QB_MSG; i++){
    sqlite3_bind_text(pEnq, 1, "{\"job\":\"resize\",\"n\":12345}", -1,
                      SQLITE_STATIC);
    rc = qbStep(db, pEnq);
    rc = rc==SQLITE_ROW || rc==SQLITE_DONE ? SQLITE_OK : rc;
    sqlite3_reset(pEnq);
  }
  while( rc==SQLITE_OK && nAcked<QB_MSG ){
    sqlite3_bind_int(pLease, 1, QB_BATCH);
    for(n=0; (rc = qbStep(db, pLease))==SQLITE_ROW && n<QB_BATCH; n++){
      aId[n] = sqlite3_column_int64(pLease, 0);
      aLease[n] = sqlite3_column_int64(pLease, 1);
    }
    sqlite3_reset(pLease);
    if( rc!=SQLITE_DONE ) break;
    rc = SQLITE_OK;
    if( n==0 ){
      fprintf(stderr, "queue bench: lease found nothing after %d acks\n",
              nAcked);
      rc = SQLITE_ERROR;
    }
    for(i=0; rc==SQLITE_OK && i<n; i++){
      sqlite3_bind_int64(pAck, 1, aId[i]);
      sqlite3_bind_int64(pAck, 2, aLease[i]);
      rc = qbStep(db, pAck);
      rc = rc==SQLITE_ROW || rc==SQLITE_DONE ? SQLITE_OK : rc;
      sqlite3_reset(pAck);
      nAcked++;
    }
  }
  sqlite3_finalize(pEnq);
  sqlite3_finalize(pLease);
  sqlite3_finalize(pAck);
  return rc;
}

double bench_queue_vs_sqlite(int bCandidate, const char *zDir){
  sqlite3 *db = qbOpen(zDir);
  double t0, t = -1;
  if( db==0 ) return -1;
  if( qbExec(db, bCandidate ? "CREATE VIRTUAL TABLE q USING kv_queue"
      : "CREATE TABLE q(id INTEGER PRIMARY KEY, payload, visible_at "
        "INTEGER, lease INTEGER, attempts INTEGER)")==SQLITE_OK ){
    t0 = bench_now();
    if( qbWork(db, bCandidate)==SQLITE_OK ) t = bench_now() - t0;
  }
  sqlite3_close(db);
  return t;
}
