/*
** readahead.c -- the read-ahead thread of one connection (see
** vfs/readahead.h): a queue of spans of stored frames and a ring of
** decoded pages, guarded by one mutex, and a thread that reads the queued
** spans through its own store handle and decodes their frames into the
** ring.
**
** A page's ring slot is its page number modulo the ring's size, which is
** larger than the pages read ahead of a scan, so the pages in flight never
** share a slot.  A slot is EMPTY, PENDING (queued for the thread) or READY
** (decoded).  Only the foreground makes a slot PENDING (depot_ra_submit())
** or takes a PENDING slot back (depot_ra_get()); only the thread writes a
** slot's bytes, into a PENDING slot it marked busy, and makes it READY.
** So the foreground copies a READY slot's bytes without the mutex: until it
** submits again, no slot it could read is written.
*/
#include "config.h"
#include "vfs/readahead.h"
#include "vfs/db.h"
#include "vfs/ltx.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <string.h>
#include <unistd.h>
#include <zstd.h>

typedef struct RaJob RaJob;
struct RaJob {
  RaJob *pNext;
  uint32_t szPage, n, nBuf, nSpan;
  DepotRaSpan *aSpan;         /* nSpan spans, after the frames */
  DepotRaFrame aFrame[];      /* n frames */
};

/* The bytes of the thread's zstd decompression context (libzstd 1.5:
** 95,992 for one-shot frames). */
#define RA_DCTX_BYTES (96*1024)

/* What an open store handle holds beyond its page cache (connection,
** schema, statements), for depot_ra_limit(). */
#define RA_STORE_SLACK (256*1024)

/* Done jobs' buffers kept for the next batches. */
#define RA_KEEP_BUFFERS 2

#define RA_EMPTY   0
#define RA_PENDING 1
#define RA_READY   2

typedef struct RaSlot RaSlot;
struct RaSlot {
  uint64_t iBranch, iOwner;   /* the page's decoded-page cache key ... */
  uint32_t pgno;
  uint32_t eState;            /* RA_EMPTY, RA_PENDING or RA_READY */
};

struct DepotReadahead {
  DepotCache *pCache;         /* not owned */
  char *zStore;               /* the store the thread reads */
  char *zStoreVfs;            /* its store_vfs, or NULL */
  StoreSqliteConfig cfg;      /* how the thread opens it */
  Store *pStore;              /* the thread's handle (the thread's alone) */
  int bNoStore;               /* the handle failed to open (atomic) */
  int64_t nStoreBytes;        /* memory the handle holds (atomic) */
  pthread_mutex_t mutex;      /* guards every field below */
  pthread_cond_t cond;        /* signalled on a new job and on stop */
  pthread_cond_t condSlot;    /* signalled when the busy slot is done */
  RaJob *pHead, *pTail;
  uint32_t nPending;          /* pages in the queue and in the job at hand
                              ** (changed under mutex, read without: atomic) */
  int bStop;
  int bWaiting;               /* the thread waits for a job */
  int bWaitSlot;              /* the foreground waits for the busy slot */
  int bThread;                /* the thread runs */
  pid_t pidOwner;             /* the process that made it */
  pthread_t thread;
  DepotReadahead *pNextAll;   /* next of the process (raAllMutex) */
  /* the ring of decoded pages */
  uint32_t nSlot;             /* slots (a power of two), 0 before the first */
  uint32_t szSlot;            /* bytes of a slot's page */
  int64_t iBusy;              /* the slot the thread decodes into, or -1 */
  RaSlot *aSlot;
  unsigned char *aPage;       /* nSlot*szSlot bytes */
  unsigned char *aBuf;        /* the job at hand's stored frames */
  unsigned char *aFree[RA_KEEP_BUFFERS];  /* done jobs' buffers, for reuse */
};

static int64_t nRaQueued = 0;     /* atomic */
static int64_t nRaDecoded = 0;    /* atomic */
static int64_t nRaHit = 0;        /* atomic */

int64_t depot_ra_queued(void){
  return __atomic_load_n(&nRaQueued, __ATOMIC_RELAXED);
}

int64_t depot_ra_decoded(void){
  return __atomic_load_n(&nRaDecoded, __ATOMIC_RELAXED);
}

int64_t depot_ra_hits(void){
  return __atomic_load_n(&nRaHit, __ATOMIC_RELAXED);
}

#ifdef DEPOT_TEST
int depot_ra_test_patient = 0;
int depot_ra_test_no_store = 0;
#endif

