/*
** kv_ttl.c -- per-entry TTL of KV tables: the deadline a table declares,
** stamped on every write, and the sweeper that removes expired rows.
**
**   CREATE VIRTUAL TABLE s USING kv_memory(ttl_ms=60000);
**   CREATE VIRTUAL TABLE t USING kv_log(
**       deadline='json_extract(value, ''$.expires_ms'')');
**   SELECT kv_sweep('t'[, dir]);        -- rows removed now
**
** Declaring.  ttl_ms=N (a positive whole number): every write lives N ms
** from the write, on the deadline clock kv_clock_ms() (ext/kv/clock.c).
** deadline='expr': an SQL expression over the columns key, value and now
** (that clock at the write) giving the deadline in unix ms, or NULL for a
** row that never expires; it must be deterministic (checked at CREATE as
** a generated column: no random(), no subquery).  The catalog options
** hold {"ttl_ms":N} or {"deadline":"expr"}.
**
** Writing.  Every write through SQL (INSERT, UPDATE, REPLACE into the
** table, kv_put) evaluates the declaration once (kv_ttl_stamp) and stores
** the deadline inside the value encoding (ext/kv/kv.h "Deadlines"), which
** every backend stores as it stores any value; reads return the value
** without it.  The engine hides a row at once when its deadline is <= now:
** point reads, scans and the index entries of its carriers (which carry
** the row's deadline, ext/kv_derived.c).
**
** Deadline index.  Every table with a deadline has a hidden KV table
** ".ttl:T" of the same type and persistence (created with T, removed with
** T), keyed by (deadline as a key-encoded integer, row key), value the
** empty blob.  kv_ttl_stamp writes the entry of every write that gives a
** deadline, in the write's root; an entry is never deleted by writes, so
** a row rewritten with a later deadline, or deleted, leaves a stale entry
** that the sweep drops when its deadline comes.  A table declared before
** indexes existed gets its index at its first sweep (ttlIdxBuild, one
** root: it reads the whole table and rewrites the table's catalog entry,
** so a writer bound before it fails its prepare and misses nothing).
**
** Sweeping.  kv_ttl_sweep_table removes the expired rows of a table in
** batches of at most KV_TTL_BATCH, each one ordinary root transaction
** marked KV_ORIGIN_EXPIRE: it binds the table and its index (their
** snapshot), reads the index entries whose deadline is <= now, registers
** a read of each entry, and for each row still stored and still expired
** registers a read of its key, writes the carriers' side of its removal
** (kv_derived_write: indexes, counters) and deletes it; it deletes every
** entry it read, then commits.  So a pass costs the expired rows (and
** stale entries), not the table.  A row rewritten after the snapshot
** makes the batch conflict at prepare (remove-if-still-expired); the
** batch is built again from a fresh snapshot, where that row is no
** longer expired.  A table whose name is too long for an index name
** (KV_MAX_NAME_BYTES) is swept by a scan of the whole table.  A writer is held (its reservations) only between the
** batch's prepare and commit.  The background sweeper is the engine's
** thread per store (kv_engine_sweeper_start): it is started by the first
** connection that attaches or writes a table with a deadline, runs a pass
** over every such table of the store each interval, uses a KvConn of its
** own (derived data evaluates projections on that KvConn's private
** connection), and stops when the store closes, before its final flush.
**
** Policies are cached per KvConn (KvConn.pTtl) and read again when the
** store's catalog sequence moves, as kv_derived.c caches carriers.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
#include "ext/kv/kv.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TTL_NONE  0
#define TTL_MS    1
#define TTL_EXPR  2
#define TTL_RETRY 8              /* conflicts a batch retries in a pass */
#define TTL_MAX_MS ((int64_t)1<<53)
#define TTL_IDX_PREFIX KV_TTL_INDEX_PREFIX   /* .ttl:T */
#define TTL_IDX_PREFIX_LEN 5

typedef struct TtlPolicy TtlPolicy;
typedef struct TtlCache TtlCache;

struct TtlPolicy {
  KvEngine *pEng;                /* no reference: compared only */
  char *zName; int nName;
  uint64_t iSeq;                 /* catalog sequence read at; -1: stale */
  int eKind;                     /* TTL_* */
  int64_t iTtlMs;
  char *zExpr;
  sqlite3_stmt *pStmt;           /* TTL_EXPR: SELECT (expr) FROM ... */
  int bStarted;                  /* the store's sweeper was asked for */
  int bIdx;                      /* its deadline index exists */
  char *zIdx; int nIdx;          /* the index's name (NULL: too long) */
  TtlPolicy *pNext;
};

struct TtlCache {
  sqlite3 *db;                   /* private: JSON and the expressions */
  TtlPolicy *pList;
};

static int64_t ttlInterval = 1000;   /* ms between background passes */
#ifdef DEPOT_TEST
static int64_t ttlTestExamined = 0;  /* rows (index entries) passes read */
static void (*ttlTestBeforeCommit)(void*) = 0;   /* ttlTestMutex */
static void *ttlTestBeforeCommitArg = 0;
static pthread_mutex_t ttlTestMutex = PTHREAD_MUTEX_INITIALIZER;

/* The test hook, if set, with its argument: set by the test's thread, run
** on a sweeper's. */
static void ttlTestHook(void){
  void (*x)(void*);
  void *pArg;
  pthread_mutex_lock(&ttlTestMutex);
  x = ttlTestBeforeCommit;
  pArg = ttlTestBeforeCommitArg;
  pthread_mutex_unlock(&ttlTestMutex);
  if( x ) x(pArg);
}
#endif

