/*
** table.c -- the tables of a KV store and what every layer of the engine
** above needs of them: the list of backends (one line per table type),
** table names and catalog entries, KvTable objects (create, open the
** backend's data, find, link into the live list, release), the messages
** of failed backend calls, and the store's failed state.
**
** Locking: KvEngine.mutex guards the live table list and every KvTable's
** reference count (kvTableFind/Link/Unlink/Unref run with it held); the
** failed state is set once under it and read without it (atomics).
*/
#include "config.h"
#include "ext/kv/engine_int.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* Every table type this build knows.  One line per backend. */
static const KvBackend *const aTblBackend[] = {
  &kvMemoryBackend,
  &kvBtreeBackend,
  &kvLogBackend,
};

/* ---------------------------------------------------- failed state --- */

int kvEngineFailed(KvEngine *pEng, char **pzErr){
  int rc = __atomic_load_n(&pEng->rcFailed, __ATOMIC_ACQUIRE);
  if( rc!=SQLITE_OK && pzErr ){
    *pzErr = sqlite3_mprintf("%s", pEng->zFailed ? pEng->zFailed
                             : "kv: the store is stopped");
  }
  return rc;
}

char *kvApplyErrmsg(KvTable *pTab, int rc){
  char *zWhy = 0, *zRes;
  if( pTab->pBackend->xApplyError && pTab->pData ){
    pTab->pBackend->xApplyError(pTab->pData, &zWhy);
  }
  zRes = sqlite3_mprintf("table %.*s: %s", pTab->nName, pTab->zName,
                         zWhy ? zWhy : sqlite3_errstr(rc));
  sqlite3_free(zWhy);
  return zRes;
}

void kvEngineFail(KvEngine *pEng, int rc, uint64_t cid, char **pzErr){
  const char *zWhy = *pzErr ? *pzErr : sqlite3_errstr(rc);
  if( pEng->rcFailed==SQLITE_OK ){
    pEng->zFailed = sqlite3_mprintf("kv: store %s is stopped: publishing "
        "commit %llu failed after its WAL flush (%s); %s", pEng->zDir
        ? pEng->zDir : "(memory)", (unsigned long long)cid, zWhy, cid
        ? "its persistent writes are in the WAL: close every connection to "
          "the store and open it again to apply them"
        : "it held only volatile writes, which are lost");
    sqlite3_log(rc, "%s", pEng->zFailed ? pEng->zFailed : zWhy);
    wal_hold(pEng->pWal);        /* the commit may be confirmed already */
    __atomic_store_n(&pEng->rcFailed, rc, __ATOMIC_RELEASE);
  }
  sqlite3_free(*pzErr);
  *pzErr = 0;
  kvEngineFailed(pEng, pzErr);
}

void kvEngineFailAbort(KvEngine *pEng, int rc, uint64_t tid, uint64_t cid,
                       const char *zWhy){
  pthread_mutex_lock(&pEng->mutex);
  if( pEng->rcFailed==SQLITE_OK ){
    pEng->zFailed = sqlite3_mprintf("kv: store %s is stopped: the rollback "
        "of prepared transaction %llu could not be written to the WAL (%s); "
        "its writes stay in WAL record %llu and will be applied when the "
        "store is next opened", pEng->zDir ? pEng->zDir : "(memory)",
        (unsigned long long)tid, zWhy ? zWhy : sqlite3_errstr(rc),
        (unsigned long long)cid);
    sqlite3_log(rc, "%s", pEng->zFailed ? pEng->zFailed
                : "kv: the rollback of a prepared transaction failed");
    __atomic_store_n(&pEng->rcFailed, rc, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&pEng->mutex);
}

/* -------------------------------------------------------- backends --- */

const KvBackend *kvBackendFind(const char *zType){
  size_t i;
  for(i=0; i<sizeof(aTblBackend)/sizeof(aTblBackend[0]); i++){
    if( strcmp(aTblBackend[i]->zType, zType)==0 ) return aTblBackend[i];
  }
  return 0;
}

/* New table ids go above every id a file in the store is named after
** (xStoreMaxId), not only above the catalog's. */
int kvBackendReserveIds(KvEngine *pEng, char **pzErr){
  size_t i;
  int rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<sizeof(aTblBackend)/sizeof(aTblBackend[0]); i++){
    uint64_t iMax = 0;
    if( aTblBackend[i]->xStoreMaxId==0 ) continue;
    rc = aTblBackend[i]->xStoreMaxId(pEng->zDir, &iMax, pzErr);
    if( rc==SQLITE_OK && iMax>=pEng->iNextTableId ){
      pEng->iNextTableId = iMax+1;
    }
  }
  return rc;
}

/* ------------------------------------------------------------ names --- */

int kv_name_check(const char *z, int n, char **pzErr){
  int i = 0;
  if( z==0 || n<1 || n>KV_MAX_NAME_BYTES ){
    *pzErr = sqlite3_mprintf(
        "kv: table name must be 1..%d bytes of UTF-8, got %d",
        KV_MAX_NAME_BYTES, z ? n : 0);
    return SQLITE_ERROR;
  }
  i = kv_utf8_invalid_at((const uint8_t*)z, n, 0);
  if( i>=0 ){
    *pzErr = sqlite3_mprintf(
        "kv: table name is not valid UTF-8 (or holds a NUL) at byte %d", i);
    return SQLITE_ERROR;
  }
  if( n==(int)strlen(KV_META_TABLE) && memcmp(z, KV_META_TABLE, n)==0 ){
    *pzErr = sqlite3_mprintf("kv: table %s is internal and cannot be used",
                             KV_META_TABLE);
    return SQLITE_ERROR;
  }
  return SQLITE_OK;
}

