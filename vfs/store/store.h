/*
** store.h -- the outer store: an ordered, transactional key-value interface.
**
** Everything in vfs/ above this header reads and writes the outer store only
** through these calls, so a backend other than the embedded SQLite file
** (the PostgreSQL backend, vfs/store/pg.c) implements StoreMethods and
** nothing else.
**
** Model.  Keys and values are byte strings; keys sort by memcmp() order,
** a shorter key first when one is a prefix of the other.  A Store is used by
** one thread at a time.  Outside an explicit transaction every call is its
** own atomic, consistent operation.  Between store_begin(p, 1) and
** store_commit() the calls form one serializable write transaction: nothing
** is visible to other Store handles until store_commit() returns SQLITE_OK,
** and a failed or abandoned transaction leaves no trace.
**
** Writer locks.  Above the store's own transactions, a backend keeps one
** more kind of lock: the writer lock of a key (vfs/ locks the name of a
** database branch), which every process using the store respects, which
** its holder's death releases, and which never waits (see
** store_writer_lock()).
**
** Errors.  Every call returns an SQLite result code.  SQLITE_BUSY means
** another writer held the store for longer than the backend waits;
** SQLITE_IOERR_* / SQLITE_FULL / SQLITE_CORRUPT come from the backend's
** storage.  store_errmsg() describes the most recent failure.
*/
#ifndef DEPOT_STORE_H
#define DEPOT_STORE_H

#include <stdint.h>

typedef struct Store Store;
typedef struct StoreMethods StoreMethods;

/* Called for each row of a scan, in scan order.  Returns 0 to continue,
** nonzero to stop the scan (store_scan() then returns SQLITE_OK).  The key
** and value pointers are valid only during the call. */
typedef int (*StoreRowFn)(void *pArg, const unsigned char *pKey, int nKey,
                          const unsigned char *pVal, int nVal);

#define STORE_SCAN_REVERSE 0x01    /* store_scan(): largest key first */

struct StoreMethods {
  int iVersion;                    /* 2, or 3 with xMemory, xDataVersion,
                                   ** or 4 with xCommitLost */
  void (*xClose)(Store*);
  int (*xBegin)(Store*, int bWrite);
  int (*xCommit)(Store*);
  int (*xRollback)(Store*);
  int (*xGet)(Store*, const void *pKey, int nKey, void **ppVal, int *pnVal);
  int (*xScan)(Store*, const void *pLo, int nLo, const void *pHi, int nHi,
               int flags, int nLimit, StoreRowFn, void*);
  int (*xPut)(Store*, const void *pKey, int nKey, const void *pVal, int nVal);
  int (*xClear)(Store*, const void *pKey, int nKey);
  int (*xClearRange)(Store*, const void *pLo, int nLo,
                     const void *pHi, int nHi);
  int (*xAdd)(Store*, const void *pKey, int nKey, int64_t iDelta,
              int64_t *piNew);
  int (*xMaxValue)(Store*);
  const char *(*xErrMsg)(Store*);
  /* iVersion 2 */
  int (*xGetRange)(Store*, const void *pKey, int nKey, int iOff, int n,
                   void *pOut, int *pnGot);
  int (*xMaintain)(Store*, int eOp);
  int (*xPhysicalBytes)(Store*, int64_t *pnByte);
  int (*xWriterLock)(Store*, const void *pKey, int nKey);
  int (*xWriterUnlock)(Store*, const void *pKey, int nKey);
  int (*xWriterHeld)(Store*, const void *pKey, int nKey, int *pbHeld);
  /* version 3 (either may be NULL: not provided) */
  int (*xMemory)(Store*, int64_t *pnUsed, int64_t *pnLimit);
  int (*xDataVersion)(Store*, uint64_t *piVersion);
  /* version 4 (may be NULL: never lost) */
  int (*xCommitLost)(Store*);
};

/* Every backend's handle starts with this. */
struct Store {
  const StoreMethods *pMethods;
};

/* Close the handle; an open transaction is rolled back.  NULL is a no-op. */
void store_close(Store*);

/* Start a transaction; bWrite=1 for a write transaction (the backend takes
** its write lock now, waiting a bounded time, then SQLITE_BUSY).  Nested
** calls are an error (SQLITE_MISUSE). */
int store_begin(Store*, int bWrite);

/* Make the transaction's writes durable and visible.  When it returns
** SQLITE_OK the writes survive a crash of the process or the machine (as
** far as the backend's sync setting promises: the embedded backend with
** synchronous=FULL, its default, does).  On error the transaction has been
** rolled back, unless the failure came after the backend's commit point, in
** which case a later reader may see it: either way it is all or nothing. */
int store_commit(Store*);

