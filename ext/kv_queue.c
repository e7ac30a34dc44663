/*
** kv_queue.c -- durable queues on KV tables: the kv_queue table type, its
** consumer functions and listings.
**
**   CREATE VIRTUAL TABLE jobs USING kv_queue([dir=PATH][, type=kv_memory|
**       kv_btree|kv_log][, max_attempts=N][, source=TABLE[, project=EXPR]]);
**   SELECT kv_enqueue('jobs', payload[, delay_ms[, dir]]);       -- the id
**   SELECT * FROM kv_queue_lease('jobs', n, lease_ms[, dir]);
**       -- id, attempts, payload, lease_id, enqueued_at
**   SELECT kv_queue_ack('jobs', id, lease_id[, dir]);
**   SELECT kv_queue_nack('jobs', id, lease_id[, delay_ms[, error[, dir]]]);
**   SELECT kv_queue_extend('jobs', id, lease_id, lease_ms[, dir]);
**   SELECT * FROM kv_queue_dead('jobs'[, dir]);
**   SELECT kv_queue_requeue('jobs'[, id[, dir]]);   -- id NULL: all
**   SELECT kv_queue_purge('jobs'[, id[, dir]]);
**   SELECT * FROM kv_queue_stats[(dir)];
**   SELECT * FROM jobs;      -- id, state, attempts, payload, enqueued_at,
**                            -- visible_at, error (read-only)
**   DROP TABLE jobs;         -- removes the queue (and its change stream)
**
** Storage: one KV table per queue (ext/kv_queue.h); with source= the
** queue is the target of a change stream of that table (kv_stream.c) and
** takes its type and persistence, else type= (default kv_btree; a
** kv_memory queue, like a kv_memory table, survives a crash but not a
** clean close) with persistence 1, or kv_memory without persistence in
** an anonymous (in-memory) store.
**
** Transactions.  Inside an explicit SQL transaction kv_enqueue, ack,
** nack, extend, requeue and purge work in the transaction's KV root
** (joined through the anchor table as a KV read joins it, kv_vtab.c), so
** an ack commits or rolls back with the consumer's own writes; otherwise
** each call is its own root transaction, committed before it returns at
** the connection's kv_synchronous level, and retried on a conflict
** (QRETRY times).  A lease is always its own root transaction (a
** delivery is not taken back by the consumer's rollback: the message
** comes back when the lease expires); one that lost a message to a
** concurrent consumer scans again and takes the next ones.  Two
** consumers never hold one message: both write its record, and the
** engine's first-committer-wins check fails the second.
**
** Delivery: a lease takes, in id order, up to n messages whose visible_at
** has come (not delayed, not leased, or leased with an expired lease),
** adds one attempt and a new random lease id, and sets visible_at to the
** lease deadline.  A message whose attempts reached max_attempts (default
** 5) goes to the dead letters instead when its lease expires or it is
** nacked, with its last error.  ack, nack and extend name the message and
** its lease id; they succeed while that lease is the message's latest
** (also after its deadline, as long as no consumer leased it again).
** Every time is kv_clock_ms(), the injectable clock.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
#include "ext/kv_queue.h"
#include "ext/listing.h"
#include "ext/kv/kv.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define QRETRY       1000          /* conflicts an own root retries */
#define QBLOCK       1024          /* ids reserved per watermark commit */
#define QMAX_MS      ((int64_t)1e13) /* longest delay or lease (~300 y) */
#define QMAX_BATCH   100000
#define QDEFAULT_MAX 5
#define QFULL_MS     100           /* a lease scans from the head at least
                                   ** this often (see qLeaseOp) */

/* ------------------------------------------------------------ records --- */

static void qPut64(uint8_t *a, uint64_t v){
  int i;
  for(i=0; i<8; i++) a[i] = (uint8_t)(v>>(8*i));
}
static uint64_t qGet64(const uint8_t *a){
  uint64_t v = 0;
  int i;
  for(i=7; i>=0; i--) v = (v<<8) | a[i];
  return v;
}
static void qPut32(uint8_t *a, uint32_t v){
  a[0] = (uint8_t)v; a[1] = (uint8_t)(v>>8);
  a[2] = (uint8_t)(v>>16); a[3] = (uint8_t)(v>>24);
}
static uint32_t qGet32(const uint8_t *a){
  return (uint32_t)a[0] | ((uint32_t)a[1]<<8) | ((uint32_t)a[2]<<16)
       | ((uint32_t)a[3]<<24);
}

int kv_queue_key(int ePart, int64_t iId, KvBuf *pOut){
  int rc = kv_key_append_int(pOut, ePart);
  if( rc==SQLITE_OK && ePart!=KVQ_META ) rc = kv_key_append_int(pOut, iId);
  return rc;
}

int kv_queue_rec_encode(const KvqRec *p, KvBuf *pOut){
  KvBuf b = {0, 0, 0};
  uint8_t aHdr[KVQ_HDR];
  int rc;
  aHdr[0] = 1;
  qPut64(&aHdr[1], (uint64_t)p->iVisible);
  qPut64(&aHdr[9], (uint64_t)p->iEnqueued);
  qPut64(&aHdr[17], p->iLease);
  qPut32(&aHdr[25], p->nAttempt);
  qPut32(&aHdr[29], (uint32_t)p->nErr);
  rc = kv_buf_append(&b, aHdr, KVQ_HDR);
  if( rc==SQLITE_OK && p->nErr ) rc = kv_buf_append(&b, p->aErr, p->nErr);
  if( rc==SQLITE_OK && p->nPay ) rc = kv_buf_append(&b, p->aPay, p->nPay);
  if( rc==SQLITE_OK ) rc = kv_value_encode_blob(b.a, b.n, pOut);
  kv_buf_free(&b);
  return rc;
}

int kv_queue_rec_decode(const uint8_t *aVal, int nVal, KvqRec *p){
  KvDatum d;
  int rc = kv_value_decode(aVal, nVal, &d);
  memset(p, 0, sizeof(*p));
  if( rc!=SQLITE_OK ) return rc;
  /* a blob never needs zFree: its bytes are in aVal */
  if( d.eType!=SQLITE_BLOB || d.n<KVQ_HDR || d.z[0]!=1 || d.zFree ){
    kv_datum_clear(&d);
    return SQLITE_CORRUPT;
  }
  p->iVisible = (int64_t)qGet64(&d.z[1]);
  p->iEnqueued = (int64_t)qGet64(&d.z[9]);
  p->iLease = qGet64(&d.z[17]);
  p->nAttempt = qGet32(&d.z[25]);
  p->nErr = (int)qGet32(&d.z[29]);
  if( p->nErr<0 || p->nErr>d.n-KVQ_HDR ) return SQLITE_CORRUPT;
  p->aErr = &d.z[KVQ_HDR];
  p->aPay = &d.z[KVQ_HDR+p->nErr];
  p->nPay = d.n - KVQ_HDR - p->nErr;
  return SQLITE_OK;
}

/* The id of a message or dead-letter key (aKey starts with the part). */
static int qKeyId(const uint8_t *aKey, int nKey, int *pePart, int64_t *piId){
  int n = kv_key_length(aKey, nKey);
  KvDatum a, b;
  int rc;
  if( n<=0 || n>=nKey ) return SQLITE_CORRUPT;
  rc = kv_key_decode(aKey, n, 0, 0, &a);
  if( rc==SQLITE_OK ) rc = kv_key_decode(aKey+n, nKey-n, 0, 0, &b);
  if( rc!=SQLITE_OK ) return SQLITE_CORRUPT;
  if( a.eType!=SQLITE_INTEGER || b.eType!=SQLITE_INTEGER ) return SQLITE_CORRUPT;
  *pePart = (int)a.i;
  *piId = b.i;
  return SQLITE_OK;
}

/* ---------------------------------------------------------- allocator --- */

typedef struct QAlloc QAlloc;
struct QAlloc {
  char *zKey;                   /* store dir (or engine address), table id */
  int64_t iNext, iEnd;          /* the block in hand: [iNext, iEnd) */
  uint64_t iNonce;              /* written with iEnd */
  QAlloc *pNext;
};
static pthread_mutex_t qAllocMutex = PTHREAD_MUTEX_INITIALIZER;
static QAlloc *qAllocList = 0;

/* Commit the watermark (iEnd, iNonce) of queue zQ in its own root. */
static int qWatermarkWrite(KvEngine *pEng, const char *zQ, int nQ,
                           int64_t iEnd, uint64_t iNonce, char **pzErr){
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  uint8_t a[16];
  int rc, nTry = 0;
  qPut64(a, (uint64_t)iEnd);
  qPut64(a+8, iNonce);
  rc = kv_queue_key(KVQ_META, 0, &k);
  if( rc==SQLITE_OK ) rc = kv_value_encode_blob(a, 16, &v);
  while( rc==SQLITE_OK ){
    KvRoot *r = 0;
    rc = kv_root_begin(pEng, &r);
    if( rc==SQLITE_OK ) rc = kv_put(r, zQ, nQ, k.a, k.n, v.a, v.n, pzErr);
    if( rc==SQLITE_OK ) rc = kv_root_commit(r, pzErr);
    kv_root_free(r);
    if( rc!=SQLITE_BUSY_SNAPSHOT || ++nTry>QRETRY ) break;
    sqlite3_free(*pzErr);
    *pzErr = 0;
    rc = SQLITE_OK;
  }
  kv_buf_free(&k);
  kv_buf_free(&v);
  return rc;
}

