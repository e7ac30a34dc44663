/*
** depot_vfs.h -- public interface of vfs/: the "depot" VFS and the calls
** the SQL surface (ext/) uses to inspect a store.
**
** A depot database is opened with a URI filename naming the store file:
**
**     file:/path/store.depot?vfs=depot&db=NAME&branch=NAME
**
** URI parameters (all optional):
**   db=NAME          database in the store (default "main"), 1..255 bytes
**   bucket=NAME      bucket holding the database (default "main"); a bucket
**                    made by depot_fork_bucket() reads the capped fork of
**                    its parent's databases until its first write, which
**                    gives the name its own branch there
**   branch=NAME      branch of that database (default "main"), 1..255 bytes
**   cache_kb=N       decoded-page cache of this database branch, shared by
**                    the process's connections to it, in KiB (default
**                    16384; 0 turns it off); also PRAGMA depot_cache_kb
**   store_vfs=NAME   VFS for the outer store file (default: the default VFS)
**   store_sync=off|normal|full|extra  synchronous level of the outer store
**                    (default full)
**   zstd_level=N     compression level of new pages, 1..19 (default 1)
**
** Semantics: one SQLite transaction is one depot commit, published
** atomically at the transaction's sync point as one store transaction whose
** head update is a compare-and-set.  Readers pin the head when they take
** the SHARED lock and read that snapshot until they release it; they never
** block a writer.  RESERVED is the store's writer lock of the branch name
** (store_writer_lock()), which every connection of every process takes to
** write: SQLITE_BUSY while another holds it, so SQLite's busy handler waits
** as on a file.  A writer whose snapshot is stale when it takes the lock
** gets SQLITE_BUSY_SNAPSHOT at its first write and writes nothing (SQLite
** retries an autocommit statement or BEGIN IMMEDIATE with a fresh
** snapshot); a COMMIT that holds the lock is not overtaken.  In
** locking_mode=EXCLUSIVE the lock is held from the first read or write
** until the connection leaves the mode or closes.  journal_mode=WAL
** answers the journal mode in effect and changes nothing; every other mode
** is accepted (the journal lives in memory in all of them).  Each database
** name of a store has its own full pathname (vfs/share.h), so SQLite's
** shared cache is shared only by connections to one depot database.
*/
#ifndef DEPOT_VFS_H
#define DEPOT_VFS_H

#include <stdint.h>

#define DEPOT_VFS_NAME "depot"

/* Register the "depot" VFS (not as the default).  Idempotent and
** thread-safe; SQLITE_OK or SQLITE_NOMEM. */
int depot_vfs_register(void);

/* Makes the depot VFS the process's default VFS (bOn), or, when it is the
** default, gives that back to the VFS that was the default when depot
** registered (!bOn).  For hosts that cannot name a VFS (no URI filenames,
** no VFS argument): a database opened while depot is the default is a
** depot database, its file name the store.  SQLITE_OK, or the code of
** sqlite3_vfs_register(). */
int depot_vfs_set_default(int bOn);

/* depot_vfs_set_default(bOn), and with bOn the parameters zParams
** ("db=crm&branch=try": KEY=VALUE pairs of the depot URI parameters db,
** branch, bucket, cache_kb, store_vfs, store_sync, zstd_level and
** compact_after, joined by '&', no percent-decoding) for every depot open
** whose name does not name the depot VFS itself (a plain name while depot
** is the default); a parameter the name gives wins.  NULL zParams: none.
** Turning depot off drops them.  A bad zParams is SQLITE_ERROR with
** *pzErr (sqlite3_malloc'd) and changes nothing. */
int depot_vfs_set_default_params(int bOn, const char *zParams, char **pzErr);

/* The name of the VFS for the module's own SQLite files (stores, kv_btree
** data files, the plain side of an import or export) when none is named:
** the name of SQLite's default VFS, except while depot is the default,
** when it is the VFS that was the default before, so that those files never
** open through depot itself.  Always a name (NULL only when SQLite has no
** VFS at all), so that another thread making depot the default between
** this call and the open cannot send the file into depot. */
const char *depot_vfs_plain(void);

