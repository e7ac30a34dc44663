/*
** backend.h -- the storage-backend interface of KV tables (private to
** ext/kv/).
**
** The engine (table.c, catalog.c, txn.c, iter.c) knows nothing about how
** a table keeps its committed data: it talks to a KvBackend, a struct of
** function pointers, one per table type ("kv_memory", "kv_btree",
** "kv_log"; a new type plugs in by adding its KvBackend to the list in
** table.c).  Keys and values crossing this interface are the byte
** encodings of kv.h.  A backend calls nothing of the engine: what it must
** tell the engine (that a WAL record is durable) goes through the
** callback the engine gives it in KvTableDef.
**
** Threads: the engine calls xApply, xOpen and xClose with the engine mutex
** held, so a backend needs no lock of its own for its published state;
** snapshots and cursors are used without that mutex, from any one thread at
** a time, and must stay valid (and unchanged) until freed.
*/
#ifndef DEPOT_KV_BACKEND_H
#define DEPOT_KV_BACKEND_H

#include "ext/kv/kv.h"
#include "ext/kv/map.h"
#include <stdint.h>

typedef struct KvBackend KvBackend;
typedef struct KvBackendTable KvBackendTable;   /* a backend's open table */
typedef struct KvBackendSnap KvBackendSnap;     /* a stable read view */
typedef struct KvBackendCursor KvBackendCursor; /* a walk over a snapshot */
typedef struct KvTableDef KvTableDef;
struct WalIo;

/* What the backend is told about a table when it opens it. */
struct KvTableDef {
  const char *zStore;      /* store directory (NULL: anonymous store) */
  const char *zName;       /* table name, nName bytes, not a path! */
  int nName;
  uint64_t iTableId;       /* stable id; backends name files after it */
  int bPersist;            /* persistence=1 */
  const char *zOptions;    /* options JSON text (may be NULL) */
  /* Confirm to the store's root WAL that the table's effects of record
  ** cid are durable (backends that confirm later, see xDurable): call
  ** xConfirm(pConfirmCtx, cid, zName, nName), from any thread, until
  ** xClose returns.  SQLITE_OK or the WAL's error.  NULL: the store has
  ** no WAL to confirm to (only backends that need no store accept it). */
  int (*xConfirm)(void *pConfirmCtx, uint64_t cid, const char *zTab,
                  int nTab);
  void *pConfirmCtx;
  /* Make the WAL records up to cid durable (wal_sync): a backend calls it
  ** before it makes effects of those records durable in its own files, so
  ** that no file outlives a power loss that took a deferred record from
  ** the WAL (kv.h, KV_SYNC_NORMAL).  Same context and threads as
  ** xConfirm; SQLITE_OK or the WAL's error (message in *pzErr).  NULL
  ** with xConfirm. */
  int (*xWalSync)(void *pConfirmCtx, uint64_t cid, char **pzErr);
  const struct WalIo *pIo; /* the store's file I/O (tests inject faults) */
  /* Several processes: 1 if this process is to do the store's
  ** once-per-store background work now (a log compaction, say), else 0:
  ** always 1 while the store is not shared; while it is, 1 in one
  ** process at a time, handed over when that process exits or dies.
  ** Same context as xConfirm; any thread, cheap (one atomic load once
  ** the work is this process's). */
  int (*xStoreWork)(void *pConfirmCtx);
  int bShared;             /* opened by a process joining others that share
                           ** the store (KvBackend.xShare): the open must
                           ** change nothing they may be reading or writing
                           ** (xShare follows it) */
  int bReadOnly;           /* with bShared: a read-only process, which
                           ** creates and writes no file; xApply is never
                           ** called.  Without bShared: a read-only process
                           ** that opened the store with no writer process
                           ** there; it creates and writes no file either,
                           ** and xApply (the replay of WAL records the
                           ** table's files do not hold yet) keeps the batch
                           ** in memory */
  /* 1 while a read-only process that opened the store alone reads it:
  ** the files of the store must then stay as that process read them
  ** (appends a reader of the old state ignores are fine; a kv_btree
  ** checkpoint into its data file is not).  Same context as xConfirm;
  ** any thread; a system call.  NULL: never. */
  int (*xFilesPinned)(void *pConfirmCtx);
};

/* Counters for kv_stats: KvBackendStats (kv.h). */

