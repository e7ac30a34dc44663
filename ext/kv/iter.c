/*
** iter.c -- scans of KV tables.  A scan merges two sorted streams: the
** committed data of the table as of a snapshot (a backend cursor) and,
** inside a root, the root's write set as it was when the scan opened (a
** kv_map cursor on a reference to it; tombstones hide committed keys).
** Later writes, by anyone, are never seen by an open scan.  Bounds are
** encoded keys; the scan walks forward, or backward when bDesc.  A read
** error of the committed side (a damaged record, a failed data-file read)
** ends the scan and is kept for kv_iter_error(): never a silent early end.
**
** Locking: opening a scan binds and snapshots under the engine mutex; the
** scan then walks its own snapshot and write-set reference without it.
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

struct KvIter {
  KvEngine *pEng;
  KvTable *pTab;                /* holds a reference */
  KvBackendSnap *pSnap;         /* owned by the scan */
  KvBackendCursor *pData;       /* NULL: no committed data */
  KvMapCursor *pOwn;            /* NULL: no write set */
  int bDataOn, bOwnOn;
  int bDesc;
  int bWithExpired;             /* KV_ITER_WITH_EXPIRED */
  int64_t iNow;                 /* the clock for deadlines, 0: not read */
  KvBuf lo, hi;                 /* bounds (copies) */
  int bLo, bLoIncl, bHi, bHiIncl;
  int bEof;
  KvMapEntry cur;
  int bCurOwn;                  /* cur comes from the write set */
  int rc;                       /* read error that ended the scan */
  char *zErr;                   /* its message (or NULL) */
  /* Set at open for kv_iter_step's fast path: the backend's xCursorStep
  ** when there is no write set to merge (else NULL), what it promises
  ** about its entries (KV_ENTRY_*), and whether the walk has a far bound
  ** to check. */
  int (*xStep)(KvBackendCursor*, int, KvMapEntry*);
  int fData;
  int bFar;
};

static int iterCmp(const uint8_t *a, int na, const uint8_t *b, int nb){
  int n = na<nb ? na : nb, c;
  if( n>=8 ){
    /* keys of one kind share the tag byte: the first 8 bytes, compared as
    ** big-endian integers, mostly decide without a call */
    uint64_t x, y;
    memcpy(&x, a, 8);
    memcpy(&y, b, 8);
    if( x!=y ){
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__==__ORDER_LITTLE_ENDIAN__
      x = __builtin_bswap64(x);
      y = __builtin_bswap64(y);
      return x<y ? -1 : 1;
#endif
    }
  }
  c = memcmp(a, b, n);
  return c ? c : na-nb;
}

/* Is key e past the far bound of the walk? */
static int iterPastEnd(KvIter *p, const KvMapEntry *e){
  int c;
  if( !p->bDesc ){
    if( !p->bHi ) return 0;
    c = iterCmp(e->aKey, e->nKey, p->hi.a, p->hi.n);
    return c>0 || (c==0 && !p->bHiIncl);
  }
  if( !p->bLo ) return 0;
  c = iterCmp(e->aKey, e->nKey, p->lo.a, p->lo.n);
  return c<0 || (c==0 && !p->bLoIncl);
}

/* After a seek or step of the committed side returned 0: was it a read
** error?  Then the scan is over and keeps the error. */
static void iterDataEnded(KvIter *p){
  const KvBackend *pB = p->pTab->pBackend;
  if( p->bDataOn || pB->xCursorError==0 || p->rc!=SQLITE_OK ) return;
  p->rc = pB->xCursorError(p->pData, &p->zErr);
}

static void iterStepData(KvIter *p){
  const KvBackend *pB = p->pTab->pBackend;
  p->bDataOn = p->bDesc ? pB->xCursorPrev(p->pData) : pB->xCursorNext(p->pData);
  iterDataEnded(p);
}
static void iterStepOwn(KvIter *p){
  p->bOwnOn = p->bDesc ? kv_map_cursor_prev(p->pOwn)
                       : kv_map_cursor_next(p->pOwn);
}

