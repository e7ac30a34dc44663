/*
** follow.c -- reading what other writers appended to a store's log: the
** tail of a Wal (where its next record goes) and wal_follow(), which hands
** every record between two positions of the log to a callback, in file
** order (which is CID order), crossing segment boundaries.  The contract
** is in wal.h ("Following the log").
**
** A position (WalPos) is a segment number and the file offset of the next
** frame in it.  The frames of a segment that is not the last one to read
** end exactly where the header of the segment after it says the older one
** was sealed (prevSegno, prevEnd), so a follower never has to guess where
** zero padding begins, and a segment that lost or gained frames is caught
** (SQLITE_CORRUPT).  Frames up to the target position were published by
** their writer, so every frame there must be whole: a torn or damaged one
** is SQLITE_CORRUPT, never the end of the log.  A segment retired before
** the follower read it is SQLITE_NOTFOUND: the records it held are gone
** from the log (their effects are in the tables' data files).
**
** Nothing here writes: segments are opened read-only, and the Wal of the
** calling process is not touched (no mutex, no confirmation).
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>

void wal_tail(Wal *p, WalPos *pPos, uint64_t *pLastCid){
  memset(pPos, 0, sizeof(*pPos));
  if( pLastCid ) *pLastCid = 0;
  if( p==0 ) return;
  pthread_mutex_lock(&p->mutex);
  pPos->segno = p->segActive;
  pPos->iOff = p->szActive;
  if( pLastCid ) *pLastCid = p->cidWritten;
  pthread_mutex_unlock(&p->mutex);
}

/* Opens segment segno of zWalDir read-only: SQLITE_OK with *pFd and
** *pzPath set, SQLITE_NOTFOUND (with a message) when it is gone, or
** SQLITE_CANTOPEN. */
static int followOpen(const WalIo *pIo, const char *zWalDir, uint64_t segno,
                      int *pFd, char **pzPath, char **pzErr){
  char *zPath = wal_segment_path(zWalDir, segno);
  int fd;
  *pFd = -1;
  *pzPath = 0;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = pIo->xOpen(pIo->pCtx, zPath, O_RDONLY, 0);
  if( fd<0 ){
    int e = errno;
    wal_set_err(pzErr, e==ENOENT
        ? "wal: segment %s was retired before this process read it"
        : "wal: cannot open %s: %s", zPath, strerror(e));
    sqlite3_free(zPath);
    return e==ENOENT ? SQLITE_NOTFOUND : SQLITE_CANTOPEN;
  }
  *pFd = fd;
  *pzPath = zPath;
  return SQLITE_OK;
}

/* The header of segment segno.  It must exist and be whole while the
** target lies in or past it; with bMayBeMissing (the walk to the end), a
** missing segment, or one whose creation never finished, is
** SQLITE_NOTFOUND: there is none after the current one. */
static int followHeader(const WalIo *pIo, const char *zWalDir, uint64_t segno,
                        WalSegHdr *pHdr, int bMayBeMissing, char **pzErr){
  char *zPath = 0, *zErr = 0;
  int fd, bShort = 0;
  off_t sz = 0;
  int rc = followOpen(pIo, zWalDir, segno, &fd, &zPath, &zErr);
  if( rc==SQLITE_NOTFOUND && !bMayBeMissing ) rc = SQLITE_CORRUPT;
  if( rc==SQLITE_OK ){
    if( pIo->xFstatSize(pIo->pCtx, fd, &sz)!=0 ) sz = 0;
    rc = wal_segment_read_header(pIo, fd, zPath, segno, pHdr, &bShort, &zErr);
    pIo->xClose(pIo->pCtx, fd);
    if( rc==SQLITE_CORRUPT && bMayBeMissing && (bShort || sz==WAL_SEG_HDR) ){
      rc = SQLITE_NOTFOUND;
    }
  }
  if( rc!=SQLITE_OK && rc!=SQLITE_NOTFOUND && zErr && pzErr ){
    sqlite3_free(*pzErr);
    *pzErr = zErr;
    zErr = 0;
  }
  sqlite3_free(zErr);
  sqlite3_free(zPath);
  return rc;
}