/* 1 when depot_ra_get() is to wait for every queued page (the test
** hook), else 0. */
static int raPatient(void){
#ifdef DEPOT_TEST
  return __atomic_load_n(&depot_ra_test_patient, __ATOMIC_RELAXED)!=0;
#else
  return 0;
#endif
}

/* Keep the buffer of the job at hand for the next batch if there is room,
** else free it (mutex held).  A scan's batches would otherwise each take
** fresh memory (each its page faults). */
static void raBufDone(DepotReadahead *p){
  int i;
  for(i=0; i<RA_KEEP_BUFFERS && p->aBuf; i++){
    if( p->aFree[i]==0 ){
      p->aFree[i] = p->aBuf;
      p->aBuf = 0;
    }
  }
  sqlite3_free(p->aBuf);
  p->aBuf = 0;
}

/* A buffer of at least n bytes for the job at hand, in p->aBuf: a kept
** one, grown if need be (rounded up to 64 KiB, so that later jobs of
** about its size fit), else a new one.  0 on success. */
static int raBufGet(DepotReadahead *p, uint32_t n){
  uint64_t nAlloc = ((uint64_t)n + 0xffff) & ~0xffffULL;
  unsigned char *a = 0;
  int i;
  pthread_mutex_lock(&p->mutex);
  for(i=0; i<RA_KEEP_BUFFERS && a==0; i++){
    a = p->aFree[i];
    p->aFree[i] = 0;
  }
  pthread_mutex_unlock(&p->mutex);
  if( a==0 || sqlite3_msize(a)<(sqlite3_uint64)n ){
    unsigned char *aNew = sqlite3_realloc64(a, nAlloc);
    if( aNew==0 ) sqlite3_free(a);
    a = aNew;
  }
  pthread_mutex_lock(&p->mutex);
  p->aBuf = a;
  pthread_mutex_unlock(&p->mutex);
  return a==0;
}

static int raSlotIs(const RaSlot *s, const DepotRaFrame *f){
  return s->pgno==f->pgno && s->iBranch==f->iBranch && s->iOwner==f->iOwner;
}

/* Whether frame f's slot still waits for it (mutex held). */
static int raWaits(DepotReadahead *p, const RaJob *j, const DepotRaFrame *f){
  const RaSlot *s;
  if( p->bStop || j->szPage!=p->szSlot || p->nSlot==0 ) return 0;
  s = &p->aSlot[f->pgno & (p->nSlot-1)];
  return s->eState==RA_PENDING && raSlotIs(s, f);
}

/* Read the span sp of job j into p->aBuf, unless none of its frames' slots
** waits for it any more.  SQLITE_OK when read, else SQLITE_DONE (nothing
** waits) or an error (a blob compaction and GC removed, an I/O error: the
** foreground reads those pages, and reports what it finds). */
static int raReadSpan(DepotReadahead *p, const RaJob *j,
                      const DepotRaSpan *sp){
  const DepotRaFrame *f0 = &j->aFrame[sp->iFrame];
  uint32_t i;
  int bAny = 0, rc;
  char *zErr = 0;
  pthread_mutex_lock(&p->mutex);
  for(i=0; i<sp->nFrame && !bAny; i++) bAny = raWaits(p, j, &f0[i]);
  pthread_mutex_unlock(&p->mutex);
  if( !bAny ) return SQLITE_DONE;
  if( f0->iOff>j->nBuf || sp->nByte>j->nBuf-f0->iOff ) return SQLITE_CORRUPT;
  rc = depot_db_read_span(p->pStore, &sp->loc, sp->pgno, sp->nByte,
                          p->aBuf+f0->iOff, &zErr);
  sqlite3_free(zErr);
  return rc;
}

