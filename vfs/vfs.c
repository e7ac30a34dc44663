/*
** vfs.c -- the sqlite3_vfs named "depot" (see vfs/depot_vfs.h).
**
** The main database file of a connection is a DepotFile: reads come from the
** snapshot pinned at the SHARED lock (page index + decoded-page cache) or,
** inside a write transaction, from the write buffer; writes go to the write
** buffer, and past the connection's budget (txn_budget_kb) the buffer's
** pages are staged in the store (vfs/db.h, DepotStageStream; reads of the
** transaction find them through its bitmap of staged pages and their page
** index rows, never through the shared caches) so a transaction of any
** size runs in bounded memory.  The
** transaction is published as one depot commit at its sync point (SQLITE_FCNTL_SYNC, xSync, or SQLITE_FCNTL_COMMIT_ATOMIC_WRITE
** where the host SQLite has batch-atomic writes), so pages SQLite spills
** before COMMIT stay private until then.  Journals, statement journals and
** temporary files are MemFiles: in memory up to a bound, then in an
** anonymous temporary file of the default VFS (never under their own
** names, never synced); a read of the main
** journal's first header marks a rollback in progress, whose closing sync
** publishes nothing.
**
** Locking.  RESERVED is the store's writer lock of the branch name
** (vfs/lock.h), which excludes every other connection, of this process or
** another, and never waits: SQLITE_BUSY sends SQLite to its busy handler.
** It is taken before the snapshot is checked, so a writer whose snapshot
** is stale gets SQLITE_BUSY_SNAPSHOT at its first write (which SQLite
** retries with a fresh snapshot when no transaction was open), and a
** COMMIT that holds it cannot be overtaken; the head compare-and-set in
** depot_db_commit() stays as the fence.  SHARED never blocks a writer
** because readers read their pinned snapshot.  A WAL file is never opened
** for a depot database.
*/
#include "config.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"
#include "vfs/lock.h"
#include "vfs/txbuf.h"
#include "vfs/memfile.h"
#include "vfs/share.h"
#include "vfs/uri.h"
#include "vfs/readahead.h"
#include "vfs/vfs_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <limits.h>
#if defined(__GLIBC__)
# include <malloc.h>
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct DepotStoreShared DepotStoreShared;
typedef struct DepotShared DepotShared;
typedef struct DepotFile DepotFile;

/* One per store file in the process: the decoded-page cache that every
** connection to any database or branch of the store shares.  Its keys
** (blob branch, page, owner txid) name immutable content, so branches,
** forks and restores of one store share entries safely.  It outlives the
** last handle of the store (idle, nOpen 0): a reopen in the same process
** finds the pages decoded (see "Idle stores" below). */
struct DepotStoreShared {
  char *zKey;                /* store file identity and path */
  int nRef;                  /* DepotShared, open or idle; depotMutex */
  int nOpen;                 /* handles open on the store; depotMutex */
  uint64_t iIdle;            /* nOpen 0: sequence number of its last close */
  uint64_t iFpVs;            /* nOpen 0: the store's commit sequence then */
  int nFp;                   /* and the bytes of its LOG row there */
  unsigned char aFp[128];
  DepotCache *pCache;        /* thread-safe on its own */
  DepotStoreShared *pNext;   /* guarded by depotMutex */
};

/* One per (store path, db, branch) in the process; kept idle (nRef 0)
** with its page map while its store is kept. */
struct DepotShared {
  char *zKey;                /* store file identity, path, db, branch */
  int nRef;                  /* handles; guarded by depotMutex */
  uint64_t iIdle;            /* nRef 0: sequence number of its last close */
  DepotStoreShared *pStoreShared;  /* its store's; one reference held */
  DepotCache *pCache;        /* pStoreShared->pCache (not owned) */
  DepotPageMap *pMap;        /* thread-safe on its own */
  DepotShared *pNext;        /* guarded by depotMutex */
};

/* The main database file of one connection.  Used by one thread at a
** time (SQLite holds the connection's mutex around every call). */
struct DepotFile {
  sqlite3_file base;         /* must be first */
  DepotShared *pShared;
  Store *pStore;             /* this handle's own store connection */
  DepotLock lock;            /* the write lock, through pStore */
  char *zDb, *zBranch;
  uint64_t iBucket;          /* bucket of the name (0: main) */
  int eLock;
  int bReadOnly;
  int iLevel;                /* zstd level */
  int bLevelGiven;           /* zstd_level named: no bulk level */
  uint64_t iBranch;          /* 0 until the name has its own branch */
  uint64_t iInhBranch;       /* iBranch 0: the name is inherited from an */
  uint64_t iInhTxid;         /* ancestor bucket, as this branch at txid */
  DepotChain chain;          /* read path of the snapshot (n 0: empty) */
  DbHead snap;               /* pinned head while eLock>=SHARED */
  int bReadTxn;              /* a store read transaction holds snap */
  TxBuf tx;                  /* pages written since RESERVED */
  int64_t nTxBudget;         /* bytes of tx past which it is staged (0:
                             ** never) */
  int nThreads;              /* zstd workers of a staged part or commit */
  TxStage stage;             /* pages of the transaction staged in ... */
  DepotStageStream stream;   /* ... its blob, ahead of the commit */
  int bStageSwept;           /* staged leftovers of the branch removed */
  int bUnborn;               /* iBranch was seen unborn (vfs/layout.h) */
  uint32_t nPageTx, szPageTx;/* size and page size seen by the writer */
  int bTxDirty;              /* tx or nPageTx differs from snap */
  int bRollback;             /* the main journal is being played back */
  ZSTD_CCtx *pCctx;
  ZSTD_DCtx *pDctx;
  DepotChunkCache chunks;    /* recently read blob chunk rows */
  char *zPath;               /* the store file, for the compactor */
  int64_t nCompactAfter;     /* background threshold (0: off) */
  uint64_t iWakeMark;        /* watermark as last seen or expected */
  int64_t nWakeBytes;        /* frame bytes committed since the last wake */
  unsigned char *aScratch;   /* one page of the largest size */
  DepotReadahead *pRa;       /* decoder thread of read-ahead frames */
  uint32_t nReadahead;       /* pages to read ahead of a scan (0: off) */
  int bRaCores;              /* the machine has a core for read-ahead */
  uint32_t iRaLast;          /* page of the last snapshot read */
  uint32_t nRaRun;           /* reads in order that led up to it */
  uint32_t iRaHigh;          /* last page read ahead in this run */
  uint64_t iHeadVer;         /* store_data_version() when headAtVer was */
  uint64_t iHeadVerBranch;   /* read, and the branch whose head it is */
  DbHead headAtVer;          /* (iHeadVer 0: none) */
  uint32_t iScanLast;        /* page of the last snapshot read ... */
  uint32_t nScanRun;         /* ... and the reads going up that led to it */
};

static pthread_mutex_t depotMutex = PTHREAD_MUTEX_INITIALIZER;
static DepotShared *pDepotShared = 0;    /* guarded by depotMutex */
static DepotStoreShared *pDepotStoreShared = 0;  /* guarded by depotMutex */
static sqlite3_vfs *pDepotRoot = 0;      /* set once by registration */
static int bDepotBatch = 0;              /* host has batch-atomic writes */

static const sqlite3_io_methods depotIoMethods;

static int depotPageSizeOk(sqlite3_int64 sz){
  return sz>=512 && sz<=65536 && (sz & (sz-1))==0;
}

/* The reason of the last error the depot VFS reported on this thread, for
** depot_last_error(): SQLite gives a failed open only "unable to open
** database file", and hosts such as Python cannot read the error log.  A
** fixed buffer per thread: nothing to allocate, nothing left when a thread
** ends.  A longer reason is cut before a whole UTF-8 character. */
#define DEPOT_LAST_ERROR_MAX 1024
static __thread char aDepotLastErr[DEPOT_LAST_ERROR_MAX];

static void depotNoteError(const char *z){
  size_t n = strlen(z);
  if( n>=DEPOT_LAST_ERROR_MAX ){
    n = DEPOT_LAST_ERROR_MAX-1;
    while( n>0 && ((unsigned char)z[n] & 0xc0)==0x80 ) n--;
  }
  memcpy(aDepotLastErr, z, n);
  aDepotLastErr[n] = 0;
}

const char *depot_vfs_last_error(void){
  return aDepotLastErr[0] ? aDepotLastErr : 0;
}

/* sqlite3_log() of an error of the VFS, which depot_last_error() also
** answers on this thread. */
static void depotLog(int rc, const char *zFmt, ...){
  va_list ap;
  char *z;
  va_start(ap, zFmt);
  z = sqlite3_vmprintf(zFmt, ap);
  va_end(ap);
  sqlite3_log(rc, "%s", z ? z : zFmt);
  depotNoteError(z ? z : zFmt);
  sqlite3_free(z);
}

/* Log zErr (consumed) under rc and return rc, with SQLITE_ERROR mapped to
** rcDefault so the VFS returns codes the pager understands. */
static int depotReport(int rc, char *zErr, int rcDefault){
  if( rc!=SQLITE_OK ){
    if( (rc&0xff)==SQLITE_ERROR || (rc&0xff)==SQLITE_MISUSE ) rc = rcDefault;
    depotLog(rc, "%s", zErr ? zErr : "depot: store error");
  }
  sqlite3_free(zErr);
  return rc;
}

static void depotTxReset(DepotFile *p);

/* The main journal of p is being played back (bStart), or closed,
** truncated or overwritten from its start: a rollback in progress is over,
** and what it wrote to the database file (the original pages, already in
** the snapshot) is dropped (memfile.h). */
static void depotJournalRollback(void *pArg, int bStart){
  DepotFile *p = (DepotFile*)pArg;
  if( bStart ){
    p->bRollback = 1;
  }else if( p->bRollback ){
    p->bRollback = 0;
    depotTxReset(p);
  }
}

/* ================= shared per-database state ================= */

/* The keys of the DepotStoreShared (*pzStore) and the DepotShared (the
** return value) of a handle.  The store key is the store file's device
** and inode (so a store deleted and made anew at the same path while a
** handle still has the old one open gets a page cache of its own: its
** branch ids and txids start over and would hit the old store's pages;
** and every spelling of its path, vfs/share.h, finds the same cache), or
** its path when it cannot be stat()ed; the DepotShared key adds the path,
** the bucket, the db and the branch.  NULL (and *pzStore NULL) when out of
** memory. */
static char *depotSharedKey(DepotFile *p, const char *zPath, char **pzStore){
  struct stat st;
  char *z;
  if( stat(zPath, &st)==0 ){
    *pzStore = sqlite3_mprintf("%llu:%llu:", (unsigned long long)st.st_dev,
                               (unsigned long long)st.st_ino);
  }else{
    *pzStore = sqlite3_mprintf("path:%s", zPath);
  }
  if( *pzStore==0 ) return 0;
  z = sqlite3_mprintf("%s%d:%s%llu:%d:%s%d:%s", *pzStore,
      (int)strlen(zPath), zPath,
      (unsigned long long)p->iBucket, (int)strlen(p->zDb), p->zDb,
      (int)strlen(p->zBranch), p->zBranch);
  if( z==0 ){ sqlite3_free(*pzStore); *pzStore = 0; }
  return z;
}

/* Idle stores.  When the last handle of a store closes, its decoded-page
** cache and the page maps of its (db, branch) names stay in the process,
** within their byte limits, so that a reopen reads no page again: at most
** DEPOT_IDLE_STORES stores and DEPOT_IDLE_SHARED names, the ones closed
** longest ago freed first; every entry of a store is freed when its
** store is.  The entries are only as valid as the store file is the same
** store: a file deleted and made anew may get the same device and inode,
** and a backup copied over it starts an older history whose next txids
** name other pages.  So the last close notes the store's commit sequence
** (CTR vs), the LOG row of that sequence and the commit row it names;
** the next open of an idle store reads those rows and frees the store's
** entries unless they are byte-for-byte the same (they also differ when
** PITR trimmed the row: the pages decode again).  Every commit takes a
** new sequence; its rows hold its branch, txid, wall-clock millisecond
** and the database's checksum after it. */
#define DEPOT_IDLE_STORES 4
#define DEPOT_IDLE_SHARED 32

static uint64_t iDepotIdleSeq = 0;       /* guarded by depotMutex */

/* The commit sequence of the store (iVs, or the current one when
** bCurrent) in *piVs, and the bytes of its LOG row followed by those of
** the COMMITS row it names (none for a catalog change) in aRow: *pnRow
** bytes, at most nRow, or 0 when there is no such row or it cannot be
** read.  The commit row carries the database's checksum after it. */
static void depotStoreFingerprint(Store *pStore, uint64_t iVs, int bCurrent,
                                  uint64_t *piVs, unsigned char *aRow,
                                  int nRow, int *pnRow){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, n = 0;
  LogRow lr;
  *pnRow = 0;
  if( pStore==0 ) return;
  if( bCurrent ){
    if( store_get(pStore, k, layout_key_ctr(k, "vs"), &pVal, &nVal)!=SQLITE_OK
     || pVal==0 || nVal!=8 ){
      sqlite3_free(pVal);
      return;
    }
    iVs = bytes_get64le((const unsigned char*)pVal);
    sqlite3_free(pVal);
    pVal = 0;
  }
  *piVs = iVs;
  if( iVs==0 ) return;
  if( store_get(pStore, k, layout_key_log(k, iVs), &pVal, &nVal)!=SQLITE_OK
   || pVal==0 || nVal<=0 || nVal>nRow
   || layout_log_decode(pVal, nVal, &lr)!=SQLITE_OK ){
    sqlite3_free(pVal);
    return;
  }
  memcpy(aRow, pVal, nVal);
  n = nVal;
  sqlite3_free(pVal);
  pVal = 0;
  if( lr.iBranch!=0 ){
    if( store_get(pStore, k, layout_key_commit(k, lr.iBranch, lr.iTxid),
                  &pVal, &nVal)!=SQLITE_OK
     || pVal==0 || nVal<=0 || n+nVal>nRow ){
      sqlite3_free(pVal);
      return;
    }
    memcpy(aRow+n, pVal, nVal);
    n += nVal;
    sqlite3_free(pVal);
  }
  *pnRow = n;
}

/* The DepotStoreShared of key zKey, or NULL.  Caller holds depotMutex. */
static DepotStoreShared *depotStoreSharedFind(const char *zKey){
  DepotStoreShared *t;
  for(t=pDepotStoreShared; t && strcmp(t->zKey, zKey)!=0; t=t->pNext){}
  return t;
}

/* The DepotStoreShared of key zKey (consumed), with one more reference;
** made with a cache of nCacheKb and a spill file of nSpillKb when new.
** Caller holds depotMutex.  NULL when out of memory. */
static DepotStoreShared *depotStoreSharedRef(char *zKey, int64_t nCacheKb,
                                             int64_t nSpillKb){
  DepotStoreShared *t = depotStoreSharedFind(zKey);
  if( t==0 && (t = sqlite3_malloc64(sizeof(*t)))!=0 ){
    memset(t, 0, sizeof(*t));
    t->pCache = depot_cache_new(nCacheKb*1024);
    if( t->pCache ) depot_cache_set_spill_limit(t->pCache, nSpillKb*1024);
    if( t->pCache==0 ){
      sqlite3_free(t);
      t = 0;
    }else{
      t->zKey = zKey;
      zKey = 0;
      t->pNext = pDepotStoreShared;
      pDepotStoreShared = t;
    }
  }
  if( t ) t->nRef++;
  sqlite3_free(zKey);
  return t;
}

/* Drop one reference to t; the last frees it.  Caller holds depotMutex. */
static void depotStoreSharedUnref(DepotStoreShared *t){
  DepotStoreShared **pp;
  if( t==0 || --t->nRef>0 ) return;
  for(pp=&pDepotStoreShared; *pp!=t; pp=&(*pp)->pNext){}
  *pp = t->pNext;
  depot_cache_free(t->pCache);
  sqlite3_free(t->zKey);
  sqlite3_free(t);
}

/* Unlink and free s, which no handle uses (nRef 0), and its reference to
** its store.  Caller holds depotMutex. */
static void depotSharedFree(DepotShared *s){
  DepotShared **pp;
  for(pp=&pDepotShared; *pp!=s; pp=&(*pp)->pNext){}
  *pp = s->pNext;
  depotStoreSharedUnref(s->pStoreShared);
  depot_pagemap_free(s->pMap);
  sqlite3_free(s->zKey);
  sqlite3_free(s);
}

