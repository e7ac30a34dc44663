/*
** io.c -- the injectable file layer of wal/ (see WalIo in wal.h): the real
** POSIX implementation, and WalFault, a wrapper that fails a chosen write,
** flush or truncation so tests can reach every error path of the log.
** WalFault is a test hook: compiled only with DEPOT_TEST (the library the
** test programs link), never into the loadable module.
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---------------------------------------------------------------- POSIX */

static int posixOpen(void *pCtx, const char *zPath, int flags, int mode){
  int fd;
  (void)pCtx;
  do{
    fd = open(zPath, flags|O_CLOEXEC, mode);
  }while( fd<0 && errno==EINTR );
  return fd;
}

/* Writes all n bytes, retrying partial writes and EINTR.  An error after
** some bytes were written still returns -1 with errno (the caller cuts
** the partial bytes off), so ENOSPC is never hidden behind a short count. */
static ssize_t posixPwrite(void *pCtx, int fd, const void *p, size_t n,
                           off_t off){
  const uint8_t *a = (const uint8_t*)p;
  size_t nDone = 0;
  (void)pCtx;
  while( nDone<n ){
    ssize_t got = pwrite(fd, a+nDone, n-nDone, off+(off_t)nDone);
    if( got<0 ){
      if( errno==EINTR ) continue;
      return -1;
    }
    if( got==0 ){ errno = EIO; return -1; }
    nDone += (size_t)got;
  }
  return (ssize_t)nDone;
}

/* Reads up to n bytes; fewer only at end of file. */
static ssize_t posixPread(void *pCtx, int fd, void *p, size_t n, off_t off){
  uint8_t *a = (uint8_t*)p;
  size_t nDone = 0;
  (void)pCtx;
  while( nDone<n ){
    ssize_t got = pread(fd, a+nDone, n-nDone, off+(off_t)nDone);
    if( got<0 ){
      if( errno==EINTR ) continue;
      return -1;
    }
    if( got==0 ) break;
    nDone += (size_t)got;
  }
  return (ssize_t)nDone;
}

static int posixFsync(void *pCtx, int fd){
  int rc;
  (void)pCtx;
  do{
#if defined(__linux__)
    rc = fdatasync(fd);
#else
    rc = fsync(fd);
#endif
  }while( rc!=0 && errno==EINTR );
  return rc;
}

static int posixFtruncate(void *pCtx, int fd, off_t n){
  int rc;
  (void)pCtx;
  do{ rc = ftruncate(fd, n); }while( rc!=0 && errno==EINTR );
  return rc;
}

static int posixFstatSize(void *pCtx, int fd, off_t *pSize){
  struct stat st;
  (void)pCtx;
  if( fstat(fd, &st)!=0 ) return -1;
  *pSize = st.st_size;
  return 0;
}

static int posixClose(void *pCtx, int fd){
  (void)pCtx;
  return close(fd);
}

static int posixUnlink(void *pCtx, const char *zPath){
  (void)pCtx;
  return unlink(zPath);
}

static int posixRename(void *pCtx, const char *zFrom, const char *zTo){
  (void)pCtx;
  return rename(zFrom, zTo);
}

static int posixMkdir(void *pCtx, const char *zPath, int mode){
  (void)pCtx;
  return mkdir(zPath, (mode_t)mode);
}

static int posixSyncDir(void *pCtx, const char *zDir){
  int fd = posixOpen(pCtx, zDir, O_RDONLY|O_DIRECTORY, 0);
  int rc, err;
  if( fd<0 ) return -1;
  do{ rc = fsync(fd); }while( rc!=0 && errno==EINTR );
  err = errno;
  close(fd);
  errno = err;
  return rc;
}

static const WalIo walPosixIo = {
  0, posixOpen, posixPwrite, posixPread, posixFsync, posixFtruncate,
  posixFstatSize, posixClose, posixUnlink, posixRename, posixMkdir,
  posixSyncDir
};

const WalIo *wal_io_posix(void){
  return &walPosixIo;
}

#ifdef DEPOT_TEST
/* ---------------------------------------------------------------- faults */

/* One armed fault: fires on call number iAt of its kind (or from iAt on
** when bSticky); iAt==0 means disarmed. */
typedef struct FaultSlot FaultSlot;
struct FaultSlot {
  int64_t iAt;
  int err;
  int bSticky;
};

#define FAULT_NKIND 6          /* indexes 1..5 are the WAL_FAULT_* kinds */

struct WalFault {
  WalIo io;                    /* the wrapped methods; pCtx is this object */
  const WalIo *pBase;
  pthread_mutex_t mutex;       /* guards the counters and slots */
  int64_t aCount[FAULT_NKIND]; /* calls seen per kind (SHORT counts writes) */
  FaultSlot aSlot[FAULT_NKIND];
};

/* Counts one call of kind eCount and decides whether slot eSlot fires. */
static int faultFires(WalFault *p, int eCount, int eSlot, int *pErr){
  int bFire = 0;
  FaultSlot *s = &p->aSlot[eSlot];
  pthread_mutex_lock(&p->mutex);
  if( eSlot==eCount ) p->aCount[eCount]++;
  if( s->iAt>0 ){
    int64_t n = p->aCount[eCount];
    if( n==s->iAt || (s->bSticky && n>s->iAt) ){
      bFire = 1;
      *pErr = s->err;
      if( !s->bSticky ) s->iAt = 0;
    }
  }
  pthread_mutex_unlock(&p->mutex);
  return bFire;
}

