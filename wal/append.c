/*
** append.c -- wal_append(): group commit, rotation, and the repair of a
** failed append.
**
** Group commit.  An appender takes the mutex, gets the next CID, encodes
** its frame into the open group and, if no one leads, becomes the leader:
** it takes the whole open group (its own record and every record added
** since), releases the mutex, writes the group with one pwrite and one
** fdatasync, then retakes the mutex and records the outcome.  While a
** leader flushes, new appends pile up in the next open group, so N
** concurrent appenders cost about one flush per group.  Groups are written
** strictly one after another, so file order is CID order.
**
** Wake-ups.  An appender that does not lead waits on a WalWaiter of its
** own, not on a shared condition: the leader posts exactly the appenders
** of the group it finished, after releasing the mutex, and they return
** without taking the mutex again.  If the next open group already holds
** records, the leader hands leadership to the first of them
** (WalWaiter.bLead) instead of letting the appenders race for it.
**
** Spinning.  On a fast log (the last flush took at most WAL_SPIN_MAX_US)
** a waiting appender first spins, yielding the CPU (sched_yield) between
** looks at its WalWaiter, for at most twice the last flush time, and only
** then sleeps on its semaphore; a post finds it spinning and costs a
** store instead of a futex wake.  The gathering leader spins the same way
** until its group fills or its wait ends.  A sleeping thread's wake-up
** (a system call for the waker, a context switch and, where a CPU went
** idle, an inter-processor interrupt) costs a fair part of a fast flush,
** and the N of a group would pay it one after another on the path to the
** next flush.  The yields hand the CPU to any thread that has work, so
** spinning mostly takes CPU time that would idle; the bound keeps a slow
** or stalled device from turning waits into busy loops.  On a slow
** log (a flush over WAL_SPIN_MAX_US) nothing spins: waiters sleep at
** once, and the gathering leader sleeps on condGather, signalled when the
** group reaches its target.
**
** Preallocation.  Before a group is written past the end of the active
** segment's file, the file is extended with zeros up to the next multiple
** of a chunk (WAL_PREALLOC_CHUNK, at most the segment size) and flushed
** once.  A group then overwrites blocks the file already has, so its
** fdatasync flushes data only, not a size change (which roughly doubles
** its cost).  The zeros after the frames read as the end of the log at
** open (segment.c).  Rotation goes by the end of the frames (szActive),
** not the file size, and the padding is trimmed off a segment when it is
** sealed.  When the disk has no room for a whole chunk (ENOSPC), the file
** is extended only as far as the group needs, so a nearly full disk still
** takes small groups.  A failed extension fails the group like a failed write (the
** store stays as it was); after a failed flush of an extension the next
** group starts a fresh segment.
**
** Failure.  If the write or the flush of a group fails, every appender of
** the group gets the error, and the leader cuts the active segment back to
** where the group began and flushes that (the repair), so the group is
** never replayed.  After a failed flush the kernel may have dropped dirty
** pages and cleared the error, so the segment is not trusted for more
** appends: the next group starts a fresh segment.  If the repair itself
** fails, the log enters the failed state (zFailed): every later append
** fails at once with SQLITE_IOERR until the log is reopened.
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <errno.h>
#include <sched.h>
#include <semaphore.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

void wal_set_err(char **pzErr, const char *zFmt, ...){
  va_list ap;
  if( pzErr==0 ) return;
  va_start(ap, zFmt);
  *pzErr = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
}

void wal_group_reset(WalGroup *g){
  g->n = 0;
  g->pFirst = g->pLast = 0;
  __atomic_store_n(&g->nRec, 0, __ATOMIC_RELAXED);
  g->cidFirst = g->cidLast = 0;
  g->nSyncOnly = 0;
  g->bSync = 0;
}

/* Enters the failed state with the printf-formatted reason (kept if one
** is already set).  Mutex not held. */
static void appendFailState(Wal *p, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  pthread_mutex_lock(&p->mutex);
  if( p->zFailed==0 ){
    p->zFailed = z ? z : sqlite3_mprintf("wal: failed state");
    z = 0;
  }
  pthread_mutex_unlock(&p->mutex);
  sqlite3_free(z);
}

static int appendGroupReserve(WalGroup *g, size_t nMore){
  size_t nNew;
  uint8_t *aNew;
  if( g->n + nMore <= g->nAlloc ) return SQLITE_OK;
  nNew = g->nAlloc ? g->nAlloc*2 : 4096;
  while( nNew < g->n + nMore ) nNew *= 2;
  aNew = sqlite3_realloc64(g->a, nNew);
  if( aNew==0 ) return SQLITE_NOMEM;
  g->a = aNew;
  g->nAlloc = nNew;
  return SQLITE_OK;
}