int kv_queue_alloc(KvEngine *pEng, const char *zQ, int nQ, uint64_t iTabId,
                   KvqMemo *pMemo, int n, int64_t *piFirst, char **pzErr){
  const char *zDir = kv_engine_dir(pEng);
  char *zKey = 0;
  QAlloc *p = (QAlloc*)pMemo->pAlloc;
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  int64_t iW = 0;
  uint64_t iNonce = 0;
  int rc = SQLITE_OK, bFound = 0;
  if( p==0 ){
    if( zDir ){
      zKey = sqlite3_mprintf("%s\t%llu", zDir, (unsigned long long)iTabId);
    }else{
      zKey = sqlite3_mprintf("%p\t%llu", (void*)pEng,
                             (unsigned long long)iTabId);
    }
    if( zKey==0 ) return SQLITE_NOMEM;
  }
  pthread_mutex_lock(&qAllocMutex);
  if( p==0 ){
    for(p=qAllocList; p && strcmp(p->zKey, zKey); p=p->pNext){}
    if( p==0 ){
      p = sqlite3_malloc64(sizeof(*p));
      if( p==0 ){ rc = SQLITE_NOMEM; goto done; }
      memset(p, 0, sizeof(*p));
      p->zKey = zKey;
      zKey = 0;
      p->pNext = qAllocList;      /* entries live as long as the process */
      qAllocList = p;
    }
    pMemo->pAlloc = p;
    pMemo->iEnd = -1;
  }
  if( pMemo->iEnd!=p->iEnd || pMemo->iNonce!=p->iNonce || p->iEnd==0 ){
    rc = kv_queue_key(KVQ_META, 0, &k);
    if( rc==SQLITE_OK ){
      rc = kv_get(pEng, 0, zQ, nQ, k.a, k.n, &v, &bFound, pzErr);
    }
    if( rc!=SQLITE_OK ) goto done;
    if( bFound ){
      KvDatum d;
      if( kv_value_decode(v.a, v.n, &d)!=SQLITE_OK || d.eType!=SQLITE_BLOB
       || d.n!=16 ){
        kv_datum_clear(&d);
        *pzErr = sqlite3_mprintf("kv: queue %.*s: malformed id watermark",
                                 nQ, zQ);
        rc = SQLITE_CORRUPT;
        goto done;
      }
      iW = (int64_t)qGet64(d.z);
      iNonce = qGet64(d.z+8);
      kv_datum_clear(&d);
    }
    if( !bFound || iW!=p->iEnd || iNonce!=p->iNonce ){
      /* another process, or another store of this key, reserved since:
      ** the block in hand is not ours any more */
      p->iNext = p->iEnd = bFound ? iW : 1;
      p->iNonce = iNonce;
    }
    pMemo->iEnd = p->iEnd;
    pMemo->iNonce = p->iNonce;
  }
  if( p->iNext + n > p->iEnd ){
    int64_t iEnd = p->iNext + (n>QBLOCK ? n : QBLOCK);
    uint64_t iNew = 0;
    while( iNew==0 || iNew==p->iNonce ) sqlite3_randomness(8, &iNew);
    rc = qWatermarkWrite(pEng, zQ, nQ, iEnd, iNew, pzErr);
    if( rc!=SQLITE_OK ) goto done;
    p->iEnd = pMemo->iEnd = iEnd;
    p->iNonce = pMemo->iNonce = iNew;
  }
  *piFirst = p->iNext;
  p->iNext += n;
done:
  pthread_mutex_unlock(&qAllocMutex);
  sqlite3_free(zKey);
  kv_buf_free(&k);
  kv_buf_free(&v);
  return rc;
}

/* ----------------------------------------------------- the connection --- */

typedef struct QInfo QInfo;
typedef struct QConn QConn;

/* A queue as the catalog said at iSeq. */
struct QInfo {
  KvEngine *pEng;               /* no reference: the KvConn keeps it open */
  char *zName; int nName;
  uint64_t iSeq;
  int bQueue;                   /* the table exists and is a queue */
  uint64_t iId;                 /* its catalog id */
  int nMaxAttempt;
  char *zSource;                /* change stream source, or NULL */
  KvqMemo memo;                 /* its id allocation (kv_queue_alloc) */
  int64_t iHint;                /* leases: the first id the last scan met */
  int64_t iFullMs;              /* ... and when a scan last began at the
                                ** queue's head (monotonic ms) */
  QInfo *pNext;
};

struct QConn {
  int nRef;
  KvConn *pConn;                /* holds a reference */
  sqlite3 *db;                  /* private connection: catalog JSON */
  QInfo *pList;
  KvEngine *pDefault;           /* the default store, once resolved (the
                                ** KvConn keeps it open: no reference) */
};

static void qConnUnref(void *pArg){
  QConn *q = (QConn*)pArg;
  if( q==0 || --q->nRef>0 ) return;
  while( q->pList ){
    QInfo *p = q->pList;
    q->pList = p->pNext;
    sqlite3_free(p->zName);
    sqlite3_free(p->zSource);
    sqlite3_free(p);
  }
  sqlite3_close(q->db);
  kv_conn_unref(q->pConn);
  sqlite3_free(q);
}

static sqlite3 *qDb(QConn *q){
  if( q->db==0 ){
    if( sqlite3_open_v2(":memory:", &q->db, SQLITE_OPEN_READWRITE
                        |SQLITE_OPEN_MEMORY|SQLITE_OPEN_PRIVATECACHE, 0) ){
      sqlite3_close(q->db);
      q->db = 0;
    }
  }
  return q->db;
}


/* The queue zName of pEng, fresh as of the catalog now; an error naming
** it when the table is missing or is no queue. */
static int qInfo(QConn *q, KvEngine *pEng, const char *zName, QInfo **pp,
                 char **pzErr){
  int nName = (int)strlen(zName);
  QInfo *p;
  *pp = 0;
  for(p=q->pList; p; p=p->pNext){
    if( p->pEng==pEng && p->nName==nName && memcmp(p->zName, zName, nName)==0 ){
      break;
    }
  }
  if( p==0 ){
    p = sqlite3_malloc64(sizeof(*p));
    if( p==0 ) return SQLITE_NOMEM;
    memset(p, 0, sizeof(*p));
    p->zName = sqlite3_mprintf("%s", zName);
    if( p->zName==0 ){ sqlite3_free(p); return SQLITE_NOMEM; }
    p->nName = nName;
    p->pEng = pEng;
    p->iSeq = (uint64_t)-1;
    p->pNext = q->pList;
    q->pList = p;
  }
  if( p->iSeq!=kv_engine_catalog_seq(pEng) ){
    KvMeta m;
    int bFound = 0, rc;
    uint64_t iSeq = kv_engine_catalog_seq(pEng);
    char *zQ = 0, *zMax = 0;
    p->bQueue = 0;
    sqlite3_free(p->zSource);
    p->zSource = 0;
    rc = kv_table_meta(pEng, 0, zName, nName, &m, &bFound);
    if( rc==SQLITE_OK && bFound && m.zOptions ){
      rc = depot_json_text(qDb(q), m.zOptions, "$.queue", &zQ);
      if( rc==SQLITE_OK && zQ ){
        rc = depot_json_text(qDb(q), m.zOptions, "$.max_attempts", &zMax);
        if( rc==SQLITE_OK ) rc = depot_json_text(qDb(q), m.zOptions, "$.source",
                                          &p->zSource);
        p->bQueue = 1;
        if( p->iId!=m.iId ){
          memset(&p->memo, 0, sizeof(p->memo));
          p->iHint = 0;
        }
        p->iId = m.iId;
        p->nMaxAttempt = zMax ? atoi(zMax) : QDEFAULT_MAX;
        if( p->nMaxAttempt<1 ) p->nMaxAttempt = QDEFAULT_MAX;
      }
    }
    kv_meta_clear(&m);
    sqlite3_free(zQ);
    sqlite3_free(zMax);
    if( rc!=SQLITE_OK ) return rc;
    p->iSeq = iSeq;
  }
  if( !p->bQueue ){
    const char *zDir = kv_engine_dir(pEng);
    *pzErr = sqlite3_mprintf("kv: no such queue: %s (store %s)", zName,
                             zDir ? zDir : "in memory");
    return SQLITE_ERROR;
  }
  *pp = p;
  return SQLITE_OK;
}

/* ------------------------------------------------------------- roots --- */

/* The SQL transaction's root on store pEng, joining it through the anchor
** table (kv_vtab.c, "Reads") when the transaction has none yet. */
static int qSqlRoot(QConn *q, KvEngine *pEng, KvRoot **ppRoot, char **pzErr){
  KvConn *pConn = q->pConn;
  KvRoot *r;
  int rc = SQLITE_OK;
  *ppRoot = 0;
  if( pConn->pSqlRoot==0 ){
    sqlite3 *db = pConn->db;
    sqlite3_stmt *pStmt = 0;
    pConn->pJoinEng = pEng;
    rc = sqlite3_table_column_metadata(db, "temp", "kv_sql_txn_anchor", 0, 0,
                                       0, 0, 0, 0);
    if( rc==SQLITE_ERROR ){
      rc = sqlite3_exec(db, "CREATE VIRTUAL TABLE temp.kv_sql_txn_anchor "
                        "USING kv_sql_txn_anchor", 0, 0, 0);
    }else if( rc==SQLITE_OK ){
      rc = sqlite3_prepare_v2(db, "UPDATE temp.kv_sql_txn_anchor SET x=x "
                              "WHERE 0", -1, &pStmt, 0);
      if( rc==SQLITE_OK && sqlite3_step(pStmt)!=SQLITE_DONE ){
        rc = sqlite3_extended_errcode(db);
      }
      sqlite3_finalize(pStmt);
    }
    pConn->pJoinEng = 0;
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv: a queue operation inside a transaction "
                               "could not join it: %s", sqlite3_errmsg(db));
      return rc;
    }
    if( pConn->pSqlRoot==0 ){
      *pzErr = sqlite3_mprintf("kv: a queue operation inside a transaction "
          "could not join it (temp.kv_sql_txn_anchor is not the anchor "
          "table)");
      return SQLITE_ERROR;
    }
  }
  r = pConn->pSqlRoot;
  if( kv_root_engine(r)!=pEng ){
    const char *zA = kv_engine_dir(kv_root_engine(r));
    const char *zB = kv_engine_dir(pEng);
    *pzErr = sqlite3_mprintf("kv: one transaction uses the tables of one "
        "store only: the queue is in store %s, the transaction is bound to "
        "store %s", zB ? zB : "(memory)", zA ? zA : "(memory)");
    return SQLITE_ERROR;
  }
  if( kv_root_state(r)==KV_ROOT_PREPARED ) rc = kv_root_unprepare(r, pzErr);
  if( rc==SQLITE_OK && kv_root_state(r)!=KV_ROOT_ACTIVE ){
    *pzErr = sqlite3_mprintf("kv: the transaction failed and was rolled "
                             "back");
    rc = SQLITE_ABORT;
  }
  if( rc==SQLITE_OK ) *ppRoot = r;
  return rc;
}

