/*
** torture_io.c -- the simulated disk of the crash-torture runner: a WalIo
** and a "torture" sqlite3_vfs over "unix" that count every call, keep an
** undo record of unsynced writes, inject one armed fault, and at the crash
** point drop or tear every unsynced write and end the process.  The model
** is described in tests/torture/torture.h.
*/
#include "config.h"
#include "tests/torture/torture.h"
#include <sqlite3.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One unsynced write (or truncation): restoring it means setting the file
** to szOld bytes and writing aOld (nOld bytes) back at iOff. */
typedef struct TioUndo TioUndo;
struct TioUndo {
  char *zPath;
  int64_t iOff, szOld;
  int64_t nNew;           /* bytes written (0 for a truncation) */
  uint8_t *aOld; int64_t nOld;
};

static pthread_mutex_t tioMutex = PTHREAD_MUTEX_INITIALIZER;
static TioConfig tioCfg;
static uint64_t aTioCount[TIO_NCLASS];
static uint64_t nTioWS;
static int bTioFired;
static TioUndo *aTioUndo;
static int nTioUndo, nTioUndoAlloc;

/* ------------------------------------------------------------ record --- */

static void tioUndoFree(TioUndo *p){
  free(p->zPath);
  free(p->aOld);
}

/* Reads nOld bytes at iOff of the file being written; 0 on success. */
typedef int (*TioReader)(void *pArg, void *pBuf, int64_t n, int64_t iOff);

/* Remember what a write of n bytes at iOff to zPath (szOld bytes long)
** replaces; for a truncation to szNew bytes (szNew>=0), the tail it cuts. */
static void tioRemember(const char *zPath, int64_t szOld, int64_t iOff,
                        int64_t n, int64_t szNew, TioReader xRead, void *pArg){
  TioUndo u;
  if( zPath==0 || szOld<0 ) return;
  memset(&u, 0, sizeof(u));
  u.iOff = iOff; u.szOld = szOld; u.nNew = n;
  u.nOld = szOld>iOff ? szOld-iOff : 0;
  if( n>0 && u.nOld>n ) u.nOld = n;
  if( szNew>=0 ){ u.iOff = szNew; u.nOld = szOld>szNew ? szOld-szNew : 0; }
  u.zPath = strdup(zPath);
  u.aOld = malloc(u.nOld ? (size_t)u.nOld : 1);
  if( u.zPath==0 || u.aOld==0 ) abort();
  if( u.nOld && xRead(pArg, u.aOld, u.nOld, u.iOff) ) u.nOld = 0;
  if( nTioUndo==nTioUndoAlloc ){
    nTioUndoAlloc = nTioUndoAlloc ? nTioUndoAlloc*2 : 64;
    aTioUndo = realloc(aTioUndo, sizeof(TioUndo)*(size_t)nTioUndoAlloc);
    if( aTioUndo==0 ) abort();
  }
  aTioUndo[nTioUndo++] = u;
}

static int tioFdRead(void *pArg, void *pBuf, int64_t n, int64_t iOff){
  return pread(*(int*)pArg, pBuf, (size_t)n, iOff)==n ? 0 : 1;
}
static int64_t tioFdSize(int fd){
  struct stat st;
  return fstat(fd, &st) ? -1 : (int64_t)st.st_size;
}

/* zPath was synced: its remembered writes are durable. */
static void tioForget(const char *zPath){
  int i, j = 0;
  for(i=0; i<nTioUndo; i++){
    if( zPath && strcmp(aTioUndo[i].zPath, zPath)==0 ) tioUndoFree(&aTioUndo[i]);
    else aTioUndo[j++] = aTioUndo[i];
  }
  nTioUndo = j;
}

static void tioRenamed(const char *zFrom, const char *zTo){
  int i;
  for(i=0; i<nTioUndo; i++){
    if( strcmp(aTioUndo[i].zPath, zFrom)==0 ){
      char *z = strdup(zTo);
      if( z==0 ) abort();
      free(aTioUndo[i].zPath);
      aTioUndo[i].zPath = z;
    }
  }
}

/* ------------------------------------------------------------- crash --- */

static uint64_t tioRand(void){
  uint64_t x = tioCfg.iSeed += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x>>30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x>>27)) * 0x94d049bb133111ebull;
  return x ^ (x>>31);
}

