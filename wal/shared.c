/*
** shared.c -- the shared header of a store: a small file, <store>/SHARED,
** that every process using the store maps into memory, holding
** WAL_SHARED_SLOTS 64-bit values its writers publish for the others (the
** end of the log and the last CID, for a start).  The contract is in
** wal.h ("Shared header").
**
** Layout (4096 bytes, host byte order: the file is only ever shared by
** processes of one machine, like SQLite's -shm file):
**
**      0    8  magic "DEPOTSHM"
**      8    4  layout version (1)
**     64  136  copy 0: WAL_SHARED_SLOTS u64 slots, then u32 CRC32C of the
**              slots, u32 zero
**    256  136  copy 1: the same
**   1024   64  WAL_SHARED_WORDS u32 words for atomics (wal_shared_word)
**
** A writer (one at a time: the caller holds the store's writer lock)
** stores copy 1, then copy 0; a reader loads copy 0, then copy 1, and
** takes the values when both agree and the checksum holds (the scheme of
** SQLite's wal-index header).  A reader that overlaps a write sees copies
** that disagree and reads again (spinning, then napping: about 10 ms in
** all, for a writer preempted half-way); copies that keep disagreeing belong to a
** writer that died half-way, and the read answers SQLITE_BUSY so that the
** caller takes the writer lock and writes the header again from what the
** log says.  A copy of all zero bytes (a new file) reads as all slots 0.
*/
#include "config.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3
#include "wal/wal_int.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_MAGIC     "DEPOTSHM"
#define SHM_VERSION   1
#define SHM_SIZE      4096
#define SHM_COPY0     64
#define SHM_COPY1     256
#define SHM_WORDS     1024
#define SHM_SPIN_TRIES 100         /* reads of disagreeing copies ... */
#define SHM_NAP_TRIES  200         /* ... then with a 50 us nap, then BUSY */

struct WalShared {
  int fd;
  int bReadOnly;
  uint8_t *aMap;                   /* SHM_SIZE bytes, shared */
  char *zPath;
};

/* Slot i of the copy at byte iCopy. */
static uint64_t *shmSlot(WalShared *p, int iCopy, int i){
  return (uint64_t*)(p->aMap + iCopy) + i;
}
static uint32_t *shmCrc(WalShared *p, int iCopy){
  return (uint32_t*)(p->aMap + iCopy + 8*WAL_SHARED_SLOTS);
}

static uint32_t shmChecksum(const uint64_t *a){
  return wal_crc32c(0, a, 8*WAL_SHARED_SLOTS);
}

/* Loads the copy at iCopy into a, and its stored checksum into *pCrc. */
static void shmLoad(WalShared *p, int iCopy, uint64_t *a, uint32_t *pCrc){
  int i;
  for(i=0; i<WAL_SHARED_SLOTS; i++){
    a[i] = __atomic_load_n(shmSlot(p, iCopy, i), __ATOMIC_RELAXED);
  }
  *pCrc = __atomic_load_n(shmCrc(p, iCopy), __ATOMIC_RELAXED);
}

static void shmStore(WalShared *p, int iCopy, const uint64_t *a, uint32_t crc){
  int i;
  for(i=0; i<WAL_SHARED_SLOTS; i++){
    __atomic_store_n(shmSlot(p, iCopy, i), a[i], __ATOMIC_RELAXED);
  }
  __atomic_store_n(shmCrc(p, iCopy), crc, __ATOMIC_RELAXED);
}

/* Is copy a (with stored checksum crc) whole? */
static int shmValid(const uint64_t *a, uint32_t crc){
  int i;
  if( crc==shmChecksum(a) ) return 1;
  if( crc!=0 ) return 0;
  for(i=0; i<WAL_SHARED_SLOTS; i++){
    if( a[i]!=0 ) return 0;
  }
  return 1;                        /* never written */
}