/* Pick the next visible entry from the two streams into p->cur.  Without
** a write set (every read outside a writing transaction) the committed
** side's entry is written straight into p->cur. */
static void iterSettle(KvIter *p){
  const KvBackend *pB = p->pTab->pBackend;
  KvMapEntry d, o;
  if( p->pOwn==0 ){
    if( p->rc!=SQLITE_OK || !p->bDataOn ){
      p->bEof = 1;
    }else{
      pB->xCursorEntry(p->pData, &p->cur);
      p->bCurOwn = 0;
      p->bEof = iterPastEnd(p, &p->cur);
    }
    return;
  }
  for(;;){
    int c;
    if( p->rc!=SQLITE_OK || (!p->bDataOn && !p->bOwnOn) ){
      p->bEof = 1;
      return;
    }
    if( p->bDataOn ) pB->xCursorEntry(p->pData, &d);
    if( p->bOwnOn ) kv_map_cursor_entry(p->pOwn, &o);
    if( !p->bOwnOn ) c = -1;
    else if( !p->bDataOn ) c = 1;
    else{
      c = iterCmp(d.aKey, d.nKey, o.aKey, o.nKey);
      if( p->bDesc ) c = -c;
    }
    if( c<0 ){
      p->cur = d; p->bCurOwn = 0;
    }else{
      if( c==0 ) iterStepData(p);          /* the write set shadows it */
      if( o.bTomb ){ iterStepOwn(p); continue; }
      p->cur = o; p->bCurOwn = 1;
    }
    p->bEof = iterPastEnd(p, &p->cur);
    return;
  }
}

/* iterSettle, then past entries whose deadline has passed (kv.h,
** "Deadlines"), unless the scan shows them.  The clock is read once per
** scan, at its first entry that has a deadline. */
static void iterSettleLive(KvIter *p){
  iterSettle(p);
  while( !p->bEof && !p->bWithExpired && p->cur.nVal>=10
      && (p->cur.aVal[0] & 0x80) ){
    if( p->iNow==0 ) p->iNow = kv_clock_ms();
    if( !kv_value_expired(p->cur.aVal, p->cur.nVal, p->iNow) ) break;
    if( p->bCurOwn ) iterStepOwn(p); else iterStepData(p);
    iterSettle(p);
  }
}

static int iterSeekMode(KvIter *p){
  if( !p->bDesc ){
    if( !p->bLo ) return KV_SEEK_FIRST;
    return p->bLoIncl ? KV_SEEK_GE : KV_SEEK_GT;
  }
  if( !p->bHi ) return KV_SEEK_LAST;
  return p->bHiIncl ? KV_SEEK_LE : KV_SEEK_LT;
}

static int iterStart(KvIter *p){
  int eSeek = iterSeekMode(p);
  const KvBuf *pB = p->bDesc ? &p->hi : &p->lo;
  if( p->pData ){
    p->bDataOn = p->pTab->pBackend->xCursorSeek(p->pData, eSeek, pB->a, pB->n);
    iterDataEnded(p);
  }
  if( p->pOwn ){
    p->bOwnOn = kv_map_cursor_seek(p->pOwn, eSeek, pB->a, pB->n);
  }
  iterSettleLive(p);
  return p->rc;
}

static int iterBounds(KvIter *p, const KvBound *pLo, const KvBound *pHi){
  int rc = SQLITE_OK;
  if( pLo ){
    p->bLo = 1; p->bLoIncl = pLo->bIncl;
    rc = kv_buf_append(&p->lo, pLo->aKey, pLo->nKey);
  }
  if( pHi && rc==SQLITE_OK ){
    p->bHi = 1; p->bHiIncl = pHi->bIncl;
    rc = kv_buf_append(&p->hi, pHi->aKey, pHi->nKey);
  }
  return rc;
}