/* Do the 4 bytes at iOff of fd (a frame's length) read as zero, or is
** there no room for a frame header before iEnd? */
static int followZeroAt(const WalIo *pIo, int fd, uint64_t iOff,
                        uint64_t iEnd){
  uint8_t a[4];
  if( iOff+WAL_FRAME_HDR>iEnd ) return 1;
  if( pIo->xPread(pIo->pCtx, fd, a, 4, (off_t)iOff)!=4 ) return 1;
  return a[0]==0 && a[1]==0 && a[2]==0 && a[3]==0;
}

/* Hands the frames of open segment fd (zPath) from *piPos up to iEnd to
** xRecord, moving *piPos past each record the callback took (and setting
** *pLastCid to its CID); every byte of the range must be whole frames,
** unless bLenient: then a torn or damaged frame, or zero padding, ends the
** walk without an error. */
static int followFrames(const WalIo *pIo, int fd, const char *zPath,
                        uint64_t *piPos, uint64_t iEnd, int bLenient,
                        int (*xRecord)(void*, const WalRecord*), void *pCtx,
                        uint64_t *pLastCid, char **pzErr){
  WalScan scan;
  const uint8_t *aBody;
  size_t nBody;
  uint64_t iFrame = *piPos;
  const char *zWhy = 0;
  WalRecord *pRec;
  int rc;
  wal_scan_init(&scan, pIo, fd, zPath, *piPos, iEnd);
  for(;;){
    if( bLenient && followZeroAt(pIo, fd, scan.iOff, iEnd) ){
      /* no frame starts here (a frame length is never 0): the end, found
      ** without reading the preallocated zeros after it */
      iFrame = scan.iOff;
      rc = SQLITE_DONE;
      break;
    }
    rc = wal_scan_next(&scan, &aBody, &nBody, &iFrame, &zWhy);
    if( rc!=SQLITE_ROW ) break;
    pRec = 0;
    rc = wal_record_decode(aBody, nBody, &pRec);
    if( rc==SQLITE_CORRUPT ) zWhy = "malformed record body";
    if( rc==SQLITE_OK ){
      uint64_t cid = pRec->cid;
      rc = xRecord(pCtx, pRec);
      sqlite3_free(pRec);
      if( rc!=SQLITE_OK ){
        wal_set_err(pzErr, "wal: following stopped at record %llu of %s: %s",
                    (unsigned long long)cid, zPath, sqlite3_errstr(rc));
        zWhy = 0;
        break;
      }
      *piPos = scan.iOff;
      *pLastCid = cid;
    }
    if( rc!=SQLITE_OK ) break;
  }
  if( bLenient && (rc==SQLITE_DONE || (rc==SQLITE_CORRUPT && zWhy)) ){
    rc = SQLITE_DONE;                  /* the end of the whole frames */
  }else if( rc==SQLITE_DONE && iFrame<iEnd ){
    /* Zero bytes where a published frame should be. */
    rc = SQLITE_CORRUPT;
    zWhy = "zero bytes before the published end of the log";
  }
  if( rc==SQLITE_DONE ){
    rc = SQLITE_OK;
  }else if( zWhy && (rc==SQLITE_CORRUPT || rc==SQLITE_IOERR_READ) ){
    wal_set_err(pzErr, "wal: %s record in %s at offset %llu: %s",
                rc==SQLITE_CORRUPT ? "corrupt" : "unreadable", zPath,
                (unsigned long long)iFrame, zWhy);
  }
  wal_scan_finish(&scan);
  return rc;
}

/* The size of open file fd, or 0. */
static uint64_t followSize(const WalIo *pIo, int fd){
  off_t sz = 0;
  if( pIo->xFstatSize(pIo->pCtx, fd, &sz)!=0 ) return 0;
  return (uint64_t)sz;
}

