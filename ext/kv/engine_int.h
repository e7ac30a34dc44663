/*
** kv_engine_int.h -- the structures shared by the files of the KV engine
** (kv_engine.c: stores and replay; kv_catalog.c: the catalog and its file;
** kv_txn.c: root transactions; kv_iter.c: scans).  Nothing outside those
** files includes this header.
*/
#ifndef DEPOT_KV_ENGINE_INT_H
#define DEPOT_KV_ENGINE_INT_H

#include "ext/kv/engine.h"
#include "ext/kv/backend.h"
#include <pthread.h>

typedef struct KvTable KvTable;
typedef struct KvChild KvChild;
typedef struct KvSavepoint KvSavepoint;
typedef struct KvVerTable KvVerTable;
typedef struct KvVerStore KvVerStore;
typedef struct KvVerReceipts KvVerReceipts;

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
  int nRef;                     /* engine list + children + roots */
  int bLive;                    /* in KvEngine.pTables */
  KvTable *pNext;
};

struct KvEngine {
  char *zDir;                   /* real path, NULL: anonymous */
  int nRef;                     /* kvGlobalMutex */
  int fdLock;                   /* LOCK; -1 for anonymous */
  int fdDirLock;                /* the store directory, flocked; -1 if none */
  Wal *pWal;                    /* NULL for anonymous */
  const WalIo *pIo;
  pthread_mutex_t mutex;
  uint64_t iSeq;                /* last published commit sequence */
  uint64_t iNextTid;            /* atomic once the store is open */
  uint64_t iNextTableId;
  KvTable *pTables;             /* live tables */
  KvTable *pMeta;               /* the catalog, ".tables_meta" */
  KvRoot *pPrepared;            /* prepared, not yet finished roots */
  pthread_mutex_t catMutex;     /* serialises catalog file writes */
  int bLoadingCatalog;          /* the catalog file is being loaded: its
                                ** tables' files must exist (xOpen is told
                                ** bCreate=0); set during open only */
  KvVerStore *pVer;             /* version TTL and sweeper (kv_version.c) */
  int rcFailed;                 /* failed state (kvEngineFail); atomic */
  char *zFailed;                /* its message, set before rcFailed */
  KvEngine *pNextEngine;        /* kvGlobalMutex */
};

/* One table touched by a root. */
struct KvChild {
  KvTable *pTab;                /* holds a reference */
  uint64_t iSnap;               /* engine iSeq when it bound */
  KvBackendSnap *pSnap;         /* NULL for a pending table, and while
                                ** bSnapLater */
  int bSnapLater;               /* bound by a write: pSnap is taken at the
                                ** first read (kv_txn.c, kvChildSnap) */
  KvMap *pWrite;                /* key -> value or tombstone */
  KvMap *pRead;                 /* keys of point reads */
  int bSchema;                  /* the catalog child */
  int bActive;                  /* counted in pTab->nActive (bound live,
                                ** not the catalog): uncounted at finish */
  int64_t iBindMs;              /* with bActive: when it bound (monotonic
                                ** ms, 0 while version TTL is off) */
  KvChild *pActPrev, *pActNext; /* with bActive: pTab's active list */
};

struct KvSavepoint {
  int iLevel;
  int nChild;                   /* children that existed then */
  KvMap **apWrite;              /* their write sets then (references) */
};

struct KvRoot {
  KvEngine *pEng;               /* holds a reference */
  uint64_t tid;
  uint64_t cid;                 /* WAL record, 0 if none */
  int eState;
  int bRemove;                  /* did remove_table */
  int nChild, nChildAlloc;
  KvChild **apChild;            /* first-touch order */
  KvChild *pSchema;
  int nNew;
  KvTable **apNew;              /* tables created here (pending) */
  int nSp;
  KvSavepoint *aSp;
  KvRoot *pNextPrepared;        /* engine mutex */
  int nConflict;
  KvConflict *aConflict;        /* after a failed prepare */
  int eProto;                   /* KV_PROTO_* */
  KvVerReceipts *pReceipts;     /* versioned commit: receipts sink */
  int64_t iHandle;              /* kv_begin() handle, 0 for SQL transactions */
};

/* kv_txn.c: how error messages name root p: "transaction handle" or
** "transaction", then kv_root_who_id(p), the handle or the tid. */
const char *kv_root_who(const KvRoot *p);
unsigned long long kv_root_who_id(const KvRoot *p);

/* kv_txn.c: take the snapshot of child c of root p if its bind put it off
** (KvChild.bSnapLater).  Engine mutex held.  SQLITE_BUSY_SNAPSHOT with
** *pzErr when the table was removed meanwhile. */
int kvChildSnapLocked(KvRoot *p, KvChild *c, char **pzErr);
/* kv_txn.c: add a conflict of kind eKind (engine mutex or own root). */
int kvConflictAddKind(KvRoot*, const char *zTab, int nTab,
                      const uint8_t *aKey, int nKey, int eKind);
/* kv_txn.c: bind (if needed) the root's child on zTab and register a
** read of aKey there, selecting no protocol; a key the root already writes
** needs none (its write reserves it). */
int kvNoteRead(KvRoot*, const char *zTab, int nTab, const uint8_t *aKey,
               int nKey, char **pzErr);