/* Starts segment segActive+1 with base CID baseCid and makes it the active
** segment; its header records the last live segment and its size (the
** active one, sealed at szActive, whose padding is trimmed).  Called by
** the leader without the mutex. */
int wal_rotate(Wal *p, uint64_t baseCid, char **pzErr){
  WalSegHdr hdr;
  uint64_t segno = p->segActive + 1;
  int fd, fdOld, rc, bTrim;
  uint64_t szOld;
  char *zPath, *zOld;
  memset(&hdr, 0, sizeof(hdr));
  hdr.segno = segno;
  hdr.baseCid = baseCid;
  if( p->fdActive>=0 && p->szSynced<p->szActive ){
    /* Deferred flushes: a segment is sealed flushed, so that flushing the
    ** active segment is enough to make every earlier record durable. */
    if( p->pIo->xFsync(p->pIo->pCtx, p->fdActive)!=0 ){
      const char *zWhy = strerror(errno);
      wal_set_err(pzErr, "wal: fdatasync of %s failed: %s", p->zActive,
                  zWhy);
      appendFailState(p, "wal: log %s accepts no appends since a flush of "
          "records written without one failed (fdatasync: %s); reopen the "
          "store", p->zActive, zWhy);
      return SQLITE_IOERR_FSYNC;
    }
    p->szSynced = p->szActive;
    pthread_mutex_lock(&p->mutex);
    p->cidSynced = p->cidWritten;      /* every finished group */
    pthread_mutex_unlock(&p->mutex);
  }
  pthread_mutex_lock(&p->mutex);
  rc = wal_seg_reserve(p);
  if( p->nSeg>0 ){
    hdr.prevSegno = p->aSeg[p->nSeg-1].segno;
    hdr.prevEnd = p->szActive;
  }
  pthread_mutex_unlock(&p->mutex);
  if( rc!=SQLITE_OK ) return rc;
  zPath = wal_segment_path(p->zWalDir, segno);
  if( zPath==0 ) return SQLITE_NOMEM;
  rc = wal_segment_create(p->pIo, p->zWalDir, &hdr, &fd, pzErr);
  if( rc!=SQLITE_OK ){
    sqlite3_free(zPath);
    return rc;
  }
  pthread_mutex_lock(&p->mutex);
  if( p->nSeg>0 ) p->aSeg[p->nSeg-1].szEnd = p->szActive;
  p->aSeg[p->nSeg].segno = segno;
  p->aSeg[p->nSeg].baseCid = baseCid;
  p->aSeg[p->nSeg].szEnd = WAL_SEG_HDR;
  p->aSeg[p->nSeg].nUnconf = 0;
  p->nSeg++;
  fdOld = p->fdActive;
  zOld = p->zActive;
  bTrim = fdOld>=0 && p->szAlloc>p->szActive;
  szOld = p->szActive;
  p->fdActive = fd;
  p->zActive = zPath;
  p->segActive = segno;
  p->szActive = WAL_SEG_HDR;
  p->szSynced = WAL_SEG_HDR;
  p->usUnsynced = 0;
  p->szAlloc = WAL_SEG_HDR;
  p->nActiveRec = 0;
  p->bNeedRotate = 0;
  pthread_mutex_unlock(&p->mutex);
  if( bTrim ) wal_segment_trim(p->pIo, fdOld, zOld, szOld);
  if( fdOld>=0 ) p->pIo->xClose(p->pIo->pCtx, fdOld);
  sqlite3_free(zOld);
  return SQLITE_OK;
}

/* Space added to a segment file at a time, ahead of the appends. */
#define WAL_PREALLOC_CHUNK ((uint64_t)4*1024*1024)
#define WAL_PREALLOC_MIN   ((uint64_t)4096)

/* The source of the zeros written ahead of the appends: 1 MiB of .bss,
** never written (not const, which would put a megabyte of zeros into the
** module file).  Reading it maps the kernel's shared zero page, so it
** costs no memory, and it stays mapped: only the first extension of a
** process pays a page fault per 4 KiB page.  A static buffer rather than
** a fresh anonymous mapping per extension, which pays those faults at
** every extension and makes each preallocated chunk many times slower to
** write (docs/PERFORMANCE.md has the figures). */
static uint8_t appendZeroBuf[1024*1024];