static ssize_t faultPwrite(void *pCtx, int fd, const void *a, size_t n,
                           off_t off){
  WalFault *p = (WalFault*)pCtx;
  int err = 0;
  if( faultFires(p, WAL_FAULT_WRITE, WAL_FAULT_WRITE, &err) ){
    errno = err;
    return -1;
  }
  if( faultFires(p, WAL_FAULT_WRITE, WAL_FAULT_SHORT, &err) ){
    return p->pBase->xPwrite(p->pBase->pCtx, fd, a, n/2, off);
  }
  return p->pBase->xPwrite(p->pBase->pCtx, fd, a, n, off);
}

static int faultFsync(void *pCtx, int fd){
  WalFault *p = (WalFault*)pCtx;
  int err = 0;
  if( faultFires(p, WAL_FAULT_FSYNC, WAL_FAULT_FSYNC, &err) ){
    errno = err;
    return -1;
  }
  return p->pBase->xFsync(p->pBase->pCtx, fd);
}

static int faultFtruncate(void *pCtx, int fd, off_t n){
  WalFault *p = (WalFault*)pCtx;
  int err = 0;
  if( faultFires(p, WAL_FAULT_TRUNCATE, WAL_FAULT_TRUNCATE, &err) ){
    errno = err;
    return -1;
  }
  return p->pBase->xFtruncate(p->pBase->pCtx, fd, n);
}

static ssize_t faultPread(void *pCtx, int fd, void *a, size_t n, off_t off){
  WalFault *p = (WalFault*)pCtx;
  int err = 0;
  if( faultFires(p, WAL_FAULT_READ, WAL_FAULT_READ, &err) ){
    errno = err;
    return -1;
  }
  return p->pBase->xPread(p->pBase->pCtx, fd, a, n, off);
}

/* The methods that are passed through unchanged. */
static int faultOpen(void *pCtx, const char *z, int flags, int mode){
  const WalIo *b = ((WalFault*)pCtx)->pBase;
  return b->xOpen(b->pCtx, z, flags, mode);
}
static int faultFstatSize(void *pCtx, int fd, off_t *pSize){
  const WalIo *b = ((WalFault*)pCtx)->pBase;
  return b->xFstatSize(b->pCtx, fd, pSize);
}
static int faultClose(void *pCtx, int fd){
  const WalIo *b = ((WalFault*)pCtx)->pBase;
  return b->xClose(b->pCtx, fd);
}
static int faultUnlink(void *pCtx, const char *z){
  const WalIo *b = ((WalFault*)pCtx)->pBase;
  return b->xUnlink(b->pCtx, z);
}
static int faultRename(void *pCtx, const char *zFrom, const char *zTo){
  const WalIo *b = ((WalFault*)pCtx)->pBase;
  return b->xRename(b->pCtx, zFrom, zTo);
}
static int faultMkdir(void *pCtx, const char *z, int mode){
  const WalIo *b = ((WalFault*)pCtx)->pBase;
  return b->xMkdir(b->pCtx, z, mode);
}
static int faultSyncDir(void *pCtx, const char *z){
  const WalIo *b = ((WalFault*)pCtx)->pBase;
  return b->xSyncDir(b->pCtx, z);
}

WalFault *wal_fault_new(const WalIo *pBase){
  WalFault *p = (WalFault*)sqlite3_malloc64(sizeof(WalFault));
  if( p==0 ) return 0;
  memset(p, 0, sizeof(*p));
  if( pthread_mutex_init(&p->mutex, 0)!=0 ){
    sqlite3_free(p);
    return 0;
  }
  p->pBase = pBase ? pBase : wal_io_posix();
  p->io.pCtx = p;
  p->io.xOpen = faultOpen;
  p->io.xPwrite = faultPwrite;
  p->io.xPread = faultPread;
  p->io.xFsync = faultFsync;
  p->io.xFtruncate = faultFtruncate;
  p->io.xFstatSize = faultFstatSize;
  p->io.xClose = faultClose;
  p->io.xUnlink = faultUnlink;
  p->io.xRename = faultRename;
  p->io.xMkdir = faultMkdir;
  p->io.xSyncDir = faultSyncDir;
  return p;
}

void wal_fault_free(WalFault *p){
  if( p==0 ) return;
  pthread_mutex_destroy(&p->mutex);
  sqlite3_free(p);
}

const WalIo *wal_fault_io(WalFault *p){
  return &p->io;
}

void wal_fault_arm(WalFault *p, int eKind, int n, int err, int bSticky){
  int eCount = (eKind==WAL_FAULT_SHORT) ? WAL_FAULT_WRITE : eKind;
  if( eKind<1 || eKind>=FAULT_NKIND ) return;
  pthread_mutex_lock(&p->mutex);
  p->aSlot[eKind].iAt = n>0 ? p->aCount[eCount] + n : 0;
  p->aSlot[eKind].err = err;
  p->aSlot[eKind].bSticky = bSticky;
  pthread_mutex_unlock(&p->mutex);
}

int wal_fault_count(WalFault *p, int eKind){
  int64_t n;
  if( eKind==WAL_FAULT_SHORT ) eKind = WAL_FAULT_WRITE;
  if( eKind<1 || eKind>=FAULT_NKIND ) return 0;
  pthread_mutex_lock(&p->mutex);
  n = p->aCount[eKind];
  pthread_mutex_unlock(&p->mutex);
  return (int)n;
}
#endif /* DEPOT_TEST */

int wal_errno_rc(int err, int iDefault){
  if( err==ENOSPC || err==EFBIG ) return SQLITE_FULL;
#ifdef EDQUOT
  if( err==EDQUOT ) return SQLITE_FULL;
#endif
  return iDefault;
}