/* Find the table and take (or borrow) its snapshot. */
static int iterSource(KvIter *p, KvRoot *pRoot, const char *zTab, int nTab,
                        KvMap **ppOwn, char **pzErr){
  KvChild *c = 0;
  int rc = SQLITE_OK;
  *ppOwn = 0;
  if( pRoot ){
    int i;
    for(i=0; i<pRoot->nChild; i++){
      KvChild *x = pRoot->apChild[i];
      if( !x->bSchema && x->pTab->nName==nTab
       && memcmp(x->pTab->zName, zTab, nTab)==0 ) c = x;
    }
  }
  pthread_mutex_lock(&p->pEng->mutex);
  if( c ){
    p->pTab = c->pTab;
    rc = kvChildSnapLocked(pRoot, c, pzErr);
    if( rc==SQLITE_OK && c->pSnap ){
      rc = p->pTab->pBackend->xSnapshotDup(c->pSnap, &p->pSnap);
    }
    *ppOwn = kv_map_ref(c->pWrite);
  }else if( (rc = kvEngineCatchUp(p->pEng, 0, pzErr))==SQLITE_OK ){
    p->pTab = kvTableFind(p->pEng, zTab, nTab);
    if( p->pTab ){
      rc = p->pTab->pBackend->xSnapshot(p->pTab->pData, &p->pSnap);
      kvSnapshotError(rc, zTab, nTab, pzErr);
    }
  }
  if( p->pTab ) p->pTab->nRef++;
  pthread_mutex_unlock(&p->pEng->mutex);
  if( p->pTab==0 && rc==SQLITE_OK ){
    *pzErr = sqlite3_mprintf("kv: no such table: %.*s (store %s)", nTab,
                             zTab, p->pEng->zDir ? p->pEng->zDir : "in memory");
    rc = SQLITE_ERROR;
  }
  return rc;
}

