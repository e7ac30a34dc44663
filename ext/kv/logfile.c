/*
** logfile.c -- the files of a kv_log store, shared by logstore.c (load,
** appends, reads) and logcompact.c (compaction): file names and headers,
** I/O with messages that name the file, reference-counted files and file
** sets, checked reads of one record frame, the active file's sync and
** roll, and the MANIFEST.  The file format is in logstore.h; the
** structures are in logstore_int.h.
**
** MANIFEST (all integers little-endian):
**   "dkvman01" | u32 M (merged-through log number) | u64 maxCid (highest
**   CID of the merged data) | u32 n | n x u32 merged-file numbers | u32
**   crc32c of everything before it
** It is only ever replaced whole: MANIFEST.tmp is written and synced, then
** renamed over MANIFEST, then the directory is synced.
**
** Locking: the functions named *_locked run with KvLogStore.muWrite held
** and take KvLogStore.mu themselves for the short pointer swaps; the
** others take no lock (file and set reference counts are atomic).
*/
#define _GNU_SOURCE 1            /* F_OFD_SETLK */
#include "config.h"
#include "ext/kv/logstore_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static const uint8_t klfMagic[8] = { 'd','k','v','l','o','g','0','1' };
static const uint8_t klfManMagic[8] = { 'd','k','v','m','a','n','0','1' };
#define KL_MAN_MAXLIST (1<<20)
#define KL_MAN_FIXED   28          /* magic, M, maxCid, n, crc */

/* ------------------------------------------------------------ helpers -- */

/* The SQLite code for an errno from a write. */
int kl_errno_rc(int err, int rcDefault){
  if( err==ENOSPC || err==EFBIG || err==EDQUOT ) return SQLITE_FULL;
  return rcDefault;
}

void kl_set_err(char **pzErr, char *zMsg){
  if( pzErr ){
    sqlite3_free(*pzErr);
    *pzErr = zMsg;
  }else{
    sqlite3_free(zMsg);
  }
}

int kl_io_err(char **pzErr, int rc, const char *zOp, const char *zPath,
              int err){
  kl_set_err(pzErr, sqlite3_mprintf("kv_log: %s of %s failed: %s", zOp, zPath,
                                  strerror(err)));
  return rc;
}

int kl_corrupt(char **pzErr, const char *zPath, int64_t iOff,
               const char *zWhy){
  kl_set_err(pzErr, sqlite3_mprintf("kv_log: %s is corrupt at offset %lld: %s",
                                  zPath, (long long)iOff, zWhy));
  return SQLITE_CORRUPT;
}

int kl_buf_reserve(KvLogBuf *pBuf, int64_t n){
  int64_t nNew;
  uint8_t *aNew;
  if( n<=pBuf->nAlloc ) return SQLITE_OK;
  if( n>0x7fff0000 ) return SQLITE_NOMEM;
  nNew = pBuf->nAlloc ? 2*(int64_t)pBuf->nAlloc : 4096;
  while( nNew<n ) nNew *= 2;
  if( nNew>0x7fff0000 ) nNew = n;
  aNew = sqlite3_realloc64(pBuf->a, (sqlite3_uint64)nNew);
  if( aNew==0 ) return SQLITE_NOMEM;
  pBuf->a = aNew;
  pBuf->nAlloc = (int)nNew;
  return SQLITE_OK;
}

void kv_logbuf_free(KvLogBuf *pBuf){
  if( pBuf ){
    sqlite3_free(pBuf->a);
    memset(pBuf, 0, sizeof(*pBuf));
  }
}

char *kl_path(const char *zDir, uint32_t iNum, int eKind){
  return sqlite3_mprintf("%s/%08u.%s", zDir, iNum,
                         eKind==KL_KIND_LOG ? "klog" : "kmrg");
}

int kl_step(KvLogStore *p, int eStep, char **pzErr){
  if( p->cfg.xStep && p->cfg.xStep(p->cfg.pStepCtx, eStep) ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: compaction of %s stopped at "
                                    "step %d", p->zDir, eStep));
    return SQLITE_ABORT;
  }
  return SQLITE_OK;
}