/* Sizes a new (or short) file and writes its magic.  The size only ever
** grows, and the magic is the same for every writer, so two processes
** creating the file at once do not disturb each other. */
static int shmInit(WalShared *p, char **pzErr){
  struct stat st;
  uint8_t aHdr[12];
  if( fstat(p->fd, &st)!=0 ){
    wal_set_err(pzErr, "wal: cannot stat %s: %s", p->zPath, strerror(errno));
    return SQLITE_IOERR_FSTAT;
  }
  if( st.st_size<SHM_SIZE ){
    if( p->bReadOnly ){
      wal_set_err(pzErr, "wal: shared header %s is %lld bytes, not %d "
                  "(never opened writable)", p->zPath,
                  (long long)st.st_size, SHM_SIZE);
      return SQLITE_CANTOPEN;
    }
    if( ftruncate(p->fd, SHM_SIZE)!=0 ){
      int e = errno;
      wal_set_err(pzErr, "wal: cannot size %s: %s", p->zPath, strerror(e));
      return wal_errno_rc(e, SQLITE_IOERR_TRUNCATE);
    }
  }
  p->aMap = mmap(0, SHM_SIZE, p->bReadOnly ? PROT_READ : PROT_READ|PROT_WRITE,
                 MAP_SHARED, p->fd, 0);
  if( p->aMap==MAP_FAILED ){
    p->aMap = 0;
    wal_set_err(pzErr, "wal: cannot map %s: %s", p->zPath, strerror(errno));
    return SQLITE_IOERR_SHMMAP;
  }
  memcpy(aHdr, SHM_MAGIC, 8);
  wal_put_u32(aHdr+8, SHM_VERSION);
  if( memcmp(p->aMap, aHdr, sizeof(aHdr))==0 ) return SQLITE_OK;
  if( !p->bReadOnly ){
    static const uint8_t aZero[12] = {0};
    if( memcmp(p->aMap, aZero, sizeof(aZero))==0 ){
      memcpy(p->aMap, aHdr, sizeof(aHdr));
      return SQLITE_OK;
    }
  }
  wal_set_err(pzErr, "wal: %s is not a shared header of this version",
              p->zPath);
  return SQLITE_CANTOPEN;
}

int wal_shared_open(const char *zDir, int bReadOnly, WalShared **pp,
                    char **pzErr){
  WalShared *p;
  int rc;
  *pp = 0;
  if( zDir==0 || zDir[0]==0 ){
    wal_set_err(pzErr, "wal: the store directory name is empty");
    return SQLITE_MISUSE;
  }
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->bReadOnly = bReadOnly;
  p->zPath = sqlite3_mprintf("%s/SHARED", zDir);
  if( p->zPath==0 ){
    sqlite3_free(p);
    return SQLITE_NOMEM;
  }
  p->fd = open(p->zPath, bReadOnly ? O_RDONLY|O_CLOEXEC
                                   : O_RDWR|O_CREAT|O_CLOEXEC, 0644);
  if( p->fd<0 ){
    wal_set_err(pzErr, "wal: cannot open shared header %s: %s", p->zPath,
                strerror(errno));
    rc = SQLITE_CANTOPEN;
  }else{
    rc = shmInit(p, pzErr);
  }
  if( rc!=SQLITE_OK ){
    wal_shared_close(p);
    return rc;
  }
  *pp = p;
  return SQLITE_OK;
}

void wal_shared_close(WalShared *p){
  if( p==0 ) return;
  if( p->aMap ) munmap(p->aMap, SHM_SIZE);
  if( p->fd>=0 ) close(p->fd);
  sqlite3_free(p->zPath);
  sqlite3_free(p);
}

int wal_shared_read(WalShared *p, uint64_t *aSlot){
  uint64_t a0[WAL_SHARED_SLOTS], a1[WAL_SHARED_SLOTS];
  uint32_t crc0, crc1;
  int nTry;
  for(nTry=0; nTry<SHM_SPIN_TRIES+SHM_NAP_TRIES; nTry++){
    shmLoad(p, SHM_COPY0, a0, &crc0);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    shmLoad(p, SHM_COPY1, a1, &crc1);
    if( crc0==crc1 && memcmp(a0, a1, sizeof(a0))==0 && shmValid(a0, crc0) ){
      memcpy(aSlot, a0, sizeof(a0));
      return SQLITE_OK;
    }
    /* A writer is half-way: let it finish (it may have been preempted). */
    if( nTry>=SHM_SPIN_TRIES ) usleep(50);
    else if( nTry>=8 ) sched_yield();
  }
  return SQLITE_BUSY;
}

int wal_shared_write(WalShared *p, const uint64_t *aSlot){
  uint32_t crc;
  if( p->bReadOnly ) return SQLITE_READONLY;
  crc = shmChecksum(aSlot);
  shmStore(p, SHM_COPY1, aSlot, crc);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  shmStore(p, SHM_COPY0, aSlot, crc);
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  return SQLITE_OK;
}

uint32_t *wal_shared_word(WalShared *p, int i){
  return (uint32_t*)(p->aMap + SHM_WORDS) + i;
}