/* Undo entry u, keeping its first nKeep new bytes (a torn write). */
static void tioRestore(int fd, const TioUndo *u, int64_t nKeep){
  struct stat st;
  int64_t iFrom = u->iOff + nKeep, szKeep;
  if( fstat(fd, &st) ) return;
  szKeep = u->szOld > iFrom ? u->szOld : iFrom;
  if( u->nNew==0 ){                       /* a truncation: put the tail back */
    if( ftruncate(fd, u->szOld)==0 && u->nOld ){
      if( pwrite(fd, u->aOld, (size_t)u->nOld, u->iOff)<0 ) return;
    }
    return;
  }
  if( st.st_size > szKeep && ftruncate(fd, szKeep) ) return;
  if( u->iOff + u->nOld > iFrom ){
    int64_t nSkip = iFrom - u->iOff;
    if( pwrite(fd, u->aOld+nSkip, (size_t)(u->nOld-nSkip), iFrom)<0 ) return;
  }
}

/* Power loss: per file, keep a random prefix of its unsynced writes, tear
** the next one, undo the rest (newest first); then end the process. */
static void tioCrash(void){
  int i, j;
  for(i=0; i<nTioUndo; i++){
    const char *zPath = aTioUndo[i].zPath;
    int aIdx[4096], n = 0, nKeep, fd;
    int bSeen = 0;
    for(j=0; j<i; j++) if( strcmp(aTioUndo[j].zPath, zPath)==0 ) bSeen = 1;
    if( bSeen ) continue;
    for(j=i; j<nTioUndo && n<4096; j++){
      if( strcmp(aTioUndo[j].zPath, zPath)==0 ) aIdx[n++] = j;
    }
    nKeep = (tioRand()%3)==0 ? 0 : (int)(tioRand()%(uint64_t)(n+1));
    fd = open(zPath, O_RDWR|O_CLOEXEC);
    if( fd<0 ) continue;                       /* removed since */
    for(j=n-1; j>=nKeep; j--){
      const TioUndo *u = &aTioUndo[aIdx[j]];
      int64_t nTorn = 0;
      if( j==nKeep && u->nNew>512 ){
        nTorn = (int64_t)(tioRand()%(uint64_t)(u->nNew/512+1))*512;
      }
      tioRestore(fd, u, nTorn);
    }
    close(fd);
  }
  _exit(TIO_EXIT_CRASH);
}

/* ------------------------------------------------------------ policy --- */

/* Count a call of class e; returns the fault kind to inject or 0.  Sets
** *pbCrash when this is the crash point.  Called with tioMutex held. */
static int tioCall(int e, const char *zPath, int *pbCrash){
  aTioCount[e]++;
  *pbCrash = 0;
  if( e==TIO_WRITE || e==TIO_SYNC ){
    nTioWS++;
    if( tioCfg.iCrashAt && nTioWS==tioCfg.iCrashAt ){
      *pbCrash = 1;
      if( getenv("TORTURE_TRACE") ){
        fprintf(stderr, "torture: power loss at %s call %llu (%s)\n",
                tio_class_name(e), (unsigned long long)nTioWS, zPath ? zPath : "?");
      }
    }
  }
  if( !bTioFired && tioCfg.nFault && e==tioCfg.eFaultClass
   && aTioCount[e]==tioCfg.nFault ){
    bTioFired = 1;
    if( getenv("TORTURE_TRACE") ){
      fprintf(stderr, "torture: %s fault on %s call %llu (%s)\n",
              tio_kind_name(tioCfg.eFaultKind), tio_class_name(e),
              (unsigned long long)aTioCount[e], zPath ? zPath : "?");
    }
    return tioCfg.eFaultKind;
  }
  return 0;
}

void tio_setup(const TioConfig *pCfg){
  int i;
  pthread_mutex_lock(&tioMutex);
  for(i=0; i<nTioUndo; i++) tioUndoFree(&aTioUndo[i]);
  nTioUndo = 0;
  memset(aTioCount, 0, sizeof(aTioCount));
  nTioWS = 0; bTioFired = 0;
  tioCfg = *pCfg;
  pthread_mutex_unlock(&tioMutex);
}

uint64_t tio_count(int e){
  uint64_t n;
  pthread_mutex_lock(&tioMutex);
  n = aTioCount[e];
  pthread_mutex_unlock(&tioMutex);
  return n;
}
uint64_t tio_count_ws(void){
  uint64_t n;
  pthread_mutex_lock(&tioMutex);
  n = nTioWS;
  pthread_mutex_unlock(&tioMutex);
  return n;
}
int tio_fault_fired(void){
  int b;
  pthread_mutex_lock(&tioMutex);
  b = bTioFired;
  pthread_mutex_unlock(&tioMutex);
  return b;
}

