/*
** wal.c -- the life of a root WAL: wal_open() (scan every segment, check
** every frame, cut a torn tail off the newest segment, rebuild the set of
** unconfirmed records and the next CID), wal_replay(), wal_stats() and
** wal_close().  Appends are in append.c, confirmation in confirm.c, the
** file format in segment.c and record.c.
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <time.h>

#define WAL_DEFAULT_SEGMENT ((int64_t)64*1024*1024)

/* ------------------------------------------------------------------ open */

/* The gathering wait of append.c times out on the monotonic clock. */
static void walCondInitMonotonic(pthread_cond_t *pCond){
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(pCond, &attr);
  pthread_condattr_destroy(&attr);
}

/* Allocates a Wal with its locks; NULL on OOM. */
static Wal *walAlloc(const char *zDir, const WalConfig *pCfg){
  Wal *p = sqlite3_malloc64(sizeof(Wal));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  p->fdActive = -1;
  p->pIo = (pCfg && pCfg->pIo) ? pCfg->pIo : wal_io_posix();
  p->szSegment = (pCfg && pCfg->szSegment>0) ? pCfg->szSegment
                                            : WAL_DEFAULT_SEGMENT;
  p->bKeepBak = pCfg ? pCfg->bKeepBak : 0;
  p->bShared = pCfg ? pCfg->bShared : 0;
  p->nextCid = 1;
  p->pOpen = &p->aGroup[0];
  p->zWalDir = sqlite3_mprintf("%s/wal", zDir);
  if( p->zWalDir==0 ){ sqlite3_free(p); return 0; }
  pthread_mutex_init(&p->mutex, 0);
  pthread_mutex_init(&p->retireMutex, 0);
  pthread_cond_init(&p->cond, 0);
  walCondInitMonotonic(&p->condGather);
  return p;
}

/* Registers one durable record found by the open scan. */
static int walLoadRecord(Wal *p, const WalRecord *pRec, uint64_t segno){
  const char **az;
  int *an;
  int i, rc = SQLITE_OK;
  WalPend *pPend;
  if( pRec->nTable==0 ) return SQLITE_OK;   /* nothing to wait for */
  az = sqlite3_malloc64((sizeof(char*)+sizeof(int))*(size_t)pRec->nTable);
  if( az==0 ) return SQLITE_NOMEM;
  an = (int*)&az[pRec->nTable];
  for(i=0; i<pRec->nTable; i++){
    az[i] = pRec->aTable[i].zTable;
    an[i] = pRec->aTable[i].nTable;
  }
  pPend = wal_pend_new(pRec->cid, pRec->nTable, az, an);
  if( pPend==0 || wal_unconf_reserve(p, 1)!=SQLITE_OK ){
    sqlite3_free(pPend);
    rc = SQLITE_NOMEM;
  }else{
    pPend->segno = segno;
    p->aSeg[p->nSeg-1].nUnconf++;
    wal_unconf_push(p, pPend);
  }
  sqlite3_free(az);
  return rc;
}

/* Checks one frame body found by the open scan and registers it.
** Returns SQLITE_OK, SQLITE_CORRUPT with *pzWhy, or SQLITE_NOMEM. */
static int walLoadFrame(Wal *p, const uint8_t *aBody, size_t nBody,
                        uint64_t segno, int64_t *pnRec, const char **pzWhy){
  WalRecord *pRec = 0;
  int rc = wal_record_decode(aBody, nBody, &pRec);
  if( rc==SQLITE_CORRUPT ) *pzWhy = "malformed record body";
  if( rc!=SQLITE_OK ) return rc;
  if( pRec->cid<p->nextCid ){
    *pzWhy = "record CID does not increase";
    rc = SQLITE_CORRUPT;
  }else{
    /* An abort record withdraws an earlier record (if still live). */
    if( pRec->cidAborted ) wal_unconf_drop(p, pRec->cidAborted);
    rc = walLoadRecord(p, pRec, segno);
    p->nextCid = pRec->cid + 1;
    p->lastCid = pRec->cid;
    (*pnRec)++;
  }
  sqlite3_free(pRec);
  return rc;
}

