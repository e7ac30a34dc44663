/*
** engine.c -- KV stores: the process-wide registry of open stores
** (refcounted by real path), the lock file that keeps other processes
** out, opening a store (catalog file, then WAL replay in CID order, then
** confirmation) and closing it, the listings of every open store
** (kv_engine_list, and the kv_stats accessors), and key rendering for
** messages.  The contracts are in kv.h.
**
** Locking: engGlobalMutex (the registry mutex) guards engList and every
** KvEngine.nRef, and is held across a whole open, so one store is never
** opened twice; it is taken before any engine mutex, never after.  The
** listings take each store's engine mutex in turn.
*/
#define _GNU_SOURCE 1            /* PTHREAD_MUTEX_ADAPTIVE_NP, where glibc */
#include "config.h"
#include "ext/kv/engine_int.h"
#include "ext/kv/kv_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* Open stores, guarded by engGlobalMutex. */
static pthread_mutex_t engGlobalMutex = PTHREAD_MUTEX_INITIALIZER;
static KvEngine *engList = 0;

#ifdef DEPOT_TEST
/* Test hooks (kv_test.h), guarded by engGlobalMutex. */
static const WalIo *engTestIo = 0;  /* kv_engine_test_io */
static WalConfig engTestWalCfg;     /* kv_engine_test_wal_config */

void kv_engine_test_io(const WalIo *pIo){
  pthread_mutex_lock(&engGlobalMutex);
  engTestIo = pIo;
  pthread_mutex_unlock(&engGlobalMutex);
}

void kv_engine_test_wal_config(int64_t szSegment, int bKeepBak){
  pthread_mutex_lock(&engGlobalMutex);
  engTestWalCfg.szSegment = szSegment;
  engTestWalCfg.bKeepBak = bKeepBak;
  pthread_mutex_unlock(&engGlobalMutex);
}
#endif /* DEPOT_TEST */

/* ------------------------------------------------------------ names --- */

/* Non-zero if a/n is NOT a usable table name (for bytes from disk). */
static int engNameBad(const uint8_t *a, int n){
  char *zErr = 0;
  int rc = kv_name_check((const char*)a, n, &zErr);
  sqlite3_free(zErr);
  return rc!=SQLITE_OK;
}

/* ---------------------------------------------------------- replay --- */

typedef struct KvReplay KvReplay;
struct KvReplay {
  KvEngine *pEng;
  int nCid, nCidAlloc;
  uint64_t *aCid;               /* records that touched the catalog */
  char *zErr;
};

/* Build a batch map from the actions of one table of a record.  Data keys
** must be well-formed key encodings (catalog keys are table names). */
static int engReplayBatch(const WalTableActions *pT, int bMeta, KvMap **ppBatch){
  KvMap *p = kv_map_new();
  int i, rc = SQLITE_OK;
  if( p==0 ) return SQLITE_NOMEM;
  for(i=0; i<pT->nAction && rc==SQLITE_OK; i++){
    const WalAction *a = &pT->aAction[i];
    if( bMeta ? engNameBad(a->aKey, a->nKey)
              : kv_key_check(a->aKey, a->nKey)!=SQLITE_OK ){
      rc = SQLITE_CORRUPT;
    }
    else rc = kv_map_put(&p, a->aKey, a->nKey, a->aVal, a->bDelete ? 0 : a->nVal,
                         0, a->bDelete);
  }
  if( rc!=SQLITE_OK ){ kv_map_unref(p); p = 0; }
  *ppBatch = p;
  return rc;
}

static int engReplayNoteCid(KvReplay *pR, uint64_t cid){
  if( pR->nCid==pR->nCidAlloc ){
    int nNew = pR->nCidAlloc ? pR->nCidAlloc*2 : 16;
    uint64_t *a = sqlite3_realloc64(pR->aCid, nNew*sizeof(uint64_t));
    if( a==0 ) return SQLITE_NOMEM;
    pR->aCid = a;
    pR->nCidAlloc = nNew;
  }
  pR->aCid[pR->nCid++] = cid;
  return SQLITE_OK;
}