const char *tio_class_name(int e){
  static const char *az[] = {"write", "sync", "read", "open", "truncate"};
  return e>=0 && e<TIO_NCLASS ? az[e] : "?";
}
const char *tio_kind_name(int e){
  return e==TIO_EIO ? "EIO" : e==TIO_ENOSPC ? "ENOSPC" : e==TIO_SHORT ? "short" : "-";
}

/* ----------------------------------------------------------- WalIo --- */

/* fd -> path of the files opened through the WalIo. */
#define TIO_MAXFD 4096
static char *azTioFd[TIO_MAXFD];

static int tioErrno(int eKind){ return eKind==TIO_ENOSPC ? ENOSPC : EIO; }

static int twOpen(void *pCtx, const char *zPath, int flags, int mode){
  int bCrash, eFault, fd;
  (void)pCtx;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_OPEN, zPath, &bCrash);
  if( eFault ){ pthread_mutex_unlock(&tioMutex); errno = tioErrno(eFault); return -1; }
  fd = open(zPath, flags, mode);
  if( fd>=0 && fd<TIO_MAXFD ){
    free(azTioFd[fd]);
    azTioFd[fd] = strdup(zPath);
  }
  pthread_mutex_unlock(&tioMutex);
  return fd;
}

static ssize_t twPwrite(void *pCtx, int fd, const void *p, size_t n, off_t off){
  int bCrash, eFault;
  ssize_t r;
  (void)pCtx;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_WRITE, fd>=0 && fd<TIO_MAXFD ? azTioFd[fd] : 0, &bCrash);
  if( eFault==TIO_EIO || eFault==TIO_ENOSPC ){
    pthread_mutex_unlock(&tioMutex);
    errno = tioErrno(eFault);
    return -1;
  }
  if( eFault==TIO_SHORT ) n /= 2;
  tioRemember(fd>=0 && fd<TIO_MAXFD ? azTioFd[fd] : 0, tioFdSize(fd), off, (int64_t)n, -1,
              tioFdRead, &fd);
  r = pwrite(fd, p, n, off);
  if( bCrash ) tioCrash();
  pthread_mutex_unlock(&tioMutex);
  return r;
}

static ssize_t twPread(void *pCtx, int fd, void *p, size_t n, off_t off){
  int bCrash, eFault;
  (void)pCtx;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_READ, fd>=0 && fd<TIO_MAXFD ? azTioFd[fd] : 0, &bCrash);
  pthread_mutex_unlock(&tioMutex);
  if( eFault ){ errno = tioErrno(eFault); return -1; }
  return pread(fd, p, n, off);
}

/* A sync: the crash point, a fault, or the file's writes become durable. */
static int tioSyncPath(const char *zPath){
  int bCrash, eFault;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_SYNC, zPath, &bCrash);
  if( bCrash ) tioCrash();
  if( !eFault && !tioCfg.bLieSync ) tioForget(zPath);
  pthread_mutex_unlock(&tioMutex);
  if( eFault ){ errno = tioErrno(eFault); return -1; }
  return 0;
}

static int twFsync(void *pCtx, int fd){
  (void)pCtx;
  return tioSyncPath(fd>=0 && fd>=0 && fd<TIO_MAXFD ? azTioFd[fd] : 0);
}

static int twFtruncate(void *pCtx, int fd, off_t n){
  int bCrash, eFault, rc;
  (void)pCtx;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_TRUNCATE, fd>=0 && fd<TIO_MAXFD ? azTioFd[fd] : 0, &bCrash);
  if( eFault ){ pthread_mutex_unlock(&tioMutex); errno = tioErrno(eFault); return -1; }
  tioRemember(fd>=0 && fd<TIO_MAXFD ? azTioFd[fd] : 0, tioFdSize(fd), 0, 0, (int64_t)n,
              tioFdRead, &fd);
  rc = ftruncate(fd, n);
  pthread_mutex_unlock(&tioMutex);
  return rc;
}

static int twFstatSize(void *pCtx, int fd, off_t *pSize){
  struct stat st;
  (void)pCtx;
  if( fstat(fd, &st) ) return -1;
  *pSize = st.st_size;
  return 0;
}