/* Cuts the newest segment at iOff (a torn or damaged tail). */
static int walCutTail(Wal *p, int fd, const char *zPath, uint64_t iOff,
                      uint64_t iEnd, const char *zWhy, char **pzErr){
  const WalIo *pIo = p->pIo;
  sqlite3_log(SQLITE_NOTICE, "wal: cutting %llu bytes off %s at offset "
              "%llu: %s", (unsigned long long)(iEnd-iOff), zPath,
              (unsigned long long)iOff, zWhy);
  if( pIo->xFtruncate(pIo->pCtx, fd, (off_t)iOff)!=0
   || pIo->xFsync(pIo->pCtx, fd)!=0 ){
    wal_set_err(pzErr, "wal: cannot cut the torn tail off %s at offset "
                "%llu: %s", zPath, (unsigned long long)iOff,
                strerror(errno));
    return SQLITE_IOERR_TRUNCATE;
  }
  return SQLITE_OK;
}

/* Scans the frames of segment fd from the header to *piEnd (its size).
** Zero padding after the last frame is the end of the log.  A bad frame
** in the newest segment is cut off (with any padding after it); elsewhere
** it is SQLITE_CORRUPT.  *piEnd is set to the end of the good frames. */
static int walScanSegment(Wal *p, int fd, const char *zPath, uint64_t segno,
                          int bNewest, uint64_t *piEnd, int64_t *pnRec,
                          char **pzErr){
  WalScan scan;
  const uint8_t *aBody;
  size_t nBody;
  uint64_t iFrame = WAL_SEG_HDR;
  const char *zWhy = 0;
  int rc;
  wal_scan_init(&scan, p->pIo, fd, zPath, WAL_SEG_HDR, *piEnd);
  while( (rc = wal_scan_next(&scan, &aBody, &nBody, &iFrame, &zWhy))
         ==SQLITE_ROW ){
    rc = walLoadFrame(p, aBody, nBody, segno, pnRec, &zWhy);
    if( rc!=SQLITE_OK ) break;
  }
  wal_scan_finish(&scan);
  if( rc==SQLITE_DONE ){
    *piEnd = iFrame;                   /* padding, if any, starts here */
    return SQLITE_OK;
  }
  if( rc==SQLITE_CORRUPT && bNewest && p->bShared ){
    /* Perhaps another writer's frame in progress: the end for now. */
    rc = SQLITE_OK;
    *piEnd = iFrame;
  }else if( rc==SQLITE_CORRUPT && bNewest ){
    rc = walCutTail(p, fd, zPath, iFrame, *piEnd, zWhy, pzErr);
    *piEnd = iFrame;
  }else if( rc==SQLITE_CORRUPT ){
    wal_set_err(pzErr, "wal: corrupt record in %s at offset %llu: %s",
                zPath, (unsigned long long)iFrame, zWhy);
  }else if( rc==SQLITE_IOERR_READ ){
    wal_set_err(pzErr, "wal: read of %s failed: %s", zPath, strerror(errno));
  }
  return rc;
}

/* A newest segment whose creation never finished (shorter than a header):
** it holds no record, so it is removed and a fresh one takes its place. */
static int walDropTornSegment(Wal *p, const char *zPath, char **pzErr){
  sqlite3_log(SQLITE_NOTICE, "wal: removing %s, a segment whose creation "
              "did not finish", zPath);
  if( p->pIo->xUnlink(p->pIo->pCtx, zPath)!=0 ){
    wal_set_err(pzErr, "wal: cannot remove the torn segment %s: %s", zPath,
                strerror(errno));
    return SQLITE_IOERR_DELETE;
  }
  return SQLITE_OK;
}

/* The segment before this one, if still live, must have the size this
** header recorded when it was sealed. */
static int walCheckPrevious(Wal *p, const WalSegHdr *pHdr, const char *zPath,
                            char **pzErr){
  const WalSeg *pPrev = p->nSeg>0 ? &p->aSeg[p->nSeg-1] : 0;
  char *zPrev;
  if( pPrev==0 || pHdr->prevSegno!=pPrev->segno
   || pHdr->prevEnd==pPrev->szEnd ){
    return SQLITE_OK;
  }
  zPrev = wal_segment_path(p->zWalDir, pPrev->segno);
  wal_set_err(pzErr, "wal: corrupt segment %s: %llu bytes of records, but "
              "%s recorded %llu when it was sealed", zPrev ? zPrev : "?",
              (unsigned long long)pPrev->szEnd, zPath,
              (unsigned long long)pHdr->prevEnd);
  sqlite3_free(zPrev);
  return SQLITE_CORRUPT;
}

