/*
** engine_int.h -- the structures and functions shared by the files of the
** KV engine.  Private to ext/kv/; the engine's public interface is kv.h.
**
** Files, each calling only the ones listed before it (besides codec.c,
** map.c and the backends, which call nothing of these):
**   table.c    the backend list, table names, KvTable objects, the
**              store's failed state
**   catalog.c  the catalog: its entries, its file, publishing its changes
**   ddl.c      catalog changes while several processes share the store
**   resolve.c  the resolution log of named prepared transactions
**   version.c  key versions: records, publication, queries, TTL sweeper
**   engine.c   stores: registry, lock, open (catalog, WAL replay), close,
**              listings, kv_stats accessors
**   metrics.c  process-wide counters
**   hook.c     write hooks: registration, the xInit pass, delivery of
**              the writes a commit published
**   txn.c      root transactions: bind, read, write, prepare, commit
**   iter.c     scans
**   vertxn.c   the versioned prepare and commit
**   indoubt.c  named prepared transactions: prepare, resolve, list
** (engine.c restores the in-doubt roots at replay and frees them at close,
** leaving their records in the WAL; indoubt.c detaches a root it puts in
** doubt first, kvRootDetach.)
** Where a lower file needs an upper one's help it takes a function pointer
** the upper file sets (KvTable.xVerFree, KvEngine.xHookFree;
** KvTableDef.xConfirm for the backends).
**
** Locking: KvEngine.mutex (the engine mutex) guards every field of
** KvEngine and KvTable not marked otherwise, the catalog, the prepared
** list and all version state; the registry mutex of engine.c guards the
** list of open stores and the last release of KvEngine.nRef (a holder
** takes or drops a further reference with an atomic operation alone);
** KvEngine.catMutex serialises catalog file writes and is taken before
** the engine mutex.  A KvRoot, its children and savepoints belong to the
** one thread using the root; KvRoot.pNextPrepared is guarded by the
** engine mutex.
*/
#ifndef DEPOT_KV_ENGINE_INT_H
#define DEPOT_KV_ENGINE_INT_H

#include "ext/kv/kv.h"
#include "ext/kv/backend.h"
#include "ext/kv/codec.h"
#include "ext/kv/map.h"
#include <pthread.h>

typedef struct KvTable KvTable;
typedef struct KvChild KvChild;
typedef struct KvSavepoint KvSavepoint;
typedef struct KvVerTable KvVerTable;
typedef struct KvVerStore KvVerStore;
typedef struct KvVerReceipts KvVerReceipts;
typedef struct KvHookStore KvHookStore;
typedef struct KvHookEvent KvHookEvent;
typedef struct KvSweeper KvSweeper;
typedef struct KvDdl KvDdl;

/* A table of a store: its catalog entry and its backend state.  All
** fields but the immutable ones (zName, nName, meta, pBackend, pEng) are
** guarded by KvEngine.mutex. */
struct KvTable {
  KvEngine *pEng;
  char *zName; int nName;       /* NUL-terminated copy, nName bytes */
  KvMeta meta;
  const KvBackend *pBackend;
  KvBackendTable *pData;        /* NULL while pending (created, uncommitted) */
  KvMap *pRev;                  /* key -> revision, NULL when empty */
  int64_t nRevKept;             /* pRev's size after its last pruning */
  int nActive;                  /* unfinished children bound to it */
  KvChild *pActFirst, *pActLast; /* those children, in bind order */
  KvVerTable *pVer;             /* key versions (version.c), or NULL */
  void (*xVerFree)(KvTable*);   /* frees pVer; set by version.c with it */
  int nHookWrite;               /* hooks wanting xWrite (hook.c) */
  int nHookOld;                 /* ... of them wanting old values */
  int64_t nSweepPass;           /* TTL sweep batches committed (expire.c, */
  int64_t nSwept;               /* ... and rows they removed; atomics) */
  int nRef;                     /* engine list + children + roots */
  int bLive;                    /* in KvEngine.pTables */
  KvTable *pNext;
};

