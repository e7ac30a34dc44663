/*
** lockfile.c -- writer locks of the embedded store on "<store>-lock"
** (vfs/store/lockfile.h).
**
** A key is locked as the one byte at offset hash(key) of the lock file,
** the hash being 64-bit FNV-1a cut to 62 bits, with a non-blocking write
** lock of the open file description (F_OFD_SETLK): such a lock belongs to
** the descriptor, not to the process as a classic POSIX record lock does,
** so two handles of one process exclude each other, and closing another
** descriptor of the same file releases nothing.  The file itself stays
** empty: a lock may lie past its end.
*/
#define _GNU_SOURCE 1             /* F_OFD_SETLK */
#include "config.h"
#include "vfs/store/lockfile.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(F_OFD_SETLK) && !defined(STORE_LOCK_FLOCK)
# define STORE_LOCK_OFD 1
#else
# define STORE_LOCK_OFD 0
#endif

/* Every StoreLockFile with an open descriptor, so that a forked child can
** close them all. */
static pthread_mutex_t slMutex = PTHREAD_MUTEX_INITIALIZER;
static StoreLockFile *slOpen = 0;          /* guarded by slMutex */
static pthread_once_t slOnce = PTHREAD_ONCE_INIT;

static void slForkPrepare(void){ pthread_mutex_lock(&slMutex); }
static void slForkParent(void){ pthread_mutex_unlock(&slMutex); }

/* In the child: the only thread left, holding slMutex since the prepare
** handler.  Its copies of the descriptors are closed (the parent's locks
** stay the parent's) and the list is emptied. */
static void slForkChild(void){
  StoreLockFile *p, *pNext;
  for(p=slOpen; p; p=pNext){
    pNext = p->pNext;
    close(p->fd);
    p->fd = -1;
    p->bWrite = 0;
    p->nHeld = 0;
    p->pNext = p->pPrev = 0;
  }
  slOpen = 0;
  pthread_mutex_unlock(&slMutex);
}

static void slRegisterAtFork(void){
  pthread_atfork(slForkPrepare, slForkParent, slForkChild);
}

/* 64-bit FNV-1a of the key, cut to 62 bits: a byte offset any off_t holds
** with room to spare. */
static uint64_t slHash(const void *pKey, int nKey){
  const unsigned char *a = (const unsigned char*)pKey;
  uint64_t h = 0xcbf29ce484222325ULL;
  int i;
  for(i=0; i<nKey; i++){
    h ^= a[i];
    h *= 0x100000001b3ULL;
  }
  return h & 0x3fffffffffffffffULL;
}

int store_lockfile_init(StoreLockFile *p, const char *zStore){
  memset(p, 0, sizeof(*p));
  p->fd = -1;
  p->zStore = sqlite3_mprintf("%s", zStore);
  p->zPath = sqlite3_mprintf("%s-lock", zStore);
  if( p->zStore==0 || p->zPath==0 ){
    store_lockfile_close(p);
    return SQLITE_NOMEM;
  }
  pthread_once(&slOnce, slRegisterAtFork);
  return SQLITE_OK;
}

/* Close p's descriptor (which releases its locks) and take it off the
** registry. */
static void slCloseFd(StoreLockFile *p){
  pthread_mutex_lock(&slMutex);
  if( p->fd>=0 ){
    if( p->pPrev ) p->pPrev->pNext = p->pNext; else slOpen = p->pNext;
    if( p->pNext ) p->pNext->pPrev = p->pPrev;
    p->pNext = p->pPrev = 0;
    close(p->fd);
    p->fd = -1;
    p->bWrite = 0;
  }
  pthread_mutex_unlock(&slMutex);
  p->nHeld = 0;
}

void store_lockfile_close(StoreLockFile *p){
  if( p->zPath ) slCloseFd(p);
  sqlite3_free(p->aHeld);
  sqlite3_free(p->zStore);
  sqlite3_free(p->zPath);
  memset(p, 0, sizeof(*p));
  p->fd = -1;
}

/* A new lock file gets the permissions (and, when root makes it, the
** owner) of the store file, as SQLite gives its -wal and -shm files, so
** that every user who may write the store may lock it. */
static void slMatchStore(StoreLockFile *p, int fd){
  struct stat stStore, st;
  if( stat(p->zStore, &stStore)!=0 || fstat(fd, &st)!=0 ) return;
  if( (st.st_mode & 0777)!=(stStore.st_mode & 0777) ){
    (void)fchmod(fd, stStore.st_mode & 0777);
  }
  if( geteuid()==0
   && (st.st_uid!=stStore.st_uid || st.st_gid!=stStore.st_gid) ){
    (void)fchown(fd, stStore.st_uid, stStore.st_gid);
  }
}

/* Open the lock file: read-write (made if missing) for bWrite, else
** read-only if it exists (*pbMissing 1 if it does not).  A descriptor
** already open read-write serves both. */
static int slOpenFd(StoreLockFile *p, int bWrite, int *pbMissing,
                    char **pzErr){
  int fd, bNew = 0;
  *pbMissing = 0;
  if( p->fd>=0 && (p->bWrite || !bWrite) ) return SQLITE_OK;
  if( bWrite ){
    struct stat st;
    mode_t m = stat(p->zStore, &st)==0 ? (st.st_mode & 0777) : 0644;
    fd = open(p->zPath, O_RDWR|O_CLOEXEC, 0);
    if( fd<0 && errno==ENOENT ){
      fd = open(p->zPath, O_RDWR|O_CREAT|O_CLOEXEC, m);
      bNew = fd>=0;
    }
  }else{
    fd = open(p->zPath, O_RDONLY|O_CLOEXEC, 0);
    if( fd<0 && errno==ENOENT ){
      *pbMissing = 1;
      return SQLITE_OK;
    }
  }
  if( fd<0 ){
    *pzErr = sqlite3_mprintf("store: cannot open the lock file %s: %s",
                             p->zPath, strerror(errno));
    return SQLITE_IOERR_LOCK;
  }
  if( bNew ) slMatchStore(p, fd);
  slCloseFd(p);          /* a read-only one, replaced (it held no lock) */
  pthread_mutex_lock(&slMutex);
  p->fd = fd;
  p->bWrite = bWrite;
  p->pPrev = 0;
  p->pNext = slOpen;
  if( slOpen ) slOpen->pPrev = p;
  slOpen = p;
  pthread_mutex_unlock(&slMutex);
  return SQLITE_OK;
}