static int twClose(void *pCtx, int fd){
  (void)pCtx;
  pthread_mutex_lock(&tioMutex);
  if( fd>=0 && fd<TIO_MAXFD ){ free(azTioFd[fd]); azTioFd[fd] = 0; }
  pthread_mutex_unlock(&tioMutex);
  return close(fd);
}

static int twUnlink(void *pCtx, const char *zPath){
  (void)pCtx;
  return unlink(zPath);
}

static int twRename(void *pCtx, const char *zFrom, const char *zTo){
  int rc;
  (void)pCtx;
  pthread_mutex_lock(&tioMutex);
  rc = rename(zFrom, zTo);
  if( rc==0 ){ tioForget(zTo); tioRenamed(zFrom, zTo); }
  pthread_mutex_unlock(&tioMutex);
  return rc;
}

static int twMkdir(void *pCtx, const char *zPath, int mode){
  (void)pCtx;
  return mkdir(zPath, (mode_t)mode);
}

static int twSyncDir(void *pCtx, const char *zDir){
  (void)pCtx; (void)zDir;
  return tioSyncPath(0);
}

static const WalIo tioWalIo = {
  0, twOpen, twPwrite, twPread, twFsync, twFtruncate, twFstatSize, twClose,
  twUnlink, twRename, twMkdir, twSyncDir
};

const WalIo *tio_walio(void){ return &tioWalIo; }

/* ------------------------------------------------------- sqlite3_vfs --- */

typedef struct TvFile TvFile;
struct TvFile {
  sqlite3_file base;
  sqlite3_file *pReal;
  char *zPath;            /* NULL for temporary files: not tracked */
};

/* Undo reads and sizes through the real file (never a second descriptor:
** closing one would drop the process's POSIX locks on the file). */
static int tvUndoRead(void *pArg, void *pBuf, int64_t n, int64_t iOff){
  sqlite3_file *r = (sqlite3_file*)pArg;
  return r->pMethods->xRead(r, pBuf, (int)n, iOff)!=SQLITE_OK;
}
static int64_t tvSize(sqlite3_file *r){
  sqlite3_int64 n = 0;
  return r->pMethods->xFileSize(r, &n)==SQLITE_OK ? (int64_t)n : -1;
}
static sqlite3_vfs *pTvRoot = 0;
#define TVREAL(f) (((TvFile*)(f))->pReal)

static int tvClose(sqlite3_file *f){
  TvFile *p = (TvFile*)f;
  int rc = p->pReal->pMethods->xClose(p->pReal);
  pthread_mutex_lock(&tioMutex);
  free(p->zPath);
  p->zPath = 0;
  pthread_mutex_unlock(&tioMutex);
  return rc;
}

static int tvRead(sqlite3_file *f, void *pBuf, int n, sqlite3_int64 o){
  int bCrash, eFault;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_READ, ((TvFile*)f)->zPath, &bCrash);
  pthread_mutex_unlock(&tioMutex);
  if( eFault ) return SQLITE_IOERR_READ;
  return TVREAL(f)->pMethods->xRead(TVREAL(f), pBuf, n, o);
}

static int tvWrite(sqlite3_file *f, const void *pBuf, int n, sqlite3_int64 o){
  TvFile *p = (TvFile*)f;
  int bCrash, eFault, rc;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_WRITE, p->zPath, &bCrash);
  if( eFault==TIO_EIO || eFault==TIO_ENOSPC ){
    pthread_mutex_unlock(&tioMutex);
    return eFault==TIO_ENOSPC ? SQLITE_FULL : SQLITE_IOERR_WRITE;
  }
  if( eFault==TIO_SHORT ) n /= 2;
  if( p->zPath ){
    tioRemember(p->zPath, tvSize(p->pReal), o, n, -1, tvUndoRead, p->pReal);
  }
  rc = p->pReal->pMethods->xWrite(p->pReal, pBuf, n, o);
  if( bCrash ) tioCrash();
  pthread_mutex_unlock(&tioMutex);
  return eFault==TIO_SHORT ? SQLITE_FULL : rc;
}

static int tvTruncate(sqlite3_file *f, sqlite3_int64 n){
  TvFile *p = (TvFile*)f;
  int bCrash, eFault, rc;
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_TRUNCATE, p->zPath, &bCrash);
  if( eFault ){ pthread_mutex_unlock(&tioMutex); return SQLITE_IOERR_TRUNCATE; }
  if( p->zPath ){
    tioRemember(p->zPath, tvSize(p->pReal), 0, 0, n, tvUndoRead, p->pReal);
  }
  rc = p->pReal->pMethods->xTruncate(p->pReal, n);
  pthread_mutex_unlock(&tioMutex);
  return rc;
}