/* Decode frame f of job j, read, into its slot if the slot still waits for
** it, and add it to the decoded-page cache as a scan's page.  bRead 0: its
** span could not be read, the slot goes back to EMPTY (as for a frame that
** does not decode): the foreground reads and reports it.  Called without
** the mutex. */
static void raDecodeFrame(DepotReadahead *p, ZSTD_DCtx *pDctx, RaJob *j,
                          const DepotRaFrame *f, int bRead){
  uint32_t iSlot = 0;
  RaSlot *s = 0;
  unsigned char *a = 0;
  int bGo, rc;
  int bFits = f->iOff<=j->nBuf && f->nByte<=j->nBuf-f->iOff;
  pthread_mutex_lock(&p->mutex);
  bGo = raWaits(p, j, f);
  if( bGo ){
    iSlot = f->pgno & (p->nSlot-1);
    s = &p->aSlot[iSlot];
    a = p->aPage + (uint64_t)iSlot*p->szSlot;
    p->iBusy = iSlot;
  }
  pthread_mutex_unlock(&p->mutex);
  if( !bGo ) return;
  rc = !bRead ? SQLITE_IOERR : !bFits ? SQLITE_CORRUPT
     : ltx_decode_frame(p->aBuf+f->iOff, f->nByte, f->pgno, j->szPage,
                        pDctx, a, 0, 0);
  pthread_mutex_lock(&p->mutex);
  p->iBusy = -1;
  if( s->eState==RA_PENDING && raSlotIs(s, f) ){
    s->eState = rc==SQLITE_OK ? RA_READY : RA_EMPTY;
  }
  if( p->bWaitSlot ){
    p->bWaitSlot = 0;
    pthread_cond_broadcast(&p->condSlot);
  }
  pthread_mutex_unlock(&p->mutex);
  if( rc==SQLITE_OK ){
    /* a's bytes stay this page's: only this thread writes slots, and
    ** the ring is replaced only while no job is pending */
    depot_cache_put_scan(p->pCache, f->iBranch, f->pgno, f->iOwner,
                         j->szPage, a);
    __atomic_add_fetch(&nRaDecoded, 1, __ATOMIC_RELAXED);
  }
}

/* Open the thread's store handle, unless it is open (0), or failed to
** open before (nonzero; then nothing is read ahead any more). */
static int raOpenStore(DepotReadahead *p){
  char *zErr = 0;
  int rc;
  if( p->pStore ) return 0;
  if( __atomic_load_n(&p->bNoStore, __ATOMIC_RELAXED) ) return 1;
#ifdef DEPOT_TEST
  if( __atomic_load_n(&depot_ra_test_no_store, __ATOMIC_RELAXED) ){
    rc = SQLITE_CANTOPEN;
  }else
#endif
  rc = store_open(p->zStore, &p->cfg, &p->pStore, &zErr);
  sqlite3_free(zErr);
  if( rc!=SQLITE_OK ){
    p->pStore = 0;
    __atomic_store_n(&p->bNoStore, 1, __ATOMIC_RELAXED);
    return 1;
  }
  return 0;
}

/* Read the spans of j and decode their frames whose slots still wait for
** them, span by span.  Called without the mutex. */
static void raRunJob(DepotReadahead *p, ZSTD_DCtx *pDctx, RaJob *j){
  uint32_t i, k;
  int bOk = pDctx!=0 && raOpenStore(p)==0 && raBufGet(p, j->nBuf)==0;
  /* one read transaction for the job's spans, not one each */
  int bTxn = bOk && store_begin(p->pStore, 0)==SQLITE_OK;
  for(i=0; i<j->nSpan; i++){
    const DepotRaSpan *sp = &j->aSpan[i];
    int rc = bOk ? raReadSpan(p, j, sp) : SQLITE_ERROR;
    if( rc==SQLITE_DONE ) continue;
    for(k=0; k<sp->nFrame; k++){
      raDecodeFrame(p, pDctx, j, &j->aFrame[sp->iFrame+k], rc==SQLITE_OK);
    }
  }
  if( bTxn ) store_rollback(p->pStore);
  if( p->pStore ){
    int64_t nUsed = 0, nLimit = 0;
    store_memory(p->pStore, &nUsed, &nLimit);
    __atomic_store_n(&p->nStoreBytes, nUsed, __ATOMIC_RELAXED);
  }
}

static void *raThreadMain(void *pArg){
  DepotReadahead *p = (DepotReadahead*)pArg;
  ZSTD_DCtx *pDctx = ZSTD_createDCtx();
  pthread_mutex_lock(&p->mutex);
  while( !p->bStop ){
    RaJob *j = p->pHead;
    if( j==0 ){
      p->bWaiting = 1;
      pthread_cond_wait(&p->cond, &p->mutex);
      p->bWaiting = 0;
      continue;
    }
    p->pHead = j->pNext;
    if( p->pHead==0 ) p->pTail = 0;
    pthread_mutex_unlock(&p->mutex);
    raRunJob(p, pDctx, j);
    pthread_mutex_lock(&p->mutex);
    __atomic_sub_fetch(&p->nPending, j->n, __ATOMIC_RELAXED);
    raBufDone(p);
    sqlite3_free(j);
  }
  pthread_mutex_unlock(&p->mutex);
  ZSTD_freeDCtx(pDctx);
  if( p->pStore ){
    store_close(p->pStore);
    p->pStore = 0;
    __atomic_store_n(&p->nStoreBytes, 0, __ATOMIC_RELAXED);
  }
  return 0;
}

