/*
** segment.c -- the segment files of the root WAL: naming, listing, the
** segment header, creation, sequential frame scanning and retirement.
**
** On-disk format (version 1).  A store's log is the folder <store>/wal/
** holding segment files named by a 16-digit decimal number,
** "0000000000000001.log", "0000000000000002.log", ...; numbers only grow
** (gaps are allowed: they are segments retired out of order).  A retired
** segment is deleted, or renamed "<name>.log.bak" in .bak mode; *.bak and
** any other name are ignored.
**
**   segment header, 48 bytes, little-endian:
**      0   8  magic "DEPOTWAL"
**      8   4  format version (1)
**     12   8  segment number (must match the file name)
**     20   8  base CID: the next CID of the log when the segment was
**             created, so the CID sequence survives the retirement of
**             every record
**     28   8  number of the segment that was active before (0: none)
**     36   8  that segment's size when it was sealed: while both are
**             live, a mismatch means the older one lost or gained bytes
**             (a cut at a frame boundary would otherwise go unnoticed)
**     44   4  CRC32C of bytes 0..43
**
**   then frames, back to back up to the end of the file:
**      0   4  body length n (1..2^30)
**      4   4  CRC32C of (the 4 length bytes + the n body bytes)
**      8   n  record body (format in record.c)
**
**   then zero padding up to the end of the file (possibly none): space
**   preallocated ahead of the appends (append.c), so that a frame's
**   fdatasync overwrites blocks the file already has and flushes no size
**   change.  The frames end where zero bytes run to the end of the file;
**   a frame length is never 0, so a zero frame header cannot start a
**   frame.  Padding is trimmed when a segment is sealed (rotation) and at
**   a clean close, but a segment may keep it after a crash.
**
** A segment is only ever appended to at its end, and a failed append is cut
** off again, so any frame that fails its checks can only be a torn tail of
** the newest segment (wal.c cuts it off at open); in an older segment it is
** corruption.  Zeros followed by anything non-zero are not padding: they
** are checked as a frame (and fail as one, "zero record length").  A new
** segment becomes visible with its header already flushed (the header
** write and the directory are synced before the first frame goes in).
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#define SEG_NAME_DIGITS 16
#define SEG_SCAN_CHUNK  (1024*1024)

char *wal_segment_path(const char *zWalDir, uint64_t segno){
  return sqlite3_mprintf("%s/%016llu.log", zWalDir,
                         (unsigned long long)segno);
}

/* Segment number of file name z, or 0 when z is not a segment name. */
static uint64_t segParseName(const char *z){
  uint64_t v = 0;
  int i;
  for(i=0; i<SEG_NAME_DIGITS; i++){
    if( z[i]<'0' || z[i]>'9' ) return 0;
    v = v*10 + (uint64_t)(z[i]-'0');
  }
  return strcmp(z+SEG_NAME_DIGITS, ".log")==0 ? v : 0;
}

static int segCmp(const void *a, const void *b){
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x<y ? -1 : x>y ? 1 : 0;
}

/* Appends v to the growing array *pa. */
static int segPush(uint64_t **pa, int *pn, int *pnAlloc, uint64_t v){
  if( *pn==*pnAlloc ){
    int nNew = *pnAlloc ? *pnAlloc*2 : 16;
    uint64_t *aNew = sqlite3_realloc64(*pa, sizeof(uint64_t)*nNew);
    if( aNew==0 ) return SQLITE_NOMEM;
    *pa = aNew;
    *pnAlloc = nNew;
  }
  (*pa)[(*pn)++] = v;
  return SQLITE_OK;
}