/* Free every entry of store t, which no handle uses (nOpen 0), and so t.
** Caller holds depotMutex. */
static void depotStoreSharedDrop(DepotStoreShared *t){
  DepotShared *s = pDepotShared, *pNext;
  while( s ){
    pNext = s->pNext;
    if( s->pStoreShared==t ) depotSharedFree(s);
    s = pNext;
  }
}

/* Free the idle entries past DEPOT_IDLE_SHARED names and DEPOT_IDLE_STORES
** stores, those closed longest ago first.  Caller holds depotMutex. */
static void depotIdleTrim(void){
  for(;;){
    DepotShared *s, *pOld = 0;
    int n = 0;
    for(s=pDepotShared; s; s=s->pNext){
      if( s->nRef==0 ){
        n++;
        if( pOld==0 || s->iIdle<pOld->iIdle ) pOld = s;
      }
    }
    if( n<=DEPOT_IDLE_SHARED ) break;
    depotSharedFree(pOld);
  }
  for(;;){
    DepotStoreShared *t, *pOld = 0;
    int n = 0;
    for(t=pDepotStoreShared; t; t=t->pNext){
      if( t->nOpen==0 ){
        n++;
        if( pOld==0 || t->iIdle<pOld->iIdle ) pOld = t;
      }
    }
    if( n<=DEPOT_IDLE_STORES ) break;
    depotStoreSharedDrop(pOld);
  }
}

static int depotSharedAcquire(DepotFile *p, const char *zPath,
                              const UriArgs *a){
  sqlite3_int64 nCacheKb = a->nCacheKb, nMapKb = a->nMapKb;
  int bCacheGiven = a->bCacheGiven, bMapGiven = a->bMapGiven;
  char *zStore = 0;
  char *zKey = depotSharedKey(p, zPath, &zStore);
  DepotStoreShared *t;
  DepotShared *s;
  unsigned char aFp[128], aNow[128];
  uint64_t iVs = 0;
  int nFp = 0, nNow = 0, bCheck;
  if( zKey==0 ) return SQLITE_NOMEM;
  /* an idle store's entries serve this open only if the store's history
  ** still holds the commit its last close saw (read without the mutex) */
  pthread_mutex_lock(&depotMutex);
  t = depotStoreSharedFind(zStore);
  bCheck = t && t->nOpen==0;
  if( bCheck ){
    iVs = t->iFpVs;
    nFp = t->nFp;
    memcpy(aFp, t->aFp, sizeof(aFp));
  }
  pthread_mutex_unlock(&depotMutex);
  if( bCheck && nFp>0 ){
    depotStoreFingerprint(p->pStore, iVs, 0, &iVs, aNow, sizeof(aNow), &nNow);
  }
  pthread_mutex_lock(&depotMutex);
  if( bCheck && (nFp==0 || nNow!=nFp || memcmp(aNow, aFp, nFp)!=0) ){
    t = depotStoreSharedFind(zStore);
    if( t && t->nOpen==0 ) depotStoreSharedDrop(t);
  }
  for(s=pDepotShared; s && strcmp(s->zKey, zKey)!=0; s=s->pNext){}
  if( s==0 && (s = sqlite3_malloc64(sizeof(*s)))!=0 ){
    memset(s, 0, sizeof(*s));
    s->pStoreShared = depotStoreSharedRef(zStore, nCacheKb, a->nSpillKb);
    zStore = 0;
    s->pMap = depot_pagemap_new(nMapKb*1024);
    if( s->pStoreShared==0 || s->pMap==0 ){
      depotStoreSharedUnref(s->pStoreShared);
      depot_pagemap_free(s->pMap);
      sqlite3_free(s);
      s = 0;
    }else{
      s->pCache = s->pStoreShared->pCache;
      s->zKey = zKey;
      zKey = 0;
      s->pNext = pDepotShared;
      pDepotShared = s;
    }
  }else if( s ){
    if( bMapGiven ) depot_pagemap_set_limit(s->pMap, nMapKb*1024);
  }
  if( s ){
    if( bCacheGiven ) depot_cache_set_limit(s->pCache, nCacheKb*1024);
    if( a->bSpillGiven ){
      depot_cache_set_spill_limit(s->pCache, a->nSpillKb*1024);
    }
    s->nRef++;
    s->pStoreShared->nOpen++;
  }
  pthread_mutex_unlock(&depotMutex);
  sqlite3_free(zKey);
  sqlite3_free(zStore);
  p->pShared = s;
  return s ? SQLITE_OK : SQLITE_NOMEM;
}

/* 1 when p is the only open handle of its store (read under the mutex;
** another open may start before p closes: its own check then reads the
** fingerprint p notes). */
static int depotSharedLastOfStore(DepotFile *p){
  int bLast;
  if( p->pShared==0 ) return 0;
  pthread_mutex_lock(&depotMutex);
  bLast = p->pShared->pStoreShared->nOpen==1;
  pthread_mutex_unlock(&depotMutex);
  return bLast;
}

/* Release p's DepotShared.  nFp bytes of aFp (0: none) are the LOG row of
** commit sequence iVs of the store as p closes: when p was its last
** handle, the store's entries stay idle under that fingerprint, or are
** freed without one. */
static void depotSharedRelease(DepotFile *p, uint64_t iVs,
                               const unsigned char *aFp, int nFp){
  DepotShared *s = p->pShared;
  DepotStoreShared *t;
  if( s==0 ) return;
  pthread_mutex_lock(&depotMutex);
  t = s->pStoreShared;
  if( --s->nRef==0 ) s->iIdle = ++iDepotIdleSeq;
  if( --t->nOpen==0 ){
    if( nFp>0 && nFp<=(int)sizeof(t->aFp) ){
      t->iIdle = ++iDepotIdleSeq;
      t->iFpVs = iVs;
      t->nFp = nFp;
      memcpy(t->aFp, aFp, nFp);
    }else{
      depotStoreSharedDrop(t);
    }
  }
  depotIdleTrim();
  pthread_mutex_unlock(&depotMutex);
  p->pShared = 0;
}

/* ================= reads ================= */

/* The chain from branch iTop at txid iCap: the cached one when it starts
** at iTop (ancestry never changes), else built anew. */
static int depotChainFor(DepotFile *p, uint64_t iTop, uint64_t iCap,
                         char **pzErr){
  int rc = SQLITE_OK;
  if( iTop==0 ){
    p->chain.n = 0;
  }else if( p->chain.n>0 && p->chain.aBranch[0]==iTop ){
    p->chain.aCap[0] = iCap;
  }else{
    rc = depot_db_chain(p->pStore, iTop, iCap, &p->chain, pzErr);
    if( rc!=SQLITE_OK ) p->chain.n = 0;
  }
  return rc;
}

/* End the store read transaction of a reader, if it has one. */
static void depotEndRead(DepotFile *p){
  if( p->bReadTxn ){
    store_rollback(p->pStore);
    p->bReadTxn = 0;
  }
  depot_chunk_cache_stable(&p->chunks, 0);
}

/* Start the store read transaction that pins what this handle reads. */
static void depotBeginRead(DepotFile *p){
  depotEndRead(p);
  if( store_begin(p->pStore, 0)==SQLITE_OK ) p->bReadTxn = 1;
  depot_chunk_cache_stable(&p->chunks, p->bReadTxn);
}

/* The head of the handle's branch could not be read (rc, *pzErr).  When
** the branch record is gone too, the branch was dropped and then reclaimed
** by depot_gc since this handle opened it: that is no corruption, and the
** handle can never read again, so say so with SQLITE_CANTOPEN.  Any other
** case keeps rc and its message. */
static int depotReclaimed(DepotFile *p, int rc, char **pzErr){
  BranchRecord rec;
  char *zErr = 0;
  if( depot_branch_get(p->pStore, p->iBranch, &rec, &zErr)!=SQLITE_NOTFOUND ){
    sqlite3_free(zErr);
    return rc;
  }
  sqlite3_free(zErr);
  sqlite3_free(*pzErr);
  *pzErr = sqlite3_mprintf("depot: database %s branch %s: branch %llu,"
      " which this connection reads, was dropped and then reclaimed by"
      " depot_gc; reopen the database", p->zDb, p->zBranch,
      (unsigned long long)p->iBranch);
  return SQLITE_CANTOPEN;
}

/* Resolve the name (until it has its own branch) and pin the head: the
** branch's own, or the inherited branch's state at the bucket fork.  The
** snapshot is read inside a store read transaction that lasts until the
** SHARED lock is dropped (the writer gets a fresh one that pins the head
** it checked, and a new one after each commit it publishes), so compaction
** and reclaim, which only free what no head, pin or retained point can
** read, never take a page from under a reader of an older head. */
/* The head of p->iBranch into p->snap, inside the read transaction just
** begun: when the store's data version says nothing changed since the
** head was last read, that head again (no seek), else a read. */
static int depotPinHead(DepotFile *p, char **pzErr){
  uint64_t iVer = 0;
  int rc;
  if( !p->bReadTxn || store_data_version(p->pStore, &iVer)!=SQLITE_OK ){
    iVer = 0;
  }
  if( iVer!=0 && iVer==p->iHeadVer && p->iHeadVerBranch==p->iBranch ){
    p->snap = p->headAtVer;
    return SQLITE_OK;
  }
  p->iHeadVer = 0;
  rc = depot_db_head(p->pStore, p->iBranch, &p->snap, pzErr);
  if( rc==SQLITE_OK && iVer!=0 ){
    p->iHeadVer = iVer;
    p->iHeadVerBranch = p->iBranch;
    p->headAtVer = p->snap;
  }
  return rc;
}

/* Whether the branch this handle pinned, which had no commit, was an
** unborn one (vfs/layout.h) that depot_gc has taken the name from since
** (its record dropped, or gone after the handle saw it unborn): then
** *pbGone, and the handle forgets it, so the name is read anew at the
** next pin, as on a first open. */
static int depotUnbornGone(DepotFile *p, int *pbGone, char **pzErr){
  BranchRecord rec;
  int bUnborn = 0, rc;
  *pbGone = 0;
  if( p->iBranch==0 || p->snap.iTxid!=0 ) return SQLITE_OK;
  rc = depot_branch_unborn(p->pStore, p->iBranch, &bUnborn, pzErr);
  if( rc==SQLITE_OK && bUnborn ){
    p->bUnborn = 1;
    rc = depot_branch_get(p->pStore, p->iBranch, &rec, pzErr);
    if( rc==SQLITE_OK ) bUnborn = rec.eState==LAYOUT_STATE_DROPPED;
  }else if( rc==SQLITE_OK && p->bUnborn ){   /* reclaimed since */
    rc = depot_branch_get(p->pStore, p->iBranch, &rec, pzErr);
    bUnborn = rc==SQLITE_NOTFOUND;
  }
  if( rc==SQLITE_NOTFOUND ){
    sqlite3_free(*pzErr);
    *pzErr = 0;
    rc = SQLITE_OK;
  }
  if( rc==SQLITE_OK && bUnborn ){
    p->iBranch = 0;
    p->bUnborn = 0;
    p->bStageSwept = 0;
    *pbGone = 1;
  }
  return rc;
}

static int depotPin(DepotFile *p){
  char *zErr = 0;
  int rc = SQLITE_OK;
  depotBeginRead(p);
  if( p->iBranch && p->snap.iTxid==0 ){
    int bGone = 0;
    rc = depotUnbornGone(p, &bGone, &zErr);
  }
  if( rc==SQLITE_OK && p->iBranch==0 ){
    DepotName nm;
    rc = depot_name_resolve(p->pStore, p->iBucket, p->zDb, p->zBranch, &nm,
                            &zErr);
    p->iBranch = nm.iBranch;
    p->iInhBranch = nm.iInhBranch;
    p->iInhTxid = nm.iInhTxid;
  }
  if( rc==SQLITE_OK && p->iBranch==0 ){
    rc = depot_db_state_at(p->pStore, p->iInhBranch, p->iInhTxid, &p->snap,
                           &zErr);
    if( rc==SQLITE_OK ) rc = depotChainFor(p, p->iInhBranch, p->iInhTxid,
                                           &zErr);
  }else if( rc==SQLITE_OK ){
    rc = depotPinHead(p, &zErr);
    if( rc==SQLITE_CORRUPT ) rc = depotReclaimed(p, rc, &zErr);
    if( rc==SQLITE_OK ) rc = depotChainFor(p, p->iBranch, p->snap.iTxid,
                                           &zErr);
  }
  if( rc==SQLITE_NOTFOUND ) rc = SQLITE_CORRUPT;
  if( rc!=SQLITE_OK ) depotEndRead(p);
  return depotReport(rc, zErr, SQLITE_IOERR_LOCK);
}

static void depotGeometry(DepotFile *p, uint32_t *pSz, uint32_t *pnPage){
  if( p->eLock>=SQLITE_LOCK_RESERVED ){
    *pSz = p->szPageTx;
    *pnPage = p->nPageTx;
  }else{
    *pSz = p->snap.szPage;
    *pnPage = p->snap.nPage;
  }
}

/* The location of page pgno of the pinned snapshot for read-ahead: from
** the page map, else from the seeks (then remembered in the map). */
static int depotRaLocate(DepotFile *p, uint32_t pgno, DepotPageLoc *pLoc){
  char *zErr = 0;
  int rc;
  if( depot_pagemap_get(p->pShared->pMap, p->chain.aBranch[0],
                        p->chain.aCap[0], pgno, pLoc) ){
    return SQLITE_OK;
  }
  rc = depot_db_locate(p->pStore, &p->chunks, &p->chain, pgno, pLoc, &zErr);
  sqlite3_free(zErr);
  if( rc==SQLITE_OK ){
    depot_pagemap_put(p->pShared->pMap, p->chain.aBranch[0],
                      p->chain.aCap[0], pgno, pLoc);
  }
  return rc;
}

/* The most pages one read-ahead batch (one job of the read-ahead thread)
** and one span (frames read with one range read) cover, and the most
** stored bytes of a span. */
#define RA_BATCH_PAGES 256
#define RA_SPAN_PAGES 64
#define RA_SPAN_BYTES (256*1024)

/* A batch of read-ahead frames being gathered. */
typedef struct RaBatch RaBatch;
struct RaBatch {
  DepotRaFrame aFrame[RA_BATCH_PAGES];
  DepotRaSpan aSpan[RA_BATCH_PAGES];
  uint32_t n;                /* frames in aFrame */
  uint32_t nSpan;            /* spans in aSpan, the last one open */
  uint32_t nBuf;             /* stored bytes of the frames */
};

/* Whether location loc of page pgno is the frame stored right after the
** last span of b, within the bounds of a span. */
static int depotRaNext(const RaBatch *b, uint32_t pgno,
                       const DepotPageLoc *loc){
  const DepotRaSpan *sp;
  const DepotPageLoc *a;
  if( b->nSpan==0 ) return 0;
  sp = &b->aSpan[b->nSpan-1];
  a = &sp->loc;
  return sp->nFrame<RA_SPAN_PAGES
      && sp->nByte+loc->nByte<=RA_SPAN_BYTES
      && loc->eKind==a->eKind && loc->iBranch==a->iBranch
      && loc->iTxid==a->iTxid && loc->szChunk==a->szChunk
      && loc->iOffset==a->iOffset+sp->nByte
      && (a->eKind!=DEPOT_LOC_SHARD
          || (sp->pgno-1)/LAYOUT_SHARD_SIZE==(pgno-1)/LAYOUT_SHARD_SIZE);
}