/* The reason of the last error the depot VFS reported on the calling
** thread (the text it also sends to the SQLite error log), or NULL if none
** since the thread's last open of a depot database began.  Points into
** the thread's own buffer: copy it before the thread's next depot call. */
const char *depot_vfs_last_error(void);

/* One commit of a branch, as depot_commits lists it. */
typedef struct DepotCommitInfo DepotCommitInfo;
struct DepotCommitInfo {
  uint64_t iTxid;
  uint64_t iTimeMs;          /* wall clock at commit, informational */
  uint32_t szPage;
  uint32_t nPage;            /* database size after the commit, pages */
  uint32_t nWritten;         /* pages written by the commit */
  uint64_t nStored;          /* bytes of its page blob */
  uint64_t iChecksum;        /* post-apply database checksum */
};

/* Called once per commit in txid order; nonzero stops the listing. */
typedef int (*DepotCommitFn)(void *pArg, const DepotCommitInfo*);

/* List the commits of (zDb, zBranch) in the store file zStore (which must
** exist; opened with the default VFS); zDb is NAME (bucket main) or
** BUCKET/NAME.  A database or branch that does not exist, or a name the
** bucket only inherits, lists nothing; a bucket that does not exist is an
** error.  Errors: SQLITE_CANTOPEN, SQLITE_CORRUPT, store errors, with
** *pzErr (sqlite3_malloc'd) set. */
int depot_list_commits(const char *zStore, const char *zDb,
                       const char *zBranch, DepotCommitFn xCommit,
                       void *pArg, char **pzErr);

/* Whole-store figures for depot_stats. */
typedef struct DepotStats DepotStats;
struct DepotStats {
  int64_t nDatabase;         /* distinct database names */
  int64_t nBranch;           /* branches of all databases */
  int64_t nStored;           /* bytes of page blobs */
  int64_t nLogical;          /* sum over branch heads of pages*page size */
  int64_t nCacheHit;         /* decoded-page cache, whole process */
  int64_t nCacheMiss;
  int64_t nQuotaUsed;        /* sum of every database's quota use */
  int64_t nQuotaCapped;      /* databases with a quota */
  int64_t nQuotaFull;        /* ... whose use has reached the cap */
  int64_t nCompactLag;       /* commits past the compaction watermark of
                             ** every branch not dropped */
  int64_t nReclaimable;      /* bytes depot_gc() would free now */
  int64_t nPhysical;         /* bytes on disk: the store file and its
                             ** -wal (store_physical_bytes()) */
  int bPg;                   /* a PostgreSQL store: the replication
                             ** figures below are its primary's */
  char zSyncCommit[16];      /* synchronous_commit of a writer's session */
  int64_t nSyncStandby;      /* synchronous standbys attached; -1 unknown */
  int64_t nStandby;          /* standbys streaming; -1 unknown */
  int64_t iTimeline;         /* the server's timeline; 0 unknown */
  int64_t bStandby;          /* a PostgreSQL store's server is a hot
                             ** standby (store_pg_replica()) */
  double rReplayLag;         /* its replay lag in seconds, -1 unknown */
};

int depot_store_stats(const char *zStore, DepotStats *pStats, char **pzErr);

/* The replication role and replay lag of the server of the store zStore
** (store_pg_replica(): a standby, and seconds of lag, -1 unknown; 0 and 0
** for a primary and for a store file).  Errors: SQLITE_CANTOPEN and store
** errors with *pzErr (sqlite3_malloc'd) set. */
int depot_store_replica(const char *zStore, int *pbStandby, double *prLag,
                        char **pzErr);

/* The memory bound of depot databases.  A process that opens one store
** through one connection has a peak RSS of at most what the same work
** takes through the unix VFS, plus the limits configured for it: the
** limit_bytes of its depot_memory rows (cache_kb, map_kb, store_cache_kb,
** txn_budget_kb, the 64 KiB page scratch, readahead) with the transaction
** budget counted twice (the buffer's pages, and while a commit writes
** them, their encoded frames: at most as many bytes again; a staged batch
** encodes in parts of 4 MiB), plus DEPOT_MEMORY_SLACK_KB for what has no limit of its
** own (zstd contexts, one staged part's frames, the commit's index and
** location arrays, the free room of the decoded-page cache's slabs (at
** most 1/16 of cache_kb plus 256 KiB: 4.25 MiB at the default), malloc's
** per-chunk overhead and fragmentation).  make
** bench-speed reports it per size. */
#define DEPOT_MEMORY_SLACK_KB (16*1024)