/* --------------------------------------------------------------- I/O --- */

/* Write all n bytes at iOff.  A short write is continued; the error of
** the continuation (EFBIG past RLIMIT_FSIZE, ENOSPC) is the one reported. */
int kl_write(KvLogStore *p, KlFile *pFile, const void *pData, size_t n,
             int64_t iOff, char **pzErr){
  size_t nDone = 0;
  while( nDone<n ){
    ssize_t r = p->pIo->xPwrite(p->pIo->pCtx, pFile->fd,
                                (const uint8_t*)pData+nDone, n-nDone,
                                (off_t)(iOff+nDone));
    if( r<0 && errno==EINTR ) continue;
    if( r<0 ){
      int err = errno;
      return kl_io_err(pzErr, kl_errno_rc(err, SQLITE_IOERR_WRITE), "write",
                       pFile->zPath, err);
    }
    if( r==0 ){
      kl_set_err(pzErr, sqlite3_mprintf("kv_log: write of %s failed: no "
               "progress after %lld of %lld bytes", pFile->zPath,
               (long long)nDone, (long long)n));
      return SQLITE_IOERR_WRITE;
    }
    nDone += (size_t)r;
  }
  return SQLITE_OK;
}

/* Read exactly n bytes at iOff.  Fewer bytes (EOF) is SQLITE_IOERR_SHORT_READ
** without a message: callers turn it into a corruption report. */
int kl_read(KvLogStore *p, const WalIo *pIo, KlFile *pFile, void *pData,
                  size_t n, int64_t iOff, char **pzErr){
  size_t nDone = 0;
  (void)p;
  while( nDone<n ){
    ssize_t r = pIo->xPread(pIo->pCtx, pFile->fd, (uint8_t*)pData+nDone,
                            n-nDone, (off_t)(iOff+nDone));
    if( r<0 ){
      if( errno==EINTR ) continue;
      return kl_io_err(pzErr, SQLITE_IOERR_READ, "read", pFile->zPath, errno);
    }
    if( r==0 ) return SQLITE_IOERR_SHORT_READ;
    nDone += (size_t)r;
  }
  return SQLITE_OK;
}

int kl_fsync(KvLogStore *p, KlFile *pFile, char **pzErr){
  if( p->pIo->xFsync(p->pIo->pCtx, pFile->fd) ){
    return kl_io_err(pzErr, SQLITE_IOERR_FSYNC, "sync", pFile->zPath, errno);
  }
  return SQLITE_OK;
}

int kl_syncdir(KvLogStore *p, char **pzErr){
  if( p->pIo->xSyncDir(p->pIo->pCtx, p->zDir) ){
    return kl_io_err(pzErr, SQLITE_IOERR_DIR_FSYNC, "directory sync", p->zDir,
                   errno);
  }
  return SQLITE_OK;
}

/* ------------------------------------------------------ files and sets -- */

KlFile *kl_file_new(KvLogStore *p, uint32_t iNum, int eKind){
  KlFile *pFile = sqlite3_malloc64(sizeof(KlFile));
  if( pFile==0 ) return 0;
  memset(pFile, 0, sizeof(*pFile));
  pFile->iNum = iNum;
  pFile->iKey = iNum | (eKind==KL_KIND_MRG ? KL_KEY_MRG : 0);
  pFile->eKind = eKind;
  pFile->fd = -1;
  pFile->nRef = 1;
  pFile->pIo = p->pIo;
  pFile->zPath = kl_path(p->zDir, iNum, eKind);
  if( pFile->zPath==0 ){
    sqlite3_free(pFile);
    return 0;
  }
  return pFile;
}

static void klfFileRef(KlFile *pFile){
  __atomic_add_fetch(&pFile->nRef, 1, __ATOMIC_RELAXED);
}