/* Run xOp(pArg, root): in the open SQL transaction (unless bOwn), or in
** a root of its own committed here, retrying xOp from the start on a conflict. */
static int qRun(QConn *q, KvEngine *pEng, int bOwn,
                int (*xOp)(void*, KvRoot*, char**), void *pArg,
                char **pzErr){
  int nTry = 0, rc;
  if( !bOwn && !sqlite3_get_autocommit(q->pConn->db) ){
    KvRoot *r = 0;
    rc = qSqlRoot(q, pEng, &r, pzErr);
    if( rc==SQLITE_OK ) rc = xOp(pArg, r, pzErr);
    return rc;
  }
  for(;;){
    KvRoot *r = 0;
    rc = kv_root_begin(pEng, &r);
    if( rc==SQLITE_OK ){
      kv_root_set_sync(r, q->pConn->eSync);
      rc = xOp(pArg, r, pzErr);
    }
    if( rc==SQLITE_OK ) rc = kv_root_commit(r, pzErr);
    kv_root_free(r);
    if( rc!=SQLITE_BUSY_SNAPSHOT || ++nTry>QRETRY ) return rc;
    sqlite3_free(*pzErr);
    *pzErr = 0;
    if( nTry>4 ) sqlite3_sleep(nTry>20 ? 2 : 1);
  }
}

/* ---------------------------------------------------------- arguments --- */

static int qNameArg(sqlite3_value *v, const char *zFunc, const char **pz,
                    char **pzErr){
  *pz = depot_text_value(v);
  if( *pz==0 ){
    *pzErr = sqlite3_mprintf("kv: %s: the queue name must be non-empty "
                             "text", zFunc);
    return SQLITE_MISMATCH;
  }
  return SQLITE_OK;
}

/* An integer argument zWhat in [iMin, iMax]. */
static int qIntArg(sqlite3_value *v, const char *zFunc, const char *zWhat,
                   int64_t iMin, int64_t iMax, int64_t *pi, char **pzErr){
  sqlite3_int64 i = 0;
  if( sqlite3_value_type(v)==SQLITE_NULL ){
    *pzErr = sqlite3_mprintf("kv: %s: %s must not be NULL", zFunc, zWhat);
    return SQLITE_MISMATCH;
  }
  if( !depot_value_int64(v, &i) ){
    *pzErr = sqlite3_mprintf("kv: %s: %s must be an integer, got %s", zFunc,
                             zWhat, kv_value_type_name(v));
    return SQLITE_MISMATCH;
  }
  if( i<iMin ){
    *pzErr = sqlite3_mprintf("kv: %s: %s must be at least %lld, got %lld",
                             zFunc, zWhat, (long long)iMin, (long long)i);
    return SQLITE_RANGE;
  }
  if( i>iMax ){
    *pzErr = sqlite3_mprintf("kv: %s: %s must be at most %lld, got %lld",
                             zFunc, zWhat, (long long)iMax, (long long)i);
    return SQLITE_RANGE;
  }
  *pi = i;
  return SQLITE_OK;
}

/* The store of the optional dir argument (an existing store); the
** default store is resolved once per connection. */
static int qStore(QConn *q, sqlite3_value *pDir, KvEngine **ppEng,
                  char **pzErr){
  int rc;
  int bDefault = pDir==0 || sqlite3_value_type(pDir)==SQLITE_NULL;
  if( bDefault && q->pDefault ){
    *ppEng = kv_engine_ref(q->pDefault);
    return SQLITE_OK;
  }
  rc = kv_conn_store_arg(q->pConn, pDir, 1, ppEng, pzErr);
  if( rc==SQLITE_OK && bDefault ) q->pDefault = *ppEng;
  return rc;
}

static uint64_t qNewLease(void){
  uint64_t x = 0;
  while( x==0 ){
    sqlite3_randomness(8, &x);
    x &= 0x7fffffffffffffffULL;
  }
  return x;
}

/* ------------------------------------------------------------ enqueue --- */

typedef struct QEnq QEnq;
struct QEnq {
  QInfo *pInfo;
  int64_t iId, iDelay;
  KvBuf key, rec;
  sqlite3_value *pPay;
};

static int qEnqueueOp(void *pArg, KvRoot *r, char **pzErr){
  QEnq *e = (QEnq*)pArg;
  KvqRec rec;
  KvBuf pay = {0, 0, 0};
  int64_t iNow = kv_clock_ms();
  int rc = kv_value_encode(0, e->pPay, &pay, pzErr);
  memset(&rec, 0, sizeof(rec));
  rec.iVisible = iNow + e->iDelay;
  rec.iEnqueued = iNow;
  rec.aPay = pay.a; rec.nPay = pay.n;
  kv_buf_reset(&e->rec);
  if( rc==SQLITE_OK ) rc = kv_queue_rec_encode(&rec, &e->rec);
  if( rc==SQLITE_OK ){
    rc = kv_put(r, e->pInfo->zName, e->pInfo->nName, e->key.a, e->key.n,
                e->rec.a, e->rec.n, pzErr);
  }
  kv_buf_free(&pay);
  return rc;
}

/* kv_enqueue(queue, payload[, delay_ms[, dir]]) -> the message id */
static void qEnqueueFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  QConn *q = (QConn*)sqlite3_user_data(ctx);
  KvEngine *pEng = 0;
  const char *zQ = 0;
  char *zErr = 0;
  QEnq e;
  int rc;
  memset(&e, 0, sizeof(e));
  rc = kv_conn_writable(q->pConn->db, "kv_enqueue", &zErr);
  if( rc==SQLITE_OK ) rc = qNameArg(argv[0], "kv_enqueue", &zQ, &zErr);
  if( rc==SQLITE_OK && argc>2 ){
    rc = qIntArg(argv[2], "kv_enqueue", "delay_ms", 0, QMAX_MS, &e.iDelay,
                 &zErr);
  }
  if( rc==SQLITE_OK ) rc = qStore(q, argc>3 ? argv[3] : 0, &pEng, &zErr);
  if( rc==SQLITE_OK ) rc = qInfo(q, pEng, zQ, &e.pInfo, &zErr);
  if( rc==SQLITE_OK ){
    rc = kv_queue_alloc(pEng, zQ, e.pInfo->nName, e.pInfo->iId,
                        &e.pInfo->memo, 1, &e.iId, &zErr);
  }
  if( rc==SQLITE_OK ) rc = kv_queue_key(KVQ_MSG, e.iId, &e.key);
  if( rc==SQLITE_OK ){
    e.pPay = argv[1];
    rc = qRun(q, pEng, 0, qEnqueueOp, &e, &zErr);
  }
  if( rc==SQLITE_OK ) sqlite3_result_int64(ctx, e.iId);
  else kv_sql_error(ctx, rc, zErr);
  kv_buf_free(&e.key);
  kv_buf_free(&e.rec);
  kv_engine_unref(pEng);
}

/* ------------------------------------------------- ack, nack, extend --- */

#define QOP_ACK    0
#define QOP_NACK   1
#define QOP_EXTEND 2

typedef struct QMsgOp QMsgOp;
struct QMsgOp {
  QInfo *pInfo;
  int eOp;
  int64_t iId;
  int64_t iLease;
  int64_t iMs;                  /* nack: delay; extend: lease length */
  const char *zErr; int nErrText; /* nack: the error text */
  int64_t iResult;              /* extend: the deadline; nack: 1 if dead */
  const char *zFunc;
};

