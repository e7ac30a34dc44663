/*
** logcache.c -- the process's cache of kv_log file bytes: the chunks that
** walks and point reads serve records from (see logstore_int.h).
**
** A read that finds no chunk holding its frame reads up to KlWindow.nNext
** bytes of the file from the frame on, stopping at the file's published
** end and at the next chunk of the file, and keeps the whole frames of
** what it read (following their length fields from the frame) as a new
** chunk.  A chunk is referenced by its file's list (while it is cached)
** and by each window on it, so a chunk that leaves the cache stays
** readable until the last window lets go of it.
**
** Locking: one process-wide mutex (klcMu) guards every file's chunk list,
** the least-recently-used list and the byte counts; it is taken when a
** window moves to another chunk and when a file closes, never per
** record.  A chunk's bytes never change once it is listed; its checked
** bits are set with atomic ORs.
*/
#include "config.h"
#include "ext/kv/logstore_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <string.h>

struct KlChunk {
  int nRef;                     /* atomic: the cache's, one per window */
  int bListed;                  /* klcMu: in its file's list and the LRU */
  KlFile *pFile;                /* its file (while listed) */
  KlChunk *pNewer, *pOlder;     /* klcMu: the LRU list, while listed */
  uint64_t iOff;                /* file offset of a[0] */
  int n;                        /* bytes: whole frames */
  uint8_t *aCheck;              /* one bit per 16 bytes: frame checked */
  uint8_t a[1];                 /* n bytes, then the bits */
};

static pthread_mutex_t klcMu = PTHREAD_MUTEX_INITIALIZER;
static KlChunk *klcNewest = 0, *klcOldest = 0;  /* klcMu: the LRU list */
static int64_t klcUsed = 0;                      /* klcMu: bytes listed */
static int64_t klcLimit = KL_CACHE_DEFAULT;      /* atomic */

/* The bytes a chunk of n data bytes counts for. */
static int64_t klcCost(const KlChunk *pC){
  return (int64_t)sizeof(KlChunk) + pC->n + (pC->n+127)/128;
}

static void klcUnref(KlChunk *pC){
  if( pC && __atomic_sub_fetch(&pC->nRef, 1, __ATOMIC_ACQ_REL)==0 ){
    sqlite3_free(pC);
  }
}

/* klcMu held: the index of pFile's last chunk starting at or before iOff,
** or -1. */
static int klcFind(const KlFile *pFile, uint64_t iOff){
  int lo = 0, hi = pFile->nChunk-1, iBest = -1;
  while( lo<=hi ){
    int mid = (lo+hi)/2;
    if( pFile->apChunk[mid]->iOff<=iOff ){ iBest = mid; lo = mid+1; }
    else hi = mid-1;
  }
  return iBest;
}

/* klcMu held: unlink pC from the LRU list / put it at the newest end. */
static void klcLruUnlink(KlChunk *pC){
  if( pC->pNewer ) pC->pNewer->pOlder = pC->pOlder; else klcNewest = pC->pOlder;
  if( pC->pOlder ) pC->pOlder->pNewer = pC->pNewer; else klcOldest = pC->pNewer;
  pC->pNewer = pC->pOlder = 0;
}
static void klcLruPush(KlChunk *pC){
  pC->pNewer = 0;
  pC->pOlder = klcNewest;
  if( klcNewest ) klcNewest->pNewer = pC; else klcOldest = pC;
  klcNewest = pC;
}

/* klcMu held: take pC (listed) out of the cache; the cache's reference
** is returned to the caller, who lets go of it after unlocking. */
static void klcUnlist(KlChunk *pC){
  KlFile *pFile = pC->pFile;
  int i = klcFind(pFile, pC->iOff);
  klcLruUnlink(pC);
  memmove(&pFile->apChunk[i], &pFile->apChunk[i+1],
          sizeof(KlChunk*)*(size_t)(pFile->nChunk-i-1));
  pFile->nChunk--;
  klcUsed -= klcCost(pC);
  pC->bListed = 0;
  pC->pFile = 0;
}

