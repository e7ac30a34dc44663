/*
** kv_derived.c -- derived data on KV tables ("carriers"): secondary
** indexes, unique indexes and counters over a source KV table, kept inside
** the root transaction of every source write, plus their validator.
**
**   CREATE VIRTUAL TABLE users_by_email USING kv_index(source=users,
**       expr='json_extract(value, ''$.email'')'[, unique=1][, dir=PATH]);
**   CREATE VIRTUAL TABLE users_by_country USING kv_counter(source=users,
**       group='json_extract(value, ''$.country'')'[, sum='...'][, dir=PATH]);
**   SELECT source_key FROM users_by_email WHERE key = 'a@x.org';
**   SELECT key, count, sum FROM users_by_country;
**   SELECT carrier, key, detail FROM kv_validate('users'[, dir]);
**   SELECT kv_repair('users'[, carrier[, dir]]);     -- JSON summary
**   SELECT name, kind, expr, sum, built FROM kv_carriers('users'[, dir]);
**   DROP TABLE users_by_email;                        -- removes the carrier
**
** A carrier is a KV table of its own (same type and persistence as its
** source), listed in the catalog: its options say what it is
** ({"carrier":"index"|"unique"|"counter", "source", "expr", "sum",
** "built", "cursor"}) and the source's options list its carriers in
** declaration order ({"carriers":[...]}).  Declaring or removing one
** rewrites the source's catalog entry (kv_table_set_options), so every
** transaction bound to the source before that fails its prepare: no writer
** misses a carrier.
**
** Entries.  A projection is an SQL expression over the columns key and
** value of a source row, evaluated on the connection's private in-memory
** connection (dvDb), all of a source's projections in one statement (its
** JSON is parsed once); when every projection is json_extract(value,
** '$.name'), a strict scan of the JSON answers the rows it is sure of
** (dvFastRow) and SQLite's JSON functions the others.  NULL gives
** no entry; text holding a JSON array ('[' first) gives one entry per
** distinct element.
**   index    KV key = projected key || source key (both key encodings;
**            they are self-delimiting), value = the source key (with the
**            projected key's numeric kind)
**   unique   KV key = projected key, value = the source key
**   counter  KV key = group, value = text {"count":N,"sum":S}; a group
**            whose count reaches 0 is deleted.  Source writes add signed
**            deltas (kv_counter_add), which the engine applies at commit:
**            transactions that only change one counter do not conflict
** Every source write (kv_derived_write, called by the KV table module and
** kv_put/kv_delete before the source write itself) reads the old row,
** evaluates the projections of the old and the new row and writes the
** difference to each carrier in the same root transaction, in this fixed
** order: secondary indexes, counters, unique indexes, each kind in
** declaration order.  Every projection is evaluated and every unique
** claim checked before the first carrier write, so a failing projection or
** a unique value held by another source key fails the write with nothing
** written (a one-row statement has no SQLite statement savepoint).  A
** value held by a row that has expired (per-entry TTL) but is not swept
** yet is free: the write removes that row first, in its own root, as the
** sweeper would.  Two
** transactions claiming one unique value both write its key: the engine's
** conflict check lets one prepare, and kv_derived_prepare_error reports the
** other's failure as SQLITE_CONSTRAINT_UNIQUE.
**
** Builds.  A carrier declared on a populated source is built in batches of
** DV_BATCH source rows, each its own root transaction that writes the
** entries of its rows and advances "cursor" (the last source key covered)
** in the carrier's catalog entry, and reads the batch's key range
** (kv_root_note_range), so a concurrent write into the range conflicts
** with the batch instead of being missed.  Writers maintain a carrier only
** for source keys up to the cursor; each writer watches the carrier's
** catalog entry (kv_root_touch), so a batch committed after the writer
** bound makes the writer retry.  A carrier is not readable until "built"
** is 1.  A build that stopped (crash, error) resumes from its cursor with
** kv_repair().
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv_sql.h"
#include "ext/kv_queue.h"
#include "ext/listing.h"
#include "ext/kv/kv.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>

#define DV_INDEX    0
#define DV_COUNTER  1
#define DV_UNIQUE   2
#define DV_BATCH    512          /* source rows per build transaction */
#define DV_RETRY    200          /* conflicts a build batch retries */

typedef struct DvCarrier DvCarrier;
typedef struct DvSource DvSource;
typedef struct DvCache DvCache;
typedef struct DvList DvList;
typedef struct DvEntry DvEntry;

/* One carrier of a source, as the catalog said at DvSource.iSeq. */
struct DvCarrier {
  char *zName; int nName;
  int eKind;                    /* DV_INDEX, DV_COUNTER, DV_UNIQUE */
  char *zExpr;                  /* projection (counter: the group) */
  char *zSum;                   /* counter: sum projection, or NULL */
  int bBuilt;
  KvBuf cursor;                 /* building: last source key covered */
  sqlite3_stmt *pProj;          /* prepared on first use: key, projection,
                                ** sum */
  const char *zJx; int nJx;     /* expr is json_extract(value, '$.zJx') */
  const char *zJs; int nJs;     /* sum is json_extract(value, '$.zJs') */
};

/* What the catalog says about one table, cached per connection. */
struct DvSource {
  KvEngine *pEng;               /* no reference: the connection keeps it */
  char *zName; int nName;
  uint64_t iSeq;                /* kv_engine_catalog_seq when read */
  char *zCarrierOf;             /* the table is a carrier of this source */
  int eCarrierKind;
  int nCarrier;
  DvCarrier *a;                 /* in application order */
  sqlite3_stmt *pAll;           /* every projection of a row at once */
  int eFast;                    /* 1: every projection is a plain member
                                ** (dvFastPath), -1: not, 0: unknown */
  sqlite3_stmt *pBind;          /* fast path: SELECT ?1, ?2, ... */
  DvList *aOld, *aNew;          /* nCarrier lists each: a write's entries */
  int *abCover;                 /* nCarrier flags: a write's carriers */
  KvStreams *pStreams;          /* its change streams (kv_stream.c) */
  int bQueue;                   /* the table is a queue (kv_queue.c) */
  int bTtl;                     /* it declares a deadline (kv_ttl.c) */
  DvSource *pNext;
};

struct DvCache {
  sqlite3 *db;                  /* private connection: projections, JSON */
  DvSource *pList;
  sqlite3_stmt *pEach;          /* SELECT value FROM json_each(?1) */
};

/* One entry a row gives a carrier: key bytes, value bytes (counter: the
** group's kind byte), and the counter contribution. */
struct DvEntry {
  int iKey, nKey, iVal, nVal;
  int64_t nCount;
  int64_t iSum; double rSum; int bReal;
};
struct DvList {
  int n, nAlloc;
  DvEntry *a;
  KvBuf data;
};

/* ------------------------------------------------------------ helpers --- */

static const char *dvKindName(int eKind){
  return eKind==DV_COUNTER ? "counter" : eKind==DV_UNIQUE ? "unique index"
       : "index";
}

static int dvKindOf(const char *z){
  if( z==0 ) return -1;
  if( strcmp(z, "index")==0 ) return DV_INDEX;
  if( strcmp(z, "unique")==0 ) return DV_UNIQUE;
  if( strcmp(z, "counter")==0 ) return DV_COUNTER;
  return -1;
}

static int dvKeyCmp(const uint8_t *a, int na, const uint8_t *b, int nb){
  int c = memcmp(a, b, (size_t)(na<nb ? na : nb));
  return c ? c : na - nb;
}

static void dvListReset(DvList *p){ p->n = 0; kv_buf_reset(&p->data); }
static void dvListFree(DvList *p){
  sqlite3_free(p->a);
  kv_buf_free(&p->data);
  memset(p, 0, sizeof(*p));
}
static const uint8_t *dvKeyOf(const DvList *p, const DvEntry *e){
  return p->data.a + e->iKey;
}
static const uint8_t *dvValOf(const DvList *p, const DvEntry *e){
  return p->data.a + e->iVal;
}

/* Append an entry whose key and value bytes are the last nKey+nVal bytes
** already appended to p->data. */
static int dvListAdd(DvList *p, int nKey, int nVal, int64_t nCount,
                     int64_t iSum, double rSum, int bReal){
  DvEntry *e;
  if( p->n==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    DvEntry *a = sqlite3_realloc64(p->a, nNew*sizeof(DvEntry));
    if( a==0 ) return SQLITE_NOMEM;
    p->a = a;
    p->nAlloc = nNew;
  }
  e = &p->a[p->n++];
  e->iKey = p->data.n - nKey - nVal;
  e->nKey = nKey;
  e->iVal = p->data.n - nVal;
  e->nVal = nVal;
  e->nCount = nCount;
  e->iSum = iSum; e->rSum = rSum; e->bReal = bReal;
  return SQLITE_OK;
}

/* Hex text of bytes a/n (sqlite3_malloc'd), and back. */
static char *dvHex(const uint8_t *a, int n){
  char *z = sqlite3_malloc64((sqlite3_uint64)n*2 + 1);
  int i;
  if( z==0 ) return 0;
  for(i=0; i<n; i++){
    z[2*i] = "0123456789abcdef"[a[i]>>4];
    z[2*i+1] = "0123456789abcdef"[a[i]&15];
  }
  z[2*n] = 0;
  return z;
}
static int dvUnhex(const char *z, KvBuf *pOut){
  int i, n = z ? (int)strlen(z) : 0, rc = SQLITE_OK;
  kv_buf_reset(pOut);
  for(i=0; rc==SQLITE_OK && i+1<n; i+=2){
    int h = z[i]<='9' ? z[i]-'0' : (z[i]|32)-'a'+10;
    int l = z[i+1]<='9' ? z[i+1]-'0' : (z[i+1]|32)-'a'+10;
    uint8_t b = (uint8_t)(h*16 + l);
    rc = kv_buf_append(pOut, &b, 1);
  }
  return rc;
}


/* ------------------------------------------------------------ catalog --- */

static void dvCarrierClear(DvCarrier *c){
  sqlite3_free(c->zName);
  sqlite3_free(c->zExpr);
  sqlite3_free(c->zSum);
  kv_buf_free(&c->cursor);
  sqlite3_finalize(c->pProj);
  memset(c, 0, sizeof(*c));
}

static void dvListFree(DvList *p);
static void dvSourceClear(DvSource *s){
  int i;
  for(i=0; i<s->nCarrier; i++){
    dvCarrierClear(&s->a[i]);
    if( s->aOld ) dvListFree(&s->aOld[i]);
    if( s->aNew ) dvListFree(&s->aNew[i]);
  }
  sqlite3_finalize(s->pAll);
  sqlite3_finalize(s->pBind);
  s->pBind = 0; s->eFast = 0;
  sqlite3_free(s->aOld);
  sqlite3_free(s->aNew);
  sqlite3_free(s->abCover);
  s->pAll = 0; s->aOld = s->aNew = 0; s->abCover = 0;
  kv_stream_free(s->pStreams);
  s->pStreams = 0; s->bQueue = 0;
  sqlite3_free(s->a);
  sqlite3_free(s->zCarrierOf);
  s->a = 0; s->nCarrier = 0; s->zCarrierOf = 0;
}

/* Read carrier zName's definition from its options zOpt into *c.
** SQLITE_NOTFOUND when zOpt describes no carrier of zSource. */
static int dvCarrierParse(sqlite3 *db, const char *zName, const char *zOpt,
                          const char *zSource, DvCarrier *c){
  char *zKind = 0, *zSrc = 0, *zBuilt = 0, *zCursor = 0;
  int rc = depot_json_text(db, zOpt, "$.carrier", &zKind);
  memset(c, 0, sizeof(*c));
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.source", &zSrc);
  if( rc==SQLITE_OK && (dvKindOf(zKind)<0 || zSrc==0
                        || (zSource && strcmp(zSrc, zSource)!=0)) ){
    rc = SQLITE_NOTFOUND;
  }
  if( rc==SQLITE_OK ){
    c->eKind = dvKindOf(zKind);
    c->zName = sqlite3_mprintf("%s", zName);
    if( c->zName==0 ) rc = SQLITE_NOMEM; else c->nName = (int)strlen(zName);
  }
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.expr", &c->zExpr);
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.sum", &c->zSum);
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.built", &zBuilt);
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.cursor", &zCursor);
  if( rc==SQLITE_OK ){
    c->bBuilt = zBuilt && zBuilt[0]=='1';
    rc = dvUnhex(zCursor, &c->cursor);
  }
  if( rc==SQLITE_OK && c->zExpr==0 ) rc = SQLITE_NOTFOUND;
  if( rc!=SQLITE_OK ) dvCarrierClear(c);
  sqlite3_free(zKind); sqlite3_free(zSrc);
  sqlite3_free(zBuilt); sqlite3_free(zCursor);
  return rc;
}

/* Options of table zTab as the latest catalog has them (*pbFound). */
static int dvOptions(KvEngine *pEng, const char *zTab, int nTab,
                     char **pzOpt, char *zType, int *pbPersist, int *pbFound){
  KvMeta meta;
  int rc = kv_table_meta(pEng, 0, zTab, nTab, &meta, pbFound);
  *pzOpt = 0;
  if( rc==SQLITE_OK && *pbFound ){
    *pzOpt = meta.zOptions;
    meta.zOptions = 0;
    if( zType ) memcpy(zType, meta.zType, sizeof(meta.zType));
    if( pbPersist ) *pbPersist = meta.bPersist;
  }
  kv_meta_clear(&meta);
  return rc;
}

/* (Re)read what the catalog says about table s->zName. */
static int dvSourceRead(sqlite3 *db, DvSource *s){
  char *zOpt = 0, *zList = 0, *zOf = 0, *zKind = 0;
  sqlite3_stmt *pEach = 0;
  int bFound = 0, rc, i, k;
  dvSourceClear(s);
  s->iSeq = kv_engine_catalog_seq(s->pEng);
  rc = dvOptions(s->pEng, s->zName, s->nName, &zOpt, 0, 0, &bFound);
  if( rc!=SQLITE_OK || !bFound || zOpt==0 ) return rc;
  rc = depot_json_text(db, zOpt, "$.source", &zOf);
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.carrier", &zKind);
  if( rc==SQLITE_OK && zOf && dvKindOf(zKind)>=0 ){
    s->zCarrierOf = zOf;
    s->eCarrierKind = dvKindOf(zKind);
    zOf = 0;
  }
  if( rc==SQLITE_OK ){
    rc = kv_stream_load(db, s->pEng, zOpt, &s->pStreams, &s->bQueue);
  }
  if( rc==SQLITE_OK ){
    char *zTtl = 0;
    rc = depot_sql_text(db, "SELECT json_type(?1, '$.ttl_ms') IS NOT NULL "
                        "OR json_type(?1, '$.deadline') IS NOT NULL", zOpt, 0,
                        &zTtl);
    s->bTtl = zTtl && zTtl[0]=='1';
    sqlite3_free(zTtl);
  }
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.carriers", &zList);
  if( rc==SQLITE_OK && zList ){
    rc = sqlite3_prepare_v2(db, "SELECT value FROM json_each(?1)", -1,
                            &pEach, 0);
    if( rc==SQLITE_OK ) sqlite3_bind_text(pEach, 1, zList, -1, SQLITE_STATIC);
    while( rc==SQLITE_OK && sqlite3_step(pEach)==SQLITE_ROW ){
      const char *zC = (const char*)sqlite3_column_text(pEach, 0);
      char *zCOpt = 0;
      DvCarrier c, *a;
      int bHas = 0;
      if( zC==0 ) continue;
      rc = dvOptions(s->pEng, zC, (int)strlen(zC), &zCOpt, 0, 0, &bHas);
      if( rc==SQLITE_OK && bHas ){
        rc = dvCarrierParse(db, zC, zCOpt, s->zName, &c);
        if( rc==SQLITE_NOTFOUND ){
          rc = SQLITE_OK;
        }else if( rc==SQLITE_OK ){
          a = sqlite3_realloc64(s->a, (s->nCarrier+1)*sizeof(DvCarrier));
          if( a==0 ){ dvCarrierClear(&c); rc = SQLITE_NOMEM; }
          else{ s->a = a; s->a[s->nCarrier++] = c; }
        }
      }
      sqlite3_free(zCOpt);
    }
    sqlite3_finalize(pEach);
  }
  /* application order: indexes, counters, unique indexes (stable) */
  for(k=1; rc==SQLITE_OK && k<s->nCarrier; k++){
    for(i=k; i>0 && s->a[i-1].eKind>s->a[i].eKind; i--){
      DvCarrier t = s->a[i]; s->a[i] = s->a[i-1]; s->a[i-1] = t;
    }
  }
  if( rc==SQLITE_OK && s->nCarrier>0 ){
    s->aOld = sqlite3_malloc64(s->nCarrier*sizeof(DvList));
    s->aNew = sqlite3_malloc64(s->nCarrier*sizeof(DvList));
    s->abCover = sqlite3_malloc64(s->nCarrier*sizeof(int));
    if( s->aOld==0 || s->aNew==0 || s->abCover==0 ){
      sqlite3_free(s->aOld); sqlite3_free(s->aNew); sqlite3_free(s->abCover);
      s->aOld = s->aNew = 0; s->abCover = 0;
      rc = SQLITE_NOMEM;
    }else{
      memset(s->aOld, 0, s->nCarrier*sizeof(DvList));
      memset(s->aNew, 0, s->nCarrier*sizeof(DvList));
    }
  }
  if( rc!=SQLITE_OK ) dvSourceClear(s);
  sqlite3_free(zOpt); sqlite3_free(zList);
  sqlite3_free(zOf); sqlite3_free(zKind);
  return rc;
}

