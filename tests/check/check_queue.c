/*
** check_queue.c -- queues and change streams (ext/kv_queue.c,
** ext/kv_stream.c): FIFO leases, acks, nacks with delays, lease expiry
** and dead letters under the injected clock (kv_clock), the
** effectively-once pattern, change stream events for every applied
** mutation, concurrent consumers, bad input, and SIGKILL of producers and
** consumers.
**
** The kill tests start a child (th_spawn) that produces (random writes
** to a source with a change stream) or consumes
** (lease, then in one transaction record the message and ack it), kill it
** with SIGKILL at a random moment, and check the reopened store: replaying
** the stream's events in id order rebuilds the source exactly (no
** committed change without its event, no event without its change), no
** acked message is in the queue, and every unacked one is delivered again
** once its lease has expired.
*/
#include "config.h"
#define SQLITE_CORE 1          /* sqlite3ext.h: the struct only, no macros */
#include "tests/check/harness.h"
#include "ext/depot.h"
#include "ext/kv/kv.h"
#include "ext/kv_sql.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *const azType[] = { "kv_memory", "kv_btree", "kv_log" };

/* A file database in a new directory (its KV store: the -kv sidecar). */
static sqlite3 *q_open(const char *zTag, char **pzDir){
  char *zDir = th_tmpdir(zTag);
  char *zPath = sqlite3_mprintf("%s/db", zDir);
  sqlite3 *db = th_open(zPath);
  sqlite3_busy_timeout(db, th_busy_ms(5000));
  sqlite3_free(zPath);
  if( pzDir ) *pzDir = zDir; else sqlite3_free(zDir);
  return db;
}

/* The whole visible state of queue zQ as one text. */
static char *q_state(sqlite3 *db, const char *zQ){
  return th_textf(db, "SELECT group_concat(id||':'||state||':'||attempts||':'"
      "||quote(payload)||':'||visible_at||':'||coalesce(error,'-'), ' ') "
      "FROM %s", zQ);
}

static void q_err_is(sqlite3 *db, const char *zSql, const char *zWant){
  char *zErr = 0;
  int rc = th_try(db, zSql, &zErr);
  ck_assert_msg(rc!=SQLITE_OK, "%s succeeded", zSql);
  ck_assert_msg(zErr && strstr(zErr, zWant), "%s: got '%s', want '%s'", zSql,
                zErr ? zErr : "(null)", zWant);
  sqlite3_free(zErr);
}

/* ------------------------------------------------------------- basics -- */

START_TEST(test_queue_fifo_lease_ack){
  sqlite3 *db = q_open("queue-fifo", 0);
  int i;
  th_execf(db, "CREATE VIRTUAL TABLE jobs USING kv_queue(type=%s)",
           azType[_i]);
  for(i=1; i<=5; i++){
    ck_assert_int_eq(th_intf(db, "SELECT kv_enqueue('jobs', 'm%d')", i), i);
  }
  th_exec(db, "CREATE TEMP TABLE l AS SELECT * FROM "
              "kv_queue_lease('jobs', 3, 60000)");
  th_text_is(db, "SELECT group_concat(id||payload||attempts, ',') FROM l",
             "1m11,2m21,3m31");
  th_text_is(db, "SELECT group_concat(id, ',') FROM "
                 "kv_queue_lease('jobs', 10, 60000)", "4,5");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                              "kv_queue_lease('jobs', 10, 60000)"), 0);
  th_text_is(db, "SELECT depth||' '||ready||' '||leased||' '||delayed||' '"
                 "||dead FROM kv_queue_stats WHERE queue='jobs'",
             "5 0 5 0 0");
  th_exec(db, "SELECT kv_queue_ack('jobs', id, lease_id) FROM l");
  th_text_is(db, "SELECT group_concat(id, ',') FROM jobs", "4,5");
  /* an acked message cannot be acked again */
  q_err_is(db, "SELECT kv_queue_ack('jobs', id, lease_id) FROM l WHERE id=1",
           "has no message 1");
  sqlite3_close(db);
}
END_TEST