/* Every read-ahead of the process, so that fork() can stop their threads
** first (raForkPrepare()): a child then starts from a process with no
** read-ahead thread, and the parent's threads start again with their
** connections' next read-ahead. */
static pthread_mutex_t raAllMutex = PTHREAD_MUTEX_INITIALIZER;
static DepotReadahead *pRaAll = 0;
static int bRaForking = 0;                /* atomic */
static pid_t raPid = 0;                   /* this process (atomic): set
                                          ** by the first depot_ra_new()
                                          ** and in a child by fork() */
static pthread_once_t raForkOnce = PTHREAD_ONCE_INIT;

/* In a forked child the thread, its mutex and its ring are the parent's. */
static int raForeign(DepotReadahead *p){
  return p->pidOwner!=__atomic_load_n(&raPid, __ATOMIC_RELAXED);
}

/* Stop and join the thread of p, if it runs, and drop its queue: the
** slots the queue would have decoded go back to EMPTY. */
static void raStop(DepotReadahead *p){
  RaJob *j;
  uint32_t i;
  pthread_mutex_lock(&p->mutex);
  if( p->bThread ){
    p->bStop = 1;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    pthread_join(p->thread, 0);
    pthread_mutex_lock(&p->mutex);
    p->bThread = 0;
    p->bStop = 0;
  }
  while( (j = p->pHead)!=0 ){
    p->pHead = j->pNext;
    __atomic_sub_fetch(&p->nPending, j->n, __ATOMIC_RELAXED);
    sqlite3_free(j);
  }
  p->pTail = 0;
  for(i=0; i<p->nSlot; i++){
    if( p->aSlot[i].eState==RA_PENDING ) p->aSlot[i].eState = RA_EMPTY;
  }
  pthread_mutex_unlock(&p->mutex);
}

static void raForkPrepare(void){
  DepotReadahead *p;
  pthread_mutex_lock(&raAllMutex);
  __atomic_store_n(&bRaForking, 1, __ATOMIC_SEQ_CST);
  for(p=pRaAll; p; p=p->pNextAll){
    if( !raForeign(p) ) raStop(p);
  }
}
static void raForkRelease(void){
  __atomic_store_n(&bRaForking, 0, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&raAllMutex);
}
static void raForkChild(void){
  __atomic_store_n(&raPid, getpid(), __ATOMIC_RELAXED);
  raForkRelease();
}
static void raForkRegister(void){
  __atomic_store_n(&raPid, getpid(), __ATOMIC_RELAXED);
  pthread_atfork(raForkPrepare, raForkRelease, raForkChild);
}

DepotReadahead *depot_ra_new(DepotCache *pCache, const char *zStore,
                             const StoreSqliteConfig *pCfg){
  DepotReadahead *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  p->pCache = pCache;
  p->zStore = sqlite3_mprintf("%s", zStore);
  p->zStoreVfs = pCfg->zVfs ? sqlite3_mprintf("%s", pCfg->zVfs) : 0;
  if( p->zStore==0 || (pCfg->zVfs && p->zStoreVfs==0) ){
    sqlite3_free(p->zStore);
    sqlite3_free(p->zStoreVfs);
    sqlite3_free(p);
    return 0;
  }
  /* the thread only reads: no creating, no set-up writes, no long waits */
  p->cfg = *pCfg;
  p->cfg.zVfs = p->zStoreVfs;
  p->cfg.bCreate = 0;
  p->cfg.bReadOnly = 1;
  p->cfg.nBusyMs = 100;
  p->cfg.nCacheKb = DEPOT_RA_STORE_CACHE_KB;
  p->iBusy = -1;
  depot_mutex_init_adaptive(&p->mutex);
  pthread_cond_init(&p->cond, 0);
  pthread_cond_init(&p->condSlot, 0);
  pthread_once(&raForkOnce, raForkRegister);
  p->pidOwner = __atomic_load_n(&raPid, __ATOMIC_RELAXED);
  pthread_mutex_lock(&raAllMutex);
  p->pNextAll = pRaAll;
  pRaAll = p;
  pthread_mutex_unlock(&raAllMutex);
  return p;
}