static void dvCacheFree(KvConn *pConn);
static DvCache *dvCache(KvConn *pConn){
  if( pConn->pDerived==0 ){
    pConn->pDerived = sqlite3_malloc64(sizeof(DvCache));
    if( pConn->pDerived ){
      memset(pConn->pDerived, 0, sizeof(DvCache));
      pConn->xDerivedFree = dvCacheFree;
    }
  }
  return (DvCache*)pConn->pDerived;
}

/* KvConn.xDerivedFree: the connection is closing. */
static void dvCacheFree(KvConn *pConn){
  DvCache *p = (DvCache*)pConn->pDerived;
  if( p==0 ) return;
  while( p->pList ){
    DvSource *s = p->pList;
    p->pList = s->pNext;
    dvSourceClear(s);
    sqlite3_free(s->zName);
    sqlite3_free(s);
  }
  sqlite3_finalize(p->pEach);
  sqlite3_close(p->db);
  sqlite3_free(p);
  pConn->pDerived = 0;
}

/* The connection's private in-memory connection, on which projections
** and the catalog's JSON are evaluated (so the user's connection holds no
** statement of ours and closes as usual): SQLite's built-in functions,
** JSON included, and those of this extension; not the application's own.
** NULL when it cannot be opened. */
static sqlite3 *dvDb(KvConn *pConn){
  DvCache *pC = dvCache(pConn);
  if( pC==0 ) return 0;
  if( pC->db==0 ){
    int rc = sqlite3_open_v2(":memory:", &pC->db, SQLITE_OPEN_READWRITE
                             |SQLITE_OPEN_MEMORY|SQLITE_OPEN_PRIVATECACHE, 0);
    if( rc!=SQLITE_OK ){
      sqlite3_close(pC->db);
      pC->db = 0;
    }
  }
  return pC->db;
}

/* The cached catalog view of table zTab of pEng, fresh as of now. */
static int dvSource(KvConn *pConn, KvEngine *pEng, const char *zTab,
                    int nTab, DvSource **pp){
  DvCache *pC = dvCache(pConn);
  DvSource *s;
  *pp = 0;
  if( pC==0 ) return SQLITE_NOMEM;
  for(s=pC->pList; s; s=s->pNext){
    if( s->pEng==pEng && s->nName==nTab && memcmp(s->zName, zTab, nTab)==0 ){
      break;
    }
  }
  if( s==0 ){
    s = sqlite3_malloc64(sizeof(*s));
    if( s==0 ) return SQLITE_NOMEM;
    memset(s, 0, sizeof(*s));
    s->pEng = pEng;
    s->zName = sqlite3_mprintf("%.*s", nTab, zTab);
    if( s->zName==0 ){ sqlite3_free(s); return SQLITE_NOMEM; }
    s->nName = nTab;
    s->iSeq = (uint64_t)-1;
    s->pNext = pC->pList;
    pC->pList = s;
  }
  if( s->iSeq!=kv_engine_catalog_seq(pEng) ){
    int rc = dvDb(pConn) ? dvSourceRead(dvDb(pConn), s) : SQLITE_NOMEM;
    if( rc!=SQLITE_OK ){ s->iSeq = (uint64_t)-1; return rc; }
  }
  *pp = s;
  return SQLITE_OK;
}

/* Forget every cached view of store pEng (its catalog sequence numbers
** restart when it is opened again). */
static void dvCacheDropStore(KvConn *pConn, KvEngine *pEng){
  DvCache *pC = (DvCache*)pConn->pDerived;
  DvSource *s;
  if( pC==0 ) return;
  for(s=pC->pList; s; s=s->pNext){
    if( s->pEng==pEng ) s->iSeq = (uint64_t)-1;
  }
}

/* --------------------------------------------------------- projection --- */

static int dvPrepareProj(sqlite3 *db, DvCarrier *c){
  int rc = SQLITE_OK;
  if( c->pProj==0 ){
    /* columns: the source key, the projection, the sum (counters) */
    char *zSql = sqlite3_mprintf("SELECT ?1, (%s), (%s) FROM (SELECT ?1 AS "
        "key, ?2 AS value)", c->zExpr, c->zSum ? c->zSum : "NULL");
    if( zSql==0 ) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v3(db, zSql, -1, SQLITE_PREPARE_PERSISTENT,
                            &c->pProj, 0);
    sqlite3_free(zSql);
  }
  return rc;
}

/* "kv: index X: projection failed on key K of table T: why" */
static char *dvProjError(DvCarrier *c, const char *zSrc, const uint8_t *aKey,
                         int nKey, const char *zWhy){
  char *zKey = kv_key_describe(aKey, nKey);
  char *z = sqlite3_mprintf("kv: %s %s: projection failed on key %s of "
      "table %s: %s", dvKindName(c->eKind), c->zName, zKey ? zKey : "?",
      zSrc, zWhy);
  sqlite3_free(zKey);
  return z;
}

/* Add the entry of one projected value pV (source key value pK, encoded
** aKey/nKey) to pList. */
static int dvEntryAdd(DvCarrier *c, sqlite3_value *pV, sqlite3_value *pK,
                      const uint8_t *aKey, int nKey, int64_t iSum,
                      double rSum, int bReal, DvList *pList, char **pzErr){
  int n0 = pList->data.n, nK, rc;
  if( sqlite3_value_type(pV)==SQLITE_NULL ) return SQLITE_OK;
  rc = kv_key_encode(pV, &pList->data, pzErr);
  nK = pList->data.n - n0;
  if( rc==SQLITE_OK && c->eKind==DV_INDEX ){
    rc = kv_buf_append(&pList->data, aKey, nKey);
    nK += nKey;
  }
  if( rc==SQLITE_OK ){
    rc = kv_value_encode(pV, c->eKind==DV_COUNTER ? 0 : pK, &pList->data,
                         pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = dvListAdd(pList, nK, pList->data.n - n0 - nK, 1, iSum, rSum, bReal);
  }
  if( rc!=SQLITE_OK ) pList->data.n = n0;
  return rc;
}

/* The counter sum of a row (column iCol of the projection's row): *piSum
** or *prSum (*pbReal). */
static int dvSumOf(sqlite3_stmt *pProj, int iCol, int *pbReal,
                   int64_t *piSum, double *prSum, char **pzWhy){
  *pbReal = 0; *piSum = 0; *prSum = 0.0;
  switch( sqlite3_column_type(pProj, iCol) ){
    case SQLITE_NULL: break;
    case SQLITE_INTEGER: *piSum = sqlite3_column_int64(pProj, iCol); break;
    case SQLITE_FLOAT:
      *pbReal = 1; *prSum = sqlite3_column_double(pProj, iCol); break;
    default:
      *pzWhy = sqlite3_mprintf("the sum projection gave %s, not a number",
          sqlite3_column_type(pProj, iCol)==SQLITE_TEXT ? "text" : "a blob");
      return SQLITE_MISMATCH;
  }
  return SQLITE_OK;
}

/* Does projection result pX hold a JSON array (text starting with '[')? */
static int dvIsArray(sqlite3_value *pX){
  const unsigned char *z;
  if( sqlite3_value_type(pX)!=SQLITE_TEXT ) return 0;
  z = sqlite3_value_text(pX);
  while( z && (*z==' ' || *z=='\t' || *z=='\n' || *z=='\r') ) z++;
  return z && *z=='[';
}

/* Append carrier c's entries of the row that pStmt is on (column 0 the
** source key, iCol the projection, iCol+1 the sum) to pList.  On error
** *pzWhy may say why. */
static int dvEntriesFrom(sqlite3 *db, DvCache *pC, DvCarrier *c,
                         const uint8_t *aKey, int nKey, sqlite3_stmt *pStmt,
                         int iCol, DvList *pList, char **pzWhy){
  sqlite3_value *pK = sqlite3_column_value(pStmt, 0);
  sqlite3_value *pX = sqlite3_column_value(pStmt, iCol);
  int64_t iSum = 0; double rSum = 0.0; int bReal = 0;
  int rc = c->zSum ? dvSumOf(pStmt, iCol+1, &bReal, &iSum, &rSum, pzWhy)
                   : SQLITE_OK;
  if( rc==SQLITE_OK && dvIsArray(pX) ){
    if( pC->pEach==0 ){
      rc = sqlite3_prepare_v3(db, "SELECT value FROM json_each(?1)", -1,
                              SQLITE_PREPARE_PERSISTENT, &pC->pEach, 0);
    }
    if( rc==SQLITE_OK ) rc = sqlite3_bind_value(pC->pEach, 1, pX);
    while( rc==SQLITE_OK && (rc = sqlite3_step(pC->pEach))==SQLITE_ROW ){
      rc = dvEntryAdd(c, sqlite3_column_value(pC->pEach, 0), pK, aKey,
                      nKey, iSum, rSum, bReal, pList, pzWhy);
    }
    if( rc==SQLITE_DONE ){
      rc = SQLITE_OK;
    }else if( rc!=SQLITE_OK && *pzWhy==0 ){
      *pzWhy = sqlite3_mprintf("%s", sqlite3_errmsg(db));
    }
    if( pC->pEach ) sqlite3_reset(pC->pEach);
  }else if( rc==SQLITE_OK ){
    rc = dvEntryAdd(c, pX, pK, aKey, nKey, iSum, rSum, bReal, pList, pzWhy);
  }
  return rc;
}

/* Per-entry TTL: the index and unique entries of a source row whose value
** carries a deadline carry the same deadline (kv.h "Deadlines"), so they
** turn invisible with the row, at once, without a read of the source; a
** counter row counts it until the sweeper removes it, and a read of the
** counter subtracts it (dvCounterFix).  Gives entries
** iFrom.. of p (the last ones of p->data) the deadline of aVal/nVal. */
static int dvStamp(const DvCarrier *c, const uint8_t *aVal, int nVal,
                   DvList *p, int iFrom){
  KvBuf tail = {0, 0, 0}, v = {0, 0, 0};
  int64_t iDeadline;
  int i, iBase, rc = SQLITE_OK;
  if( c->eKind==DV_COUNTER || iFrom>=p->n
   || !kv_value_deadline(aVal, nVal, &iDeadline) ){
    return SQLITE_OK;
  }
  iBase = p->a[iFrom].iKey;
  rc = kv_buf_append(&tail, p->data.a+iBase, p->data.n-iBase);
  p->data.n = iBase;
  for(i=iFrom; rc==SQLITE_OK && i<p->n; i++){
    DvEntry *e = &p->a[i];
    const uint8_t *t = tail.a + (e->iKey - iBase);
    kv_buf_reset(&v);
    rc = kv_buf_append(&v, t + e->nKey, e->nVal);
    if( rc==SQLITE_OK ) rc = kv_value_set_deadline(&v, 1, iDeadline);
    if( rc==SQLITE_OK ){
      e->iKey = p->data.n;
      rc = kv_buf_append(&p->data, t, e->nKey);
    }
    if( rc==SQLITE_OK ){
      e->iVal = p->data.n;
      e->nVal = v.n;
      rc = kv_buf_append(&p->data, v.a, v.n);
    }
  }
  if( rc!=SQLITE_OK ) p->n = iFrom;
  kv_buf_free(&tail);
  kv_buf_free(&v);
  return rc;
}

/* Append the entries of source row (aKey, aVal) for carrier c to pList.
** A failure names the carrier and the key (*pzErr). */
static int dvEntries(sqlite3 *db, DvCache *pC, DvCarrier *c, const char *zSrc,
                     const uint8_t *aKey, int nKey, const uint8_t *aVal,
                     int nVal, DvList *pList, char **pzErr){
  char *zWhy = 0;
  int iFrom = pList->n;
  int rc = db ? dvPrepareProj(db, c) : SQLITE_NOMEM;
  if( rc==SQLITE_OK ){
    rc = kv_key_bind(c->pProj, 1, aKey, nKey, aVal, nVal);
    if( rc==SQLITE_OK ) rc = kv_value_bind(c->pProj, 2, aVal, nVal);
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(c->pProj);
    if( rc==SQLITE_ROW ){
      rc = dvEntriesFrom(db, pC, c, aKey, nKey, c->pProj, 1, pList, &zWhy);
      if( rc==SQLITE_OK ) rc = dvStamp(c, aVal, nVal, pList, iFrom);
    }else{
      zWhy = sqlite3_mprintf("%s", sqlite3_errmsg(db));
      if( rc==SQLITE_DONE ) rc = SQLITE_ERROR;
    }
    sqlite3_reset(c->pProj);
  }
  if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ){
    *pzErr = dvProjError(c, zSrc, aKey, nKey, zWhy ? zWhy : sqlite3_errstr(rc));
  }
  sqlite3_free(zWhy);
  return rc;
}

/* ------------------------------------------------ plain member fast path ---
** The common projection json_extract(value, '$.name') is answered by a
** strict scan of the row's JSON instead of SQLite's JSON functions, and
** its results are bound to a statement that only returns its parameters,
** so every projection keeps the exact SQL value (and the encoding code
** path) of the general statement.  The scan answers only what it is sure
** SQLite answers the same way: a valid RFC 8259 document whose top level
** is an object, a member named once without escapes, whose value is a
** string without escapes, an integer of at most 18 digits, true, false or
** null (or an absent member: NULL).  Anything else goes to the general
** statement, which also reports every error. */

#define DV_JSON_DEPTH 64

typedef struct DvFast DvFast;
struct DvFast {
  int eType;                    /* SQLITE_NULL, _INTEGER, _TEXT */
  int64_t i;
  const char *z; int n;
  int nSeen;                    /* times the member was met */
};

/* zPath of "json_extract(value, '$.name')" (spaces allowed around the
** tokens, names case-insensitive): the name (*pz, *pn), or 0. */
static int dvFastPath(const char *zExpr, const char **pz, int *pn){
  const char *z = zExpr;
  int n;
#define DV_WS while( *z==' ' || *z=='\t' || *z=='\n' || *z=='\r' ) z++
  if( z==0 ) return 0;
  DV_WS;
  if( sqlite3_strnicmp(z, "json_extract", 12)!=0 ) return 0;
  z += 12; DV_WS;
  if( *z++!='(' ) return 0;
  DV_WS;
  if( sqlite3_strnicmp(z, "value", 5)!=0 ) return 0;
  z += 5; DV_WS;
  if( *z++!=',' ) return 0;
  DV_WS;
  if( z[0]!='\'' || z[1]!='$' || z[2]!='.' ) return 0;
  z += 3;
  if( !((*z>='a' && *z<='z') || (*z>='A' && *z<='Z') || *z=='_') ) return 0;
  for(n=0; (z[n]>='a' && z[n]<='z') || (z[n]>='A' && z[n]<='Z')
           || (z[n]>='0' && z[n]<='9') || z[n]=='_'; n++){}
  *pz = z; *pn = n;
  z += n;
  if( *z++!='\'' ) return 0;
  DV_WS;
  if( *z++!=')' ) return 0;
  DV_WS;
#undef DV_WS
  return *z==0;
}