/* Lease expiry, nack delays, dead letters, requeue and purge, all on the
** fixed test clock. */
START_TEST(test_queue_clock_expiry_nack_dead_letters){
  sqlite3 *db = q_open("queue-clock", 0);
  sqlite3_int64 t0 = 1800000000000LL, iLease, iLease2;
  char *zSql;
  th_exec(db, "CREATE VIRTUAL TABLE jobs USING kv_queue(max_attempts=3)");
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0);
  ck_assert_int_eq(th_int(db, "SELECT kv_enqueue('jobs', 'a', 1000)"), 1);
  th_text_is(db, "SELECT state FROM jobs", "delayed");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                              "kv_queue_lease('jobs', 1, 500)"), 0);
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+999);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                              "kv_queue_lease('jobs', 1, 500)"), 0);
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+1000);
  iLease = th_int(db, "SELECT lease_id FROM kv_queue_lease('jobs', 1, 500)");
  th_text_is(db, "SELECT state||attempts||' '||visible_at FROM jobs",
             "leased1 1800000001500");
  th_text_is(db, "SELECT oldest_age_ms FROM kv_queue_stats", "1000");
  /* the lease holds until its deadline, then the message is delivered
  ** again and the old lease id is refused */
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+1499);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                              "kv_queue_lease('jobs', 1, 500)"), 0);
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+1500);
  iLease2 = th_int(db, "SELECT lease_id FROM kv_queue_lease('jobs', 1, 500)");
  ck_assert(iLease2!=iLease);
  zSql = sqlite3_mprintf("SELECT kv_queue_ack('jobs', 1, %lld)", iLease);
  q_err_is(db, zSql, "is not held by lease");
  sqlite3_free(zSql);
  /* extend, then nack with a delay and an error */
  ck_assert_int_eq(th_intf(db, "SELECT kv_queue_extend('jobs', 1, %lld, "
                                "2000)", iLease2), t0+3500);
  zSql = sqlite3_mprintf("SELECT kv_queue_nack('jobs', 1, %lld, 300, 'e2')",
                         iLease2);
  th_text_is(db, zSql, "queued");
  sqlite3_free(zSql);
  th_text_is(db, "SELECT state||attempts||' '||error FROM jobs",
             "delayed2 e2");
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+1799);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                              "kv_queue_lease('jobs', 1, 100)"), 0);
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+1800);
  th_text_is(db, "SELECT attempts FROM kv_queue_lease('jobs', 1, 100)", "3");
  /* the third attempt's lease expires: the next lease dead-letters it */
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+1900);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                              "kv_queue_lease('jobs', 1, 100)"), 0);
  th_text_is(db, "SELECT id||' '||attempts||' '||payload||' '||error||' '"
                 "||dead_at FROM kv_queue_dead('jobs')",
             "1 3 a e2 1800000001900");
  th_text_is(db, "SELECT depth||' '||dead FROM kv_queue_stats", "0 1");
  /* requeue: back at attempt 0, delivered again */
  ck_assert_int_eq(th_int(db, "SELECT kv_queue_requeue('jobs')"), 1);
  th_text_is(db, "SELECT attempts FROM kv_queue_lease('jobs', 1, 100)", "1");
  /* a nack at the last attempt dead-letters at once */
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+3000);
  iLease = th_int(db, "SELECT lease_id FROM kv_queue_lease('jobs', 1, 100)");
  th_execf(db, "SELECT kv_clock('fixed', %lld)", t0+4000);
  iLease = th_int(db, "SELECT lease_id FROM kv_queue_lease('jobs', 1, 100)");
  zSql = sqlite3_mprintf("SELECT kv_queue_nack('jobs', 1, %lld, 0, "
                         "'final')", iLease);
  th_text_is(db, zSql, "dead");
  sqlite3_free(zSql);
  th_text_is(db, "SELECT error FROM kv_queue_dead('jobs')", "final");
  ck_assert_int_eq(th_int(db, "SELECT kv_queue_purge('jobs', 1)"), 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_queue_dead('jobs')"),
                   0);
  q_err_is(db, "SELECT kv_queue_purge('jobs', 1)", "has no dead letter 1");
  th_exec(db, "SELECT kv_clock('wall')");
  sqlite3_close(db);
}
END_TEST