struct KvEngine {
  char *zDir;                   /* real path, NULL: anonymous */
  int nRef;                     /* atomic; drops to 0 only under the
                                ** registry mutex (engine.c) */
  int fdLock;                   /* LOCK; -1 for anonymous */
  int fdDirLock;                /* the store directory, flocked; -1 if none */
  Wal *pWal;                    /* NULL for anonymous */
  const WalIo *pIo;
  pthread_mutex_t mutex;
  uint64_t iSeq;                /* last published commit sequence */
  uint64_t iNextTid;            /* atomic once the store is open */
  uint64_t iNextTableId;
  uint64_t iCatalogSeq;         /* sequence of the last catalog publish;
                                ** written under the mutex, read relaxed */
  KvTable *pTables;             /* live tables */
  KvTable *pMeta;               /* the catalog, ".tables_meta" */
  KvRoot *pPrepared;            /* prepared, not yet finished roots */
  pthread_mutex_t catMutex;     /* serialises catalog file writes */
  pthread_cond_t deltaCond;     /* with the engine mutex: broadcast when a
                                ** prepared root leaves pPrepared, for a
                                ** prepare waiting on a counter (txn.c) */
  int bLoadingCatalog;          /* the catalog file is being loaded: its
                                ** tables' files must exist (xOpen is told
                                ** bCreate=0); set during open only */
  KvVerStore *pVer;             /* version TTL and sweeper (version.c) */
  KvRoot *pInDoubt;             /* named prepared roots, by pNextInDoubt */
  KvMap *pResolved;             /* gid -> decision (resolve.c) */
  int nResFile;                 /* entries in prepared.log (resMutex) */
  int nResTrimAt;               /* trim it when nResFile reaches this */
  pthread_mutex_t resMutex;     /* serialises resolution log appends */
  KvHookStore *pHook;           /* write hooks and their queue (hook.c),
                                ** set once, at the first registration */
  void (*xHookFree)(KvEngine*); /* frees pHook; set by hook.c with it */
  KvSweeper *pSweep;            /* TTL sweeper thread (expire.c), mutex */
  void (*xSweepStop)(KvEngine*);/* stops it; set by expire.c with it */
  int rcFailed;                 /* failed state (kvEngineFail); atomic */
  char *zFailed;                /* its message, set before rcFailed */
  KvEngine *pNextEngine;        /* registry mutex (engine.c) */

  /* Several processes (engine.c, "Sharing a store").  bShared and
  ** bSharing change under the engine mutex (bShared read relaxed before
  ** it); posSeen/cidSeen: the log up to there is applied here. */
  int bShared;                  /* other processes may use the store */
  int bSharing;                 /* turning shared: prepares wait */
  int bJoining;                 /* opening tables to join others (set
                                ** during the open only) */
  int bReadOnly;                /* kv_engine_open_readonly: writes no file,
                                ** takes no writer lock */
  WalShared *pShm;              /* the shared header, once shared */
  WalPos posSeen;               /* engine mutex */
  uint64_t cidSeen;             /* engine mutex */
  pthread_mutex_t writerMutex;  /* this process's side of the writer lock */
  pthread_t joinThread;         /* alone: waits for a process to join */
  int bJoinThread;
  int bJoinStop;                /* joinMutex */
  pthread_mutex_t joinMutex;
  pthread_cond_t joinCond;
  /* The store's once-per-store work while shared (engine.c, "Sharing a
  ** store"): iSlot/segSlot are set at open and by the store thread only;
  ** segRetired by the store thread only; abWork atomics. */
  int iSlot;                    /* position slot held in LOCK, -1: none */
  uint64_t segSlot;             /* segment last published in it */
  uint64_t segRetired;          /* owner: every segment below is retired */
  int64_t iRetireMs;            /* owner: last retirement check */
  int abWork[2];                /* holds the lock of KV_WORK_* */
  pthread_mutex_t syncMutex;    /* this process's side of the SYNC lock */
  /* kvEngineCatchUp, for the files below engine.c (version.c). */
  int (*xCatchUp)(KvEngine*, int bRecover, char **pzErr);
  /* kvEngineWorkTurn, for table.c (KvTableDef.xStoreWork). */
  int (*xWorkTurn)(KvEngine*, int eWork);
  /* kvEngineFilesPinned, for table.c (KvTableDef.xFilesPinned). */
  int (*xFilesPinned)(KvEngine*);
  int bRoAloneHeld;             /* engine mutex: read-only, opened alone,
                                ** holds ROALONE (engine.c) */
  KvDdl *pDdl;                  /* removed tables' files (ddl.c): the
                                ** store thread's */
  uint64_t cidSlot;             /* position last published in the slot's
                                ** catch-up word (engine.c), store thread */
};

