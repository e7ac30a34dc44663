/*
** lock.h -- the write lock of a depot database branch and the pragmas
** that change how SQLite locks and journals it (private to vfs/; used by
** vfs/vfs.c).
**
** RESERVED on a depot database is the store's writer lock
** (store_writer_lock() of vfs/store/store.h) on the name of the branch:
** bucket, database and branch.  Every connection, of this process or
** another, that writes that name takes it, through its own store handle;
** it never waits (SQLite's busy handler does the waiting), readers never
** take it, and its holder's death releases it.  The head compare-and-set
** of depot_db_commit() stays behind it as the fence.
**
** Exclusive locking mode.  A DepotLock whose file was sent PRAGMA
** locking_mode=EXCLUSIVE (the file control SQLite sends for every pragma
** to the database it names, main when none) also takes the lock with its
** first SHARED lock and keeps it while SQLite keeps SHARED: a snapshot that
** the connection holds for as long as SQLite keeps its page cache can then
** never be overtaken by another writer, as on a file no other writer can
** commit while an exclusive-mode connection holds its SHARED lock.
**
** Journal modes.  PRAGMA journal_mode=WAL sent to a depot database becomes
** a query of the mode in effect (what SQLite answers on any VFS without
** shared memory): a depot database never runs in WAL mode.
*/
#ifndef DEPOT_LOCK_H
#define DEPOT_LOCK_H

#include "vfs/store/store.h"

/* 'W', the bucket id (8 bytes), then each name as a length byte and its
** bytes. */
#define DEPOT_LOCK_KEY_MAX (1+8+2*(1+255))

typedef struct DepotLock DepotLock;
struct DepotLock {
  Store *pStore;              /* the file's own store handle (borrowed) */
  unsigned char aKey[DEPOT_LOCK_KEY_MAX];
  int nKey;
  int bHeld;                  /* this file holds the writer lock */
  int bExclusive;             /* locking_mode=EXCLUSIVE was sent to it */
};

/* Prepare the lock of (iBucket, zDb, zBranch) taken through pStore.
** Names longer than 255 bytes are cut (they are refused at open). */
void depot_lock_init(DepotLock*, Store *pStore, uint64_t iBucket,
                     const char *zDb, const char *zBranch);

/* Take the writer lock without waiting (a no-op when held): SQLITE_OK,
** SQLITE_BUSY when another connection holds it, or another code with
** *pzErr (sqlite3_malloc'd) when the store cannot lock. */
int depot_lock_acquire(DepotLock*, char **pzErr);

/* Release the writer lock if held. */
void depot_lock_release(DepotLock*);

/* *pbOther 1 when a connection other than this file's holds the lock. */
int depot_lock_other(DepotLock*, int *pbOther, char **pzErr);

/* The file control SQLITE_FCNTL_PRAGMA (azArg as SQLite passes it):
** notes locking_mode, and makes journal_mode=WAL (or a prefix of it, as
** SQLite reads one) a query by overwriting the value SQLite is about to
** read with one that names no mode.  Always SQLITE_NOTFOUND: SQLite goes
** on to run the pragma itself. */
int depot_lock_pragma(DepotLock*, char **azArg);

#endif /* DEPOT_LOCK_H */