/* Page pgno of the snapshot was just read.  When the last RA_MIN_RUN
** reads or more came in page order, locate the frames of the next pages
** not already cached or read ahead (up to twice the run past pgno, at
** most nReadahead: a short range read ahead little, a scan up to
** nReadahead), as runs of frames stored next to each other (spans, each
** read with one range read), and queue them as one job for the read-ahead
** thread.  Best effort: it stops at the first page it cannot locate, and
** queues nothing while the thread is behind. */
#define RA_MIN_RUN 4
static void depotReadAhead(DepotFile *p, uint32_t pgno){
  RaBatch *b;
  uint32_t q, iLast, nWin;
  if( p->nReadahead==0 || p->pRa==0 || !p->bRaCores
   || !depot_ra_usable(p->pRa) ){
    return;
  }
  if( pgno==p->iRaLast+1
   || (pgno>p->iRaLast && pgno<=p->iRaHigh && p->nRaRun>=RA_MIN_RUN) ){
    /* in order, or a skip forward over pages already read ahead */
    if( p->nRaRun<UINT32_MAX ) p->nRaRun++;
  }else{
    p->nRaRun = 0;
    p->iRaHigh = pgno;
  }
  p->iRaLast = pgno;
  if( p->nRaRun<RA_MIN_RUN ) return;
  if( p->iRaHigh<pgno ) p->iRaHigh = pgno;
  /* the window: twice the run so far, at most nReadahead pages */
  nWin = p->nRaRun < p->nReadahead/2 ? 2*p->nRaRun : p->nReadahead;
  if( p->iRaHigh >= pgno + nWin/2 ) return;
  if( depot_ra_pending(p->pRa) >= p->nReadahead ) return;
  iLast = pgno + nWin;
  if( iLast>p->snap.nPage || iLast<pgno ) iLast = p->snap.nPage;
  b = sqlite3_malloc64(sizeof(*b));
  if( b==0 ) return;
  b->n = b->nSpan = b->nBuf = 0;
  for(q=p->iRaHigh+1; q<=iLast && b->n<RA_BATCH_PAGES; q++){
    DepotPageLoc loc;
    DepotRaFrame *f;
    if( depotRaLocate(p, q, &loc)!=SQLITE_OK ) break;
    p->iRaHigh = q;
    if( (loc.eKind!=DEPOT_LOC_DELTA && loc.eKind!=DEPOT_LOC_SHARD)
     || loc.nByte==0
     || depot_ra_has(p->pRa, loc.iBranch, q, depot_loc_owner(&loc),
                     p->snap.szPage)
     || depot_cache_has(p->pShared->pCache, loc.iBranch, q,
                        depot_loc_owner(&loc), p->snap.szPage) ){
      continue;
    }
    if( !depotRaNext(b, q, &loc) ){
      DepotRaSpan *sp = &b->aSpan[b->nSpan++];
      sp->loc = loc;
      sp->pgno = q;
      sp->nByte = 0;
      sp->iFrame = b->n;
      sp->nFrame = 0;
    }
    b->aSpan[b->nSpan-1].nByte += loc.nByte;
    b->aSpan[b->nSpan-1].nFrame++;
    f = &b->aFrame[b->n++];
    f->iBranch = loc.iBranch;
    f->iOwner = depot_loc_owner(&loc);
    f->pgno = q;
    f->iOff = b->nBuf;
    f->nByte = loc.nByte;
    b->nBuf += loc.nByte;
  }
  if( b->n>0 ){
    depot_ra_submit(p->pRa, p->snap.szPage, b->n, b->aFrame, b->nSpan,
                    b->aSpan, b->nBuf, p->nReadahead);
  }
  sqlite3_free(b);
}

/* A read of a page at most DEPOT_SCAN_STEP pages past the previous one
** continues a run; a run of DEPOT_SCAN_RUN such reads is a sequential
** scan (a B-tree's leaves in order), whose decoded pages never evict
** another scan's from the cache (depot_cache_put_scan()). */
#define DEPOT_SCAN_STEP 4
#define DEPOT_SCAN_RUN  8

static int depotScanning(DepotFile *p, uint32_t pgno){
  if( pgno>p->iScanLast && pgno-p->iScanLast<=DEPOT_SCAN_STEP ){
    if( p->nScanRun<UINT32_MAX ) p->nScanRun++;
  }else{
    p->nScanRun = 0;
  }
  p->iScanLast = pgno;
  return p->nScanRun>=DEPOT_SCAN_RUN;
}

/* Page pgno at location loc from the read-ahead ring into pOut: 1, or 0
** when the ring does not have it decoded. */
static int depotRaGet(DepotFile *p, const DepotPageLoc *loc, uint32_t pgno,
                      unsigned char *pOut){
  return p->pRa && (loc->eKind==DEPOT_LOC_DELTA || loc->eKind==DEPOT_LOC_SHARD)
      && depot_ra_get(p->pRa, loc->iBranch, pgno, depot_loc_owner(loc),
                      p->snap.szPage, pOut);
}

/* Page pgno of the pinned snapshot: its location from the page map, else
** from the seeks (then remembered in the map). */
static int depotSnapPage(DepotFile *p, uint32_t pgno, unsigned char *pOut){
  DepotPageLoc loc;
  char *zErr = 0;
  int rc, bScan;
  if( p->chain.n==0 || pgno>p->snap.nPage ){
    memset(pOut, 0, p->snap.szPage ? p->snap.szPage : p->szPageTx);
    return SQLITE_OK;
  }
  bScan = depotScanning(p, pgno);
  if( depot_pagemap_get(p->pShared->pMap, p->chain.aBranch[0],
                        p->chain.aCap[0], pgno, &loc) ){
    if( depotRaGet(p, &loc, pgno, pOut) ){
      depotReadAhead(p, pgno);
      return SQLITE_OK;
    }
    rc = depot_db_read_loc(p->pStore, p->pShared->pCache, bScan, p->pDctx,
                           &loc, pgno, p->snap.szPage, pOut, &zErr);
    if( rc==SQLITE_OK ){
      depotReadAhead(p, pgno);
      return SQLITE_OK;
    }
    /* the blob went away (compaction, then GC): find the page again */
    sqlite3_free(zErr);
    zErr = 0;
  }
  rc = depot_db_locate(p->pStore, &p->chunks, &p->chain, pgno, &loc, &zErr);
  if( rc==SQLITE_OK && !depotRaGet(p, &loc, pgno, pOut) ){
    rc = depot_db_read_loc(p->pStore, p->pShared->pCache, bScan, p->pDctx,
                           &loc, pgno, p->snap.szPage, pOut, &zErr);
  }
  if( rc==SQLITE_OK ){
    depot_pagemap_put(p->pShared->pMap, p->chain.aBranch[0],
                      p->chain.aCap[0], pgno, &loc);
    depotReadAhead(p, pgno);
  }
  return depotReport(rc, zErr, SQLITE_IOERR_READ);
}

/* File format bytes 18 and 19 of a database header of 2 state WAL mode,
** which a depot database never is.  The backup API copies them from a
** WAL-mode file (depot_import, the shell's .restore); kept, SQLite would
** look for a WAL the depot cannot give and fail every read with
** SQLITE_CANTOPEN, or, in exclusive locking mode, run the database in an
** in-memory WAL whose commits never reach the store.  Such a header is
** written and read as rollback-journal mode (1), as PRAGMA
** journal_mode=DELETE leaves it. */
static void depotHeaderNoWal(unsigned char *a){
  if( a[18]==2 ) a[18] = 1;
  if( a[19]==2 ) a[19] = 1;
}

/* What SQLite reads as the file change counter (offset 24 of page 1, and
** the version-valid-for number at 92 when it matched) is the low 32 bits of
** the pinned head's store-wide sequence, whatever the stored page holds.
** Every commit and every fork takes a new sequence number, so every pager
** sees a new counter for every commit even when the writer, in exclusive
** locking mode, stopped incrementing it, and even when a name moves from
** an inherited branch to its own; a writer's pager, which adds one to the
** counter it read, writes the value readers will see whenever no other
** commit of the store came in between, so it usually keeps its cache. */
static void depotVirtualCounter(DepotFile *p, unsigned char *a){
  uint32_t c = (uint32_t)p->snap.iVs;
  if( bytes_get32(a+92)==bytes_get32(a+24) ) bytes_put32(a+92, c);
  bytes_put32(a+24, c);
}

/* Bytes [iOff, iOff+n) of the write transaction's staged blob (vfs/db.h,
** DepotStageStream): from its chunk rows up to the stream's unwritten
** tail, the rest from the tail in memory. */
static int depotStagedBytes(DepotFile *p, uint32_t pgno, uint64_t iOff,
                            uint32_t n, unsigned char *a, char **pzErr){
  DepotStageStream *pS = &p->stream;
  uint64_t iWritten = pS->nBlob - pS->nBlob%pS->szChunk;
  uint32_t nHead = 0;
  int rc = SQLITE_OK;
  if( iOff<iWritten ){
    nHead = iWritten-iOff < n ? (uint32_t)(iWritten-iOff) : n;
  }
  if( nHead>0 ){
    DepotPageLoc loc;
    memset(&loc, 0, sizeof(loc));
    loc.eKind = DEPOT_LOC_DELTA;
    loc.iBranch = pS->iBranch;
    loc.iTxid = pS->iTxid;
    loc.szChunk = pS->szChunk;
    loc.iOffset = (uint32_t)iOff;
    loc.nByte = nHead;
    rc = depot_db_read_span(p->pStore, &loc, pgno, nHead, a, pzErr);
  }
  if( rc==SQLITE_OK && nHead<n ){
    memcpy(a+nHead, pS->aTail + (iOff+nHead-iWritten), n-nHead);
  }
  return rc;
}

/* The newest staged frame of page pgno of the write transaction: its
** decoded-page cache entry under the staged key (DEPOT_CACHE_STAGED, which
** no other connection reads), else found through its page index row of
** the transaction's txid and decoded into pOut. */
static int depotStagedPage(DepotFile *p, uint32_t pgno, unsigned char *pOut){
  DepotStageStream *pS = &p->stream;
  uint64_t iWritten = pS->nBlob - pS->nBlob%pS->szChunk;
  DepotPageLoc loc;
  PidxValue pv;
  char *zErr = 0;
  int rc;
  if( depot_cache_get(p->pShared->pCache, pS->iBranch, pgno,
                      pS->iTxid|DEPOT_CACHE_STAGED, p->szPageTx, pOut) ){
    return SQLITE_OK;
  }
  rc = depot_stage_locate(p->pStore, pS, pgno, &pv, &zErr);
  if( rc!=SQLITE_OK ) return depotReport(rc, zErr, SQLITE_IOERR_READ);
  if( (uint64_t)pv.iOffset + pv.nByte > iWritten ){
    unsigned char *a = sqlite3_malloc64(pv.nByte);
    if( a==0 ) return SQLITE_IOERR_NOMEM;
    rc = depotStagedBytes(p, pgno, pv.iOffset, pv.nByte, a, &zErr);
    if( rc==SQLITE_OK ){
      rc = ltx_decode_frame(a, pv.nByte, pgno, p->szPageTx, p->pDctx,
                            pOut, 0, &zErr);
    }
    sqlite3_free(a);
    return depotReport(rc, zErr, SQLITE_IOERR_READ);
  }
  memset(&loc, 0, sizeof(loc));
  loc.eKind = DEPOT_LOC_DELTA;
  loc.iBranch = pS->iBranch;
  loc.iTxid = pS->iTxid;
  loc.szChunk = pS->szChunk;
  loc.iOffset = pv.iOffset;
  loc.nByte = pv.nByte;
  rc = depot_db_read_loc(p->pStore, 0, 0, p->pDctx, &loc, pgno,
                         p->szPageTx, pOut, &zErr);
  return depotReport(rc, zErr, SQLITE_IOERR_READ);
}

/* The CRC-64 of the newest staged version of page pgno (from its frame's
** header) and the bytes of that frame. */
static int depotStagedCrc(DepotFile *p, uint32_t pgno, uint64_t *piCrc,
                          uint32_t *pnByte, char **pzErr){
  unsigned char a[LTX_FRAME_HEADER];
  PidxValue pv;
  int rc = depot_stage_locate(p->pStore, &p->stream, pgno, &pv, pzErr);
  if( rc==SQLITE_OK ){
    rc = depotStagedBytes(p, pgno, pv.iOffset, LTX_FRAME_HEADER, a, pzErr);
  }
  if( rc==SQLITE_OK && (bytes_get32(a)!=pgno
                        || bytes_get32(a+4)+LTX_FRAME_HEADER!=pv.nByte) ){
    sqlite3_free(*pzErr);
    *pzErr = sqlite3_mprintf("depot: the staged frame of page %u does not"
                             " match its page index row", pgno);
    rc = SQLITE_CORRUPT;
  }
  if( rc==SQLITE_OK ){
    *piCrc = bytes_get64(a+12);
    *pnByte = pv.nByte;
  }
  return rc;
}

/* Page pgno as SQLite should see it: the writer's own copy (in memory or
** staged), else the snapshot's (page 1 with the virtual change counter). */
static int depotGetPage(DepotFile *p, uint32_t pgno, uint32_t sz,
                        unsigned char *pOut){
  int rc;
  if( p->eLock>=SQLITE_LOCK_RESERVED ){
    unsigned char *a = txbuf_get(&p->tx, pgno);
    if( a ){
      memcpy(pOut, a, sz);
      return SQLITE_OK;
    }
    if( txstage_has(&p->stage, pgno) ) return depotStagedPage(p, pgno, pOut);
  }
  rc = depotSnapPage(p, pgno, pOut);
  if( rc==SQLITE_OK && pgno==1 && p->chain.n>0 ){
    depotVirtualCounter(p, pOut);
    depotHeaderNoWal(pOut);      /* a commit stored before the check above */
  }
  return rc;
}

static int depotReadPinned(DepotFile*, void*, int, sqlite3_int64);

/* A read without a lock (SQLite does this for the header of a database it
** has not locked yet) pins a snapshot for this call only. */
static int depotRead(sqlite3_file *pFile, void *pBuf, int iAmt,
                     sqlite3_int64 iOfst){
  DepotFile *p = (DepotFile*)pFile;
  int bOnce = p->eLock==SQLITE_LOCK_NONE;
  int rc = depotReadPinned(p, pBuf, iAmt, iOfst);
  if( bOnce ) depotEndRead(p);
  return rc;
}

/* The pager reads the 16 bytes at offset 24 of the file (change counter
** and what follows) only when it starts a read transaction from scratch:
** no write transaction of its own is open then.  Holding the write lock
** at that moment happens in exclusive locking mode after a transaction
** ended in an error or, with journal_mode=OFF, in a ROLLBACK: SQLite
** dropped its page cache, and what that transaction wrote is no commit,
** so the write buffer goes too and reads show the snapshot. */
static void depotPagerRestart(DepotFile *p, int iAmt, sqlite3_int64 iOfst){
  if( iAmt==16 && iOfst==24 && p->eLock>=SQLITE_LOCK_RESERVED
   && !p->bRollback && p->bTxDirty ){
    depotTxReset(p);
  }
}

static int depotReadPinned(DepotFile *p, void *pBuf, int iAmt,
                           sqlite3_int64 iOfst){
  unsigned char *z = (unsigned char*)pBuf;
  uint32_t sz, nPage;
  int rc = SQLITE_OK;
  if( p->eLock==SQLITE_LOCK_NONE && (rc = depotPin(p))!=SQLITE_OK ) return rc;
  depotPagerRestart(p, iAmt, iOfst);
  depotGeometry(p, &sz, &nPage);
  while( iAmt>0 ){
    uint32_t pgno, iIn, n;
    if( sz==0 || iOfst>=(sqlite3_int64)nPage*sz ){
      memset(z, 0, iAmt);
      return SQLITE_IOERR_SHORT_READ;
    }
    pgno = (uint32_t)(iOfst/sz) + 1;
    iIn = (uint32_t)(iOfst%sz);
    n = (uint32_t)iAmt < sz-iIn ? (uint32_t)iAmt : sz-iIn;
    if( iIn==0 && n==sz ){
      rc = depotGetPage(p, pgno, sz, z);
    }else{
      rc = depotGetPage(p, pgno, sz, p->aScratch);
      if( rc==SQLITE_OK ) memcpy(z, p->aScratch+iIn, n);
    }
    if( rc!=SQLITE_OK ) return rc;
    z += n; iOfst += n; iAmt -= (int)n;
  }
  return SQLITE_OK;
}

/* ================= writes ================= */