void depot_ra_free(DepotReadahead *p){
  DepotReadahead **pp;
  int i;
  if( p==0 ) return;
  if( raForeign(p) ) return;
  pthread_mutex_lock(&raAllMutex);
  for(pp=&pRaAll; *pp && *pp!=p; pp=&(*pp)->pNextAll){}
  if( *pp ) *pp = p->pNextAll;
  pthread_mutex_unlock(&raAllMutex);
  raStop(p);
  for(i=0; i<RA_KEEP_BUFFERS; i++) sqlite3_free(p->aFree[i]);
  sqlite3_free(p->aBuf);
  sqlite3_free(p->zStore);
  sqlite3_free(p->zStoreVfs);
  sqlite3_free(p->aSlot);
  sqlite3_free(p->aPage);
  pthread_cond_destroy(&p->condSlot);
  pthread_cond_destroy(&p->cond);
  pthread_mutex_destroy(&p->mutex);
  sqlite3_free(p);
}

int64_t depot_ra_bytes(DepotReadahead *p){
  int64_t n = 0;
  int i;
  if( p==0 || raForeign(p) ) return 0;
  pthread_mutex_lock(&p->mutex);
  if( p->bThread ) n += RA_DCTX_BYTES;
  n += (int64_t)p->nSlot*(int64_t)(p->szSlot + sizeof(RaSlot));
  for(i=0; i<RA_KEEP_BUFFERS; i++) n += sqlite3_msize(p->aFree[i]);
  n += sqlite3_msize(p->aBuf);
  pthread_mutex_unlock(&p->mutex);
  return n + __atomic_load_n(&p->nStoreBytes, __ATOMIC_RELAXED);
}

int depot_ra_usable(DepotReadahead *p){
  return !raForeign(p) && !__atomic_load_n(&p->bNoStore, __ATOMIC_RELAXED);
}

uint32_t depot_ra_pending(DepotReadahead *p){
  if( raForeign(p) ) return 0;
  return __atomic_load_n(&p->nPending, __ATOMIC_RELAXED);
}

/* The ring's slots for a window of nWindow pages. */
static uint32_t raSlots(uint32_t nWindow){
  uint32_t nSlot = 2;
  while( nSlot<=nWindow && nSlot<(1u<<20) ) nSlot *= 2;
  return nSlot;
}

int64_t depot_ra_limit(uint32_t nWindow, uint32_t szPage){
  int64_t nBuf;
  if( nWindow==0 ) return 0;
  /* a job covers at most nWindow pages; its buffer is rounded up to 64 KiB
  ** (raBufGet()) */
  nBuf = ((int64_t)nWindow*(szPage+LTX_FRAME_HEADER) + 0xffff) & ~0xffffLL;
  return (int64_t)raSlots(nWindow)*(int64_t)(szPage + sizeof(RaSlot))
       + (1+RA_KEEP_BUFFERS)*nBuf + RA_DCTX_BYTES
       + DEPOT_RA_STORE_CACHE_KB*1024LL + RA_STORE_SLACK;
}

/* Give the ring nSlot slots of szPage bytes, unless it has them.  Only
** when no job is queued or at hand (mutex held).
** 0 when the ring is ready, else nonzero. */
static int raRing(DepotReadahead *p, uint32_t nSlot, uint32_t szPage){
  RaSlot *aSlot;
  unsigned char *aPage;
  if( p->nSlot>=nSlot && p->szSlot==szPage ) return 0;
  if( p->nPending>0 ) return 1;
  aSlot = sqlite3_malloc64((uint64_t)nSlot*sizeof(RaSlot));
  aPage = sqlite3_malloc64((uint64_t)nSlot*szPage);
  if( aSlot==0 || aPage==0 ){
    sqlite3_free(aSlot);
    sqlite3_free(aPage);
    return 1;
  }
  memset(aSlot, 0, (uint64_t)nSlot*sizeof(RaSlot));
  sqlite3_free(p->aSlot);
  sqlite3_free(p->aPage);
  p->aSlot = aSlot;
  p->aPage = aPage;
  p->nSlot = nSlot;
  p->szSlot = szPage;
  return 0;
}