void kl_file_unref(KlFile *pFile){
  if( pFile==0 ) return;
  if( __atomic_sub_fetch(&pFile->nRef, 1, __ATOMIC_ACQ_REL)>0 ) return;
  kl_cache_drop_file(pFile);
  if( pFile->fd>=0 ) pFile->pIo->xClose(pFile->pIo->pCtx, pFile->fd);
  if( __atomic_load_n(&pFile->bDoomed, __ATOMIC_ACQUIRE) ){
    /* A failed unlink leaves garbage that the next open deletes. */
    pFile->pIo->xUnlink(pFile->pIo->pCtx, pFile->zPath);
  }
  sqlite3_free(pFile->zPath);
  sqlite3_free(pFile);
}

void kl_file_header(uint8_t *a, uint32_t iNum, int eKind){
  memcpy(a, klfMagic, 8);
  wal_put_u32(a+8, iNum);
  wal_put_u32(a+12, (uint32_t)eKind);
}

const char *kl_header_check(const uint8_t *a, const KlFile *pFile){
  if( memcmp(a, klfMagic, 8)!=0 ) return "bad magic";
  if( wal_get_u32(a+8)!=pFile->iNum ) return "header names another file number";
  if( wal_get_u32(a+12)!=(uint32_t)pFile->eKind ) return "header has another kind";
  return 0;
}

/* Create (truncating) file iNum of kind eKind and write its header.  On
** failure nothing is left behind. */
int kl_file_create(KvLogStore *p, uint32_t iNum, int eKind, KlFile **ppFile,
                   char **pzErr){
  uint8_t aHdr[KL_HDR];
  int rc;
  KlFile *pFile = kl_file_new(p, iNum, eKind);
  *ppFile = 0;
  if( pFile==0 ) return SQLITE_NOMEM;
  pFile->fd = p->pIo->xOpen(p->pIo->pCtx, pFile->zPath,
                            O_RDWR|O_CREAT|O_TRUNC|O_CLOEXEC, 0644);
  if( pFile->fd<0 ){
    rc = kl_io_err(pzErr, SQLITE_CANTOPEN, "create", pFile->zPath, errno);
    kl_file_unref(pFile);
    return rc;
  }
  kl_file_header(aHdr, iNum, eKind);
  rc = kl_write(p, pFile, aHdr, KL_HDR, 0, pzErr);
  if( rc!=SQLITE_OK ){
    __atomic_store_n(&pFile->bDoomed, 1, __ATOMIC_RELEASE);
    kl_file_unref(pFile);
    return rc;
  }
  pFile->sz = KL_HDR;
  *ppFile = pFile;
  return SQLITE_OK;
}

KlSet *kl_set_new(int nFile){
  KlSet *pSet = sqlite3_malloc64(sizeof(KlSet) + sizeof(KlFile*)*(nFile+1));
  if( pSet==0 ) return 0;
  pSet->nRef = 1;
  pSet->nFile = 0;
  pSet->apFile = (KlFile**)&pSet[1];
  return pSet;
}

KlSet *kl_set_ref(KlSet *pSet){
  __atomic_add_fetch(&pSet->nRef, 1, __ATOMIC_RELAXED);
  return pSet;
}

void kl_set_unref(KlSet *pSet){
  int i;
  if( pSet==0 ) return;
  if( __atomic_sub_fetch(&pSet->nRef, 1, __ATOMIC_ACQ_REL)>0 ) return;
  for(i=0; i<pSet->nFile; i++) kl_file_unref(pSet->apFile[i]);
  sqlite3_free(pSet);
}

KlFile *kl_set_find(KlSet *pSet, uint32_t iKey){
  int lo = 0, hi = pSet->nFile-1;
  while( lo<=hi ){
    int mid = (lo+hi)/2;
    uint32_t x = pSet->apFile[mid]->iKey;
    if( x==iKey ) return pSet->apFile[mid];
    if( x<iKey ) lo = mid+1; else hi = mid-1;
  }
  return 0;
}