/* The walk of wal_follow() (pTo set) and wal_follow_end() (pTo NULL: to
** the end of the whole frames of the newest segment). */
static int followRun(const char *zDir, const WalIo *pIo, WalPos *pFrom,
                     const WalPos *pTo,
                     int (*xRecord)(void*, const WalRecord*), void *pCtx,
                     uint64_t *pLastCid, char **pzErr){
  char *zWalDir;
  int rc = SQLITE_OK;
  if( zDir==0 || pFrom==0 || xRecord==0 ){
    wal_set_err(pzErr, "wal: following the log needs a store, positions "
                "and a callback");
    return SQLITE_MISUSE;
  }
  if( pFrom->iOff<WAL_SEG_HDR
   || (pTo && (pFrom->segno>pTo->segno
               || (pFrom->segno==pTo->segno && pFrom->iOff>pTo->iOff)
               || pTo->iOff<WAL_SEG_HDR)) ){
    wal_set_err(pzErr, "wal: cannot follow the log from %llu:%llu to "
                "%llu:%llu", (unsigned long long)pFrom->segno,
                (unsigned long long)pFrom->iOff,
                (unsigned long long)(pTo ? pTo->segno : 0),
                (unsigned long long)(pTo ? pTo->iOff : 0));
    return SQLITE_MISUSE;
  }
  if( pIo==0 ) pIo = wal_io_posix();
  zWalDir = sqlite3_mprintf("%s/wal", zDir);
  if( zWalDir==0 ) return SQLITE_NOMEM;
  for(;;){
    WalSegHdr next;
    uint64_t iEnd = pTo ? pTo->iOff : 0;
    uint64_t segNext = pFrom->segno+1;
    int bLast = pTo ? pFrom->segno==pTo->segno : 0;
    int bLenient = 0;
    char *zPath = 0;
    int fd = -1;
    if( bLast && pFrom->iOff>=pTo->iOff ) break;
    memset(&next, 0, sizeof(next));
    rc = followOpen(pIo, zWalDir, pFrom->segno, &fd, &zPath, pzErr);
    if( rc==SQLITE_OK && !bLast ){
      /* Segments are numbered one after the other: the one after the
      ** current segment names where the current one was sealed. */
      rc = followHeader(pIo, zWalDir, segNext, &next, pTo==0, pzErr);
      if( rc==SQLITE_NOTFOUND ){
        /* wal_follow_end() and no whole segment after it: the newest. */
        rc = SQLITE_OK;
        bLast = 1;
        bLenient = 1;
        iEnd = followSize(pIo, fd);
      }else if( rc==SQLITE_OK && (next.prevSegno!=pFrom->segno
                                  || next.prevEnd<pFrom->iOff) ){
        wal_set_err(pzErr, "wal: segment %llu does not continue segment "
            "%llu at offset %llu (it names segment %llu, sealed at %llu)",
            (unsigned long long)segNext, (unsigned long long)pFrom->segno,
            (unsigned long long)pFrom->iOff,
            (unsigned long long)next.prevSegno,
            (unsigned long long)next.prevEnd);
        rc = SQLITE_CORRUPT;
      }else{
        iEnd = next.prevEnd;
      }
    }
    if( rc==SQLITE_OK && pFrom->iOff<iEnd ){
      rc = followFrames(pIo, fd, zPath, &pFrom->iOff, iEnd, bLenient,
                        xRecord, pCtx, pLastCid, pzErr);
    }
    if( fd>=0 ) pIo->xClose(pIo->pCtx, fd);
    sqlite3_free(zPath);
    if( rc!=SQLITE_OK || bLast ) break;
    pFrom->segno = segNext;
    pFrom->iOff = WAL_SEG_HDR;
  }
  sqlite3_free(zWalDir);
  return rc;
}

int wal_follow(const char *zDir, const WalIo *pIo, WalPos *pFrom,
               const WalPos *pTo, int (*xRecord)(void*, const WalRecord*),
               void *pCtx, char **pzErr){
  uint64_t cid = 0;
  if( pTo==0 ){
    wal_set_err(pzErr, "wal: following the log needs a target position");
    return SQLITE_MISUSE;
  }
  return followRun(zDir, pIo, pFrom, pTo, xRecord, pCtx, &cid, pzErr);
}

int wal_follow_end(const char *zDir, const WalIo *pIo, WalPos *pFrom,
                   int (*xRecord)(void*, const WalRecord*), void *pCtx,
                   uint64_t *pLastCid, char **pzErr){
  uint64_t cid = 0;
  int rc = followRun(zDir, pIo, pFrom, 0, xRecord, pCtx, &cid, pzErr);
  if( cid && pLastCid ) *pLastCid = cid;
  return rc;
}

/* ------------------------------------------------- adopting a tail --- */

/* Marks live segment pSeg as holding other writers' records: it never
** retires through this Wal.  Mutex held. */
static void followForeign(WalSeg *pSeg){
  if( !pSeg->bForeign ){
    pSeg->bForeign = 1;
    pSeg->nUnconf++;
  }
}