/* Move message record *p (key aKey) to the dead letters in r, with error
** text z/n (NULL: keep its last error) and the time iNow. */
static int qToDead(KvRoot *r, QInfo *pInfo, int64_t iId, const KvqRec *p,
                   const char *z, int n, int64_t iNow, char **pzErr){
  KvBuf kMsg = {0, 0, 0}, kDead = {0, 0, 0}, v = {0, 0, 0};
  KvqRec d = *p;
  int rc;
  d.iVisible = iNow;
  d.iLease = 0;
  if( z ){ d.aErr = (const uint8_t*)z; d.nErr = n; }
  rc = kv_queue_key(KVQ_MSG, iId, &kMsg);
  if( rc==SQLITE_OK ) rc = kv_queue_key(KVQ_DEAD, iId, &kDead);
  if( rc==SQLITE_OK ) rc = kv_queue_rec_encode(&d, &v);
  if( rc==SQLITE_OK ){
    rc = kv_del(r, pInfo->zName, pInfo->nName, kMsg.a, kMsg.n, pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = kv_put(r, pInfo->zName, pInfo->nName, kDead.a, kDead.n, v.a, v.n,
                pzErr);
  }
  kv_buf_free(&kMsg); kv_buf_free(&kDead); kv_buf_free(&v);
  return rc;
}

static int qMsgOp(void *pArg, KvRoot *r, char **pzErr){
  QMsgOp *o = (QMsgOp*)pArg;
  QInfo *pI = o->pInfo;
  KvBuf k = {0, 0, 0}, v = {0, 0, 0}, nv = {0, 0, 0};
  KvqRec rec;
  int64_t iNow = kv_clock_ms();
  int bFound = 0;
  int rc = kv_queue_key(KVQ_MSG, o->iId, &k);
  /* no read to register: every outcome but an error writes the key, and
  ** the write conflicts with any commit of it after the snapshot */
  if( rc==SQLITE_OK ){
    rc = kv_peek(r, pI->zName, pI->nName, k.a, k.n, &v, &bFound, pzErr);
  }
  if( rc==SQLITE_OK && !bFound ){
    *pzErr = sqlite3_mprintf("kv: %s: queue %s has no message %lld (it was "
        "acked, dead-lettered or never enqueued)", o->zFunc, pI->zName,
        (long long)o->iId);
    rc = SQLITE_NOTFOUND;
  }
  if( rc==SQLITE_OK ) rc = kv_queue_rec_decode(v.a, v.n, &rec);
  if( rc==SQLITE_OK && (rec.iLease==0 || rec.iLease!=(uint64_t)o->iLease) ){
    *pzErr = sqlite3_mprintf("kv: %s: message %lld of queue %s is not held "
        "by lease %lld (%s)", o->zFunc, (long long)o->iId, pI->zName,
        (long long)o->iLease, rec.iLease==0 ? "it is not leased"
        : "a later lease took it, or the lease id is wrong");
    rc = SQLITE_CONSTRAINT;
  }
  if( rc==SQLITE_OK ){
    switch( o->eOp ){
      case QOP_ACK:
        rc = kv_del(r, pI->zName, pI->nName, k.a, k.n, pzErr);
        break;
      case QOP_NACK:
        if( (int64_t)rec.nAttempt>=pI->nMaxAttempt ){
          o->iResult = 1;
          rc = qToDead(r, pI, o->iId, &rec, o->zErr ? o->zErr : "nacked",
                       o->zErr ? o->nErrText : 6, iNow, pzErr);
        }else{
          o->iResult = 0;
          rec.iLease = 0;
          rec.iVisible = iNow + o->iMs;
          if( o->zErr ){
            rec.aErr = (const uint8_t*)o->zErr; rec.nErr = o->nErrText;
          }
          rc = kv_queue_rec_encode(&rec, &nv);
          if( rc==SQLITE_OK ){
            rc = kv_put(r, pI->zName, pI->nName, k.a, k.n, nv.a, nv.n, pzErr);
          }
        }
        break;
      default:
        rec.iVisible = iNow + o->iMs;
        o->iResult = rec.iVisible;
        rc = kv_queue_rec_encode(&rec, &nv);
        if( rc==SQLITE_OK ){
          rc = kv_put(r, pI->zName, pI->nName, k.a, k.n, nv.a, nv.n, pzErr);
        }
        break;
    }
  }
  kv_buf_free(&k); kv_buf_free(&v); kv_buf_free(&nv);
  return rc;
}

/* kv_queue_ack(queue, id, lease_id[, dir]),
** kv_queue_nack(queue, id, lease_id[, delay_ms[, error[, dir]]]),
** kv_queue_extend(queue, id, lease_id, lease_ms[, dir]) */
static void qMsgFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv,
                     int eOp){
  static const char *azFunc[] = {"kv_queue_ack", "kv_queue_nack",
                                 "kv_queue_extend"};
  QConn *q = (QConn*)sqlite3_user_data(ctx);
  KvEngine *pEng = 0;
  const char *zQ = 0;
  char *zErr = 0;
  QMsgOp o;
  int iDir = eOp==QOP_ACK ? 3 : eOp==QOP_NACK ? 5 : 4;
  int rc;
  memset(&o, 0, sizeof(o));
  o.eOp = eOp;
  o.zFunc = azFunc[eOp];
  rc = kv_conn_writable(q->pConn->db, o.zFunc, &zErr);
  if( rc==SQLITE_OK ) rc = qNameArg(argv[0], o.zFunc, &zQ, &zErr);
  if( rc==SQLITE_OK ){
    rc = qIntArg(argv[1], o.zFunc, "the message id", 1, INT64_MAX, &o.iId,
                 &zErr);
  }
  if( rc==SQLITE_OK ){
    rc = qIntArg(argv[2], o.zFunc, "the lease id", 1, INT64_MAX, &o.iLease,
                 &zErr);
  }
  if( rc==SQLITE_OK && eOp==QOP_EXTEND ){
    rc = qIntArg(argv[3], o.zFunc, "lease_ms", 1, QMAX_MS, &o.iMs, &zErr);
  }
  if( rc==SQLITE_OK && eOp==QOP_NACK && argc>3 ){
    rc = qIntArg(argv[3], o.zFunc, "delay_ms", 0, QMAX_MS, &o.iMs, &zErr);
  }
  if( rc==SQLITE_OK && eOp==QOP_NACK && argc>4
   && sqlite3_value_type(argv[4])!=SQLITE_NULL ){
    o.zErr = (const char*)sqlite3_value_text(argv[4]);
    o.nErrText = sqlite3_value_bytes(argv[4]);
    if( o.zErr==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = qStore(q, argc>iDir ? argv[iDir] : 0, &pEng, &zErr);
  if( rc==SQLITE_OK ) rc = qInfo(q, pEng, zQ, &o.pInfo, &zErr);
  if( rc==SQLITE_OK ) rc = qRun(q, pEng, 0, qMsgOp, &o, &zErr);
  if( rc!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
  }else if( eOp==QOP_ACK ){
    sqlite3_result_int(ctx, 1);
  }else if( eOp==QOP_NACK ){
    sqlite3_result_text(ctx, o.iResult ? "dead" : "queued", -1, SQLITE_STATIC);
  }else{
    sqlite3_result_int64(ctx, o.iResult);
  }
  kv_engine_unref(pEng);
}

static void qAckFunc(sqlite3_context *c, int n, sqlite3_value **a){
  qMsgFunc(c, n, a, QOP_ACK);
}
static void qNackFunc(sqlite3_context *c, int n, sqlite3_value **a){
  qMsgFunc(c, n, a, QOP_NACK);
}
static void qExtendFunc(sqlite3_context *c, int n, sqlite3_value **a){
  qMsgFunc(c, n, a, QOP_EXTEND);
}

/* ---------------------------------------------------- requeue, purge --- */

typedef struct QDeadOp QDeadOp;
struct QDeadOp {
  QInfo *pInfo;
  int bRequeue;
  int bAll;
  int64_t iId;
  int64_t nDone;
  const char *zFunc;
};

static int qDeadOne(QDeadOp *o, KvRoot *r, const uint8_t *aKey, int nKey,
                    const uint8_t *aVal, int nVal, int64_t iId,
                    char **pzErr){
  QInfo *pI = o->pInfo;
  int rc = kv_del(r, pI->zName, pI->nName, aKey, nKey, pzErr);
  if( rc==SQLITE_OK && o->bRequeue ){
    KvqRec rec;
    KvBuf k = {0, 0, 0}, v = {0, 0, 0};
    rc = kv_queue_rec_decode(aVal, nVal, &rec);
    if( rc==SQLITE_OK ){
      rec.nAttempt = 0;
      rec.iLease = 0;
      rec.iVisible = kv_clock_ms();
      rc = kv_queue_key(KVQ_MSG, iId, &k);
    }
    if( rc==SQLITE_OK ) rc = kv_queue_rec_encode(&rec, &v);
    if( rc==SQLITE_OK ){
      rc = kv_put(r, pI->zName, pI->nName, k.a, k.n, v.a, v.n, pzErr);
    }
    kv_buf_free(&k); kv_buf_free(&v);
  }
  if( rc==SQLITE_OK ) o->nDone++;
  return rc;
}

static int qDeadOp(void *pArg, KvRoot *r, char **pzErr){
  QDeadOp *o = (QDeadOp*)pArg;
  QInfo *pI = o->pInfo;
  KvBuf lo = {0, 0, 0}, hi = {0, 0, 0};
  int rc;
  o->nDone = 0;
  if( !o->bAll ){
    KvBuf v = {0, 0, 0};
    int bFound = 0;
    rc = kv_queue_key(KVQ_DEAD, o->iId, &lo);
    if( rc==SQLITE_OK ){
      rc = kv_get(kv_root_engine(r), r, pI->zName, pI->nName, lo.a, lo.n, &v,
                  &bFound, pzErr);
    }
    if( rc==SQLITE_OK && !bFound ){
      *pzErr = sqlite3_mprintf("kv: %s: queue %s has no dead letter %lld",
                               o->zFunc, pI->zName, (long long)o->iId);
      rc = SQLITE_NOTFOUND;
    }
    if( rc==SQLITE_OK ) rc = qDeadOne(o, r, lo.a, lo.n, v.a, v.n, o->iId,
                                      pzErr);
    kv_buf_free(&v);
  }else{
    KvIter *pIter = 0;
    KvBound bLo, bHi;
    rc = kv_key_append_int(&lo, KVQ_DEAD);
    if( rc==SQLITE_OK ) rc = kv_key_append_int(&hi, KVQ_DEAD+1);
    bLo.aKey = lo.a; bLo.nKey = lo.n; bLo.bIncl = 1;
    bHi.aKey = hi.a; bHi.nKey = hi.n; bHi.bIncl = 0;
    if( rc==SQLITE_OK ) rc = kv_root_bind(r, pI->zName, pI->nName, pzErr);
    if( rc==SQLITE_OK ){
      rc = kv_iter_open(kv_root_engine(r), r, pI->zName, pI->nName, &bLo,
                        &bHi, 0, &pIter, pzErr);
    }
    while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
      const KvMapEntry *e = kv_iter_current(pIter);
      int ePart;
      int64_t iId;
      rc = qKeyId(e->aKey, e->nKey, &ePart, &iId);
      if( rc==SQLITE_OK ){
        rc = qDeadOne(o, r, e->aKey, e->nKey, e->aVal, e->nVal, iId, pzErr);
      }
      if( rc==SQLITE_OK ) kv_iter_next(pIter);
    }
    if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
    kv_iter_close(pIter);
  }
  kv_buf_free(&lo); kv_buf_free(&hi);
  return rc;
}

/* kv_queue_requeue(queue[, id[, dir]]), kv_queue_purge(...): the number
** of dead letters moved back to the queue (attempts 0) or removed. */
static void qDeadFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv,
                      int bRequeue){
  QConn *q = (QConn*)sqlite3_user_data(ctx);
  KvEngine *pEng = 0;
  const char *zQ = 0;
  char *zErr = 0;
  QDeadOp o;
  int rc;
  memset(&o, 0, sizeof(o));
  o.bRequeue = bRequeue;
  o.zFunc = bRequeue ? "kv_queue_requeue" : "kv_queue_purge";
  o.bAll = argc<2 || sqlite3_value_type(argv[1])==SQLITE_NULL;
  rc = kv_conn_writable(q->pConn->db, o.zFunc, &zErr);
  if( rc==SQLITE_OK ) rc = qNameArg(argv[0], o.zFunc, &zQ, &zErr);
  if( rc==SQLITE_OK && !o.bAll ){
    rc = qIntArg(argv[1], o.zFunc, "the message id", 1, INT64_MAX, &o.iId,
                 &zErr);
  }
  if( rc==SQLITE_OK ) rc = qStore(q, argc>2 ? argv[2] : 0, &pEng, &zErr);
  if( rc==SQLITE_OK ) rc = qInfo(q, pEng, zQ, &o.pInfo, &zErr);
  if( rc==SQLITE_OK ) rc = qRun(q, pEng, 0, qDeadOp, &o, &zErr);
  if( rc==SQLITE_OK && bRequeue ) o.pInfo->iHint = 0;
  if( rc==SQLITE_OK ) sqlite3_result_int64(ctx, o.nDone);
  else kv_sql_error(ctx, rc, zErr);
  kv_engine_unref(pEng);
}
static void qRequeueFunc(sqlite3_context *c, int n, sqlite3_value **a){
  qDeadFunc(c, n, a, 1);
}
static void qPurgeFunc(sqlite3_context *c, int n, sqlite3_value **a){
  qDeadFunc(c, n, a, 0);
}