/* Writes zeros over bytes [iFrom, iTo) of the active segment, in pieces
** of at most sizeof(appendZeroBuf).  Returns 0, or -1 with errno set.  A
** short write is retried once for the rest, to learn why: a disk that
** filled up or a file that reached the process's size limit reports
** ENOSPC / EFBIG only then (another short write: EIO). */
static int appendZeros(Wal *p, uint64_t iFrom, uint64_t iTo){
  const WalIo *pIo = p->pIo;
  while( iFrom<iTo ){
    size_t n = (size_t)(iTo-iFrom < sizeof(appendZeroBuf)
                        ? iTo-iFrom : sizeof(appendZeroBuf));
    ssize_t got = pIo->xPwrite(pIo->pCtx, p->fdActive, appendZeroBuf, n,
                               (off_t)iFrom);
    if( got>=0 && got<(ssize_t)n ){
      ssize_t more = pIo->xPwrite(pIo->pCtx, p->fdActive,
                                  appendZeroBuf + got, n-(size_t)got,
                                  (off_t)(iFrom+(uint64_t)got));
      got = more<0 ? -1 : got+more;
      if( more>=0 ) errno = EIO;         /* short again */
    }
    if( got!=(ssize_t)n ) return -1;
    iFrom += n;
  }
  return 0;
}

/* 1 if errno value e means that the file cannot grow that far. */
static int appendNoRoom(int e){
#ifdef EDQUOT
  if( e==EDQUOT ) return 1;
#endif
  return e==ENOSPC || e==EFBIG;
}

/* Extends the active segment with zeros to *piNew (>= iNeed).  If the
** disk has no room for that (ENOSPC; or EFBIG: past the process's file
** size limit; or EDQUOT: past the quota) but may have room for the group,
** cuts the partial extension off and extends only to iNeed rounded up to
** WAL_PREALLOC_MIN, setting *piNew to that: a nearly full disk still takes
** small appends.  Returns 0, or -1 with errno set. */
static int appendExtend(Wal *p, uint64_t iNeed, uint64_t *piNew){
  uint64_t iLess = (iNeed + WAL_PREALLOC_MIN - 1)
                   / WAL_PREALLOC_MIN * WAL_PREALLOC_MIN;
  if( appendZeros(p, p->szAlloc, *piNew)==0 ) return 0;
  if( !appendNoRoom(errno) || iLess>=*piNew ) return -1;
  p->pIo->xFtruncate(p->pIo->pCtx, p->fdActive, (off_t)p->szAlloc);
  *piNew = iLess;
  return appendZeros(p, p->szAlloc, iLess);
}

/* Makes the active segment's file at least iNeed bytes long, extending it
** with flushed zeros to the next multiple of the chunk size (or, when the
** disk has no room for that, just past iNeed: appendExtend).  On failure
** the extension is cut off again (best effort: zeros are padding anyway)
** and the group fails.  Leader only, mutex not held. */
static int appendPrealloc(Wal *p, uint64_t iNeed, char **pzErr){
  const WalIo *pIo = p->pIo;
  uint64_t nChunk = (uint64_t)__atomic_load_n(&p->szSegment,
                                              __ATOMIC_RELAXED);
  uint64_t iNew;
  int rc = SQLITE_OK, err;
  const char *zOp = "write";
  if( iNeed<=p->szAlloc ) return SQLITE_OK;
  if( nChunk>WAL_PREALLOC_CHUNK ) nChunk = WAL_PREALLOC_CHUNK;
  if( nChunk<WAL_PREALLOC_MIN ) nChunk = WAL_PREALLOC_MIN;
  iNew = (iNeed + nChunk - 1) / nChunk * nChunk;
  if( appendExtend(p, iNeed, &iNew)!=0 ){
    err = errno;
    rc = err==ENOMEM ? SQLITE_NOMEM : wal_errno_rc(err, SQLITE_IOERR_WRITE);
  }else if( pIo->xFsync(pIo->pCtx, p->fdActive)!=0 ){
    err = errno;
    zOp = "fdatasync";
    rc = SQLITE_IOERR_FSYNC;
    p->bNeedRotate = 1;                  /* as after a failed flush */
  }
  if( rc==SQLITE_OK ){
    p->szAlloc = iNew;
    return SQLITE_OK;
  }
  *pzErr = sqlite3_mprintf("wal: preallocation of %s to %llu bytes failed "
      "(%s: %s)", p->zActive, (unsigned long long)iNew, zOp, strerror(err));
  pIo->xFtruncate(pIo->pCtx, p->fdActive, (off_t)p->szAlloc);
  return rc;
}

static int64_t appendNowUs(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec*1000000 + ts.tv_nsec/1000;
}

/* How long a waiter may spin before it sleeps (see "Spinning" above): 0
** on a slow log, or before any flush has been timed.  Mutex held. */
#define WAL_SPIN_MAX_US 500
static int64_t appendSpinUs(Wal *p){
  if( p->usLastFlush<=0 || p->usLastFlush>WAL_SPIN_MAX_US ) return 0;
  return p->usLastFlush*2;
}