/* Removes segment segno if it is a creation that never finished (a writer
** died rotating); SQLITE_CORRUPT if it is a whole segment; SQLITE_OK when
** there is none. */
static int followLeftover(Wal *p, uint64_t segno, char **pzErr){
  const WalIo *pIo = p->pIo;
  char *zPath = wal_segment_path(p->zWalDir, segno);
  char *zErr = 0;
  WalSegHdr hdr;
  off_t sz = 0;
  int fd, rc = SQLITE_OK, bShort = 0;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = pIo->xOpen(pIo->pCtx, zPath, O_RDONLY, 0);
  if( fd>=0 ){
    if( pIo->xFstatSize(pIo->pCtx, fd, &sz)!=0 ) sz = 0;
    rc = wal_segment_read_header(pIo, fd, zPath, segno, &hdr, &bShort, &zErr);
    pIo->xClose(pIo->pCtx, fd);
    if( rc==SQLITE_CORRUPT && (bShort || sz==WAL_SEG_HDR) ){
      sqlite3_log(SQLITE_NOTICE, "wal: removing %s, a segment whose creation "
                  "did not finish", zPath);
      rc = pIo->xUnlink(pIo->pCtx, zPath)==0 ? SQLITE_OK : SQLITE_IOERR_DELETE;
      if( rc ) wal_set_err(pzErr, "wal: cannot remove %s: %s", zPath,
                           strerror(errno));
    }else if( rc==SQLITE_OK ){
      wal_set_err(pzErr, "wal: the tail adopted in segment %llu is stale: "
                  "%s follows it", (unsigned long long)(segno-1), zPath);
      rc = SQLITE_CORRUPT;
    }else if( zErr && pzErr ){
      *pzErr = zErr;
      zErr = 0;
    }
  }
  sqlite3_free(zErr);
  sqlite3_free(zPath);
  return rc;
}

/* Makes segment segno (another writer's, later than the active one) this
** Wal's active segment.  Mutex not held; no append in flight. */
static int followSwitch(Wal *p, uint64_t segno, char **pzErr){
  const WalIo *pIo = p->pIo;
  char *zPath = wal_segment_path(p->zWalDir, segno);
  char *zErr = 0;
  WalSegHdr hdr;
  int fd, rc, bShort = 0, fdOld;
  char *zOld;
  uint64_t s;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = pIo->xOpen(pIo->pCtx, zPath, O_RDWR, 0);
  if( fd<0 ){
    wal_set_err(pzErr, "wal: cannot open %s: %s", zPath, strerror(errno));
    sqlite3_free(zPath);
    return SQLITE_CANTOPEN;
  }
  rc = wal_segment_read_header(pIo, fd, zPath, segno, &hdr, &bShort, &zErr);
  if( rc==SQLITE_OK && p->fdActive>=0 && p->szSynced<p->szActive ){
    /* Records this Wal wrote there without a flush (WAL_SYNC_NORMAL, or a
    ** flush put off until after the writers' lock): the segment is left
    ** flushed, so flushing the next active one covers them too. */
    if( pIo->xFsync(pIo->pCtx, p->fdActive)!=0 ){
      const char *zWhy = strerror(errno);
      zErr = sqlite3_mprintf("wal: fdatasync of %s failed: %s", p->zActive,
                             zWhy);
      pthread_mutex_lock(&p->mutex);
      if( p->zFailed==0 ){
        p->zFailed = sqlite3_mprintf("wal: log %s accepts no appends since "
            "a flush of records written without one failed (fdatasync: "
            "%s); reopen the store", p->zActive, zWhy);
      }
      pthread_mutex_unlock(&p->mutex);
      rc = SQLITE_IOERR_FSYNC;
    }else{
      p->szSynced = p->szActive;
      pthread_mutex_lock(&p->mutex);
      p->cidSynced = p->cidWritten;
      pthread_mutex_unlock(&p->mutex);
    }
  }
  if( rc!=SQLITE_OK ){
    if( pzErr ){ *pzErr = zErr; zErr = 0; }
    sqlite3_free(zErr);
    pIo->xClose(pIo->pCtx, fd);
    sqlite3_free(zPath);
    return rc;
  }
  pthread_mutex_lock(&p->mutex);
  /* The segments since the active one: live, sealed by other writers. */
  if( p->nSeg>0 ) followForeign(&p->aSeg[p->nSeg-1]);
  for(s=p->segActive+1; s<=segno && rc==SQLITE_OK; s++){
    rc = wal_seg_reserve(p);
    if( rc!=SQLITE_OK ) break;
    memset(&p->aSeg[p->nSeg], 0, sizeof(WalSeg));
    p->aSeg[p->nSeg].segno = s;
    p->aSeg[p->nSeg].baseCid = s==segno ? hdr.baseCid : 0;
    p->aSeg[p->nSeg].szEnd = WAL_SEG_HDR;
    followForeign(&p->aSeg[p->nSeg]);
    p->nSeg++;
  }
  if( rc==SQLITE_OK ){
    fdOld = p->fdActive;
    zOld = p->zActive;
    p->fdActive = fd;
    p->zActive = zPath;
    p->segActive = segno;
    p->szActive = p->szSynced = WAL_SEG_HDR;
    p->szAlloc = WAL_SEG_HDR;
    p->nActiveRec = 0;
    p->usUnsynced = 0;
    fd = -1;
    zPath = 0;
  }else{
    fdOld = -1;
    zOld = 0;
  }
  pthread_mutex_unlock(&p->mutex);
  if( fdOld>=0 ) pIo->xClose(pIo->pCtx, fdOld);
  if( fd>=0 ) pIo->xClose(pIo->pCtx, fd);
  sqlite3_free(zOld);
  sqlite3_free(zPath);
  return rc;
}