/* ------------------------------------------------------------- cache --- */

static void ttlPolicyClear(TtlPolicy *p){
  sqlite3_finalize(p->pStmt);
  sqlite3_free(p->zExpr);
  p->pStmt = 0;
  p->zExpr = 0;
  p->eKind = TTL_NONE;
}

static void ttlCacheFree(KvConn *pConn){
  TtlCache *c = (TtlCache*)pConn->pTtl;
  if( c==0 ) return;
  while( c->pList ){
    TtlPolicy *p = c->pList;
    c->pList = p->pNext;
    ttlPolicyClear(p);
    sqlite3_free(p->zName);
    sqlite3_free(p->zIdx);
    sqlite3_free(p);
  }
  sqlite3_close(c->db);
  sqlite3_free(c);
  pConn->pTtl = 0;
}

/* The private connection of pConn's cache (NULL: out of memory). */
static sqlite3 *ttlDb(KvConn *pConn){
  TtlCache *c = (TtlCache*)pConn->pTtl;
  if( c==0 ){
    if( (c = sqlite3_malloc64(sizeof(*c)))==0 ) return 0;
    memset(c, 0, sizeof(*c));
    pConn->pTtl = c;
    pConn->xTtlFree = ttlCacheFree;
  }
  if( c->db==0 ){
    if( sqlite3_open_v2(":memory:", &c->db, SQLITE_OPEN_READWRITE
                        |SQLITE_OPEN_MEMORY|SQLITE_OPEN_PRIVATECACHE, 0) ){
      sqlite3_close(c->db);
      c->db = 0;
    }
  }
  return c->db;
}

/* Parse catalog options zOpt into p (its kind, ms, expression). */
static int ttlParse(sqlite3 *db, const char *zOpt, TtlPolicy *p,
                    char **pzErr){
  sqlite3_stmt *pStmt = 0;
  int rc;
  ttlPolicyClear(p);
  if( zOpt==0 ) return SQLITE_OK;
  rc = sqlite3_prepare_v2(db, "SELECT json_extract(?1, '$.ttl_ms'), "
                          "json_extract(?1, '$.deadline') WHERE json_valid(?1)",
                          -1, &pStmt, 0);
  if( rc==SQLITE_OK ){
    sqlite3_bind_text(pStmt, 1, zOpt, -1, SQLITE_STATIC);
    if( sqlite3_step(pStmt)==SQLITE_ROW ){
      if( sqlite3_column_type(pStmt, 1)==SQLITE_TEXT ){
        p->zExpr = sqlite3_mprintf("%s", sqlite3_column_text(pStmt, 1));
        if( p->zExpr==0 ) rc = SQLITE_NOMEM;
        p->eKind = TTL_EXPR;
      }else if( sqlite3_column_type(pStmt, 0)==SQLITE_INTEGER ){
        p->iTtlMs = sqlite3_column_int64(pStmt, 0);
        p->eKind = TTL_MS;
      }
    }
    rc = sqlite3_finalize(pStmt)==SQLITE_OK ? rc : SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK && p->eKind==TTL_EXPR ){
    char *zSql = sqlite3_mprintf("SELECT (%s) FROM (SELECT ?1 AS key, "
                                 "?2 AS value, ?3 AS now)", p->zExpr);
    if( zSql==0 ) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v3(db, zSql, -1, SQLITE_PREPARE_PERSISTENT,
                            &p->pStmt, 0);
    sqlite3_free(zSql);
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv: the deadline of table %s does not "
          "compile: %s", p->zName, sqlite3_errmsg(db));
      rc = SQLITE_ERROR;
    }
  }
  return rc;
}

/* The policy of zTab as root r (NULL: the committed catalog) sees it.  A
** table the root creates is read through the root and not kept (the
** root may roll back). */
static int ttlPolicy(KvConn *pConn, KvEngine *pEng, KvRoot *r,
                     const char *zTab, int nTab, TtlPolicy **pp,
                     char **pzErr){
  sqlite3 *db = ttlDb(pConn);
  TtlCache *c = (TtlCache*)pConn->pTtl;
  TtlPolicy *p;
  KvMeta meta;
  uint64_t iSeq;
  int bFound = 0, rc;
  *pp = 0;
  if( db==0 ) return SQLITE_NOMEM;
  for(p=c->pList; p; p=p->pNext){
    if( p->pEng==pEng && p->nName==nTab && memcmp(p->zName, zTab, nTab)==0 ){
      break;
    }
  }
  if( p==0 ){
    if( (p = sqlite3_malloc64(sizeof(*p)))==0 ) return SQLITE_NOMEM;
    memset(p, 0, sizeof(*p));
    p->zName = sqlite3_mprintf("%.*s", nTab, zTab);
    if( p->zName==0 ){ sqlite3_free(p); return SQLITE_NOMEM; }
    p->pEng = pEng;
    p->nName = nTab;
    if( nTab+TTL_IDX_PREFIX_LEN<=KV_MAX_NAME_BYTES ){
      p->zIdx = sqlite3_mprintf(TTL_IDX_PREFIX "%.*s", nTab, zTab);
      if( p->zIdx==0 ){
        sqlite3_free(p->zName);
        sqlite3_free(p);
        return SQLITE_NOMEM;
      }
      p->nIdx = nTab+TTL_IDX_PREFIX_LEN;
    }
    p->iSeq = (uint64_t)-1;
    p->pNext = c->pList;
    c->pList = p;
  }
  iSeq = kv_engine_catalog_seq(pEng);
  if( p->iSeq==iSeq ){ *pp = p; return SQLITE_OK; }
  rc = kv_table_meta(pEng, 0, zTab, nTab, &meta, &bFound);
  if( rc==SQLITE_OK && !bFound && r ){
    kv_meta_clear(&meta);
    rc = kv_table_meta(pEng, r, zTab, nTab, &meta, &bFound);
    iSeq = (uint64_t)-1;               /* pending: read again next time */
  }
  if( rc==SQLITE_OK ) rc = ttlParse(db, bFound ? meta.zOptions : 0, p, pzErr);
  kv_meta_clear(&meta);
  p->bIdx = 0;
  if( rc==SQLITE_OK && p->eKind!=TTL_NONE && p->zIdx ){
    rc = kv_table_meta(pEng, 0, p->zIdx, p->nIdx, &meta, &p->bIdx);
    kv_meta_clear(&meta);
    if( rc==SQLITE_OK && !p->bIdx && r ){
      rc = kv_table_meta(pEng, r, p->zIdx, p->nIdx, &meta, &p->bIdx);
      kv_meta_clear(&meta);
      if( p->bIdx ) iSeq = (uint64_t)-1;
    }
  }
  p->iSeq = rc==SQLITE_OK ? iSeq : (uint64_t)-1;
  if( rc==SQLITE_OK ) *pp = p;
  return rc;
}