static int dvjWs(const char *z, int n, int i){
  while( i<n && (z[i]==' ' || z[i]=='\t' || z[i]=='\n' || z[i]=='\r') ) i++;
  return i;
}

/* The end of the string whose opening quote is at z[i], or -1; *pbEsc:
** it holds an escape. */
static int dvjString(const char *z, int n, int i, int *pbEsc){
  *pbEsc = 0;
  for(i++; i<n; i++){
    unsigned char c = (unsigned char)z[i];
    if( c=='"' ) return i+1;
    if( c<0x20 ) return -1;
    if( c=='\\' ){
      *pbEsc = 1;
      if( ++i>=n ) return -1;
      switch( z[i] ){
        case '"': case '\\': case '/': case 'b': case 'f': case 'n':
        case 'r': case 't': break;
        case 'u': {
          int k;
          for(k=1; k<=4; k++){
            char h = i+k<n ? z[i+k] : 0;
            if( !((h>='0' && h<='9') || (h>='a' && h<='f')
                  || (h>='A' && h<='F')) ) return -1;
          }
          i += 4;
          break;
        }
        default: return -1;
      }
    }
  }
  return -1;
}

/* The end of the number at z[i], or -1; *pbInt: an integer of at most 18
** digits, no "-0" (*pi its value). */
static int dvjNumber(const char *z, int n, int i, int *pbInt, int64_t *pi){
  int bNeg = 0, nDig = 0, bInt = 1;
  int64_t v = 0;
  if( i<n && z[i]=='-' ){ bNeg = 1; i++; }
  if( i>=n ) return -1;
  if( z[i]=='0' ){
    i++; nDig = 1;
  }else if( z[i]>='1' && z[i]<='9' ){
    while( i<n && z[i]>='0' && z[i]<='9' ){
      if( nDig<18 ) v = v*10 + (z[i]-'0');
      nDig++; i++;
    }
  }else{
    return -1;
  }
  if( i<n && z[i]=='.' ){
    int k = 0;
    bInt = 0;
    for(i++; i<n && z[i]>='0' && z[i]<='9'; i++) k++;
    if( k==0 ) return -1;
  }
  if( i<n && (z[i]=='e' || z[i]=='E') ){
    int k = 0;
    bInt = 0;
    i++;
    if( i<n && (z[i]=='+' || z[i]=='-') ) i++;
    for(; i<n && z[i]>='0' && z[i]<='9'; i++) k++;
    if( k==0 ) return -1;
  }
  if( nDig>18 || (bNeg && v==0) ) bInt = 0;
  *pbInt = bInt;
  *pi = bNeg ? -v : v;
  return i;
}

/* The end of the JSON value at z[i] (after spaces), or -1. */
static int dvjValue(const char *z, int n, int i, int iDepth){
  int bEsc, bInt;
  int64_t v;
  i = dvjWs(z, n, i);
  if( i>=n || iDepth>DV_JSON_DEPTH ) return -1;
  switch( z[i] ){
    case '"': return dvjString(z, n, i, &bEsc);
    case '{': case '[': {
      char cEnd = z[i]=='{' ? '}' : ']';
      int bObj = z[i]=='{';
      i = dvjWs(z, n, i+1);
      if( i<n && z[i]==cEnd ) return i+1;
      while( 1 ){
        if( bObj ){
          i = dvjWs(z, n, i);
          if( i>=n || z[i]!='"' ) return -1;
          i = dvjString(z, n, i, &bEsc);
          if( i<0 ) return -1;
          i = dvjWs(z, n, i);
          if( i>=n || z[i]!=':' ) return -1;
          i++;
        }
        i = dvjValue(z, n, i, iDepth+1);
        if( i<0 ) return -1;
        i = dvjWs(z, n, i);
        if( i>=n ) return -1;
        if( z[i]==cEnd ) return i+1;
        if( z[i]!=',' ) return -1;
        i++;
      }
    }
    case 't': return (n-i>=4 && memcmp(z+i, "true", 4)==0) ? i+4 : -1;
    case 'f': return (n-i>=5 && memcmp(z+i, "false", 5)==0) ? i+5 : -1;
    case 'n': return (n-i>=4 && memcmp(z+i, "null", 4)==0) ? i+4 : -1;
    default:  return dvjNumber(z, n, i, &bInt, &v);
  }
}

/* The member named azName[k] of the top-level object of z into aOut[k]
** (k < nName).  0 when the document or a wanted member is outside what
** the fast path answers. */
static int dvjMembers(const char *z, int n, const char **azName,
                      const int *anName, int nName, DvFast *aOut){
  int i, k, bEsc;
  for(k=0; k<nName; k++){
    memset(&aOut[k], 0, sizeof(aOut[k]));
    aOut[k].eType = SQLITE_NULL;
  }
  i = dvjWs(z, n, 0);
  if( i>=n || z[i]!='{' ) return 0;
  i = dvjWs(z, n, i+1);
  if( i<n && z[i]=='}' ){
    i++;
  }else{
    while( 1 ){
      int iKey, nKeyName, iVal;
      i = dvjWs(z, n, i);
      if( i>=n || z[i]!='"' ) return 0;
      iKey = i+1;
      i = dvjString(z, n, i, &bEsc);
      if( i<0 || bEsc ) return 0;
      nKeyName = i-1-iKey;
      i = dvjWs(z, n, i);
      if( i>=n || z[i]!=':' ) return 0;
      iVal = dvjWs(z, n, i+1);
      i = dvjValue(z, n, iVal, 1);
      if( i<0 ) return 0;
      for(k=0; k<nName; k++){
        DvFast *f = &aOut[k];
        if( anName[k]!=nKeyName || memcmp(azName[k], z+iKey, nKeyName) ){
          continue;
        }
        if( ++f->nSeen>1 ) return 0;
        switch( z[iVal] ){
          case '"':
            if( dvjString(z, n, iVal, &bEsc)<0 || bEsc ) return 0;
            f->eType = SQLITE_TEXT;
            f->z = z+iVal+1;
            f->n = i-iVal-2;
            break;
          case 't': f->eType = SQLITE_INTEGER; f->i = 1; break;
          case 'f': f->eType = SQLITE_INTEGER; f->i = 0; break;
          case 'n': break;
          case '{': case '[': return 0;
          default: {
            int bInt = 0;
            if( dvjNumber(z, n, iVal, &bInt, &f->i)<0 || !bInt ) return 0;
            f->eType = SQLITE_INTEGER;
            break;
          }
        }
      }
      i = dvjWs(z, n, i);
      if( i>=n ) return 0;
      if( z[i]=='}' ){ i++; break; }
      if( z[i]!=',' ) return 0;
      i++;
    }
  }
  return dvjWs(z, n, i)==n;
}

/* Is every projection of s a plain member (sets s->eFast, the carriers'
** zJx/zJs)? */
static int dvFastCheck(DvSource *s){
  int i;
  if( s->eFast==0 ){
    s->eFast = s->nCarrier>0 && s->nCarrier<=8 ? 1 : -1;
    for(i=0; s->eFast>0 && i<s->nCarrier; i++){
      DvCarrier *c = &s->a[i];
      if( !dvFastPath(c->zExpr, &c->zJx, &c->nJx)
       || (c->zSum && !dvFastPath(c->zSum, &c->zJs, &c->nJs)) ){
        s->eFast = -1;
      }
    }
  }
  return s->eFast>0;
}

/* Bind the fast-path values of row (aKey, aVal) to s->pBind and step it
** onto its row: SQLITE_ROW, or SQLITE_DONE when the fast path does not
** answer this row (the caller evaluates it the general way). */
static int dvFastRow(sqlite3 *db, DvSource *s, const uint8_t *aKey,
                     int nKey, const uint8_t *aVal, int nVal){
  const char *azName[16];
  int anName[16], aiCol[16];
  DvFast aOut[16];
  const char *z;
  int i, nName = 0, nText = 0, rc = SQLITE_OK;
  z = kv_value_text(aVal, nVal, &nText);
  if( z==0 ) return SQLITE_DONE;
  for(i=0; i<s->nCarrier; i++){
    DvCarrier *c = &s->a[i];
    azName[nName] = c->zJx; anName[nName] = c->nJx; aiCol[nName++] = 2+2*i;
    if( c->zSum ){
      azName[nName] = c->zJs; anName[nName] = c->nJs;
      aiCol[nName++] = 3+2*i;
    }
  }
  if( !dvjMembers(z, nText, azName, anName, nName, aOut) ) return SQLITE_DONE;
  if( s->pBind==0 ){
    char *zSql = sqlite3_mprintf("SELECT ?1");
    for(i=0; zSql && i<2*s->nCarrier; i++){
      zSql = sqlite3_mprintf("%z, ?%d", zSql, i+2);
    }
    if( zSql==0 ) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v3(db, zSql, -1, SQLITE_PREPARE_PERSISTENT,
                            &s->pBind, 0);
    sqlite3_free(zSql);
    if( rc!=SQLITE_OK ) return rc;
  }
  sqlite3_clear_bindings(s->pBind);
  rc = kv_key_bind(s->pBind, 1, aKey, nKey, aVal, nVal);
  for(i=0; rc==SQLITE_OK && i<nName; i++){
    if( aOut[i].eType==SQLITE_INTEGER ){
      rc = sqlite3_bind_int64(s->pBind, aiCol[i], aOut[i].i);
    }else if( aOut[i].eType==SQLITE_TEXT ){
      rc = sqlite3_bind_text(s->pBind, aiCol[i], aOut[i].n ? aOut[i].z : "",
                             aOut[i].n, SQLITE_STATIC);
    }
  }
  if( rc==SQLITE_OK ){
    rc = sqlite3_step(s->pBind);
    if( rc!=SQLITE_ROW ){
      sqlite3_reset(s->pBind);
      if( rc==SQLITE_DONE ) rc = SQLITE_ERROR;
    }
  }
  return rc;
}

/* The entries of row (aKey, aVal) for every carrier of s that covers the
** key, into apList[i], from one statement that evaluates every projection
** (SQLite's JSON functions then parse the value once).  A failure is
** located by evaluating the carriers one by one, so the message names the
** carrier. */
static int dvEntriesAll(sqlite3 *db, DvCache *pC, DvSource *s,
                        const uint8_t *aKey, int nKey, const uint8_t *aVal,
                        int nVal, const int *abCover, DvList *aList,
                        char **pzErr){
  char *zWhy = 0;
  int i, rc = SQLITE_OK;
  if( db==0 ) return SQLITE_NOMEM;
  if( dvFastCheck(s) ){
    rc = dvFastRow(db, s, aKey, nKey, aVal, nVal);
    if( rc==SQLITE_ROW ){
      rc = SQLITE_OK;
      for(i=0; rc==SQLITE_OK && i<s->nCarrier; i++){
        if( !abCover[i] ) continue;
        int iFrom = aList[i].n;
        rc = dvEntriesFrom(db, pC, &s->a[i], aKey, nKey, s->pBind, 1+2*i,
                           &aList[i], &zWhy);
        if( rc==SQLITE_OK ){
          rc = dvStamp(&s->a[i], aVal, nVal, &aList[i], iFrom);
        }
        if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ){
          *pzErr = dvProjError(&s->a[i], s->zName, aKey, nKey,
                               zWhy ? zWhy : sqlite3_errstr(rc));
        }
      }
      sqlite3_reset(s->pBind);
      sqlite3_free(zWhy);
      return rc;
    }
    if( rc!=SQLITE_DONE ) return rc;
    rc = SQLITE_OK;
  }
  if( s->pAll==0 ){
    char *zSql = sqlite3_mprintf("SELECT ?1");
    for(i=0; zSql && i<s->nCarrier; i++){
      zSql = sqlite3_mprintf("%z, (%s), (%s)", zSql, s->a[i].zExpr,
                             s->a[i].zSum ? s->a[i].zSum : "NULL");
    }
    zSql = zSql ? sqlite3_mprintf("%z FROM (SELECT ?1 AS key, ?2 AS value)",
                                  zSql) : 0;
    if( zSql==0 ) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v3(db, zSql, -1, SQLITE_PREPARE_PERSISTENT,
                            &s->pAll, 0);
    sqlite3_free(zSql);
  }
  if( rc==SQLITE_OK ) rc = kv_key_bind(s->pAll, 1, aKey, nKey, aVal, nVal);
  if( rc==SQLITE_OK ) rc = kv_value_bind(s->pAll, 2, aVal, nVal);
  if( rc==SQLITE_OK && sqlite3_step(s->pAll)==SQLITE_ROW ){
    for(i=0; rc==SQLITE_OK && i<s->nCarrier; i++){
      if( !abCover[i] ) continue;
      int iFrom = aList[i].n;
      rc = dvEntriesFrom(db, pC, &s->a[i], aKey, nKey, s->pAll, 1+2*i,
                         &aList[i], &zWhy);
      if( rc==SQLITE_OK ) rc = dvStamp(&s->a[i], aVal, nVal, &aList[i], iFrom);
      if( rc!=SQLITE_OK && rc!=SQLITE_NOMEM ){
        *pzErr = dvProjError(&s->a[i], s->zName, aKey, nKey,
                             zWhy ? zWhy : sqlite3_errstr(rc));
      }
    }
    sqlite3_reset(s->pAll);
  }else if( rc==SQLITE_OK ){
    sqlite3_reset(s->pAll);
    /* a projection failed: find which, for the message */
    for(i=0; rc==SQLITE_OK && i<s->nCarrier; i++){
      DvList tmp;
      memset(&tmp, 0, sizeof(tmp));
      if( abCover[i] ) rc = dvEntries(db, pC, &s->a[i], s->zName, aKey, nKey,
                                      aVal, nVal, &tmp, pzErr);
      dvListFree(&tmp);
    }
    if( rc==SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv: a projection of table %s failed: %s",
                               s->zName, sqlite3_errmsg(db));
      rc = SQLITE_ERROR;
    }
  }
  sqlite3_free(zWhy);
  return rc;
}

/* ------------------------------------------------------------ counters --- */

/* Parse counter text {"count":N,"sum":S}. */
static void dvCounterParse(const char *z, int n, int64_t *pnCount,
                           int64_t *piSum, double *prSum, int *pbReal){
  char zBuf[128];
  const char *zS;
  *pnCount = 0; *piSum = 0; *prSum = 0.0; *pbReal = 0;
  if( z==0 || n>=(int)sizeof(zBuf) ) return;
  memcpy(zBuf, z, n);
  zBuf[n] = 0;
  if( (zS = strstr(zBuf, "\"count\":"))!=0 ) *pnCount = strtoll(zS+8, 0, 10);
  if( (zS = strstr(zBuf, "\"sum\":"))!=0 ){
    zS += 6;
    if( strpbrk(zS, ".eEnN")!=0 ){ *pbReal = 1; *prSum = strtod(zS, 0); }
    else *piSum = strtoll(zS, 0, 10);
  }
}

static char *dvCounterText(int64_t nCount, int64_t iSum, double rSum,
                           int bReal){
  if( bReal ){
    return sqlite3_mprintf("{\"count\":%lld,\"sum\":%!.17g}",
                           (long long)nCount, rSum + (double)iSum);
  }
  return sqlite3_mprintf("{\"count\":%lld,\"sum\":%lld}", (long long)nCount,
                         (long long)iSum);
}