/* Registers segment segno (header hdr, sz bytes) and scans its frames.
** The newest one stays open as the active segment: *pFd and *pzPath are
** then taken over (set to -1 / NULL). */
static int walAddSegment(Wal *p, const WalSegHdr *pHdr, off_t sz,
                         int bNewest, int *pFd, char **pzPath,
                         char **pzErr){
  uint64_t iEnd = (uint64_t)sz;
  int64_t nRec = 0;
  int rc = walCheckPrevious(p, pHdr, *pzPath, pzErr);
  if( rc==SQLITE_OK ) rc = wal_seg_reserve(p);
  if( rc!=SQLITE_OK ) return rc;
  if( pHdr->baseCid>p->nextCid ) p->nextCid = pHdr->baseCid;
  p->aSeg[p->nSeg].segno = pHdr->segno;
  p->aSeg[p->nSeg].baseCid = pHdr->baseCid;
  p->aSeg[p->nSeg].nUnconf = 0;
  p->nSeg++;
  rc = walScanSegment(p, *pFd, *pzPath, pHdr->segno, bNewest, &iEnd, &nRec,
                      pzErr);
  p->aSeg[p->nSeg-1].szEnd = iEnd;
  if( rc==SQLITE_OK && bNewest && nRec>0 && !p->bShared
   && p->pIo->xFsync(p->pIo->pCtx, *pFd)!=0 ){
    /* Its records may have been written but never flushed (deferred
    ** flushes, append.c) by a process that then died: flush them before
    ** anything builds on them. */
    wal_set_err(pzErr, "wal: fdatasync of %s failed: %s", *pzPath,
                strerror(errno));
    rc = SQLITE_IOERR_FSYNC;
  }
  if( rc==SQLITE_OK && bNewest ){
    off_t szNow = sz;
    /* A cut left the file at iEnd; otherwise the padding is kept. */
    if( p->pIo->xFstatSize(p->pIo->pCtx, *pFd, &szNow)!=0 ) szNow = iEnd;
    p->fdActive = *pFd;
    p->zActive = *pzPath;
    p->segActive = pHdr->segno;
    p->szActive = iEnd;
    p->szAlloc = (uint64_t)szNow>iEnd ? (uint64_t)szNow : iEnd;
    p->nActiveRec = nRec;
    *pFd = -1;
    *pzPath = 0;
  }
  return rc;
}

/* Opens, checks and registers segment segno.  A newest segment whose
** header never made it to disk (shorter than a header, or exactly a
** header's size and damaged: the header is flushed before any frame) is
** a rotation that did not finish; it holds no record and is removed. */
static int walLoadSegment(Wal *p, uint64_t segno, int bNewest,
                          char **pzErr){
  const WalIo *pIo = p->pIo;
  char *zPath = wal_segment_path(p->zWalDir, segno);
  char *zErr = 0;
  WalSegHdr hdr;
  off_t sz = 0;
  int fd, rc, bShort = 0;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = pIo->xOpen(pIo->pCtx, zPath, bNewest ? O_RDWR : O_RDONLY, 0);
  if( fd<0 ){
    wal_set_err(pzErr, "wal: cannot open %s: %s", zPath, strerror(errno));
    sqlite3_free(zPath);
    return SQLITE_CANTOPEN;
  }
  if( pIo->xFstatSize(pIo->pCtx, fd, &sz)!=0 ){
    wal_set_err(pzErr, "wal: cannot stat %s: %s", zPath, strerror(errno));
    rc = SQLITE_IOERR_FSTAT;
  }else{
    rc = wal_segment_read_header(pIo, fd, zPath, segno, &hdr, &bShort,
                                 &zErr);
  }
  if( rc==SQLITE_CORRUPT && bNewest && (bShort || sz==WAL_SEG_HDR) ){
    pIo->xClose(pIo->pCtx, fd);
    fd = -1;
    rc = walDropTornSegment(p, zPath, pzErr);
  }else if( zErr ){
    if( pzErr ){ *pzErr = zErr; zErr = 0; }
  }else if( rc==SQLITE_OK ){
    rc = walAddSegment(p, &hdr, sz, bNewest, &fd, &zPath, pzErr);
  }
  sqlite3_free(zErr);
  if( fd>=0 ) pIo->xClose(pIo->pCtx, fd);
  sqlite3_free(zPath);
  return rc;
}