/* One structure of a connection's memory, as depot_memory lists it:
** what it is (zName), whose it is (zScope: "connection", "transaction",
** "process"), the bytes it holds now and its bound (-1: none; it grows
** with what it holds, by the size the contract states). */
typedef int (*DepotMemoryFn)(void *pArg, const char *zName,
                             const char *zScope, int64_t nBytes,
                             int64_t nLimit);

/* Report, one xRow call each, the memory of the depot database file
** pFile (an sqlite3_file* of the main database of a depot connection, from
** SQLITE_FCNTL_FILE_POINTER): the decoded-page cache of its store file
** and the page map of its branch name (shared by the process), its store
** connection (page cache, schema, statements), the write transaction's
** buffer and staged-page map, its zstd contexts, its page scratch buffer
** and read-ahead.  SQLITE_NOTFOUND for a file of another VFS.  Call it
** with the connection's mutex held (from SQL on that connection). */
int depot_vfs_memory(void *pFile, DepotMemoryFn xRow, void *pArg);

/* 1 if the store file zStore is on a file system mounted read-only, where
** it opens only immutable (its -shm cannot be made); vfs/admin.c. */
int depot_store_on_read_only_fs(const char *zStore);

/*
** Branch operations (vfs/op.c and the files of vfs/op.h).  Each opens the
** store file zStore (it must exist), runs as ONE store transaction and
** closes it again: when it returns SQLITE_OK the whole change is durable (the store's synchronous
** setting, FULL by default); on any error, or if the process dies before
** the store commits, nothing changed.  zDb is "NAME" (bucket main) or
** "BUCKET/NAME".  Errors come with a sqlite3_malloc'd English *pzErr:
** SQLITE_CANTOPEN (no store), SQLITE_ERROR (bad argument, unknown or
** duplicate name, target outside retention, depth limit), SQLITE_CORRUPT.
*/

/* Forks of forks: a branch may have at most this many ancestors. */
#define DEPOT_MAX_FORK_DEPTH 32

/* A point in a branch's history. */
typedef struct DepotAt DepotAt;
struct DepotAt {
  int eType;               /* DEPOT_AT_HEAD / _TXID / _TEXT */
  int64_t iTxid;           /* DEPOT_AT_TXID */
  const char *zText;       /* DEPOT_AT_TEXT: ISO-8601 time or restore point */
};
#define DEPOT_AT_HEAD 0
#define DEPOT_AT_TXID 1
#define DEPOT_AT_TEXT 2

/* Fork zFrom of zDb at pAt into the new branch zNew: a branch record with
** parent and cap, nothing copied.  *piNew gets the new branch id. */
int depot_fork(const char *zStore, const char *zDb, const char *zFrom,
               const char *zNew, const DepotAt *pAt, uint64_t *piNew,
               char **pzErr);

/* Pin the head of zBranch as restore point zName of zDb. */
int depot_restore_point(const char *zStore, const char *zDb,
                        const char *zBranch, const char *zName, char **pzErr);

/* Close the store handle this process keeps idle between fork and restore
** operations (one at most), if any; the next operation opens its store
** again.  For a host that wants the store file closed now, and for a clean
** exit under a leak checker.  Changes nothing on disk. */
void depot_fork_idle_close(void);

/* Remove restore point zName of zDb and its pin. */
int depot_drop_restore_point(const char *zStore, const char *zDb,
                             const char *zName, char **pzErr);

/* One restore point, as depot_restore_points lists it. */
typedef struct DepotRpInfo DepotRpInfo;
struct DepotRpInfo {
  const char *zName;
  const char *zBranch;     /* name of the branch it pins */
  uint64_t iBranch, iTxid, iTimeMs;
  int bUndo;
};
typedef int (*DepotRpFn)(void*, const DepotRpInfo*);
int depot_list_restore_points(const char *zStore, const char *zDb,
                              DepotRpFn, void*, char **pzErr);