/* Children a root holds without an allocation of their list. */
#define KV_ROOT_CHILDREN 4

/* One table touched by a root. */
struct KvChild {
  KvTable *pTab;                /* holds a reference */
  uint64_t iSnap;               /* engine iSeq when it bound */
  KvBackendSnap *pSnap;         /* NULL for a pending table, and while
                                ** bSnapLater */
  int bSnapLater;               /* bound by a write: pSnap is taken at the
                                ** first read (txn.c) */
  KvMap *pWrite;                /* key -> value or tombstone */
  KvMap *pRead;                 /* keys of point reads */
  int bWatch;                   /* a write bound it (kv_root_touch): the
                                ** prepare checks the table's catalog entry
                                ** even with no key read or written */
  KvMap *pRange;                /* range reads: low key -> high key (an
                                ** empty high key: no upper bound) */
  KvMap *pDelta;                /* counter deltas (kv_counter_add): key ->
                                ** delta record; resolved into pWrite by
                                ** prepare */
  KvMap *pWritePre;             /* pWrite before that (kv_root_unprepare) */
  int bSchema;                  /* the catalog child */
  int bActive;                  /* counted in pTab->nActive (bound live,
                                ** not the catalog): uncounted at finish */
  int64_t iBindMs;              /* with bActive: when it bound (monotonic
                                ** ms, 0 while version TTL is off) */
  KvChild *pActPrev, *pActNext; /* with bActive: pTab's active list */
};

struct KvSavepoint {
  int iLevel;
  int iUndo;                    /* KvRoot.undo.n when it was opened */
};