/* klcMu held: list pC in pFile at index i (the cache takes a reference),
** making room under the limit by dropping the least recently used chunks
** (their references go to *ppFree, a list through pOlder, for the caller
** to let go of after unlocking).  0 if it does not fit at all. */
static int klcList(KlFile *pFile, int i, KlChunk *pC, KlChunk **ppFree){
  int64_t nLimit = __atomic_load_n(&klcLimit, __ATOMIC_RELAXED);
  int64_t nCost = klcCost(pC);
  if( nCost>nLimit ) return 0;
  if( pFile->nChunk==pFile->nChunkAlloc ){
    int nNew = pFile->nChunkAlloc ? 2*pFile->nChunkAlloc : 8;
    KlChunk **aNew = sqlite3_realloc64(pFile->apChunk, sizeof(KlChunk*)*nNew);
    if( aNew==0 ) return 0;
    pFile->apChunk = aNew;
    pFile->nChunkAlloc = nNew;
  }
  while( klcUsed+nCost>nLimit && klcOldest ){
    KlChunk *pOld = klcOldest;
    if( pOld->pFile==pFile && pOld->iOff<pC->iOff ) i--;
    klcUnlist(pOld);
    pOld->pOlder = *ppFree;
    *ppFree = pOld;
  }
  memmove(&pFile->apChunk[i+1], &pFile->apChunk[i],
          sizeof(KlChunk*)*(size_t)(pFile->nChunk-i));
  pFile->apChunk[i] = pC;
  pFile->nChunk++;
  pC->pFile = pFile;
  pC->bListed = 1;
  klcLruPush(pC);
  klcUsed += nCost;
  __atomic_add_fetch(&pC->nRef, 1, __ATOMIC_RELAXED);
  return 1;
}

static void klcFreeList(KlChunk *p){
  while( p ){
    KlChunk *pNext = p->pOlder;
    klcUnref(p);
    p = pNext;
  }
}

/* Point pWin at pC (a reference the caller gives). */
static void klcWindowSet(KlWindow *pWin, KlFile *pFile, KlChunk *pC){
  pWin->pChunk = pC;
  pWin->a = pC->a;
  pWin->aCheck = pC->aCheck;
  pWin->iOff = pC->iOff;
  pWin->iFile = pFile->iKey;
  pWin->n = pC->n;
}

void kl_window_release(KlWindow *pWin){
  klcUnref(pWin->pChunk);
  pWin->pChunk = 0;
  pWin->a = 0;
  pWin->aCheck = 0;
  pWin->n = 0;
}

/* klcMu held: a reference on pFile's cached chunk holding [iOff, iEnd)
** (moved to the newest end of the LRU list), or NULL; *piNext is the
** offset of the next chunk (UINT64_MAX: none), *pbPart set when a chunk
** holds iOff but not all of the frame. */
static KlChunk *klcLookup(KlFile *pFile, uint64_t iOff, uint64_t iEnd,
                          uint64_t *piNext, int *pbPart){
  int i = klcFind(pFile, iOff);
  *pbPart = 0;
  *piNext = i+1<pFile->nChunk ? pFile->apChunk[i+1]->iOff : UINT64_MAX;
  if( i>=0 ){
    KlChunk *pC = pFile->apChunk[i];
    if( iEnd<=pC->iOff+(uint64_t)pC->n ){
      klcLruUnlink(pC);
      klcLruPush(pC);
      __atomic_add_fetch(&pC->nRef, 1, __ATOMIC_RELAXED);
      return pC;
    }
    *pbPart = iOff<pC->iOff+(uint64_t)pC->n;
  }
  return 0;
}

/* Read [iOff, iOff+n) of pFile into a new chunk (one reference) cut to the
** whole frames from iOff on; NULL when the first frame is not whole in
** it, on a read error and on OOM. */
static KlChunk *klcRead(KlFile *pFile, uint64_t iOff, size_t n){
  size_t nGot = 0, nEnd = 0, nCheck = (n+127)/128;
  KlChunk *pC = sqlite3_malloc64(sizeof(KlChunk) + n + nCheck);
  if( pC==0 ) return 0;
  while( nGot<n ){
    ssize_t r = pFile->pIo->xPread(pFile->pIo->pCtx, pFile->fd, pC->a+nGot,
                                   n-nGot, (off_t)(iOff+nGot));
    if( r<0 && errno==EINTR ) continue;
    if( r<=0 ) break;
    nGot += (size_t)r;
  }
  while( nEnd+KL_FRAME_HDR<=nGot ){
    uint32_t nBody = wal_get_u32(pC->a+nEnd);
    if( nBody<KL_BODY_FIXED+1 || nBody>KL_MAX_BODY ) break;
    if( nEnd+KL_FRAME_HDR+nBody>nGot ) break;
    nEnd += KL_FRAME_HDR+nBody;
  }
  if( nEnd==0 ){
    sqlite3_free(pC);
    return 0;
  }
  pC->nRef = 1;
  pC->bListed = 0;
  pC->pFile = 0;
  pC->pNewer = pC->pOlder = 0;
  pC->iOff = iOff;
  pC->n = (int)nEnd;
  pC->aCheck = pC->a + n;
  memset(pC->aCheck, 0, nCheck);
  return pC;
}