/* Remove the staged rows of iBranch past its head, and its published
** STAGE rows (vfs/db.h, DepotStageStream), in store write transactions of
** at most DEPOT_STAGE_BATCH rows each, so that no other writer of the
** store waits for more than one batch.  Stops at the first failure (the
** rest goes with the next writer or depot_gc).  Only the holder of the
** name's write lock calls it; no store transaction may be open. */
static int depotStageClear(DepotFile *p, uint64_t iBranch){
  int nMax = DEPOT_STAGE_BATCH, rc;
  char *zErr = 0;
#ifdef DEPOT_TEST
  if( depot_gc_test_batch>0 ) nMax = depot_gc_test_batch;
#endif
  rc = depot_stage_sweep(p->pStore, iBranch, nMax, &zErr);
  sqlite3_free(zErr);
  return rc;
}

/* Remove the page index rows of the pages the transaction unstaged
** (written again unchanged, cut off, or kept in memory and not
** published), listed in p->stage.aGone, in one store write transaction:
** none may stay for the commit to publish.  A page staged again since has
** its row back and keeps it.  The read transaction, if any, is ended and
** begun again.  A failure leaves the list as it was (*pzErr says why). */
static int depotStageReap(DepotFile *p, char **pzErr){
  TxStage *pSt = &p->stage;
  uint32_t i, n = 0;
  int bRead = p->bReadTxn, rc;
  for(i=0; i<pSt->nGone; i++){
    if( !txstage_has(pSt, pSt->aGone[i]) ) pSt->aGone[n++] = pSt->aGone[i];
  }
  pSt->nGone = n;
  if( n==0 ) return SQLITE_OK;
  depotEndRead(p);
  rc = depot_stage_unindex(p->pStore, &p->stream, pSt->aGone, n, pzErr);
  if( rc==SQLITE_OK ) pSt->nGone = 0;
  if( bRead ) depotBeginRead(p);
  return rc;
}

/* Page pgno, staged, is staged no longer: its newest staged frame leaves
** the running sums of the map (vfs/txbuf.h, TxStage) together with iSnap,
** the CRC-64 of the snapshot's page when the page existed in it, and its
** page index row goes to the map's list of rows to remove (emptied first
** when full).  A failure changes nothing. */
static int depotUnstage(DepotFile *p, uint32_t pgno, uint64_t iSnap,
                        char **pzErr){
  uint64_t iPrev = 0;
  uint32_t nPrev = 0;
  int rc = depotStagedCrc(p, pgno, &iPrev, &nPrev, pzErr);
  if( rc==SQLITE_OK && p->stage.nGone>=TXSTAGE_GONE ){
    rc = depotStageReap(p, pzErr);
  }
  if( rc==SQLITE_OK ) rc = txstage_unset(&p->stage, pgno, 1);
  if( rc==SQLITE_OK ){
    p->stage.nLive--;
    p->stage.nLiveByte -= nPrev;
    p->stage.iSum ^= iPrev ^ (pgno<=p->snap.nPage ? iSnap : 0);
  }
  return rc;
}

/* Unstage every staged page above nPage (a truncation). */
static int depotStageCut(DepotFile *p, uint32_t nPage, char **pzErr){
  uint32_t pgno = nPage;
  int rc = SQLITE_OK;
  while( rc==SQLITE_OK && (pgno = txstage_next(&p->stage, pgno))!=0 ){
    uint64_t iSnap = 0;
    if( pgno<=p->snap.nPage ){
      rc = depotSnapPage(p, pgno, p->aScratch);
      if( rc==SQLITE_OK ) iSnap = ltx_crc64(0, p->aScratch, p->szPageTx);
    }
    if( rc==SQLITE_OK ) rc = depotUnstage(p, pgno, iSnap, pzErr);
  }
  return rc;
}

/* Forget what the transaction staged and remove its rows (a failure
** leaves them to the branch's next commit, staging, writer or depot_gc),
** and its pages' entries in the decoded-page cache. */
static void depotStageDiscard(DepotFile *p){
  txstage_clear(&p->stage);
  if( p->stream.iTxid ){
    depot_cache_rekey(p->pShared->pCache, p->stream.iBranch,
                      p->stream.iTxid|DEPOT_CACHE_STAGED, 0, 0, 0);
  }
  if( p->stream.iTxid && p->stream.nBlob>0 ){
    int bRead = p->bReadTxn;
    depotEndRead(p);
    depotStageClear(p, p->stream.iBranch);
    if( bRead ) depotBeginRead(p);
  }
  depot_stage_reset(&p->stream);
}

static void depotTxReset(DepotFile *p){
  txbuf_clear(&p->tx);
  depotStageDiscard(p);
  p->nPageTx = p->snap.nPage;
  p->szPageTx = p->snap.szPage;
  p->bTxDirty = 0;
}

/* The page size a database header (page 1) states: bytes 16..17, big
** endian, 1 meaning 65536.  A VACUUM or backup that changes the page size
** writes pages of the old size whose page 1 states the new one. */
static uint32_t depotHeaderPageSize(const void *pPage1){
  const unsigned char *a = (const unsigned char*)pPage1;
  uint32_t sz = bytes_get16(a+16);
  return sz==1 ? 65536 : sz;
}

/* The zstd level of frames of the write transaction: the connection's,
** except that, when no zstd_level was named, a bulk transaction (one that
** stages, or commits DEPOT_BULK_BYTES of pages or more: VACUUM, a load)
** encodes at DEPOT_BULK_LEVEL, which takes about a fifth fewer encoding
** instructions a page for a few percent more bytes; compaction re-encodes
** those pages into shards at its own level. */
#define DEPOT_BULK_LEVEL 1
#define DEPOT_BULK_BYTES (8*1024*1024)
static int depotTxLevel(DepotFile *p, int64_t nBytes){
  if( !p->bLevelGiven && p->iLevel>DEPOT_BULK_LEVEL
   && (p->stream.iTxid!=0 || nBytes>=DEPOT_BULK_BYTES) ){
    return DEPOT_BULK_LEVEL;
  }
  return p->iLevel;
}

static int depotPageChanged(DepotFile*, uint32_t, const unsigned char*,
                            uint64_t, int*, uint64_t*);

/* The write buffer outgrew its budget: write its pages to the store as one
** staged LTX part (vfs/db.h, DepotStageStream) with their page index rows
** of txid head+1 in a store transaction of its own (the first part of a
** transaction first removes what another one staged as that txid),
** remember where each landed, and drop them from the buffer.  A page that
** equals the snapshot's is dropped instead (and so is an older staged
** version of it, whose row goes).  A page staged before and written again
** since, or written again while in the buffer (an interior or index page
** a bulk load or a large delete keeps rewriting), stays in memory while
** such pages fill at most half the budget, so it is not staged once per
** batch.  Only a branch that exists, at its own page size, and
** not during a journal playback, stages; else the pages stay in memory. */
/* A name without a branch of its own gets one before the first part of
** its first transaction is staged: created empty (txid 0, the inherited
** state when the name was inherited) in a store transaction of its own,
** which the commit then publishes onto.  A ROLLBACK leaves the branch
** empty, as SQLite leaves a new file empty.  Not done (the pages stay in
** memory) for a page size other than the inherited one or past the fork
** depth limit, which the commit reports. */
static void depotAdopt(DepotFile*, uint64_t, const DbHead*);

static int depotStageCreate(DepotFile *p){
  uint32_t sz = p->szPageTx;
  DepotCommit c;
  DbHead head;
  uint64_t iBranch = 0;
  char *zErr = 0;
  int rc;
  if( p->chain.n>DEPOT_MAX_FORK_DEPTH ) return SQLITE_OK;
  if( p->chain.n>0 ? sz!=p->snap.szPage : p->snap.nPage!=0 ) return SQLITE_OK;
  memset(&c, 0, sizeof(c));
  c.zDb = p->zDb; c.zBranch = p->zBranch; c.iBucket = p->iBucket;
  c.iInhBranch = p->iInhBranch;
  c.iInhTxid = p->iInhTxid;
  c.base = p->snap;
  c.base.szPage = sz;
  depotEndRead(p);
  rc = depot_db_create(p->pStore, &c, &head, &iBranch, &zErr);
  if( rc==SQLITE_OK ){
    depotAdopt(p, iBranch, &head);
    p->bStageSwept = 1;
    p->bUnborn = 1;
  }
  depotBeginRead(p);
  if( rc==SQLITE_BUSY_SNAPSHOT ){
    sqlite3_free(zErr);
    zErr = sqlite3_mprintf("depot: database %s branch %s was created by"
        " another writer since this transaction began", p->zDb, p->zBranch);
  }
  return depotReport(rc, zErr, SQLITE_IOERR_WRITE);
}

/* The page bytes of one staged LTX part: a batch larger than this goes in
** several parts, one store transaction each. */
#define DEPOT_STAGE_PART_BYTES (4*1024*1024)

#ifdef DEPOT_TEST
int depot_stage_test_part_bytes = 0;
#endif

/* The page bytes of one staged part: DEPOT_STAGE_PART_BYTES, or the test
** hook's size. */
static uint32_t depotStagePartBytes(void){
#ifdef DEPOT_TEST
  if( depot_stage_test_part_bytes>0 ){
    return (uint32_t)depot_stage_test_part_bytes;
  }
#endif
  return DEPOT_STAGE_PART_BYTES;
}

/* Page pgno, just staged with content pPage, enters the decoded-page cache
** under the staged key (DEPOT_CACHE_STAGED), replacing the entry of its
** previous staged frame: the writer reads it back from there, and the
** commit publishes the entry (depotPubCommit()).  Entered as a bulk page
** (depot_cache_put_bulk()): a transaction that stages more pages than the
** cache holds keeps its first pages cached, instead of cycling every page
** through the cache and leaving only its last ones.  A transaction puts
** at most a quarter of the cache's limit there (TxStage.nCached): with
** the write buffer, the whole cache filled by one bulk transaction would
** take the process past the write budget plus 64 MiB (a VACUUM INTO or
** an import of a large database); the pages past that quarter go to the
** cache's spill file, whose slots cost no memory but their headers, up to
** a quarter of its limit (so an import or a VACUUM INTO of a database
** larger than the file writes the file a quarter full, not many times
** over). */
static void depotStageCachePut(DepotFile *p, uint32_t pgno,
                               const unsigned char *pPage){
  uint64_t iKey = p->stream.iTxid|DEPOT_CACHE_STAGED;
  DepotCache *pCache = p->pShared->pCache;
  depot_cache_drop(pCache, p->stream.iBranch, pgno, iKey);
  if( (int64_t)(p->stage.nCached+1)*p->szPageTx
        > depot_cache_limit(pCache)/4 ){
    if( (int64_t)(p->stage.nSpilled+1)*p->szPageTx
          <= depot_cache_spill_limit(pCache)/4 ){
      p->stage.nSpilled++;
      depot_cache_put_spill(pCache, p->stream.iBranch, pgno, iKey,
                            p->szPageTx, pPage);
    }
    return;
  }
  p->stage.nCached++;
  depot_cache_put_bulk(pCache, p->stream.iBranch, pgno, iKey, p->szPageTx,
                       pPage);
}

/* What depotStage() learned of one page of the batch before writing it. */
typedef struct StageNote StageNote;
struct StageNote {
  uint32_t pgno;
  uint32_t nPrev;            /* bytes of its newest staged frame, if bPrev */
  int bPrev;                 /* it was staged before */
  uint64_t iCrc;             /* CRC-64 of the page */
  uint64_t iOld;             /* of the snapshot's page, if changed from it */
  uint64_t iPrev;            /* of its newest staged frame, if bPrev */
};

static int depotStage(DepotFile *p){
  uint32_t *aDirty = 0, nDirty = 0, i, j, n = 0, nUn = 0, nKeep = 0;
  uint32_t nPart = 0;
  uint32_t sz = p->szPageTx;
  const unsigned char **ap = 0;
  uint32_t *aPg = 0;
  StageNote *aSt = 0, *aUn = 0;
  LtxFrameRef *aRef = 0;
  unsigned char *aBlob = 0;
  int64_t nBlob = 0;
  char *zErr = 0;
  LtxHeader h;
  int rc;
  if( p->bRollback || sz==0 ) return SQLITE_OK;
  if( p->iBranch==0 && (rc = depotStageCreate(p))!=SQLITE_OK ) return rc;
  if( p->iBranch==0 || p->chain.n==0 || sz!=p->snap.szPage ){
    return SQLITE_OK;
  }
  rc = txbuf_sorted(&p->tx, &aDirty, &nDirty);
  if( rc==SQLITE_OK ){
    ap = sqlite3_malloc64(sizeof(void*)*(nDirty+1));
    aPg = sqlite3_malloc64(sizeof(uint32_t)*(nDirty+1));
    aSt = sqlite3_malloc64(sizeof(StageNote)*(nDirty+1));
    aUn = sqlite3_malloc64(sizeof(StageNote)*(nDirty+1));
    aRef = sqlite3_malloc64(sizeof(LtxFrameRef)*(nDirty+1));
    if( ap==0 || aPg==0 || aSt==0 || aUn==0 || aRef==0 ) rc = SQLITE_NOMEM;
  }
  for(i=0; rc==SQLITE_OK && i<nDirty; i++){
    const unsigned char *pNew = txbuf_get(&p->tx, aDirty[i]);
    int bStaged = txstage_has(&p->stage, aDirty[i]);
    StageNote st;
    int bChanged = 1;
    if( aDirty[i]>p->nPageTx ) continue;
    if( (bStaged || txbuf_rewritten(&p->tx, aDirty[i], sz))
     && (nKeep+1)*sz<=p->nTxBudget/2 ){
      aDirty[i] = 0;                        /* kept in memory */
      nKeep++;
      continue;
    }
    memset(&st, 0, sizeof(st));
    st.pgno = aDirty[i];
    st.iCrc = ltx_crc64(0, pNew, sz);
    if( aDirty[i]<=p->snap.nPage ){
      rc = depotPageChanged(p, aDirty[i], pNew, st.iCrc, &bChanged, &st.iOld);
    }
    if( rc==SQLITE_OK && bStaged ){
      st.bPrev = 1;
      rc = depotStagedCrc(p, aDirty[i], &st.iPrev, &st.nPrev, &zErr);
    }
    if( rc!=SQLITE_OK ) continue;
    if( !bChanged ){
      if( bStaged ){
        aUn[nUn++] = st;                    /* unstaged below */
        aDirty[i] = 0;
      }
      continue;
    }
    aSt[n] = st;
    aPg[n] = st.pgno;
    ap[n++] = pNew;
  }
  if( rc==SQLITE_OK && n>0 && p->stream.iTxid==0 ){
    /* what another transaction staged as this txid goes first: its page
    ** index rows would be published with this one's */
    depotEndRead(p);
    rc = depotStageClear(p, p->iBranch);
    depotBeginRead(p);
    if( rc==SQLITE_OK ){
      rc = depot_stage_begin(&p->stream, p->iBranch, p->snap.iTxid+1,
                             (uint32_t)store_max_value(p->pStore));
    }
    if( rc==SQLITE_OK ){
      depot_cache_rekey(p->pShared->pCache, p->stream.iBranch,
                        p->stream.iTxid|DEPOT_CACHE_STAGED, 0, 0, 0);
    }
  }
  if( rc==SQLITE_OK && n>0 ){
    /* the map's room for these pages, so that nothing fails once their
    ** rows are in the store */
    rc = txstage_reserve(&p->stage, aPg[n-1]);
  }
  /* the pages go in parts of at most depotStagePartBytes(), each freed
  ** from the buffer once its store transaction is in: the encoded frames
  ** in memory at once are one such part's, not the batch's */
  for(j=0; rc==SQLITE_OK && j<n; j+=nPart){
    uint32_t k;
    nPart = depotStagePartBytes()/sz;
    if( nPart==0 ) nPart = 1;
    if( nPart>n-j ) nPart = n-j;
    memset(&h, 0, sizeof(h));
    h.szPage = sz;
    h.nPage = p->nPageTx;
    h.iMinTxid = h.iMaxTxid = p->stream.iTxid;
    h.nFrame = nPart;
    rc = ltx_encode_threads(&h, &aPg[j], &ap[j], 0, p->pCctx,
                            depotTxLevel(p, 0), p->nThreads, &aBlob, &nBlob,
                            &aRef[j]);
    if( rc==SQLITE_OK ){
      depotEndRead(p);          /* the part's store write transaction */
      rc = depot_stage_append(p->pStore, &p->stream, aBlob, nBlob, nPart,
                              &aRef[j], &zErr);
      depotBeginRead(p);
    }
    sqlite3_free(aBlob);
    aBlob = 0;
    for(k=j; rc==SQLITE_OK && k<j+nPart; k++){
      TxStage *pSt = &p->stage;
      const StageNote *e = &aSt[k];
      depotStageCachePut(p, e->pgno, ap[k]);
      if( e->bPrev ){
        pSt->iSum ^= e->iPrev ^ e->iCrc;
        pSt->nLiveByte += (int64_t)aRef[k].nByte - e->nPrev;
      }else{
        txstage_set(pSt, e->pgno);          /* reserved: cannot fail */
        pSt->nLive++;
        pSt->nLiveByte += aRef[k].nByte;
        pSt->iSum ^= e->iCrc ^ (e->pgno<=p->snap.nPage ? e->iOld : 0);
      }
      txbuf_drop(&p->tx, e->pgno);
    }
  }
  if( rc==SQLITE_OK ){
    TxStage *pSt = &p->stage;
    for(i=0; i<nDirty; i++){
      if( aDirty[i] ) txbuf_drop(&p->tx, aDirty[i]);
    }
    /* pages staged before and now equal to the snapshot's: the buffer's
    ** copy goes once the staged version is gone (a failure keeps it) */
    for(i=0; rc==SQLITE_OK && i<nUn; i++){
      if( pSt->nGone>=TXSTAGE_GONE ) rc = depotStageReap(p, &zErr);
      if( rc==SQLITE_OK ) rc = txstage_unset(pSt, aUn[i].pgno, 1);
      if( rc==SQLITE_OK ){
        pSt->nLive--;
        pSt->nLiveByte -= aUn[i].nPrev;
        pSt->iSum ^= aUn[i].iPrev ^ aUn[i].iCrc;
        txbuf_drop(&p->tx, aUn[i].pgno);
      }
    }
  }
  if( rc==SQLITE_OK && p->stage.nGone>0 ) rc = depotStageReap(p, &zErr);
  sqlite3_free(aDirty);
  sqlite3_free(ap);
  sqlite3_free(aPg);
  sqlite3_free(aSt);
  sqlite3_free(aUn);
  sqlite3_free(aRef);
  sqlite3_free(aBlob);
  if( rc==SQLITE_TOOBIG ){        /* past 4 GiB: the rest stays in memory */
    sqlite3_free(zErr);
    return SQLITE_OK;
  }
  if( rc==SQLITE_NOMEM ) rc = SQLITE_IOERR_NOMEM;
  return depotReport(rc, zErr, SQLITE_IOERR_WRITE);
}