/* A copy of pOld plus pAdd (a new reference is taken on every file), kept
** in iKey order. */
KlSet *kl_set_with(KlSet *pOld, KlFile *pAdd){
  KlSet *pNew = kl_set_new(pOld->nFile+1);
  int i;
  if( pNew==0 ) return 0;
  for(i=0; i<pOld->nFile; i++){
    if( pOld->apFile[i]->iKey>pAdd->iKey && pNew->nFile==i ){
      klfFileRef(pAdd);
      pNew->apFile[pNew->nFile++] = pAdd;
    }
    klfFileRef(pOld->apFile[i]);
    pNew->apFile[pNew->nFile++] = pOld->apFile[i];
  }
  if( pNew->nFile==pOld->nFile ){
    klfFileRef(pAdd);
    pNew->apFile[pNew->nFile++] = pAdd;
  }
  return pNew;
}

/* --------------------------------------------------------- record read -- */

/* Check the frame at a (nAvail bytes available) and parse it.  Returns
** NULL if it is whole and valid, else the reason.  klfFrameParse is the
** same, inlined into the read of a scan's next record. */
static inline __attribute__((always_inline)) const char *klfFrameParse(
  const uint8_t *a, int64_t nAvail, KlFrame *pOut
){
  uint32_t nBody, nKey;
  if( nAvail<KL_FRAME_HDR ) return "truncated frame header";
  nBody = wal_get_u32(a);
  if( nBody<KL_BODY_FIXED+1 || nBody>KL_MAX_BODY ){
    return "impossible record length";
  }
  if( (int64_t)nBody+KL_FRAME_HDR>nAvail ) return "truncated record";
  if( wal_crc32c(wal_crc32c(0, a, 4), a+KL_FRAME_HDR, nBody)!=wal_get_u32(a+4) ){
    return "checksum mismatch";
  }
  a += KL_FRAME_HDR;
  nKey = wal_get_u32(a+9);
  if( (a[0] & ~(KL_FLAG_DELETE|KL_FLAG_LAST))!=0 ) return "unknown flags";
  if( nKey<1 || nKey>nBody-KL_BODY_FIXED ) return "impossible key length";
  pOut->flags = a[0];
  pOut->cid = wal_get_u64(a+1);
  pOut->aKey = a+KL_BODY_FIXED;
  pOut->nKey = nKey;
  pOut->aVal = a+KL_BODY_FIXED+nKey;
  pOut->nVal = nBody-KL_BODY_FIXED-nKey;
  return 0;
}
const char *kl_frame_parse(const uint8_t *a, int64_t nAvail, KlFrame *pOut){
  return klfFrameParse(a, nAvail, pOut);
}

/* Read the frame at *pLoc from the set's file into pOut and check it (and
** that it holds key aKey when aKey is not NULL).  With bValueOnly, pOut
** is left holding just the value; else the whole frame. */
int kl_read_frame(KlSet *pSet, const KlLoc *pLoc, const void *aKey, int nKey,
                  KvLogBuf *pOut, int bValueOnly, char **pzErr){
  KlFile *pFile = kl_set_find(pSet, pLoc->iFile);
  KlFrame fr;
  const char *zWhy;
  int rc;
  if( pFile==0 ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: file %08u is not in the "
                                    "store", pLoc->iFile & ~KL_KEY_MRG));
    return SQLITE_CORRUPT;
  }
  rc = kl_buf_reserve(pOut, pLoc->nFrame);
  if( rc ) return rc;
  rc = kl_read(0, pFile->pIo, pFile, pOut->a, pLoc->nFrame,
              (int64_t)pLoc->iOff, pzErr);
  if( rc==SQLITE_IOERR_SHORT_READ ){
    return kl_corrupt(pzErr, pFile->zPath, (int64_t)pLoc->iOff,
                     "record beyond the end of the file");
  }
  if( rc ) return rc;
  zWhy = kl_frame_parse(pOut->a, pLoc->nFrame, &fr);
  if( zWhy==0 && aKey && (fr.nKey!=(uint32_t)nKey
                          || memcmp(fr.aKey, aKey, nKey)!=0) ){
    zWhy = "record holds another key";
  }
  if( zWhy ) return kl_corrupt(pzErr, pFile->zPath, (int64_t)pLoc->iOff, zWhy);
  if( bValueOnly ){
    memmove(pOut->a, fr.aVal, fr.nVal);
    pOut->n = (int)fr.nVal;
  }else{
    pOut->n = (int)pLoc->nFrame;
  }
  return SQLITE_OK;
}

