/*
** readahead.c -- the read-ahead decoder thread of one connection (see
** vfs/readahead.h): a queue of spans of stored frames, guarded by one
** mutex, and a thread that decodes them into the decoded-page cache.
*/
#include "config.h"
#include "vfs/readahead.h"
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
  uint32_t szPage, n, nBuf;
  unsigned char *aBuf;
  DepotRaFrame aFrame[];      /* n frames */
};

struct DepotReadahead {
  DepotCache *pCache;         /* not owned */
  pthread_mutex_t mutex;      /* guards every field below */
  pthread_cond_t cond;        /* signalled on a new job and on stop */
  RaJob *pHead, *pTail;
  uint32_t nPending;          /* pages in the queue and in the job at hand
                              ** (changed under mutex, read without: atomic) */
  int bStop;
  int bWaiting;               /* the thread waits for a job */
  int bThread;                /* the thread was started (by pid) */
  pid_t pid;
  pthread_t thread;
};

static int64_t nRaQueued = 0;     /* atomic */
static int64_t nRaDecoded = 0;    /* atomic */

int64_t depot_ra_queued(void){
  return __atomic_load_n(&nRaQueued, __ATOMIC_RELAXED);
}

int64_t depot_ra_decoded(void){
  return __atomic_load_n(&nRaDecoded, __ATOMIC_RELAXED);
}

static void raJobFree(RaJob *j){
  sqlite3_free(j->aBuf);
  sqlite3_free(j);
}

/* Decode the frames of j that the cache does not hold yet.  A frame that
** does not decode is skipped: the foreground reads and reports it. */
static void raDecodeJob(DepotCache *pCache, ZSTD_DCtx *pDctx, RaJob *j,
                        unsigned char *aPage){
  uint32_t i;
  for(i=0; i<j->n; i++){
    const DepotRaFrame *f = &j->aFrame[i];
    if( f->iOff>j->nBuf || f->nByte>j->nBuf-f->iOff ) continue;
    if( !depot_cache_has(pCache, f->iBranch, f->pgno, f->iOwner, j->szPage)
     && ltx_decode_frame(j->aBuf+f->iOff, f->nByte, f->pgno, j->szPage,
                         pDctx, aPage, 0, 0)==SQLITE_OK ){
      depot_cache_put(pCache, f->iBranch, f->pgno, f->iOwner, j->szPage,
                      aPage);
      __atomic_add_fetch(&nRaDecoded, 1, __ATOMIC_RELAXED);
    }
  }
}

static void *raThreadMain(void *pArg){
  DepotReadahead *p = (DepotReadahead*)pArg;
  ZSTD_DCtx *pDctx = ZSTD_createDCtx();
  unsigned char *aPage = sqlite3_malloc64(65536);
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
    if( pDctx && aPage ) raDecodeJob(p->pCache, pDctx, j, aPage);
    pthread_mutex_lock(&p->mutex);
    __atomic_sub_fetch(&p->nPending, j->n, __ATOMIC_RELAXED);
    raJobFree(j);
  }
  pthread_mutex_unlock(&p->mutex);
  sqlite3_free(aPage);
  ZSTD_freeDCtx(pDctx);
  return 0;
}

DepotReadahead *depot_ra_new(DepotCache *pCache){
  DepotReadahead *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  p->pCache = pCache;
  pthread_mutex_init(&p->mutex, 0);
  pthread_cond_init(&p->cond, 0);
  return p;
}

void depot_ra_free(DepotReadahead *p){
  RaJob *j;
  if( p==0 ) return;
  if( p->bThread && p->pid!=getpid() ){
    return;     /* a forked child: the thread and its mutex are the parent's */
  }
  if( p->bThread ){
    pthread_mutex_lock(&p->mutex);
    p->bStop = 1;
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->mutex);
    pthread_join(p->thread, 0);
  }
  while( (j = p->pHead)!=0 ){
    p->pHead = j->pNext;
    raJobFree(j);
  }
  pthread_cond_destroy(&p->cond);
  pthread_mutex_destroy(&p->mutex);
  sqlite3_free(p);
}

uint32_t depot_ra_pending(DepotReadahead *p){
  if( p->bThread && p->pid!=getpid() ) return 0;
  return __atomic_load_n(&p->nPending, __ATOMIC_RELAXED);
}

int depot_ra_submit(DepotReadahead *p, uint32_t szPage, uint32_t n,
                    const DepotRaFrame *aFrame, unsigned char *aBuf,
                    uint32_t nBuf, uint32_t nMaxPending){
  RaJob *j;
  int rc = 1;
  if( n==0 || (p->bThread && p->pid!=getpid()) ){
    sqlite3_free(aBuf);
    return 1;
  }
  j = sqlite3_malloc64(sizeof(*j) + (uint64_t)n*sizeof(DepotRaFrame));
  if( j==0 ){
    sqlite3_free(aBuf);
    return 1;
  }
  memset(j, 0, sizeof(*j));
  memcpy(j->aFrame, aFrame, n*sizeof(DepotRaFrame));
  j->szPage = szPage;
  j->n = n;
  j->aBuf = aBuf;
  j->nBuf = nBuf;
  pthread_mutex_lock(&p->mutex);
  if( !p->bThread ){
    if( pthread_create(&p->thread, 0, raThreadMain, p)==0 ){
      p->bThread = 1;
      p->pid = getpid();
    }
  }
  if( p->bThread && p->nPending < nMaxPending ){
    if( p->pTail ) p->pTail->pNext = j; else p->pHead = j;
    p->pTail = j;
    __atomic_add_fetch(&p->nPending, n, __ATOMIC_RELAXED);
    __atomic_add_fetch(&nRaQueued, n, __ATOMIC_RELAXED);
    if( p->bWaiting ) pthread_cond_signal(&p->cond);   /* else it is busy */
    j = 0;
    rc = 0;
  }
  pthread_mutex_unlock(&p->mutex);
  if( j ) raJobFree(j);
  return rc;
}
