/*
** kv_stream.c -- change streams: every applied mutation of a source KV
** table appends one event to each queue declared on it with
**
**   CREATE VIRTUAL TABLE user_changes USING kv_queue(source=users
**       [, project='json_extract(value, ''$.email'')']);
**
** in the same root transaction, so in the same WAL record, as the
** mutation: an event exists if and only if its change committed.  The
** source's catalog options list its streams ({"streams":[...]}); declaring
** or removing one rewrites them, so a writer bound to the source before
** fails its prepare (as for carriers, kv_derived.c) and none misses a
** stream.  kv_derived.c loads the list with the source's other derived
** data (kv_stream_load) and calls kv_stream_write on every source write
** once its carriers' checks passed and before their writes: every source
** write path (the KV table module, kv_put/kv_delete, an expiry sweep)
** goes through it.
**
** The event is the message's payload, JSON text:
**   {"seq":ID,"op":"insert"|"update"|"delete"|"expire","key":K,
**    "old":V,"new":V,"tid":T,"time":MS}
** seq is the message id (kv_queue_alloc: increasing in the order the
** writes were made); old is null for an insert, new for a delete or an
** expire (a delete made by a root whose origin is KV_ORIGIN_EXPIRE, or
** the removal of an expired row whose unique value a write claims); a
** delete of an absent key is no mutation and has no event.  K and V are
** JSON: numbers, strings, {"hex":"..."} for blobs, null; with project=E,
** V is json_quote(E) of the row (so json(...) or json_object(...) embed
** JSON).  tid is the root's transaction id, time kv_clock_ms().
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv_queue.h"
#include "ext/kv/kv.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

typedef struct KvStream KvStream;
struct KvStream {
  char *zQueue; int nQueue;
  uint64_t iTabId;
  KvqMemo memo;                 /* its id allocation */
  char *zProject;               /* NULL: the values themselves */
  sqlite3_stmt *pProj;          /* json_quote of the projection */
};

struct KvStreams {
  int n;
  KvStream *a;
  KvBuf ev;                     /* scratch: events being built */
  KvBuf rec;                    /* scratch: one record */
  int *aEnd;                    /* n offsets: end of event i in ev */
  int64_t *aId;                 /* n message ids */
};

void kv_stream_free(KvStreams *p){
  int i;
  if( p==0 ) return;
  for(i=0; i<p->n; i++){
    sqlite3_free(p->a[i].zQueue);
    sqlite3_free(p->a[i].zProject);
    sqlite3_finalize(p->a[i].pProj);
  }
  sqlite3_free(p->a);
  sqlite3_free(p->aEnd);
  sqlite3_free(p->aId);
  kv_buf_free(&p->ev);
  kv_buf_free(&p->rec);
  sqlite3_free(p);
}


int kv_stream_load(sqlite3 *db, KvEngine *pEng, const char *zOpt,
                   KvStreams **pp, int *pbQueue){
  char *zQ = 0, *zList = 0;
  sqlite3_stmt *pEach = 0;
  KvStreams *p = 0;
  int rc;
  *pp = 0;
  *pbQueue = 0;
  if( zOpt==0 ) return SQLITE_OK;
  rc = depot_json_text(db, zOpt, "$.queue", &zQ);
  if( rc==SQLITE_OK ) *pbQueue = zQ!=0;
  if( rc==SQLITE_OK ) rc = depot_json_text(db, zOpt, "$.streams", &zList);
  if( rc==SQLITE_OK && zList ){
    rc = sqlite3_prepare_v2(db, "SELECT value FROM json_each(?1)", -1, &pEach,
                            0);
    if( rc==SQLITE_OK ) sqlite3_bind_text(pEach, 1, zList, -1, SQLITE_STATIC);
    while( rc==SQLITE_OK && sqlite3_step(pEach)==SQLITE_ROW ){
      const char *zName = (const char*)sqlite3_column_text(pEach, 0);
      KvMeta m;
      int bFound = 0;
      if( zName==0 ) continue;
      rc = kv_table_meta(pEng, 0, zName, (int)strlen(zName), &m, &bFound);
      if( rc==SQLITE_OK && bFound ){
        KvStream *s, *a;
        if( p==0 ){
          p = sqlite3_malloc64(sizeof(*p));
          if( p==0 ) rc = SQLITE_NOMEM; else memset(p, 0, sizeof(*p));
        }
        a = p ? sqlite3_realloc64(p->a, (p->n+1)*sizeof(KvStream)) : 0;
        if( a==0 ){
          rc = SQLITE_NOMEM;
        }else{
          p->a = a;
          s = &a[p->n];
          memset(s, 0, sizeof(*s));
          s->zQueue = sqlite3_mprintf("%s", zName);
          s->nQueue = (int)strlen(zName);
          s->iTabId = m.iId;
          p->n++;
          if( s->zQueue==0 ) rc = SQLITE_NOMEM;
          if( rc==SQLITE_OK ) rc = depot_json_text(db, m.zOptions, "$.project",
                                          &s->zProject);
        }
      }
      kv_meta_clear(&m);
    }
    sqlite3_finalize(pEach);
  }
  if( rc==SQLITE_OK && p ){
    p->aEnd = sqlite3_malloc64(p->n*sizeof(int));
    p->aId = sqlite3_malloc64(p->n*sizeof(int64_t));
    if( p->aEnd==0 || p->aId==0 ) rc = SQLITE_NOMEM;
  }
  sqlite3_free(zQ);
  sqlite3_free(zList);
  if( rc!=SQLITE_OK ){
    kv_stream_free(p);
    p = 0;
  }
  *pp = p;
  return rc;
}