struct KvBackend {
  const char *zType;       /* module / type name, e.g. "kv_memory" */
  /* Open (bCreate: create) the table's committed state.  *ppTab owned by
  ** the engine until xClose.  Errors: SQLite code + *pzErr.  bCreate=0:
  ** the table is listed in the store's catalog file, which is saved only
  ** after a create has made the table's files, so files found missing are
  ** damage (a backend may report it as SQLITE_CORRUPT, creating nothing);
  ** bCreate=1: a new table, or one the WAL replay creates. */
  int (*xOpen)(const KvTableDef*, int bCreate, KvBackendTable **ppTab,
               char **pzErr);
  void (*xClose)(KvBackendTable*);
  /* The table was removed (its removal committed): delete its files.
  ** Called just before xClose. */
  int (*xDrop)(KvBackendTable*, char **pzErr);

  /* A stable view of the committed state as it is now. */
  int (*xSnapshot)(KvBackendTable*, KvBackendSnap **ppSnap);
  void (*xSnapshotFree)(KvBackendSnap*);
  /* A second, independent handle on the same view. */
  int (*xSnapshotDup)(KvBackendSnap*, KvBackendSnap **ppCopy);
  /* Point read: *pbFound=1 and *pOut filled (valid while the snapshot
  ** lives) when present, else *pbFound=0. */
  int (*xGet)(KvBackendSnap*, const uint8_t *aKey, int nKey, int *pbFound,
              KvMapEntry *pOut);

  /* Cursors over a snapshot (same seek codes and results as map.h). */
  int (*xCursorOpen)(KvBackendSnap*, KvBackendCursor **ppCsr);
  void (*xCursorClose)(KvBackendCursor*);
  int (*xCursorSeek)(KvBackendCursor*, int eSeek, const void *aKey, int n);
  int (*xCursorNext)(KvBackendCursor*);
  int (*xCursorPrev)(KvBackendCursor*);
  void (*xCursorEntry)(KvBackendCursor*, KvMapEntry *pOut);

  /* Publish a committed batch: every entry of pBatch (tombstones are
  ** deletes) at commit sequence iSeq, from WAL record cid (0: none).
  ** Called with the engine mutex held; after it returns, new snapshots see
  ** the batch and older ones do not. */
  int (*xApply)(KvBackendTable*, KvMap *pBatch, uint64_t iSeq, uint64_t cid);
  /* For persistent tables, after xApply of a batch logged as record cid:
  ** return 1 if the table's effects of cid are durable now (the engine
  ** confirms the record at once), 0 if the backend will call
  ** KvTableDef.xConfirm itself later. */
  int (*xDurable)(KvBackendTable*, uint64_t cid);
  /* Live entry count and a byte estimate. */
  void (*xStats)(KvBackendTable*, int64_t *pnRow, int64_t *pnByte);