/* Open a scan into p, which holds no scan (fresh, or released): its
** allocation and bound buffers are reused.  On error p holds no scan. */
static int iterOpenInto(KvIter *p, KvEngine *pEng, KvRoot *pRoot,
                        const char *zTab, int nTab, const KvBound *pLo,
                        const KvBound *pHi, int bDesc, char **pzErr){
  KvMap *pOwn = 0;
  int rc;
  p->pEng = pEng;
  p->bDesc = (bDesc & KV_ITER_DESC)!=0;
  p->bWithExpired = (bDesc & KV_ITER_WITH_EXPIRED)!=0;
  rc = kvEngineFailed(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = iterBounds(p, pLo, pHi);
  if( rc==SQLITE_OK ) rc = iterSource(p, pRoot, zTab, nTab, &pOwn, pzErr);
  if( rc==SQLITE_OK && p->pSnap ){
    rc = p->pTab->pBackend->xCursorOpen(p->pSnap, &p->pData);
  }
  if( rc==SQLITE_OK && pOwn && kv_map_count(pOwn)>0 ){
    p->pOwn = kv_map_cursor_new(pOwn);
    if( p->pOwn==0 ) rc = SQLITE_NOMEM;
  }
  kv_map_unref(pOwn);                   /* the cursor holds its own */
  if( rc==SQLITE_OK ){
    const KvBackend *pB = p->pTab->pBackend;
    p->xStep = p->pOwn==0 ? pB->xCursorStep : 0;
    p->fData = pB->fEntries;
    p->bFar = p->bDesc ? p->bLo : p->bHi;
  }
  if( rc==SQLITE_OK && (rc = iterStart(p))!=SQLITE_OK ){
    *pzErr = p->zErr;
    p->zErr = 0;
  }
  if( rc!=SQLITE_OK ) kv_iter_release(p);
  return rc;
}

int kv_iter_open(KvEngine *pEng, KvRoot *pRoot, const char *zTab, int nTab,
                 const KvBound *pLo, const KvBound *pHi, int bDesc,
                 KvIter **ppIter, char **pzErr){
  KvIter *p = sqlite3_malloc64(sizeof(*p));
  int rc;
  *ppIter = 0;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  rc = iterOpenInto(p, pEng, pRoot, zTab, nTab, pLo, pHi, bDesc, pzErr);
  if( rc!=SQLITE_OK ){
    kv_iter_close(p);
    return rc;
  }
  *ppIter = p;
  return SQLITE_OK;
}

int kv_iter_reopen(KvIter *p, KvEngine *pEng, KvRoot *pRoot,
                   const char *zTab, int nTab, const KvBound *pLo,
                   const KvBound *pHi, int bDesc, char **pzErr){
  kv_iter_release(p);
  return iterOpenInto(p, pEng, pRoot, zTab, nTab, pLo, pHi, bDesc, pzErr);
}

int kv_iter_eof(KvIter *p){ return p->bEof; }

void kv_iter_next(KvIter *p){
  const KvBackend *pB;
  if( p->bEof ) return;
  pB = p->pTab->pBackend;
  if( p->pOwn==0 && pB->xCursorStep ){
    /* no write set: the committed side's step is the scan's (iterSettle) */
    p->bDataOn = pB->xCursorStep(p->pData, p->bDesc, &p->cur);
    if( !p->bDataOn ){
      iterDataEnded(p);
      p->bEof = 1;
      return;
    }
    p->bEof = iterPastEnd(p, &p->cur);
    if( !p->bEof && !p->bWithExpired && p->cur.nVal>=10
     && (p->cur.aVal[0] & 0x80) ){
      iterSettleLive(p);                   /* past expired entries */
    }
    return;
  }
  if( p->bCurOwn ) iterStepOwn(p); else iterStepData(p);
  iterSettleLive(p);
}

const KvMapEntry *kv_iter_step(KvIter *p, int *pfEntry){
  if( p->bEof ) return 0;
  if( p->xStep ){
    /* kv_iter_next's path without a write set, and kv_iter_landed */
    if( !p->xStep(p->pData, p->bDesc, &p->cur) ){
      p->bDataOn = 0;
      iterDataEnded(p);
      p->bEof = 1;
      return 0;
    }
    if( p->bFar && iterPastEnd(p, &p->cur) ){
      p->bEof = 1;
      return 0;
    }
    if( p->cur.nVal>=10 && (p->cur.aVal[0] & 0x80) && !p->bWithExpired ){
      p->bDataOn = 1;
      iterSettleLive(p);                   /* past expired entries */
      if( p->bEof ) return 0;
    }
    *pfEntry = p->fData;
    return &p->cur;
  }
  kv_iter_next(p);
  return kv_iter_landed(p, pfEntry);
}

int kv_iter_error(KvIter *p, char **pzErr){
  *pzErr = 0;
  if( p->rc!=SQLITE_OK ){
    *pzErr = p->zErr ? sqlite3_mprintf("%s", p->zErr) : 0;
  }
  return p->rc;
}

void kv_iter_entry(KvIter *p, KvMapEntry *pOut){
  *pOut = p->cur;
}

const KvMapEntry *kv_iter_current(KvIter *p){
  return &p->cur;
}

int kv_iter_stable(KvIter *p){
  return !p->bEof && !p->bCurOwn
      && (p->pTab->pBackend->fEntries & KV_ENTRY_STABLE)!=0;
}

const KvMapEntry *kv_iter_landed(KvIter *p, int *pfEntry){
  if( p->bEof ) return 0;
  /* the write set is a kv_map: its values are terminated (map.h) */
  *pfEntry = p->bCurOwn ? KV_ENTRY_TERM : p->pTab->pBackend->fEntries;
  return &p->cur;
}

void kv_iter_release(KvIter *p){
  KvBuf lo, hi;
  if( p==0 ) return;
  if( p->pData ) p->pTab->pBackend->xCursorClose(p->pData);
  kv_map_cursor_free(p->pOwn);
  if( p->pSnap ) p->pTab->pBackend->xSnapshotFree(p->pSnap);
  if( p->pTab ){
    pthread_mutex_lock(&p->pEng->mutex);
    kvTableUnref(p->pTab);
    pthread_mutex_unlock(&p->pEng->mutex);
  }
  sqlite3_free(p->zErr);
  lo = p->lo;
  hi = p->hi;
  kv_buf_reset(&lo);
  kv_buf_reset(&hi);
  memset(p, 0, sizeof(*p));
  p->lo = lo;
  p->hi = hi;
  p->bEof = 1;
}

void kv_iter_close(KvIter *p){
  if( p==0 ) return;
  kv_iter_release(p);
  kv_buf_free(&p->lo);
  kv_buf_free(&p->hi);
  sqlite3_free(p);
}