struct KvRoot {
  KvEngine *pEng;               /* holds a reference */
  uint64_t tid;
  uint64_t cid;                 /* WAL record, 0 if none */
  int eState;
  int bRemove;                  /* did remove_table */
  int nChild, nChildAlloc;
  KvChild **apChild;            /* first-touch order: aChildIn until more
                                ** than KV_ROOT_CHILDREN (kvRootChildNew) */
  KvChild *aChildIn[KV_ROOT_CHILDREN];
  KvChild child0;               /* apChild[0]'s storage */
  KvChild *pSchema;
  int nNew;
  KvTable **apNew;              /* tables created here (pending) */
  int nSp;
  KvSavepoint *aSp;
  KvBuf undo;                   /* while a savepoint is open: the write
                                ** sets' old entries, one record per
                                ** write, oldest first (txn.c) */
  KvRoot *pNextPrepared;        /* engine mutex */
  int bWriterLock;              /* holds the store's writer lock (shared
                                ** store, from prepare to its end) */
  int msBusy;                   /* how long prepare waits for that lock */
  int bAppended;                /* ... and appended to the WAL under it */
  int bPubFailed;               /* its publication failed: the tail is not
                                ** published (the next writer recovers) */
  int bFlushAfter;              /* shared store: its record was written
                                ** unflushed, flushed after the writer
                                ** lock is released (kv_root_commit) */
  WalPos posEnd;                /* ... and where the record ends */
  int nConflict;
  KvConflict *aConflict;        /* after a failed prepare */
  int eProto;                   /* KV_PROTO_* */
  KvVerReceipts *pReceipts;     /* versioned commit: receipts sink */
  int64_t iHandle;              /* kv_begin() handle, 0 for SQL transactions */
  char *zCond;                  /* kv_root_set_condition: coordinator URI */
  int64_t iMarker;              /* ... and the marker id, or NULL/0 */
  char *zGid; int nGid;         /* named prepare: the global id */
  int64_t iPreparedMs;          /* ... and when (unix ms) */
  int bResolving;               /* engine mutex: being prepared/resolved */
  int bNoEngRef;                /* in doubt: holds no reference on pEng */
  KvRoot *pNextInDoubt;         /* engine mutex */
  char *zHeldBy;                /* after a failed prepare: the gid of an
                                ** in-doubt root it conflicted with */
  int eSync;                    /* KV_SYNC_*; 0 is KV_SYNC_FULL */
  int eOrigin;                  /* KV_ORIGIN_* */
  KvHookEvent *pHookEv;         /* its writes for hooks, until published */
  uint64_t iHookSeq;            /* published with hooks to call: its seq */
  uint64_t segInDoubt;          /* in doubt in a shared store: the WAL
                                ** segment of its record (0: unknown) */
};

/* The names of the pseudo-tables of a WAL record: they start with a NUL
** byte, which no table name may hold (kv_name_check), so they never meet
** a table.  KV_REC_COND: the record's condition, one put whose key is the
** marker id (8 bytes, little-endian) and whose value is the coordinator
** URI.  At open every record waits for every table it names, so the
** replay confirms KV_REC_COND of each conditional record it decides. */
#define KV_REC_COND      "\0if"
#define KV_REC_COND_LEN  3
/* KV_REC_GID: a named prepared record, one put whose key is the gid and
** whose value the prepare time (u64 unix ms).  Always the first table;
** the record waits for its confirmation, given once it is resolved.
** KV_REC_READS: its read reservations, one delete per read key, whose key
** is u32 nName (little-endian), the table name, the key. */
#define KV_REC_GID       "\0gid"
#define KV_REC_GID_LEN   4
#define KV_REC_READS     "\0rd"
#define KV_REC_READS_LEN 3
/* KV_REC_GID_DONE: the first table of the record that commits a named
** prepared transaction in a shared store (engine.c, "in-doubt
** transactions, shared"): one put whose key is the gid and whose value
** the CID of the prepared record (u64); its writes follow. */
#define KV_REC_GID_DONE     "\0gidc"
#define KV_REC_GID_DONE_LEN 5

/* ---- resolve.c -------------------------------------------------------- */
int64_t kvNowMs(void);                        /* wall clock, unix ms */
/* Load <store>/prepared.log into pEng->pResolved (at open, before the
** replay), forgetting decisions older than KV_RESOLVED_KEEP_MS whose
** records are in retired WAL segments. */
int kvResolvedLoad(KvEngine*, char **pzErr);
/* Record decision cDecision ('c', 'r') for gid, whose prepared WAL record
** is cid, durably, then in memory; trims the file when it is due.
** Engine mutex not held. */
int kvResolvedAdd(KvEngine*, int cDecision, uint64_t cid,
                  const char *zGid, int nGid, char **pzErr);
/* The decision remembered for gid ('c', 'r', or 0) and its time.  Engine
** mutex held (or the open). */
int kvResolvedGet(KvEngine*, const char *zGid, int nGid, int64_t *piMs);
/* The decision remembered for gid ('c', 'r', or 0) if it was taken on
** the prepared record cid (or names no record).  Engine mutex held. */
int kvResolvedGetCid(KvEngine*, const char *zGid, int nGid, uint64_t cid);
/* A shared store: read prepared.log again into pEng->pResolved, for the
** decisions other processes took.  Writer lock and engine mutex held. */
int kvResolvedSync(KvEngine*, char **pzErr);