/* Add (nCount, sum) to the group aKey of counter c in root r, as an
** ordinary write of the row (kv_repair; source writes use the commutative
** kv_counter_add). */
static int dvCounterAdd(KvRoot *r, DvCarrier *c, const uint8_t *aKey,
                        int nKey, const uint8_t *aKind, int64_t nCount,
                        int64_t iSum, double rSum, int bReal, char **pzErr){
  KvBuf old = {0, 0, 0}, val = {0, 0, 0};
  int64_t n0, i0; double r0; int b0, bFound = 0, nText = 0;
  int rc = kv_peek(r, c->zName, c->nName, aKey, nKey, &old, &bFound, pzErr);
  if( rc==SQLITE_OK ){
    const char *zText = bFound ? kv_value_text(old.a, old.n, &nText) : 0;
    dvCounterParse(zText, nText, &n0, &i0, &r0, &b0);
    n0 += nCount; i0 += iSum; r0 += rSum; b0 = b0 || bReal;
    if( n0<=0 ){
      rc = kv_del(r, c->zName, c->nName, aKey, nKey, pzErr);
    }else{
      char *z = dvCounterText(n0, i0, r0, b0);
      if( z==0 ) rc = SQLITE_NOMEM;
      if( rc==SQLITE_OK ) rc = kv_value_encode_text(aKind, z, (int)strlen(z),
                                                    &val);
      if( rc==SQLITE_OK ){
        rc = kv_put(r, c->zName, c->nName, aKey, nKey, val.a, val.n, pzErr);
      }
      sqlite3_free(z);
    }
  }
  kv_buf_free(&old);
  kv_buf_free(&val);
  return rc;
}

/* ------------------------------------------------------------ applying --- */

/* Is entry e of pA also in pB (same key bytes; bVal: same value too)? */
static int dvListHas(const DvList *pB, const DvList *pA, const DvEntry *e,
                     int bVal){
  int i;
  for(i=0; i<pB->n; i++){
    const DvEntry *f = &pB->a[i];
    if( f->nKey==e->nKey && memcmp(dvKeyOf(pB, f), dvKeyOf(pA, e), e->nKey)==0
     && (!bVal || (f->nVal==e->nVal
                   && memcmp(dvValOf(pB, f), dvValOf(pA, e), e->nVal)==0)) ){
      return 1;
    }
  }
  return 0;
}

/* "kv: unique index X: value V is already held by another key" */
static int dvUniqueError(DvCarrier *c, const uint8_t *aKey, int nKey,
                         const uint8_t *aHeld, int nHeld, char **pzErr){
  char *zVal = kv_key_describe(aKey, nKey);
  (void)aHeld; (void)nHeld;
  *pzErr = sqlite3_mprintf("kv: unique index %s: value %s is already held "
      "by another key of %s", c->zName, zVal ? zVal : "?", "its source");
  sqlite3_free(zVal);
  return SQLITE_CONSTRAINT_UNIQUE;
}

/* Does the stored unique entry (aHeld) name the same source key as e? */
static int dvSameOwner(const uint8_t *aHeld, int nHeld, const DvList *p,
                       const DvEntry *e){
  return kv_value_same_payload(aHeld, nHeld, dvValOf(p, e), e->nVal);
}

/* Would claiming the unique entries of pNew missing from pOld take a
** value another source key holds?  SQLITE_CONSTRAINT_UNIQUE then; reads
** only, so a refused write has written nothing.  A value held by a row
** that has expired (the entry carries the row's deadline) is free: the
** check returns DV_HOLDER_EXPIRED with the holder's source key in *pHolder,
** and the caller removes that row first, as the sweeper would (pHolder
** NULL, for builds: such a value is taken like any other). */
#define DV_HOLDER_EXPIRED (-1)
static int dvUniqueCheck(KvRoot *r, DvCarrier *c, DvList *pOld, DvList *pNew,
                         KvBuf *pHolder, char **pzErr){
  KvBuf held = {0, 0, 0};
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<pNew->n; i++){
    DvEntry *e = &pNew->a[i];
    int bFound = 0;
    if( dvListHas(pOld, pNew, e, 1) ) continue;
    rc = kv_peek(r, c->zName, c->nName, dvKeyOf(pNew, e), e->nKey, &held,
                 &bFound, pzErr);
    if( rc==SQLITE_OK && bFound && !dvSameOwner(held.a, held.n, pNew, e) ){
      KvDatum d;
      if( pHolder && kv_value_expired(held.a, held.n, kv_clock_ms())
       && kv_value_decode(held.a, held.n, &d)==SQLITE_OK ){
        kv_buf_reset(pHolder);
        rc = kv_key_encode_c(d.eType, d.i, d.r, d.z, d.n, pHolder, pzErr);
        kv_datum_clear(&d);
        if( rc==SQLITE_OK ) rc = DV_HOLDER_EXPIRED;
      }else{
        rc = dvUniqueError(c, dvKeyOf(pNew, e), e->nKey, held.a, held.n,
                           pzErr);
      }
    }
  }
  kv_buf_free(&held);
  return rc;
}

/* Write the entries of pNew missing from pOld, delete those of pOld missing
** from pNew: index entries, and unique claims (dvUniqueCheck has passed). */
static int dvApplyIndex(KvRoot *r, DvCarrier *c, DvList *pOld, DvList *pNew,
                        char **pzErr){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<pOld->n; i++){
    DvEntry *e = &pOld->a[i];
    if( dvListHas(pNew, pOld, e, 0) ) continue;
    rc = kv_del(r, c->zName, c->nName, dvKeyOf(pOld, e), e->nKey, pzErr);
  }
  for(i=0; rc==SQLITE_OK && i<pNew->n; i++){
    DvEntry *e = &pNew->a[i];
    if( dvListHas(pOld, pNew, e, 1) ) continue;
    rc = kv_put(r, c->zName, c->nName, dvKeyOf(pNew, e), e->nKey,
                dvValOf(pNew, e), e->nVal, pzErr);
  }
  return rc;
}

/* Counter deltas: -1 and -sum per old group, +1 and +sum per new group,
** merged per group so an unchanged group is not written. */
static int dvApplyCounter(KvRoot *r, DvCarrier *c, DvList *pOld, DvList *pNew,
                          char **pzErr){
  int i, j, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<pOld->n + pNew->n; i++){
    DvList *pL = i<pOld->n ? pOld : pNew;
    DvEntry *e = &pL->a[i<pOld->n ? i : i-pOld->n];
    int64_t nCount = 0, iSum = 0; double rSum = 0.0; int bReal = 0, bDone = 0;
    /* skip a group already handled at an earlier position */
    for(j=0; j<i && !bDone; j++){
      DvList *pJ = j<pOld->n ? pOld : pNew;
      DvEntry *f = &pJ->a[j<pOld->n ? j : j-pOld->n];
      bDone = f->nKey==e->nKey
           && memcmp(dvKeyOf(pJ, f), dvKeyOf(pL, e), e->nKey)==0;
    }
    if( bDone ) continue;
    for(j=i; j<pOld->n + pNew->n; j++){
      DvList *pJ = j<pOld->n ? pOld : pNew;
      DvEntry *f = &pJ->a[j<pOld->n ? j : j-pOld->n];
      int s = j<pOld->n ? -1 : 1;
      if( f->nKey!=e->nKey || memcmp(dvKeyOf(pJ, f), dvKeyOf(pL, e), e->nKey) ){
        continue;
      }
      nCount += s; iSum += s*f->iSum; rSum += s*f->rSum;
      bReal = bReal || f->bReal;
    }
    if( nCount==0 && iSum==0 && rSum==0.0 ) continue;
    rc = kv_counter_add(r, c->zName, c->nName, dvKeyOf(pL, e), e->nKey,
                        dvValOf(pL, e), nCount, iSum, rSum, bReal, pzErr);
  }
  return rc;
}

static int dvApply(KvRoot *r, DvCarrier *c, DvList *pOld, DvList *pNew,
                   char **pzErr){
  switch( c->eKind ){
    case DV_UNIQUE:  return dvApplyIndex(r, c, pOld, pNew, pzErr);
    case DV_COUNTER: return dvApplyCounter(r, c, pOld, pNew, pzErr);
    default:         return dvApplyIndex(r, c, pOld, pNew, pzErr);
  }
}

/* Does carrier c cover source key aKey now (built, or up to its cursor)? */
static int dvCovers(const DvCarrier *c, const uint8_t *aKey, int nKey){
  if( c->bBuilt ) return 1;
  return c->cursor.n>0 && dvKeyCmp(aKey, nKey, c->cursor.a, c->cursor.n)<=0;
}

int kv_derived_write(KvConn *pConn, KvRoot *r, const char *zTab, int nTab,
                     const uint8_t *aKey, int nKey, const uint8_t *aVal,
                     int nVal, int bDelete, int eOld, const uint8_t *aOld,
                     int nOld, char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  DvSource *s = 0;
  KvBuf old = {0, 0, 0}, holder = {0, 0, 0};
  int i, bFound = 0, nCover = 0, nTry = 0, nHolder = 0;
  int rc = kv_root_touch(r, zTab, nTab, 1, pzErr);
again:
  bFound = 0;
  nCover = 0;
  if( rc==SQLITE_OK ) rc = dvSource(pConn, pEng, zTab, nTab, &s);
  if( rc!=SQLITE_OK ) return rc;
  if( s->zCarrierOf ){
    *pzErr = sqlite3_mprintf("kv: table %s is the %s of %s and changes only "
        "with it: write %s instead", s->zName, dvKindName(s->eCarrierKind),
        s->zCarrierOf, s->zCarrierOf);
    return SQLITE_ERROR;
  }
  if( s->bQueue ){
    *pzErr = sqlite3_mprintf("kv: table %s is a queue: it changes through "
        "kv_enqueue and the kv_queue_* functions", s->zName);
    return SQLITE_ERROR;
  }
  if( s->nCarrier==0 && s->pStreams==0 ) return SQLITE_OK;
  /* A write that fails must leave nothing behind, with or without a
  ** statement savepoint of SQLite's (a one-row statement has none): every
  ** projection and unique claim is checked before the first write. */
  if( eOld==KV_DERIVED_OLD_UNKNOWN ){
    rc = kv_peek(r, zTab, nTab, aKey, nKey, &old, &bFound, pzErr);
  }else if( eOld==KV_DERIVED_OLD_GIVEN ){
    bFound = 1;
    rc = kv_buf_append(&old, aOld, nOld);
  }
  for(i=0; rc==SQLITE_OK && i<s->nCarrier; i++){
    DvCarrier *c = &s->a[i];
    rc = kv_root_touch(r, c->zName, c->nName, 1, pzErr);
    s->abCover[i] = dvCovers(c, aKey, nKey);
    nCover += s->abCover[i];
    dvListReset(&s->aOld[i]);
    dvListReset(&s->aNew[i]);
  }
  if( rc==SQLITE_OK && s->iSeq!=kv_engine_catalog_seq(pEng) ){
    /* The catalog changed (a build batch) after it was read and perhaps
    ** before a carrier was watched: this write cannot tell which keys the
    ** carriers cover.  Everything is bound and watched now (nothing is
    ** written yet), so a retry of the write reads a catalog that any later
    ** change conflicts with. */
    kv_buf_free(&old);
    if( ++nTry>DV_RETRY ){
      *pzErr = sqlite3_mprintf("kv: the carriers of %s keep changing; retry "
                               "the write", zTab);
      return SQLITE_BUSY;
    }
    goto again;
  }
  if( rc==SQLITE_OK && nCover && bFound ){
    rc = dvEntriesAll(dvDb(pConn), dvCache(pConn), s, aKey, nKey, old.a,
                      old.n, s->abCover, s->aOld, pzErr);
  }
  if( rc==SQLITE_OK && nCover && !bDelete ){
    rc = dvEntriesAll(dvDb(pConn), dvCache(pConn), s, aKey, nKey, aVal, nVal,
                      s->abCover, s->aNew, pzErr);
  }
  for(i=0; rc==SQLITE_OK && i<s->nCarrier; i++){
    if( s->abCover[i] && s->a[i].eKind==DV_UNIQUE ){
      rc = dvUniqueCheck(r, &s->a[i], &s->aOld[i], &s->aNew[i], &holder,
                         pzErr);
    }
  }
  if( rc==DV_HOLDER_EXPIRED ){
    /* The value is held by an expired row not swept yet: remove that row
    ** in this root, as the sweeper would (its carriers' entries, counters
    ** and stream events, operation "expire"), then check again.  The
    ** removal writes the holder's key, so a transaction that rewrites it
    ** concurrently conflicts with this one (remove-if-still-expired). */
    KvBuf hv = {0, 0, 0};
    int bHeld = 0;
    kv_buf_free(&old);
    rc = kv_peek(r, zTab, nTab, holder.a, holder.n, &hv, &bHeld, pzErr);
    if( rc==SQLITE_OK && bHeld && kv_value_expired(hv.a, hv.n, kv_clock_ms())
     && ++nHolder<=DV_RETRY ){
      rc = kv_root_note_read(r, zTab, nTab, holder.a, holder.n, pzErr);
      if( rc==SQLITE_OK ){
        rc = kv_derived_write(pConn, r, zTab, nTab, holder.a, holder.n, 0, 0,
                              KV_DERIVED_EXPIRE, KV_DERIVED_OLD_GIVEN, hv.a,
                              hv.n, pzErr);
      }
      if( rc==SQLITE_OK ) rc = kv_del(r, zTab, nTab, holder.a, holder.n,
                                      pzErr);
    }else if( rc==SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv: the carriers of %s disagree with its "
          "rows (a unique value names a row that is not expired); run "
          "kv_validate('%s')", zTab, zTab);
      rc = SQLITE_CORRUPT;
    }
    kv_buf_free(&hv);
    kv_buf_free(&holder);
    if( rc!=SQLITE_OK ) return rc;
    goto again;
  }
  kv_buf_free(&holder);
  if( rc==SQLITE_OK && s->pStreams ){
    /* the change streams' events: built (and checked) before any write */
    rc = kv_stream_write(dvDb(pConn), s->pStreams, r, zTab, nTab, aKey, nKey,
                         aVal, nVal, bDelete, bFound, old.a, old.n, pzErr);
  }
  kv_buf_free(&old);
  if( rc!=SQLITE_OK ) return rc;
  for(i=0; rc==SQLITE_OK && i<s->nCarrier; i++){
    if( s->abCover[i] ) rc = dvApply(r, &s->a[i], &s->aOld[i], &s->aNew[i],
                                     pzErr);
  }
  /* Past the checks only SQLITE_NOMEM can fail a write (the carriers are
  ** bound already), and SQLite rolls the whole transaction back on it. */
  return rc;
}

int kv_derived_prepare_error(KvConn *pConn, KvRoot *r, int rc,
                             char **pzErr){
  const KvConflict *a = 0;
  int i, n;
  if( rc!=SQLITE_BUSY_SNAPSHOT ) return rc;
  n = kv_root_conflicts(r, &a);
  for(i=0; i<n; i++){
    DvSource *s = 0;
    if( dvSource(pConn, kv_root_engine(r), a[i].zTable, a[i].nTable, &s)
        !=SQLITE_OK ) continue;
    if( s->zCarrierOf && s->eCarrierKind==DV_UNIQUE ){
      char *zVal = kv_key_describe(a[i].aKey, a[i].nKey);
      sqlite3_free(*pzErr);
      *pzErr = sqlite3_mprintf("kv: unique index %s: value %s is claimed by "
          "a concurrent transaction that committed first; the transaction "
          "was rolled back", s->zName, zVal ? zVal : "?");
      sqlite3_free(zVal);
      return SQLITE_CONSTRAINT_UNIQUE;
    }
  }
  return rc;
}

/* --------------------------------------------------------------- build --- */

/* New options of carrier zName: cursor and built replaced. */
static int dvCarrierOptions(sqlite3 *db, const char *zOpt, const uint8_t *aCur,
                            int nCur, int bBuilt, char **pzNew){
  char *zHex = dvHex(aCur, nCur);
  char *zSql;
  int rc;
  if( zHex==0 ) return SQLITE_NOMEM;
  zSql = sqlite3_mprintf("SELECT json_set(?1, '$.cursor', ?2, '$.built', %d)",
                         bBuilt);
  rc = zSql ? depot_sql_text(db, zSql, zOpt, zHex, pzNew) : SQLITE_NOMEM;
  sqlite3_free(zSql);
  sqlite3_free(zHex);
  return rc;
}