/* Apply one table's actions of a replayed record. */
static int engReplayTable(KvReplay *pR, uint64_t cid, const WalTableActions *pT){
  KvEngine *pEng = pR->pEng;
  KvMap *pBatch = 0;
  int bMeta = pT->nTable==(int)strlen(KV_META_TABLE)
           && memcmp(pT->zTable, KV_META_TABLE, pT->nTable)==0;
  KvTable *pTab = bMeta ? 0 : kvTableFind(pEng, pT->zTable, pT->nTable);
  int rc;
  if( !bMeta && (pTab==0 || !pTab->meta.bPersist) ){
    /* Removed by a later record (or never persistent): nothing to do. */
    sqlite3_log(SQLITE_NOTICE, "kv: replay of record %llu skips table %.*s,"
                " which no longer exists", (unsigned long long)cid,
                pT->nTable, pT->zTable);
    return wal_confirm(pEng->pWal, cid, pT->zTable, pT->nTable);
  }
  rc = engReplayBatch(pT, bMeta, &pBatch);
  if( rc==SQLITE_OK ){
    pEng->iSeq++;
    if( bMeta ){
      rc = kvCatalogApply(pEng, pBatch, pEng->iSeq, 0, 0, &pR->zErr);
      if( rc==SQLITE_OK ) rc = engReplayNoteCid(pR, cid);
    }else{
      rc = pTab->pBackend->xApply(pTab->pData, pBatch, pEng->iSeq, cid);
      if( rc!=SQLITE_OK && pR->zErr==0 ){
        char *zWhy = kvApplyErrmsg(pTab, rc);
        pR->zErr = sqlite3_mprintf("kv: cannot replay WAL record %llu of "
            "store %s into %s", (unsigned long long)cid, pEng->zDir,
            zWhy ? zWhy : sqlite3_errstr(rc));
        sqlite3_free(zWhy);
      }
      if( rc==SQLITE_OK && pTab->pBackend->xDurable(pTab->pData, cid) ){
        rc = wal_confirm(pEng->pWal, cid, pT->zTable, pT->nTable);
      }
    }
  }
  kv_map_unref(pBatch);
  return rc;
}

static int engReplayRecord(void *pCtx, const WalRecord *pRec){
  KvReplay *pR = (KvReplay*)pCtx;
  int i, rc = SQLITE_OK;
  if( pRec->tid>=pR->pEng->iNextTid ) pR->pEng->iNextTid = pRec->tid+1;
  for(i=0; i<pRec->nTable && rc==SQLITE_OK; i++){
    rc = engReplayTable(pR, pRec->cid, &pRec->aTable[i]);
  }
  if( rc!=SQLITE_OK && pR->zErr==0 ){
    pR->zErr = sqlite3_mprintf("kv: cannot replay WAL record %llu of store "
        "%s: %s", (unsigned long long)pRec->cid, pR->pEng->zDir,
        sqlite3_errstr(rc));
  }
  return rc;
}

/* Replay every unconfirmed record, save the catalog if any record touched
** it, then confirm the catalog's part of those records. */
static int engReplay(KvEngine *pEng, char **pzErr){
  KvReplay r;
  int rc, i;
  memset(&r, 0, sizeof(r));
  r.pEng = pEng;
  rc = wal_replay(pEng->pWal, engReplayRecord, &r, pzErr);
  if( rc!=SQLITE_OK && r.zErr ){
    sqlite3_free(*pzErr);
    *pzErr = r.zErr;
    r.zErr = 0;
  }
  if( rc==SQLITE_OK && r.nCid>0 ){
    rc = kvCatalogSave(pEng, pzErr);
    for(i=0; rc==SQLITE_OK && i<r.nCid; i++){
      rc = wal_confirm(pEng->pWal, r.aCid[i], KV_META_TABLE,
                       (int)strlen(KV_META_TABLE));
    }
  }
  sqlite3_free(r.zErr);
  sqlite3_free(r.aCid);
  return rc;
}