/* The frame at a, whose checksum was checked when it was first read from
** its chunk: its lengths (nFrame, the index's, must be the frame's) and
** fields.  NULL if they hold, else the reason. */
static inline __attribute__((always_inline)) const char *klfFrameFields(
  const uint8_t *a, uint32_t nFrame, KlFrame *pOut
){
  uint32_t nBody = wal_get_u32(a), nKey;
  if( (uint64_t)nBody+KL_FRAME_HDR!=nFrame ) return "impossible record length";
  a += KL_FRAME_HDR;
  nKey = wal_get_u32(a+9);
  if( nKey<1 || nKey>nBody-KL_BODY_FIXED ) return "impossible key length";
  pOut->aKey = a+KL_BODY_FIXED;
  pOut->nKey = nKey;
  pOut->aVal = a+KL_BODY_FIXED+nKey;
  pOut->nVal = nBody-KL_BODY_FIXED-nKey;
  return 0;
}

int kl_read_frame_in(KlSet *pSet, const KlLoc *pLoc, const void *aKey,
                     int nKey, KlWindow *pWin, KvLogBuf *pOut,
                     const uint8_t **paVal, int *pnVal, char **pzErr){
  KlFrame fr;
  const char *zWhy;
  const uint8_t *a;
  if( pWin->pChunk==0 || pWin->iFile!=pLoc->iFile || pLoc->iOff<pWin->iOff
   || pLoc->iOff+pLoc->nFrame > pWin->iOff+(uint64_t)pWin->n ){
    KlFile *pFile = kl_set_find(pSet, pLoc->iFile);
    if( pFile==0 || kl_window_fill(pFile, pLoc, pWin)!=SQLITE_OK ){
      int rc = kl_read_frame(pSet, pLoc, aKey, nKey, pOut, 1, pzErr);
      *paVal = pOut->a;
      *pnVal = pOut->n;
      return rc;
    }
  }
  a = pWin->a + (pLoc->iOff - pWin->iOff);
  if( kl_window_checked(pWin, pLoc->iOff) ){
    zWhy = klfFrameFields(a, pLoc->nFrame, &fr);
  }else{
    zWhy = klfFrameParse(a, pLoc->nFrame, &fr);
    if( zWhy==0 && fr.nKey+KL_BODY_FIXED+fr.nVal+KL_FRAME_HDR!=pLoc->nFrame ){
      zWhy = "impossible record length";
    }
    if( zWhy==0 ) kl_window_mark(pWin, pLoc->iOff);
  }
  if( zWhy==0 && aKey && (fr.nKey!=(uint32_t)nKey
                          || !kl_same_bytes(fr.aKey, aKey, nKey)) ){
    zWhy = "record holds another key";
  }
  if( zWhy ){
    return kl_corrupt(pzErr, kl_set_find(pSet, pLoc->iFile)->zPath,
                      (int64_t)pLoc->iOff, zWhy);
  }
  *paVal = fr.aVal;
  *pnVal = (int)fr.nVal;
  return SQLITE_OK;
}

int kl_read_frame_ahead(KlSet *pSet, const KlLoc *pLoc, const void *aKey,
                        int nKey, KlWindow *pWin, KvLogBuf *pOut,
                        char **pzErr){
  const uint8_t *a = 0;
  int n = 0;
  int rc = kl_read_frame_in(pSet, pLoc, aKey, nKey, pWin, pOut, &a, &n, pzErr);
  if( rc!=SQLITE_OK || (a!=0 && a==pOut->a) ) return rc; /* read into pOut */
  if( n>0 ){
    if( kl_buf_reserve(pOut, n) ) return SQLITE_NOMEM;
    memcpy(pOut->a, a, n);
  }
  pOut->n = n;
  return SQLITE_OK;
}

/* ------------------------------------------------------ active file -- */