/* One build batch of carrier zName in root r: the entries of the next
** nBatch source rows after its cursor.  *pbDone once built. */
static int dvBuildBatch(KvConn *pConn, KvRoot *r, const char *zName,
                        int nBatch, int *pbDone, char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  char *zOpt = 0, *zNewOpt = 0;
  DvCarrier c;
  DvList lNone, lNew;
  KvIter *pIter = 0;
  KvBound lo;
  KvBuf last = {0, 0, 0};
  int bFound = 0, n = 0, rc;
  memset(&c, 0, sizeof(c));
  memset(&lNone, 0, sizeof(lNone));
  memset(&lNew, 0, sizeof(lNew));
  *pbDone = 0;
  rc = kv_root_touch(r, zName, (int)strlen(zName), 1, pzErr);
  if( rc==SQLITE_OK ) rc = dvOptions(pEng, zName, (int)strlen(zName), &zOpt,
                                     0, 0, &bFound);
  if( rc==SQLITE_OK && !bFound ){
    *pzErr = sqlite3_mprintf("kv: no such carrier: %s", zName);
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ){
    rc = dvCarrierParse(dvDb(pConn), zName, zOpt, 0, &c);
    if( rc==SQLITE_NOTFOUND ){
      *pzErr = sqlite3_mprintf("kv: table %s is no index or counter", zName);
      rc = SQLITE_ERROR;
    }
  }
  if( rc==SQLITE_OK && c.bBuilt ){ *pbDone = 1; goto done; }
  if( rc==SQLITE_OK ){
    char *zSrc = 0;
    rc = depot_json_text(dvDb(pConn), zOpt, "$.source", &zSrc);
    lo.aKey = c.cursor.a; lo.nKey = c.cursor.n; lo.bIncl = 0;
    /* bind the source first: the scan then reads the snapshot from which
    ** the range read below is checked */
    if( rc==SQLITE_OK ) rc = kv_root_bind(r, zSrc, (int)strlen(zSrc), pzErr);
    if( rc==SQLITE_OK ){
      rc = kv_iter_open(pEng, r, zSrc, (int)strlen(zSrc),
                        c.cursor.n ? &lo : 0, 0, KV_ITER_WITH_EXPIRED, &pIter,
                        pzErr);
    }
    while( rc==SQLITE_OK && !kv_iter_eof(pIter) && n<nBatch ){
      KvMapEntry e;
      kv_iter_entry(pIter, &e);
      dvListReset(&lNew);
      rc = dvEntries(dvDb(pConn), dvCache(pConn), &c, zSrc, e.aKey, e.nKey,
                     e.aVal, e.nVal, &lNew, pzErr);
      if( rc==SQLITE_OK && c.eKind==DV_UNIQUE ){
        rc = dvUniqueCheck(r, &c, &lNone, &lNew, 0, pzErr);
      }
      if( rc==SQLITE_OK ) rc = dvApply(r, &c, &lNone, &lNew, pzErr);
      if( rc==SQLITE_OK ){
        kv_buf_reset(&last);
        rc = kv_buf_append(&last, e.aKey, e.nKey);
      }
      n++;
      if( rc==SQLITE_OK ) kv_iter_next(pIter);
    }
    if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
    if( rc==SQLITE_OK ){
      int bEof = kv_iter_eof(pIter);
      if( last.n==0 && c.cursor.n ) rc = kv_buf_append(&last, c.cursor.a,
                                                       c.cursor.n);
      /* the range this batch covers: a write into it conflicts */
      if( rc==SQLITE_OK ){
        rc = kv_root_note_range(r, zSrc, (int)strlen(zSrc),
                                c.cursor.n ? c.cursor.a : (const uint8_t*)"",
                                c.cursor.n, last.a, bEof ? 0 : last.n, pzErr);
      }
      if( rc==SQLITE_OK ){
        rc = dvCarrierOptions(dvDb(pConn), zOpt, last.a, last.n, bEof, &zNewOpt);
      }
      if( rc==SQLITE_OK ){
        rc = kv_table_set_options(r, zName, (int)strlen(zName), zNewOpt, pzErr);
      }
      *pbDone = bEof;
    }
    sqlite3_free(zSrc);
  }
done:
  kv_iter_close(pIter);
  dvCarrierClear(&c);
  dvListFree(&lNone);
  dvListFree(&lNew);
  kv_buf_free(&last);
  sqlite3_free(zOpt);
  sqlite3_free(zNewOpt);
  return rc;
}

/* Build carrier zName to the end, a batch per root transaction, retrying
** a batch that conflicts with a concurrent writer: up to DV_RETRY times in
** a row, each retry with half the rows (at least 8) and a little more
** back-off, so that busy writers cannot starve the build. */
static int dvBuild(KvConn *pConn, KvEngine *pEng, const char *zName,
                   char **pzErr){
  int bDone = 0, nRetry = 0, nBatch = DV_BATCH, rc = SQLITE_OK;
  while( rc==SQLITE_OK && !bDone ){
    KvRoot *r = 0;
    rc = kv_root_begin(pEng, &r);
    if( rc==SQLITE_OK ){
      rc = dvBuildBatch(pConn, r, zName, nBatch, &bDone, pzErr);
    }
    if( rc==SQLITE_OK ) rc = kv_root_commit(r, pzErr);
    kv_root_free(r);
    if( rc==SQLITE_OK ){
      nRetry = 0;
      if( nBatch<DV_BATCH ) nBatch *= 2;
    }else if( rc==SQLITE_BUSY_SNAPSHOT && nRetry++<DV_RETRY ){
      if( nBatch>8 ) nBatch /= 2;
      sqlite3_free(*pzErr);
      *pzErr = 0;
      bDone = 0;
      rc = SQLITE_OK;
      sqlite3_sleep(nRetry<10 ? nRetry : 10);
    }
  }
  return rc;
}

/* ---------------------------------------------------- declare, remove --- */

/* Refuse an expression SQLite would not take in a generated column: a
** non-deterministic function, a subquery, more than one statement. */
static int dvCheckExpr(sqlite3 *db, const char *zWhat, const char *zExpr,
                       char **pzErr){
  sqlite3_stmt *pStmt = 0;
  const char *zTail = 0;
  char *zSql = sqlite3_mprintf("CREATE TEMP TABLE kv_derived_check(key, "
                               "value, x AS (%s))", zExpr);
  int rc;
  if( zSql==0 ) return SQLITE_NOMEM;
  rc = sqlite3_prepare_v2(db, zSql, -1, &pStmt, &zTail);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: bad %s '%s': %s (a projection is one "
        "deterministic SQL expression over key and value, without "
        "subqueries)", zWhat, zExpr, sqlite3_errmsg(db));
  }else if( zTail && zTail[strspn(zTail, " \t\r\n;")] ){
    *pzErr = sqlite3_mprintf("kv: bad %s '%s': one expression expected",
                             zWhat, zExpr);
    rc = SQLITE_ERROR;
  }
  sqlite3_finalize(pStmt);
  sqlite3_free(zSql);
  return rc;
}

/* Commit root r, retrying the whole step xStep on a conflict. */
static int dvSchemaStep(KvEngine *pEng, int (*xStep)(KvRoot*, void*, char**),
                        void *pArg, char **pzErr){
  int nRetry = 0, rc;
  for(;;){
    KvRoot *r = 0;
    rc = kv_root_begin(pEng, &r);
    if( rc==SQLITE_OK ) rc = xStep(r, pArg, pzErr);
    if( rc==SQLITE_OK ) rc = kv_root_commit(r, pzErr);
    kv_root_free(r);
    if( rc!=SQLITE_BUSY_SNAPSHOT || nRetry++>=DV_RETRY ) return rc;
    sqlite3_free(*pzErr);
    *pzErr = 0;
  }
}

typedef struct DvDecl DvDecl;
struct DvDecl {
  sqlite3 *db;
  const char *zName, *zSource;
  int eKind;
  const char *zExpr, *zSum;
};