int wal_segment_list(const char *zWalDir, uint64_t **paSeg, int *pnSeg,
                     char **pzErr){
  DIR *pDir;
  struct dirent *pEnt;
  uint64_t *a = 0;
  int n = 0, nAlloc = 0, rc = SQLITE_OK;
  *paSeg = 0;
  *pnSeg = 0;
  pDir = opendir(zWalDir);
  if( pDir==0 ){
    *pzErr = sqlite3_mprintf("wal: cannot list %s: %s", zWalDir,
                             strerror(errno));
    return SQLITE_CANTOPEN;
  }
  while( rc==SQLITE_OK && (pEnt = readdir(pDir))!=0 ){
    uint64_t segno = segParseName(pEnt->d_name);
    if( segno>0 ) rc = segPush(&a, &n, &nAlloc, segno);
  }
  closedir(pDir);
  if( rc!=SQLITE_OK ){
    sqlite3_free(a);
    return rc;
  }
  if( n>1 ) qsort(a, n, sizeof(uint64_t), segCmp);
  *paSeg = a;
  *pnSeg = n;
  return SQLITE_OK;
}

static void segEncodeHeader(uint8_t *a, const WalSegHdr *pHdr){
  memcpy(a, WAL_SEG_MAGIC, WAL_SEG_MAGIC_LEN);
  wal_put_u32(a+8, WAL_FORMAT_VERSION);
  wal_put_u64(a+12, pHdr->segno);
  wal_put_u64(a+20, pHdr->baseCid);
  wal_put_u64(a+28, pHdr->prevSegno);
  wal_put_u64(a+36, pHdr->prevEnd);
  wal_put_u32(a+44, wal_crc32c(0, a, 44));
}

/* Writes and flushes the header of a new segment and its directory entry.
** Returns an SQLite code and sets *pzErr on failure. */
static int segWriteHeader(const WalIo *pIo, int fd, const char *zPath,
                          const char *zWalDir, const WalSegHdr *pHdr,
                          char **pzErr){
  uint8_t aHdr[WAL_SEG_HDR];
  ssize_t got;
  segEncodeHeader(aHdr, pHdr);
  got = pIo->xPwrite(pIo->pCtx, fd, aHdr, WAL_SEG_HDR, 0);
  if( got!=WAL_SEG_HDR ){
    int err = got<0 ? errno : EIO;
    *pzErr = sqlite3_mprintf("wal: write of %s failed: %s", zPath,
                             got<0 ? strerror(err) : "short write");
    return wal_errno_rc(err, SQLITE_IOERR_WRITE);
  }
  if( pIo->xFsync(pIo->pCtx, fd)!=0 ){
    *pzErr = sqlite3_mprintf("wal: fdatasync of %s failed: %s", zPath,
                             strerror(errno));
    return SQLITE_IOERR_FSYNC;
  }
  if( pIo->xSyncDir(pIo->pCtx, zWalDir)!=0 ){
    *pzErr = sqlite3_mprintf("wal: fsync of directory %s failed: %s",
                             zWalDir, strerror(errno));
    return SQLITE_IOERR_DIR_FSYNC;
  }
  return SQLITE_OK;
}

int wal_segment_create(const WalIo *pIo, const char *zWalDir,
                       const WalSegHdr *pHdr, int *pFd, char **pzErr){
  char *zPath = wal_segment_path(zWalDir, pHdr->segno);
  int fd, rc;
  *pFd = -1;
  if( zPath==0 ) return SQLITE_NOMEM;
  fd = pIo->xOpen(pIo->pCtx, zPath, O_RDWR|O_CREAT|O_EXCL, 0644);
  if( fd<0 ){
    int err = errno;
    *pzErr = sqlite3_mprintf("wal: cannot create %s: %s", zPath,
                             strerror(err));
    sqlite3_free(zPath);
    return wal_errno_rc(err, SQLITE_CANTOPEN);
  }
  rc = segWriteHeader(pIo, fd, zPath, zWalDir, pHdr, pzErr);
  if( rc!=SQLITE_OK ){
    pIo->xClose(pIo->pCtx, fd);
    pIo->xUnlink(pIo->pCtx, zPath);
  }else{
    *pFd = fd;
  }
  sqlite3_free(zPath);
  return rc;
}

