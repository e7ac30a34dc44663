/*
** lockfile.h -- the writer locks of the embedded store backend (private to
** vfs/store/): byte-range locks of an open file description on the file
** "<store>-lock" beside the store file (see store_writer_lock() in
** vfs/store/store.h for the contract).
**
** Each StoreLockFile opens the lock file itself, on its first use, so its
** locks belong to that descriptor alone: they exclude every other
** StoreLockFile, of this process or another, and the kernel drops them when
** the descriptor's last copy closes (store_lockfile_close(), or the death
** of the process).  A child process made by fork() closes its copies of
** the descriptors at once (a pthread_atfork() handler), so a lock never
** outlives its holder in a child, and the child's handles open the file
** anew if they lock.
**
** Where the system has no open-file-description locks (F_OFD_SETLK, Linux
** 3.15 and later), flock() on the whole file stands in: every key of one
** store then shares one lock.
*/
#ifndef DEPOT_STORE_LOCKFILE_H
#define DEPOT_STORE_LOCKFILE_H

#include <stdint.h>

typedef struct StoreLockFile StoreLockFile;
struct StoreLockFile {
  char *zStore;             /* the store file (its permissions are copied) */
  char *zPath;              /* "<store>-lock" */
  int fd;                   /* -1 until opened; written under the registry
                            ** mutex (the fork handler closes it) */
  int bWrite;               /* fd is open read-write */
  StoreLockFile *pNext;     /* registry of open descriptors, guarded by */
  StoreLockFile *pPrev;     /* the registry mutex */
  int nHeld, nAlloc;        /* flock() stand-in only: the hashes held */
  uint64_t *aHeld;
};

/* Prepare *p for the store file zStore (nothing is opened yet).
** SQLITE_OK or SQLITE_NOMEM. */
int store_lockfile_init(StoreLockFile *p, const char *zStore);

/* Release every lock of *p and free it.  A zeroed *p is a no-op. */
void store_lockfile_close(StoreLockFile *p);

/* Lock key pKey for p without waiting: SQLITE_OK, SQLITE_BUSY (another
** descriptor holds it), or SQLITE_IOERR_LOCK with *pzErr (sqlite3_malloc'd)
** when the lock file cannot be opened or locked. */
int store_lockfile_lock(StoreLockFile *p, const void *pKey, int nKey,
                        char **pzErr);

/* Release key pKey if p holds it. */
void store_lockfile_unlock(StoreLockFile *p, const void *pKey, int nKey);

/* *pbHeld 1 when a descriptor other than p's holds key pKey.  SQLITE_OK,
** or SQLITE_IOERR_LOCK with *pzErr. */
int store_lockfile_held(StoreLockFile *p, const void *pKey, int nKey,
                        int *pbHeld, char **pzErr);

#endif /* DEPOT_STORE_LOCKFILE_H */