int kl_window_fill(KlFile *pFile, const KlLoc *pLoc, KlWindow *pWin){
  uint64_t iEnd = pLoc->iOff + pLoc->nFrame, iNext, iStop;
  int64_t szPub;
  KlChunk *pC, *pFree = 0;
  int bPart, i;
  size_t nWant;
  kl_window_release(pWin);
  if( pLoc->nFrame>KL_WINDOW_BYTES ) return SQLITE_NOTFOUND;
  pthread_mutex_lock(&klcMu);
  pC = klcLookup(pFile, pLoc->iOff, iEnd, &iNext, &bPart);
  pthread_mutex_unlock(&klcMu);
  if( pC ){
    klcWindowSet(pWin, pFile, pC);
    return SQLITE_OK;
  }
  if( bPart ) return SQLITE_NOTFOUND;
  if( pWin->nNext<KL_WINDOW_FIRST ) pWin->nNext = KL_WINDOW_FIRST;
  nWant = (size_t)pWin->nNext;
  if( pWin->nNext<KL_WINDOW_BYTES ) pWin->nNext *= 2;
  szPub = __atomic_load_n(&pFile->sz, __ATOMIC_ACQUIRE);
  iStop = pLoc->iOff + nWant;
  if( iStop<iEnd ) iStop = iEnd;
  if( iStop>iNext ) iStop = iNext;
  if( szPub>=0 && iStop>(uint64_t)szPub ) iStop = (uint64_t)szPub;
  if( iStop<iEnd ) return SQLITE_NOTFOUND;
  pC = klcRead(pFile, pLoc->iOff, (size_t)(iStop - pLoc->iOff));
  if( pC==0 || pC->iOff+(uint64_t)pC->n<iEnd ){
    klcUnref(pC);
    return SQLITE_NOTFOUND;
  }
  /* Another reader may have cached bytes here meanwhile: this chunk then
  ** serves this window alone. */
  pthread_mutex_lock(&klcMu);
  i = klcFind(pFile, pC->iOff);
  if( (i<0 || pFile->apChunk[i]->iOff+(uint64_t)pFile->apChunk[i]->n
              <=pC->iOff)
   && (i+1>=pFile->nChunk
       || pFile->apChunk[i+1]->iOff>=pC->iOff+(uint64_t)pC->n) ){
    klcList(pFile, i+1, pC, &pFree);
  }
  pthread_mutex_unlock(&klcMu);
  klcFreeList(pFree);
  klcWindowSet(pWin, pFile, pC);
  return SQLITE_OK;
}

void kl_cache_drop_file(KlFile *pFile){
  KlChunk *pFree = 0;
  pthread_mutex_lock(&klcMu);
  while( pFile->nChunk>0 ){
    KlChunk *pC = pFile->apChunk[pFile->nChunk-1];
    klcUnlist(pC);
    pC->pOlder = pFree;
    pFree = pC;
  }
  pthread_mutex_unlock(&klcMu);
  klcFreeList(pFree);
  sqlite3_free(pFile->apChunk);
  pFile->apChunk = 0;
  pFile->nChunkAlloc = 0;
}

int64_t kv_logstore_cache_limit(int64_t nLimit){
  KlChunk *pFree = 0;
  int64_t nOld;
  if( nLimit<0 ) return __atomic_load_n(&klcLimit, __ATOMIC_RELAXED);
  pthread_mutex_lock(&klcMu);
  nOld = klcLimit;
  __atomic_store_n(&klcLimit, nLimit, __ATOMIC_RELAXED);
  while( klcUsed>nLimit && klcOldest ){
    KlChunk *pC = klcOldest;
    klcUnlist(pC);
    pC->pOlder = pFree;
    pFree = pC;
  }
  pthread_mutex_unlock(&klcMu);
  klcFreeList(pFree);
  return nOld;
}

int64_t kv_logstore_cache_used(void){
  int64_t n;
  pthread_mutex_lock(&klcMu);
  n = klcUsed;
  pthread_mutex_unlock(&klcMu);
  return n;
}