/* ---- table.c ---------------------------------------------------------- */
/* The store's failed state: SQLITE_OK, or the code of the publication
** that failed, with the message in *pzErr (sqlite3_malloc'd; pzErr may
** be NULL).  Any thread, no lock needed. */
int kvEngineFailed(KvEngine*, char **pzErr);
/* Add a reference to an open store: 0, and nothing taken, once its last
** reference is gone (it is closing).  Takes the registry mutex. */
int kvEngineTryRef(KvEngine*);
/* Publishing commit cid failed with rc (message *pzErr, replaced by the
** store's failed-state message): the store enters its failed state, in
** which every later operation fails, until it is opened again.  Engine
** mutex held.  The first failure names the state; later ones keep it. */
void kvEngineFail(KvEngine*, int rc, uint64_t cid, char **pzErr);
/* The abort record withdrawing WAL record cid of the prepared root tid
** could not be written (rc, message zWhy or NULL): the store enters its
** failed state (as kvEngineFail), whose message says the record will be
** applied at the next open.  Engine mutex not held (taken here). */
void kvEngineFailAbort(KvEngine*, int rc, uint64_t tid, uint64_t cid,
                       const char *zWhy);
/* Why xApply of pTab failed with rc: "table T: " and the backend's
** message naming the file and the cause, else the code's text
** (sqlite3_malloc'd; NULL on OOM). */
char *kvApplyErrmsg(KvTable *pTab, int rc);
/* The backend of table type zType, or NULL for an unknown type. */
const KvBackend *kvBackendFind(const char *zType);
/* Raise pEng->iNextTableId above every table id a file of any backend in
** the store's directory is named after (xStoreMaxId).  At open. */
int kvBackendReserveIds(KvEngine*, char **pzErr);
/* A new table object (one reference, the caller's) for catalog entry
** *pMeta (copied), its data not open yet.  SQLITE_ERROR with *pzErr for
** an unknown type, SQLITE_NOMEM. */
int kvTableNew(KvEngine*, const char *zName, int nName, const KvMeta*,
               KvTable **pp, char **pzErr);
/* Open the table's data through its backend (xOpen with bCreate). */
int kvTableOpenData(KvTable*, int bCreate, char **pzErr);
/* The live table zName (no reference taken), or NULL.  Engine mutex. */
KvTable *kvTableFind(KvEngine*, const char *zName, int nName);
/* Drop a reference; the last closes the data and frees the versions.
** Engine mutex held (or the store closing).  NULL-safe. */
void kvTableUnref(KvTable*);
/* Add p to / remove p from the live list (which holds a reference).
** Engine mutex held. */
void kvTableLink(KvEngine*, KvTable*);
void kvTableUnlink(KvEngine*, KvTable*);
/* The message for a failed xSnapshot of table zTab: I/O errors mean the
** backend refuses the table until the store is reopened.  Sets *pzErr
** (unless set or rc is SQLITE_NOMEM) and returns rc. */
int kvSnapshotError(int rc, const char *zTab, int nTab, char **pzErr);

/* ---- catalog.c -------------------------------------------------------- */
/* The byte encoding of a catalog entry (catalog.c's opening comment). */
int kv_meta_encode(const KvMeta*, KvBuf *pOut);
int kv_meta_decode(const uint8_t *a, int n, KvMeta *pOut);
/* Read the whole small file zPath (at most mxByte) into *pa, *pn bytes
** (sqlite3_free it); a file that does not exist: SQLITE_OK and *pa NULL.
** Errors come with *pzErr naming the file. */
int kvCatalogReadFile(KvEngine*, const char *zPath, int64_t mxByte,
                      uint8_t **pa, int64_t *pn, char **pzErr);