/* Is segment segno a creation that has not finished (shorter than a
** header, or exactly a header that does not check)?  Shared mode: such a
** newest segment is left alone, not removed. */
static int walCreationTorn(Wal *p, uint64_t segno){
  const WalIo *pIo = p->pIo;
  char *zPath = wal_segment_path(p->zWalDir, segno);
  char *zErr = 0;
  WalSegHdr hdr;
  off_t sz = 0;
  int fd, rc, bShort = 0, bTorn = 0;
  if( zPath==0 ) return 0;
  fd = pIo->xOpen(pIo->pCtx, zPath, O_RDONLY, 0);
  if( fd>=0 && pIo->xFstatSize(pIo->pCtx, fd, &sz)==0 ){
    rc = wal_segment_read_header(pIo, fd, zPath, segno, &hdr, &bShort, &zErr);
    bTorn = rc==SQLITE_CORRUPT && (bShort || sz==WAL_SEG_HDR);
  }
  if( fd>=0 ) pIo->xClose(pIo->pCtx, fd);
  sqlite3_free(zErr);
  sqlite3_free(zPath);
  return bTorn;
}

/* Creates the log folder if needed and loads every segment; starts a
** first segment when there is none. */
static int walLoadAll(Wal *p, char **pzErr){
  uint64_t *aSegno = 0;
  int nSegno = 0, i, rc;
  uint64_t segLast = 0;
  if( p->pIo->xMkdir(p->pIo->pCtx, p->zWalDir, 0755)!=0 && errno!=EEXIST ){
    wal_set_err(pzErr, "wal: cannot create %s: %s", p->zWalDir,
                strerror(errno));
    return SQLITE_CANTOPEN;
  }
  rc = wal_segment_list(p->zWalDir, &aSegno, &nSegno, pzErr);
  if( rc==SQLITE_OK && p->bShared && nSegno>0
   && walCreationTorn(p, aSegno[nSegno-1]) ){
    nSegno--;           /* another writer's rotation, unfinished: not yet */
  }
  for(i=0; rc==SQLITE_OK && i<nSegno; i++){
    rc = walLoadSegment(p, aSegno[i], i==nSegno-1, pzErr);
    segLast = aSegno[i];
  }
  sqlite3_free(aSegno);
  if( rc==SQLITE_OK && p->fdActive<0 && p->bShared ){
    wal_set_err(pzErr, "wal: %s has no segment to share; it must be opened "
                "alone first", p->zWalDir);
    rc = SQLITE_CANTOPEN;
  }
  if( rc==SQLITE_OK && p->fdActive<0 ){
    /* No segment yet, or the newest was a torn creation: start one after
    ** the last number seen (the last good segment, if any, is sealed). */
    p->segActive = segLast;
    if( p->nSeg>0 ) p->szActive = p->aSeg[p->nSeg-1].szEnd;
    rc = wal_rotate(p, p->nextCid, pzErr);
  }
  return rc;
}

int wal_open(const char *zDir, const WalConfig *pCfg, Wal **ppWal,
             char **pzErr){
  Wal *p;
  int rc;
  if( ppWal==0 ) return SQLITE_MISUSE;
  *ppWal = 0;
  if( zDir==0 || zDir[0]==0 ){
    wal_set_err(pzErr, "wal: the store directory name is empty");
    return SQLITE_MISUSE;
  }
  p = walAlloc(zDir, pCfg);
  if( p==0 ) return SQLITE_NOMEM;
  rc = walLoadAll(p, pzErr);
  if( rc!=SQLITE_OK ){
    wal_close(p);
    return rc;
  }
  if( p->lastCid<p->nextCid-1 ) p->lastCid = p->nextCid-1;
  p->cidSynced = p->cidWritten = p->lastCid;
  p->szSynced = p->szActive;
  p->bOpen = 1;
  *ppWal = p;
  return SQLITE_OK;
}

/* ---------------------------------------------------------------- replay */

/* The first live segment numbered segMin or more: its number and the end
** of its frames.  Returns 0 when there is none. */
static int walNextSegment(Wal *p, uint64_t segMin, uint64_t *pSegno,
                          uint64_t *piEnd){
  int i, bFound = 0;
  pthread_mutex_lock(&p->mutex);
  for(i=0; i<p->nSeg && !bFound; i++){
    if( p->aSeg[i].segno>=segMin ){
      *pSegno = p->aSeg[i].segno;
      *piEnd = (i==p->nSeg-1) ? p->szActive : p->aSeg[i].szEnd;
      bFound = 1;
    }
  }
  pthread_mutex_unlock(&p->mutex);
  return bFound;
}