#if STORE_LOCK_OFD

/* fcntl(F_OFD_SETLK or F_OFD_GETLK) of the byte at h with type eType. */
static int slFcntl(int fd, int op, int eType, uint64_t h,
                   struct flock *pOut){
  struct flock fl;
  int rc;
  memset(&fl, 0, sizeof(fl));
  fl.l_type = (short)eType;
  fl.l_whence = SEEK_SET;
  fl.l_start = (off_t)h;
  fl.l_len = 1;
  fl.l_pid = 0;                           /* required for OFD locks */
  do{ rc = fcntl(fd, op, &fl); }while( rc<0 && errno==EINTR );
  if( pOut ) *pOut = fl;
  return rc;
}

int store_lockfile_lock(StoreLockFile *p, const void *pKey, int nKey,
                        char **pzErr){
  int bMissing;
  int rc = slOpenFd(p, 1, &bMissing, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( slFcntl(p->fd, F_OFD_SETLK, F_WRLCK, slHash(pKey, nKey), 0)==0 ){
    return SQLITE_OK;
  }
  if( errno==EAGAIN || errno==EACCES ) return SQLITE_BUSY;
  *pzErr = sqlite3_mprintf("store: cannot lock %s: %s", p->zPath,
                           strerror(errno));
  return SQLITE_IOERR_LOCK;
}

void store_lockfile_unlock(StoreLockFile *p, const void *pKey, int nKey){
  if( p->fd>=0 && p->bWrite ){
    (void)slFcntl(p->fd, F_OFD_SETLK, F_UNLCK, slHash(pKey, nKey), 0);
  }
}

int store_lockfile_held(StoreLockFile *p, const void *pKey, int nKey,
                        int *pbHeld, char **pzErr){
  struct flock fl;
  int bMissing;
  int rc = slOpenFd(p, 0, &bMissing, pzErr);
  *pbHeld = 0;
  if( rc!=SQLITE_OK || bMissing ) return rc;
  if( slFcntl(p->fd, F_OFD_GETLK, F_WRLCK, slHash(pKey, nKey), &fl)!=0 ){
    *pzErr = sqlite3_mprintf("store: cannot test the lock of %s: %s",
                             p->zPath, strerror(errno));
    return SQLITE_IOERR_LOCK;
  }
  *pbHeld = fl.l_type!=F_UNLCK;
  return SQLITE_OK;
}

#else /* flock() of the whole file stands in: one lock per store */

static int slHeldIndex(StoreLockFile *p, uint64_t h){
  int i;
  for(i=0; i<p->nHeld; i++) if( p->aHeld[i]==h ) return i;
  return -1;
}

int store_lockfile_lock(StoreLockFile *p, const void *pKey, int nKey,
                        char **pzErr){
  uint64_t h = slHash(pKey, nKey);
  int bMissing, rc;
  if( slHeldIndex(p, h)>=0 ) return SQLITE_OK;
  rc = slOpenFd(p, 1, &bMissing, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( p->nHeld==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 4;
    uint64_t *a = sqlite3_realloc64(p->aHeld, sizeof(uint64_t)*nNew);
    if( a==0 ) return SQLITE_NOMEM;
    p->aHeld = a;
    p->nAlloc = nNew;
  }
  if( p->nHeld==0 && flock(p->fd, LOCK_EX|LOCK_NB)!=0 ){
    if( errno==EWOULDBLOCK || errno==EINTR ) return SQLITE_BUSY;
    *pzErr = sqlite3_mprintf("store: cannot lock %s: %s", p->zPath,
                             strerror(errno));
    return SQLITE_IOERR_LOCK;
  }
  p->aHeld[p->nHeld++] = h;
  return SQLITE_OK;
}

void store_lockfile_unlock(StoreLockFile *p, const void *pKey, int nKey){
  int i = slHeldIndex(p, slHash(pKey, nKey));
  if( i<0 ) return;
  p->aHeld[i] = p->aHeld[--p->nHeld];
  if( p->nHeld==0 ) (void)flock(p->fd, LOCK_UN);
}

int store_lockfile_held(StoreLockFile *p, const void *pKey, int nKey,
                        int *pbHeld, char **pzErr){
  int fd;
  (void)pKey; (void)nKey;
  *pbHeld = 0;
  if( p->nHeld>0 ) return SQLITE_OK;       /* this handle holds the file */
  fd = open(p->zPath, O_RDONLY|O_CLOEXEC, 0);
  if( fd<0 ){
    if( errno==ENOENT ) return SQLITE_OK;
    *pzErr = sqlite3_mprintf("store: cannot open the lock file %s: %s",
                             p->zPath, strerror(errno));
    return SQLITE_IOERR_LOCK;
  }
  if( flock(fd, LOCK_EX|LOCK_NB)==0 ){
    (void)flock(fd, LOCK_UN);
  }else{
    *pbHeld = 1;
  }
  close(fd);
  return SQLITE_OK;
}

#endif