int wal_adopt_tail(Wal *p, const WalPos *pTail, uint64_t lastCid,
                   char **pzErr){
  off_t sz = 0;
  int rc = SQLITE_OK;
  const char *zWhy = "";
  uint64_t segEnd = 0, szEnd = 0;
  if( p==0 || pTail==0 || pTail->iOff<WAL_SEG_HDR ) return SQLITE_MISUSE;
  pthread_mutex_lock(&p->mutex);
  segEnd = p->segActive;
  szEnd = p->szActive;
  if( p->bLeader || p->nInflight>0 || p->bReplaying ){
    rc = SQLITE_MISUSE;
    zWhy = ": a flush of this process is running";
  }else if( pTail->segno<p->segActive
         || (pTail->segno==p->segActive && pTail->iOff<p->szActive) ){
    /* Behind this log's own end: only a caller that lost track. */
    rc = SQLITE_MISUSE;
    zWhy = ": it is behind this log's end";
  }
  pthread_mutex_unlock(&p->mutex);
  if( rc!=SQLITE_OK ){
    wal_set_err(pzErr, "wal: cannot adopt tail %llu:%llu of %s now%s "
                "(%llu:%llu)", (unsigned long long)pTail->segno,
                (unsigned long long)pTail->iOff, p->zWalDir, zWhy,
                (unsigned long long)segEnd, (unsigned long long)szEnd);
    return rc;
  }
  if( pTail->segno>p->segActive ) rc = followSwitch(p, pTail->segno, pzErr);
  if( rc==SQLITE_OK ) rc = followLeftover(p, pTail->segno+1, pzErr);
  if( rc==SQLITE_OK && p->pIo->xFstatSize(p->pIo->pCtx, p->fdActive, &sz)!=0 ){
    wal_set_err(pzErr, "wal: cannot stat %s: %s", p->zActive,
                strerror(errno));
    rc = SQLITE_IOERR_FSTAT;
  }
  if( rc!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&p->mutex);
  if( pTail->iOff>p->szActive ){
    followForeign(&p->aSeg[p->nSeg-1]);
    p->nActiveRec++;                   /* rotation may seal it */
  }
  p->szActive = pTail->iOff;
  if( p->szSynced>p->szActive ) p->szSynced = p->szActive;
  p->aSeg[p->nSeg-1].szEnd = p->szActive;
  /* Zeros past the end are the only padding: ours may have been written
  ** over by frames, and other writers' lies further on. */
  p->szAlloc = (uint64_t)sz>p->szActive ? (uint64_t)sz : p->szActive;
  if( lastCid>p->lastCid ) p->lastCid = lastCid;
  if( lastCid>p->cidWritten ) p->cidWritten = lastCid;
  if( lastCid>=p->nextCid ) p->nextCid = lastCid+1;
  pthread_mutex_unlock(&p->mutex);
  return SQLITE_OK;
}