/* Cuts the active segment back to iOff and flushes the cut.  On failure
** enters the failed state and appends the reason to *pzErr. */
static void appendRepair(Wal *p, uint64_t iOff, char **pzErr){
  const WalIo *pIo = p->pIo;
  const char *zOp = "ftruncate";
  int ok = pIo->xFtruncate(pIo->pCtx, p->fdActive, (off_t)iOff)==0;
  if( ok ){
    p->szAlloc = iOff;                 /* the padding went with the cut */
    zOp = "fdatasync";
    ok = pIo->xFsync(pIo->pCtx, p->fdActive)==0;
    if( ok ){
      p->szSynced = iOff;              /* everything before the cut */
      p->usUnsynced = 0;
    }
  }
  if( !ok ){
    const char *zWhy = strerror(errno);
    char *zFailed = sqlite3_mprintf("wal: log %s accepts no appends since "
        "a failed append could not be cut off (%s: %s); reopen the store",
        p->zActive, zOp, zWhy);
    char *zNew = sqlite3_mprintf("%s; the record could not be cut off "
        "(%s: %s), the log accepts no appends until reopened",
        *pzErr ? *pzErr : "wal: append failed", zOp, zWhy);
    pthread_mutex_lock(&p->mutex);
    p->zFailed = zFailed ? zFailed : sqlite3_mprintf("wal: failed state");
    pthread_mutex_unlock(&p->mutex);
    if( zNew ){ sqlite3_free(*pzErr); *pzErr = zNew; }
  }
}

/* Must group g (about to be written) be flushed?  Yes when a member asks
** for it, and when deferred flushes reach a bound: the oldest unflushed
** group is older than WAL_SYNC_MAX_MS, or the unflushed bytes would pass
** WAL_SYNC_MAX_BYTES.  Leader only. */
static int appendNeedFlush(Wal *p, WalGroup *g){
  if( g->bSync ) return 1;
  if( p->szActive + g->n - p->szSynced > (uint64_t)WAL_SYNC_MAX_BYTES ){
    return 1;
  }
  return p->usUnsynced>0
      && appendNowUs() - p->usUnsynced > (int64_t)WAL_SYNC_MAX_MS*1000;
}

/* Writes group g at the end of the active segment and flushes it unless
** every member deferred the flush (appendNeedFlush).  A group of wal_sync()
** requests only (no frames) writes nothing and flushes what earlier groups
** left unflushed.  *pnFlush counts the flushes attempted, *pusFlush gets
** the time the flush took, *pbSynced is set when everything written up to
** the outcome (the group itself only on success) is flushed.  A failed
** flush while records written earlier were unflushed enters the failed
** state: they may never reach the disk.  Leader only, mutex not held. */
static int appendWrite(Wal *p, WalGroup *g, int *pnFlush, int64_t *pusFlush,
                       int *pbSynced, char **pzErr){
  const WalIo *pIo = p->pIo;
  uint64_t iOff;
  ssize_t got;
  int rc, bEarlier;
  uint64_t szSegment = (uint64_t)__atomic_load_n(&p->szSegment,
                                                 __ATOMIC_RELAXED);
  if( g->n>0
   && (p->bNeedRotate || (p->szActive>=szSegment && p->nActiveRec>0)) ){
    rc = wal_rotate(p, g->cidFirst, pzErr);
    if( rc!=SQLITE_OK ) return rc;
  }
  iOff = p->szActive;
  bEarlier = p->szSynced<iOff;
  if( g->n>0 ){
    rc = appendPrealloc(p, iOff + g->n, pzErr);
    if( rc!=SQLITE_OK ) return rc;
    got = pIo->xPwrite(pIo->pCtx, p->fdActive, g->a, g->n, (off_t)iOff);
    if( got!=(ssize_t)g->n ){
      int err = errno;
      if( got<0 ){
        *pzErr = sqlite3_mprintf("wal: write of %s failed: %s", p->zActive,
                                 strerror(err));
        rc = wal_errno_rc(err, SQLITE_IOERR_WRITE);
      }else{
        *pzErr = sqlite3_mprintf("wal: short write to %s: %lld of %lld "
            "bytes", p->zActive, (long long)got, (long long)g->n);
        rc = SQLITE_IOERR_WRITE;
      }
      appendRepair(p, iOff, pzErr);
      *pbSynced = p->szSynced==iOff;
      return rc;
    }
  }
  if( !appendNeedFlush(p, g) || (g->n==0 && !bEarlier) ){
    if( g->n>0 && p->usUnsynced==0 ) p->usUnsynced = appendNowUs();
    *pbSynced = !bEarlier && g->n==0;
    return SQLITE_OK;
  }
  (*pnFlush)++;
  *pusFlush = appendNowUs();
  rc = pIo->xFsync(pIo->pCtx, p->fdActive);
  *pusFlush = appendNowUs() - *pusFlush;
  if( rc!=0 ){
    const char *zWhy = strerror(errno);
    *pzErr = sqlite3_mprintf("wal: fdatasync of %s failed: %s", p->zActive,
                             zWhy);
    if( g->n>0 ) appendRepair(p, iOff, pzErr);   /* cut the group off */
    if( bEarlier ){
      appendFailState(p, "wal: log %s accepts no appends since a flush of "
          "records written without one failed (fdatasync: %s); reopen the "
          "store", p->zActive, zWhy);
    }
    p->bNeedRotate = 1;
    *pbSynced = 0;
    return SQLITE_IOERR_FSYNC;
  }
  p->szSynced = iOff + g->n;
  p->usUnsynced = 0;
  *pbSynced = 1;
  return SQLITE_OK;
}