/* ------------------------------------------------------------ options --- */

/* Is z a whole number in 1..TTL_MAX_MS?  *pi gets it. */
static int ttlMsValue(const char *z, int64_t *pi){
  int64_t v = 0;
  int i;
  if( z==0 || z[0]==0 ) return 0;
  for(i=0; z[i]; i++){
    if( z[i]<'0' || z[i]>'9' || i>=16 ) return 0;
    v = v*10 + (z[i]-'0');
  }
  *pi = v;
  return v>=1 && v<=TTL_MAX_MS;
}

/* Is zExpr a deterministic expression over key, value and now?  A
** generated column is held to exactly that by SQLite. */
static int ttlExprCheck(const char *zExpr, char **pzErr){
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  const char *zTail = 0;
  char *zSql = sqlite3_mprintf("CREATE TABLE x(key, value, now, d AS (%s))",
                               zExpr);
  int rc = zSql ? SQLITE_OK : SQLITE_NOMEM;
  if( rc==SQLITE_OK ){
    rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE
                         |SQLITE_OPEN_MEMORY|SQLITE_OPEN_PRIVATECACHE, 0);
  }
  if( rc==SQLITE_OK ) rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, &zTail);
  if( rc==SQLITE_OK && zTail && zTail[strspn(zTail, " \t\n;")] ){
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK && sqlite3_step(pStmt)!=SQLITE_DONE ) rc = SQLITE_ERROR;
  if( rc==SQLITE_OK ){
    sqlite3_finalize(pStmt);
    pStmt = 0;
    rc = sqlite3_prepare_v2(db, "SELECT d FROM x", -1, &pStmt, 0);
  }
  if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ){
    *pzErr = sqlite3_mprintf("kv: bad deadline expression '%s': %s (it is "
        "evaluated over the columns key, value and now, and must be "
        "deterministic)", zExpr, db ? sqlite3_errmsg(db) : "no memory");
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  sqlite3_free(zSql);
  return rc;
}

int kv_ttl_option(const char *zTtlMs, const char *zDeadline, KvBuf *pJson,
                  char **pzErr){
  int64_t iMs = 0;
  char zNum[32];
  int rc;
  if( zTtlMs && zDeadline ){
    *pzErr = sqlite3_mprintf("kv: give ttl_ms or deadline, not both");
    return SQLITE_ERROR;
  }
  if( zTtlMs ){
    if( !ttlMsValue(zTtlMs, &iMs) ){
      *pzErr = sqlite3_mprintf("kv: ttl_ms must be a whole number of "
          "milliseconds from 1 to %lld, got '%s'", (long long)TTL_MAX_MS,
          zTtlMs);
      return SQLITE_ERROR;
    }
    sqlite3_snprintf(sizeof(zNum), zNum, ",\"ttl_ms\":%lld", (long long)iMs);
    return kv_buf_append(pJson, zNum, (int)strlen(zNum));
  }
  if( zDeadline==0 ) return SQLITE_OK;
  rc = ttlExprCheck(zDeadline, pzErr);
  if( rc==SQLITE_OK ) rc = kv_buf_append(pJson, ",\"deadline\":", 12);
  if( rc==SQLITE_OK ){
    rc = kv_json_text(pJson, (const uint8_t*)zDeadline,
                      (int)strlen(zDeadline));
  }
  return rc;
}

/* ------------------------------------------------------------ writing --- */

/* Append the key encoding of deadline iDeadline to p: the first part of a
** deadline index key, whose second part is the row's key. */
static int ttlIdxKey(int64_t iDeadline, KvBuf *p){
  return kv_key_encode_c(SQLITE_INTEGER, iDeadline, 0.0, 0, 0, p, 0);
}