/* After a store_commit() that failed: whether the transaction was lost
** with the backend's connection, and how.  STORE_LOST_NONE: it was not
** (it was rolled back, or the backend has no connection to lose);
** STORE_LOST_ABORTED: the connection went before the backend sent its
** commit, so nothing of it was written and running it again is safe;
** STORE_LOST_UNKNOWN: the connection went while the commit was on its
** way, so the server may have committed it or not -- a caller must read
** the store to find out before it runs the transaction again.  0 for a
** backend below iVersion 4. */
#define STORE_LOST_NONE    0
#define STORE_LOST_ABORTED 1
#define STORE_LOST_UNKNOWN 2
int store_commit_lost(Store*);

/* Abandon the open transaction.  SQLITE_OK if there was none. */
int store_rollback(Store*);

/* Look up one key.  On SQLITE_OK, *ppVal is a sqlite3_malloc'd copy of the
** value (owned by the caller; never NULL when found, even for an empty
** value) and *pnVal its length; a missing key gives SQLITE_OK with *ppVal
** NULL and *pnVal -1. */
int store_get(Store*, const void *pKey, int nKey, void **ppVal, int *pnVal);

/* Visit the rows with pLo <= key < pHi (an empty pHi, nHi==0, means no upper
** bound), ascending or with STORE_SCAN_REVERSE descending, at most nLimit
** rows (nLimit<0: no limit).  A nonzero return of the callback stops the
** scan early and is not an error. */
int store_scan(Store*, const void *pLo, int nLo, const void *pHi, int nHi,
               int flags, int nLimit, StoreRowFn xRow, void *pArg);

/* Insert or replace one row.  Values longer than store_max_value() fail
** with SQLITE_TOOBIG and change nothing. */
int store_put(Store*, const void *pKey, int nKey, const void *pVal, int nVal);

/* Remove one row (absent: no-op). */
int store_clear(Store*, const void *pKey, int nKey);

/* Remove every row with pLo <= key < pHi. */
int store_clear_range(Store*, const void *pLo, int nLo,
                      const void *pHi, int nHi);

/* A bounded step of a large removal: count (and unless bDry remove) at
** most nMax rows with pLo <= key < pHi.  *pnRow gets how many.  When rows
** may remain, *pnNext > 0 and aNext (nNextMax bytes, one more than the
** longest key) holds the key just past the last row visited: the next
** step starts there; else *pnNext is 0.  A key longer than nNextMax-1 ends
** the removal at pHi (nothing is left behind).  Inside the caller's
** transaction. */
int store_clear_some(Store*, const void *pLo, int nLo, const void *pHi,
                     int nHi, int nMax, int bDry, int64_t *pnRow,
                     unsigned char *aNext, int nNextMax, int *pnNext);

/* Atomic add: the value is a signed 64-bit little-endian integer (absent
** counts as 0; a value of another length is SQLITE_CORRUPT).  Stores the
** sum and, if piNew is not NULL, returns it. */
int store_add(Store*, const void *pKey, int nKey, int64_t iDelta,
              int64_t *piNew);

/* Copy bytes [iOff, iOff+n) of the value under pKey into pOut; *pnGot
** gets the number copied (fewer when the value ends first; -1 when the key
** does not exist).  Reads only what the range needs: the embedded backend
** keeps long values apart from the keys and reads a range of one without
** loading the rest; the PostgreSQL backend, inside a transaction, reads
** the chunks of a value chunked under keys that differ only in their last
** 4 bytes ahead once a second range of it is read.  Backends of iVersion 1
** fall back to store_get(). */
int store_get_range(Store*, const void *pKey, int nKey, int iOff, int n,
                    void *pOut, int *pnGot);

/* Inside a read transaction of store_begin(p, 0): start its snapshot and
** set *piVersion to a number of this handle that differs from the one it
** gave at the start of its previous read transaction whenever anything
** (this handle, another one, another process) changed the store between
** the two snapshots; so an equal number means equal contents.
** SQLITE_NOTFOUND where the backend cannot tell (iVersion below 3, or no
** transaction open): the caller reads what it needs. */
int store_data_version(Store*, uint64_t *piVersion);

/* Give the space of deleted rows back to the file system: with
** STORE_MAINT_RECLAIM the free pages the backend can return cheaply (the
** embedded backend: PRAGMA incremental_vacuum, on stores made with
** auto_vacuum=INCREMENTAL), with STORE_MAINT_VACUUM all of them (the
** embedded backend: VACUUM, which also turns auto_vacuum=INCREMENTAL on for
** an older store); both then truncate the backend's log (the -wal file:
** wal_checkpoint(TRUNCATE), skipped while a reader of another handle pins
** it).  Outside a transaction only (SQLITE_MISUSE).  Backends without it
** return SQLITE_OK. */
#define STORE_MAINT_RECLAIM 1
#define STORE_MAINT_VACUUM  2
int store_maintain(Store*, int eOp);