/* kv_txn.c: kvNoteRead for n keys of zTab given in ascending key order,
** in an array of structs szElem bytes apart: key i is the pointer at
** (char*)paKey + i*szElem, its length the int at (char*)pnKey + i*szElem.
** One bind, and the write set walked once alongside the keys instead of
** searched per key. */
int kvNoteReads(KvRoot*, const char *zTab, int nTab,
                const uint8_t *const *paKey, const int *pnKey, size_t szElem,
                int n, char **pzErr);
/* kv_txn.c: prepare with an extra check run under the engine mutex before
** the standard conflict checks (xCheck may add conflicts). */
int kvRootPrepareEx(KvRoot*, int (*xCheck)(KvRoot*, void*), void *pArg,
                    char **pzErr);

/* kv_version.c: hooks of the engine into the version layer. */
/* After xApply of child writes pWrite of root p to table t (engine mutex
** held): publish the key versions (and receipts for a versioned root). */
int kvVersionPublish(KvRoot *p, KvTable *t, KvMap *pWrite);
int kvVersionStoreInit(KvEngine*);          /* at open */
void kvVersionStoreStop(KvEngine*);         /* joins the sweeper */
void kvVersionClearAll(KvEngine*);          /* after replay */
/* Drop the cached query snapshot (engine mutex held, or closing); every
** publication calls it first. */
void kvVersionSnapDrop(KvEngine*);
void kvVersionTableStats(KvTable*, int64_t *pnRec, int64_t *pnByte);
/* The upsert version of root p (its kind byte 'u', the id its TID). */
void kvVersionOfRoot(KvRoot *p, uint8_t *aVer);
/* 1 if table t (NULL: none) holds version aVer for key aKey now (engine
** mutex held), else 0. */
int kvVersionIs(KvEngine*, KvTable *t, const uint8_t *aKey, int nKey,
                const uint8_t *aVer);
/* The bind time of a child (engine mutex held): the monotonic ms now while
** version TTL is on, else 0 (which keeps every record it could need). */
int64_t kvVersionBindStamp(KvEngine*);

/* kv_metrics.c: root lifecycle counters. */
void kvMetricRootCreated(void);
void kvMetricRootClosed(void);

/* kv_engine.c */
/* The store's failed state: SQLITE_OK, or the code of the publication
** that failed, with the message in *pzErr (sqlite3_malloc'd; pzErr may
** be NULL).  Any thread, no lock needed. */
int kvEngineFailed(KvEngine*, char **pzErr);
/* Publishing commit cid failed with rc (message *pzErr, replaced by the
** store's failed-state message): the store enters its failed state, in
** which every later operation fails, until it is opened again.  Engine
** mutex held.  The first failure names the state; later ones keep it. */
void kvEngineFail(KvEngine*, int rc, uint64_t cid, char **pzErr);
/* The abort record withdrawing WAL record cid of the prepared root tid
** could not be written (rc, message zWhy or NULL): the store enters its
** failed state (as kvEngineFail), whose message says the record will be
** applied at the next open.  Engine mutex not held. */
void kvEngineFailAbort(KvEngine*, int rc, uint64_t tid, uint64_t cid,
                       const char *zWhy);
/* Why xApply of pTab failed with rc: "table T: " and the backend's
** message naming the file and the cause, else the code's text
** (sqlite3_malloc'd; NULL on OOM). */
char *kvApplyErrmsg(KvTable *pTab, int rc);
KvTable *kvTableFind(KvEngine*, const char *zName, int nName);
void kvTableUnref(KvTable*);     /* engine mutex held */
int kvTableNew(KvEngine*, const char *zName, int nName, const KvMeta*,
               KvTable **pp, char **pzErr);
const KvBackend *kvBackendFind(const char *zType);
/* Raise pEng->iNextTableId above every table id a file of any backend in
** the store's directory is named after (xStoreMaxId).  At open. */
int kvBackendReserveIds(KvEngine*, char **pzErr);
int kvTableOpenData(KvTable*, int bCreate, char **pzErr);
/* The message for a failed xSnapshot of table zTab: I/O errors mean the
** backend refuses the table until the store is reopened.  Sets *pzErr
** (unless set or rc is SQLITE_NOMEM) and returns rc. */
int kvSnapshotError(int rc, const char *zTab, int nTab, char **pzErr);
void kvTableLink(KvEngine*, KvTable*);
void kvTableUnlink(KvEngine*, KvTable*);
/* Call xEach on every open store (kv_stats), under the registry mutex:
** xEach must not open or close stores.  Stops at the first error. */
int kv_engine_foreach(int (*xEach)(KvEngine*, void*), void *pCtx);

/* kv_catalog.c */
int kv_meta_encode(const KvMeta*, KvBuf *pOut);
int kv_meta_decode(const uint8_t *a, int n, KvMeta *pOut);
int kvCatalogLoad(KvEngine*, char **pzErr);
int kvCatalogSave(KvEngine*, char **pzErr);
/* Publish a batch of catalog changes (engine mutex held, or at open):
** update the live table list (apNew: tables a root created), the catalog
** revisions and the catalog data. */
int kvCatalogApply(KvEngine*, KvMap *pBatch, uint64_t iSeq,
                   KvTable **apNew, int nNew, char **pzErr);

#endif /* DEPOT_KV_ENGINE_INT_H */
