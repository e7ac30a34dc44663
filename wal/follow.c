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

/* The header of segment segno (which must exist: the log has moved past
** the segment before it). */
static int followHeader(const WalIo *pIo, const char *zWalDir, uint64_t segno,
                        WalSegHdr *pHdr, char **pzErr){
  char *zPath = 0;
  int fd, bShort = 0;
  int rc = followOpen(pIo, zWalDir, segno, &fd, &zPath, pzErr);
  if( rc==SQLITE_NOTFOUND ){
    /* The next segment must exist while the target lies in or past it. */
    rc = SQLITE_CORRUPT;
  }
  if( rc!=SQLITE_OK ){
    sqlite3_free(zPath);
    return rc;
  }
  rc = wal_segment_read_header(pIo, fd, zPath, segno, pHdr, &bShort, pzErr);
  pIo->xClose(pIo->pCtx, fd);
  sqlite3_free(zPath);
  return rc;
}

/* Hands the frames of open segment fd (zPath) from *piPos up to iEnd to
** xRecord, moving *piPos past each record the callback took; every byte of
** the range must be whole frames. */
static int followFrames(const WalIo *pIo, int fd, const char *zPath,
                        uint64_t *piPos, uint64_t iEnd,
                        int (*xRecord)(void*, const WalRecord*), void *pCtx,
                        char **pzErr){
  WalScan scan;
  const uint8_t *aBody;
  size_t nBody;
  uint64_t iFrame = *piPos;
  const char *zWhy = 0;
  int rc;
  wal_scan_init(&scan, pIo, fd, zPath, *piPos, iEnd);
  while( (rc = wal_scan_next(&scan, &aBody, &nBody, &iFrame, &zWhy))
         ==SQLITE_ROW ){
    WalRecord *pRec = 0;
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
    }
    if( rc!=SQLITE_OK ) break;
  }
  if( rc==SQLITE_DONE && iFrame<iEnd ){
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

int wal_follow(const char *zDir, const WalIo *pIo, WalPos *pFrom,
               const WalPos *pTo, int (*xRecord)(void*, const WalRecord*),
               void *pCtx, char **pzErr){
  char *zWalDir;
  int rc = SQLITE_OK;
  if( zDir==0 || pFrom==0 || pTo==0 || xRecord==0 ){
    wal_set_err(pzErr, "wal: following the log needs a store, two "
                "positions and a callback");
    return SQLITE_MISUSE;
  }
  if( pFrom->segno>pTo->segno
   || (pFrom->segno==pTo->segno && pFrom->iOff>pTo->iOff)
   || pFrom->iOff<WAL_SEG_HDR || pTo->iOff<WAL_SEG_HDR ){
    wal_set_err(pzErr, "wal: cannot follow the log from %llu:%llu to "
                "%llu:%llu", (unsigned long long)pFrom->segno,
                (unsigned long long)pFrom->iOff,
                (unsigned long long)pTo->segno, (unsigned long long)pTo->iOff);
    return SQLITE_MISUSE;
  }
  if( pIo==0 ) pIo = wal_io_posix();
  zWalDir = sqlite3_mprintf("%s/wal", zDir);
  if( zWalDir==0 ) return SQLITE_NOMEM;
  while( rc==SQLITE_OK
      && (pFrom->segno<pTo->segno || pFrom->iOff<pTo->iOff) ){
    WalSegHdr next;
    uint64_t iEnd = pTo->iOff;
    uint64_t segNext = pFrom->segno+1;
    char *zPath = 0;
    int fd = -1;
    memset(&next, 0, sizeof(next));
    rc = followOpen(pIo, zWalDir, pFrom->segno, &fd, &zPath, pzErr);
    if( rc==SQLITE_OK && pFrom->segno<pTo->segno ){
      /* Segments are numbered one after the other: the one after the
      ** current segment names where the current one was sealed. */
      rc = followHeader(pIo, zWalDir, segNext, &next, pzErr);
      if( rc==SQLITE_OK && (next.prevSegno!=pFrom->segno
                            || next.prevEnd<pFrom->iOff) ){
        wal_set_err(pzErr, "wal: segment %llu does not continue segment "
            "%llu at offset %llu (it names segment %llu, sealed at %llu)",
            (unsigned long long)segNext, (unsigned long long)pFrom->segno,
            (unsigned long long)pFrom->iOff,
            (unsigned long long)next.prevSegno,
            (unsigned long long)next.prevEnd);
        rc = SQLITE_CORRUPT;
      }
      iEnd = next.prevEnd;
    }
    if( rc==SQLITE_OK && pFrom->iOff<iEnd ){
      rc = followFrames(pIo, fd, zPath, &pFrom->iOff, iEnd, xRecord, pCtx,
                        pzErr);
    }
    if( fd>=0 ) pIo->xClose(pIo->pCtx, fd);
    sqlite3_free(zPath);
    if( rc!=SQLITE_OK ) break;
    if( pFrom->segno<pTo->segno ){
      pFrom->segno = segNext;
      pFrom->iOff = WAL_SEG_HDR;
    }
  }
  sqlite3_free(zWalDir);
  return rc;
}