/* ------------------------------------------------------ open / close --- */

/* The pid the holder of the store's lock wrote into LOCK (engLockStore),
** or 0 when it holds none that can be read. */
static long engLockHolder(KvEngine *pEng){
  char a[24];
  ssize_t n = pEng->fdLock>=0 ? pread(pEng->fdLock, a, sizeof(a)-1, 0) : -1;
  long iPid = 0;
  int i;
  if( n<=0 ) return 0;
  for(i=0; i<n && a[i]>='0' && a[i]<='9' && iPid<100000000; i++){
    iPid = iPid*10 + (a[i]-'0');
  }
  return iPid;
}

/* The refusal of a lock held elsewhere (naming the holder's pid when its
** LOCK file gives one), or the failure to lock. */
static int engLockBusy(KvEngine *pEng, int e, char **pzErr){
  long iPid = e==EWOULDBLOCK ? engLockHolder(pEng) : 0;
  if( e==EWOULDBLOCK && iPid>0 ){
    *pzErr = sqlite3_mprintf("kv: store %s is locked by another process "
                             "(pid %ld)", pEng->zDir, iPid);
  }else if( e==EWOULDBLOCK ){
    *pzErr = sqlite3_mprintf("kv: store %s is locked by another process",
                             pEng->zDir);
  }else{
    *pzErr = sqlite3_mprintf("kv: cannot lock store %s: %s", pEng->zDir,
                             strerror(e));
  }
  return e==EWOULDBLOCK ? SQLITE_BUSY : SQLITE_CANTOPEN;
}

/* Write this process's pid into the LOCK file it holds, for the message
** of the next process that finds the store locked.  Only a courtesy: a
** failure leaves the file as it was. */
static void engLockWritePid(KvEngine *pEng){
  char a[24];
  int n = snprintf(a, sizeof(a), "%ld\n", (long)getpid());
  ssize_t nDone = -1;
  if( ftruncate(pEng->fdLock, 0)==0 ) nDone = pwrite(pEng->fdLock, a, n, 0);
  (void)nDone;                /* no pid written: the message names none */
}

/* Every committing connection of a store takes the engine mutex a few
** times per transaction, for short stretches (bind, prepare, publish), and
** a group commit releases a whole group of them at once.  Where glibc has
** it, the mutex is adaptive: a contended lock spins briefly before it
** sleeps, which saves a futex sleep and wake-up per collision. */
static void engMutexInit(pthread_mutex_t *pMutex){
#if HAVE_DECL_PTHREAD_MUTEX_ADAPTIVE_NP
  pthread_mutexattr_t attr;
  if( pthread_mutexattr_init(&attr)==0 ){
    int rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
    if( rc==0 ) rc = pthread_mutex_init(pMutex, &attr);
    pthread_mutexattr_destroy(&attr);
    if( rc==0 ) return;
  }
#endif
  pthread_mutex_init(pMutex, 0);
}

/* Takes the store's process lock: an exclusive flock on LOCK and one on
** the store directory itself.  The second keeps a store locked when LOCK
** is deleted while the store is open (taken for a stale leftover); a file
** system that cannot flock a directory leaves the LOCK file alone to do
** the job. */
static int engLockStore(KvEngine *pEng, char **pzErr){
  char *zLock = sqlite3_mprintf("%s/LOCK", pEng->zDir);
  if( zLock==0 ) return SQLITE_NOMEM;
  pEng->fdLock = open(zLock, O_RDWR|O_CREAT|O_CLOEXEC, 0644);
  sqlite3_free(zLock);
  if( pEng->fdLock<0 ){
    *pzErr = sqlite3_mprintf("kv: cannot open lock file of store %s: %s",
                             pEng->zDir, strerror(errno));
    return SQLITE_CANTOPEN;
  }
  if( flock(pEng->fdLock, LOCK_EX|LOCK_NB)!=0 ){
    return engLockBusy(pEng, errno, pzErr);
  }
  pEng->fdDirLock = open(pEng->zDir, O_RDONLY|O_DIRECTORY|O_CLOEXEC);
  if( pEng->fdDirLock>=0 && flock(pEng->fdDirLock, LOCK_EX|LOCK_NB)!=0 ){
    int e = errno;
    close(pEng->fdDirLock);
    pEng->fdDirLock = -1;
    if( e==EWOULDBLOCK ) return engLockBusy(pEng, e, pzErr);
  }
  engLockWritePid(pEng);
  return SQLITE_OK;
}