  /* Members added for the persistent backends; a backend that leaves them
  ** 0 keeps the behaviour above. */
  /* Tables of this type need a store directory and persistence=1
  ** (kv_create_table refuses anything else before the commit). */
  int bNeedsStore;
  /* kv_stats counters (NULL: only xStats is shown).  bCount=0: nRow and
  ** nByte may be left 0 (they may cost a walk).  Called WITHOUT the engine
  ** mutex, on a table the caller holds a reference to. */
  void (*xStatsEx)(KvBackendTable*, int bCount, KvBackendStats*);
  /* Why the last xCursorSeek/Next/Prev of the cursor returned 0: SQLITE_OK
  ** when it ran out of keys, else the read error that ended the walk (a
  ** damaged record, a failed data-file read); then *pzErr is set to a
  ** sqlite3_malloc'd message (NULL on OOM).  A walk that failed stays
  ** failed.  NULL: the backend's walks cannot fail (in-memory data). */
  int (*xCursorError)(KvBackendCursor*, char **pzErr);
  /* The message of the last xGet on the snapshot that failed (*pzErr
  ** sqlite3_malloc'd, or left NULL).  NULL: no messages. */
  void (*xGetError)(KvBackendSnap*, char **pzErr);
  /* Called by prepare, before the WAL append, for each table with writes:
  ** an error (code + *pzErr) if the table already knows that xApply would
  ** refuse them, so the commit fails with nothing logged.  NULL: always
  ** writable.  Without the engine mutex. */
  int (*xCheckWrite)(KvBackendTable*, char **pzErr);
  /* Tables of this type keep no data file: a published batch is as
  ** durable as it will ever be, and xDurable always returns 1.  The engine
  ** then does not make WAL records wait for confirmations from them (a
  ** record naming only such tables is confirmed once it is flushed), which
  ** saves a confirmation per commit. */
  int bNoDataFile;
  /* Called once when a store opens, after its WAL replay, for each table
  ** still live: an error (SQLite code + *pzErr) fails the open, e.g. when
  ** xOpen with bCreate=0 found the table's files missing and the replay
  ** did not remove the table.  NULL: nothing to check. */
  int (*xCheckOpen)(KvBackendTable*, char **pzErr);
  /* The highest table id that a file of this type in store zStore is
  ** named after, in *piMax (0: none), whether or not the catalog lists
  ** that table.  The engine gives new tables higher ids, so a table never
  ** finds files of another (a lost catalog file, leftovers).  Called
  ** when a store opens; an error fails the open.  NULL: no files. */
  int (*xStoreMaxId)(const char *zStore, uint64_t *piMax, char **pzErr);
  /* The message of the last xApply of the table that failed, naming the
  ** file and the cause (*pzErr sqlite3_malloc'd, or left NULL when none
  ** is known).  NULL: no messages. */
  void (*xApplyError)(KvBackendTable*, char **pzErr);
  /* Point read of the committed state as it is now, with the engine mutex
  ** held, for backends whose committed data is a kv_map in memory: when
  ** *pbFound, *pOut is the entry, pinned (kv_map_value_pin): its bytes
  ** stay valid after the mutex is released, until the caller's
  ** kv_map_value_unpin(pOut->aVal).  A read with no root then takes no
  ** snapshot and copies nothing.  NULL: such reads go through
  ** xSnapshot. */
  int (*xGetNow)(KvBackendTable*, const uint8_t *aKey, int nKey,
                 KvMapEntry *pOut, int *pbFound);
  /* xApply writes the batch into the table's own files at once, before
  ** the WAL record is flushed when its commit deferred the flush (a
  ** KV_SYNC_NORMAL commit, kv.h): the engine flushes such a commit anyway
  ** when it also writes another persistent table (txn.c). */
  int bWritesAtApply;
  /* The highest CID the table's files may hold, as found at open (they
  ** may hold CIDs of records written ahead of a deferred WAL flush that a
  ** power loss then took from the WAL): the engine makes the WAL's next
  ** CID greater (wal_advance_cid).  Called once when a store opens,
  ** after its replay.  NULL: the files hold no CIDs. */
  uint64_t (*xMaxCid)(KvBackendTable*);
  /* What a cursor promises about its entries' bytes (KV_ENTRY_* flags,
  ** kv.h).  KV_ENTRY_STABLE: key and value bytes stay valid and unchanged
  ** for as long as the cursor's snapshot lives, not only until the cursor
  ** moves (the data is an immutable version in memory that the snapshot
  ** holds).  KV_ENTRY_TERM: every entry's value bytes are followed by a
  ** NUL byte (aVal[nVal]==0) for as long as they are valid.  0: bytes
  ** valid until the cursor moves, nothing after them. */
  int fEntries;
  /* xCursorNext (bPrev: xCursorPrev) and, when that lands on an entry,
  ** xCursorEntry into *pOut, in one call: a scan steps once per row.
  ** Same result as xCursorNext/xCursorPrev.  NULL: the two calls. */
  int (*xCursorStep)(KvBackendCursor*, int bPrev, KvMapEntry *pOut);
  /* Several processes: tables of this type can be shared by processes
  ** that write them one at a time under the store's writer lock.  xShare
  ** puts the table in that mode for good (a backend that writes its files
  ** in the background finishes that first; it may wait, and fail with
  ** SQLITE_BUSY and *pzErr); from then on xApply leaves every commit
  ** readable by other processes before it returns.  xRefresh: another
  ** process committed WAL record cid to the table's files (published;
  ** records come in CID order); later snapshots must read them, up to
  ** that record where the backend can tell.  Both NULL: tables of this
  ** type cannot be shared (a store holding a persistent one stays with
  ** one process). */
  int (*xShare)(KvBackendTable*, char **pzErr);
  void (*xRefresh)(KvBackendTable*, uint64_t cid);
  /* Shared tables: make every batch that any process's xApply wrote to
  ** the table's files so far durable there (engine mutex held; called by
  ** the one process running the store's background work, before it
  ** retires root WAL segments).  NULL: the table's files never say so,
  ** and no segment retires while the store is shared. */
  int (*xSharedSync)(KvBackendTable*, char **pzErr);
  /* Shared tables: called by the store thread of every process that can
  ** write, every few milliseconds (engine mutex held); bOwner: this
  ** process runs the store's background work (OWNER), which for a
  ** backend that compacts its files includes that.  Must not block: work
  ** goes to the backend's own thread.  NULL: nothing to do. */
  void (*xSharedTick)(KvBackendTable*, int bOwner);
};

/* memory.c */
extern const KvBackend kvMemoryBackend;
/* btree.c */
extern const KvBackend kvBtreeBackend;
/* log.c */
extern const KvBackend kvLogBackend;

#endif /* DEPOT_KV_BACKEND_H */