/* -------------------------------------------------------------- lease --- */

typedef struct QLease QLease;
struct QLease {
  QInfo *pInfo;
  int64_t n, iLeaseMs;
  int nGot;
  KvBuf out;                    /* per leased message: id, attempts, lease,
                                ** enqueued (8 bytes each), payload length
                                ** (4), payload value encoding */
};

static int64_t qMonoMs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000 + ts.tv_nsec/1000000;
}

/* One lease.  The scan starts at the first id the connection's previous
** scan met (every message present then has an id at least that, and acks
** only remove messages), not at the queue's head, where the deletes of
** acked messages a kv_btree or kv_log table has not collected yet would
** be walked again by every lease; at least every QFULL_MS, and after a
** requeue, it starts at the head, which finds a message whose producer
** committed after that scan with an id given before it. */
static int qLeaseOp(void *pArg, KvRoot *r, char **pzErr){
  QLease *l = (QLease*)pArg;
  QInfo *pI = l->pInfo;
  KvBuf lo = {0, 0, 0}, hi = {0, 0, 0}, v = {0, 0, 0};
  KvIter *pIter = 0;
  KvBound bLo, bHi;
  int64_t iNow = kv_clock_ms(), iMono = qMonoMs();
  int rc, bFirst = 1;
  l->nGot = 0;
  kv_buf_reset(&l->out);
  if( pI->iHint<=0 || iMono - pI->iFullMs >= QFULL_MS ){
    pI->iHint = 0;
    pI->iFullMs = iMono;
  }
  rc = kv_queue_key(KVQ_MSG, pI->iHint, &lo);
  if( rc==SQLITE_OK ) rc = kv_key_append_int(&hi, KVQ_MSG+1);
  bLo.aKey = lo.a; bLo.nKey = lo.n; bLo.bIncl = 1;
  bHi.aKey = hi.a; bHi.nKey = hi.n; bHi.bIncl = 0;
  if( rc==SQLITE_OK ) rc = kv_root_bind(r, pI->zName, pI->nName, pzErr);
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(kv_root_engine(r), r, pI->zName, pI->nName, &bLo, &bHi,
                      0, &pIter, pzErr);
  }
  while( rc==SQLITE_OK && l->nGot<l->n && !kv_iter_eof(pIter) ){
    const KvMapEntry *e = kv_iter_current(pIter);
    KvqRec rec;
    int ePart;
    int64_t iId;
    rc = kv_queue_rec_decode(e->aVal, e->nVal, &rec);
    if( rc==SQLITE_OK ) rc = qKeyId(e->aKey, e->nKey, &ePart, &iId);
    if( rc==SQLITE_OK && bFirst ){
      pI->iHint = iId;
      bFirst = 0;
    }
    if( rc==SQLITE_OK && rec.iVisible<=iNow ){
      if( (int64_t)rec.nAttempt>=pI->nMaxAttempt ){
        /* its last lease expired: it has had its attempts */
        char *z = rec.nErr ? 0 : sqlite3_mprintf("lease expired (attempt "
                                                 "%u)", rec.nAttempt);
        rc = qToDead(r, pI, iId, &rec, z, z ? (int)strlen(z) : 0, iNow,
                     pzErr);
        sqlite3_free(z);
      }else{
        uint8_t a[36];
        rec.nAttempt++;
        rec.iLease = qNewLease();
        rec.iVisible = iNow + l->iLeaseMs;
        kv_buf_reset(&v);
        qPut64(a, (uint64_t)iId);
        qPut64(a+8, rec.nAttempt);
        qPut64(a+16, rec.iLease);
        qPut64(a+24, (uint64_t)rec.iEnqueued);
        qPut32(a+32, (uint32_t)rec.nPay);
        rc = kv_buf_append(&l->out, a, 36);
        if( rc==SQLITE_OK ) rc = kv_buf_append(&l->out, rec.aPay, rec.nPay);
        if( rc==SQLITE_OK ) rc = kv_queue_rec_encode(&rec, &v);
        if( rc==SQLITE_OK ){
          rc = kv_put(r, pI->zName, pI->nName, e->aKey, e->nKey, v.a, v.n,
                      pzErr);
        }
        l->nGot++;
      }
    }
    if( rc==SQLITE_OK ) kv_iter_next(pIter);
  }
  if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
  if( rc==SQLITE_CORRUPT && *pzErr==0 ){
    *pzErr = sqlite3_mprintf("kv: queue %s holds a malformed message",
                             pI->zName);
  }
  kv_iter_close(pIter);
  kv_buf_free(&lo); kv_buf_free(&hi); kv_buf_free(&v);
  return rc;
}

/* kv_queue_lease(queue, n, lease_ms[, dir]) */
static int qLeaseRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  QConn *q = (QConn*)p->pAux;
  KvEngine *pEng = 0;
  const char *zQ = 0;
  QLease l;
  int rc, i, off = 0;
  memset(&l, 0, sizeof(l));
  rc = kv_conn_writable(q->pConn->db, "kv_queue_lease", pzErr);
  if( rc==SQLITE_OK ){
    if( apArg[0]==0 || apArg[1]==0 || apArg[2]==0 ){
      *pzErr = sqlite3_mprintf("kv: kv_queue_lease: queue, n and lease_ms "
                               "are required");
      rc = SQLITE_ERROR;
    }
  }
  if( rc==SQLITE_OK ) rc = qNameArg(apArg[0], "kv_queue_lease", &zQ, pzErr);
  if( rc==SQLITE_OK ){
    rc = qIntArg(apArg[1], "kv_queue_lease", "n", 1, QMAX_BATCH, &l.n, pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = qIntArg(apArg[2], "kv_queue_lease", "lease_ms", 1, QMAX_MS,
                 &l.iLeaseMs, pzErr);
  }
  if( rc==SQLITE_OK ) rc = qStore(q, apArg[3], &pEng, pzErr);
  if( rc==SQLITE_OK ) rc = qInfo(q, pEng, zQ, &l.pInfo, pzErr);
  if( rc==SQLITE_OK ) rc = qRun(q, pEng, 1, qLeaseOp, &l, pzErr);
  for(i=0; rc==SQLITE_OK && i<l.nGot; i++){
    const uint8_t *a = l.out.a + off;
    int nPay = (int)qGet32(a+32);
    depot_rows_int(p, (sqlite3_int64)qGet64(a));
    depot_rows_int(p, (sqlite3_int64)qGet64(a+8));
    depot_rows_cell(p, DEPOT_CELL_VALUE, 0, a+36, nPay);
    depot_rows_int(p, (sqlite3_int64)qGet64(a+16));
    rc = depot_rows_int(p, (sqlite3_int64)qGet64(a+24));
    off += 36 + nPay;
  }
  kv_buf_free(&l.out);
  kv_engine_unref(pEng);
  return rc;
}

static const DepotListingCol aLeaseCol[] = {
  DEPOT_COLUMN("id", "INTEGER"),
  DEPOT_COLUMN("attempts", "INTEGER"),
  DEPOT_COLUMN("payload", 0),
  DEPOT_COLUMN("lease_id", "INTEGER"),
  DEPOT_COLUMN("enqueued_at", "INTEGER"),
  DEPOT_ARGUMENT("queue"),
  DEPOT_ARGUMENT("n"),
  DEPOT_ARGUMENT("lease_ms"),
  DEPOT_ARGUMENT("dir"),
};
static const DepotListing leaseListing = {
  "kv_queue_lease", 9, aLeaseCol, 3, SQLITE_VTAB_DIRECTONLY, 10.0, 0,
  qLeaseRows
};

/* --------------------------------------------------- listings: dead --- */

/* The entries of part ePart of queue pI, as of now (or the SQL root). */
static int qScan(QConn *q, QInfo *pI, int ePart, KvIter **ppIter,
                 char **pzErr){
  KvBuf lo = {0, 0, 0}, hi = {0, 0, 0};
  KvBound bLo, bHi;
  KvRoot *r = q->pConn->pSqlRoot;
  int rc = kv_key_append_int(&lo, ePart);
  if( rc==SQLITE_OK ) rc = kv_key_append_int(&hi, ePart+1);
  bLo.aKey = lo.a; bLo.nKey = lo.n; bLo.bIncl = 1;
  bHi.aKey = hi.a; bHi.nKey = hi.n; bHi.bIncl = 0;
  if( r && (kv_root_engine(r)!=pI->pEng || kv_root_state(r)!=KV_ROOT_ACTIVE) ){
    r = 0;
  }
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pI->pEng, r, pI->zName, pI->nName, &bLo, &bHi, 0,
                      ppIter, pzErr);
  }
  kv_buf_free(&lo); kv_buf_free(&hi);
  return rc;
}