/* Load the catalog file at open (none yet: an empty catalog). */
int kvCatalogLoad(KvEngine*, char **pzErr);
/* Rewrite the catalog file atomically from the published catalog, unless
** it already holds exactly that (takes catMutex, then the engine mutex). */
int kvCatalogSave(KvEngine*, char **pzErr);
/* Publish a batch of catalog changes (engine mutex held, or at open):
** update the live table list (apNew: tables a root created), the catalog
** revisions and the catalog data. */
int kvCatalogApply(KvEngine*, KvMap *pBatch, uint64_t iSeq,
                   KvTable **apNew, int nNew, char **pzErr);

/* Write a[0..n) to zPath atomically (temp file, fsync, rename, directory
** fsync), through the store's I/O layer. */
int kvCatalogWriteFile(KvEngine*, const char *zPath, const uint8_t *a, int n,
                       char **pzErr);
/* kvCatalogSave with the engine mutex held, for a shared store's writer
** (its writer lock orders every catalog file write then). */
int kvCatalogSaveLocked(KvEngine*, char **pzErr);

/* ---- ddl.c ------------------------------------------------------------ */
/* Apply the catalog actions pT of another process's record, published at
** iSeq (engine mutex held): created tables open in shared mode, removed
** ones leave the live list; no file is deleted. */
int kvDdlFollow(KvEngine*, const WalTableActions *pT, uint64_t iSeq,
                char **pzErr);
/* SQLITE_ERROR with *pzErr if a table of type zType with bPersist cannot
** be created because the store is shared (its rows would live in one
** process); else SQLITE_OK.  Any lock. */
int kvDdlCreateCheck(KvEngine*, const char *zTab, int nTab,
                     const char *zType, int bPersist, char **pzErr);
/* The prepare of root p in a shared store, after its conflict check
** (writer lock held, engine mutex not): fresh ids and open, shared files
** for the tables it creates, and the tables it removes listed for the
** deferred deletion of their files. */
int kvDdlPrepare(KvRoot *p, char **pzErr);
/* Deferred deletion of removed tables' files, by the owner of a shared
** store (store thread; engine mutex not held): kvDdlReapDue says whether
** a set of removed tables waits, and the position (CID) every other
** process must have applied first; kvDdlReapCollect (now and then) picks
** such a set; kvDdlReapRun (writer lock held) deletes their files. */
int kvDdlReapDue(KvEngine*, uint64_t *pcidDue);
int kvDdlReapCollect(KvEngine*, char **pzErr);
int kvDdlReapRun(KvEngine*, char **pzErr);
/* At an open alone, after the replay: delete the files of every listed
** removed table that is gone. */
int kvDdlOpenAlone(KvEngine*, char **pzErr);
void kvDdlFree(KvEngine*);
#ifdef DEPOT_TEST
/* kv_engine_test_kill_ddl: SIGKILL at point iAt of root p's commit. */
void kvDdlTestPoint(KvRoot *p, int iAt);
#else
# define kvDdlTestPoint(p, iAt)
#endif

/* ---- version.c -------------------------------------------------------- */
/* After xApply of child writes pWrite of root p to table t (engine mutex
** held): publish the key versions (and receipts for a versioned root). */
int kvVersionPublish(KvRoot *p, KvTable *t, KvMap *pWrite);
int kvVersionStoreInit(KvEngine*);          /* at open; SQLITE_NOMEM */
void kvVersionStoreStop(KvEngine*);         /* joins the sweeper */
void kvVersionClearAll(KvEngine*);          /* after replay */
void kvVersionClearLocked(KvEngine*);       /* the same, mutex held */
/* Drop the cached query snapshot (engine mutex held, or closing); every
** publication calls it first. */
void kvVersionSnapDrop(KvEngine*);
/* Records and estimated bytes of table t's versions (relaxed atomics). */
void kvVersionTableStats(KvTable*, int64_t *pnRec, int64_t *pnByte);
/* The upsert version of root p (its kind byte 'u', the id its TID). */
void kvVersionOfRoot(KvRoot *p, uint8_t *aVer);
/* 1 if table t (NULL: none) holds version aVer for key aKey now (engine
** mutex held), else 0. */
int kvVersionIs(KvEngine*, KvTable *t, const uint8_t *aKey, int nKey,
                const uint8_t *aVer);