void kl_delta_free(KlDelta *p){
  while( p ){
    KlDelta *pNext = p->pNext;
    sqlite3_free(p);
    p = pNext;
  }
}

/* Remember the current state as the last durable one (muWrite held). */
void kl_sync_point_locked(KvLogStore *p){
  kv_map_unref(p->pSynced);
  p->pSynced = kv_map_ref(p->pIndex);
  p->cntSynced = p->cnt;
  p->bDirty = 0;
}

/* A sync failed: forget everything applied since the last sync point and
** refuse further writes.  The bytes stay in the file; the next open keeps
** or cuts them (the root WAL holds them either way). */
static void klfSyncFailed(KvLogStore *p){
  pthread_mutex_lock(&p->mu);
  kv_map_unref(p->pIndex);
  p->pIndex = kv_map_ref(p->pSynced);
  p->cnt = p->cntSynced;
  pthread_mutex_unlock(&p->mu);
  __atomic_store_n(&p->bFailed, 1, __ATOMIC_RELEASE);
}

int kl_sync_locked(KvLogStore *p, char **pzErr){
  int rc = SQLITE_OK;
  if( p->bDirty ) rc = kl_fsync(p, p->pActive, pzErr);
  if( rc==SQLITE_OK && p->bDirDirty ) rc = kl_syncdir(p, pzErr);
  if( rc ){
    klfSyncFailed(p);
    return rc;
  }
  p->bDirDirty = 0;
  kl_sync_point_locked(p);
  return SQLITE_OK;
}

/* Start a new active log file (the old one is synced first).  muWrite
** held. */
void kl_file_hold(KlFile *pFile, int bHold){
  struct flock fl;
  if( pFile==0 || pFile->fd<0 ) return;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = (short)(bHold ? F_RDLCK : F_UNLCK);
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  fcntl(pFile->fd, F_OFD_SETLK, &fl);   /* unsupported: nothing is held */
}

int kl_file_locked(const char *zPath){
  struct flock fl;
  int fd = open(zPath, O_RDONLY|O_CLOEXEC), rc;
  if( fd<0 ) return errno==ENOENT ? 0 : 1;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = 0;
  fl.l_len = 1;
  rc = fcntl(fd, F_OFD_GETLK, &fl)!=0 || fl.l_type!=F_UNLCK;
  close(fd);
  return rc;
}

void kl_active_switched(KvLogStore *p, KlFile *pOld){
  kl_file_hold(p->pActive, 1);
  if( pOld!=p->pActive ) kl_file_hold(pOld, 0);
  kv_map_unref(p->pIdxRoll);
  p->pIdxRoll = 0;
  if( p->cfg.bShared && pOld ){
    p->pIdxRoll = kv_map_ref(p->pIndex);
    p->cntRoll = p->cnt;
  }
}

int kl_roll_locked(KvLogStore *p, char **pzErr){
  KlFile *pFile = 0, *pOld;
  KlSet *pNew;
  int rc = kl_sync_locked(p, pzErr);
  if( rc ) return rc;
  if( p->iNext>KL_MAX_FILENUM ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: %s ran out of file numbers",
                                    p->zDir));
    return SQLITE_FULL;
  }
  rc = kl_file_create(p, p->iNext, KL_KIND_LOG, &pFile, pzErr);
  if( rc ) return rc;
  p->iNext++;
  pOld = p->pActive;
  pthread_mutex_lock(&p->mu);
  pNew = kl_set_with(p->pSet, pFile);
  if( pNew ){
    kl_set_unref(p->pSet);
    p->pSet = pNew;
    p->pActive = pFile;
  }
  pthread_mutex_unlock(&p->mu);
  if( pNew==0 ){
    __atomic_store_n(&pFile->bDoomed, 1, __ATOMIC_RELEASE);
    kl_file_unref(pFile);
    return SQLITE_NOMEM;
  }
  kl_active_switched(p, pOld);
  kl_file_unref(pFile);
  p->bDirDirty = 1;
  return SQLITE_OK;
}

/* ----------------------------------------------------------- MANIFEST -- */