/* Decodes one frame and hands it to xRecord if still unconfirmed. */
static int walReplayFrame(Wal *p, const uint8_t *aBody, size_t nBody,
                          const char *zPath, uint64_t iFrame,
                          int (*xRecord)(void*, const WalRecord*),
                          void *pCtx, char **pzErr){
  WalRecord *pRec = 0;
  int rc = wal_record_decode(aBody, nBody, &pRec);
  int bLive;
  if( rc==SQLITE_CORRUPT ){
    wal_set_err(pzErr, "wal: corrupt record in %s at offset %llu: "
                "malformed record body", zPath, (unsigned long long)iFrame);
  }
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&p->mutex);
  bLive = wal_unconf_has(p, pRec->cid);
  pthread_mutex_unlock(&p->mutex);
  if( bLive ){
    rc = xRecord(pCtx, pRec);
    if( rc!=SQLITE_OK ){
      wal_set_err(pzErr, "wal: replay stopped at record %llu: %s",
                  (unsigned long long)pRec->cid, sqlite3_errstr(rc));
    }
  }
  sqlite3_free(pRec);
  return rc;
}

/* Replays the unconfirmed records of segment segno (frames up to iEnd). */
static int walReplaySegment(Wal *p, uint64_t segno, uint64_t iEnd,
                            int (*xRecord)(void*, const WalRecord*),
                            void *pCtx, char **pzErr){
  const WalIo *pIo = p->pIo;
  char *zPath = wal_segment_path(p->zWalDir, segno);
  WalScan scan;
  const uint8_t *aBody;
  size_t nBody;
  uint64_t iFrame;
  const char *zWhy = 0;
  int fd, rc;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = pIo->xOpen(pIo->pCtx, zPath, O_RDONLY, 0);
  if( fd<0 ){
    /* Retired meanwhile (every record confirmed): nothing to replay. */
    rc = (errno==ENOENT) ? SQLITE_OK : SQLITE_CANTOPEN;
    if( rc ) wal_set_err(pzErr, "wal: cannot open %s: %s", zPath,
                         strerror(errno));
    sqlite3_free(zPath);
    return rc;
  }
  wal_scan_init(&scan, pIo, fd, zPath, WAL_SEG_HDR, iEnd);
  while( (rc = wal_scan_next(&scan, &aBody, &nBody, &iFrame, &zWhy))
         ==SQLITE_ROW ){
    rc = walReplayFrame(p, aBody, nBody, zPath, iFrame, xRecord, pCtx,
                        pzErr);
    if( rc!=SQLITE_OK ) break;
  }
  if( rc==SQLITE_DONE ){
    rc = SQLITE_OK;
  }else if( zWhy && (rc==SQLITE_CORRUPT || rc==SQLITE_IOERR_READ) ){
    wal_set_err(pzErr, "wal: %s record in %s at offset %llu: %s",
                rc==SQLITE_CORRUPT ? "corrupt" : "unreadable", zPath,
                (unsigned long long)iFrame, zWhy);
  }
  wal_scan_finish(&scan);
  pIo->xClose(pIo->pCtx, fd);
  sqlite3_free(zPath);
  return rc;
}

int wal_replay(Wal *p, int (*xRecord)(void*, const WalRecord*), void *pCtx,
               char **pzErr){
  uint64_t segno = 0, iEnd = 0;
  int rc = SQLITE_OK;
  if( p==0 || xRecord==0 ){
    wal_set_err(pzErr, "wal: replay needs a log and a callback");
    return SQLITE_MISUSE;
  }
  pthread_mutex_lock(&p->mutex);
  if( p->nAppendTried>0 || p->bReplaying ){
    pthread_mutex_unlock(&p->mutex);
    wal_set_err(pzErr, "wal: replay must run once at a time and before "
                "the first append");
    return SQLITE_MISUSE;
  }
  p->bReplaying = 1;
  p->replayer = pthread_self();
  pthread_mutex_unlock(&p->mutex);
  while( rc==SQLITE_OK && walNextSegment(p, segno, &segno, &iEnd) ){
    rc = walReplaySegment(p, segno, iEnd, xRecord, pCtx, pzErr);
    segno++;
  }
  pthread_mutex_lock(&p->mutex);
  p->bReplaying = 0;
  pthread_cond_broadcast(&p->cond);
  pthread_mutex_unlock(&p->mutex);
  return rc;
}