/* Another process changed aKey of table t (engine mutex held): a version
** recorded for it here changes, so a versioned commit that read the old
** one conflicts. */
void kvVersionForeign(KvEngine*, KvTable *t, const uint8_t *aKey, int nKey,
                      int bDelete);
/* The bind time of a child (engine mutex held): the monotonic ms now while
** version TTL is on, else 0 (which keeps every record it could need). */
int64_t kvVersionBindStamp(KvEngine*);

/* ---- engine.c: sharing a store between processes ---------------------- */
#define KV_BUSY_DEFAULT_MS 5000       /* KvRoot.msBusy unless set */
/* Apply what other processes committed since this one last looked (a
** shared store; a no-op otherwise).  Engine mutex held.  With bRecover
** (the caller holds the writer lock): also the records of a writer that
** died before it published them, which are then published. */
int kvEngineCatchUp(KvEngine*, int bRecover, char **pzErr);
/* The store's writer lock, waited for up to msBusy ms (SQLITE_BUSY with
** *pzErr after that), and its release.  Engine mutex not held. */
int kvEngineWriterLock(KvEngine*, int msBusy, char **pzErr);
void kvEngineWriterUnlock(KvEngine*);
/* 1 while a read-only process that opened store pEng with no writer
** there reads it (KvTableDef.xFilesPinned); 0 for a store without LOCK. */
int kvEngineFilesPinned(KvEngine *pEng);
/* Publish the end of this process's log as the store's tail (writer lock
** and engine mutex held) and take it as seen. */
int kvEnginePublishTail(KvEngine*, char **pzErr);
/* Wait while the store turns shared (engine mutex held). */
void kvEngineShareWait(KvEngine*);
/* Work done once per store, by one process at a time while it is shared:
** KV_WORK_STORE is the WAL retirement and what goes with it (syncing
** the tables' files, a backend's log compaction), KV_WORK_SWEEP the TTL
** sweep passes.  kvEngineWorkTurn: 1 if this process is to do eWork now
** (the store is not shared, or this process holds the work's lock in
** LOCK or takes it now without waiting: the kernel releases it when the
** holder exits or dies), else 0 (always 0 in a read-only process, which
** writes nothing).  Any thread, no lock held. */
/* Make the record of commit cid, which ends at *pEnd, durable after the
** writer lock was let go (shared store): unless a flush another process
** made after that record was written covers it (published in LOCK),
** flush the segment file and publish how far that flush reached.  One
** process flushes at a time, so the others' records written meanwhile
** share the next flush.  Engine mutex not held. */
int kvEngineFlushShared(KvEngine*, uint64_t cid, const WalPos *pEnd,
                        char **pzErr);
#define KV_WORK_STORE 0
#define KV_WORK_SWEEP 1
int kvEngineWorkTurn(KvEngine*, int eWork);
/* The lowest WAL segment holding the record of an in-doubt transaction
** this process knows (0: none).  Engine mutex held. */
uint64_t kvEngineInDoubtSegment(KvEngine*);

/* ---- metrics.c -------------------------------------------------------- */
/* Root lifecycle counters (relaxed atomics). */
void kvMetricRootCreated(void);
void kvMetricRootClosed(void);