static void engFree(KvEngine *pEng){
  KvTable *p, *pNext;
  if( pEng==0 ) return;
  kvVersionStoreStop(pEng);            /* joins the version sweeper */
  if( pEng->xHookFree ) pEng->xHookFree(pEng);   /* hook.c's state */
  /* Tables first: a backend's collector confirms its last batches to the
  ** WAL as it closes. */
  for(p=pEng->pTables; p; p=pNext){
    pNext = p->pNext;
    p->bLive = 0;
    kvTableUnref(p);
  }
  kvTableUnref(pEng->pMeta);
  wal_close(pEng->pWal);
  if( pEng->fdLock>=0 ) close(pEng->fdLock);   /* releases the flocks */
  if( pEng->fdDirLock>=0 ) close(pEng->fdDirLock);
  pthread_mutex_destroy(&pEng->mutex);
  pthread_mutex_destroy(&pEng->catMutex);
  sqlite3_free(pEng->zFailed);
  sqlite3_free(pEng->zDir);
  sqlite3_free(pEng);
}

static int engAlloc(const char *zReal, KvEngine **pp){
  KvEngine *p = sqlite3_malloc64(sizeof(*p));
  KvMeta meta;
  char *zErr = 0;
  int rc;
  *pp = 0;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->fdLock = -1;
  p->fdDirLock = -1;
  p->nRef = 1;
  p->iSeq = 1;
  p->iNextTid = 1;
  p->iNextTableId = 1;
  engMutexInit(&p->mutex);
  pthread_mutex_init(&p->catMutex, 0);
#ifdef DEPOT_TEST
  p->pIo = engTestIo ? engTestIo : wal_io_posix();
#else
  p->pIo = wal_io_posix();
#endif
  if( kvVersionStoreInit(p)!=SQLITE_OK ){
    engFree(p);
    return SQLITE_NOMEM;
  }
  if( zReal && (p->zDir = sqlite3_mprintf("%s", zReal))==0 ){
    engFree(p);
    return SQLITE_NOMEM;
  }
  memset(&meta, 0, sizeof(meta));
  memcpy(meta.zType, "kv_memory", 10);
  meta.bPersist = zReal!=0;
  rc = kvTableNew(p, KV_META_TABLE, (int)strlen(KV_META_TABLE), &meta,
                  &p->pMeta, &zErr);
  if( rc==SQLITE_OK ) rc = kvTableOpenData(p->pMeta, 1, &zErr);
  sqlite3_free(zErr);
  if( rc!=SQLITE_OK ){ engFree(p); return rc; }
  *pp = p;
  return SQLITE_OK;
}

/* After the replay: every live table's backend check (xCheckOpen). */
static int engCheckTables(KvEngine *pEng, char **pzErr){
  KvTable *p;
  int rc = SQLITE_OK;
  for(p=pEng->pTables; p && rc==SQLITE_OK; p=p->pNext){
    if( p->pData && p->pBackend->xCheckOpen ){
      rc = p->pBackend->xCheckOpen(p->pData, pzErr);
    }
  }
  return rc;
}