/* --------------------------------------------------------- configuration */

/* Both fields are read without the mutex by the leader (appendWrite) and by
** wal_retire: they are accessed atomically. */
void wal_set_config(Wal *p, const WalConfig *pCfg){
  int64_t sz;
  if( p==0 || pCfg==0 ) return;
  sz = pCfg->szSegment>0 ? pCfg->szSegment : WAL_DEFAULT_SEGMENT;
  __atomic_store_n(&p->szSegment, sz, __ATOMIC_RELAXED);
  __atomic_store_n(&p->bKeepBak, pCfg->bKeepBak ? 1 : 0, __ATOMIC_RELAXED);
}

void wal_get_config(Wal *p, WalConfig *pCfg){
  memset(pCfg, 0, sizeof(*pCfg));
  if( p==0 ) return;
  pCfg->szSegment = __atomic_load_n(&p->szSegment, __ATOMIC_RELAXED);
  pCfg->bKeepBak = __atomic_load_n(&p->bKeepBak, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------- stats and close */

void wal_stats(Wal *p, WalStats *pStats){
  memset(pStats, 0, sizeof(*pStats));
  if( p==0 ) return;
  pthread_mutex_lock(&p->mutex);
  pStats->nSegment = p->nSeg;
  pStats->nUnconfirmed = p->nUnconfirmed;
  pStats->nAppend = p->nAppend;
  pStats->nFlush = p->nFlush;
  pStats->lastCid = p->lastCid;
  pStats->firstCid = p->nSeg>0 ? p->aSeg[0].baseCid : p->lastCid+1;
  pStats->nDeferred = p->nDeferred;
  pStats->nGatherWait = p->nGatherWait;
  pStats->syncedCid = p->cidSynced;
  pthread_mutex_unlock(&p->mutex);
}

/* At close, when every record is confirmed, a fresh segment (carrying the
** next CID in its header) replaces the active one so that every record
** can retire: a clean reopen then has nothing to replay. */
static void walRetireAtClose(Wal *p){
  char *zErr = 0;
  int bAll, rc;
  pthread_mutex_lock(&p->mutex);
  while( p->bLeader ) pthread_cond_wait(&p->cond, &p->mutex);
  bAll = p->zFailed==0 && !p->bHold && !p->bShared
      && p->nUnconfirmed==0 && p->nInflight==0
      && p->nActiveRec>0 && p->fdActive>=0;
  pthread_mutex_unlock(&p->mutex);
  if( !bAll ) return;
  rc = wal_rotate(p, p->nextCid, &zErr);
  if( rc==SQLITE_OK ){
    wal_retire(p);
  }else{
    sqlite3_log(rc, "%s", zErr ? zErr : "wal: rotation at close failed");
  }
  sqlite3_free(zErr);
}

void wal_close(Wal *p){
  int i;
  if( p==0 ) return;
  if( p->bOpen ){
    char *zErr = 0;
    int rc = wal_sync(p, 0, &zErr);  /* deferred flushes: durable now */
    if( rc!=SQLITE_OK ){
      sqlite3_log(rc, "%s", zErr ? zErr : "wal: flush at close failed");
    }
    sqlite3_free(zErr);
    walRetireAtClose(p);
  }
  if( p->fdActive>=0 ){
    if( p->bOpen && p->zFailed==0 && !p->bShared
     && p->szAlloc>p->szActive ){
      wal_segment_trim(p->pIo, p->fdActive, p->zActive, p->szActive);
    }
    p->pIo->xClose(p->pIo->pCtx, p->fdActive);
  }
  for(i=p->iUnconfHead; i<p->nUnconf; i++) sqlite3_free(p->aUnconf[i].p);
  sqlite3_free(p->aUnconf);
  sqlite3_free(p->aGroup[0].a);
  sqlite3_free(p->aGroup[1].a);
  sqlite3_free(p->aSeg);
  sqlite3_free(p->zActive);
  sqlite3_free(p->zFailed);
  sqlite3_free(p->zWalDir);
  pthread_cond_destroy(&p->cond);
  pthread_cond_destroy(&p->condGather);
  pthread_mutex_destroy(&p->retireMutex);
  pthread_mutex_destroy(&p->mutex);
  sqlite3_free(p);
}