/* Read the whole of the file at zPath (at most nMax bytes) into a new
** buffer.  ENOENT: SQLITE_NOTFOUND. */
static int klfSlurp(const WalIo *pIo, const char *zPath, int64_t nMax,
                   uint8_t **paOut, int64_t *pnOut, char **pzErr){
  off_t sz = 0;
  int64_t nDone = 0;
  uint8_t *a = 0;
  int rc = SQLITE_OK;
  int fd = pIo->xOpen(pIo->pCtx, zPath, O_RDONLY|O_CLOEXEC, 0);
  if( fd<0 ){
    if( errno==ENOENT ) return SQLITE_NOTFOUND;
    return kl_io_err(pzErr, SQLITE_CANTOPEN, "open", zPath, errno);
  }
  if( pIo->xFstatSize(pIo->pCtx, fd, &sz) ){
    rc = kl_io_err(pzErr, SQLITE_IOERR_FSTAT, "stat", zPath, errno);
  }else if( sz>nMax ){
    rc = kl_corrupt(pzErr, zPath, nMax, "file too large");
  }else if( (a = sqlite3_malloc64((sqlite3_uint64)sz+1))==0 ){
    rc = SQLITE_NOMEM;
  }
  while( rc==SQLITE_OK && nDone<(int64_t)sz ){
    ssize_t r = pIo->xPread(pIo->pCtx, fd, a+nDone, (size_t)(sz-nDone),
                            (off_t)nDone);
    if( r<=0 ){
      rc = kl_io_err(pzErr, SQLITE_IOERR_READ, "read", zPath,
                     r<0 ? errno : EIO);
    }else{
      nDone += r;
    }
  }
  pIo->xClose(pIo->pCtx, fd);
  if( rc ){ sqlite3_free(a); return rc; }
  *paOut = a;
  *pnOut = (int64_t)sz;
  return SQLITE_OK;
}

static int klfManifestParse(const char *zPath, const uint8_t *a, int64_t n,
                           uint32_t *piMerged, uint64_t *pMaxCid,
                           uint32_t **paList, int *pnList, char **pzErr){
  uint32_t nList, i;
  if( n<KL_MAN_FIXED ) return kl_corrupt(pzErr, zPath, n, "truncated");
  if( memcmp(a, klfManMagic, 8)!=0 ) return kl_corrupt(pzErr, zPath, 0,
                                                      "bad magic");
  nList = wal_get_u32(a+20);
  if( nList>KL_MAN_MAXLIST || (int64_t)KL_MAN_FIXED+4*(int64_t)nList!=n ){
    return kl_corrupt(pzErr, zPath, 20, "file list length does not match");
  }
  if( wal_crc32c(0, a, n-4)!=wal_get_u32(a+n-4) ){
    return kl_corrupt(pzErr, zPath, n-4, "checksum mismatch");
  }
  *piMerged = wal_get_u32(a+8);
  *pMaxCid = (uint64_t)wal_get_u32(a+12) | ((uint64_t)wal_get_u32(a+16)<<32);
  *paList = sqlite3_malloc64(sizeof(uint32_t)*(nList+1));
  if( *paList==0 ) return SQLITE_NOMEM;
  for(i=0; i<nList; i++){
    (*paList)[i] = wal_get_u32(a+24+4*i);
    if( (*paList)[i]==0 || (*paList)[i]>KL_MAX_FILENUM ){
      sqlite3_free(*paList);
      *paList = 0;
      return kl_corrupt(pzErr, zPath, 24+4*i, "impossible file number");
    }
  }
  *pnList = (int)nList;
  return SQLITE_OK;
}

int kl_manifest_read(KvLogStore *p, uint32_t *piMerged, uint64_t *pMaxCid,
                     uint32_t **paList, int *pnList, char **pzErr){
  char *zPath = sqlite3_mprintf("%s/MANIFEST", p->zDir);
  uint8_t *a = 0;
  int64_t n = 0;
  int rc;
  *piMerged = 0;
  *pMaxCid = 0;
  *paList = 0;
  *pnList = 0;
  if( zPath==0 ) return SQLITE_NOMEM;
  rc = klfSlurp(p->pIo, zPath, KL_MAN_FIXED+4*(int64_t)KL_MAN_MAXLIST, &a, &n,
               pzErr);
  if( rc==SQLITE_NOTFOUND ){
    rc = SQLITE_OK;
  }else if( rc==SQLITE_OK ){
    rc = klfManifestParse(zPath, a, n, piMerged, pMaxCid, paList, pnList,
                         pzErr);
  }
  sqlite3_free(a);
  sqlite3_free(zPath);
  return rc;
}