/* Write the deadline index entry whose key is *pKey (its value: the empty
** blob, appended to *pKey here). */
static int ttlIdxPut(KvRoot *r, TtlPolicy *p, KvBuf *pKey, char **pzErr){
  int nKey = pKey->n;
  int rc = kv_value_encode_blob(0, 0, pKey);
  if( rc==SQLITE_OK ){
    rc = kv_put(r, p->zIdx, p->nIdx, pKey->a, nKey, pKey->a+nKey,
                pKey->n-nKey, pzErr);
  }
  pKey->n = nKey;
  return rc;
}

static void ttlFreeConn(void *p){ kv_conn_unref(p); }
static int ttlPass(KvEngine *pEng, void *pArg);

/* Start the sweeper of pEng unless this policy asked for it already. */
static void ttlStart(TtlPolicy *p){
  KvConn *pSweep;
  char *zErr = 0;
  int rc;
  if( p->bStarted || p->eKind==TTL_NONE ) return;
  p->bStarted = 1;
  if( kv_engine_sweeper_running(p->pEng) ) return;
  if( (pSweep = kv_conn_new(0))==0 ) return;
  rc = kv_engine_sweeper_start(p->pEng, ttlPass, pSweep, ttlFreeConn,
                               ttlInterval, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: cannot start the TTL sweeper");
    p->bStarted = 0;
  }
  sqlite3_free(zErr);
}

/* Evaluate the deadline expression of p for (pKey, pVal) at iNow. */
static int ttlEval(TtlPolicy *p, sqlite3_value *pKey, sqlite3_value *pVal,
                   int64_t iNow, int *pbDeadline, int64_t *piDeadline,
                   char **pzErr){
  sqlite3_stmt *s = p->pStmt;
  int rc;
  sqlite3_bind_value(s, 1, pKey);
  if( pVal ) sqlite3_bind_value(s, 2, pVal); else sqlite3_bind_null(s, 2);
  sqlite3_bind_int64(s, 3, iNow);
  rc = sqlite3_step(s);
  if( rc==SQLITE_ROW ){
    rc = SQLITE_OK;
    switch( sqlite3_column_type(s, 0) ){
      case SQLITE_NULL: break;
      case SQLITE_INTEGER:
        *pbDeadline = 1;
        *piDeadline = sqlite3_column_int64(s, 0);
        break;
      case SQLITE_FLOAT: {
        double r = sqlite3_column_double(s, 0);
        if( r>=-9.2e18 && r<=9.2e18 ){        /* whole ms, rounded down */
          int64_t i = (int64_t)r;
          *pbDeadline = 1;
          *piDeadline = (double)i>r ? i-1 : i;
          break;
        }
        goto bad_type;                        /* NaN, or out of range */
      }
      default:
      bad_type:
        *pzErr = sqlite3_mprintf("kv: the deadline of table %s must be a "
            "number of unix ms or NULL, got %s", p->zName,
            kv_value_type_name(sqlite3_column_value(s, 0)));
        rc = SQLITE_MISMATCH;
    }
  }else{
    *pzErr = sqlite3_mprintf("kv: the deadline of table %s failed: %s",
                             p->zName, sqlite3_errmsg(sqlite3_db_handle(s)));
    rc = SQLITE_ERROR;
  }
  sqlite3_reset(s);
  sqlite3_clear_bindings(s);
  return rc;
}

int kv_ttl_stamp(KvConn *pConn, KvRoot *r, const char *zTab, int nTab,
                 sqlite3_value *pKey, sqlite3_value *pVal, KvBuf *pEnc,
                 int *pbTtl, char **pzErr){
  TtlPolicy *p = 0;
  int64_t iDeadline = 0, iNow;
  int bDeadline = 0;
  int rc = ttlPolicy(pConn, kv_root_engine(r), r, zTab, nTab, &p, pzErr);
  *pbTtl = 0;
  if( rc!=SQLITE_OK || p->eKind==TTL_NONE ) return rc;
  *pbTtl = 1;
  ttlStart(p);
  iNow = kv_clock_ms();
  if( p->eKind==TTL_MS ){
    bDeadline = 1;
    iDeadline = iNow + p->iTtlMs;
  }else{
    rc = ttlEval(p, pKey, pVal, iNow, &bDeadline, &iDeadline, pzErr);
  }
  if( rc==SQLITE_OK ) rc = kv_value_set_deadline(pEnc, bDeadline, iDeadline);
  if( rc==SQLITE_OK && bDeadline && !p->bIdx && p->zIdx ){
    /* bind the table before looking for its index: an index built after
    ** this (ttlIdxBuild) redefines the table, so this root then fails its
    ** prepare instead of committing a row the index misses */
    rc = kv_root_touch(r, zTab, nTab, 0, pzErr);
    if( rc==SQLITE_OK ){
      rc = ttlPolicy(pConn, kv_root_engine(r), r, zTab, nTab, &p, pzErr);
    }
  }
  if( rc==SQLITE_OK && bDeadline && p->bIdx ){
    KvBuf k = {0, 0, 0};
    rc = ttlIdxKey(iDeadline, &k);
    if( rc==SQLITE_OK ) rc = kv_key_encode(pKey, &k, pzErr);
    if( rc==SQLITE_OK ) rc = ttlIdxPut(r, p, &k, pzErr);
    kv_buf_free(&k);
  }
  return rc;
}

void kv_ttl_attach(KvConn *pConn, KvEngine *pEng, const char *zTab,
                   int nTab){
  TtlPolicy *p = 0;
  char *zErr = 0;
  if( ttlPolicy(pConn, pEng, 0, zTab, nTab, &p, &zErr)==SQLITE_OK ){
    ttlStart(p);
  }
  sqlite3_free(zErr);
}