/* The bytes the store occupies on disk (the embedded backend: the store
** file plus its -wal).  0 for a backend without files. */
int store_physical_bytes(Store*, int64_t *pnByte);

/* The memory the handle's connection holds now, in *pnUsed (the
** embedded backend: its page cache, schema and prepared statements), and
** the bound of its page cache in *pnLimit (-1: none stated).  Both 0 for a
** backend that does not say. */
int store_memory(Store*, int64_t *pnUsed, int64_t *pnLimit);

/* The largest value, in bytes, the backend accepts in one row.  Larger
** blobs are split into chunk rows by the caller. */
int store_max_value(Store*);

/* English text of the most recent error on this handle ("" if none).
** Valid until the next call on the handle. */
const char *store_errmsg(Store*);

/* Take the writer lock of the key pKey (nKey bytes, 1..STORE_LOCK_KEY_MAX)
** for this handle, without waiting: SQLITE_OK when this handle holds it
** now (also when it held it already: a handle holds a key once, and one
** store_writer_unlock() releases it); SQLITE_BUSY when another handle, of
** this process or another one, holds it; SQLITE_READONLY on a handle
** opened read-only or immutable; SQLITE_IOERR_LOCK (store_errmsg() says
** why) when the backend cannot lock.  The lock belongs to the handle, not
** to the process or the thread: two handles of one process exclude each
** other.  It is released by store_writer_unlock(), by store_close(), and
** when the holder's process dies (the embedded backend: a byte-range lock
** of an open file description, F_OFD_SETLK, on the file "<store>-lock"
** beside the store, made on the first writer lock with the store's
** permissions, one byte per key at a 62-bit hash of it -- two keys with
** one hash share a lock, they only serialise; a process forked while a
** handle holds a lock does not share it: the child's copies of the lock
** file's descriptors are closed in the child.  A server backend: a session
** advisory lock, which the server drops with the lost session).  The lock
** is independent of store transactions: it is held across them and may be
** taken inside or outside one. */
#define STORE_LOCK_KEY_MAX 1024
int store_writer_lock(Store*, const void *pKey, int nKey);

/* Release the writer lock of pKey if this handle holds it (SQLITE_OK
** either way). */
int store_writer_unlock(Store*, const void *pKey, int nKey);

/* *pbHeld: 1 when a handle other than this one holds the writer lock of
** pKey now, else 0 (no lock file yet counts as not held).  A snapshot:
** it may change as soon as the call returns. */
int store_writer_held(Store*, const void *pKey, int nKey, int *pbHeld);

/*
** The embedded backend: one SQLite file in WAL mode holding the keys, with
** the values of up to 128 bytes, in the WITHOUT ROWID table depot_keys and
** the bigger values in the rowid table depot_blobs (sql/store_schema.sql;
** vfs/store/sqlite.c says more).
*/
typedef struct StoreSqliteConfig StoreSqliteConfig;
struct StoreSqliteConfig {
  const char *zVfs;       /* VFS for the outer file; NULL: the default */
  int iSynchronous;       /* 0 OFF, 1 NORMAL, 2 FULL (default), 3 EXTRA */
  int bCreate;            /* create the file if it does not exist */
  int bReadOnly;          /* open read-only */
  int bImmutable;         /* read-only, and the file is promised not to
                          ** change while open (SQLite's immutable=1: no
                          ** locks, no -shm; for read-only media); a file
                          ** whose -wal holds frames is refused with
                          ** SQLITE_CANTOPEN, as they would not be read */
  int bInspect;           /* only reads: on a read-only file system open
                          ** it as with bImmutable, as its -shm cannot be
                          ** made there (store_sqlite_read_only_fs) */
  int nMaxValue;          /* chunk limit in bytes; 0: 65536 */
  int nBusyMs;            /* wait for the write lock; 0: 10000 */
  int nCacheKb;           /* the store connection's page cache (PRAGMA
                          ** cache_size) in KiB; 0: 8192 */
};

/* Open (and with bCreate, create) the store file zPath.  On success
** *ppStore is a new handle (close with store_close()).  On failure returns
** an SQLite code, *ppStore is NULL, and *pzErr (if not NULL) gets a
** sqlite3_malloc'd message the caller frees. */
int store_sqlite_open(const char *zPath, const StoreSqliteConfig *pCfg,
                      Store **ppStore, char **pzErr);