static int ksAppend(KvBuf *p, const char *z){
  return kv_buf_append(p, z, (int)strlen(z));
}

/* A value encoding as JSON. */
static int ksValueJson(const uint8_t *aVal, int nVal, KvBuf *pOut){
  KvDatum d;
  char *z = 0;
  int rc = kv_value_decode(aVal, nVal, &d);
  if( rc!=SQLITE_OK ) return rc;
  switch( d.eType ){
    case SQLITE_INTEGER: z = sqlite3_mprintf("%lld", (long long)d.i); break;
    case SQLITE_FLOAT:
      if( d.r>1e308 || d.r<-1e308 ){
        z = sqlite3_mprintf("%s", d.r>0 ? "9e999" : "-9e999");
      }else{
        z = sqlite3_mprintf("%!.17g", d.r);
      }
      break;
    case SQLITE_TEXT:
      rc = kv_json_text(pOut, d.z, d.n);
      break;
    case SQLITE_BLOB: {
      int i;
      rc = ksAppend(pOut, "{\"hex\":\"");
      for(i=0; rc==SQLITE_OK && i<d.n; i++){
        char a[2];
        a[0] = "0123456789abcdef"[d.z[i]>>4];
        a[1] = "0123456789abcdef"[d.z[i]&15];
        rc = kv_buf_append(pOut, a, 2);
      }
      if( rc==SQLITE_OK ) rc = ksAppend(pOut, "\"}");
      break;
    }
    default: rc = ksAppend(pOut, "null"); break;
  }
  if( d.eType==SQLITE_INTEGER || d.eType==SQLITE_FLOAT ){
    rc = z ? ksAppend(pOut, z) : SQLITE_NOMEM;
  }
  sqlite3_free(z);
  kv_datum_clear(&d);
  return rc;
}

/* The JSON of row (aKey, aVal) as stream s shows it. */
static int ksRowJson(sqlite3 *db, KvStream *s, const char *zTab,
                     const uint8_t *aKey, int nKey, const uint8_t *aVal,
                     int nVal, KvBuf *pOut, char **pzErr){
  int rc;
  if( aVal==0 ) return ksAppend(pOut, "null");
  if( s->zProject==0 ) return ksValueJson(aVal, nVal, pOut);
  if( db==0 ) return SQLITE_NOMEM;
  if( s->pProj==0 ){
    char *zSql = sqlite3_mprintf("SELECT json_quote((%s)) FROM (SELECT ?1 "
                                 "AS key, ?2 AS value)", s->zProject);
    if( zSql==0 ) return SQLITE_NOMEM;
    rc = sqlite3_prepare_v3(db, zSql, -1, SQLITE_PREPARE_PERSISTENT,
                            &s->pProj, 0);
    sqlite3_free(zSql);
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("kv: change stream %s: bad projection: %s",
                               s->zQueue, sqlite3_errmsg(db));
      return rc;
    }
  }
  rc = kv_key_bind(s->pProj, 1, aKey, nKey, aVal, nVal);
  if( rc==SQLITE_OK ) rc = kv_value_bind(s->pProj, 2, aVal, nVal);
  if( rc==SQLITE_OK ){
    if( sqlite3_step(s->pProj)==SQLITE_ROW ){
      const char *z = (const char*)sqlite3_column_text(s->pProj, 0);
      rc = ksAppend(pOut, z ? z : "null");
    }else{
      char *zKey = kv_key_describe(aKey, nKey);
      *pzErr = sqlite3_mprintf("kv: change stream %s: projection failed on "
          "key %s of table %s: %s", s->zQueue, zKey ? zKey : "?", zTab,
          sqlite3_errmsg(db));
      sqlite3_free(zKey);
      rc = SQLITE_ERROR;
    }
    sqlite3_reset(s->pProj);
  }
  return rc;
}