int wal_segment_read_header(const WalIo *pIo, int fd, const char *zPath,
                            uint64_t segno, WalSegHdr *pHdr, int *pbShort,
                            char **pzErr){
  uint8_t a[WAL_SEG_HDR];
  ssize_t got = pIo->xPread(pIo->pCtx, fd, a, WAL_SEG_HDR, 0);
  uint32_t version;
  *pbShort = 0;
  if( got<0 ){
    *pzErr = sqlite3_mprintf("wal: read of %s failed: %s", zPath,
                             strerror(errno));
    return SQLITE_IOERR_READ;
  }
  if( got<WAL_SEG_HDR ){
    *pbShort = 1;
    *pzErr = sqlite3_mprintf("wal: corrupt segment %s: %d bytes, shorter "
                             "than its %d-byte header", zPath, (int)got,
                             WAL_SEG_HDR);
    return SQLITE_CORRUPT;
  }
  version = wal_get_u32(a+8);
  if( memcmp(a, WAL_SEG_MAGIC, WAL_SEG_MAGIC_LEN)!=0
   || wal_get_u32(a+44)!=wal_crc32c(0, a, 44)
   || wal_get_u64(a+12)!=segno ){
    *pzErr = sqlite3_mprintf("wal: corrupt segment %s at offset 0: "
                             "bad segment header", zPath);
    return SQLITE_CORRUPT;
  }
  if( version!=WAL_FORMAT_VERSION ){
    *pzErr = sqlite3_mprintf("wal: segment %s has format version %u, this "
                             "build reads version %d", zPath, version,
                             WAL_FORMAT_VERSION);
    return SQLITE_CANTOPEN;
  }
  pHdr->segno = segno;
  pHdr->baseCid = wal_get_u64(a+20);
  pHdr->prevSegno = wal_get_u64(a+28);
  pHdr->prevEnd = wal_get_u64(a+36);
  return SQLITE_OK;
}

int wal_segment_retire(const WalIo *pIo, const char *zWalDir,
                       uint64_t segno, int bKeepBak, char **pzErr){
  char *zPath = wal_segment_path(zWalDir, segno);
  char *zBak = 0;
  int rc = SQLITE_OK;
  if( zPath==0 ) return SQLITE_NOMEM;
  if( bKeepBak ){
    zBak = sqlite3_mprintf("%s.bak", zPath);
    if( zBak==0 ){
      rc = SQLITE_NOMEM;
    }else if( pIo->xRename(pIo->pCtx, zPath, zBak)!=0 ){
      *pzErr = sqlite3_mprintf("wal: cannot rename %s to %s: %s", zPath,
                               zBak, strerror(errno));
      rc = SQLITE_IOERR_DELETE;
    }
  }else if( pIo->xUnlink(pIo->pCtx, zPath)!=0 && errno!=ENOENT ){
    *pzErr = sqlite3_mprintf("wal: cannot delete %s: %s", zPath,
                             strerror(errno));
    rc = SQLITE_IOERR_DELETE;
  }
  sqlite3_free(zBak);
  sqlite3_free(zPath);
  return rc;
}

void wal_segment_trim(const WalIo *pIo, int fd, const char *zPath,
                      uint64_t iEnd){
  off_t sz = 0;
  if( pIo->xFstatSize(pIo->pCtx, fd, &sz)!=0 || (uint64_t)sz<=iEnd ) return;
  if( pIo->xFtruncate(pIo->pCtx, fd, (off_t)iEnd)!=0 ){
    sqlite3_log(SQLITE_IOERR_TRUNCATE, "wal: cannot trim the padding off %s "
                "at offset %llu: %s", zPath, (unsigned long long)iEnd,
                strerror(errno));
  }
}

/* ----------------------------------------------------------------- scan */

void wal_scan_init(WalScan *p, const WalIo *pIo, int fd, const char *zPath,
                   uint64_t iStart, uint64_t iEnd){
  memset(p, 0, sizeof(*p));
  p->pIo = pIo;
  p->fd = fd;
  p->zPath = zPath;
  p->iOff = iStart;
  p->iEnd = iEnd;
}

void wal_scan_finish(WalScan *p){
  sqlite3_free(p->aBuf);
  p->aBuf = 0;
  p->nBuf = p->nBufData = 0;
}