static int dvDeclareStep(KvRoot *r, void *pArg, char **pzErr){
  DvDecl *d = (DvDecl*)pArg;
  KvEngine *pEng = kv_root_engine(r);
  char zType[32];
  char *zSrcOpt = 0, *zNewSrc = 0, *zOpt = 0, *zOf = 0;
  int bPersist = 0, bFound = 0, bCreated = 0;
  int rc = dvOptions(pEng, d->zSource, (int)strlen(d->zSource), &zSrcOpt,
                     zType, &bPersist, &bFound);
  if( rc==SQLITE_OK && !bFound ){
    const char *zDir = kv_engine_dir(pEng);
    *pzErr = sqlite3_mprintf("kv: no such source table: %s (store %s)",
                             d->zSource, zDir ? zDir : "in memory");
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ) rc = depot_json_text(d->db, zSrcOpt, "$.source", &zOf);
  if( rc==SQLITE_OK && zOf ){
    *pzErr = sqlite3_mprintf("kv: %s is itself an index or counter; declare "
                             "carriers on a plain KV table", d->zSource);
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ) rc = depot_json_text(d->db, zSrcOpt, "$.queue", &zOf);
  if( rc==SQLITE_OK && zOf ){
    *pzErr = sqlite3_mprintf("kv: %s is a queue; declare carriers on a "
                             "plain KV table", d->zSource);
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ){
    /* %Q makes SQL literals, which json_object turns into JSON */
    char *zSql = sqlite3_mprintf("SELECT json_object('carrier', %Q, "
        "'source', %Q, 'expr', %Q, 'sum', %Q, 'built', 0)",
        d->eKind==DV_UNIQUE ? "unique" : d->eKind==DV_COUNTER ? "counter"
        : "index", d->zSource, d->zExpr, d->zSum);
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
  if( rc==SQLITE_OK ){
    rc = depot_sql_text(d->db,
        "SELECT json_set(CASE WHEN json_valid(?1) THEN ?1 ELSE '{}' END, "
        "'$.carriers', json_insert(coalesce(CASE WHEN "
        "json_valid(?1) THEN json_extract(?1, '$.carriers') END, '[]'), "
        "'$[#]', ?2))", zSrcOpt, d->zName, &zNewSrc);
  }
  if( rc==SQLITE_OK ){
    rc = kv_table_set_options(r, d->zSource, (int)strlen(d->zSource),
                              zNewSrc, pzErr);
  }
  sqlite3_free(zSrcOpt); sqlite3_free(zNewSrc);
  sqlite3_free(zOpt); sqlite3_free(zOf);
  return rc;
}

typedef struct DvRemove DvRemove;
struct DvRemove {
  sqlite3 *db;
  const char *zName;            /* the carrier, or the source */
  int bSource;                  /* remove the source and its carriers */
};

/* Source options without carrier zName in its list (*pzNew). */
static int dvListWithout(sqlite3 *db, const char *zOpt, const char *zName,
                         char **pzNew){
  return depot_sql_text(db, "SELECT json_set(?1, '$.carriers', json((SELECT "
      "json_group_array(value) FROM json_each(?1, '$.carriers') WHERE "
      "value<>?2)))", zOpt, zName, pzNew);
}

static int dvRemoveStep(KvRoot *r, void *pArg, char **pzErr){
  DvRemove *d = (DvRemove*)pArg;
  KvEngine *pEng = kv_root_engine(r);
  char *zOpt = 0, *zSrc = 0, *zSrcOpt = 0, *zNew = 0, *zList = 0;
  int bFound = 0, rc;
  rc = dvOptions(pEng, d->zName, (int)strlen(d->zName), &zOpt, 0, 0, &bFound);
  if( rc==SQLITE_OK && bFound ){
    rc = kv_remove_table(r, d->zName, (int)strlen(d->zName), pzErr);
  }
  if( rc==SQLITE_OK && bFound && !d->bSource ){
    /* a carrier: leave its source's list */
    rc = depot_json_text(d->db, zOpt, "$.source", &zSrc);
    if( rc==SQLITE_OK && zSrc ){
      rc = dvOptions(pEng, zSrc, (int)strlen(zSrc), &zSrcOpt, 0, 0, &bFound);
      if( rc==SQLITE_OK && bFound ){
        rc = dvListWithout(d->db, zSrcOpt, d->zName, &zNew);
        if( rc==SQLITE_OK ){
          rc = kv_table_set_options(r, zSrc, (int)strlen(zSrc), zNew, pzErr);
        }
      }
    }
  }else if( rc==SQLITE_OK && bFound ){
    /* a source: its carriers go with it */
    sqlite3_stmt *pEach = 0;
    rc = depot_json_text(d->db, zOpt, "$.carriers", &zList);
    if( rc==SQLITE_OK && zList ){
      rc = sqlite3_prepare_v2(d->db, "SELECT value FROM json_each(?1)", -1,
                              &pEach, 0);
      if( rc==SQLITE_OK ) sqlite3_bind_text(pEach, 1, zList, -1, SQLITE_STATIC);
      while( rc==SQLITE_OK && sqlite3_step(pEach)==SQLITE_ROW ){
        const char *zC = (const char*)sqlite3_column_text(pEach, 0);
        KvMeta m;
        int bHas = 0;
        if( zC==0 ) continue;
        rc = kv_table_meta(pEng, r, zC, (int)strlen(zC), &m, &bHas);
        kv_meta_clear(&m);
        if( rc==SQLITE_OK && bHas ){
          rc = kv_remove_table(r, zC, (int)strlen(zC), pzErr);
        }
      }
      sqlite3_finalize(pEach);
    }
  }
  sqlite3_free(zOpt); sqlite3_free(zSrc); sqlite3_free(zSrcOpt);
  sqlite3_free(zNew); sqlite3_free(zList);
  return rc;
}

int kv_derived_remove(KvConn *pConn, KvEngine *pEng, const char *zName,
                      int bSource, char **pzErr){
  DvRemove d;
  int rc;
  d.db = dvDb(pConn);
  d.zName = zName;
  if( d.db==0 ) return SQLITE_NOMEM;
  d.bSource = bSource;
  rc = dvSchemaStep(pEng, dvRemoveStep, &d, pzErr);
  dvCacheDropStore(pConn, pEng);
  return rc;
}

/* Add the carriers of source table zTab to the removal root r, which
** removes zTab (kv_remove_table of a source removes its carriers). */
int kv_derived_remove_carriers(KvConn *pConn, KvRoot *r, const char *zTab,
                               int nTab, char **pzErr){
  DvSource *s = 0;
  int i, rc = dvSource(pConn, kv_root_engine(r), zTab, nTab, &s);
  for(i=0; rc==SQLITE_OK && s && i<s->nCarrier; i++){
    rc = kv_remove_table(r, s->a[i].zName, s->a[i].nName, pzErr);
  }
  return rc;
}

/* Declare carrier zName and build it; on failure nothing stays. */
static int dvDeclare(KvConn *pConn, KvEngine *pEng, const char *zName,
                     const char *zSource, int eKind, const char *zExpr,
                     const char *zSum, char **pzErr){
  DvDecl d;
  int rc;
  if( !sqlite3_get_autocommit(pConn->db) ){
    *pzErr = sqlite3_mprintf("kv: %s %s is declared in its own transactions; "
        "not inside BEGIN ... COMMIT", dvKindName(eKind), zName);
    return SQLITE_MISUSE;
  }
  if( dvDb(pConn)==0 ) return SQLITE_NOMEM;
  rc = dvCheckExpr(dvDb(pConn), eKind==DV_COUNTER ? "group projection"
                   : "projection", zExpr, pzErr);
  if( rc==SQLITE_OK && zSum ){
    rc = dvCheckExpr(dvDb(pConn), "sum projection", zSum, pzErr);
  }
  if( rc!=SQLITE_OK ) return rc;
  d.db = dvDb(pConn); d.zName = zName; d.zSource = zSource;
  d.eKind = eKind; d.zExpr = zExpr; d.zSum = zSum;
  rc = dvSchemaStep(pEng, dvDeclareStep, &d, pzErr);
  if( rc==SQLITE_OK ){
    rc = dvBuild(pConn, pEng, zName, pzErr);
    if( rc!=SQLITE_OK ){
      char *zIgnore = 0;
      kv_derived_remove(pConn, pEng, zName, 0, &zIgnore);
      sqlite3_free(zIgnore);
    }
  }
  dvCacheDropStore(pConn, pEng);
  return rc;
}

/* ---------------------------------------------------- validate, repair --- */

/* The findings of one carrier, or their repair: xFind(pArg, carrier, key
** bytes, detail) per finding. */
typedef struct DvCheck DvCheck;
struct DvCheck {
  KvConn *pConn;
  int bRepair;
  int nFound, nFixed, nUnfixable, nBuilt;
  DepotRows *pRows;             /* validate: the listing's rows */
  KvBuf json;                   /* repair: the carriers fixed */
};

static int dvFinding(DvCheck *p, DvCarrier *c, const uint8_t *aKey, int nKey,
                     char *zDetail, int bFixable){
  int rc = SQLITE_OK;
  if( zDetail==0 ) return SQLITE_NOMEM;
  p->nFound++;
  if( !bFixable ) p->nUnfixable++;
  if( p->pRows ){
    depot_rows_text(p->pRows, c->zName);
    if( aKey && c->eKind==DV_INDEX ){
      int n = kv_key_length(aKey, nKey);     /* the projected key */
      if( n>0 ) nKey = n;
    }
    if( aKey ) depot_rows_cell(p->pRows, DEPOT_CELL_KEY, 0, (const char*)aKey,
                               nKey);
    else depot_rows_null(p->pRows);
    rc = depot_rows_text(p->pRows, zDetail);
  }
  sqlite3_free(zDetail);
  return rc;
}

static int dvEntryCmp(const void *pA, const void *pB, void *pCtx){
  const DvEntry *a = pA, *b = pB;
  const DvList *l = pCtx;
  return dvKeyCmp(l->data.a + a->iKey, a->nKey, l->data.a + b->iKey, b->nKey);
}

/* Sort a list by key (insertion sort on an index: lists come from one
** scan, mostly ordered). */
static void dvListSort(DvList *l){
  int i, j;
  for(i=1; i<l->n; i++){
    DvEntry t = l->a[i];
    for(j=i; j>0 && dvEntryCmp(&l->a[j-1], &t, l)>0; j--) l->a[j] = l->a[j-1];
    l->a[j] = t;
  }
}

/* Counter: merge entries with one group into the first (counts, sums). */
static void dvListMergeGroups(DvList *l){
  int i, j = 0;
  for(i=1; i<l->n; i++){
    DvEntry *a = &l->a[j], *b = &l->a[i];
    if( dvEntryCmp(a, b, l)==0 ){
      a->nCount += b->nCount; a->iSum += b->iSum; a->rSum += b->rSum;
      a->bReal = a->bReal || b->bReal;
    }else{
      l->a[++j] = *b;
    }
  }
  if( l->n>0 ) l->n = j+1;
}

/* Index lists: drop entries equal to the one before (a projection that
** gives one value twice gives one entry). */
static void dvListDedup(DvList *l){
  int i, j = 0;
  for(i=1; i<l->n; i++){
    DvEntry *a = &l->a[j], *b = &l->a[i];
    if( dvEntryCmp(a, b, l)==0 && a->nVal==b->nVal
     && memcmp(dvValOf(l, a), dvValOf(l, b), a->nVal)==0 ){
      continue;
    }
    l->a[++j] = *b;
  }
  if( l->n>0 ) l->n = j+1;
}

/* Compare carrier c (built) with what its source rows give, in root r;
** with bRepair write the fixes in r. */
static int dvCheckCarrier(DvCheck *p, KvRoot *r, const char *zSrc,
                          DvCarrier *c, char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  sqlite3 *db = dvDb(p->pConn);
  DvList exp;
  KvIter *pIter = 0;
  int i = 0, rc;
  memset(&exp, 0, sizeof(exp));
  /* one snapshot for the source and the carrier */
  {
    const char *az[2];
    int an[2];
    az[0] = zSrc; an[0] = (int)strlen(zSrc);
    az[1] = c->zName; an[1] = c->nName;
    rc = kv_root_bind_set(r, 2, az, an, pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pEng, r, zSrc, (int)strlen(zSrc), 0, 0,
                      KV_ITER_WITH_EXPIRED, &pIter, pzErr);
  }
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
    KvMapEntry e;
    kv_iter_entry(pIter, &e);
    rc = dvEntries(db, dvCache(p->pConn), c, zSrc, e.aKey, e.nKey, e.aVal,
                   e.nVal, &exp, pzErr);
    if( rc==SQLITE_OK ) kv_iter_next(pIter);
  }
  if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  pIter = 0;
  if( rc==SQLITE_OK && p->bRepair ){
    /* a concurrent write to the source makes the repair retry */
    rc = kv_root_note_range(r, zSrc, (int)strlen(zSrc), (const uint8_t*)"", 0,
                            0, 0, pzErr);
  }
  dvListSort(&exp);
  if( c->eKind==DV_COUNTER ) dvListMergeGroups(&exp);
  else dvListDedup(&exp);
  if( c->eKind==DV_UNIQUE ){
    int j;
    for(j=1; rc==SQLITE_OK && j<exp.n; j++){
      if( dvEntryCmp(&exp.a[j-1], &exp.a[j], &exp)==0 ){
        rc = dvFinding(p, c, dvKeyOf(&exp, &exp.a[j]), exp.a[j].nKey,
            sqlite3_mprintf("unique value held by two source keys"), 0);
      }
    }
  }
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pEng, r, c->zName, c->nName, 0, 0,
                      KV_ITER_WITH_EXPIRED, &pIter, pzErr);
  }
  while( rc==SQLITE_OK && (i<exp.n || !kv_iter_eof(pIter)) ){
    KvMapEntry a;
    DvEntry *x = i<exp.n ? &exp.a[i] : 0;
    int cmp;
    if( !kv_iter_eof(pIter) ) kv_iter_entry(pIter, &a);
    cmp = kv_iter_eof(pIter) ? -1 : x==0 ? 1
        : dvKeyCmp(dvKeyOf(&exp, x), x->nKey, a.aKey, a.nKey);
    if( cmp<0 ){
      if( c->eKind==DV_COUNTER ){
        rc = dvFinding(p, c, dvKeyOf(&exp, x), x->nKey, sqlite3_mprintf(
            "missing counter row (expected count %lld)",
            (long long)x->nCount), 1);
        if( rc==SQLITE_OK && p->bRepair ){
          rc = dvCounterAdd(r, c, dvKeyOf(&exp, x), x->nKey, dvValOf(&exp, x),
                            x->nCount, x->iSum, x->rSum, x->bReal, pzErr);
        }
      }else{
        rc = dvFinding(p, c, dvKeyOf(&exp, x), x->nKey,
                       sqlite3_mprintf("missing index entry"), 1);
        if( rc==SQLITE_OK && p->bRepair ){
          rc = kv_put(r, c->zName, c->nName, dvKeyOf(&exp, x), x->nKey,
                      dvValOf(&exp, x), x->nVal, pzErr);
        }
      }
      i++;
    }else if( cmp>0 ){
      rc = dvFinding(p, c, a.aKey, a.nKey, sqlite3_mprintf(c->eKind==DV_COUNTER
             ? "extra counter row (no source row is in its group)"
             : "extra index entry (no source row gives it)"), 1);
      if( rc==SQLITE_OK && p->bRepair ){
        rc = kv_del(r, c->zName, c->nName, a.aKey, a.nKey, pzErr);
      }
      kv_iter_next(pIter);
    }else{
      int bSame;
      if( c->eKind==DV_COUNTER ){
        int64_t n0, i0; double r0; int b0, nText = 0;
        const char *zText = kv_value_text(a.aVal, a.nVal, &nText);
        dvCounterParse(zText, nText, &n0, &i0, &r0, &b0);
        bSame = n0==x->nCount && (b0 || x->bReal
            ? (r0 + (double)i0)==(x->rSum + (double)x->iSum) : i0==x->iSum);
        if( !bSame ){
          char *zHave = dvCounterText(n0, i0, r0, b0);
          char *zWant = dvCounterText(x->nCount, x->iSum, x->rSum, x->bReal);
          rc = dvFinding(p, c, a.aKey, a.nKey, sqlite3_mprintf(
              "counter mismatch: stored %s, the source gives %s", zHave,
              zWant), 1);
          sqlite3_free(zHave);
          sqlite3_free(zWant);
          if( rc==SQLITE_OK && p->bRepair ){
            rc = dvCounterAdd(r, c, a.aKey, a.nKey, dvValOf(&exp, x),
                              x->nCount - n0, x->iSum - i0, x->rSum - r0,
                              x->bReal || b0, pzErr);
          }
        }
      }else{
        bSame = a.nVal==x->nVal && memcmp(a.aVal, dvValOf(&exp, x), a.nVal)==0;
        if( !bSame ){
          rc = dvFinding(p, c, a.aKey, a.nKey, sqlite3_mprintf(
              "index entry names the wrong source key"), 1);
          if( rc==SQLITE_OK && p->bRepair ){
            rc = kv_put(r, c->zName, c->nName, dvKeyOf(&exp, x), x->nKey,
                        dvValOf(&exp, x), x->nVal, pzErr);
          }
        }
      }
      i++;
      kv_iter_next(pIter);
    }
  }
  if( rc==SQLITE_OK && pIter ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  dvListFree(&exp);
  return rc;
}

/* Compare zSrc's deadline index with its rows in root r: a row whose
** deadline has no entry is a finding (the sweeper would never find it);
** with bRepair the entry is written in r.  Stale entries (left by
** rewrites) are normal: sweeps drop them.  A table without its index
** (declared before indexes) is no finding: its first sweep builds it. */
static int dvTtlIndex(KvRoot *r, const char *zTab, int nTab, char **pzIdx);
static int dvCheckDeadlines(DvCheck *p, KvRoot *r, const char *zSrc,
                            char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  int nSrc = (int)strlen(zSrc);
  KvIter *pIter = 0;
  KvBuf k = {0, 0, 0}, v = {0, 0, 0};
  char *zIdx = 0;
  int rc = dvTtlIndex(r, zSrc, nSrc, &zIdx);
  if( rc!=SQLITE_OK || zIdx==0 ) return rc;
  /* one snapshot for the table and its index */
  {
    const char *az[2];
    int an[2];
    az[0] = zSrc; an[0] = nSrc;
    az[1] = zIdx; an[1] = (int)strlen(zIdx);
    rc = kv_root_bind_set(r, 2, az, an, pzErr);
  }
  if( rc==SQLITE_OK && p->bRepair ){
    /* a concurrent write to the table makes the repair retry */
    rc = kv_root_note_range(r, zSrc, nSrc, (const uint8_t*)"", 0, 0, 0,
                            pzErr);
  }
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pEng, r, zSrc, nSrc, 0, 0, KV_ITER_WITH_EXPIRED,
                      &pIter, pzErr);
  }
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
    const KvMapEntry *e = kv_iter_current(pIter);
    int64_t iDeadline;
    int bFound = 0;
    if( kv_value_deadline(e->aVal, e->nVal, &iDeadline) ){
      kv_buf_reset(&k);
      rc = kv_key_append_int(&k, iDeadline);
      if( rc==SQLITE_OK ) rc = kv_buf_append(&k, e->aKey, e->nKey);
      if( rc==SQLITE_OK ){
        rc = kv_peek(r, zIdx, (int)strlen(zIdx), k.a, k.n, &v, &bFound,
                     pzErr);
      }
      if( rc==SQLITE_OK && !bFound ){
        char *zDetail = sqlite3_mprintf("missing deadline index entry "
                                        "(deadline %lld)", (long long)iDeadline);
        p->nFound++;
        if( zDetail==0 ) rc = SQLITE_NOMEM;
        if( rc==SQLITE_OK && p->pRows ){
          depot_rows_text(p->pRows, zIdx);
          depot_rows_cell(p->pRows, DEPOT_CELL_KEY, 0, (const char*)e->aKey,
                          e->nKey);
          rc = depot_rows_text(p->pRows, zDetail);
        }
        sqlite3_free(zDetail);
        if( rc==SQLITE_OK && p->bRepair ){
          kv_buf_reset(&v);
          rc = kv_value_encode_blob(0, 0, &v);
          if( rc==SQLITE_OK ){
            rc = kv_put(r, zIdx, (int)strlen(zIdx), k.a, k.n, v.a, v.n,
                        pzErr);
          }
        }
      }
    }
    if( rc==SQLITE_OK ) kv_iter_next(pIter);
  }
  if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  kv_buf_free(&k);
  kv_buf_free(&v);
  sqlite3_free(zIdx);
  return rc;
}

/* Validate (or repair) the carriers of zSrc (only zOnly when not NULL). */
static int dvCheckSource(DvCheck *p, KvEngine *pEng, const char *zSrc,
                         const char *zOnly, char **pzErr){
  DvSource *s = 0;
  int i, rc, nRetry = 0, nFound0 = p->nFound;
  int nFixed0 = p->nFixed, nUnfix0 = p->nUnfixable;
  rc = dvSource(p->pConn, pEng, zSrc, (int)strlen(zSrc), &s);
  if( rc==SQLITE_OK ){
    int bFound = 0;
    KvMeta m;
    rc = kv_table_meta(pEng, 0, zSrc, (int)strlen(zSrc), &m, &bFound);
    kv_meta_clear(&m);
    if( rc==SQLITE_OK && !bFound ){
      *pzErr = sqlite3_mprintf("kv: no such table: %s", zSrc);
      rc = SQLITE_ERROR;
    }
  }
  if( rc==SQLITE_OK && zOnly ){
    for(i=0; i<s->nCarrier && strcmp(s->a[i].zName, zOnly); i++){}
    if( i==s->nCarrier ){
      *pzErr = sqlite3_mprintf("kv: %s is no index or counter of %s", zOnly,
                               zSrc);
      rc = SQLITE_ERROR;
    }
  }
  for(i=0; rc==SQLITE_OK && s && i<s->nCarrier; i++){
    DvCarrier *c = &s->a[i];
    KvRoot *r = 0;
    if( zOnly && strcmp(c->zName, zOnly) ) continue;
    if( !c->bBuilt ){
      char *zName = sqlite3_mprintf("%s", c->zName);
      if( zName==0 ){ rc = SQLITE_NOMEM; break; }
      rc = dvFinding(p, c, 0, 0, sqlite3_mprintf("carrier not built (its "
                     "build stopped; kv_repair completes it)"), 1);
      if( rc==SQLITE_OK && p->bRepair ){
        rc = dvBuild(p->pConn, pEng, zName, pzErr);
        if( rc==SQLITE_OK ) p->nBuilt++;
        /* the catalog changed: look the carriers up again */
        if( rc==SQLITE_OK ) rc = dvSource(p->pConn, pEng, zSrc,
                                          (int)strlen(zSrc), &s);
        if( rc==SQLITE_OK ) i = -1;
      }
      sqlite3_free(zName);
      continue;
    }
    rc = kv_root_begin(pEng, &r);
    if( rc==SQLITE_OK ) rc = dvCheckCarrier(p, r, zSrc, c, pzErr);
    if( rc==SQLITE_OK && p->bRepair ) rc = kv_root_commit(r, pzErr);
    kv_root_free(r);
    if( rc==SQLITE_BUSY_SNAPSHOT && p->bRepair && nRetry++<DV_RETRY ){
      sqlite3_free(*pzErr);
      *pzErr = 0;
      p->nFound = nFound0; p->nFixed = nFixed0; p->nUnfixable = nUnfix0;
      rc = dvSource(p->pConn, pEng, zSrc, (int)strlen(zSrc), &s);
      i = -1;
    }
  }
  if( rc==SQLITE_OK && !zOnly && s->bTtl ){
    /* the deadline index of a table with per-entry TTL (kv_ttl.c) */
    nFound0 = p->nFound; nFixed0 = p->nFixed; nUnfix0 = p->nUnfixable;
    nRetry = 0;
    for(;;){
      KvRoot *r = 0;
      rc = kv_root_begin(pEng, &r);
      if( rc==SQLITE_OK ) rc = dvCheckDeadlines(p, r, zSrc, pzErr);
      if( rc==SQLITE_OK && p->bRepair && kv_root_has_writes(r) ){
        rc = kv_root_commit(r, pzErr);
      }
      kv_root_free(r);
      if( rc!=SQLITE_BUSY_SNAPSHOT || !p->bRepair || nRetry++>=DV_RETRY ){
        break;
      }
      sqlite3_free(*pzErr);
      *pzErr = 0;
      p->nFound = nFound0; p->nFixed = nFixed0; p->nUnfixable = nUnfix0;
    }
  }
  if( rc==SQLITE_OK && p->bRepair ){
    p->nFixed = p->nFound - p->nUnfixable;
  }
  return rc;
}