/* kv_queue_dead(queue[, dir]): id, attempts, payload, error, enqueued_at,
** dead_at */
static int qDeadRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  QConn *q = (QConn*)p->pAux;
  KvEngine *pEng = 0;
  KvIter *pIter = 0;
  QInfo *pI = 0;
  const char *zQ = 0;
  int rc = qNameArg(apArg[0], "kv_queue_dead", &zQ, pzErr);
  if( rc==SQLITE_OK ) rc = qStore(q, apArg[1], &pEng, pzErr);
  if( rc==SQLITE_OK ) rc = qInfo(q, pEng, zQ, &pI, pzErr);
  if( rc==SQLITE_OK ) rc = qScan(q, pI, KVQ_DEAD, &pIter, pzErr);
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
    const KvMapEntry *e = kv_iter_current(pIter);
    KvqRec rec;
    int ePart;
    int64_t iId;
    rc = kv_queue_rec_decode(e->aVal, e->nVal, &rec);
    if( rc==SQLITE_OK ) rc = qKeyId(e->aKey, e->nKey, &ePart, &iId);
    if( rc==SQLITE_OK ){
      depot_rows_int(p, iId);
      depot_rows_int(p, rec.nAttempt);
      depot_rows_cell(p, DEPOT_CELL_VALUE, 0, rec.aPay, rec.nPay);
      if( rec.nErr ) depot_rows_cell(p, DEPOT_CELL_TEXT, 0, rec.aErr, rec.nErr);
      else depot_rows_null(p);
      depot_rows_int(p, rec.iEnqueued);
      rc = depot_rows_int(p, rec.iVisible);
      kv_iter_next(pIter);
    }
  }
  if( rc==SQLITE_OK && pIter ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  kv_engine_unref(pEng);
  return rc;
}

static const DepotListingCol aDeadCol[] = {
  DEPOT_COLUMN("id", "INTEGER"),
  DEPOT_COLUMN("attempts", "INTEGER"),
  DEPOT_COLUMN("payload", 0),
  DEPOT_COLUMN("error", "TEXT"),
  DEPOT_COLUMN("enqueued_at", "INTEGER"),
  DEPOT_COLUMN("dead_at", "INTEGER"),
  DEPOT_ARGUMENT("queue"),
  DEPOT_ARGUMENT("dir"),
};
static const DepotListing deadListing = {
  "kv_queue_dead", 8, aDeadCol, 1, SQLITE_VTAB_INNOCUOUS, 100.0, 0,
  qDeadRows
};

/* -------------------------------------------------- listings: stats --- */

typedef struct QStatCtx QStatCtx;
struct QStatCtx {
  QConn *q;
  KvEngine *pEng;
  DepotRows *pRows;
  int nName; char **azName;     /* the store's tables */
};

static int qStatTable(void *pCtx, const char *zName, const char *zType,
                      const KvBackendStats *pSt){
  QStatCtx *c = (QStatCtx*)pCtx;
  char **a = sqlite3_realloc64(c->azName, (c->nName+1)*sizeof(char*));
  (void)zType; (void)pSt;
  if( a==0 ) return SQLITE_NOMEM;
  c->azName = a;
  if( (a[c->nName] = sqlite3_mprintf("%s", zName))==0 ) return SQLITE_NOMEM;
  c->nName++;
  return SQLITE_OK;
}

/* The row of queue pI. */
static int qStatRow(QStatCtx *c, QInfo *pI, char **pzErr){
  DepotRows *p = c->pRows;
  KvIter *pIter = 0;
  int64_t nDepth = 0, nReady = 0, nLeased = 0, nDelayed = 0, nDead = 0;
  int64_t iOldest = -1, iNow = kv_clock_ms();
  int rc = qScan(c->q, pI, KVQ_MSG, &pIter, pzErr);
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
    const KvMapEntry *e = kv_iter_current(pIter);
    KvqRec rec;
    rc = kv_queue_rec_decode(e->aVal, e->nVal, &rec);
    if( rc==SQLITE_OK ){
      nDepth++;
      if( rec.iVisible<=iNow ) nReady++;
      else if( rec.iLease ) nLeased++;
      else nDelayed++;
      if( iOldest<0 || rec.iEnqueued<iOldest ) iOldest = rec.iEnqueued;
      kv_iter_next(pIter);
    }
  }
  if( rc==SQLITE_OK && pIter ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  pIter = 0;
  if( rc==SQLITE_OK ) rc = qScan(c->q, pI, KVQ_DEAD, &pIter, pzErr);
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
    nDead++;
    kv_iter_next(pIter);
  }
  if( rc==SQLITE_OK && pIter ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  if( rc!=SQLITE_OK ) return rc;
  depot_rows_text(p, kv_engine_dir(c->pEng));
  depot_rows_text(p, pI->zName);
  depot_rows_int(p, nDepth);
  depot_rows_int(p, nReady);
  depot_rows_int(p, nLeased);
  depot_rows_int(p, nDelayed);
  depot_rows_int(p, nDead);
  if( iOldest<0 ) depot_rows_null(p);
  else depot_rows_int(p, iNow>iOldest ? iNow-iOldest : 0);
  depot_rows_int(p, pI->nMaxAttempt);
  return depot_rows_text(p, pI->zSource);
}

/* kv_queue_stats[(dir)]: one row per queue of the store. */
static int qStatsRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  QStatCtx c;
  int i, rc;
  memset(&c, 0, sizeof(c));
  c.q = (QConn*)p->pAux;
  c.pRows = p;
  rc = qStore(c.q, apArg[0], &c.pEng, pzErr);
  if( rc==SQLITE_OK ) rc = kv_engine_table_stats(c.pEng, 0, qStatTable, &c);
  for(i=0; rc==SQLITE_OK && i<c.nName; i++){
    QInfo *pI = 0;
    char *zIgnore = 0;
    int rcQ = qInfo(c.q, c.pEng, c.azName[i], &pI, &zIgnore);
    sqlite3_free(zIgnore);
    if( rcQ==SQLITE_NOMEM ) rc = rcQ;
    else if( rcQ==SQLITE_OK ) rc = qStatRow(&c, pI, pzErr);
  }
  for(i=0; i<c.nName; i++) sqlite3_free(c.azName[i]);
  sqlite3_free(c.azName);
  kv_engine_unref(c.pEng);
  return rc;
}

static const DepotListingCol aStatsCol[] = {
  DEPOT_COLUMN("store", "TEXT"),
  DEPOT_COLUMN("queue", "TEXT"),
  DEPOT_COLUMN("depth", "INTEGER"),
  DEPOT_COLUMN("ready", "INTEGER"),
  DEPOT_COLUMN("leased", "INTEGER"),
  DEPOT_COLUMN("delayed", "INTEGER"),
  DEPOT_COLUMN("dead", "INTEGER"),
  DEPOT_COLUMN("oldest_age_ms", "INTEGER"),
  DEPOT_COLUMN("max_attempts", "INTEGER"),
  DEPOT_COLUMN("source", "TEXT"),
  DEPOT_ARGUMENT("dir"),
};
static const DepotListing statsListing = {
  "kv_queue_stats", 11, aStatsCol, 0, SQLITE_VTAB_INNOCUOUS, 10.0, 0,
  qStatsRows
};

/* ---------------------------------------------------- the kv_queue table */

typedef struct QTable QTable;
typedef struct QCursor QCursor;
struct QTable {
  sqlite3_vtab base;            /* must be first */
  QConn *q;                     /* holds a reference */
  KvEngine *pEng;               /* holds a reference */
  char *zName;
};
struct QCursor {
  sqlite3_vtab_cursor base;     /* must be first */
  KvIter *pIter;
  int ePart;                    /* part of the current entry */
  int64_t iId;
  KvqRec rec;
  int64_t iNow;
  sqlite3_int64 iRow;
};

/* The arguments of CREATE VIRTUAL TABLE ... USING kv_queue(...). */
typedef struct QArgs QArgs;
struct QArgs {
  char *zDir, *zType, *zSource, *zProject;
  int nMax;
};

static void qArgsFree(QArgs *a){
  sqlite3_free(a->zDir); sqlite3_free(a->zType);
  sqlite3_free(a->zSource); sqlite3_free(a->zProject);
}

/* key=value, the value unquoted ('x' or "x", doubled quotes inside). */
static int qArgParse(const char *zArg, QArgs *a, char **pzErr){
  const char *zEq = strchr(zArg, '=');
  char *zK = 0, *zV = 0, **pz = 0;
  int n, i, j;
  if( zEq==0 ) goto bad;
  zK = sqlite3_mprintf("%.*s", (int)(zEq-zArg), zArg);
  zV = sqlite3_mprintf("%s", zEq+1);
  if( zK==0 || zV==0 ){ sqlite3_free(zK); sqlite3_free(zV); return SQLITE_NOMEM; }
  for(n=(int)strlen(zK); n>0 && zK[n-1]==' '; n--) zK[n-1] = 0;
  for(i=0; zV[i]==' '; i++){}
  memmove(zV, zV+i, strlen(zV+i)+1);
  for(n=(int)strlen(zV); n>0 && zV[n-1]==' '; n--) zV[n-1] = 0;
  if( n>=2 && (zV[0]=='\'' || zV[0]=='"') && zV[n-1]==zV[0] ){
    char qc = zV[0];
    for(i=1, j=0; i<n-1; i++){
      zV[j++] = zV[i];
      if( zV[i]==qc && zV[i+1]==qc && i+1<n-1 ) i++;
    }
    zV[j] = 0;
  }
  {
    const char *zKey = zK;
    while( *zKey==' ' ) zKey++;
    if( sqlite3_stricmp(zKey, "dir")==0 ) pz = &a->zDir;
    else if( sqlite3_stricmp(zKey, "type")==0 ) pz = &a->zType;
    else if( sqlite3_stricmp(zKey, "source")==0 ) pz = &a->zSource;
    else if( sqlite3_stricmp(zKey, "project")==0 ) pz = &a->zProject;
    else if( sqlite3_stricmp(zKey, "max_attempts")==0 && a->nMax==0 ){
      char *zEnd = 0;
      long v = strtol(zV, &zEnd, 10);
      if( zV[0]==0 || *zEnd || v<1 || v>1000000 ) goto bad;
      a->nMax = (int)v;
      sqlite3_free(zK); sqlite3_free(zV);
      return SQLITE_OK;
    }
  }
  if( pz==0 || *pz || zV[0]==0 ) goto bad;
  if( pz==&a->zType && strcmp(zV, "kv_memory") && strcmp(zV, "kv_btree")
   && strcmp(zV, "kv_log") ){
    goto bad;
  }
  *pz = zV;
  sqlite3_free(zK);
  return SQLITE_OK;
bad:
  sqlite3_free(zK); sqlite3_free(zV);
  *pzErr = sqlite3_mprintf("kv: bad argument '%s': expected dir=PATH, "
      "type=kv_memory|kv_btree|kv_log, max_attempts=N (1 to 1000000), "
      "source=TABLE or project=EXPR (each once)", zArg);
  return SQLITE_ERROR;
}