/* Restore zBranch of zDb to pAt: pin its head as an undo restore point
** (its name in *pzUndo, sqlite3_malloc'd), fork at the target and point
** the name at the fork (pointer history kept; the old branch is frozen). */
int depot_restore(const char *zStore, const char *zDb, const char *zBranch,
                  const DepotAt *pAt, char **pzUndo, char **pzErr);

/* Roll zBranch of zDb back to pAt (a fork at the target gets the name; the
** old branch is frozen and pinned by the pointer history), or with pAt
** NULL undo the name's last move (restore, rollback or undo): a fork of
** the branch it pointed to before, at that branch's head. */
int depot_rollback(const char *zStore, const char *zDb, const char *zBranch,
                   const DepotAt *pAt, uint64_t *piNew, char **pzErr);

/* Drop a branch by name (zBranch) or, with zBranch NULL, a frozen branch
** by id: its name goes (a tombstone in a forked bucket), its restore
** points and the pins it holds are released (its fork pin on the parent
** once no child reads through it); its rows stay for compaction. */
int depot_drop_branch(const char *zStore, const char *zDb,
                      const char *zBranch, uint64_t iBranch, char **pzErr);

/* Take away name zBranch of zDb (NAME or BUCKET/NAME) when it leads to an
** unborn branch -- one that a write transaction's first staged batch
** created and that has no commit (an import or large transaction that
** failed or was killed) -- whose writer is gone: the name shows again what
** it showed before (nothing, or the inherited branch), and depot_gc
** removes the branch's rows and record.  SQLITE_OK, doing nothing, for
** any other name. */
int depot_abandon_unborn(const char *zStore, const char *zDb,
                         const char *zBranch, char **pzErr);

/* Point-in-time policy of zDb (NULL: the store default).  Interval 0:
** every commit is a point; retention 0: point-in-time targets are off. */
int depot_pitr_set(const char *zStore, const char *zDb, int64_t iIntervalS,
                   int64_t iRetentionS, char **pzErr);
int depot_pitr_get(const char *zStore, const char *zDb, int64_t *piIntervalS,
                   int64_t *piRetentionS, char **pzErr);
#define DEPOT_PITR_DEFAULT_INTERVAL_S  300
#define DEPOT_PITR_DEFAULT_RETENTION_S (7*86400)

/* Fork bucket zBucket into the new bucket zNew at pAt (head, a store
** sequence number as DEPOT_AT_TXID, or an ISO-8601 time); *piVs gets the
** store sequence number the fork is capped at. */
int depot_fork_bucket(const char *zStore, const char *zBucket,
                      const char *zNew, const DepotAt *pAt, uint64_t *piVs,
                      char **pzErr);

/* One branch record, as depot_branches lists it. */
typedef struct DepotBranchInfo DepotBranchInfo;
struct DepotBranchInfo {
  const char *zBucket, *zDb, *zBranch;
  uint64_t iBranch, iParent, iForkTxid, iHeadTxid;
  int eState;              /* 0 live, 1 frozen, 2 dropped */
  int64_t nLogical;        /* bytes: pages * page size at the head */
  int64_t nRef;            /* pins on it (children, restore points) */
  int64_t nStored;         /* bytes of its page blobs (DELTA and shards) */
};
typedef int (*DepotBranchFn)(void*, const DepotBranchInfo*);
int depot_list_branches(const char *zStore, const char *zDb,
                        DepotBranchFn, void*, char **pzErr);

/* One name visible in a bucket, as depot_databases lists it. */
typedef struct DepotNameInfo DepotNameInfo;
struct DepotNameInfo {
  const char *zBucket, *zDb, *zBranch;
  uint64_t iBranch;        /* own or inherited branch */
  uint64_t iTxid;          /* its head, or the inherited cap */
  int bInherited;
  int64_t nLogical;
};
typedef int (*DepotNameFn)(void*, const DepotNameInfo*);
int depot_list_databases(const char *zStore, const char *zBucket,
                         DepotNameFn, void*, char **pzErr);