static int dvValidateRows(DepotRows *pRows, sqlite3_value **apArg,
                          char **pzErr){
  KvConn *pConn = (KvConn*)pRows->pAux;
  const char *zSrc = depot_text_value(apArg[0]);
  const char *zDir = apArg[1] ? depot_text_value(apArg[1]) : 0;
  KvEngine *pEng = 0;
  DvCheck chk;
  int rc;
  if( zSrc==0 ){
    *pzErr = sqlite3_mprintf("kv: kv_validate: the source table must be "
                             "non-empty text");
    return SQLITE_ERROR;
  }
  memset(&chk, 0, sizeof(chk));
  chk.pConn = pConn;
  chk.pRows = pRows;
  rc = kv_conn_store_existing(pConn, zDir, &pEng, pzErr);
  if( rc==SQLITE_OK ) rc = dvCheckSource(&chk, pEng, zSrc, 0, pzErr);
  kv_engine_unref(pEng);
  return rc;
}

static const DepotListingCol aValidateCol[] = {
  DEPOT_COLUMN("carrier", "TEXT"),
  DEPOT_COLUMN("key", 0),
  DEPOT_COLUMN("detail", "TEXT"),
  DEPOT_ARGUMENT("source"),
  DEPOT_ARGUMENT("dir"),
};

static const DepotListing validateListing = {
  "kv_validate", 5, aValidateCol, 1, SQLITE_VTAB_DIRECTONLY, 100.0, 0,
  dvValidateRows
};

/* kv_carriers(source[, dir]): the carriers of source in application
** order. */
static int dvCarriersRows(DepotRows *pRows, sqlite3_value **apArg,
                          char **pzErr){
  KvConn *pConn = (KvConn*)pRows->pAux;
  const char *zSrc = depot_text_value(apArg[0]);
  const char *zDir = apArg[1] ? depot_text_value(apArg[1]) : 0;
  KvEngine *pEng = 0;
  DvSource *s = 0;
  int i, rc;
  if( zSrc==0 ){
    *pzErr = sqlite3_mprintf("kv: kv_carriers: the source table must be "
                             "non-empty text");
    return SQLITE_ERROR;
  }
  rc = kv_conn_store_existing(pConn, zDir, &pEng, pzErr);
  if( rc==SQLITE_OK ) rc = dvSource(pConn, pEng, zSrc, (int)strlen(zSrc), &s);
  for(i=0; rc==SQLITE_OK && i<s->nCarrier; i++){
    DvCarrier *c = &s->a[i];
    depot_rows_text(pRows, c->zName);
    depot_rows_text(pRows, c->eKind==DV_UNIQUE ? "unique"
                           : c->eKind==DV_COUNTER ? "counter" : "index");
    depot_rows_text(pRows, c->zExpr);
    depot_rows_text(pRows, c->zSum);
    rc = depot_rows_int(pRows, c->bBuilt);
  }
  kv_engine_unref(pEng);
  return rc;
}

static const DepotListingCol aCarriersCol[] = {
  DEPOT_COLUMN("name", "TEXT"),
  DEPOT_COLUMN("kind", "TEXT"),
  DEPOT_COLUMN("expr", "TEXT"),
  DEPOT_COLUMN("sum", "TEXT"),
  DEPOT_COLUMN("built", "INTEGER"),
  DEPOT_ARGUMENT("source"),
  DEPOT_ARGUMENT("dir"),
};

static const DepotListing carriersListing = {
  "kv_carriers", 7, aCarriersCol, 1, SQLITE_VTAB_INNOCUOUS, 10.0, 0,
  dvCarriersRows
};

static void dvRepairFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  const char *zSrc = depot_text_arg(ctx, argv[0], "kv_repair", "source");
  const char *zOnly = argc>1 ? depot_text_value(argv[1]) : 0;
  const char *zDir = argc>2 ? depot_text_value(argv[2]) : 0;
  KvEngine *pEng = 0;
  DvCheck chk;
  char *zErr = 0;
  int rc;
  if( zSrc==0 ) return;
  if( (rc = kv_conn_writable(pConn->db, "kv_repair", &zErr))!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  memset(&chk, 0, sizeof(chk));
  chk.pConn = pConn;
  chk.bRepair = 1;
  rc = kv_conn_store_existing(pConn, zDir, &pEng, &zErr);
  if( rc==SQLITE_OK ) rc = dvCheckSource(&chk, pEng, zSrc, zOnly, &zErr);
  kv_engine_unref(pEng);
  if( rc!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  rc = kv_buf_append(&chk.json, "{\"source\":", 10);
  if( rc==SQLITE_OK ){
    rc = kv_json_text(&chk.json, (const uint8_t*)zSrc, (int)strlen(zSrc));
  }
  if( rc==SQLITE_OK ){
    char *z = sqlite3_mprintf(",\"findings\":%d,\"fixed\":%d,\"built\":%d,"
        "\"unfixable\":%d}", chk.nFound, chk.nFixed, chk.nBuilt,
        chk.nUnfixable);
    rc = z ? kv_buf_append(&chk.json, z, (int)strlen(z)) : SQLITE_NOMEM;
    sqlite3_free(z);
  }
  if( rc==SQLITE_OK ){
    sqlite3_result_text(ctx, (const char*)chk.json.a, chk.json.n,
                        SQLITE_TRANSIENT);
  }else{
    sqlite3_result_error_nomem(ctx);
  }
  kv_buf_free(&chk.json);
}

/* ------------------------------------------- kv_index, kv_counter tables --- */

typedef struct DvTable DvTable;
typedef struct DvCursor DvCursor;
struct DvTable {
  sqlite3_vtab base;            /* must be first */
  KvConn *pConn;                /* holds a reference */
  KvEngine *pEng;               /* holds a reference */
  char *zName; int nName;       /* the carrier */
  int eKind;                    /* DV_INDEX (also unique), DV_COUNTER */
};
struct DvCursor {
  sqlite3_vtab_cursor base;     /* must be first */
  KvIter *pIter;
  int eKind;                    /* the carrier's: DV_INDEX/UNIQUE/COUNTER */
  sqlite3_int64 iRow;
  KvRoot *pOwn;                 /* counter on a TTL source: the snapshot of
                                ** an autocommit read */
  DvList fix;                   /* counter: per group, what rows that have
                                ** expired but are not swept yet count
                                ** (sorted, one entry per group) */
};

/* The module arguments: source=, expr= or group=, sum=, unique=, dir=. */
typedef struct DvArgs DvArgs;
struct DvArgs {
  char *zSource, *zExpr, *zSum, *zDir;
  int bUnique;
};

static void dvArgsFree(DvArgs *a){
  sqlite3_free(a->zSource); sqlite3_free(a->zExpr);
  sqlite3_free(a->zSum); sqlite3_free(a->zDir);
}

/* key=value with value unquoted ('x' or "x", doubled quotes inside). */
static int dvArgParse(int bCounter, const char *zArg, DvArgs *a, char **pzErr){
  const char *zEq = strchr(zArg, '=');
  char *zK, *zV, **pz = 0;
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
    char q = zV[0];
    for(i=1, j=0; i<n-1; i++){
      zV[j++] = zV[i];
      if( zV[i]==q && zV[i+1]==q && i+1<n-1 ) i++;
    }
    zV[j] = 0;
  }
  { const char *zKey = zK; while( *zKey==' ' ) zKey++;
    if( sqlite3_stricmp(zKey, "source")==0 ) pz = &a->zSource;
    else if( sqlite3_stricmp(zKey, bCounter ? "group" : "expr")==0 ) pz = &a->zExpr;
    else if( bCounter && sqlite3_stricmp(zKey, "sum")==0 ) pz = &a->zSum;
    else if( sqlite3_stricmp(zKey, "dir")==0 ) pz = &a->zDir;
    else if( !bCounter && sqlite3_stricmp(zKey, "unique")==0
          && (strcmp(zV, "0")==0 || strcmp(zV, "1")==0) ){
      a->bUnique = zV[0]=='1';
      sqlite3_free(zK); sqlite3_free(zV);
      return SQLITE_OK;
    }
  }
  sqlite3_free(zK);
  if( pz==0 || *pz || zV[0]==0 ){ sqlite3_free(zV); goto bad; }
  *pz = zV;
  return SQLITE_OK;
bad:
  *pzErr = sqlite3_mprintf("kv: bad argument '%s': expected %s", zArg,
      bCounter ? "source=TABLE, group=EXPR, sum=EXPR or dir=PATH (each once)"
               : "source=TABLE, expr=EXPR, unique=0|1 or dir=PATH (each once)");
  return SQLITE_ERROR;
}

static void dvTableFree(DvTable *p){
  if( p==0 ) return;
  kv_engine_unref(p->pEng);
  if( p->pConn ) kv_conn_unref(p->pConn);
  sqlite3_free(p->zName);
  sqlite3_free(p->base.zErrMsg);    /* an xDestroy message SQLite dropped */
  sqlite3_free(p);
}

static int dvInit(sqlite3 *db, void *pAux, int argc, const char *const*argv,
                  sqlite3_vtab **ppVtab, char **pzErr, int bCreate){
  KvConn *pConn = (KvConn*)pAux;
  int bCounter = strcmp(argv[0], "kv_counter")==0;
  DvTable *p;
  DvArgs a;
  int i, rc = SQLITE_OK;
  memset(&a, 0, sizeof(a));
  for(i=3; rc==SQLITE_OK && i<argc; i++) rc = dvArgParse(bCounter, argv[i],
                                                         &a, pzErr);
  if( rc==SQLITE_OK && bCreate && (a.zSource==0 || a.zExpr==0) ){
    *pzErr = sqlite3_mprintf("kv: %s needs source=TABLE and %s", argv[0],
                             bCounter ? "group=EXPR" : "expr=EXPR");
    rc = SQLITE_ERROR;
  }
  p = rc==SQLITE_OK ? sqlite3_malloc64(sizeof(*p)) : 0;
  if( rc==SQLITE_OK && p==0 ) rc = SQLITE_NOMEM;
  if( rc==SQLITE_OK ){
    memset(p, 0, sizeof(*p));
    kv_conn_ref(pConn);
    p->pConn = pConn;
    p->eKind = bCounter ? DV_COUNTER : DV_INDEX;
    p->zName = sqlite3_mprintf("%s", argv[2]);
    if( p->zName==0 ) rc = SQLITE_NOMEM; else p->nName = (int)strlen(argv[2]);
  }
  if( rc==SQLITE_OK ) rc = kv_conn_store(pConn, a.zDir, argv[1], &p->pEng,
                                         pzErr);
  if( rc==SQLITE_OK ){
    rc = sqlite3_declare_vtab(db, bCounter
        ? "CREATE TABLE x(key, count INTEGER, sum)"
        : "CREATE TABLE x(key, source_key)");
  }
  if( rc==SQLITE_OK && bCreate ){
    rc = dvDeclare(pConn, p->pEng, p->zName, a.zSource,
                   bCounter ? DV_COUNTER : a.bUnique ? DV_UNIQUE : DV_INDEX,
                   a.zExpr, a.zSum, pzErr);
  }
  dvArgsFree(&a);
  if( rc!=SQLITE_OK ){
    dvTableFree(p);
    return rc;
  }
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = &p->base;
  return SQLITE_OK;
}

static int dvCreate(sqlite3 *db, void *pAux, int argc,
                    const char *const*argv, sqlite3_vtab **pp, char **pzErr){
  return dvInit(db, pAux, argc, argv, pp, pzErr, 1);
}
static int dvConnect(sqlite3 *db, void *pAux, int argc,
                     const char *const*argv, sqlite3_vtab **pp, char **pzErr){
  return dvInit(db, pAux, argc, argv, pp, pzErr, 0);
}
static int dvDisconnect(sqlite3_vtab *pVtab){
  dvTableFree((DvTable*)pVtab);
  return SQLITE_OK;
}
static int dvDestroy(sqlite3_vtab *pVtab){
  DvTable *p = (DvTable*)pVtab;
  char *zErr = 0;
  int rc;
  if( !sqlite3_get_autocommit(p->pConn->db) ){
    p->base.zErrMsg = sqlite3_mprintf("kv: DROP TABLE %s removes the %s in "
        "its own transaction; not inside BEGIN ... COMMIT", p->zName,
        dvKindName(p->eKind));
    return SQLITE_MISUSE;
  }
  rc = kv_derived_remove(p->pConn, p->pEng, p->zName, 0, &zErr);
  if( rc!=SQLITE_OK ){
    /* SQLite drops xDestroy's message: it also goes to the error log. */
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: DROP TABLE failed");
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = zErr;
    return rc;
  }
  dvTableFree(p);
  return SQLITE_OK;
}

/* idxNum 1: key = ? (argv[0]); 0: a full scan. */
static int dvBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  int i;
  (void)pVtab;
  pInfo->idxNum = 0;
  pInfo->estimatedCost = 1e6;
  for(i=0; i<pInfo->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &pInfo->aConstraint[i];
    if( c->usable && c->iColumn==0 && c->op==SQLITE_INDEX_CONSTRAINT_EQ ){
      pInfo->idxNum = 1;
      pInfo->aConstraintUsage[i].argvIndex = 1;
      pInfo->aConstraintUsage[i].omit = 1;
      pInfo->estimatedCost = 10.0;
      pInfo->estimatedRows = 10;
      break;
    }
  }
  if( pInfo->nOrderBy==1 && pInfo->aOrderBy[0].iColumn==0
   && !pInfo->aOrderBy[0].desc ){
    pInfo->orderByConsumed = 1;
  }
  return SQLITE_OK;
}

static int dvOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCsr){
  DvCursor *c = sqlite3_malloc64(sizeof(*c));
  (void)pVtab;
  if( c==0 ) return SQLITE_NOMEM;
  memset(c, 0, sizeof(*c));
  *ppCsr = &c->base;
  return SQLITE_OK;
}

static int dvClose(sqlite3_vtab_cursor *pCsr){
  DvCursor *c = (DvCursor*)pCsr;
  kv_iter_close(c->pIter);
  kv_root_free(c->pOwn);
  dvListFree(&c->fix);
  sqlite3_free(c);
  return SQLITE_OK;
}

/* Rows past their deadline.  A source with a deadline (ttl_ms=,
** deadline=; kv_ttl.c) has a deadline index, the KV table
** KV_TTL_INDEX_PREFIX+name, keyed by (deadline, row key).  Its name in
** *pzIdx (sqlite3_malloc'd) when root r sees it, else NULL (a name too
** long, or a table declared before indexes: its first sweep builds it). */
static int dvTtlIndex(KvRoot *r, const char *zTab, int nTab, char **pzIdx){
  KvMeta meta;
  char *z;
  int bFound = 0, rc;
  *pzIdx = 0;
  if( nTab+(int)strlen(KV_TTL_INDEX_PREFIX)>KV_MAX_NAME_BYTES ){
    return SQLITE_OK;
  }
  z = sqlite3_mprintf(KV_TTL_INDEX_PREFIX "%.*s", nTab, zTab);
  if( z==0 ) return SQLITE_NOMEM;
  rc = kv_table_meta(kv_root_engine(r), r, z, (int)strlen(z), &meta, &bFound);
  kv_meta_clear(&meta);
  if( rc==SQLITE_OK && bFound ) *pzIdx = z; else sqlite3_free(z);
  return rc;
}

/* Call xRow once for every row of zTab that is stored and expired at iNow
** (not swept yet), as root r sees the table and its deadline index, in
** deadline order: the cost is what the next sweep removes, not the table
** (a table without an index is scanned).  Registers no reads.  A non-OK
** return of xRow stops the walk and is returned. */
typedef int (*DvRowFn)(void*, const uint8_t *aKey, int nKey,
                       const uint8_t *aVal, int nVal);