static int depotWrite(sqlite3_file *pFile, const void *pBuf, int iAmt,
                      sqlite3_int64 iOfst){
  DepotFile *p = (DepotFile*)pFile;
  uint32_t pgno;
  if( p->eLock<SQLITE_LOCK_RESERVED ){
    depotLog(SQLITE_IOERR_WRITE, "depot: write without a write lock");
    return SQLITE_IOERR_WRITE;
  }
  if( p->nPageTx==0 && p->tx.nUsed==0 && depotPageSizeOk(iAmt) ){
    p->szPageTx = (uint32_t)iAmt;       /* an empty database: any size */
  }
  if( (uint32_t)iAmt!=p->szPageTx || iOfst%iAmt ){
    depotLog(SQLITE_IOERR_WRITE, "depot: writes must be whole pages of"
        " %u bytes, got %d bytes at offset %lld (the page size of a depot"
        " database is fixed by its first commit)", p->szPageTx, iAmt, iOfst);
    return SQLITE_IOERR_WRITE;
  }
  pgno = (uint32_t)(iOfst/iAmt) + 1;
  if( pgno==1 && depotHeaderPageSize(pBuf)!=p->szPageTx ){
    depotLog(SQLITE_IOERR_WRITE, "depot: page 1 sets a page size of %u"
        " bytes, but the page size of this depot database is %u bytes (fixed"
        " by its first commit)", depotHeaderPageSize(pBuf), p->szPageTx);
    return SQLITE_IOERR_WRITE;
  }
  /* The pager's own copy of page 1 is set right too (as cksumvfs writes
  ** its checksum into the page it is given), so the writer's page cache
  ** agrees with what it stored. */
  if( pgno==1 ) depotHeaderNoWal((unsigned char*)pBuf);
  if( p->bRollback && pgno<=p->snap.nPage && p->chain.n>0
   && p->szPageTx==p->snap.szPage ){
    /* The journal gives back the page as the snapshot has it: forget the
    ** transaction's copy (in memory or staged) instead of keeping another,
    ** so the playback of a transaction of any size needs no memory.  A
    ** staged page only leaves the map, without the store: the rollback
    ** ends with the transaction's reset (depotJournalRollback()), which
    ** clears the map and its sums and removes every staged row. */
    txbuf_drop(&p->tx, pgno);
    txstage_unset(&p->stage, pgno, 0);
    if( pgno>p->nPageTx ) p->nPageTx = pgno;
    p->bTxDirty = 1;
    return SQLITE_OK;
  }
  if( txbuf_put(&p->tx, pgno, pBuf, (uint32_t)iAmt)!=SQLITE_OK ){
    return SQLITE_IOERR_NOMEM;
  }
  if( pgno>p->nPageTx ) p->nPageTx = pgno;
  p->bTxDirty = 1;
  if( p->nTxBudget>0 && txbuf_bytes(&p->tx, p->szPageTx)>p->nTxBudget ){
    return depotStage(p);
  }
  return SQLITE_OK;
}

static int depotTruncate(sqlite3_file *pFile, sqlite3_int64 size){
  DepotFile *p = (DepotFile*)pFile;
  uint32_t n;
  if( p->eLock<SQLITE_LOCK_RESERVED
   || (p->szPageTx==0 ? size!=0 : size%p->szPageTx!=0) ){
    depotLog(SQLITE_IOERR_TRUNCATE, "depot: truncate to %lld bytes is not"
                " a whole number of pages inside a write transaction", size);
    return SQLITE_IOERR_TRUNCATE;
  }
  if( p->szPageTx==0 ) return SQLITE_OK;
  n = (uint32_t)(size/p->szPageTx);
  if( n<p->nPageTx ){
    char *zErr = 0;
    int rc = txbuf_truncate(&p->tx, n);
    if( rc==SQLITE_OK ) rc = depotStageCut(p, n, &zErr);
    if( rc==SQLITE_NOMEM ) rc = SQLITE_IOERR_NOMEM;
    if( rc!=SQLITE_OK ) return depotReport(rc, zErr, SQLITE_IOERR_TRUNCATE);
  }
  p->nPageTx = n;
  p->bTxDirty = 1;
  return SQLITE_OK;
}

static int depotFileSize(sqlite3_file *pFile, sqlite3_int64 *pSize){
  DepotFile *p = (DepotFile*)pFile;
  uint32_t sz, nPage;
  int rc;
  if( p->eLock==SQLITE_LOCK_NONE ){
    if( (rc = depotPin(p))!=SQLITE_OK ) return rc;
    depotEndRead(p);
  }
  depotGeometry(p, &sz, &nPage);
  *pSize = (sqlite3_int64)sz*nPage;
  return SQLITE_OK;
}

/* ================= publishing a commit ================= */

/* The pages a commit publishes, in ascending order: those in memory, and
** those staged (whose frames are already in the store). */
typedef struct PubSet PubSet;
struct PubSet {
  uint32_t n;
  uint32_t *aPgno;
  const unsigned char **ap;
  unsigned char *aZero;      /* one zero page, for holes */
  uint64_t iChecksum;        /* post-apply checksum being computed */
  uint32_t nStaged;          /* staged pages published ... */
  int64_t nStagedByte;       /* ... and their frames' bytes */
  uint32_t nCancel;          /* staged pages published from memory ... */
  int64_t nCancelByte;       /* ... and their staged frames' bytes */
};

/* Whether page pgno of the write transaction (pNew, whose CRC-64 is iNew)
** differs from the snapshot's, in *pbChanged, and if so the snapshot
** page's CRC-64 in *piOld.  A page the decoded-page cache holds is
** compared byte by byte.  Else the header of its stored frame gives its
** CRC-64 without decoding the frame: a CRC that differs from iNew means
** the page changed.  Equal CRCs (a page rewritten unchanged), and any
** failure of that shortcut (a blob reclaimed since the location was
** found), read the page and compare it byte by byte, so an unchanged page
** is never stored and a changed one never taken for unchanged. */
static int depotPageChanged(DepotFile *p, uint32_t pgno,
                            const unsigned char *pNew, uint64_t iNew,
                            int *pbChanged, uint64_t *piOld){
  uint32_t sz = p->szPageTx;
  DepotPageLoc loc;
  char *zErr = 0;
  int rc, bLoc = 0, bHave = 0;
  if( p->chain.n>0 && pgno<=p->snap.nPage && p->snap.szPage==sz ){
    bLoc = depot_pagemap_get(p->pShared->pMap, p->chain.aBranch[0],
                             p->chain.aCap[0], pgno, &loc)
        || depot_db_locate(p->pStore, &p->chunks, &p->chain, pgno, &loc,
                           &zErr)==SQLITE_OK;
    sqlite3_free(zErr);
    zErr = 0;
  }
  if( bLoc && (loc.eKind==DEPOT_LOC_DELTA || loc.eKind==DEPOT_LOC_SHARD) ){
    bHave = depot_cache_get(p->pShared->pCache, loc.iBranch, pgno,
                            depot_loc_owner(&loc), sz, p->aScratch);
    if( !bHave ){
      uint64_t iOld = 0;
      rc = depot_db_loc_crc(p->pStore, &loc, pgno, sz, &iOld, &zErr);
      sqlite3_free(zErr);
      if( rc==SQLITE_OK && iOld!=iNew ){
        *pbChanged = 1;
        *piOld = iOld;
        return SQLITE_OK;
      }
    }
  }
  if( !bHave ){                       /* else aScratch holds the page */
    rc = depotSnapPage(p, pgno, p->aScratch);
    if( rc!=SQLITE_OK ) return rc;
  }
  *pbChanged = memcmp(p->aScratch, pNew, sz)!=0;
  if( *pbChanged ) *piOld = ltx_crc64(0, p->aScratch, sz);
  /* the branch's own version of a changed page leaves the decoded-page
  ** cache: the commit makes it unreachable from the head (a parent's
  ** version stays, its branch still reads it) */
  if( *pbChanged && bLoc && p->iBranch!=0 && loc.iBranch==p->iBranch
   && (loc.eKind==DEPOT_LOC_DELTA || loc.eKind==DEPOT_LOC_SHARD) ){
    depot_cache_drop(p->pShared->pCache, loc.iBranch, pgno,
                     depot_loc_owner(&loc));
  }
  return SQLITE_OK;
}

/* A staged page that the commit publishes from memory: its staged
** frame's part of the map's running sums (iSnap: the snapshot's CRC-64 of
** it, if it existed there) stays out of this commit; the commit replaces
** its page index row. */
static int depotPubCancel(DepotFile *p, PubSet *s, uint32_t pgno,
                          uint64_t iSnap){
  uint64_t iPrev = 0;
  uint32_t nPrev = 0;
  char *zErr = 0;
  int rc = depotStagedCrc(p, pgno, &iPrev, &nPrev, &zErr);
  if( rc!=SQLITE_OK ) return depotReport(rc, zErr, SQLITE_IOERR_FSYNC);
  s->iChecksum ^= iPrev ^ (pgno<=p->snap.nPage ? iSnap : 0);
  s->nCancel++;
  s->nCancelByte += nPrev;
  return SQLITE_OK;
}

/* A staged page written again equal to the snapshot's (CRC-64 iSnap):
** the commit does not publish it, so it is unstaged (its page index row
** must go before the commit). */
static int depotPubUnstage(DepotFile *p, uint32_t pgno, uint64_t iSnap){
  char *zErr = 0;
  int rc = depotUnstage(p, pgno, iSnap, &zErr);
  if( rc==SQLITE_NOMEM ) rc = SQLITE_IOERR_NOMEM;
  return rc==SQLITE_OK ? rc : depotReport(rc, zErr, SQLITE_IOERR_FSYNC);
}

/* Changed pages that existed before: compare with the snapshot, keep the
** ones that differ, and move the checksum from old to new content.  A
** staged page among them leaves the staged set's part of the commit
** (depotPubCancel()), or, unchanged, is unstaged. */
static int depotPubModified(DepotFile *p, PubSet *s, const uint32_t *aDirty,
                            uint32_t nDirty){
  uint32_t i, sz = p->szPageTx;
  for(i=0; i<nDirty && aDirty[i]<=p->snap.nPage; i++){
    const unsigned char *pNew = txbuf_get(&p->tx, aDirty[i]);
    uint64_t iNew, iOld = 0;
    int rc, bChanged = 0;
    if( aDirty[i]>p->nPageTx ) break;
    iNew = ltx_crc64(0, pNew, sz);
    rc = depotPageChanged(p, aDirty[i], pNew, iNew, &bChanged, &iOld);
    if( rc!=SQLITE_OK ) return rc;
    if( txstage_has(&p->stage, aDirty[i]) ){
      rc = bChanged ? depotPubCancel(p, s, aDirty[i], iOld)
                    : depotPubUnstage(p, aDirty[i], iNew);
      if( rc!=SQLITE_OK ) return rc;
    }
    if( !bChanged ) continue;
    s->iChecksum ^= iOld ^ iNew;
    s->aPgno[s->n] = aDirty[i];
    s->ap[s->n++] = pNew;
  }
  return SQLITE_OK;
}

/* Pages past the old end (zero pages for holes), and pages cut off by a
** truncation, which leave the checksum. */
static int depotPubResized(DepotFile *p, PubSet *s){
  uint32_t pgno, sz = p->szPageTx;
  for(pgno=p->snap.nPage+1; pgno<=p->nPageTx; pgno++){
    const unsigned char *pNew = txbuf_get(&p->tx, pgno);
    int bStaged = txstage_has(&p->stage, pgno);
    if( pNew==0 && bStaged ) continue;  /* staged */
    if( bStaged ){
      int rc = depotPubCancel(p, s, pgno, 0);
      if( rc!=SQLITE_OK ) return rc;
    }
    if( pNew==0 ) pNew = s->aZero;
    s->iChecksum ^= ltx_crc64(0, pNew, sz);
    s->aPgno[s->n] = pgno;
    s->ap[s->n++] = pNew;
  }
  for(pgno=p->nPageTx+1; pgno<=p->snap.nPage; pgno++){
    int rc = depotSnapPage(p, pgno, p->aScratch);
    if( rc!=SQLITE_OK ) return rc;
    s->iChecksum ^= ltx_crc64(0, p->aScratch, sz);
  }
  return SQLITE_OK;
}

/* The staged pages the commit publishes: those the map holds, but for the
** ones published from memory (s->nCancel, already out of the checksum).
** A staged page that existed in the snapshot differs from it (that was
** checked when it was staged), so the checksum moves from its old CRC to
** its new one; a page past the old end adds its CRC (the map's running
** sum, vfs/txbuf.h). */
static void depotPubStaged(DepotFile *p, PubSet *s){
  if( p->stream.iTxid==0 ) return;
  s->iChecksum ^= p->stage.iSum;
  s->nStaged = p->stage.nLive - s->nCancel;
  s->nStagedByte = p->stage.nLiveByte - s->nCancelByte;
}

/* After a commit: the new head; a name that had no branch of its own now
** has one, which reads through the inherited chain (if any). */
static void depotAdopt(DepotFile *p, uint64_t iBranch, const DbHead *pHead){
  if( p->iBranch==0 && p->chain.n>0 ){
    memmove(&p->chain.aBranch[1], &p->chain.aBranch[0],
            sizeof(uint64_t)*p->chain.n);
    memmove(&p->chain.aCap[1], &p->chain.aCap[0], sizeof(uint64_t)*p->chain.n);
    memset(p->chain.aGapLo, 0, sizeof(p->chain.aGapLo));
    memset(p->chain.aGapHi, 0, sizeof(p->chain.aGapHi));
    p->chain.n++;
  }else if( p->iBranch==0 ){
    p->chain.n = 1;
  }
  p->chain.aBranch[0] = iBranch;
  p->chain.aCap[0] = pHead->iTxid;
  p->snap = *pHead;
  p->iBranch = iBranch;
}