/* Set the page cache of the store connection of pStore, a handle of
** store_sqlite_open(), to nCacheKb KiB (1..1048576), shrinking it at
** once.  SQLITE_NOTFOUND for a handle of another backend (which has no
** page cache), SQLITE_RANGE for a size out of range; either changes
** nothing. */
int store_sqlite_set_cache_kb(Store *pStore, int nCacheKb);

/* Names a VFS, or returns NULL for SQLite's default. */
typedef const char *(*StoreVfsNameFn)(void);

/* The VFS of every later store_sqlite_open() whose zVfs is NULL: the name
** xPlain() returns at that open (NULL xPlain, or none set: SQLite's
** default VFS).  The depot VFS sets it when it registers, so that a store
** file never opens through the depot VFS itself, even while depot is the
** default VFS.  Thread-safe. */
void store_sqlite_plain_vfs(StoreVfsNameFn xPlain);

/* 1 if the file zPath is on a file system mounted read-only, where a store
** opens only immutable (its -shm cannot be made; see bInspect). */
int store_sqlite_read_only_fs(const char *zPath);

/*
** The PostgreSQL backend (vfs/store/pg.c): a store named by a connection
** URI "postgresql://[user@]host[:port]/dbname[?param=value&...]" (or
** "postgres://...") with libpq's parameters and the backend's own:
** schema=NAME (default depot), chunk_bytes=N (the largest value of one
** row, default 65536), busy_ms=N (the wait for the store's write lock,
** default the config's nBusyMs), retries=N (of serialization failures and
** deadlocks, default 3), failover_ms=N (how long a lost connection is
** connected again before the call fails, default 30000),
** require_sync_standby=1 (a writable handle connects only to a primary
** with a synchronous standby attached).  Of StoreSqliteConfig it reads bCreate,
** bReadOnly/bImmutable/bInspect (read-only), iSynchronous (0: synchronous_commit
** off), nMaxValue and nBusyMs.  A build without libpq refuses such a store
** with SQLITE_CANTOPEN and a message saying so.
*/
int store_pg_open(const char *zUri, const StoreSqliteConfig *pCfg,
                  Store **ppStore, char **pzErr);

/* What a PostgreSQL store's handle knows of its server's replication,
** read at each connect (store_pg_info()). */
typedef struct StorePgInfo StorePgInfo;
struct StorePgInfo {
  char zSyncCommit[16];      /* the session's synchronous_commit */
  char zSyncNames[256];      /* the server's synchronous_standby_names */
  int bInRecovery;           /* the server is a standby */
  int nSyncStandby;          /* standbys attached with sync_state sync or
                             ** quorum; -1: the role may not see them
                             ** (pg_stat_replication needs pg_monitor) */
  int nStandby;              /* standbys streaming from it; -1 likewise */
  int iTimeline;             /* the server's timeline (a standby: the
                             ** one it receives); 0 unknown */
  uint64_t iSystemId;        /* pg_control_system(); 0 unknown */
  int64_t nReconnect;        /* connections made again by this handle */
};

/* *pInfo of the PostgreSQL store handle p, with bRefresh read from the
** server now (one round trip; outside a transaction), else as of the
** handle's latest connect.  SQLITE_NOTFOUND for a store of another
** backend (and in a build without libpq). */
int store_pg_info(Store *p, int bRefresh, StorePgInfo *pInfo);

/* 1 if zPath names a PostgreSQL store (starts with postgresql:// or
** postgres://). */
int store_is_pg_uri(const char *zPath);

/* zUri without its password (sqlite3_malloc'd; NULL when out of memory):
** what every message and figure shows of a PostgreSQL store. */
char *store_pg_redact(const char *zUri);

/* The replication role of the server a store handle reads: *pbStandby 1
** when it is a PostgreSQL hot standby (a handle on one reads what the
** standby has replayed and takes no writes: SQLITE_READONLY), and *prLag
** the replay lag in seconds: 0 on a primary and on a standby that has
** replayed all the WAL it received from a running WAL receiver, else the
** time since the commit it replayed last, -1 when it has replayed none.
** 0 and 0 for a store that is not a PostgreSQL store.  One round trip
** (connecting first when the connection was lost, outside a
** transaction); the transaction's snapshot plays no part. */
int store_pg_replica(Store*, int *pbStandby, double *prLag);

/* The round trips to PostgreSQL servers made by every handle of the
** process so far (for tests and the bench). */
int64_t store_pg_round_trips(void);

/* Open the store zPath: a PostgreSQL store when zPath is a postgresql://
** URI (store_pg_open()), else the embedded store file
** (store_sqlite_open()). */
int store_open(const char *zPath, const StoreSqliteConfig *pCfg,
               Store **ppStore, char **pzErr);

#endif /* DEPOT_STORE_H */