/* An ack in the consumer's transaction commits and rolls back with its
** writes. */
START_TEST(test_queue_ack_in_consumer_transaction){
  sqlite3 *db = q_open("queue-once", 0);
  sqlite3_int64 iLease;
  th_exec(db, "CREATE VIRTUAL TABLE jobs USING kv_queue;"
              "CREATE VIRTUAL TABLE results USING kv_btree;"
              "CREATE TABLE audit(id);");
  th_exec(db, "SELECT kv_enqueue('jobs', 'work')");
  iLease = th_int(db, "SELECT lease_id FROM kv_queue_lease('jobs', 1, "
                      "60000)");
  th_exec(db, "BEGIN");
  th_exec(db, "INSERT INTO results VALUES(1, 'done')");
  th_execf(db, "SELECT kv_queue_ack('jobs', 1, %lld)", iLease);
  th_exec(db, "ROLLBACK");
  th_text_is(db, "SELECT state FROM jobs", "leased");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM results"), 0);
  /* the ack alone first in the transaction (it joins it) */
  th_exec(db, "BEGIN");
  th_execf(db, "SELECT kv_queue_ack('jobs', 1, %lld)", iLease);
  th_exec(db, "INSERT INTO audit VALUES(1)");
  th_exec(db, "ROLLBACK");
  th_text_is(db, "SELECT state FROM jobs", "leased");
  th_exec(db, "BEGIN");
  th_exec(db, "INSERT INTO results VALUES(1, 'done')");
  th_execf(db, "SELECT kv_queue_ack('jobs', 1, %lld)", iLease);
  th_exec(db, "COMMIT");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM jobs"), 0);
  th_text_is(db, "SELECT value FROM results", "done");
  /* an enqueue in a rolled-back transaction leaves nothing */
  th_exec(db, "BEGIN");
  th_exec(db, "SELECT kv_enqueue('jobs', 'x')");
  th_exec(db, "ROLLBACK");
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM jobs"), 0);
  sqlite3_close(db);
}
END_TEST