/* Write and sync MANIFEST.tmp. */
static int klfManifestTmp(KvLogStore *p, const char *zTmp, const uint8_t *a,
                         int n, char **pzErr){
  const WalIo *pIo = p->pIo;
  int rc = SQLITE_OK;
  ssize_t w;
  int fd = pIo->xOpen(pIo->pCtx, zTmp, O_WRONLY|O_CREAT|O_TRUNC|O_CLOEXEC,
                      0644);
  if( fd<0 ) return kl_io_err(pzErr, SQLITE_CANTOPEN, "create", zTmp, errno);
  w = pIo->xPwrite(pIo->pCtx, fd, a, (size_t)n, 0);
  if( w<0 ){
    int err = errno;
    rc = kl_io_err(pzErr, kl_errno_rc(err, SQLITE_IOERR_WRITE), "write",
                   zTmp, err);
  }else if( w!=n ){
    kl_set_err(pzErr, sqlite3_mprintf("kv_log: write of %s failed: short "
                                      "write", zTmp));
    rc = SQLITE_IOERR_WRITE;
  }else if( pIo->xFsync(pIo->pCtx, fd) ){
    rc = kl_io_err(pzErr, SQLITE_IOERR_FSYNC, "sync", zTmp, errno);
  }
  pIo->xClose(pIo->pCtx, fd);
  return rc;
}

int kl_manifest_write(KvLogStore *p, uint32_t iMerged, uint64_t maxCid,
                      const uint32_t *aList, int nList, int *pbRenamed,
                      char **pzErr){
  int n = KL_MAN_FIXED + 4*nList;
  uint8_t *a = sqlite3_malloc64((sqlite3_uint64)n);
  char *zTmp = sqlite3_mprintf("%s/MANIFEST.tmp", p->zDir);
  char *zMan = sqlite3_mprintf("%s/MANIFEST", p->zDir);
  int rc = SQLITE_OK, i;
  *pbRenamed = 0;
  if( a==0 || zTmp==0 || zMan==0 ){ rc = SQLITE_NOMEM; goto done; }
  memcpy(a, klfManMagic, 8);
  wal_put_u32(a+8, iMerged);
  wal_put_u32(a+12, (uint32_t)maxCid);
  wal_put_u32(a+16, (uint32_t)(maxCid>>32));
  wal_put_u32(a+20, (uint32_t)nList);
  for(i=0; i<nList; i++) wal_put_u32(a+24+4*i, aList[i]);
  wal_put_u32(a+n-4, wal_crc32c(0, a, n-4));
  rc = klfManifestTmp(p, zTmp, a, n, pzErr);
  if( rc==SQLITE_OK ) rc = kl_step(p, KVLOG_STEP_MANIFEST_TMP, pzErr);
  if( rc==SQLITE_OK && p->pIo->xRename(p->pIo->pCtx, zTmp, zMan) ){
    rc = kl_io_err(pzErr, SQLITE_IOERR, "rename", zTmp, errno);
  }
  if( rc ){
    p->pIo->xUnlink(p->pIo->pCtx, zTmp);
    goto done;
  }
  *pbRenamed = 1;
  rc = kl_step(p, KVLOG_STEP_RENAMED, pzErr);
  if( rc==SQLITE_OK ) rc = kl_syncdir(p, pzErr);
  if( rc==SQLITE_OK ) rc = kl_step(p, KVLOG_STEP_COMMITTED, pzErr);
done:
  sqlite3_free(a);
  sqlite3_free(zTmp);
  sqlite3_free(zMan);
  return rc;
}