/* ----------------------------------------------------------- sweeping --- */

/* Expired rows found by a batch: keys and values, copied. */
typedef struct TtlRows TtlRows;
struct TtlRows {
  int n, nAlloc;
  int *aOff;                     /* key i: data[aOff[2i] .. aOff[2i+1]),
                                 ** its value up to aOff[2i+2] */
  KvBuf data;
};

static int ttlRowsAdd(TtlRows *p, const KvMapEntry *e){
  int rc;
  if( p->n*2+3 > p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 64;
    int *a = sqlite3_realloc64(p->aOff, nNew*sizeof(int));
    if( a==0 ) return SQLITE_NOMEM;
    p->aOff = a;
    p->nAlloc = nNew;
  }
  if( p->n==0 ) p->aOff[0] = 0;
  rc = kv_buf_append(&p->data, e->aKey, e->nKey);
  p->aOff[2*p->n+1] = p->data.n;
  if( rc==SQLITE_OK ) rc = kv_buf_append(&p->data, e->aVal, e->nVal);
  p->aOff[2*p->n+2] = p->data.n;
  if( rc==SQLITE_OK ) p->n++;
  return rc;
}

/* One batch: remove up to nBatch expired rows after *pCursor (all when
** it is empty) in one root.  *pCursor becomes the last key the batch
** looked at; *pbEnd is set when the scan reached the end of the table. */
static int ttlBatch(KvConn *pConn, KvEngine *pEng, const char *zTab,
                    int nTab, int nBatch, KvBuf *pCursor, int *pnDone,
                    int *pbEnd, char **pzErr){
  KvRoot *r = 0;
  KvIter *pIter = 0;
  KvBound lo;
  TtlRows rows;
  int64_t iNow;
  int i, rc;
  memset(&rows, 0, sizeof(rows));
  *pnDone = 0;
  *pbEnd = 0;
  rc = kv_root_begin(pEng, &r);
  if( rc!=SQLITE_OK ) return rc;
  kv_root_set_origin(r, KV_ORIGIN_EXPIRE);
  /* the snapshot the scan reads is the one the reads below are checked
  ** from: a row rewritten after it makes the commit conflict */
  rc = kv_root_bind(r, zTab, nTab, pzErr);
  lo.aKey = pCursor->a; lo.nKey = pCursor->n; lo.bIncl = 0;
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pEng, r, zTab, nTab, pCursor->n ? &lo : 0, 0,
                      KV_ITER_WITH_EXPIRED, &pIter, pzErr);
  }
  iNow = kv_clock_ms();
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) && rows.n<nBatch ){
    const KvMapEntry *e = kv_iter_current(pIter);
    if( kv_value_expired(e->aVal, e->nVal, iNow) ) rc = ttlRowsAdd(&rows, e);
    kv_buf_reset(pCursor);
    if( rc==SQLITE_OK ) rc = kv_buf_append(pCursor, e->aKey, e->nKey);
    if( rc==SQLITE_OK ) kv_iter_next(pIter);
#ifdef DEPOT_TEST
    __atomic_fetch_add(&ttlTestExamined, 1, __ATOMIC_RELAXED);
#endif
  }
  if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
  if( rc==SQLITE_OK ) *pbEnd = kv_iter_eof(pIter);
  kv_iter_close(pIter);
  for(i=0; rc==SQLITE_OK && i<rows.n; i++){
    const uint8_t *aKey = rows.data.a + rows.aOff[2*i];
    int nKey = rows.aOff[2*i+1] - rows.aOff[2*i];
    const uint8_t *aVal = rows.data.a + rows.aOff[2*i+1];
    int nVal = rows.aOff[2*i+2] - rows.aOff[2*i+1];
    rc = kv_root_note_read(r, zTab, nTab, aKey, nKey, pzErr);
    if( rc==SQLITE_OK ){
      rc = kv_derived_write(pConn, r, zTab, nTab, aKey, nKey, 0, 0, 1,
                            KV_DERIVED_OLD_GIVEN, aVal, nVal, pzErr);
    }
    if( rc==SQLITE_OK ) rc = kv_del(r, zTab, nTab, aKey, nKey, pzErr);
  }
#ifdef DEPOT_TEST
  if( rc==SQLITE_OK && rows.n>0 ){
    ttlTestHook();
  }
#endif
  if( rc==SQLITE_OK && rows.n>0 ){
    rc = kv_root_commit(r, pzErr);
    if( rc==SQLITE_OK ) *pnDone = rows.n;
  }
  kv_root_free(r);                       /* rolls back what is left */
  sqlite3_free(rows.aOff);
  kv_buf_free(&rows.data);
  return rc;
}