void kv_meta_clear(KvMeta *p){
  sqlite3_free(p->zOptions);
  memset(p, 0, sizeof(*p));
}

/* ----------------------------------------------------------- tables --- */

/* KvTableDef.xConfirm: table zTab's effects of WAL record cid of store
** pStore are durable.  Called by backend threads (a collector) while the
** store is open; the store's WAL outlives its tables. */
static int tblConfirm(void *pStore, uint64_t cid, const char *zTab,
                          int nTab){
  KvEngine *pEng = (KvEngine*)pStore;
  if( pEng->pWal==0 || cid==0 ) return SQLITE_OK;
  return wal_confirm(pEng->pWal, cid, zTab, nTab);
}

/* KvTableDef.xWalSync: the WAL records of store pStore up to cid are
** durable. */
static int tblWalSync(void *pStore, uint64_t cid, char **pzErr){
  KvEngine *pEng = (KvEngine*)pStore;
  if( pEng->pWal==0 || cid==0 ) return SQLITE_OK;
  return wal_sync(pEng->pWal, cid, pzErr);
}

/* KvTableDef.xStoreWork: through the engine (engine.c sets it). */
static int tblStoreWork(void *pStore){
  KvEngine *pEng = (KvEngine*)pStore;
  return pEng->xWorkTurn ? pEng->xWorkTurn(pEng, KV_WORK_STORE) : 1;
}

/* KvTableDef.xFilesPinned: through the engine (engine.c sets it). */
static int tblFilesPinned(void *pStore){
  KvEngine *pEng = (KvEngine*)pStore;
  return pEng->xFilesPinned ? pEng->xFilesPinned(pEng) : 0;
}

int kvTableNew(KvEngine *pEng, const char *zName, int nName,
               const KvMeta *pMeta, KvTable **pp, char **pzErr){
  KvTable *p;
  const KvBackend *pB = kvBackendFind(pMeta->zType);
  *pp = 0;
  if( pB==0 ){
    *pzErr = sqlite3_mprintf("kv: table type %s is not available in this "
                             "build (known: kv_memory, kv_btree, kv_log)", pMeta->zType);
    return SQLITE_ERROR;
  }
  p = sqlite3_malloc64(sizeof(*p) + nName + 1);
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->zName = (char*)&p[1];
  memcpy(p->zName, zName, nName);
  p->zName[nName] = 0;
  p->nName = nName;
  p->meta = *pMeta;
  if( pMeta->zOptions ){
    p->meta.zOptions = sqlite3_mprintf("%s", pMeta->zOptions);
    if( p->meta.zOptions==0 ){ sqlite3_free(p); return SQLITE_NOMEM; }
  }
  p->pEng = pEng;
  p->pBackend = pB;
  p->nRef = 1;
  *pp = p;
  return SQLITE_OK;
}

int kvTableOpenData(KvTable *p, int bCreate, char **pzErr){
  KvTableDef def;
  def.zStore = p->pEng->zDir;
  def.zName = p->zName;
  def.nName = p->nName;
  def.iTableId = p->meta.iId;
  def.bPersist = p->meta.bPersist;
  def.zOptions = p->meta.zOptions;
  def.xConfirm = tblConfirm;
  def.pConfirmCtx = p->pEng;
  def.xWalSync = tblWalSync;
  def.pIo = p->pEng->pIo;
  def.xStoreWork = tblStoreWork;
  def.bShared = p->pEng->bJoining;
  def.bReadOnly = p->pEng->bReadOnly;
  def.xFilesPinned = tblFilesPinned;
  return p->pBackend->xOpen(&def, bCreate, &p->pData, pzErr);
}

int kvSnapshotError(int rc, const char *zTab, int nTab, char **pzErr){
  if( rc==SQLITE_OK || rc==SQLITE_NOMEM || *pzErr ) return rc;
  *pzErr = sqlite3_mprintf("kv: table %.*s cannot be read or written: its "
      "files failed to take a commit, which is safe in the WAL; reopen the "
      "store to repair it (the error log has the cause)", nTab, zTab);
  return rc;
}

void kvTableUnref(KvTable *p){
  if( p && --p->nRef==0 ){
    if( p->pData ) p->pBackend->xClose(p->pData);
    if( p->pVer ) p->xVerFree(p);
    kv_map_unref(p->pRev);
    sqlite3_free(p->meta.zOptions);
    sqlite3_free(p);
  }
}

KvTable *kvTableFind(KvEngine *pEng, const char *zName, int nName){
  KvTable *p;
  for(p=pEng->pTables; p; p=p->pNext){
    if( p->nName==nName && memcmp(p->zName, zName, nName)==0 ) return p;
  }
  return 0;
}

void kvTableLink(KvEngine *pEng, KvTable *p){
  p->nRef++;
  p->bLive = 1;
  p->pNext = pEng->pTables;
  pEng->pTables = p;
}

void kvTableUnlink(KvEngine *pEng, KvTable *p){
  KvTable **pp;
  for(pp=&pEng->pTables; *pp; pp=&(*pp)->pNext){
    if( *pp==p ){
      *pp = p->pNext;
      p->pNext = 0;
      p->bLive = 0;
      kvTableUnref(p);
      return;
    }
  }
}