/* The commit bytes that wake the compactor: what this connection
** committed since it last woke it reaches the database's size, and at
** least this many bytes. */
#define DEPOT_COMPACT_MIN_BYTES (4*1024*1024)

/* After a commit of nBytes of frames: wake the background compactor when
** the branch has more than nCompactAfter commits past its watermark, or
** when this connection's commits since it last woke it hold as many bytes
** as the database (at least DEPOT_COMPACT_MIN_BYTES).  The watermark is
** read (one store get) only when the last value seen says the threshold
** may be passed; once woken, the head counts as the expected watermark. */
static void depotMaybeCompact(DepotFile *p, uint64_t iBranch, uint64_t iHead,
                              int64_t nBytes){
  uint64_t W = 0;
  int64_t nDb = (int64_t)p->snap.nPage*p->snap.szPage;
  if( p->nCompactAfter<=0 || p->zPath==0 ) return;
  p->nWakeBytes += nBytes;
  if( p->nWakeBytes >= (nDb>DEPOT_COMPACT_MIN_BYTES ? nDb
                                                  : DEPOT_COMPACT_MIN_BYTES) ){
    p->nWakeBytes = 0;
    p->iWakeMark = iHead;
    depot_compact_wake(p->zPath, iBranch);
    return;
  }
  if( iHead <= p->iWakeMark + (uint64_t)p->nCompactAfter ) return;
  if( depot_compact_mark(p->pStore, iBranch, &W)!=SQLITE_OK ) return;
  p->iWakeMark = W;
  if( iHead > W + (uint64_t)p->nCompactAfter ){
    p->iWakeMark = iHead;
    p->nWakeBytes = 0;
    depot_compact_wake(p->zPath, iBranch);
  }
}

/* depot_cache_rekey() callback of a staged commit: whether page pgno is
** published from its staged frame (staged, within the database, and not
** written again into memory since). */
static int depotStagedKeep(void *pArg, uint32_t pgno){
  DepotFile *p = (DepotFile*)pArg;
  return pgno<=p->nPageTx && txstage_has(&p->stage, pgno)
      && txbuf_get(&p->tx, pgno)==0;
}

static int depotPubCommit(DepotFile *p, PubSet *s){
  DepotCommit c;
  DbHead head;
  uint64_t iBranch = 0;
  int64_t nBytes = 0;
  char *zErr = 0;
  uint32_t i;
  int rc, bStaged;
  memset(&c, 0, sizeof(c));
  if( p->iBranch==0 && p->chain.n>DEPOT_MAX_FORK_DEPTH ){
    depotLog(SQLITE_IOERR_FSYNC, "depot: the first write to database %s"
        " branch %s in this bucket would fork a branch past the fork depth"
        " limit of %d", p->zDb, p->zBranch, DEPOT_MAX_FORK_DEPTH);
    return SQLITE_IOERR_FSYNC;
  }
  c.zDb = p->zDb; c.zBranch = p->zBranch; c.iBranch = p->iBranch;
  c.iBucket = p->iBucket;
  c.iInhBranch = p->iBranch ? 0 : p->iInhBranch;
  c.iInhTxid = p->iBranch ? 0 : p->iInhTxid;
  c.base = p->snap;
  c.szPage = p->szPageTx; c.nPage = p->nPageTx;
  c.iChecksum = s->iChecksum;
  c.nDirty = s->n; c.aPgno = s->aPgno; c.apPage = s->ap;
  c.nThread = p->nThreads;
  if( p->stream.iTxid ) c.pStage = &p->stream;
  c.aLocOut = sqlite3_malloc64(sizeof(DepotPageLoc)*(s->n+1));
  if( c.aLocOut==0 ) return SQLITE_IOERR_NOMEM;
  depotEndRead(p);            /* the commit's store write transaction */
  rc = depot_db_commit(p->pStore, &c, p->pCctx,
                       depotTxLevel(p, (int64_t)s->n*c.szPage), &head,
                       &iBranch, &zErr);
  if( rc==SQLITE_BUSY_SNAPSHOT ){
    sqlite3_free(zErr);
    zErr = sqlite3_mprintf("depot: commit refused: database %s branch %s"
        " changed since this transaction began", p->zDb, p->zBranch);
  }
  if( rc!=SQLITE_OK ){
    sqlite3_free(c.aLocOut);
    depotBeginRead(p);
    return depotReport(rc, zErr, SQLITE_IOERR_FSYNC);
  }
  if( p->stream.iTxid && p->stream.nBlob>0 ){
    depotStageClear(p, iBranch);    /* its STAGE rows, published now */
  }
  bStaged = p->stream.iTxid!=0;
  if( bStaged ){
    /* the staged pages' cache entries become the published versions,
    ** but for pages published from memory (put below) or unstaged */
    depot_cache_rekey(p->pShared->pCache, p->stream.iBranch,
                      p->stream.iTxid|DEPOT_CACHE_STAGED, head.iTxid,
                      p->stream.iBranch==iBranch
                      && p->stream.iTxid==head.iTxid ? depotStagedKeep : 0,
                      p);
  }
  /* The page map moves forward with the pages written from memory; after
  ** a staged commit it starts over with them (a base equal to the new head
  ** never matches; base 0 would match a fork's map at txid 0): the staged
  ** pages' locations would cost memory per staged page, for entries the
  ** readers find again when they need them. */
  depot_stage_reset(&p->stream);
  txstage_clear(&p->stage);
  depot_pagemap_commit(p->pShared->pMap, iBranch,
                       p->iBranch==iBranch && s->nStaged==0 ? p->snap.iTxid
                                                            : head.iTxid,
                       head.iTxid, s->n, s->aPgno, c.aLocOut);
  for(i=0; i<s->n; i++) nBytes += c.aLocOut[i].nByte;
  nBytes += s->nStagedByte;
  sqlite3_free(c.aLocOut);
  for(i=0; i<s->n; i++){
    if( bStaged ){
      depot_cache_put_bulk(p->pShared->pCache, iBranch, s->aPgno[i],
                           head.iTxid, c.szPage, s->ap[i]);
    }else{
      depot_cache_put(p->pShared->pCache, iBranch, s->aPgno[i], head.iTxid,
                      c.szPage, s->ap[i]);
    }
  }
  depotAdopt(p, iBranch, &head);
  depotMaybeCompact(p, iBranch, head.iTxid, nBytes);
  depotBeginRead(p);          /* pins the new head while the lock is held */
  return SQLITE_OK;
}

/* Publish the write transaction, if it changed anything. */
/* SQLite truncates a database that got smaller only after the sync that
** publishes its commit (in the second commit phase), too late for it.  The
** size it will truncate to is the in-header database size of page 1
** (offset 28), valid when the version-valid-for number (92) equals the
** change counter (24): cut the write transaction there before publishing,
** so the commit records the smaller database. */
static int depotHeaderTruncate(DepotFile *p){
  const unsigned char *a = txbuf_get(&p->tx, 1);
  uint32_t n;
  char *zErr = 0;
  int rc;
  if( a==0 && txstage_has(&p->stage, 1) && p->szPageTx>=100 ){
    rc = depotStagedPage(p, 1, p->aScratch);
    if( rc!=SQLITE_OK ) return rc;
    a = p->aScratch;
  }
  if( a==0 || p->szPageTx<100 ) return SQLITE_OK;
  n = bytes_get32(a+28);
  if( n==0 || n>=p->nPageTx || bytes_get32(a+24)!=bytes_get32(a+92) ){
    return SQLITE_OK;
  }
  rc = txbuf_truncate(&p->tx, n);
  if( rc==SQLITE_OK ) rc = depotStageCut(p, n, &zErr);
  if( rc==SQLITE_NOMEM ) rc = SQLITE_IOERR_NOMEM;
  if( rc!=SQLITE_OK ) return depotReport(rc, zErr, SQLITE_IOERR_FSYNC);
  p->nPageTx = n;
  return SQLITE_OK;
}