/* One batch through the deadline index of p: read up to nBatch entries
** whose deadline is <= now, remove each one's row if it is still expired
** (a row rewritten with a later deadline, or removed, leaves an entry
** that is only deleted), delete the entries, in one root.  Reads of the
** entries and of the removed rows make a concurrent rewrite conflict.
** *pbEnd: fewer than nBatch entries were due. */
static int ttlIdxBatch(KvConn *pConn, KvEngine *pEng, TtlPolicy *p,
                       int nBatch, int *pnDone, int *pbEnd, char **pzErr){
  const char *zTab = p->zName;
  int nTab = p->nName;
  KvRoot *r = 0;
  KvIter *pIter = 0;
  KvBound hi;
  KvBuf hiKey = {0, 0, 0}, val = {0, 0, 0};
  TtlRows rows;
  int64_t iNow;
  int i, nDone = 0, rc;
  memset(&rows, 0, sizeof(rows));
  *pnDone = 0;
  *pbEnd = 0;
  rc = kv_root_begin(pEng, &r);
  if( rc!=SQLITE_OK ) return rc;
  kv_root_set_origin(r, KV_ORIGIN_EXPIRE);
  rc = kv_root_bind(r, zTab, nTab, pzErr);
  if( rc==SQLITE_OK ) rc = kv_root_bind(r, p->zIdx, p->nIdx, pzErr);
  iNow = kv_clock_ms();
  if( rc==SQLITE_OK ) rc = ttlIdxKey(iNow+1, &hiKey);
  hi.aKey = hiKey.a; hi.nKey = hiKey.n; hi.bIncl = 0;
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pEng, r, p->zIdx, p->nIdx, 0, &hi,
                      KV_ITER_WITH_EXPIRED, &pIter, pzErr);
  }
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) && rows.n<nBatch ){
    rc = ttlRowsAdd(&rows, kv_iter_current(pIter));
    if( rc==SQLITE_OK ) kv_iter_next(pIter);
  }
  if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
  if( rc==SQLITE_OK ) *pbEnd = kv_iter_eof(pIter);
  kv_iter_close(pIter);
#ifdef DEPOT_TEST
  __atomic_fetch_add(&ttlTestExamined, rows.n, __ATOMIC_RELAXED);
#endif
  for(i=0; rc==SQLITE_OK && i<rows.n; i++){
    const uint8_t *aIdx = rows.data.a + rows.aOff[2*i];
    int nIdx = rows.aOff[2*i+1] - rows.aOff[2*i];
    int nD = kv_key_length(aIdx, nIdx);
    int bFound = 0;
    rc = kv_root_note_read(r, p->zIdx, p->nIdx, aIdx, nIdx, pzErr);
    if( rc==SQLITE_OK && nD>0 && nD<nIdx ){
      rc = kv_peek(r, zTab, nTab, aIdx+nD, nIdx-nD, &val, &bFound, pzErr);
      if( rc==SQLITE_OK && bFound && kv_value_expired(val.a, val.n, iNow) ){
        rc = kv_root_note_read(r, zTab, nTab, aIdx+nD, nIdx-nD, pzErr);
        if( rc==SQLITE_OK ){
          rc = kv_derived_write(pConn, r, zTab, nTab, aIdx+nD, nIdx-nD, 0, 0,
                                1, KV_DERIVED_OLD_GIVEN, val.a, val.n, pzErr);
        }
        if( rc==SQLITE_OK ) rc = kv_del(r, zTab, nTab, aIdx+nD, nIdx-nD,
                                        pzErr);
        if( rc==SQLITE_OK ) nDone++;
      }
    }
    if( rc==SQLITE_OK ) rc = kv_del(r, p->zIdx, p->nIdx, aIdx, nIdx, pzErr);
  }
#ifdef DEPOT_TEST
  if( rc==SQLITE_OK && nDone>0 ){
    ttlTestHook();
  }
#endif
  if( rc==SQLITE_OK && rows.n>0 ){
    rc = kv_root_commit(r, pzErr);
    if( rc==SQLITE_OK ) *pnDone = nDone;
  }
  kv_root_free(r);
  sqlite3_free(rows.aOff);
  kv_buf_free(&rows.data);
  kv_buf_free(&hiKey);
  kv_buf_free(&val);
  return rc;
}

/* Build the deadline index of p's table, declared before tables had one,
** in one root: create it (type and persistence of the table), write an
** entry for every row that has a deadline, read the whole table (a
** concurrent write conflicts) and rewrite the table's catalog entry with
** its own options, so that a writer bound before it fails its prepare
** instead of committing a row the index misses. */
static int ttlIdxBuild(KvEngine *pEng, TtlPolicy *p, char **pzErr){
  KvRoot *r = 0;
  KvIter *pIter = 0;
  KvMeta meta;
  KvBuf k = {0, 0, 0};
  int bFound = 0, bCreated = 0, rc;
  memset(&meta, 0, sizeof(meta));
  rc = kv_root_begin(pEng, &r);
  if( rc==SQLITE_OK ){
    rc = kv_table_meta(pEng, 0, p->zName, p->nName, &meta, &bFound);
  }
  if( rc==SQLITE_OK && !bFound ){
    *pzErr = sqlite3_mprintf("kv: no such table: %s", p->zName);
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ){
    rc = kv_create_table(r, p->zIdx, p->nIdx, meta.zType, meta.bPersist, 0,
                         &bCreated, pzErr);
  }
  if( rc==SQLITE_OK ) rc = kv_root_bind(r, p->zName, p->nName, pzErr);
  if( rc==SQLITE_OK ){
    rc = kv_root_note_range(r, p->zName, p->nName, 0, 0, 0, 0, pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pEng, r, p->zName, p->nName, 0, 0,
                      KV_ITER_WITH_EXPIRED, &pIter, pzErr);
  }
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
    const KvMapEntry *e = kv_iter_current(pIter);
    int64_t iDeadline;
    if( kv_value_deadline(e->aVal, e->nVal, &iDeadline) ){
      kv_buf_reset(&k);
      rc = ttlIdxKey(iDeadline, &k);
      if( rc==SQLITE_OK ) rc = kv_buf_append(&k, e->aKey, e->nKey);
      if( rc==SQLITE_OK ) rc = ttlIdxPut(r, p, &k, pzErr);
    }
    if( rc==SQLITE_OK ) kv_iter_next(pIter);
  }
  if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  if( rc==SQLITE_OK ){
    rc = kv_table_set_options(r, p->zName, p->nName, meta.zOptions, pzErr);
  }
  if( rc==SQLITE_OK ) rc = kv_root_commit(r, pzErr);
  kv_root_free(r);
  kv_meta_clear(&meta);
  kv_buf_free(&k);
  return rc;
}