static int dvExpiredRows(KvRoot *r, const char *zTab, int nTab, int64_t iNow,
                         DvRowFn xRow, void *pArg, char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  KvIter *pIter = 0;
  KvBuf hiKey = {0, 0, 0}, val = {0, 0, 0};
  KvBound hi;
  char *zIdx = 0;
  int rc = dvTtlIndex(r, zTab, nTab, &zIdx);
  if( rc==SQLITE_OK && zIdx==0 ){
    rc = kv_iter_open(pEng, r, zTab, nTab, 0, 0, KV_ITER_WITH_EXPIRED,
                      &pIter, pzErr);
    while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
      const KvMapEntry *e = kv_iter_current(pIter);
      if( kv_value_expired(e->aVal, e->nVal, iNow) ){
        rc = xRow(pArg, e->aKey, e->nKey, e->aVal, e->nVal);
      }
      if( rc==SQLITE_OK ) kv_iter_next(pIter);
    }
    if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
    kv_iter_close(pIter);
    return rc;
  }
  if( rc==SQLITE_OK ) rc = kv_key_append_int(&hiKey, iNow+1);
  hi.aKey = hiKey.a; hi.nKey = hiKey.n; hi.bIncl = 0;
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(pEng, r, zIdx, (int)strlen(zIdx), 0, &hi,
                      KV_ITER_WITH_EXPIRED, &pIter, pzErr);
  }
  while( rc==SQLITE_OK && !kv_iter_eof(pIter) ){
    const KvMapEntry *e = kv_iter_current(pIter);
    int nD = kv_key_length(e->aKey, e->nKey);
    int64_t iRow = 0;
    int bFound = 0;
    KvDatum d;
    /* The entry (D, key) stands for the row only when the row's deadline
    ** is D: a rewritten row leaves stale entries, and is visited once. */
    if( nD>0 && nD<e->nKey && kv_key_decode(e->aKey, nD, 0, 0, &d)==SQLITE_OK
     && d.eType==SQLITE_INTEGER ){
      rc = kv_peek(r, zTab, nTab, e->aKey+nD, e->nKey-nD, &val, &bFound,
                   pzErr);
      if( rc==SQLITE_OK && bFound
       && kv_value_deadline(val.a, val.n, &iRow) && iRow==d.i
       && iRow<=iNow ){
        rc = xRow(pArg, e->aKey+nD, e->nKey-nD, val.a, val.n);
      }
      kv_datum_clear(&d);
    }
    if( rc==SQLITE_OK ) kv_iter_next(pIter);
  }
  if( rc==SQLITE_OK ) rc = kv_iter_error(pIter, pzErr);
  kv_iter_close(pIter);
  kv_buf_free(&hiKey);
  kv_buf_free(&val);
  sqlite3_free(zIdx);
  return rc;
}

/* Counters on a source with a deadline.  A counter row counts the rows of
** its group as they are stored; a row whose deadline has passed is
** invisible at once but counted until the sweeper removes it.  A read of
** the counter therefore subtracts, per group, what the expired rows not
** yet swept give (dvExpiredRows: found through the deadline index,
** so the cost is what the next sweep removes, not the table), in the same
** snapshot as the counter rows. */
typedef struct DvFixCtx DvFixCtx;
struct DvFixCtx {
  sqlite3 *db; DvCache *pC; DvCarrier *c; const char *zSrc; DvList *pList;
};
static int dvFixRow(void *pArg, const uint8_t *aKey, int nKey,
                    const uint8_t *aVal, int nVal){
  DvFixCtx *x = (DvFixCtx*)pArg;
  char *zErr = 0;
  int rc = dvEntries(x->db, x->pC, x->c, x->zSrc, aKey, nKey, aVal, nVal,
                     x->pList, &zErr);
  sqlite3_free(zErr);
  /* a row whose projection fails now has no entry in the counter either */
  return rc==SQLITE_NOMEM ? rc : SQLITE_OK;
}

/* Fill c->fix for counter p (built), reading as *pr sees it; with *pr
** NULL begins c->pOwn and sets *pr to it. */
static int dvCounterFix(DvTable *p, DvCursor *c, KvRoot **pr, char **pzErr){
  DvSource *s = 0;
  DvFixCtx x;
  char *zOf = 0;
  int i, rc;
  dvListReset(&c->fix);
  kv_root_free(c->pOwn);
  c->pOwn = 0;
  rc = dvSource(p->pConn, p->pEng, p->zName, p->nName, &s);
  if( rc!=SQLITE_OK || s->zCarrierOf==0 ) return rc;
  if( (zOf = sqlite3_mprintf("%s", s->zCarrierOf))==0 ) return SQLITE_NOMEM;
  rc = dvSource(p->pConn, p->pEng, zOf, (int)strlen(zOf), &s);
  for(i=0; rc==SQLITE_OK && s->bTtl && i<s->nCarrier; i++){
    if( strcmp(s->a[i].zName, p->zName)==0 ) break;
  }
  if( rc==SQLITE_OK && s->bTtl && i<s->nCarrier ){
    if( *pr==0 ){
      rc = kv_root_begin(p->pEng, &c->pOwn);
      *pr = c->pOwn;
      /* one snapshot for the counter rows, the source and its deadline
      ** index (a sweep commits to all three) */
      char *zIdx = 0;
      if( rc==SQLITE_OK ) rc = dvTtlIndex(*pr, zOf, (int)strlen(zOf), &zIdx);
      if( rc==SQLITE_OK ){
        const char *az[3];
        int an[3];
        az[0] = p->zName; an[0] = p->nName;
        az[1] = zOf; an[1] = (int)strlen(zOf);
        az[2] = zIdx; an[2] = zIdx ? (int)strlen(zIdx) : 0;
        rc = kv_root_bind_set(*pr, zIdx ? 3 : 2, az, an, pzErr);
      }
      sqlite3_free(zIdx);
    }
    x.db = dvDb(p->pConn);
    x.pC = dvCache(p->pConn);
    x.c = &s->a[i];
    x.zSrc = zOf;
    x.pList = &c->fix;
    if( x.db==0 || x.pC==0 ) rc = SQLITE_NOMEM;
    if( rc==SQLITE_OK ){
      rc = dvExpiredRows(*pr, zOf, (int)strlen(zOf), kv_clock_ms(),
                         dvFixRow, &x, pzErr);
    }
    dvListSort(&c->fix);
    dvListMergeGroups(&c->fix);
  }
  sqlite3_free(zOf);
  return rc;
}

/* The entry of c->fix for group aKey, or NULL. */
static DvEntry *dvFixFind(DvCursor *c, const uint8_t *aKey, int nKey){
  int lo = 0, hi = c->fix.n - 1;
  while( lo<=hi ){
    int mid = (lo+hi)/2;
    DvEntry *e = &c->fix.a[mid];
    int cmp = dvKeyCmp(c->fix.data.a + e->iKey, e->nKey, aKey, nKey);
    if( cmp==0 ) return e;
    if( cmp<0 ) lo = mid+1; else hi = mid-1;
  }
  return 0;
}

/* Step past counter rows that count only expired rows. */
static void dvFixSkip(DvCursor *c){
  while( c->fix.n>0 && c->pIter && !kv_iter_eof(c->pIter) ){
    KvMapEntry e;
    DvEntry *f;
    int64_t n0, i0; double r0; int b0, nText = 0;
    const char *zText;
    kv_iter_entry(c->pIter, &e);
    f = dvFixFind(c, e.aKey, e.nKey);
    if( f==0 ) return;
    zText = kv_value_text(e.aVal, e.nVal, &nText);
    dvCounterParse(zText, nText, &n0, &i0, &r0, &b0);
    if( n0 - f->nCount > 0 ) return;
    kv_iter_next(c->pIter);
  }
}

/* The carrier's kind and state; an error unless it is built. */
static int dvReadable(DvTable *p, int *peKind){
  DvSource *s = 0;
  int rc = dvSource(p->pConn, p->pEng, p->zName, p->nName, &s);
  if( rc!=SQLITE_OK ) return rc;
  if( s->zCarrierOf==0 ){
    p->base.zErrMsg = sqlite3_mprintf("kv: %s is no index or counter in its "
                                      "store (removed?)", p->zName);
    return SQLITE_ERROR;
  }
  *peKind = s->eCarrierKind;
  {
    DvSource *pSrc = 0;
    int i;
    char *zOf = sqlite3_mprintf("%s", s->zCarrierOf);
    if( zOf==0 ) return SQLITE_NOMEM;
    rc = dvSource(p->pConn, p->pEng, zOf, (int)strlen(zOf), &pSrc);
    for(i=0; rc==SQLITE_OK && i<pSrc->nCarrier; i++){
      if( strcmp(pSrc->a[i].zName, p->zName)==0 && !pSrc->a[i].bBuilt ){
        sqlite3_free(p->base.zErrMsg);
        p->base.zErrMsg = sqlite3_mprintf("kv: %s %s is not built yet; it "
            "is readable once its build completes (kv_repair('%s') "
            "completes a build that stopped)", dvKindName(*peKind), p->zName,
            zOf);
        rc = SQLITE_ERROR;
      }
    }
    sqlite3_free(zOf);
  }
  return rc;
}

static int dvFilter(sqlite3_vtab_cursor *pCsr, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  DvCursor *c = (DvCursor*)pCsr;
  DvTable *p = (DvTable*)pCsr->pVtab;
  KvRoot *r = p->pConn->pSqlRoot;
  KvBuf lo = {0, 0, 0}, hi = {0, 0, 0};
  KvBound bLo, bHi;
  char *zErr = 0;
  int rc;
  (void)idxStr; (void)argc;
  kv_iter_close(c->pIter);
  c->pIter = 0;
  c->iRow = 0;
  rc = dvReadable(p, &c->eKind);
  if( rc!=SQLITE_OK ) return rc;
  if( r && kv_root_engine(r)!=p->pEng ) r = 0;
  if( c->eKind==DV_COUNTER ){
    rc = dvCounterFix(p, c, &r, &zErr);
  }
  if( rc==SQLITE_OK && idxNum==1 ){
    rc = kv_key_encode_bound(argv[0], &lo);
    if( rc==SQLITE_EMPTY ) return SQLITE_OK;     /* key = NULL: no rows */
    if( rc==SQLITE_OK ) rc = kv_buf_append(&hi, lo.a, lo.n);
    if( rc==SQLITE_OK && c->eKind==DV_INDEX ){
      uint8_t x = 0xFF;                          /* past every source key */
      rc = kv_buf_append(&hi, &x, 1);
    }
    bLo.aKey = lo.a; bLo.nKey = lo.n; bLo.bIncl = 1;
    bHi.aKey = hi.a; bHi.nKey = hi.n; bHi.bIncl = c->eKind!=DV_INDEX;
  }
  if( rc==SQLITE_OK ){
    rc = kv_iter_open(p->pEng, r, p->zName, p->nName, idxNum==1 ? &bLo : 0,
                      idxNum==1 ? &bHi : 0, 0, &c->pIter, &zErr);
  }
  if( rc==SQLITE_OK ) dvFixSkip(c);
  if( rc!=SQLITE_OK ){
    /* SQLite drops xDestroy's message: it also goes to the error log. */
    sqlite3_log(rc, "%s", zErr ? zErr : "kv: DROP TABLE failed");
    sqlite3_free(p->base.zErrMsg);
    p->base.zErrMsg = zErr;
  }
  kv_buf_free(&lo);
  kv_buf_free(&hi);
  return rc;
}

static int dvNext(sqlite3_vtab_cursor *pCsr){
  DvCursor *c = (DvCursor*)pCsr;
  char *zErr = 0;
  int rc;
  kv_iter_next(c->pIter);
  dvFixSkip(c);
  c->iRow++;
  rc = kv_iter_error(c->pIter, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_free(pCsr->pVtab->zErrMsg);
    pCsr->pVtab->zErrMsg = zErr;
  }
  return rc;
}

static int dvEof(sqlite3_vtab_cursor *pCsr){
  DvCursor *c = (DvCursor*)pCsr;
  return c->pIter==0 || kv_iter_eof(c->pIter);
}

static int dvColumn(sqlite3_vtab_cursor *pCsr, sqlite3_context *ctx, int i){
  DvCursor *c = (DvCursor*)pCsr;
  KvMapEntry e;
  kv_iter_entry(c->pIter, &e);
  if( i==0 ){
    int n = c->eKind==DV_INDEX ? kv_key_length(e.aKey, e.nKey) : e.nKey;
    if( n<0 ) n = e.nKey;
    if( c->eKind==DV_COUNTER ){
      return kv_key_result(ctx, e.aKey, n, e.aVal, e.nVal);
    }
    return kv_key_result(ctx, e.aKey, n, e.aVal, e.nVal);
  }
  if( c->eKind==DV_COUNTER ){
    int64_t nCount, iSum; double rSum; int bReal, nText = 0;
    const char *z = kv_value_text(e.aVal, e.nVal, &nText);
    DvEntry *f = c->fix.n>0 ? dvFixFind(c, e.aKey, e.nKey) : 0;
    dvCounterParse(z, nText, &nCount, &iSum, &rSum, &bReal);
    if( f ){
      nCount -= f->nCount; iSum -= f->iSum; rSum -= f->rSum;
      bReal = bReal || f->bReal;
    }
    if( i==1 ) sqlite3_result_int64(ctx, nCount);
    else if( bReal ) sqlite3_result_double(ctx, rSum + (double)iSum);
    else sqlite3_result_int64(ctx, iSum);
    return SQLITE_OK;
  }
  return kv_value_result(ctx, e.aVal, e.nVal);
}

static int dvRowid(sqlite3_vtab_cursor *pCsr, sqlite3_int64 *pRowid){
  *pRowid = ((DvCursor*)pCsr)->iRow;
  return SQLITE_OK;
}

static int dvUpdate(sqlite3_vtab *pVtab, int argc, sqlite3_value **argv,
                    sqlite3_int64 *pRowid){
  DvTable *p = (DvTable*)pVtab;
  DvSource *s = 0;
  (void)argc; (void)argv; (void)pRowid;
  dvSource(p->pConn, p->pEng, p->zName, p->nName, &s);
  sqlite3_free(pVtab->zErrMsg);
  pVtab->zErrMsg = sqlite3_mprintf("kv: table %s is the %s of %s and changes "
      "only with it: write %s instead", p->zName,
      dvKindName(s && s->zCarrierOf ? s->eCarrierKind : p->eKind),
      s && s->zCarrierOf ? s->zCarrierOf : "its source",
      s && s->zCarrierOf ? s->zCarrierOf : "the source");
  return SQLITE_READONLY;
}

static sqlite3_module dvModule = {
  0, dvCreate, dvConnect, dvBestIndex, dvDisconnect, dvDestroy,
  dvOpen, dvClose, dvFilter, dvNext, dvEof, dvColumn, dvRowid,
  dvUpdate, 0, 0, 0, 0,         /* no transactions: read-only */
  0, 0, 0, 0, 0, 0
};

static void dvConnUnref(void *p){ kv_conn_unref(p); }

static int dvConnection(sqlite3 *db, KvConn *pConn){
  int rc;
  kv_conn_ref(pConn);
  rc = sqlite3_create_module_v2(db, "kv_index", &dvModule, pConn, dvConnUnref);
  if( rc==SQLITE_OK ){
    kv_conn_ref(pConn);
    rc = sqlite3_create_module_v2(db, "kv_counter", &dvModule, pConn,
                                  dvConnUnref);
  }
  if( rc==SQLITE_OK ){
    kv_conn_ref(pConn);
    rc = depot_listing_register(db, &validateListing, pConn, dvConnUnref);
  }
  if( rc==SQLITE_OK ){
    kv_conn_ref(pConn);
    rc = depot_listing_register(db, &carriersListing, pConn, dvConnUnref);
  }
  if( rc==SQLITE_OK ){
    kv_conn_ref(pConn);
    rc = sqlite3_create_function_v2(db, "kv_repair", -1,
        SQLITE_UTF8|SQLITE_DIRECTONLY, pConn, dvRepairFunc, 0, 0,
        dvConnUnref);
  }
  return rc;
}

const DepotComponent depotKvDerivedComponent = {
  "kv: cannot register kv_index, kv_counter, kv_validate, kv_carriers, "
  "kv_repair", 0,
  dvConnection
};