int kv_stream_write(sqlite3 *db, KvStreams *p, KvRoot *r, const char *zTab,
                    int nTab, const uint8_t *aKey, int nKey,
                    const uint8_t *aVal, int nVal, int bDelete, int bOld,
                    const uint8_t *aOld, int nOld, char **pzErr){
  KvEngine *pEng = kv_root_engine(r);
  const char *zOp;
  int64_t iNow = kv_clock_ms();
  char *zSeq = 0;
  int i, rc = SQLITE_OK, iStart = 0;
  (void)nTab;
  if( p==0 || p->n==0 ) return SQLITE_OK;
  if( bDelete ){
    if( !bOld ) return SQLITE_OK;
    zOp = bDelete==2 || kv_root_origin(r)==KV_ORIGIN_EXPIRE
        ? "expire" : "delete";
  }else{
    zOp = bOld ? "update" : "insert";
  }
  kv_buf_reset(&p->ev);
  /* build every event first: a failing projection writes nothing */
  for(i=0; rc==SQLITE_OK && i<p->n; i++){
    KvStream *s = &p->a[i];
    rc = kv_queue_alloc(pEng, s->zQueue, s->nQueue, s->iTabId, &s->memo, 1,
                        &p->aId[i], pzErr);
    if( rc==SQLITE_OK ){
      zSeq = sqlite3_mprintf("{\"seq\":%lld,\"op\":\"%s\",\"key\":",
                             (long long)p->aId[i], zOp);
      rc = zSeq ? ksAppend(&p->ev, zSeq) : SQLITE_NOMEM;
      sqlite3_free(zSeq);
    }
    if( rc==SQLITE_OK ) rc = kv_key_json(aKey, nKey, &p->ev);
    if( rc==SQLITE_OK ) rc = ksAppend(&p->ev, ",\"old\":");
    if( rc==SQLITE_OK ){
      rc = ksRowJson(db, s, zTab, aKey, nKey, bOld ? aOld : 0, nOld, &p->ev,
                     pzErr);
    }
    if( rc==SQLITE_OK ) rc = ksAppend(&p->ev, ",\"new\":");
    if( rc==SQLITE_OK ){
      rc = ksRowJson(db, s, zTab, aKey, nKey, bDelete ? 0 : aVal, nVal,
                     &p->ev, pzErr);
    }
    if( rc==SQLITE_OK ){
      zSeq = sqlite3_mprintf(",\"tid\":%llu,\"time\":%lld}",
                             (unsigned long long)kv_root_tid(r),
                             (long long)iNow);
      rc = zSeq ? ksAppend(&p->ev, zSeq) : SQLITE_NOMEM;
      sqlite3_free(zSeq);
    }
    p->aEnd[i] = p->ev.n;
  }
  for(i=0; rc==SQLITE_OK && i<p->n; i++){
    KvStream *s = &p->a[i];
    KvBuf k = {0, 0, 0};
    KvqRec rec;
    memset(&rec, 0, sizeof(rec));
    rec.iVisible = rec.iEnqueued = iNow;
    kv_buf_reset(&p->rec);
    /* the payload: the event as text */
    rc = kv_value_encode_text(0, (const char*)p->ev.a + iStart,
                              p->aEnd[i] - iStart, &p->rec);
    if( rc==SQLITE_OK ){
      KvBuf pay = p->rec;
      memset(&p->rec, 0, sizeof(p->rec));
      rec.aPay = pay.a; rec.nPay = pay.n;
      rc = kv_queue_rec_encode(&rec, &p->rec);
      kv_buf_free(&pay);
    }
    if( rc==SQLITE_OK ) rc = kv_queue_key(KVQ_MSG, p->aId[i], &k);
    if( rc==SQLITE_OK ){
      rc = kv_put(r, s->zQueue, s->nQueue, k.a, k.n, p->rec.a, p->rec.n,
                  pzErr);
    }
    kv_buf_free(&k);
    iStart = p->aEnd[i];
  }
  return rc;
}