/* Lock, load the catalog, open and replay the WAL, check the tables. */
static int engStart(KvEngine *pEng, char **pzErr){
  WalConfig cfg;
  int rc = engLockStore(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = kvCatalogLoad(pEng, pzErr);
  if( rc==SQLITE_OK ){
#ifdef DEPOT_TEST
    cfg = engTestWalCfg;          /* engGlobalMutex is held */
#else
    memset(&cfg, 0, sizeof(cfg));  /* the defaults */
#endif
    cfg.pIo = pEng->pIo;
    rc = wal_open(pEng->zDir, &cfg, &pEng->pWal, pzErr);
  }
  if( rc==SQLITE_OK ) rc = engReplay(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = engCheckTables(pEng, pzErr);
  if( rc==SQLITE_OK ) rc = kvBackendReserveIds(pEng, pzErr);
  if( rc==SQLITE_OK ) kvVersionClearAll(pEng);   /* versions: memory only */
  if( rc==SQLITE_OK ){
    WalStats st;
    wal_stats(pEng->pWal, &st);
    if( st.lastCid>=pEng->iNextTid ) pEng->iNextTid = st.lastCid+1;
  }
  return rc;
}

/* mkdir zDir if missing and return its real path (sqlite3_malloc'd). */
static int engRealDir(const char *zDir, char **pzReal, char **pzErr){
  char *zBuf = sqlite3_malloc64(PATH_MAX+1);
  *pzReal = 0;
  if( zBuf==0 ) return SQLITE_NOMEM;
  if( mkdir(zDir, 0755)!=0 && errno!=EEXIST ){
    *pzErr = sqlite3_mprintf("kv: cannot create store directory %s: %s",
                             zDir, strerror(errno));
    sqlite3_free(zBuf);
    return SQLITE_CANTOPEN;
  }
  if( realpath(zDir, zBuf)==0 ){
    *pzErr = sqlite3_mprintf("kv: cannot resolve store directory %s: %s",
                             zDir, strerror(errno));
    sqlite3_free(zBuf);
    return SQLITE_CANTOPEN;
  }
  *pzReal = zBuf;
  return SQLITE_OK;
}

int kv_engine_open(const char *zDir, KvEngine **ppEng, char **pzErr){
  char *zReal = 0;
  KvEngine *p = 0;
  int rc = SQLITE_OK;
  *ppEng = 0;
  if( zDir && (rc = engRealDir(zDir, &zReal, pzErr))!=SQLITE_OK ) return rc;
  pthread_mutex_lock(&engGlobalMutex);
  for(p=zReal ? engList : 0; p; p=p->pNextEngine){
    if( p->zDir && strcmp(p->zDir, zReal)==0 ) break;
  }
  if( p ){
    p->nRef++;
  }else{
    rc = engAlloc(zReal, &p);
    if( rc==SQLITE_OK && zReal ) rc = engStart(p, pzErr);
    if( rc==SQLITE_OK ){
      p->pNextEngine = engList;
      engList = p;
    }else{
      engFree(p);
      p = 0;
    }
  }
  pthread_mutex_unlock(&engGlobalMutex);
  sqlite3_free(zReal);
  *ppEng = p;
  return rc;
}

int kv_engine_wal_config(KvEngine *p, WalConfig *pCfg){
  memset(pCfg, 0, sizeof(*pCfg));
  if( p==0 || p->pWal==0 ) return 0;
  wal_get_config(p->pWal, pCfg);
  return 1;
}

int kv_engine_set_wal_config(KvEngine *p, const WalConfig *pCfg){
  if( p==0 || p->pWal==0 ) return 0;
  wal_set_config(p->pWal, pCfg);
  return 1;
}

KvEngine *kv_engine_ref(KvEngine *p){
  pthread_mutex_lock(&engGlobalMutex);
  p->nRef++;
  pthread_mutex_unlock(&engGlobalMutex);
  return p;
}

/* The last engine of the process to close also closes the codec's private
** connection (kv_codec_release): it serves the key descriptions of
** conflict messages, and is opened again when next needed. */
void kv_engine_unref(KvEngine *p){
  KvEngine **pp;
  int bFree = 0, bLast = 0;
  if( p==0 ) return;
  pthread_mutex_lock(&engGlobalMutex);
  if( --p->nRef==0 ){
    for(pp=&engList; *pp; pp=&(*pp)->pNextEngine){
      if( *pp==p ){ *pp = p->pNextEngine; break; }
    }
    bFree = 1;
    bLast = engList==0;
  }
  pthread_mutex_unlock(&engGlobalMutex);
  if( bFree ) engFree(p);
  if( bLast ) kv_codec_release();
}

const char *kv_engine_dir(KvEngine *p){
  return p->zDir;
}

/* ---------------------------------------------------------- listing --- */

int kv_engine_foreach(int (*xEach)(KvEngine*, void*), void *pCtx){
  KvEngine *p, **apEng;
  int nEng = 0, i, rc = SQLITE_OK;
  pthread_mutex_lock(&engGlobalMutex);
  for(p=engList; p; p=p->pNextEngine) nEng++;
  apEng = sqlite3_malloc64((nEng+1)*sizeof(KvEngine*));
  if( apEng ){
    for(i=0, p=engList; p; p=p->pNextEngine){ p->nRef++; apEng[i++] = p; }
  }
  pthread_mutex_unlock(&engGlobalMutex);
  if( apEng==0 ) return SQLITE_NOMEM;
  for(i=0; i<nEng; i++){
    if( rc==SQLITE_OK ) rc = xEach(apEng[i], pCtx);
    kv_engine_unref(apEng[i]);
  }
  sqlite3_free(apEng);
  return rc;
}

int kv_engine_wal_stats(KvEngine *p, WalStats *pSt){
  memset(pSt, 0, sizeof(*pSt));
  if( p->pWal==0 ) return 0;
  wal_stats(p->pWal, pSt);
  return 1;
}

int kv_engine_table_stats(KvEngine *pEng, int bCount,
                          int (*xTable)(void*, const char*, const char*,
                                        const KvBackendStats*),
                          void *pCtx){
  KvTable **apTab, *t;
  int nTab = 0, i, rc = SQLITE_OK;
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; t; t=t->pNext) nTab++;
  apTab = sqlite3_malloc64((nTab+1)*sizeof(KvTable*));
  if( apTab ){
    for(i=0, t=pEng->pTables; t; t=t->pNext){ t->nRef++; apTab[i++] = t; }
  }
  pthread_mutex_unlock(&pEng->mutex);
  if( apTab==0 ) return SQLITE_NOMEM;
  for(i=nTab-1; i>=0 && rc==SQLITE_OK; i--){    /* the list is newest first */
    KvBackendStats st;
    t = apTab[i];
    memset(&st, 0, sizeof(st));
    if( t->pData && t->pBackend->xStatsEx ){
      t->pBackend->xStatsEx(t->pData, bCount, &st);
    }else if( t->pData ){
      pthread_mutex_lock(&pEng->mutex);
      t->pBackend->xStats(t->pData, &st.nRow, &st.nByte);
      pthread_mutex_unlock(&pEng->mutex);
    }
    rc = xTable(pCtx, t->zName, t->meta.zType, &st);
  }
  pthread_mutex_lock(&pEng->mutex);
  for(i=0; i<nTab; i++) kvTableUnref(apTab[i]);
  pthread_mutex_unlock(&pEng->mutex);
  sqlite3_free(apTab);
  return rc;
}

static int engListOne(KvEngine *pEng, KvTableInfo **pa, int *pn, int *pnAlloc){
  KvTable *t;
  int64_t nByte;
  int rc = SQLITE_OK;
  pthread_mutex_lock(&pEng->mutex);
  for(t=pEng->pTables; t && rc==SQLITE_OK; t=t->pNext){
    KvTableInfo *pI;
    if( *pn==*pnAlloc ){
      int nNew = *pnAlloc ? *pnAlloc*2 : 16;
      KvTableInfo *a = sqlite3_realloc64(*pa, nNew*sizeof(KvTableInfo));
      if( a==0 ){ rc = SQLITE_NOMEM; break; }
      *pa = a; *pnAlloc = nNew;
    }
    pI = &(*pa)[*pn];
    memset(pI, 0, sizeof(*pI));
    (*pn)++;
    pI->zName = sqlite3_mprintf("%s", t->zName);
    pI->nName = t->nName;
    memcpy(pI->zType, t->meta.zType, sizeof(pI->zType));
    pI->bPersist = t->meta.bPersist;
    if( pEng->zDir ) pI->zDir = sqlite3_mprintf("%s", pEng->zDir);
    t->pBackend->xStats(t->pData, &pI->nRow, &nByte);
    kvVersionTableStats(t, &pI->nVerRecord, &pI->nVerBytes);
    if( pI->zName==0 || (pEng->zDir && pI->zDir==0) ) rc = SQLITE_NOMEM;
  }
  pthread_mutex_unlock(&pEng->mutex);
  return rc;
}

int kv_engine_list(KvTableInfo **paInfo, int *pnInfo){
  KvEngine *p;
  int nAlloc = 0, rc = SQLITE_OK;
  *paInfo = 0;
  *pnInfo = 0;
  pthread_mutex_lock(&engGlobalMutex);
  for(p=engList; p && rc==SQLITE_OK; p=p->pNextEngine){
    rc = engListOne(p, paInfo, pnInfo, &nAlloc);
  }
  pthread_mutex_unlock(&engGlobalMutex);
  if( rc!=SQLITE_OK ){
    kv_engine_list_free(*paInfo, *pnInfo);
    *paInfo = 0;
    *pnInfo = 0;
  }
  return rc;
}

void kv_engine_list_free(KvTableInfo *a, int n){
  int i;
  for(i=0; i<n; i++){
    sqlite3_free(a[i].zName);
    sqlite3_free(a[i].zDir);
  }
  sqlite3_free(a);
}

/* ----------------------------------------------------- key display --- */

/* Text t (n bytes) cut to at most 64 bytes on a UTF-8 character boundary,
** quoted as an SQL literal; a cut is marked with "... (n bytes)". */
static char *engDescribeText(const unsigned char *t, int n){
  int m = n;
  if( n>64 ){
    m = 64;
    while( m>0 && (t[m]&0xc0)==0x80 ) m--;   /* t[m] starts a character */
    return sqlite3_mprintf("'%.*q'... (%d bytes)", m, t, n);
  }
  return sqlite3_mprintf("'%.*q'", m, t);
}

/* Blob a (n bytes) as x'..' of at most its first 32 bytes; a cut is marked
** with "... (n bytes)". */
static char *engDescribeBlob(const unsigned char *a, int n){
  char *z = sqlite3_mprintf("x'");
  int i;
  for(i=0; z && i<n && i<32; i++) z = sqlite3_mprintf("%z%02x", z, a[i]);
  if( z && n>32 ) return sqlite3_mprintf("%z'... (%d bytes)", z, n);
  if( z ) z = sqlite3_mprintf("%z'", z);
  return z;
}

char *kv_key_describe(const uint8_t *aKey, int nKey){
  int rc = SQLITE_OK;
  sqlite3_value *v = kv_key_to_value(aKey, nKey, 0, 0, &rc);
  char *z = 0;
  if( v==0 ) return sqlite3_mprintf("<%d-byte key>", nKey);
  switch( sqlite3_value_type(v) ){
    case SQLITE_INTEGER:
      z = sqlite3_mprintf("%lld", sqlite3_value_int64(v)); break;
    case SQLITE_FLOAT:
      z = sqlite3_mprintf("%!.15g", sqlite3_value_double(v)); break;
    case SQLITE_TEXT:
      z = engDescribeText(sqlite3_value_text(v), sqlite3_value_bytes(v));
      break;
    default:
      z = engDescribeBlob(sqlite3_value_blob(v), sqlite3_value_bytes(v));
      break;
  }
  sqlite3_value_free(v);
  return z;
}