/* Declare queue zName (and its change stream) in one root. */
typedef struct QDecl QDecl;
struct QDecl {
  sqlite3 *db;
  const char *zName;
  QArgs *a;
};


static int qDeclareStep(KvRoot *r, QDecl *d, char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  QArgs *a = d->a;
  const char *zType = a->zType ? a->zType
                    : kv_engine_dir(pEng) ? "kv_btree" : "kv_memory";
  char *zOpt = 0, *zSrcOpt = 0, *zNewSrc = 0, *zSql;
  int bPersist = kv_engine_dir(pEng)!=0, bCreated = 0, rc = SQLITE_OK;
  KvMeta m;
  memset(&m, 0, sizeof(m));
  if( a->zSource ){
    int bFound = 0;
    char *zOf = 0;
    rc = kv_table_meta(pEng, 0, a->zSource, (int)strlen(a->zSource), &m,
                       &bFound);
    if( rc==SQLITE_OK && !bFound ){
      const char *zDir = kv_engine_dir(pEng);
      *pzErr = sqlite3_mprintf("kv: no such source table: %s (store %s)",
                               a->zSource, zDir ? zDir : "in memory");
      rc = SQLITE_ERROR;
    }
    if( rc==SQLITE_OK && m.zOptions ){
      rc = depot_json_text(d->db, m.zOptions, "$.source", &zOf);
      if( rc==SQLITE_OK && zOf==0 ){
        rc = depot_json_text(d->db, m.zOptions, "$.queue", &zOf);
      }
      if( rc==SQLITE_OK && zOf ){
        *pzErr = sqlite3_mprintf("kv: %s is a queue, index or counter; a "
            "change stream is declared on a plain KV table", a->zSource);
        rc = SQLITE_ERROR;
      }
      sqlite3_free(zOf);
    }
    if( rc==SQLITE_OK ){
      zType = m.zType;
      bPersist = m.bPersist;
      zSrcOpt = m.zOptions;
      m.zOptions = 0;
    }
  }
  if( rc==SQLITE_OK ){
    zSql = sqlite3_mprintf("SELECT json_object('queue', 1, 'max_attempts', "
        "%d, 'source', %Q, 'project', %Q)", a->nMax ? a->nMax : QDEFAULT_MAX,
        a->zSource, a->zProject);
    rc = zSql ? depot_sql_text(d->db, zSql, 0, 0, &zOpt) : SQLITE_NOMEM;
    sqlite3_free(zSql);
  }
  if( rc==SQLITE_OK ){
    rc = kv_create_table(r, d->zName, (int)strlen(d->zName), zType, bPersist,
                         zOpt, &bCreated, pzErr);
    if( rc==SQLITE_OK && !bCreated ){
      *pzErr = sqlite3_mprintf("kv: table %s exists in the store", d->zName);
      rc = SQLITE_ERROR;
    }
  }
  if( rc==SQLITE_OK && a->zSource ){
    rc = depot_sql_text(d->db,
        "SELECT json_set(CASE WHEN json_valid(?1) THEN ?1 ELSE '{}' END, "
        "'$.streams', json_insert(coalesce(CASE WHEN "
        "json_valid(?1) THEN json_extract(?1, '$.streams') END, '[]'), "
        "'$[#]', ?2))", zSrcOpt, d->zName, &zNewSrc);
    if( rc==SQLITE_OK ){
      rc = kv_table_set_options(r, a->zSource, (int)strlen(a->zSource),
                                zNewSrc, pzErr);
    }
  }
  kv_meta_clear(&m);
  sqlite3_free(zOpt); sqlite3_free(zSrcOpt); sqlite3_free(zNewSrc);
  return rc;
}

/* Remove queue zName; its source (if it still lists it) stops streaming. */
static int qRemoveStep(KvRoot *r, QDecl *d, char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  KvMeta m, s;
  char *zSrc = 0, *zNew = 0;
  int bFound = 0, bSrc = 0;
  int rc = kv_table_meta(pEng, 0, d->zName, (int)strlen(d->zName), &m,
                         &bFound);
  memset(&s, 0, sizeof(s));
  if( rc==SQLITE_OK && bFound ){
    rc = kv_remove_table(r, d->zName, (int)strlen(d->zName), pzErr);
  }
  if( rc==SQLITE_OK && bFound && m.zOptions ){
    rc = depot_json_text(d->db, m.zOptions, "$.source", &zSrc);
  }
  if( rc==SQLITE_OK && zSrc ){
    rc = kv_table_meta(pEng, 0, zSrc, (int)strlen(zSrc), &s, &bSrc);
    if( rc==SQLITE_OK && bSrc && s.zOptions ){
      rc = depot_sql_text(d->db,
          "SELECT json_set(?1, '$.streams', json((SELECT "
          "json_group_array(value) FROM json_each(?1, '$.streams') WHERE "
          "value<>?2)))", s.zOptions, d->zName, &zNew);
      if( rc==SQLITE_OK ){
        rc = kv_table_set_options(r, zSrc, (int)strlen(zSrc), zNew, pzErr);
      }
    }
  }
  kv_meta_clear(&m); kv_meta_clear(&s);
  sqlite3_free(zSrc); sqlite3_free(zNew);
  return rc;
}

/* One schema step in its own root, retried on a conflict. */
static int qSchema(KvEngine *pEng, int (*xStep)(KvRoot*, QDecl*, char**),
                   QDecl *d, char **pzErr){
  int nTry = 0, rc;
  for(;;){
    KvRoot *r = 0;
    rc = kv_root_begin(pEng, &r);
    if( rc==SQLITE_OK ) rc = xStep(r, d, pzErr);
    if( rc==SQLITE_OK ) rc = kv_root_commit(r, pzErr);
    kv_root_free(r);
    if( rc!=SQLITE_BUSY_SNAPSHOT || ++nTry>QRETRY ) return rc;
    sqlite3_free(*pzErr);
    *pzErr = 0;
  }
}

/* A projection must be one deterministic expression over key and value. */
static int qCheckExpr(sqlite3 *db, const char *zExpr, char **pzErr){
  sqlite3_stmt *pStmt = 0;
  const char *zTail = 0;
  char *zSql = sqlite3_mprintf("CREATE TEMP TABLE kv_queue_check(key, "
                               "value, x AS (%s))", zExpr);
  int rc;
  if( zSql==0 ) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, &zTail);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: bad projection '%s': %s (a projection is "
        "one deterministic SQL expression over key and value, without "
        "subqueries)", zExpr, sqlite3_errmsg(db));
  }else if( zTail && zTail[strspn(zTail, " \t\r\n;")] ){
    *pzErr = sqlite3_mprintf("kv: bad projection '%s': one expression "
                             "expected", zExpr);
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(zSql);
  return rc;
}

static void qTableFree(QTable *p){
  if( p==0 ) return;
  kv_engine_unref(p->pEng);
  qConnUnref(p->q);
  sqlite3_free(p->zName);
  sqlite3_free(p->base.zErrMsg);
  sqlite3_free(p);
}