/* Makes bytes [iOff, iOff+n) of the file available in the buffer (the
** caller checked they lie below iEnd); returns a pointer to them, or NULL
** with *pRc set. */
static const uint8_t *segScanFetch(WalScan *p, uint64_t iOff, size_t n,
                                   int *pRc){
  size_t nWant;
  ssize_t got;
  if( iOff>=p->iBufOff && iOff+n<=p->iBufOff+p->nBufData ){
    return p->aBuf + (iOff - p->iBufOff);
  }
  nWant = SEG_SCAN_CHUNK;
  if( nWant > p->iEnd - iOff ) nWant = (size_t)(p->iEnd - iOff);
  if( nWant < n ) nWant = n;
  if( nWant > p->nBuf ){
    sqlite3_free(p->aBuf);
    p->nBuf = p->nBufData = 0;
    p->aBuf = sqlite3_malloc64(nWant);
    if( p->aBuf==0 ){ *pRc = SQLITE_NOMEM; return 0; }
    p->nBuf = nWant;
  }
  got = p->pIo->xPread(p->pIo->pCtx, p->fd, p->aBuf, nWant, (off_t)iOff);
  p->iBufOff = iOff;
  p->nBufData = got>0 ? (size_t)got : 0;
  if( got<0 ){ *pRc = SQLITE_IOERR_READ; return 0; }
  if( (size_t)got<n ){ *pRc = SQLITE_CORRUPT; return 0; }
  return p->aBuf;
}

/* Non-zero if a[0..n) are all zero bytes. */
static int segAllZero(const uint8_t *a, size_t n){
  return n==0 || (a[0]==0 && memcmp(a, a+1, n-1)==0);
}

/* 1 if the bytes from p->iOff to p->iEnd are all zero (padding), 0 if
** not, or -1 with *pRc set when they cannot be read.  Only called when
** the first byte there is zero, so a frame costs one byte compare. */
static int segScanIsPadding(WalScan *p, int *pRc){
  uint64_t iOff = p->iOff;
  while( iOff<p->iEnd ){
    size_t n = SEG_SCAN_CHUNK;
    const uint8_t *a;
    if( n > p->iEnd - iOff ) n = (size_t)(p->iEnd - iOff);
    a = segScanFetch(p, iOff, n, pRc);
    if( a==0 ) return -1;
    if( !segAllZero(a, n) ) return 0;
    iOff += n;
  }
  return 1;
}

int wal_scan_next(WalScan *p, const uint8_t **paBody, size_t *pnBody,
                  uint64_t *piFrame, const char **pzWhy){
  const uint8_t *aHdr;
  size_t nBody = 0;
  int rc = SQLITE_OK, bPad;
  *piFrame = p->iOff;
  if( p->iOff>=p->iEnd ) return SQLITE_DONE;
  aHdr = segScanFetch(p, p->iOff, 1, &rc);
  if( aHdr==0 ){ *pzWhy = "file ends early"; return rc; }
  if( aHdr[0]==0 ){
    bPad = segScanIsPadding(p, &rc);
    if( bPad<0 ){ *pzWhy = "file ends early"; return rc; }
    if( bPad ) return SQLITE_DONE;
  }
  if( p->iEnd - p->iOff < WAL_FRAME_HDR ){
    *pzWhy = "torn record header";
    return SQLITE_CORRUPT;
  }
  aHdr = segScanFetch(p, p->iOff, WAL_FRAME_HDR, &rc);
  if( aHdr==0 ){ *pzWhy = "file ends early"; return rc; }
  *pzWhy = wal_frame_length(aHdr, p->iEnd - p->iOff - WAL_FRAME_HDR, &nBody);
  if( *pzWhy ) return SQLITE_CORRUPT;
  aHdr = segScanFetch(p, p->iOff, WAL_FRAME_HDR + nBody, &rc);
  if( aHdr==0 ){ *pzWhy = "file ends early"; return rc; }
  if( !wal_frame_crc_ok(aHdr, aHdr+WAL_FRAME_HDR, nBody) ){
    *pzWhy = "checksum mismatch";
    return SQLITE_CORRUPT;
  }
  *paBody = aHdr + WAL_FRAME_HDR;
  *pnBody = nBody;
  p->iOff += WAL_FRAME_HDR + nBody;
  return SQLITE_ROW;
}