START_TEST(test_queue_ids_are_never_reused){
  char *zDir = 0;
  sqlite3 *db = q_open("queue-ids", &zDir);
  int i;
  th_exec(db, "CREATE VIRTUAL TABLE jobs USING kv_queue");
  for(i=0; i<3; i++) th_exec(db, "SELECT kv_enqueue('jobs', 1)");
  th_exec(db, "SELECT kv_queue_ack('jobs', id, lease_id) FROM "
              "kv_queue_lease('jobs', 10, 1000)");
  sqlite3_close(db);
  db = th_openf("%s/db", zDir);
  ck_assert_int_gt(th_int(db, "SELECT kv_enqueue('jobs', 2)"), 3);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* A message whose producer commits after a lease scanned past its id is
** delivered by a later lease (a scan from the queue's head, at least
** every 100 ms). */
START_TEST(test_queue_late_commit_of_an_earlier_id_is_delivered){
  char *zDir = 0;
  sqlite3 *db = q_open("queue-late", &zDir);
  sqlite3 *db2 = th_openf("%s/db", zDir);
  int i;
  th_exec(db, "CREATE VIRTUAL TABLE jobs USING kv_queue");
  th_exec(db2, "BEGIN");
  ck_assert_int_eq(th_int(db2, "SELECT kv_enqueue('jobs', 'late')"), 1);
  ck_assert_int_eq(th_int(db, "SELECT kv_enqueue('jobs', 'early')"), 2);
  th_text_is(db, "SELECT group_concat(id) FROM kv_queue_lease('jobs', 10, "
                 "60000)", "2");
  th_exec(db2, "COMMIT");
  for(i=0; i<100; i++){
    char *z = th_text(db, "SELECT group_concat(id) FROM "
                          "kv_queue_lease('jobs', 10, 60000)");
    if( z ){
      ck_assert_str_eq(z, "1");
      sqlite3_free(z);
      break;
    }
    usleep(10000);
  }
  ck_assert_int_lt(i, 100);
  sqlite3_close(db2);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------ change streams -- */

static void q_ck_events(sqlite3 *db, const char *zWant){
  th_text_is(db, "SELECT group_concat(json_extract(payload, '$.op')||' '||"
      "json_extract(payload, '$.key')||' '||coalesce(json_extract(payload, "
      "'$.old'), '-')||' '||coalesce(json_extract(payload, '$.new'), '-'), "
      "', ') FROM (SELECT payload FROM uc ORDER BY id)", zWant);
}

START_TEST(test_queue_stream_one_event_per_mutation){
  char *zDir = 0;
  sqlite3 *db = q_open("queue-stream", &zDir);
  KvEngine *pEng = 0;
  KvRoot *r = 0;
  KvConn *pConn;
  KvBuf k = {0, 0, 0};
  char *zErr = 0, *zStore;
  th_execf(db, "CREATE VIRTUAL TABLE users USING %s%s", azType[_i],
           _i==0 ? "(persistence=1)" : "");
  th_exec(db, "CREATE VIRTUAL TABLE uc USING kv_queue(source=users)");
  th_exec(db, "INSERT INTO users VALUES(1, 'a'), (2, 'b')");
  th_exec(db, "UPDATE users SET value='c' WHERE key=1");
  th_exec(db, "DELETE FROM users WHERE key=2");
  th_exec(db, "DELETE FROM users WHERE key=99");
  th_exec(db, "UPDATE users SET key=3 WHERE key=1");
  th_exec(db, "CREATE VIRTUAL TABLE by_v USING kv_index(source=users, "
              "expr='value', unique=1)");
  /* rolled back, refused by the unique index: no event */
  th_exec(db, "BEGIN; INSERT INTO users VALUES(4, 'd'); ROLLBACK");
  ck_assert_int_ne(th_try(db, "INSERT INTO users VALUES(5, 'c')", 0),
                   SQLITE_OK);
  /* kv_put and kv_delete through a handle */
  th_exec(db, "SELECT kv_put(h, 'users', 6, 'e'), kv_delete(h, 'users', 7), "
              "kv_commit(h) FROM (SELECT kv_begin() AS h)");
  q_ck_events(db, "insert 1 - a, insert 2 - b, update 1 a c, delete 2 b -, "
                  "insert 3 - c, delete 1 c -, insert 6 - e");
  th_text_is(db, "SELECT count(DISTINCT json_extract(payload, '$.tid')) FROM"
                 " uc", "5");
  th_text_is(db, "SELECT group_concat(json_extract(payload, '$.seq')=id, '')"
                 " FROM uc", "1111111");
  /* a delete by a root of origin KV_ORIGIN_EXPIRE is an expire */
  zStore = sqlite3_mprintf("%s/db-kv", zDir);
  ck_assert_int_eq(kv_engine_open(zStore, &pEng, &zErr), SQLITE_OK);
  pConn = kv_conn_new(db);
  ck_assert_int_eq(kv_root_begin(pEng, &r), SQLITE_OK);
  kv_root_set_origin(r, KV_ORIGIN_EXPIRE);
  ck_assert_int_eq(kv_key_append_int(&k, 6), SQLITE_OK);
  ck_assert_int_eq(kv_derived_write(pConn, r, "users", 5, k.a, k.n, 0, 0, 1,
                   KV_DERIVED_OLD_UNKNOWN, 0, 0, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_del(r, "users", 5, k.a, k.n, &zErr), SQLITE_OK);
  ck_assert_int_eq(kv_root_commit(r, &zErr), SQLITE_OK);
  kv_root_free(r);
  kv_conn_unref(pConn);
  kv_buf_free(&k);
  q_ck_events(db, "insert 1 - a, insert 2 - b, update 1 a c, delete 2 b -, "
                  "insert 3 - c, delete 1 c -, insert 6 - e, expire 6 e -");
  /* a projection, and DROP TABLE of the queue ends the stream */
  th_exec(db, "CREATE VIRTUAL TABLE up USING kv_queue(source=users, "
              "project='json_object(''v'', value, ''k'', key)')");
  th_exec(db, "INSERT INTO users VALUES(8, 'h')");
  th_text_is(db, "SELECT json_extract(payload, '$.new.v')||"
                 "json_extract(payload, '$.new.k') FROM up", "h8");
  th_exec(db, "DROP TABLE up");
  th_exec(db, "INSERT INTO users VALUES(9, 'i')");
  th_text_is(db, "SELECT count(*) FROM uc", "10");
  /* the queue itself refuses other writers */
  q_err_is(db, "SELECT kv_put(h, 'uc', 1, 2) FROM (SELECT kv_begin() AS h)",
           "is a queue");
  kv_engine_unref(pEng);
  sqlite3_free(zStore);
  sqlite3_free(zErr);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------ bad input -- */

START_TEST(test_queue_bad_input_changes_nothing){
  sqlite3 *db = q_open("queue-bad", 0);
  sqlite3_int64 iLease;
  char *z0, *z1;
  int i;
  static const struct { const char *zSql, *zErr; } aBad[] = {
    { "SELECT kv_enqueue('nope', 1)", "no such queue: nope" },
    { "SELECT kv_enqueue(NULL, 1)", "queue name must be non-empty text" },
    { "SELECT kv_enqueue('jobs', 1, -5)", "delay_ms must be at least 0" },
    { "SELECT kv_enqueue('jobs', 1, NULL)", "delay_ms must not be NULL" },
    { "SELECT kv_enqueue('jobs', 1, 'x')", "delay_ms must be an integer" },
    { "SELECT kv_queue_ack('jobs', 1, 12345)", "is not held by lease 12345" },
    { "SELECT kv_queue_ack('jobs', 1, NULL)", "lease id must not be NULL" },
    { "SELECT kv_queue_ack('jobs', NULL, 1)", "message id must not be NULL" },
    { "SELECT kv_queue_ack('jobs', 99, 1)", "has no message 99" },
    { "SELECT kv_queue_ack('nope', 1, 1)", "no such queue: nope" },
    { "SELECT kv_queue_ack('jobs', 2, 1)", "it is not leased" },
    { "SELECT kv_queue_nack('jobs', 1, 12345)", "is not held by lease" },
    { "SELECT kv_queue_nack('jobs', 1, 1, -1)", "delay_ms must be at least 0"},
    { "SELECT kv_queue_extend('jobs', 1, 1, 0)", "lease_ms must be at least 1"},
    { "SELECT kv_queue_extend('jobs', 1, 1, -100)", "lease_ms must be at least"},
    { "SELECT * FROM kv_queue_lease('jobs', 0, 100)", "n must be at least 1" },
    { "SELECT * FROM kv_queue_lease('jobs', 1, -100)", "lease_ms must be at" },
    { "SELECT * FROM kv_queue_lease('jobs', NULL, 100)", "n must not be NULL" },
    { "SELECT * FROM kv_queue_lease('nope', 1, 100)", "no such queue: nope" },
    { "SELECT kv_queue_requeue('jobs', 1)", "has no dead letter 1" },
    { "SELECT kv_queue_purge('jobs', 'x')", "must be an integer" },
    { "SELECT * FROM kv_queue_dead('nope')", "no such queue: nope" },
    { "SELECT kv_enqueue('plain', 1)", "no such queue: plain" },
    { "INSERT INTO jobs(id) VALUES(1)", "changes through its functions" },
    { "CREATE VIRTUAL TABLE q2 USING kv_queue(max_attempts=0)",
      "bad argument" },
    { "CREATE VIRTUAL TABLE q2 USING kv_queue(source=nope)",
      "no such source table: nope" },
    { "CREATE VIRTUAL TABLE q2 USING kv_queue(source=jobs)", "is a queue" },
    { "CREATE VIRTUAL TABLE q2 USING kv_queue(project='value')",
      "project= needs source=TABLE" },
    { "CREATE VIRTUAL TABLE q2 USING kv_queue(source=plain, project='(')",
      "bad projection" },
    { "CREATE VIRTUAL TABLE i2 USING kv_index(source=jobs, expr='value')",
      "is a queue" },
  };
  th_exec(db, "CREATE VIRTUAL TABLE jobs USING kv_queue;"
              "CREATE VIRTUAL TABLE plain USING kv_btree");
  th_exec(db, "SELECT kv_enqueue('jobs', 'a'), kv_enqueue('jobs', 'b', "
              "100000)");
  iLease = th_int(db, "SELECT lease_id FROM kv_queue_lease('jobs', 1, "
                      "60000)");
  ck_assert_int_ne(iLease, 12345);
  z0 = q_state(db, "jobs");
  for(i=0; i<(int)(sizeof(aBad)/sizeof(aBad[0])); i++){
    q_err_is(db, aBad[i].zSql, aBad[i].zErr);
    z1 = q_state(db, "jobs");
    ck_assert_msg(strcmp(z0, z1)==0, "%s changed %s into %s", aBad[i].zSql,
                  z0, z1);
    sqlite3_free(z1);
  }
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM kv_queue_stats"), 1);
  sqlite3_free(z0);
  sqlite3_close(db);
}
END_TEST

/* ----------------------------------------------------------- concurrency */

#define QC_THREADS 4
#define QC_MSG     400

typedef struct QcShared QcShared;
struct QcShared {
  const char *zPath;
  pthread_mutex_t mu;
  int aHolder[QC_MSG+1];        /* thread holding message i, 0: none */
  int aAcked[QC_MSG+1];
  int nAcked;
  int bOverlap;                 /* two threads held one message */
  int nErr;
  char zErr[256];
};
typedef struct QcArg QcArg;
struct QcArg { QcShared *p; int iThread; };

static void *qcConsumer(void *pArg){
  QcArg *a = (QcArg*)pArg;
  QcShared *p = a->p;
  sqlite3 *db = 0;
  sqlite3_stmt *pL = 0, *pA = 0;
  int nIdle = 0;
  if( sqlite3_open(p->zPath, &db)!=SQLITE_OK ) goto fail;
  sqlite3_busy_timeout(db, 10000);
  if( sqlite3_prepare_v2(db, "SELECT id, lease_id FROM "
        "kv_queue_lease('jobs', 3, 600000)", -1, &pL, 0)!=SQLITE_OK
   || sqlite3_prepare_v2(db, "SELECT kv_queue_ack('jobs', ?1, ?2)", -1, &pA,
                         0)!=SQLITE_OK ){
    goto fail;
  }
  while( nIdle<50 ){
    sqlite3_int64 aId[3], aLease[3];
    int n = 0, i, rc;
    while( (rc = sqlite3_step(pL))==SQLITE_ROW ){
      aId[n] = sqlite3_column_int64(pL, 0);
      aLease[n++] = sqlite3_column_int64(pL, 1);
    }
    sqlite3_reset(pL);
    if( rc!=SQLITE_DONE ) goto fail;
    if( n==0 ){ nIdle++; usleep(1000); continue; }
    nIdle = 0;
    pthread_mutex_lock(&p->mu);
    for(i=0; i<n; i++){
      if( aId[i]<1 || aId[i]>QC_MSG || p->aHolder[aId[i]] ) p->bOverlap = 1;
      else p->aHolder[aId[i]] = a->iThread;
    }
    pthread_mutex_unlock(&p->mu);
    for(i=0; i<n; i++){
      pthread_mutex_lock(&p->mu);
      p->aHolder[aId[i]] = 0;       /* released before the ack commits */
      pthread_mutex_unlock(&p->mu);
      sqlite3_bind_int64(pA, 1, aId[i]);
      sqlite3_bind_int64(pA, 2, aLease[i]);
      rc = sqlite3_step(pA);
      sqlite3_reset(pA);
      if( rc!=SQLITE_ROW ) goto fail;
      pthread_mutex_lock(&p->mu);
      p->aAcked[aId[i]]++;
      p->nAcked++;
      pthread_mutex_unlock(&p->mu);
    }
  }
  sqlite3_finalize(pL);
  sqlite3_finalize(pA);
  sqlite3_close(db);
  return 0;
fail:
  pthread_mutex_lock(&p->mu);
  p->nErr++;
  sqlite3_snprintf(sizeof(p->zErr), p->zErr, "%s",
                   db ? sqlite3_errmsg(db) : "open");
  pthread_mutex_unlock(&p->mu);
  sqlite3_finalize(pL);
  sqlite3_finalize(pA);
  sqlite3_close(db);
  return 0;
}

START_TEST(test_queue_concurrent_consumers_never_share_a_message){
  char *zDir = 0, *zPath;
  sqlite3 *db = q_open("queue-conc", &zDir);
  pthread_t aT[QC_THREADS];
  QcArg aA[QC_THREADS];
  QcShared *p = calloc(1, sizeof(QcShared));
  int i;
  th_exec(db, "CREATE VIRTUAL TABLE jobs USING kv_queue");
  th_exec(db, "BEGIN");
  for(i=0; i<QC_MSG; i++) th_execf(db, "SELECT kv_enqueue('jobs', %d)", i);
  th_exec(db, "COMMIT");
  zPath = sqlite3_mprintf("%s/db", zDir);
  p->zPath = zPath;
  pthread_mutex_init(&p->mu, 0);
  for(i=0; i<QC_THREADS; i++){
    aA[i].p = p; aA[i].iThread = i+1;
    ck_assert_int_eq(pthread_create(&aT[i], 0, qcConsumer, &aA[i]), 0);
  }
  for(i=0; i<QC_THREADS; i++) pthread_join(aT[i], 0);
  ck_assert_msg(p->nErr==0, "%s", p->zErr);
  ck_assert(!p->bOverlap);
  ck_assert_int_eq(p->nAcked, QC_MSG);
  for(i=1; i<=QC_MSG; i++) ck_assert_int_eq(p->aAcked[i], 1);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM jobs"), 0);
  pthread_mutex_destroy(&p->mu);
  free(p);
  sqlite3_free(zPath);
  sqlite3_close(db);
  sqlite3_free(zDir);
}
END_TEST

/* ------------------------------------------------------------- SIGKILL -- */

#define QK_MSG 300

/* Child "produce DIR SEED": random transactions of writes to users (a
** stream into uc) until killed.  Child "consume DIR SEED": leases from
** jobs and, per message, records it in done and acks it in one
** transaction, until killed. */
int depot_test_child(int argc, char **argv){
  sqlite3 *db;
  char *zPath;
  unsigned seed;
  if( argc!=3 ) return 2;
  sqlite3_auto_extension((void(*)(void))sqlite3_depot_init);
  zPath = sqlite3_mprintf("%s/db", argv[1]);
  if( sqlite3_open(zPath, &db)!=SQLITE_OK ) return 3;
  sqlite3_busy_timeout(db, 5000);
  seed = (unsigned)strtoul(argv[2], 0, 10);
  if( strcmp(argv[0], "produce")==0 ){
    for(;;){
      int k = rand_r(&seed)%40, n = 1 + rand_r(&seed)%4, i;
      sqlite3_exec(db, "BEGIN", 0, 0, 0);
      for(i=0; i<n; i++){
        char *zSql = sqlite3_mprintf(rand_r(&seed)%4==0
            ? "DELETE FROM users WHERE key=%d"
            : "INSERT OR REPLACE INTO users VALUES(%d, 'v%d')",
            (k+i)%40, rand_r(&seed));
        sqlite3_exec(db, zSql, 0, 0, 0);
        sqlite3_free(zSql);
      }
      sqlite3_exec(db, "COMMIT", 0, 0, 0);
    }
  }
  for(;;){
    sqlite3_stmt *pL = 0;
    sqlite3_int64 aId[4], aLease[4];
    int n = 0, i;
    sqlite3_prepare_v2(db, "SELECT id, lease_id FROM kv_queue_lease('jobs', "
                       "4, 600000)", -1, &pL, 0);
    while( sqlite3_step(pL)==SQLITE_ROW && n<4 ){
      aId[n] = sqlite3_column_int64(pL, 0);
      aLease[n++] = sqlite3_column_int64(pL, 1);
    }
    sqlite3_finalize(pL);
    if( n==0 ) usleep(1000);
    for(i=0; i<n; i++){
      char *zSql = sqlite3_mprintf("BEGIN; INSERT INTO done VALUES(%lld, 1);"
          "SELECT kv_queue_ack('jobs', %lld, %lld); COMMIT;", aId[i], aId[i],
          aLease[i]);
      if( sqlite3_exec(db, zSql, 0, 0, 0)!=SQLITE_OK ) return 9;
      sqlite3_free(zSql);
    }
  }
}

static void q_kill_after(const char *const azArg[], int ms){
  pid_t pid = th_spawn(azArg);
  int st;
  usleep((useconds_t)ms*1000);
  kill(pid, SIGKILL);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFSIGNALED(st), "the child ended by itself (%d)",
                WEXITSTATUS(st));
}

/* Replaying the events of uc in id order rebuilds users: every event's
** old value is the state before it, and the end state is the table. */
static void q_ck_replay(sqlite3 *db){
  sqlite3_stmt *pEv = 0;
  th_exec(db, "DROP TABLE IF EXISTS temp.st; CREATE TEMP TABLE st(k "
              "PRIMARY KEY, v)");
  ck_assert_int_eq(sqlite3_prepare_v2(db, "SELECT id, json_extract(payload, "
      "'$.op'), json_extract(payload, '$.key'), json_extract(payload, "
      "'$.old'), json_extract(payload, '$.new') FROM uc ORDER BY id", -1,
      &pEv, 0), SQLITE_OK);
  while( sqlite3_step(pEv)==SQLITE_ROW ){
    const char *zOp = (const char*)sqlite3_column_text(pEv, 1);
    int k = sqlite3_column_int(pEv, 2);
    const char *zOld = (const char*)sqlite3_column_text(pEv, 3);
    const char *zNew = (const char*)sqlite3_column_text(pEv, 4);
    char *zHave = th_textf(db, "SELECT v FROM st WHERE k=%d", k);
    ck_assert_msg((zOld==0)==(zHave==0) && (zOld==0 || strcmp(zOld, zHave)==0),
        "event %lld (%s %d): old %s, the state holds %s",
        sqlite3_column_int64(pEv, 0), zOp, k, zOld ? zOld : "-",
        zHave ? zHave : "-");
    ck_assert((strcmp(zOp, "insert")==0)==(zOld==0 && zNew!=0));
    if( zNew ) th_execf(db, "INSERT OR REPLACE INTO st VALUES(%d, %Q)", k,
                        zNew);
    else th_execf(db, "DELETE FROM st WHERE k=%d", k);
    sqlite3_free(zHave);
  }
  sqlite3_finalize(pEv);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM (SELECT key, value FROM "
      "users EXCEPT SELECT k, v FROM st)"), 0);
  ck_assert_int_eq(th_int(db, "SELECT count(*) FROM (SELECT k, v FROM st "
      "EXCEPT SELECT key, value FROM users)"), 0);
}

START_TEST(test_queue_sigkill_producer_stream_is_exact){
  char *zDir = 0, zSeed[16];
  sqlite3 *db;
  const char *azArg[4];
  int r;
  if( th_under_tsan() ) return;
  db = q_open("queue-kill-prod", &zDir);
  th_execf(db, "CREATE VIRTUAL TABLE users USING %s%s", azType[_i],
           _i==0 ? "(persistence=1)" : "");
  th_exec(db, "CREATE VIRTUAL TABLE uc USING kv_queue(source=users)");
  sqlite3_close(db);
  for(r=0; r<3; r++){
    sqlite3_snprintf(sizeof(zSeed), zSeed, "%d", 31*r + _i);
    azArg[0] = "produce"; azArg[1] = zDir; azArg[2] = zSeed; azArg[3] = 0;
    q_kill_after(azArg, 150 + (rand()%300));
    db = th_openf("%s/db", zDir);
    ck_assert_int_gt(th_int(db, "SELECT count(*) FROM uc"), 0);
    q_ck_replay(db);
    sqlite3_close(db);
  }
  sqlite3_free(zDir);
}
END_TEST

START_TEST(test_queue_sigkill_consumer_redelivers_unacked_only){
  char *zDir = 0, zSeed[16];
  sqlite3 *db;
  const char *azArg[4];
  int r, i;
  if( th_under_tsan() ) return;
  /* kv_btree and kv_log: the set-up closes the store cleanly */
  db = q_open("queue-kill-cons", &zDir);
  th_execf(db, "CREATE VIRTUAL TABLE jobs USING kv_queue(type=%s)",
           azType[1 + _i]);
  th_execf(db, "CREATE VIRTUAL TABLE done USING %s", azType[1 + _i]);
  th_exec(db, "BEGIN");
  for(i=1; i<=QK_MSG; i++) th_execf(db, "SELECT kv_enqueue('jobs', %d)", i);
  th_exec(db, "COMMIT");
  sqlite3_close(db);
  for(r=0; r<2; r++){
    sqlite3_int64 nDone, nLeft;
    sqlite3_snprintf(sizeof(zSeed), zSeed, "%d", r);
    azArg[0] = "consume"; azArg[1] = zDir; azArg[2] = zSeed; azArg[3] = 0;
    q_kill_after(azArg, 60 + (rand()%150));
    db = th_openf("%s/db", zDir);
    nDone = th_int(db, "SELECT count(*) FROM done");
    nLeft = th_int(db, "SELECT count(*) FROM jobs");
    /* acked exactly when done: none both, none neither */
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM jobs WHERE id IN "
                                "(SELECT key FROM done)"), 0);
    ck_assert_int_eq(nDone + nLeft, QK_MSG);
    /* the killed consumer's leases expire (and this round's leases of
    ** the round before): every unacked message is delivered again */
    th_execf(db, "SELECT kv_clock('offset', %d)", 700000*(r+1));
    ck_assert_int_eq(th_int(db, "SELECT count(*) FROM "
                                "kv_queue_lease('jobs', 100000, 1000)"), nLeft);
    th_exec(db, "SELECT kv_clock('wall')");
    sqlite3_close(db);
  }
  sqlite3_free(zDir);
}
END_TEST

Suite *depot_test_suite(void){
  Suite *s = suite_create("queue");
  TCase *tc = tcase_create("queue");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_queue_fifo_lease_ack, 0, 3);
  tcase_add_test(tc, test_queue_clock_expiry_nack_dead_letters);
  tcase_add_test(tc, test_queue_ack_in_consumer_transaction);
  tcase_add_test(tc, test_queue_ids_are_never_reused);
  tcase_add_test(tc, test_queue_late_commit_of_an_earlier_id_is_delivered);
  tcase_add_loop_test(tc, test_queue_stream_one_event_per_mutation, 0, 3);
  tcase_add_test(tc, test_queue_bad_input_changes_nothing);
  tcase_add_test(tc, test_queue_concurrent_consumers_never_share_a_message);
  suite_add_tcase(s, tc);
  tc = tcase_create("kill");
  tcase_set_timeout(tc, 600);
  tcase_add_loop_test(tc, test_queue_sigkill_producer_stream_is_exact, 0, 3);
  tcase_add_loop_test(tc, test_queue_sigkill_consumer_redelivers_unacked_only,
                      0, 2);
  suite_add_tcase(s, tc);
  return s;
}