/*
** Quotas (vfs/quota.c).  A database for quotas is a database name in one
** bucket ("NAME" or "BUCKET/NAME"): its use is the net blob bytes stored
** by all its branches (forks, restore and rollback branches, frozen and
** dropped ones until reclaimed); bytes a fork shares with its ancestors
** count once, where they are stored.  A commit that would pass the cap
** fails with SQLITE_FULL and writes nothing.  These calls open the store
** (it must exist) for one transaction and close it again; errors as for
** the branch operations above.
*/

/* Use and cap of zDb; *pbCap 0 when it has no cap.  A database without
** branches uses 0 bytes. */
int depot_quota_get(const char *zStore, const char *zDb, int64_t *pnUsed,
                    int64_t *pnCap, int *pbCap, char **pzErr);

/* Set the cap of zDb to nCap bytes (>= 0), or remove it (bRemove).  A cap
** below the current use is allowed: commits that add bytes fail until
** reclaim or a higher cap makes room.  Durable when it returns SQLITE_OK. */
int depot_quota_set(const char *zStore, const char *zDb, int bRemove,
                    int64_t nCap, char **pzErr);

/* One database's quota, as depot_quotas lists it. */
typedef struct DepotQuotaInfo DepotQuotaInfo;
struct DepotQuotaInfo {
  const char *zDb;         /* "NAME" or "BUCKET/NAME" */
  int64_t nUsed;
  int bCap;
  int64_t nCap;
};
typedef int (*DepotQuotaFn)(void*, const DepotQuotaInfo*);

/* Every database with a branch or a quota, by bucket id then name. */
int depot_quota_list(const char *zStore, DepotQuotaFn, void*, char **pzErr);

/*
** Verification (vfs/verify.c): read the whole store (or one database, or
** one branch of it) in one read transaction and report every problem
** found, one DepotFinding each; a healthy store gives none.  The store is
** never changed.  At most DEPOT_VERIFY_MAX_FINDINGS findings are
** reported; the last one then says the verification stopped there.
*/
#define DEPOT_VERIFY_MAX_FINDINGS 10000

typedef struct DepotFinding DepotFinding;
struct DepotFinding {
  const char *zDb;         /* "NAME"/"BUCKET/NAME"; NULL: store-wide */
  const char *zBranch;     /* NULL: not about one branch */
  uint64_t iBranch;        /* 0: not about one branch */
  const char *zKind;       /* blob chunk commit vtx page_index shard head
                           ** pin refcount restore_point fork counter
                           ** branch limit */
  int64_t iTxid;           /* -1: none */
  int64_t iPgno;           /* -1: none */
  const char *zKey;        /* hex of the store key concerned, or NULL */
  const char *zMsg;
};
typedef int (*DepotFindingFn)(void*, const DepotFinding*);

/* zDb NULL: the whole store; else that database, and with zBranch only
** the branches of that name.  SQLITE_ERROR for an unknown database or
** branch; store errors stop the verification with their code. */
int depot_verify(const char *zStore, const char *zDb, const char *zBranch,
                 DepotFindingFn, void*, char **pzErr);

/*
** Compaction and reclaim (vfs/compact.c, gc.c).  Each call opens the store file
** zStore (default VFS, synchronous FULL) and runs as a series of store
** transactions, each durable when it commits and each leaving a readable
** store if the process dies at any point: shard versions are added in
** their own transactions (only added rows, credited to the stored-bytes
** counters in the same transaction), and the page index rows, DELTA,
** COMMITS and VTX rows they replace are cleared in one install
** transaction that first rechecks the branch's generation; reclaim works
** one branch per transaction.  Errors as for the branch operations.
*/

/* What depot_compact() did. */
typedef struct DepotCompactResult DepotCompactResult;
struct DepotCompactResult {
  int64_t nBranch;          /* branches whose watermark advanced */
  int64_t nCommit;          /* commits folded into shards */
  int64_t nShard;           /* shard versions written */
  int64_t nPage;            /* pages in them */
  int64_t nShardBytes;      /* their blob bytes */
  int64_t nFreed;           /* DELTA blob bytes freed */
  int64_t nSkipped;         /* branches left for later: a job found its
                            ** plan stale on every retry */
};