static int qInit(sqlite3 *db, void *pAux, int argc, const char *const*argv,
                 sqlite3_vtab **ppVtab, char **pzErr, int bCreate){
  QConn *q = (QConn*)pAux;
  QTable *p = 0;
  QArgs a;
  int i, rc = SQLITE_OK;
  memset(&a, 0, sizeof(a));
  for(i=3; rc==SQLITE_OK && i<argc; i++) rc = qArgParse(argv[i], &a, pzErr);
  if( rc==SQLITE_OK && a.zProject && a.zSource==0 ){
    *pzErr = sqlite3_mprintf("kv: project= needs source=TABLE");
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK && a.zSource && a.zType ){
    *pzErr = sqlite3_mprintf("kv: a change stream's queue takes the type of "
                             "its source: give type= or source=, not both");
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK && a.zProject ){
    rc = qDb(q) ? qCheckExpr(qDb(q), a.zProject, pzErr) : SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ){
    p = sqlite3_malloc64(sizeof(*p));
    if( p==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ){
    memset(p, 0, sizeof(*p));
    q->nRef++;
    p->q = q;
    p->zName = sqlite3_mprintf("%s", argv[2]);
    if( p->zName==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = kv_conn_store(q->pConn, a.zDir, argv[1], &p->pEng,
                                         pzErr);
  if( rc==SQLITE_OK ){
    rc = sqlite3_declare_vtab(db, "CREATE TABLE x(id INTEGER, state TEXT, "
        "attempts INTEGER, payload, enqueued_at INTEGER, visible_at INTEGER, "
        "error TEXT)");
  }
  if( rc==SQLITE_OK && bCreate ){
    QDecl d;
    if( !sqlite3_get_autocommit(db) ){
      *pzErr = sqlite3_mprintf("kv: queue %s is declared in its own "
          "transaction; not inside BEGIN ... COMMIT", p->zName);
      rc = SQLITE_MISUSE;
    }else if( qDb(q)==0 ){
      rc = SQLITE_NOMEM;
    }else{
      d.db = qDb(q); d.zName = p->zName; d.a = &a;
      rc = kv_name_check(p->zName, (int)strlen(p->zName), pzErr);
      if( rc==SQLITE_OK ) rc = qSchema(p->pEng, qDeclareStep, &d, pzErr);
    }
  }
  qArgsFree(&a);
  if( rc!=SQLITE_OK ){
    qTableFree(p);
    return rc;
  }
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = &p->base;
  return SQLITE_OK;
}

static int qCreate(sqlite3 *db, void *pAux, int argc, const char *const*argv,
                   sqlite3_vtab **pp, char **pzErr){
  return qInit(db, pAux, argc, argv, pp, pzErr, 1);
}
static int qConnect(sqlite3 *db, void *pAux, int argc, const char *const*argv,
                    sqlite3_vtab **pp, char **pzErr){
  return qInit(db, pAux, argc, argv, pp, pzErr, 0);
}
static int qDisconnect(sqlite3_vtab *pVtab){
  qTableFree((QTable*)pVtab);
  return SQLITE_OK;
}
static int qDestroy(sqlite3_vtab *pVtab){
  QTable *p = (QTable*)pVtab;
  QDecl d;
  char *zErr = 0;
  int rc;
  if( !sqlite3_get_autocommit(p->q->pConn->db) ){
    p->base.zErrMsg = sqlite3_mprintf("kv: DROP TABLE %s removes the queue "
        "in its own transaction; not inside BEGIN ... COMMIT", p->zName);
    return SQLITE_MISUSE;
  }
  d.db = qDb(p->q); d.zName = p->zName; d.a = 0;
  rc = d.db ? qSchema(p->pEng, qRemoveStep, &d, &zErr) : SQLITE_NOMEM;
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: DROP TABLE failed");
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = zErr;
    return rc;
  }
  qTableFree(p);
  return SQLITE_OK;
}

static int qBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  (void)pVtab;
  pInfo->estimatedCost = 1e5;
  return SQLITE_OK;
}

static int qOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCsr){
  QCursor *c = sqlite3_malloc64(sizeof(*c));
  (void)pVtab;
  if( c==0 ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *ppCsr = &c->base;
  return SQLITE_OK;
}
static int qClose(sqlite3_vtab_cursor *pCsr){
  QCursor *c = (QCursor*)pCsr;
  kv_iter_close(c->pIter);
  sqlite3_free(c);
  return SQLITE_OK;
}

/* Settle on the current entry: decode it, skip the watermark. */
static int qSettle(QCursor *c){
  QTable *p = (QTable*)c->base.pVtab;
  while( !kv_iter_eof(c->pIter) ){
    const KvMapEntry *e = kv_iter_current(c->pIter);
    int rc = qKeyId(e->aKey, e->nKey, &c->ePart, &c->iId);
    if( rc==SQLITE_OK ) rc = kv_queue_rec_decode(e->aVal, e->nVal, &c->rec);
    if( rc==SQLITE_OK ) return SQLITE_OK;
    if( kv_key_length(e->aKey, e->nKey)==e->nKey ){
      kv_iter_next(c->pIter);     /* the watermark row */
      continue;
    }
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = sqlite3_mprintf("kv: queue %s holds a malformed "
                                      "entry", p->zName);
    return SQLITE_CORRUPT;
  }
  {
    char *zErr = 0;
    int rc = kv_iter_error(c->pIter, &zErr);
    if( rc!=SQLITE_OK ){
      sqlite3_free(p->base.zErrMsg);
      p->base.zErrMsg = zErr;
    }
    return rc;
  }
}

static int qFilter(sqlite3_vtab_cursor *pCsr, int idxNum, const char *idxStr,
                   int argc, sqlite3_value **argv){
  QCursor *c = (QCursor*)pCsr;
  QTable *p = (QTable*)pCsr->pVtab;
  QInfo *pI = 0;
  char *zErr = 0;
  int rc;
  (void)idxNum; (void)idxStr; (void)argc; (void)argv;
  kv_iter_close(c->pIter);
  c->pIter = 0;
  c->iRow = 0;
  c->iNow = kv_clock_ms();
  rc = qInfo(p->q, p->pEng, p->zName, &pI, &zErr);
  if( rc==SQLITE_OK ){
    KvRoot *r = p->q->pConn->pSqlRoot;
    if( r && (kv_root_engine(r)!=p->pEng || kv_root_state(r)!=KV_ROOT_ACTIVE) ){
      r = 0;
    }
    rc = kv_iter_open(p->pEng, r, p->zName, (int)strlen(p->zName), 0, 0, 0,
                      &c->pIter, &zErr);
  }
  if( rc==SQLITE_OK ) return qSettle(c);
  sqlite3_free(p->base.zErrMsg);
  p->base.zErrMsg = zErr;
  return rc;
}

static int qNext(sqlite3_vtab_cursor *pCsr){
  QCursor *c = (QCursor*)pCsr;
  kv_iter_next(c->pIter);
  c->iRow++;
  return qSettle(c);
}

static int qEof(sqlite3_vtab_cursor *pCsr){
  QCursor *c = (QCursor*)pCsr;
  return c->pIter==0 || kv_iter_eof(c->pIter);
}

static int qColumn(sqlite3_vtab_cursor *pCsr, sqlite3_context *ctx, int i){
  QCursor *c = (QCursor*)pCsr;
  KvqRec *r = &c->rec;
  switch( i ){
    case 0: sqlite3_result_int64(ctx, c->iId); break;
    case 1: {
      const char *z = c->ePart==KVQ_DEAD ? "dead"
          : r->iVisible<=c->iNow ? "ready" : r->iLease ? "leased" : "delayed";
      sqlite3_result_text(ctx, z, -1, SQLITE_STATIC);
      break;
    }
    case 2: sqlite3_result_int64(ctx, r->nAttempt); break;
    case 3: return kv_value_result(ctx, r->aPay, r->nPay);
    case 4: sqlite3_result_int64(ctx, r->iEnqueued); break;
    case 5: sqlite3_result_int64(ctx, r->iVisible); break;
    default:
      if( r->nErr ){
        sqlite3_result_text(ctx, (const char*)r->aErr, r->nErr,
                            SQLITE_TRANSIENT);
      }
      break;
  }
  return SQLITE_OK;
}

static int qRowid(sqlite3_vtab_cursor *pCsr, sqlite3_int64 *pRowid){
  *pRowid = ((QCursor*)pCsr)->iRow;
  return SQLITE_OK;
}

static int qUpdate(sqlite3_vtab *pVtab, int argc, sqlite3_value **argv,
                   sqlite3_int64 *pRowid){
  QTable *p = (QTable*)pVtab;
  (void)argc; (void)argv; (void)pRowid;
  sqlite3_free(pVtab->zErrMsg);
  pVtab->zErrMsg = sqlite3_mprintf("kv: queue %s changes through its "
      "functions: kv_enqueue, kv_queue_lease, kv_queue_ack, kv_queue_nack, "
      "kv_queue_extend, kv_queue_requeue, kv_queue_purge", p->zName);
  return SQLITE_READONLY;
}

static sqlite3_module qModule = {
  0, qCreate, qConnect, qBestIndex, qDisconnect, qDestroy,
  qOpen, qClose, qFilter, qNext, qEof, qColumn, qRowid,
  qUpdate, 0, 0, 0, 0,
  0, 0, 0, 0, 0, 0
};

/* --------------------------------------------------------- component --- */

static int qConnection(sqlite3 *db, KvConn *pConn){
  static const struct {
    const char *zName; int nArg;
    void (*x)(sqlite3_context*, int, sqlite3_value**);
  } aFunc[] = {
    { "kv_enqueue", 2, qEnqueueFunc }, { "kv_enqueue", 3, qEnqueueFunc },
    { "kv_enqueue", 4, qEnqueueFunc },
    { "kv_queue_ack", 3, qAckFunc }, { "kv_queue_ack", 4, qAckFunc },
    { "kv_queue_nack", 3, qNackFunc }, { "kv_queue_nack", 4, qNackFunc },
    { "kv_queue_nack", 5, qNackFunc }, { "kv_queue_nack", 6, qNackFunc },
    { "kv_queue_extend", 4, qExtendFunc }, { "kv_queue_extend", 5, qExtendFunc },
    { "kv_queue_requeue", 1, qRequeueFunc },
    { "kv_queue_requeue", 2, qRequeueFunc },
    { "kv_queue_requeue", 3, qRequeueFunc },
    { "kv_queue_purge", 1, qPurgeFunc }, { "kv_queue_purge", 2, qPurgeFunc },
    { "kv_queue_purge", 3, qPurgeFunc },
  };
  QConn *q = sqlite3_malloc64(sizeof(*q));
  int i, rc = SQLITE_OK;
  if( q==0 ) return SQLITE_NOMEM;
  memset(q, 0, sizeof(*q));
  q->nRef = 1;
  kv_conn_ref(pConn);
  q->pConn = pConn;
  for(i=0; rc==SQLITE_OK && i<(int)(sizeof(aFunc)/sizeof(aFunc[0])); i++){
    q->nRef++;
    rc = sqlite3_create_function_v2(db, aFunc[i].zName, aFunc[i].nArg,
        SQLITE_UTF8|SQLITE_DIRECTONLY, q, aFunc[i].x, 0, 0, qConnUnref);
  }
  if( rc==SQLITE_OK ){
    q->nRef++;
    rc = sqlite3_create_module_v2(db, "kv_queue", &qModule, q, qConnUnref);
  }
  if( rc==SQLITE_OK ){
    q->nRef++;
    rc = depot_listing_register(db, &leaseListing, q, qConnUnref);
  }
  if( rc==SQLITE_OK ){
    q->nRef++;
    rc = depot_listing_register(db, &deadListing, q, qConnUnref);
  }
  if( rc==SQLITE_OK ){
    q->nRef++;
    rc = depot_listing_register(db, &statsListing, q, qConnUnref);
  }
  qConnUnref(q);
  return rc;
}

const DepotComponent depotKvQueueComponent = {
  "kv: cannot register kv_queue, kv_enqueue, kv_queue_lease, kv_queue_ack, "
  "kv_queue_nack, kv_queue_extend, kv_queue_dead, kv_queue_requeue, "
  "kv_queue_purge, kv_queue_stats", 0,
  qConnection
};