/* Records the outcome of group g for its appenders and returns them as a
** list (WalWaiter.pNextPost) to post once the mutex is released.  Mutex
** held. */
static WalWaiter *appendFinish(Wal *p, WalGroup *g, int rc, int bSynced,
                               const char *zErr){
  WalPend *pPend, *pNext;
  WalWaiter *pPost = 0;
  for(pPend=g->pFirst; pPend; pPend=pNext){
    WalWaiter *w = pPend->pWaiter;
    pNext = pPend->pNext;
    pPend->pWaiter = 0;
    pPend->pNext = 0;
    w->rc = rc;
    w->zErr = rc==SQLITE_OK ? 0 : sqlite3_mprintf("%s", zErr ? zErr : "");
    w->bDone = 1;
    w->pNextPost = pPost;
    pPost = w;
    if( pPend->bSyncOnly ){
      sqlite3_free(pPend);
      continue;
    }
    if( rc==SQLITE_OK ){
      p->nAppend++;
      if( pPend->cid>p->lastCid ) p->lastCid = pPend->cid;
    }
    if( rc==SQLITE_OK && pPend->nPending>0 ){
      pPend->segno = p->segActive;
      p->aSeg[p->nSeg-1].nUnconf++;
      wal_unconf_push(p, pPend);
    }else{
      sqlite3_free(pPend);
    }
  }
  p->nInflight -= g->nRec;
  if( rc==SQLITE_OK ){
    p->szActive += g->n;
    p->aSeg[p->nSeg-1].szEnd = p->szActive;
    p->nActiveRec += g->nRec - g->nSyncOnly;
    if( g->cidLast>p->cidWritten ) p->cidWritten = g->cidLast;
  }
  if( bSynced ) p->cidSynced = p->cidWritten;
  else if( rc==SQLITE_OK && g->n>0 ) p->nDeferred++;
  wal_group_reset(g);
  return pPost;
}

/* Posts every waiter of list pPost.  Mutex not held.  A waiter may return
** (and its WalWaiter vanish) as soon as it is posted, so the link is read
** first; a waiter that sleeps cannot return before its sem_post. */
static void appendPost(WalWaiter *pPost){
  while( pPost ){
    WalWaiter *pNext = pPost->pNextPost;
    if( __atomic_exchange_n(&pPost->iState, WAL_WAITER_POSTED,
                            __ATOMIC_ACQ_REL)==WAL_WAITER_SLEEPING ){
      sem_post(&pPost->sem);         /* it sleeps until this post */
    }
    pPost = pNext;
  }
}