int kv_ttl_create_index(KvRoot *r, const char *zTab, int nTab,
                        const char *zType, int bPersist, char **pzErr){
  char *zIdx;
  int bCreated = 0, rc;
  if( nTab+TTL_IDX_PREFIX_LEN>KV_MAX_NAME_BYTES ) return SQLITE_OK;
  zIdx = sqlite3_mprintf(TTL_IDX_PREFIX "%.*s", nTab, zTab);
  if( zIdx==0 ) return SQLITE_NOMEM;
  rc = kv_create_table(r, zIdx, nTab+TTL_IDX_PREFIX_LEN, zType, bPersist, 0,
                       &bCreated, pzErr);
  sqlite3_free(zIdx);
  return rc;
}

int kv_ttl_remove_index(KvRoot *r, const char *zTab, int nTab,
                        char **pzErr){
  KvMeta meta;
  char *zIdx;
  int bFound = 0, rc;
  if( nTab+TTL_IDX_PREFIX_LEN>KV_MAX_NAME_BYTES ) return SQLITE_OK;
  zIdx = sqlite3_mprintf(TTL_IDX_PREFIX "%.*s", nTab, zTab);
  if( zIdx==0 ) return SQLITE_NOMEM;
  rc = kv_table_meta(kv_root_engine(r), r, zIdx, nTab+TTL_IDX_PREFIX_LEN,
                     &meta, &bFound);
  kv_meta_clear(&meta);
  if( rc==SQLITE_OK && bFound ){
    rc = kv_remove_table(r, zIdx, nTab+TTL_IDX_PREFIX_LEN, pzErr);
  }
  sqlite3_free(zIdx);
  return rc;
}

/* Sweep p's table through its deadline index. */
static int ttlIdxSweep(KvConn *pConn, KvEngine *pEng, TtlPolicy *p,
                       int nBatch, int64_t *pnRemoved, char **pzErr){
  int nTry = 0, bEnd = 0, rc = SQLITE_OK;
  while( rc==SQLITE_OK && !bEnd ){
    int nDone = 0;
    rc = ttlIdxBatch(pConn, pEng, p, nBatch, &nDone, &bEnd, pzErr);
    if( rc==SQLITE_BUSY_SNAPSHOT && ++nTry<=TTL_RETRY ){
      sqlite3_free(*pzErr);              /* a row or entry was rewritten */
      *pzErr = 0;
      rc = SQLITE_OK;
      bEnd = 0;
      continue;
    }
    if( rc==SQLITE_BUSY_SNAPSHOT ){      /* busy: the next pass goes on */
      sqlite3_free(*pzErr);
      *pzErr = 0;
      rc = SQLITE_OK;
      break;
    }
    *pnRemoved += nDone;
  }
  return rc;
}

int kv_ttl_sweep_table(KvConn *pConn, KvEngine *pEng, const char *zTab,
                       int nTab, int nBatch, int64_t *pnRemoved,
                       char **pzErr){
  KvBuf cursor = {0, 0, 0}, retry = {0, 0, 0};
  TtlPolicy *p = 0;
  int nTry = 0, bEnd = 0, rc;
  *pnRemoved = 0;
  rc = ttlPolicy(pConn, pEng, 0, zTab, nTab, &p, pzErr);
  if( rc==SQLITE_OK && p->eKind==TTL_NONE ){
    *pzErr = sqlite3_mprintf("kv: table %.*s declares no deadline (create "
        "it with ttl_ms=N or deadline='expr')", nTab, zTab);
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK && !p->bIdx && p->zIdx ){
    /* a table declared before tables had deadline indexes */
    int nBuild;
    for(nBuild=0; nBuild<TTL_RETRY; nBuild++){
      char *zErr = 0;
      int rc2 = ttlIdxBuild(pEng, p, &zErr);
      sqlite3_free(zErr);
      if( rc2!=SQLITE_BUSY_SNAPSHOT ) break;
    }
    rc = ttlPolicy(pConn, pEng, 0, zTab, nTab, &p, pzErr);
  }
  if( rc==SQLITE_OK && p->bIdx ){
    rc = ttlIdxSweep(pConn, pEng, p, nBatch, pnRemoved, pzErr);
    bEnd = 1;
  }
  while( rc==SQLITE_OK && !bEnd ){
    int nDone = 0;
    kv_buf_reset(&retry);
    rc = kv_buf_append(&retry, cursor.a, cursor.n);
    if( rc==SQLITE_OK ){
      rc = ttlBatch(pConn, pEng, zTab, nTab, nBatch, &cursor, &nDone, &bEnd,
                    pzErr);
    }
    if( rc==SQLITE_BUSY_SNAPSHOT && ++nTry<=TTL_RETRY ){
      /* a row was rewritten under the batch: build it again */
      sqlite3_free(*pzErr);
      *pzErr = 0;
      kv_buf_reset(&cursor);
      rc = kv_buf_append(&cursor, retry.a, retry.n);
      bEnd = 0;
      continue;
    }
    if( rc==SQLITE_BUSY_SNAPSHOT ){      /* busy: the next pass goes on */
      sqlite3_free(*pzErr);
      *pzErr = 0;
      rc = SQLITE_OK;
      break;
    }
    *pnRemoved += nDone;
  }
  if( rc==SQLITE_OK ) kv_table_sweep_note(pEng, zTab, nTab, 1, *pnRemoved);
  kv_buf_free(&cursor);
  kv_buf_free(&retry);
  return rc;
}