/* After a bulk transaction (its write buffer, its staged parts' frames
** and the commit's blob all freed), hand the free pages of malloc's heap
** back to the system: glibc keeps them otherwise, and a process that
** runs a few bulk transactions ends with several budgets' worth of
** resident free heap on top of its caches. */
static void depotHeapTrim(void){
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

static int depotPublish(DepotFile *p){
  PubSet s;
  uint32_t *aDirty = 0, nDirty = 0;
  uint64_t nCap;
  int rc, bBulk;
  if( p->eLock<SQLITE_LOCK_RESERVED || !p->bTxDirty || p->bRollback ){
    return SQLITE_OK;
  }
  memset(&s, 0, sizeof(s));
  rc = depotHeaderTruncate(p);
  if( rc==SQLITE_OK ) rc = txbuf_sorted(&p->tx, &aDirty, &nDirty);
  nCap = (uint64_t)nDirty + 1
       + (p->nPageTx>p->snap.nPage ? p->nPageTx-p->snap.nPage : 0);
  s.aPgno = sqlite3_malloc64(sizeof(uint32_t)*nCap);
  s.ap = sqlite3_malloc64(sizeof(void*)*nCap);
  s.aZero = sqlite3_malloc64(p->szPageTx ? p->szPageTx : 1);
  if( rc==SQLITE_OK && (s.aPgno==0 || s.ap==0 || s.aZero==0) ){
    rc = SQLITE_IOERR_NOMEM;
  }
  if( rc==SQLITE_OK ){
    memset(s.aZero, 0, p->szPageTx);
    s.iChecksum = p->snap.iChecksum;
    rc = depotPubModified(p, &s, aDirty, nDirty);
  }
  if( rc==SQLITE_OK ) rc = depotPubResized(p, &s);
  if( rc==SQLITE_OK ) depotPubStaged(p, &s);
  if( rc==SQLITE_OK && p->stage.nGone>0 ){
    char *zErr = 0;
    depotEndRead(p);
    rc = depotStageReap(p, &zErr);
    depotBeginRead(p);
    if( rc==SQLITE_NOMEM ) rc = SQLITE_IOERR_NOMEM;
    rc = depotReport(rc, zErr, SQLITE_IOERR_FSYNC);
  }
  bBulk = s.nStaged>0 || (int64_t)s.n*p->szPageTx>=DEPOT_BULK_BYTES;
  if( rc==SQLITE_OK && (s.n>0 || s.nStaged>0
                        || p->nPageTx!=p->snap.nPage) ){
    rc = depotPubCommit(p, &s);
  }
  /* Only a COMMIT that failed with SQLITE_BUSY stays open for a retry,
  ** which needs the pages spilled earlier.  After any other failure
  ** SQLite rolls the transaction back, and in exclusive locking mode
  ** without a journal (journal_mode=OFF) nothing else would drop what it
  ** wrote: the next commit would store it. */
  if( rc!=SQLITE_BUSY ) depotTxReset(p);
  sqlite3_free(aDirty);
  sqlite3_free(s.aPgno);
  sqlite3_free(s.ap);
  sqlite3_free(s.aZero);
  if( bBulk ) depotHeapTrim();
  return rc;
}

static int depotSync(sqlite3_file *pFile, int flags){
  (void)flags;
  return depotPublish((DepotFile*)pFile);
}

/* ================= locking ================= */

/* A name this handle's branch no longer answers to: restored, rolled back
** or dropped since the handle pinned it. */
static int depotMoved(DepotFile *p){
  depotLog(SQLITE_READONLY_DBMOVED, "depot: database %s branch %s was"
      " restored, rolled back or dropped: this connection still reads the"
      " old branch %llu, which is frozen; reopen the database to write",
      p->zDb, p->zBranch, (unsigned long long)p->iBranch);
  return SQLITE_READONLY_DBMOVED;
}

/* Check, as the writer, that the name still leads to the pinned branch
** (or inherited branch) and its head is still the snapshot. */
static int depotCheckFresh(DepotFile *p, char **pzErr){
  DepotName nm;
  DbHead head;
  int rc = depot_name_resolve(p->pStore, p->iBucket, p->zDb, p->zBranch, &nm,
                              pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( p->iBranch && nm.iBranch!=p->iBranch ){
    int bGone = 0;
    rc = depotUnbornGone(p, &bGone, pzErr);
    if( rc!=SQLITE_OK ) return rc;
    if( bGone ) return SQLITE_BUSY_SNAPSHOT;
  }
  if( p->iBranch && nm.iBranch!=p->iBranch ) return depotMoved(p);
  if( p->iBranch==0 ){
    if( nm.iBranch || nm.iInhBranch!=p->iInhBranch
     || nm.iInhTxid!=p->iInhTxid ){
      return SQLITE_BUSY_SNAPSHOT;
    }
    return SQLITE_OK;
  }
  rc = depot_db_head(p->pStore, p->iBranch, &head, pzErr);
  if( rc==SQLITE_OK && head.iTxid!=p->snap.iTxid ) rc = SQLITE_BUSY_SNAPSHOT;
  return rc;
}

/* Take the write lock (SQLITE_BUSY, without waiting, while another
** connection holds it), or report why it cannot be taken: also
** SQLITE_READONLY of a store that takes no writes although the handle was
** opened for them (a PostgreSQL standby). */
static int depotAcquire(DepotFile *p){
  char *zErr = 0;
  int rc = depot_lock_acquire(&p->lock, &zErr);
  if( rc==SQLITE_OK || rc==SQLITE_BUSY
   || (rc==SQLITE_READONLY && p->bReadOnly) ){
    sqlite3_free(zErr);
    return rc;
  }
  return depotReport(rc, zErr, SQLITE_IOERR_LOCK);
}

/* The first time this handle becomes the writer of its branch: remove
** rows that a transaction which crashed, or whose cleanup failed, staged
** past the head (nothing can read them; vfs/db.h, DepotStageStream).  A
** failure leaves them to the next commit or depot_gc. */
static void depotStageSweep(DepotFile *p){
  char *zErr = 0;
  int bExists = 0;
  if( p->bStageSwept || p->iBranch==0 ) return;
  p->bStageSwept = 1;
  if( depot_stage_exists(p->pStore, p->iBranch, p->snap.iTxid+1, &bExists,
                         &zErr)==SQLITE_OK && bExists ){
    depotEndRead(p);
    depotStageClear(p, p->iBranch);
    depotBeginRead(p);
  }
  sqlite3_free(zErr);
}

/* Become the writer of this branch, then check the snapshot. */
static int depotTakeWriter(DepotFile *p){
  char *zErr = 0;
  int bHeld = p->lock.bHeld;        /* taken with SHARED (exclusive mode) */
  int rc;
  if( p->bReadOnly ) return SQLITE_READONLY;
  rc = depotAcquire(p);
  if( rc!=SQLITE_OK ) return rc;
  /* A fresh store read transaction for the check; when the snapshot is
  ** the head, it goes on pinning it for the writer's reads (compaction in
  ** another handle may fold the head's commits meanwhile). */
  depotBeginRead(p);
  rc = depotCheckFresh(p, &zErr);
  if( rc!=SQLITE_OK ){
    if( !bHeld ) depot_lock_release(&p->lock);
    if( rc==SQLITE_BUSY_SNAPSHOT || rc==SQLITE_READONLY_DBMOVED ){
      sqlite3_free(zErr);
      return rc;
    }
    return depotReport(rc, zErr, SQLITE_IOERR_LOCK);
  }
  p->bRollback = 0;
  depotTxReset(p);
  depotStageSweep(p);
  return SQLITE_OK;
}

static int depotLock(sqlite3_file *pFile, int eLock){
  DepotFile *p = (DepotFile*)pFile;
  int rc;
  if( p->eLock>=eLock ) return SQLITE_OK;
  if( p->eLock==SQLITE_LOCK_NONE ){
    if( p->lock.bExclusive && !p->bReadOnly ){
      rc = depotAcquire(p);
      if( rc!=SQLITE_OK && rc!=SQLITE_READONLY ) return rc;
    }
    rc = depotPin(p);
    if( rc!=SQLITE_OK ){
      depot_lock_release(&p->lock);
      return rc;
    }
    p->eLock = SQLITE_LOCK_SHARED;
  }
  if( eLock>=SQLITE_LOCK_RESERVED && p->eLock<SQLITE_LOCK_RESERVED ){
    rc = depotTakeWriter(p);
    if( rc!=SQLITE_OK ) return rc;
  }
  p->eLock = eLock;
  return SQLITE_OK;
}

static int depotUnlock(sqlite3_file *pFile, int eLock){
  DepotFile *p = (DepotFile*)pFile;
  if( p->eLock>=SQLITE_LOCK_RESERVED && eLock<SQLITE_LOCK_RESERVED ){
    p->bRollback = 0;
    depotTxReset(p);
  }
  /* Exclusive locking mode keeps the lock with SHARED (vfs/lock.h). */
  if( eLock==SQLITE_LOCK_NONE
   || (eLock<SQLITE_LOCK_RESERVED && !p->lock.bExclusive) ){
    depot_lock_release(&p->lock);
  }
  if( eLock<p->eLock ) p->eLock = eLock;
  if( eLock==SQLITE_LOCK_NONE ) depotEndRead(p);
  return SQLITE_OK;
}

/* RESERVED or more is held by this connection or another one. */
static int depotCheckReservedLock(sqlite3_file *pFile, int *pResOut){
  DepotFile *p = (DepotFile*)pFile;
  char *zErr = 0;
  *pResOut = 1;
  if( p->eLock>=SQLITE_LOCK_RESERVED ) return SQLITE_OK;
  return depotReport(depot_lock_other(&p->lock, pResOut, &zErr), zErr,
                     SQLITE_IOERR_CHECKRESERVEDLOCK);
}

/* ================= file controls ================= */

/* The value of PRAGMA zName=zVal as an integer 0..nMax in *pn, or
** SQLITE_ERROR with the message in azArg[0]. */
static int depotPragmaInt(char **azArg, const char *zName, const char *zVal,
                          int nMax, int64_t *pn){
  char *zEnd = 0;
  long long n = strtoll(zVal, &zEnd, 10);
  if( zEnd==zVal || *zEnd || n<0 || n>nMax ){
    azArg[0] = sqlite3_mprintf("depot: %s must be an integer 0..%d, got %s",
                               zName, nMax, zVal);
    return SQLITE_ERROR;
  }
  *pn = n;
  return SQLITE_OK;
}

/* PRAGMA depot_cache_kb[=N] and depot_map_kb[=N]: the byte limit, in KiB,
** of the decoded-page cache (bMap 0) or the page map (bMap 1); answers the
** limit in effect. */
static int depotPragmaKb(DepotFile *p, char **azArg, int bMap){
  int64_t n, nLimit;
  if( azArg[2] ){
    if( depotPragmaInt(azArg, bMap ? "depot_map_kb" : "depot_cache_kb",
                       azArg[2], URI_MAX_CACHE_KB, &n) ) return SQLITE_ERROR;
    if( bMap ) depot_pagemap_set_limit(p->pShared->pMap, n*1024);
    else depot_cache_set_limit(p->pShared->pCache, n*1024);
  }
  nLimit = bMap ? depot_pagemap_limit(p->pShared->pMap)
                : depot_cache_limit(p->pShared->pCache);
  azArg[0] = sqlite3_mprintf("%lld", (long long)(nLimit/1024));
  return SQLITE_OK;
}

/* PRAGMA depot_spill_kb[=N]: the byte limit, in KiB, of the decoded-page
** cache's spill file (0: off); answers the limit in effect. */
static int depotPragmaSpill(DepotFile *p, char **azArg){
  int64_t n;
  if( azArg[2] ){
    if( depotPragmaInt(azArg, "depot_spill_kb", azArg[2], URI_MAX_SPILL_KB,
                       &n) ) return SQLITE_ERROR;
    depot_cache_set_spill_limit(p->pShared->pCache, n*1024);
  }
  n = depot_cache_spill_limit(p->pShared->pCache);
  azArg[0] = sqlite3_mprintf("%lld", (long long)(n/1024));
  return SQLITE_OK;
}

/* PRAGMA depot_txn_budget_kb[=N]: the bytes of pages, in KiB, a write
** transaction of this connection keeps in memory before it stages them in
** the store (0: never stages); answers the budget in effect. */
static int depotPragmaBudget(DepotFile *p, char **azArg){
  int64_t n;
  if( azArg[2] ){
    if( depotPragmaInt(azArg, "depot_txn_budget_kb", azArg[2],
                       URI_MAX_CACHE_KB, &n) ) return SQLITE_ERROR;
    p->nTxBudget = n*1024;
  }
  azArg[0] = sqlite3_mprintf("%lld", (long long)(p->nTxBudget/1024));
  return SQLITE_OK;
}

/* PRAGMA depot_readahead[=N]: the pages this connection reads ahead of a
** scan (0: off); answers the number in effect. */
static int depotPragmaReadahead(DepotFile *p, char **azArg){
  int64_t n;
  if( azArg[2] ){
    if( depotPragmaInt(azArg, "depot_readahead", azArg[2], URI_MAX_READAHEAD,
                       &n) ) return SQLITE_ERROR;
    p->nReadahead = (uint32_t)n;
  }
  azArg[0] = sqlite3_mprintf("%u", p->nReadahead);
  return SQLITE_OK;
}

/* PRAGMA depot_threads[=N]: the zstd worker threads of this connection's
** staged parts and commits (0: inline); answers the number in effect. */
static int depotPragmaThreads(DepotFile *p, char **azArg){
  int64_t n;
  if( azArg[2] ){
    if( depotPragmaInt(azArg, "depot_threads", azArg[2], LTX_MAX_THREADS,
                       &n) ) return SQLITE_ERROR;
    p->nThreads = (int)n;
  }
  azArg[0] = sqlite3_mprintf("%d", p->nThreads);
  return SQLITE_OK;
}

/* PRAGMA depot_store_cache_kb[=N]: the page cache, in KiB, of this
** connection's store connection (1..1048576; a PostgreSQL store has none:
** it answers 0 and refuses a size); answers the size in effect. */
static int depotPragmaStoreCache(DepotFile *p, char **azArg){
  int64_t nUsed = 0, nLimit = 0, n;
  if( azArg[2] ){
    int rc;
    if( depotPragmaInt(azArg, "depot_store_cache_kb", azArg[2], 1048576,
                       &n) || n<1 ){
      sqlite3_free(azArg[0]);
      azArg[0] = sqlite3_mprintf("depot: depot_store_cache_kb must be an"
                                 " integer 1..1048576, got %s", azArg[2]);
      return SQLITE_ERROR;
    }
    rc = store_sqlite_set_cache_kb(p->pStore, (int)n);
    if( rc==SQLITE_NOTFOUND ){
      azArg[0] = sqlite3_mprintf("depot: depot_store_cache_kb: the store of"
          " this database is not a store file and has no page cache");
      return SQLITE_ERROR;
    }
    if( rc!=SQLITE_OK ){
      azArg[0] = sqlite3_mprintf("depot: depot_store_cache_kb: %s",
                                 sqlite3_errstr(rc));
      return rc;
    }
  }
  store_memory(p->pStore, &nUsed, &nLimit);
  azArg[0] = sqlite3_mprintf("%lld", (long long)(nLimit/1024));
  return SQLITE_OK;
}

static int depotPragma(DepotFile *p, char **azArg){
  const char *zName = azArg[1];
  depot_lock_pragma(&p->lock, azArg);      /* locking and journal modes */
  if( sqlite3_stricmp(zName, "depot_txn_budget_kb")==0 ){
    return depotPragmaBudget(p, azArg);
  }
  if( sqlite3_stricmp(zName, "depot_map_kb")==0 ){
    return depotPragmaKb(p, azArg, 1);
  }
  if( sqlite3_stricmp(zName, "depot_cache_kb")==0 ){
    return depotPragmaKb(p, azArg, 0);
  }
  if( sqlite3_stricmp(zName, "depot_spill_kb")==0 ){
    return depotPragmaSpill(p, azArg);
  }
  if( sqlite3_stricmp(zName, "depot_store_cache_kb")==0 ){
    return depotPragmaStoreCache(p, azArg);
  }
  if( sqlite3_stricmp(zName, "depot_readahead")==0 ){
    return depotPragmaReadahead(p, azArg);
  }
  if( sqlite3_stricmp(zName, "depot_threads")==0 ){
    return depotPragmaThreads(p, azArg);
  }
  return SQLITE_NOTFOUND;
}

static int depotFileControl(sqlite3_file *pFile, int op, void *pArg){
  DepotFile *p = (DepotFile*)pFile;
  switch( op ){
    case SQLITE_FCNTL_SYNC:
      return depotPublish(p);
    case SQLITE_FCNTL_PRAGMA:
      return depotPragma(p, (char**)pArg);
    case SQLITE_FCNTL_VFSNAME:
      *(char**)pArg = sqlite3_mprintf("%s", DEPOT_VFS_NAME);
      return SQLITE_OK;
    case SQLITE_FCNTL_MMAP_SIZE:
      /* Pages come from the store, never from a mapping: PRAGMA mmap_size
      ** answers 0 (without this it would answer no row at all). */
      *(sqlite3_int64*)pArg = 0;
      return SQLITE_OK;
#ifdef SQLITE_FCNTL_COMMIT_ATOMIC_WRITE
    case SQLITE_FCNTL_BEGIN_ATOMIC_WRITE:
      return bDepotBatch ? SQLITE_OK : SQLITE_NOTFOUND;
    case SQLITE_FCNTL_COMMIT_ATOMIC_WRITE:
      return bDepotBatch ? depotPublish(p) : SQLITE_NOTFOUND;
    case SQLITE_FCNTL_ROLLBACK_ATOMIC_WRITE:
      if( !bDepotBatch ) return SQLITE_NOTFOUND;
      depotTxReset(p);
      return SQLITE_OK;
#endif
  }
  return SQLITE_NOTFOUND;
}

static int depotSectorSize(sqlite3_file *pFile){
  (void)pFile;
  return 512;
}

static int depotDeviceCharacteristics(sqlite3_file *pFile){
  int f = SQLITE_IOCAP_SAFE_APPEND | SQLITE_IOCAP_SEQUENTIAL
        | SQLITE_IOCAP_POWERSAFE_OVERWRITE;
  (void)pFile;
#ifdef SQLITE_IOCAP_BATCH_ATOMIC
  if( bDepotBatch ) f |= SQLITE_IOCAP_BATCH_ATOMIC;
#endif
  return f;
}

static void depotFileFree(DepotFile *p){
  unsigned char aFp[128];
  uint64_t iVs = 0;
  int nFp = 0;
  txbuf_clear(&p->tx);
  depotStageDiscard(p);
  depot_chunk_cache_clear(&p->chunks);
  depot_ra_free(p->pRa);     /* joins its thread before the cache goes */
  depot_lock_release(&p->lock);
  if( depotSharedLastOfStore(p) ){
    depotStoreFingerprint(p->pStore, 0, 1, &iVs, aFp, sizeof(aFp), &nFp);
  }
  store_close(p->pStore);
  depotSharedRelease(p, iVs, aFp, nFp);
  ZSTD_freeCCtx(p->pCctx);
  ZSTD_freeDCtx(p->pDctx);
  sqlite3_free(p->aScratch);
  sqlite3_free(p->zDb);
  sqlite3_free(p->zBranch);
  sqlite3_free(p->zPath);
  memset(p, 0, sizeof(*p));
}

static int depotClose(sqlite3_file *pFile){
  depotFileFree((DepotFile*)pFile);
  return SQLITE_OK;
}

static const sqlite3_io_methods depotIoMethods = {
  1, depotClose, depotRead, depotWrite, depotTruncate, depotSync,
  depotFileSize, depotLock, depotUnlock, depotCheckReservedLock,
  depotFileControl, depotSectorSize, depotDeviceCharacteristics,
  0, 0, 0, 0, 0, 0
};

/* ================= opening ================= */

/* How an open of zName with URI arguments a and open flags opens its
** store. */
static void depotStoreConfig(const char *zName, const UriArgs *a, int flags,
                             StoreSqliteConfig *pCfg){
  memset(pCfg, 0, sizeof(*pCfg));
  pCfg->zVfs = a->zStoreVfs;
  pCfg->iSynchronous = a->iSync;
  pCfg->nCacheKb = (int)a->nStoreCacheKb;
  pCfg->bCreate = (flags & SQLITE_OPEN_CREATE)!=0;
  pCfg->bReadOnly = (flags & SQLITE_OPEN_READONLY)!=0;
  pCfg->bImmutable = sqlite3_uri_boolean(zName, "immutable", 0);
}

/* Open the store zStore (the name, or its store= parameter), check its
** layout, find the branch. */
static int depotOpenStore(DepotFile *p, const char *zName, const char *zStore,
                          const UriArgs *a, int flags, char **pzErr){
  StoreSqliteConfig cfg;
  int rc;
  depotStoreConfig(zName, a, flags, &cfg);
  rc = store_open(zStore, &cfg, &p->pStore, pzErr);
  if( rc==SQLITE_OK ) rc = depot_db_check_format(p->pStore, pzErr);
  if( rc==SQLITE_OK ){
    int bFound = 0;
    rc = depot_bucket_find(p->pStore, a->zBucket, &p->iBucket, &bFound, pzErr);
    if( rc==SQLITE_OK && !bFound ){
      *pzErr = sqlite3_mprintf("depot: bucket %s does not exist in %s",
                               a->zBucket, zName);
      rc = SQLITE_CANTOPEN;
    }
  }
  if( rc==SQLITE_OK ){
    DepotName nm;
    rc = depot_name_resolve(p->pStore, p->iBucket, a->zDb, a->zBranch, &nm,
                            pzErr);
    p->iBranch = nm.iBranch;
    p->iInhBranch = nm.iInhBranch;
    p->iInhTxid = nm.iInhTxid;
  }
  if( rc==SQLITE_OK && p->iBranch==0 && p->iInhBranch==0
   && !(flags & SQLITE_OPEN_CREATE) ){
    *pzErr = sqlite3_mprintf("depot: database %s branch %s does not exist"
                             " in %s", a->zDb, a->zBranch, zName);
    rc = SQLITE_CANTOPEN;
  }
  return rc;
}

/* The parameters of depot_default_vfs(1, params), for the opens that do
** not name the depot VFS themselves (a plain name while depot is the
** default): a filename object of sqlite3_create_filename(), so that
** sqlite3_uri_parameter() reads it.  Reference-counted: an open in
** progress keeps reading the one it took while another thread replaces
** it.  pDepotDefaults is guarded by depotMutex. */
typedef struct DepotDefaults DepotDefaults;
struct DepotDefaults {
  int nRef;                       /* guarded by depotMutex */
  const char *zFile;              /* sqlite3_create_filename() */
};
static DepotDefaults *pDepotDefaults = 0;

static void depotDefaultsUnref(DepotDefaults *d){
  int bFree;
  if( d==0 ) return;
  pthread_mutex_lock(&depotMutex);
  bFree = --d->nRef==0;
  pthread_mutex_unlock(&depotMutex);
  if( bFree ){
    sqlite3_free_filename(d->zFile);
    sqlite3_free(d);
  }
}

/* The defaults in force for an open of zName, referenced, or 0: none are
** set, or the name is a URI that names its VFS (vfs=depot). */
static DepotDefaults *depotDefaultsFor(const char *zName){
  DepotDefaults *d;
  if( sqlite3_uri_parameter(zName, "vfs") ) return 0;
  pthread_mutex_lock(&depotMutex);
  d = pDepotDefaults;
  if( d ) d->nRef++;
  pthread_mutex_unlock(&depotMutex);
  return d;
}

/* The read-ahead of p, whose thread opens the store zStore as this open
** did: a store file by its full path (the process may change its working
** directory before the thread opens it). */
static int depotRaNew(DepotFile *p, const char *zName, const char *zStore,
                      const UriArgs *a, int flags){
  StoreSqliteConfig cfg;
  sqlite3_vfs *pVfs = store_is_pg_uri(zStore) ? 0
                    : sqlite3_vfs_find(a->zStoreVfs);
  char *zFull = 0;
  depotStoreConfig(zName, a, flags, &cfg);
  if( pVfs ){
    zFull = sqlite3_malloc64(pVfs->mxPathname+1);
    if( zFull==0 ) return SQLITE_NOMEM;
    if( pVfs->xFullPathname(pVfs, zStore, pVfs->mxPathname+1, zFull)
        !=SQLITE_OK ){
      sqlite3_free(zFull);
      zFull = 0;
    }
  }
  p->pRa = depot_ra_new(p->pShared->pCache, zFull ? zFull : zStore, &cfg);
  sqlite3_free(zFull);
  return p->pRa ? SQLITE_OK : SQLITE_NOMEM;
}

static int depotOpenMainWith(DepotFile *p, const char *zName,
                             const char *zDflt, int flags, int *pOutFlags){
  UriArgs a;
  char *zErr = 0;
  const char *zStore = sqlite3_uri_parameter(zName, "store");
  int rc = uri_parse_args(zName, zDflt, &a, &zErr);
  if( zStore==0 || zStore[0]==0 ) zStore = zName;
  if( rc==SQLITE_OK ) rc = depotOpenStore(p, zName, zStore, &a, flags, &zErr);
  p->nCompactAfter = a.nCompactAfter;
  if( rc==SQLITE_OK && p->nCompactAfter<0 ){
    rc = depot_compact_threshold_read(p->pStore, &p->nCompactAfter);
  }
  if( rc==SQLITE_OK ){
    p->zPath = sqlite3_mprintf("%s", zStore);
    p->zDb = sqlite3_mprintf("%s", a.zDb);
    p->zBranch = sqlite3_mprintf("%s", a.zBranch);
    p->aScratch = sqlite3_malloc64(65536);
    p->pCctx = ZSTD_createCCtx();
    p->pDctx = ZSTD_createDCtx();
    if( !p->zDb || !p->zBranch || !p->aScratch || !p->pCctx || !p->pDctx
     || !p->zPath ){
      rc = SQLITE_NOMEM;
    }
  }
  if( rc==SQLITE_OK ) rc = depotSharedAcquire(p, zStore, &a);
  if( rc==SQLITE_OK ){
    /* a PostgreSQL store's reads fetch a blob's chunks 1 MiB at a time
    ** already: read-ahead there would add round trips */
    p->nReadahead = a.nReadahead>=0 ? (uint32_t)a.nReadahead
                  : store_is_pg_uri(zStore) ? 0 : URI_DEFAULT_READAHEAD;
    rc = depotRaNew(p, zName, zStore, &a, flags);
  }
  if( rc==SQLITE_OK ){
    depot_lock_init(&p->lock, p->pStore, p->iBucket, p->zDb, p->zBranch);
  }
  if( rc!=SQLITE_OK ){
    if( (rc&0xff)!=SQLITE_NOMEM && (rc&0xff)!=SQLITE_CORRUPT
     && (rc&0xff)!=SQLITE_FULL ){
      rc = SQLITE_CANTOPEN;
    }
    depotReport(rc, zErr, SQLITE_CANTOPEN);
    depotFileFree(p);
    return rc;
  }
  sqlite3_free(zErr);
  p->bReadOnly = (flags & SQLITE_OPEN_READONLY)!=0;
  p->iLevel = a.iLevel;
  p->bLevelGiven = a.bLevelGiven;
  p->nTxBudget = (int64_t)a.nTxBudgetKb*1024;
  p->nThreads = (int)a.nThreads;
  p->bRaCores = sysconf(_SC_NPROCESSORS_ONLN)>1;
  if( p->nThreads<0 ){
    long nCore = sysconf(_SC_NPROCESSORS_ONLN);
    p->nThreads = nCore<1 ? 0 : nCore>LTX_MAX_THREADS ? LTX_MAX_THREADS
                                                     : (int)nCore;
  }
  if( pOutFlags ) *pOutFlags = flags;
  p->base.pMethods = &depotIoMethods;
  return SQLITE_OK;
}

/* Opens main database zName with the defaults in force for it. */
static int depotOpenMain(DepotFile *p, const char *zName, int flags,
                         int *pOutFlags){
  DepotDefaults *pDflt = depotDefaultsFor(zName);
  int rc = depotOpenMainWith(p, zName, pDflt ? pDflt->zFile : 0, flags,
                             pOutFlags);
  depotDefaultsUnref(pDflt);
  return rc;
}

/* A super-journal (SQLite makes one, through the VFS of the main
** database, for a transaction that writes several databases) is a real
** file of the default VFS: the journals of the other databases name it,
** and a plain database's next open rolls its hot journal back only while
** the super-journal it names exists.  Kept in memory, a crash during the
** commit would leave such a database half written. */
static int depotOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile,
                     int flags, int *pOutFlags){
  MemRollbackFn xRollback = 0;
  void *pOwner = 0;
  (void)pVfs;
  memset(pFile, 0, pVfs->szOsFile);
  if( (flags & SQLITE_OPEN_SUPER_JOURNAL) && zName ){
    return pDepotRoot->xOpen(pDepotRoot, zName, pFile, flags, pOutFlags);
  }
  if( flags & SQLITE_OPEN_WAL ){
    /* SQLite opens a WAL only for a database whose header says WAL mode,
    ** which no depot database's ever does (depotHeaderNoWal): kept in
    ** memory, its commits would never reach the store. */
    depotLog(SQLITE_CANTOPEN, "depot: %s: a depot database never runs in"
        " WAL mode; its commits go to the store", zName ? zName : "");
    return SQLITE_CANTOPEN;
  }
  if( (flags & SQLITE_OPEN_MAIN_DB) && zName && zName[0] ){
    aDepotLastErr[0] = 0;            /* depot_last_error(): a new open */
    return depotOpenMain((DepotFile*)pFile, zName, flags, pOutFlags);
  }
  if( (flags & SQLITE_OPEN_MAIN_JOURNAL) && zName ){
    sqlite3_file *pDb = sqlite3_database_file_object(zName);
    if( pDb && pDb->pMethods==&depotIoMethods ){
      xRollback = depotJournalRollback;
      pOwner = pDb;
    }
  }
  if( pOutFlags ) *pOutFlags = flags;
  memfile_open(pFile, xRollback, pOwner, pDepotRoot);
  return SQLITE_OK;
}

/* ================= the VFS object ================= */

/* A name SQLite derives from a depot database for its journal, WAL or
** shared-memory file: those live in memory (or not at all), never on
** disk, and the store's own -wal and -shm files must never be touched
** through them. */
static int depotVirtualName(const char *zName){
  size_t n = strlen(zName);
  return (n>8 && strcmp(zName+n-8, "-journal")==0)
      || (n>4 && (strcmp(zName+n-4, "-wal")==0
                  || strcmp(zName+n-4, "-shm")==0));
}

/* Journals and temporary files live in memory only: nothing to delete.
** Other names (super-journals) are files of the default VFS. */
static int depotDelete(sqlite3_vfs *pVfs, const char *zName, int syncDir){
  (void)pVfs;
  if( depotVirtualName(zName) ) return SQLITE_OK;
  return pDepotRoot->xDelete(pDepotRoot, zName, syncDir);
}

/* No journal, WAL or temporary file ever exists on disk; a store file or
** a super-journal exists when the default VFS says so. */
static int depotAccess(sqlite3_vfs *pVfs, const char *zName, int flags,
                       int *pResOut){
  (void)pVfs;
  if( depotVirtualName(zName) ){
    *pResOut = 0;
    return SQLITE_OK;
  }
  return pDepotRoot->xAccess(pDepotRoot, zName, flags, pResOut);
}

/* The store's full pathname, spelled apart per database name so that a
** shared cache never mixes two databases of one store (vfs/share.h). */
static int depotFullPathname(sqlite3_vfs *pVfs, const char *zName, int nOut,
                             char *zOut){
  DepotDefaults *pDflt;
  int rc = pDepotRoot->xFullPathname(pDepotRoot, zName, nOut, zOut);
  int rc2;
  (void)pVfs;
  if( (rc&0xff)!=SQLITE_OK ) return rc;        /* SQLITE_OK_SYMLINK is OK */
  pDflt = depotDefaultsFor(zName);
  rc2 = depot_share_pathname(zName, pDflt ? pDflt->zFile : 0, nOut, zOut);
  depotDefaultsUnref(pDflt);
  if( rc2==SQLITE_CANTOPEN ){
    depotLog(rc2, "depot: the path of %s is too long to name one more"
             " database of its store in this process", zOut);
  }
  return rc2!=SQLITE_OK ? rc2 : rc;
}
static void *depotDlOpen(sqlite3_vfs *pVfs, const char *zPath){
  (void)pVfs;
  return pDepotRoot->xDlOpen(pDepotRoot, zPath);
}
static void depotDlError(sqlite3_vfs *pVfs, int nByte, char *zErrMsg){
  (void)pVfs;
  pDepotRoot->xDlError(pDepotRoot, nByte, zErrMsg);
}
static void (*depotDlSym(sqlite3_vfs *pVfs, void *p, const char *zSym))(void){
  (void)pVfs;
  return pDepotRoot->xDlSym(pDepotRoot, p, zSym);
}
static void depotDlClose(sqlite3_vfs *pVfs, void *pHandle){
  (void)pVfs;
  pDepotRoot->xDlClose(pDepotRoot, pHandle);
}
static int depotRandomness(sqlite3_vfs *pVfs, int nByte, char *zOut){
  (void)pVfs;
  return pDepotRoot->xRandomness(pDepotRoot, nByte, zOut);
}
static int depotSleep(sqlite3_vfs *pVfs, int nMicro){
  (void)pVfs;
  return pDepotRoot->xSleep(pDepotRoot, nMicro);
}
static int depotCurrentTime(sqlite3_vfs *pVfs, double *pOut){
  (void)pVfs;
  return pDepotRoot->xCurrentTime(pDepotRoot, pOut);
}
static int depotGetLastError(sqlite3_vfs *pVfs, int n, char *z){
  (void)pVfs;
  return pDepotRoot->xGetLastError(pDepotRoot, n, z);
}
static int depotCurrentTimeInt64(sqlite3_vfs *pVfs, sqlite3_int64 *pOut){
  (void)pVfs;
  if( pDepotRoot->iVersion>=2 && pDepotRoot->xCurrentTimeInt64 ){
    return pDepotRoot->xCurrentTimeInt64(pDepotRoot, pOut);
  }else{
    double r = 0;
    int rc = pDepotRoot->xCurrentTime(pDepotRoot, &r);
    *pOut = (sqlite3_int64)(r*86400000.0);
    return rc;
  }
}

static sqlite3_vfs depotVfs = {
  2, 0, 0, 0, DEPOT_VFS_NAME, 0,
  depotOpen, depotDelete, depotAccess, depotFullPathname,
  depotDlOpen, depotDlError, depotDlSym, depotDlClose,
  depotRandomness, depotSleep, depotCurrentTime, depotGetLastError,
  depotCurrentTimeInt64, 0, 0, 0
};

/* Replaces the defaults (consuming a reference to pNew, which may be 0). */
static void depotDefaultsSet(DepotDefaults *pNew){
  DepotDefaults *pOld;
  pthread_mutex_lock(&depotMutex);
  pOld = pDepotDefaults;
  pDepotDefaults = pNew;
  pthread_mutex_unlock(&depotMutex);
  depotDefaultsUnref(pOld);
}

/* The parameters zParams ("db=crm&branch=try") as a new DepotDefaults, or
** NULL with *pzErr (or SQLITE_NOMEM in *pRc). */
static DepotDefaults *depotDefaultsParse(const char *zParams, int *pRc,
                                         char **pzErr){
  const char *zFile = uri_params_file(zParams, pRc, pzErr);
  DepotDefaults *d;
  if( zFile==0 ) return 0;
  d = sqlite3_malloc64(sizeof(*d));
  if( d==0 ){
    sqlite3_free_filename(zFile);
    *pRc = SQLITE_NOMEM;
    return 0;
  }
  d->nRef = 1;
  d->zFile = zFile;
  return d;
}

int depot_vfs_set_default_params(int bOn, const char *zParams, char **pzErr){
  DepotDefaults *d = 0;
  int rc;
  if( pDepotRoot==0 ) return SQLITE_MISUSE;      /* not registered */
  if( !bOn ){
    depotDefaultsSet(0);
    if( sqlite3_vfs_find(0)!=&depotVfs ) return SQLITE_OK;
    return sqlite3_vfs_register(pDepotRoot, 1);
  }
  if( zParams && (d = depotDefaultsParse(zParams, &rc, pzErr))==0 ) return rc;
  depotDefaultsSet(d);
  return sqlite3_vfs_register(&depotVfs, 1);
}

int depot_vfs_set_default(int bOn){
  return depot_vfs_set_default_params(bOn, 0, 0);
}

int depot_vfs_memory(void *pArg0, DepotMemoryFn xRow, void *pArg){
  DepotFile *p = (DepotFile*)pArg0;
  int64_t nUsed = 0, nLimit = 0, nSlot;
  int rc = SQLITE_OK;
  if( p==0 || p->base.pMethods!=&depotIoMethods ) return SQLITE_NOTFOUND;
  if( p->pShared ){
    rc = xRow(pArg, "decoded_page_cache", "process",
              depot_cache_used(p->pShared->pCache),
              depot_cache_limit(p->pShared->pCache));
    if( rc==SQLITE_OK ) rc = xRow(pArg, "page_map", "process",
        depot_pagemap_used(p->pShared->pMap),
        depot_pagemap_limit(p->pShared->pMap));
  }
  if( rc==SQLITE_OK && p->pStore ){
    store_memory(p->pStore, &nUsed, &nLimit);
    rc = xRow(pArg, "store_connection", "connection", nUsed,
              nLimit>0 ? nLimit : -1);
  }
  nSlot = (int64_t)p->tx.nSlot*(int64_t)(sizeof(uint32_t)+sizeof(void*));
  if( rc==SQLITE_OK ) rc = xRow(pArg, "write_buffer", "transaction",
      txbuf_bytes(&p->tx, p->szPageTx) + nSlot,
      p->nTxBudget>0 ? p->nTxBudget : -1);
  if( rc==SQLITE_OK ) rc = xRow(pArg, "staged_page_map", "transaction",
      txstage_bytes(&p->stage)
      + (p->stream.aTail ? (int64_t)p->stream.szChunk : 0), -1);
  if( rc==SQLITE_OK ) rc = xRow(pArg, "zstd_contexts", "connection",
      (int64_t)(p->pCctx ? ZSTD_sizeof_CCtx(p->pCctx) : 0)
      + (int64_t)(p->pDctx ? ZSTD_sizeof_DCtx(p->pDctx) : 0), -1);
  if( rc==SQLITE_OK ) rc = xRow(pArg, "page_scratch", "connection",
      p->aScratch ? 65536 : 0, 65536);
  /* the ring of decoded pages, the queued frames, the thread's context */
  nUsed = depot_ra_limit(p->nReadahead, p->snap.szPage ? p->snap.szPage
                                                       : p->szPageTx);
  if( rc==SQLITE_OK ) rc = xRow(pArg, "readahead", "connection",
                                depot_ra_bytes(p->pRa), nUsed);
  return rc;
}

const char *depot_vfs_plain(void){
  /* One read of the default, answered by name: a caller that got NULL
  ** ("the default") would open with whatever the default is when it opens,
  ** which another thread's depot_default_vfs(1) may have made depot. */
  sqlite3_vfs *pDflt = sqlite3_vfs_find(0);
  if( pDflt==0 ) return 0;
  if( pDflt==&depotVfs ) return pDepotRoot->zName;
  return pDflt->zName;
}

int depot_vfs_register(void){
  int rc = SQLITE_OK;
  pthread_mutex_lock(&depotMutex);
  if( pDepotRoot==0 ){
    sqlite3_vfs *pRoot = sqlite3_vfs_find(0);
    if( pRoot==0 ){
      rc = SQLITE_ERROR;
    }else{
      int sz = (int)(sizeof(DepotFile)>(size_t)memfile_size()
                     ? sizeof(DepotFile) : (size_t)memfile_size());
      if( pRoot->szOsFile>sz ) sz = pRoot->szOsFile;   /* super-journals */
      depotVfs.szOsFile = sz;
      depotVfs.mxPathname = pRoot->mxPathname;
#if defined(SQLITE_IOCAP_BATCH_ATOMIC) && defined(SQLITE_FCNTL_COMMIT_ATOMIC_WRITE)
      bDepotBatch = sqlite3_compileoption_used("ENABLE_BATCH_ATOMIC_WRITE");
#endif
      rc = sqlite3_vfs_register(&depotVfs, 0);
      if( rc==SQLITE_OK ){
        pDepotRoot = pRoot;
        store_sqlite_plain_vfs(depot_vfs_plain);
      }
    }
  }
  pthread_mutex_unlock(&depotMutex);
  return rc;
}