/* Before a leader takes the open group, it waits until the group holds
** nGroupTarget records: the size of the last group that filled up (the
** appenders of the group that just finished are on their way back).  It
** waits no longer than half the last flush time (at most
** WAL_GATHER_MAX_US); a wait that times out lowers the target to what
** came.  Without this, N busy appenders settle into two alternating groups
** of N/2 and twice the flushes.  A lone appender waits once, then never.
** A group no member of which asks for a flush (WAL_SYNC_NORMAL appends
** only) does not wait: it has no flush to share, and its write costs
** less than the wait (a committer alone with a collector's occasional
** records would otherwise wait at most every commit).
** On a fast log the wait spins outside the mutex (only this leader swaps
** p->pOpen, and nRec is read atomically), else it sleeps on condGather.
** Mutex held. */
#define WAL_GATHER_MAX_US 1000
static void appendGather(Wal *p){
  int64_t us = p->usLastFlush/2;
  struct timespec ts;
  int bTimeout = 0;
  if( p->zFailed || !p->pOpen->bSync ) return;
  if( p->pOpen->nRec>=p->nGroupTarget ){
    p->nGroupTarget = p->pOpen->nRec;
    return;
  }
  if( us>WAL_GATHER_MAX_US ) us = WAL_GATHER_MAX_US;
  p->nGatherWait++;
  if( appendSpinUs(p)>0 ){
    WalGroup *g = p->pOpen;
    int nTarget = p->nGroupTarget;
    int64_t usEnd = appendNowUs() + us;
    pthread_mutex_unlock(&p->mutex);
    while( __atomic_load_n(&g->nRec, __ATOMIC_RELAXED)<nTarget ){
      if( appendNowUs()>=usEnd ){ bTimeout = 1; break; }
      sched_yield();
    }
    pthread_mutex_lock(&p->mutex);
    bTimeout = bTimeout && g->nRec<nTarget;
  }else{
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)(us*1000);
    ts.tv_sec += ts.tv_nsec/1000000000;
    ts.tv_nsec %= 1000000000;
    p->bGathering = 1;
    while( !bTimeout && p->pOpen->nRec<p->nGroupTarget ){
      bTimeout = pthread_cond_timedwait(&p->condGather, &p->mutex, &ts)!=0;
    }
    p->bGathering = 0;
  }
  if( bTimeout || p->pOpen->nRec>p->nGroupTarget ){
    p->nGroupTarget = p->pOpen->nRec;
  }
}

/* Passes leadership to the first appender of the open group, if it has
** any (adding it to *ppPost), else gives it up.  Mutex held. */
static void appendHandOver(Wal *p, WalWaiter **ppPost){
  WalPend *pFirst = p->pOpen->pFirst;
  if( pFirst ){
    WalWaiter *w = pFirst->pWaiter;
    w->bLead = 1;
    w->pNextPost = *ppPost;
    *ppPost = w;
  }else{
    p->bLeader = 0;
    pthread_cond_broadcast(&p->cond);       /* wal_close() may wait */
  }
}

/* Leads one group: takes the open group, writes it without the mutex,
** records the outcome, hands leadership on and posts the group's
** appenders.  Entered with the mutex held and bLeader set by (or for) the
** caller; returns with the mutex released. */
static void appendLead(Wal *p){
  WalGroup *g;
  WalWaiter *pPost;
  char *zErr = 0;
  int rc, nFlush = 0, nSegBefore, bRetire, bSynced = 0;
  int64_t usFlush = 0;
  appendGather(p);
  g = p->pOpen;
  p->pOpen = (g==&p->aGroup[0]) ? &p->aGroup[1] : &p->aGroup[0];
  nSegBefore = p->nSeg;
  if( p->zFailed ){
    rc = SQLITE_IOERR;
    zErr = sqlite3_mprintf("%s", p->zFailed);
  }else{
    pthread_mutex_unlock(&p->mutex);
    rc = appendWrite(p, g, &nFlush, &usFlush, &bSynced, &zErr);
    pthread_mutex_lock(&p->mutex);
  }
  p->nFlush += nFlush;
  if( usFlush>0 ) p->usLastFlush = usFlush;
  pPost = appendFinish(p, g, rc, bSynced, zErr);
  sqlite3_free(zErr);
  appendHandOver(p, &pPost);
  bRetire = p->nSeg>nSegBefore && p->nSeg>1 && p->aSeg[0].nUnconf==0;
  pthread_mutex_unlock(&p->mutex);
  appendPost(pPost);
  if( bRetire ) wal_retire(p);       /* a rotation may free old segments */
}

/* Checks the arguments of wal_append(). */
static int appendCheckArgs(Wal *p, const WalRecordBuilder *pRec,
                           int nPending, const char *const *az,
                           const int *an, uint64_t *pCid, char **pzErr){
  int i;
  if( p==0 || pRec==0 || pCid==0 || nPending<0
   || (nPending>0 && (az==0 || an==0))
   || (nPending>0 && wal_record_is_abort(pRec)) ){
    wal_set_err(pzErr, "wal: append needs a log, a record, a CID pointer "
                "and nPending table names");
    return SQLITE_MISUSE;
  }
  for(i=0; i<nPending; i++){
    if( az[i]==0 || an[i]<=0 ){
      wal_set_err(pzErr, "wal: pending table %d of the record has no name",
                  i);
      return SQLITE_MISUSE;
    }
  }
  return SQLITE_OK;
}