static int tvSync(sqlite3_file *f, int flags){
  TvFile *p = (TvFile*)f;
  (void)flags;
  if( p->zPath==0 ) return SQLITE_OK;
  return tioSyncPath(p->zPath) ? SQLITE_IOERR_FSYNC : SQLITE_OK;
}

static int tvFileSize(sqlite3_file *f, sqlite3_int64 *pn){
  return TVREAL(f)->pMethods->xFileSize(TVREAL(f), pn);
}
static int tvLock(sqlite3_file *f, int e){
  return TVREAL(f)->pMethods->xLock(TVREAL(f), e);
}
static int tvUnlock(sqlite3_file *f, int e){
  return TVREAL(f)->pMethods->xUnlock(TVREAL(f), e);
}
static int tvCheck(sqlite3_file *f, int *pb){
  return TVREAL(f)->pMethods->xCheckReservedLock(TVREAL(f), pb);
}
static int tvFcntl(sqlite3_file *f, int op, void *pArg){
  return TVREAL(f)->pMethods->xFileControl(TVREAL(f), op, pArg);
}
static int tvSector(sqlite3_file *f){
  return TVREAL(f)->pMethods->xSectorSize(TVREAL(f));
}
static int tvDevice(sqlite3_file *f){
  return TVREAL(f)->pMethods->xDeviceCharacteristics(TVREAL(f));
}
static int tvShmMap(sqlite3_file *f, int i, int sz, int b, void volatile **pp){
  return TVREAL(f)->pMethods->xShmMap(TVREAL(f), i, sz, b, pp);
}
static int tvShmLock(sqlite3_file *f, int o, int n, int fl){
  return TVREAL(f)->pMethods->xShmLock(TVREAL(f), o, n, fl);
}
static void tvShmBarrier(sqlite3_file *f){
  TVREAL(f)->pMethods->xShmBarrier(TVREAL(f));
}
static int tvShmUnmap(sqlite3_file *f, int d){
  return TVREAL(f)->pMethods->xShmUnmap(TVREAL(f), d);
}

/* Version 2 methods: no xFetch/xUnfetch, so SQLite never maps the files
** and every page goes through xRead/xWrite. */
static const sqlite3_io_methods tvIo = {
  2, tvClose, tvRead, tvWrite, tvTruncate, tvSync, tvFileSize, tvLock,
  tvUnlock, tvCheck, tvFcntl, tvSector, tvDevice, tvShmMap, tvShmLock,
  tvShmBarrier, tvShmUnmap, 0, 0
};

static int tvOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *f,
                  int flags, int *pOut){
  TvFile *p = (TvFile*)f;
  int bCrash, eFault, rc;
  (void)pVfs;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  pthread_mutex_lock(&tioMutex);
  eFault = tioCall(TIO_OPEN, zName, &bCrash);
  pthread_mutex_unlock(&tioMutex);
  if( eFault ) return SQLITE_CANTOPEN;
  rc = pTvRoot->xOpen(pTvRoot, zName, p->pReal, flags, pOut);
  if( rc!=SQLITE_OK || p->pReal->pMethods==0 ) return rc;
  p->base.pMethods = &tvIo;
  if( zName && !(flags & SQLITE_OPEN_DELETEONCLOSE) ){
    p->zPath = strdup(zName);
    if( p->zPath==0 ){
      p->pReal->pMethods->xClose(p->pReal);
      p->base.pMethods = 0;
      return SQLITE_NOMEM;
    }
  }
  return SQLITE_OK;
}

static sqlite3_vfs tvVfs;

int tio_vfs_register(void){
  if( pTvRoot ) return SQLITE_OK;
  pTvRoot = sqlite3_vfs_find("unix");
  if( pTvRoot==0 ) return SQLITE_ERROR;
  tvVfs = *pTvRoot;
  tvVfs.zName = "torture";
  tvVfs.szOsFile = (int)sizeof(TvFile) + pTvRoot->szOsFile;
  tvVfs.xOpen = tvOpen;
  tvVfs.pAppData = 0;
  return sqlite3_vfs_register(&tvVfs, 1);
}