/* ---- hook.c ----------------------------------------------------------- */
/* In the publication of root p, just before xApply of its writes pWrite
** to table t at sequence iSeq (engine mutex held): if t has hooks to
** call, keep the writes (and, for old values, a snapshot of t as it is
** before the apply) for delivery.  SQLITE_OK, SQLITE_NOMEM or the error
** of that snapshot. */
int kvHookCapture(KvRoot *p, KvTable *t, KvMap *pWrite, uint64_t iSeq);
/* The publication of root p ended with rc (engine mutex held): on
** SQLITE_OK queue what kvHookCapture kept (and the removal of hooked
** tables the root removed) for delivery, else discard it. */
void kvHookPublished(KvRoot *p, int rc);
/* After the commit of root p, with no lock held: deliver its queued
** writes (and any earlier ones) unless another thread is doing so, and
** wait until they are delivered (not from inside a hook callback). */
void kvHookDeliver(KvRoot *p);

/* ---- txn.c ------------------------------------------------------------ */
/* The root's TID. */
uint64_t kv_root_tid(KvRoot*);
/* Select protocol eProto (KV_PROTO_*) for the root, or fail with
** SQLITE_MISUSE and a message when it already uses the other one; nothing
** else changes then (no TID, no WAL). */
int kv_root_protocol(KvRoot*, int eProto, char **pzErr);
/* How error messages name root p: "transaction handle" or "transaction",
** then kv_root_who_id(p), the handle or the tid. */
const char *kv_root_who(const KvRoot *p);
unsigned long long kv_root_who_id(const KvRoot *p);
/* Take the snapshot of child c of root p if its bind put it off
** (KvChild.bSnapLater).  Engine mutex held.  SQLITE_BUSY_SNAPSHOT with
** *pzErr when the table was removed meanwhile. */
int kvChildSnapLocked(KvRoot *p, KvChild *c, char **pzErr);
/* Add a conflict of kind eKind (engine mutex or own root). */
int kvConflictAddKind(KvRoot*, const char *zTab, int nTab,
                      const uint8_t *aKey, int nKey, int eKind);
/* Bind (if needed) the root's child on zTab and register a read of aKey
** there, selecting no protocol; a key the root already writes needs none
** (its write reserves it). */
int kvNoteRead(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
               int nKey, char **pzErr);
/* kvNoteRead for n keys of zTab given in ascending key order, in an array
** of structs szElem bytes apart: key i is the pointer at
** (char*)paKey + i*szElem, its length the int at (char*)pnKey + i*szElem.
** One bind, and the write set walked once alongside the keys instead of
** searched per key. */
int kvNoteReads(KvRoot*, const char *zTab, int nTab,
                const uint8_t *const *paKey, const int *pnKey, size_t szElem,
                int n, char **pzErr);
/* A prepared root goes in doubt: it will read nothing more, so it gives
** back its snapshots and stops counting as active on its tables (its
** reservations stay).  Such a root holds only table references, maps and
** text, which engine.c frees at close without touching the WAL. */
void kvRootDetach(KvRoot*);
/* A zeroed child appended to root p's list, NULL on OOM.  The first
** child lives in the root (KvRoot.child0) and the list in the root's
** array until it outgrows it, so a root of one table allocates neither. */
KvChild *kvRootChildNew(KvRoot *p);
/* Free the storage of root p's children and their list (each child's maps
** and references are the caller's to release first); the list is empty
** after. */
void kvRootChildrenFree(KvRoot *p);
/* Prepare with an extra check run under the engine mutex before the
** standard conflict checks (xCheck may add conflicts). */
int kvRootPrepareEx(KvRoot*, int (*xCheck)(KvRoot*, void*), void *pArg,
                    char **pzErr);
/* A root holding the writer lock of a shared store lets it go,
** publishing the new tail when it appended. */
void kvRootWriterRelease(KvRoot*);
/* A shared store, writer lock held: append the record that commits
** in-doubt root p (KV_REC_GID_DONE, then its writes), flushed; p->cid
** becomes its CID and p publishes and releases the lock at its commit. */
int kvRootLogGidDone(KvRoot *p, char **pzErr);

#endif /* DEPOT_KV_ENGINE_INT_H */