/* Adds the record to the open group with the next CID (pRec NULL: a
** wal_sync() request, which takes no CID and asks for the flush).  Mutex
** held. */
static int appendEnqueue(Wal *p, const WalRecordBuilder *pRec, int eSync,
                         WalPend *pPend, WalWaiter *w, char **pzErr){
  WalGroup *g = p->pOpen;
  uint64_t cid = p->nextCid;
  size_t nFrame = pRec ? wal_frame_size(pRec, cid) : 0;
  int rc;
  if( p->zFailed ){
    wal_set_err(pzErr, "%s", p->zFailed);
    return SQLITE_IOERR;
  }
  rc = wal_unconf_reserve(p, p->nInflight+1);
  if( rc==SQLITE_OK ) rc = appendGroupReserve(g, nFrame);
  if( rc!=SQLITE_OK ) return rc;
  pPend->pWaiter = w;
  if( g->pLast ) g->pLast->pNext = pPend; else g->pFirst = pPend;
  g->pLast = pPend;
  if( eSync!=WAL_SYNC_NORMAL ) g->bSync = 1;
  if( pRec==0 ){
    pPend->bSyncOnly = 1;
    g->nSyncOnly++;
  }else{
    wal_frame_encode(pRec, cid, g->a + g->n);
    g->n += nFrame;
    p->nextCid++;
    p->nAppendTried++;
    pPend->cid = cid;
    if( g->cidFirst==0 ) g->cidFirst = cid;
    g->cidLast = cid;
  }
  __atomic_store_n(&g->nRec, g->nRec+1, __ATOMIC_RELAXED);
  p->nInflight++;
  if( p->bGathering && g->nRec>=p->nGroupTarget ){
    pthread_cond_signal(&p->condGather);
  }
  return SQLITE_OK;
}

/* Waits while wal_replay() runs; SQLITE_MISUSE when called from the
** replay itself (it would wait for itself).  Mutex held. */
static int appendAfterReplay(Wal *p, char **pzErr){
  if( p->bReplaying && pthread_equal(p->replayer, pthread_self()) ){
    wal_set_err(pzErr, "wal: append from inside a replay callback");
    return SQLITE_MISUSE;
  }
  while( p->bReplaying ) pthread_cond_wait(&p->cond, &p->mutex);
  return SQLITE_OK;
}

/* sem_wait, resumed after a signal interrupts it. */
static void appendSemWait(sem_t *pSem){
  while( sem_wait(pSem)!=0 && errno==EINTR ){}
}