/* ------------------------------------------------ background passes --- */

typedef struct TtlNames TtlNames;
struct TtlNames { int n; KvBuf data; int rc; };

static int ttlNameOf(void *pCtx, const char *zName, const char *zType,
                     const KvBackendStats *pSt){
  TtlNames *p = (TtlNames*)pCtx;
  (void)zType; (void)pSt;
  p->n++;
  return kv_buf_append(&p->data, zName, (int)strlen(zName)+1);
}

/* KvSweepFn: one pass over every table of pEng that has a deadline. */
static int ttlPass(KvEngine *pEng, void *pArg){
  KvConn *pConn = (KvConn*)pArg;
  TtlNames names;
  int i, off = 0, rc;
  memset(&names, 0, sizeof(names));
  rc = kv_engine_table_stats(pEng, 0, ttlNameOf, &names);
  for(i=0; rc==SQLITE_OK && i<names.n; i++){
    const char *zName = (const char*)names.data.a + off;
    int nName = (int)strlen(zName);
    TtlPolicy *p = 0;
    char *zErr = 0;
    int64_t nRemoved = 0;
    off += nName + 1;
    if( ttlPolicy(pConn, pEng, 0, zName, nName, &p, &zErr)==SQLITE_OK
     && p->eKind!=TTL_NONE ){
      int rc2 = kv_ttl_sweep_table(pConn, pEng, zName, nName, KV_TTL_BATCH,
                                   &nRemoved, &zErr);
      if( rc2!=SQLITE_OK ){
        sqlite3_log(rc2, "kv: the TTL sweep of table %s failed: %s", zName,
                    zErr ? zErr : sqlite3_errstr(rc2));
      }
    }
    sqlite3_free(zErr);
  }
  kv_buf_free(&names.data);
  return rc;
}

#ifdef DEPOT_TEST
void kv_ttl_test_interval(int64_t iMs){
  ttlInterval = iMs>0 ? iMs : 1000;
}
int64_t kv_ttl_test_examined(void){
  return __atomic_load_n(&ttlTestExamined, __ATOMIC_RELAXED);
}
void kv_ttl_test_before_commit(void (*x)(void*), void *pArg){
  pthread_mutex_lock(&ttlTestMutex);
  ttlTestBeforeCommit = x;
  ttlTestBeforeCommitArg = pArg;
  pthread_mutex_unlock(&ttlTestMutex);
}
#endif

/* ------------------------------------------------------------ kv_sweep --- */

/* kv_sweep(table[, dir]) -> the number of expired rows removed now. */
static void ttlSweepFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  KvEngine *pEng = 0;
  const char *zTab;
  char *zErr = 0;
  int64_t nRemoved = 0;
  int rc;
  if( (zTab = depot_text_arg(ctx, argv[0], "kv_sweep", "table"))==0 ) return;
  rc = kv_conn_writable(sqlite3_context_db_handle(ctx), "kv_sweep", &zErr);
  if( rc==SQLITE_OK ){
    rc = kv_conn_store_arg(pConn, argc>1 ? argv[1] : 0, 1, &pEng, &zErr);
  }
  if( rc==SQLITE_OK ){
    KvMeta meta;
    int bFound = 0;
    rc = kv_table_meta(pEng, 0, zTab, (int)strlen(zTab), &meta, &bFound);
    kv_meta_clear(&meta);
    if( rc==SQLITE_OK && !bFound ){
      zErr = sqlite3_mprintf("kv: no such table: %s (store %s)", zTab,
          kv_engine_dir(pEng) ? kv_engine_dir(pEng) : "in memory");
      rc = SQLITE_ERROR;
    }
  }
  if( rc==SQLITE_OK ){
    rc = kv_ttl_sweep_table(pConn, pEng, zTab, (int)strlen(zTab),
                            KV_TTL_BATCH, &nRemoved, &zErr);
  }
  kv_engine_unref(pEng);
  if( rc!=SQLITE_OK ) kv_sql_error(ctx, rc, zErr);
  else sqlite3_result_int64(ctx, nRemoved);
}

static int ttlConnection(sqlite3 *db, KvConn *pKv){
  int i, rc = SQLITE_OK;
  for(i=1; rc==SQLITE_OK && i<=2; i++){
    kv_conn_ref(pKv);
    rc = sqlite3_create_function_v2(db, "kv_sweep", i,
        SQLITE_UTF8|SQLITE_DIRECTONLY, pKv, ttlSweepFunc, 0, 0,
        kv_conn_unref);
  }
  return rc;
}

const DepotComponent depotKvTtlComponent = {
  "kv: cannot register kv_sweep", 0, ttlConnection
};