int depot_ra_submit(DepotReadahead *p, uint32_t szPage, uint32_t n,
                    const DepotRaFrame *aFrame, uint32_t nSpan,
                    const DepotRaSpan *aSpan, uint32_t nBuf,
                    uint32_t nWindow){
  RaJob *j;
  uint32_t nSlot = raSlots(nWindow), i;
  int rc = 1;
  if( n==0 || nSpan==0 || !depot_ra_usable(p) ) return 1;
  j = sqlite3_malloc64(sizeof(*j) + (uint64_t)n*sizeof(DepotRaFrame)
                       + (uint64_t)nSpan*sizeof(DepotRaSpan));
  if( j==0 ) return 1;
  memset(j, 0, sizeof(*j));
  memcpy(j->aFrame, aFrame, n*sizeof(DepotRaFrame));
  j->aSpan = (DepotRaSpan*)&j->aFrame[n];
  memcpy(j->aSpan, aSpan, nSpan*sizeof(DepotRaSpan));
  j->szPage = szPage;
  j->n = n;
  j->nSpan = nSpan;
  j->nBuf = nBuf;
  pthread_mutex_lock(&p->mutex);
  if( !p->bThread && !__atomic_load_n(&bRaForking, __ATOMIC_SEQ_CST) ){
    /* (a fork()'s prepare handler sets bRaForking before it takes this
    ** mutex: it joins any thread started here) */
    if( pthread_create(&p->thread, 0, raThreadMain, p)==0 ) p->bThread = 1;
  }
  if( p->bThread && p->nPending < 2*nWindow
   && raRing(p, nSlot, szPage)==0 ){
    for(i=0; i<n; i++){
      RaSlot *s = &p->aSlot[aFrame[i].pgno & (p->nSlot-1)];
      if( (int64_t)(aFrame[i].pgno & (p->nSlot-1))==p->iBusy ) continue;
      s->iBranch = aFrame[i].iBranch;
      s->iOwner = aFrame[i].iOwner;
      s->pgno = aFrame[i].pgno;
      s->eState = RA_PENDING;
    }
    if( p->pTail ) p->pTail->pNext = j; else p->pHead = j;
    p->pTail = j;
    __atomic_add_fetch(&p->nPending, n, __ATOMIC_RELAXED);
    __atomic_add_fetch(&nRaQueued, n, __ATOMIC_RELAXED);
    if( p->bWaiting ) pthread_cond_signal(&p->cond);   /* else it is busy */
    j = 0;
    rc = 0;
  }
  pthread_mutex_unlock(&p->mutex);
  sqlite3_free(j);
  return rc;
}

int depot_ra_has(DepotReadahead *p, uint64_t iBranch, uint32_t pgno,
                 uint64_t iOwner, uint32_t szPage){
  const RaSlot *s;
  int bHas;
  if( p->nSlot==0 || raForeign(p) ) return 0;
  pthread_mutex_lock(&p->mutex);
  s = &p->aSlot[pgno & (p->nSlot-1)];
  bHas = p->szSlot==szPage && s->eState!=RA_EMPTY && s->pgno==pgno
      && s->iBranch==iBranch && s->iOwner==iOwner;
  pthread_mutex_unlock(&p->mutex);
  return bHas;
}

int depot_ra_get(DepotReadahead *p, uint64_t iBranch, uint32_t pgno,
                 uint64_t iOwner, uint32_t szPage, unsigned char *pOut){
  RaSlot *s;
  uint32_t iSlot;
  int bHit = 0;
  if( p->nSlot==0 || raForeign(p) ) return 0;
  pthread_mutex_lock(&p->mutex);
  iSlot = pgno & (p->nSlot-1);
  s = &p->aSlot[iSlot];
  if( p->szSlot==szPage && s->eState!=RA_EMPTY && s->pgno==pgno
   && s->iBranch==iBranch && s->iOwner==iOwner ){
    /* the thread decodes it now: wait, it costs less than a decode */
    while( s->eState==RA_PENDING
        && (p->iBusy==(int64_t)iSlot || raPatient()) ){
      p->bWaitSlot = 1;
      pthread_cond_wait(&p->condSlot, &p->mutex);
    }
    if( s->eState==RA_READY ){
      bHit = 1;
    }else{
      s->eState = RA_EMPTY;    /* not reached yet: the caller decodes it */
    }
  }
  pthread_mutex_unlock(&p->mutex);
  if( bHit ){
    memcpy(pOut, p->aPage + (uint64_t)iSlot*szPage, szPage);
    __atomic_add_fetch(&nRaHit, 1, __ATOMIC_RELAXED);
  }
  return bHit;
}