/* Waits until w is posted: spins (yielding) for up to usSpin, then
** sleeps on w->sem.  Mutex not held. */
static void appendWaitPosted(WalWaiter *w, int64_t usSpin){
  int iExpect = WAL_WAITER_WAITING;
  if( usSpin>0 ){
    int64_t usEnd = appendNowUs() + usSpin;
    while( __atomic_load_n(&w->iState, __ATOMIC_ACQUIRE)==WAL_WAITER_WAITING
        && appendNowUs()<usEnd ){
      sched_yield();
    }
  }
  if( __atomic_compare_exchange_n(&w->iState, &iExpect, WAL_WAITER_SLEEPING,
                                  0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ){
    appendSemWait(&w->sem);          /* the post will sem_post */
  }
}

/* Waits until the group of waiter w has finished: leads it at once when
** bLead (the caller took leadership), else waits until posted, and leads
** if posted to lead.  Entered with the mutex held, returns without it. */
static void appendAwait(Wal *p, WalWaiter *w, int bLead){
  if( !bLead ){
    int64_t usSpin = appendSpinUs(p);
    pthread_mutex_unlock(&p->mutex);
    appendWaitPosted(w, usSpin);
    if( w->bDone ) return;
    pthread_mutex_lock(&p->mutex);    /* handed leadership: w->bLead */
  }
  appendLead(p);                      /* w's record is in the group led */
}

/* Enqueues pRec (NULL: a sync request) and waits for its group.  Sets
** *pCid (pCid may be NULL for a sync request). */
static int appendRun(Wal *p, const WalRecordBuilder *pRec, int eSync,
                     int nPending, const char *const *azPending,
                     const int *anPending, uint64_t *pCid, char **pzErr){
  WalWaiter w;
  WalPend *pPend;
  int rc, bLead;
  pPend = wal_pend_new(0, nPending, azPending, anPending);
  if( pPend==0 ) return SQLITE_NOMEM;
  memset(&w, 0, sizeof(w));
  sem_init(&w.sem, 0, 0);          /* cannot fail for value 0, unshared */
  pthread_mutex_lock(&p->mutex);
  rc = appendAfterReplay(p, pzErr);
  if( rc==SQLITE_OK ) rc = appendEnqueue(p, pRec, eSync, pPend, &w, pzErr);
  if( rc!=SQLITE_OK ){
    pthread_mutex_unlock(&p->mutex);
    sqlite3_free(pPend);
    sem_destroy(&w.sem);
    return rc;
  }
  if( pCid ) *pCid = pPend->cid;   /* pPend is not ours after this */
  bLead = !p->bLeader;
  p->bLeader = 1;
  appendAwait(p, &w, bLead);
  sem_destroy(&w.sem);
  if( w.rc!=SQLITE_OK ){
    if( pCid ) *pCid = 0;
    if( pzErr ) *pzErr = w.zErr; else sqlite3_free(w.zErr);
  }
  return w.rc;
}

int wal_append_sync(Wal *p, const WalRecordBuilder *pRec, int eSync,
                    int nPending, const char *const *azPending,
                    const int *anPending, uint64_t *pCid, char **pzErr){
  int rc = appendCheckArgs(p, pRec, nPending, azPending, anPending, pCid,
                           pzErr);
  if( rc==SQLITE_OK && eSync!=WAL_SYNC_NORMAL && eSync!=WAL_SYNC_FULL ){
    wal_set_err(pzErr, "wal: unknown durability %d", eSync);
    rc = SQLITE_MISUSE;
  }
  if( rc!=SQLITE_OK ) return rc;
  return appendRun(p, pRec, eSync, nPending, azPending, anPending, pCid,
                   pzErr);
}

int wal_append(Wal *p, const WalRecordBuilder *pRec, int nPending,
               const char *const *azPending, const int *anPending,
               uint64_t *pCid, char **pzErr){
  return wal_append_sync(p, pRec, WAL_SYNC_FULL, nPending, azPending,
                         anPending, pCid, pzErr);
}

int wal_sync(Wal *p, uint64_t cid, char **pzErr){
  int bDone;
  if( p==0 ) return SQLITE_MISUSE;
  pthread_mutex_lock(&p->mutex);
  if( p->zFailed ){
    wal_set_err(pzErr, "%s", p->zFailed);
    pthread_mutex_unlock(&p->mutex);
    return SQLITE_IOERR;
  }
  bDone = p->cidSynced>=(cid ? cid : p->cidWritten);
  pthread_mutex_unlock(&p->mutex);
  if( bDone ) return SQLITE_OK;
  return appendRun(p, 0, WAL_SYNC_FULL, 0, 0, 0, 0, pzErr);
}

void wal_advance_cid(Wal *p, uint64_t cid){
  if( p==0 ) return;
  pthread_mutex_lock(&p->mutex);
  if( cid>=p->nextCid ) p->nextCid = cid+1;
  pthread_mutex_unlock(&p->mutex);
}

int wal_abort(Wal *p, uint64_t cid, uint64_t tid, char **pzErr){
  WalRecordBuilder *pRec;
  uint64_t cidAbort = 0;
  int rc, bRetire, bKnown;
  if( p==0 || cid==0 ) return SQLITE_MISUSE;
  pthread_mutex_lock(&p->mutex);
  bKnown = cid<p->nextCid;
  pthread_mutex_unlock(&p->mutex);
  if( !bKnown ){
    wal_set_err(pzErr, "wal: cannot abort record %llu: no such record was "
                "appended", (unsigned long long)cid);
    return SQLITE_MISUSE;
  }
  pRec = wal_record_abort_new(tid, cid);
  if( pRec==0 ) return SQLITE_NOMEM;
  rc = wal_append(p, pRec, 0, 0, 0, &cidAbort, pzErr);  /* flushed */
  wal_record_free(pRec);
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&p->mutex);
  bRetire = wal_unconf_drop(p, cid);
  pthread_mutex_unlock(&p->mutex);
  if( bRetire ) wal_retire(p);
  return SQLITE_OK;
}

int wal_shared_flush(Wal *p, uint64_t *pSegno, char **pzErr){
  int rc = SQLITE_OK;
  if( p==0 ) return SQLITE_MISUSE;
  pthread_mutex_lock(&p->mutex);
  while( p->bLeader ) pthread_cond_wait(&p->cond, &p->mutex);
  if( p->zFailed ){
    wal_set_err(pzErr, "%s", p->zFailed);
    rc = SQLITE_IOERR;
  }else if( p->fdActive>=0 && p->pIo->xFsync(p->pIo->pCtx, p->fdActive)!=0 ){
    const char *zWhy = strerror(errno);
    wal_set_err(pzErr, "wal: fdatasync of %s failed: %s", p->zActive, zWhy);
    p->zFailed = sqlite3_mprintf("wal: log %s accepts no appends since a "
        "flush of records written without one failed (fdatasync: %s); "
        "reopen the store", p->zActive, zWhy);
    rc = SQLITE_IOERR_FSYNC;
  }else if( p->fdActive>=0 ){
    p->szSynced = p->szActive;
    p->cidSynced = p->cidWritten;
    p->usUnsynced = 0;
    p->nFlush++;
  }
  if( pSegno ) *pSegno = p->segActive;
  pthread_mutex_unlock(&p->mutex);
  return rc;
}