/* Fold the page deltas of branch zBranch of zDb ("NAME" or
** "BUCKET/NAME"), of every branch of zDb (zBranch NULL), or of every
** branch of the store (zDb NULL too) into shard versions at the
** branch's coverage points, until the compaction watermark reaches the
** head.  Never holds the store's write lock for longer than one shard
** version or one install. */
int depot_compact(const char *zStore, const char *zDb, const char *zBranch,
                  DepotCompactResult *pRes, char **pzErr);

/* What depot_gc() freed (or would free). */
typedef struct DepotGcResult DepotGcResult;
struct DepotGcResult {
  int64_t nBranch;          /* dropped branches removed */
  int64_t nRow;             /* store rows deleted */
  int64_t nByte;            /* blob bytes credited back */
};

/* Reclaim: delete the COMMITS/VTX rows at or below each branch's
** watermark and the shard versions that no head, fork cap, restore point,
** retained point in time or bucket fork can read, and every row of a
** dropped branch nothing pins; credit the branch and store byte counters
** back.  depot_gc_preview() reports the same without changing anything. */
int depot_gc(const char *zStore, DepotGcResult *pRes, char **pzErr);
int depot_gc_preview(const char *zStore, DepotGcResult *pRes, char **pzErr);

/* Rewrite the store file without its free pages (the embedded store:
** VACUUM, which also turns on auto_vacuum=INCREMENTAL for a store made
** before it was the default, so that later depot_gc() runs give their
** pages back), then truncate its -wal.  *pnBefore and *pnAfter get the
** physical bytes (file plus -wal) before and after.  Takes the store's
** write lock for the whole rewrite (SQLITE_BUSY after the busy timeout
** when a writer holds it); a reader of another process that pins the -wal
** leaves it untruncated. */
int depot_vacuum(const char *zStore, int64_t *pnBefore, int64_t *pnAfter,
                 char **pzErr);

/* The store's background compaction threshold: a connection that commits
** to a branch with more than this many commits past its watermark wakes
** the background compactor (0: off; a connection's compact_after= URI
** parameter overrides it).  nSet >= 0 sets it (one store transaction),
** -1 only reads it; *pn gets the value in force. */
#define DEPOT_COMPACT_DEFAULT_THRESHOLD 1000
int depot_compact_threshold(const char *zStore, int64_t nSet, int64_t *pn,
                            char **pzErr);

/* Commits past the compaction watermark, summed over live branches. */
int depot_compaction_lag(const char *zStore, int64_t *pnLag, char **pzErr);

/*
** Progress of long operations (vfs/progress.c).  The calling thread may
** install one callback; depot_import and depot_export (units: pages),
** depot_compact (units: shard versions of the job in progress), depot_gc
** and depot_verify (units: branches) call it from that thread as they
** go, with zWhat "import", "export", "compact", "gc" or "verify", the
** units done and the total (-1 when unknown) and the bytes processed so
** far.  A nonzero return stops the operation, which fails with
** SQLITE_INTERRUPT ("depot: interrupted"): an import stores nothing, an
** export removes its partial file, a compaction deletes the shard
** versions its unfinished job wrote (jobs already installed stay: each
** folds at most 4096 commits of one branch), reclaim stops between
** branches and verification stops reading.  xFn NULL removes the hook.
*/
typedef int (*DepotProgressFn)(void *pArg, const char *zWhat, int64_t nDone,
                               int64_t nTotal, int64_t nBytes);
void depot_progress_set(DepotProgressFn xFn, void *pArg);
int depot_progress_active(void);
/* Calls the hook if any; 1 when it asks to stop. */
int depot_progress_report(const char *zWhat, int64_t nDone, int64_t nTotal,
                          int64_t nBytes);

/* 1 and the time in ms since 1970 if z is an ISO-8601 time
** (YYYY-MM-DD[( |T)HH:MM[:SS[.fff]]][Z|(+|-)HH:MM]), else 0. */
int depot_parse_time(const char *z, int64_t *piMs);

#endif /* DEPOT_VFS_H */
