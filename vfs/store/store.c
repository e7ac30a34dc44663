/*
** store.c -- the backend-independent entry points of vfs/store/store.h:
** store_open() picks the backend from the path, every other one dispatches
** through the handle's StoreMethods.
*/
#include "config.h"
#include "vfs/store/store.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

int store_open(const char *zPath, const StoreSqliteConfig *pCfg,
               Store **ppStore, char **pzErr){
  if( store_is_pg_uri(zPath) ) return store_pg_open(zPath, pCfg, ppStore, pzErr);
  return store_sqlite_open(zPath, pCfg, ppStore, pzErr);
}

void store_close(Store *p){
  if( p ) p->pMethods->xClose(p);
}
int store_begin(Store *p, int bWrite){
  return p->pMethods->xBegin(p, bWrite);
}
#ifdef DEPOT_TEST
void (*depot_store_test_write)(const void *pKey, int nKey, int nVal) = 0;
#endif
int store_commit(Store *p){
  int rc = p->pMethods->xCommit(p);
#ifdef DEPOT_TEST
  if( rc==SQLITE_OK && depot_store_test_write ) depot_store_test_write(0,0,0);
#endif
  return rc;
}
int store_commit_lost(Store *p){
  if( p->pMethods->iVersion<4 || p->pMethods->xCommitLost==0 ){
    return STORE_LOST_NONE;
  }
  return p->pMethods->xCommitLost(p);
}
int store_rollback(Store *p){
  return p->pMethods->xRollback(p);
}
int store_get(Store *p, const void *pKey, int nKey, void **ppVal, int *pnVal){
  return p->pMethods->xGet(p, pKey, nKey, ppVal, pnVal);
}
int store_scan(Store *p, const void *pLo, int nLo, const void *pHi, int nHi,
               int flags, int nLimit, StoreRowFn xRow, void *pArg){
  return p->pMethods->xScan(p, pLo, nLo, pHi, nHi, flags, nLimit, xRow, pArg);
}
int store_put(Store *p, const void *pKey, int nKey, const void *pVal, int nVal){
#ifdef DEPOT_TEST
  if( depot_store_test_write ) depot_store_test_write(pKey, nKey, nVal);
#endif
  return p->pMethods->xPut(p, pKey, nKey, pVal, nVal);
}
int store_clear(Store *p, const void *pKey, int nKey){
  return p->pMethods->xClear(p, pKey, nKey);
}
int store_clear_range(Store *p, const void *pLo, int nLo,
                      const void *pHi, int nHi){
  return p->pMethods->xClearRange(p, pLo, nLo, pHi, nHi);
}
/* The rows a bounded step visited, and the last key (store_clear_some). */
typedef struct StoreLast StoreLast;
struct StoreLast {
  int64_t n;
  unsigned char *aKey; int nKey, nMax;
};
static int storeLastRow(void *pArg, const unsigned char *pKey, int nKey,
                        const unsigned char *pVal, int nVal){
  StoreLast *l = (StoreLast*)pArg;
  (void)pVal; (void)nVal;
  l->n++;
  if( nKey<l->nMax ){
    memcpy(l->aKey, pKey, nKey);
    l->nKey = nKey;
  }else{
    l->nKey = 0;
  }
  return 0;
}
int store_clear_some(Store *p, const void *pLo, int nLo, const void *pHi,
                     int nHi, int nMax, int bDry, int64_t *pnRow,
                     unsigned char *aNext, int nNextMax, int *pnNext){
  StoreLast l;
  int rc;
  l.n = 0; l.aKey = aNext; l.nKey = 0; l.nMax = nNextMax;
  *pnNext = 0;
  rc = store_scan(p, pLo, nLo, pHi, nHi, 0, nMax, storeLastRow, &l);
  if( rc!=SQLITE_OK ) return rc;
  *pnRow = l.n;
  if( l.n>=nMax && l.nKey>0 ){
    aNext[l.nKey++] = 0;                  /* just past the last key */
    *pnNext = l.nKey;
    if( !bDry ) rc = store_clear_range(p, pLo, nLo, aNext, l.nKey);
  }else if( !bDry && l.n>0 ){
    rc = store_clear_range(p, pLo, nLo, pHi, nHi);
  }
  return rc;
}
int store_add(Store *p, const void *pKey, int nKey, int64_t iDelta,
              int64_t *piNew){
  return p->pMethods->xAdd(p, pKey, nKey, iDelta, piNew);
}
int store_get_range(Store *p, const void *pKey, int nKey, int iOff, int n,
                    void *pOut, int *pnGot){
  void *pVal = 0;
  int nVal = 0, rc;
  if( p->pMethods->iVersion>=2 && p->pMethods->xGetRange ){
    return p->pMethods->xGetRange(p, pKey, nKey, iOff, n, pOut, pnGot);
  }
  *pnGot = -1;
  rc = p->pMethods->xGet(p, pKey, nKey, &pVal, &nVal);
  if( rc==SQLITE_OK && pVal ){
    int nTake = nVal>iOff ? nVal-iOff : 0;
    if( nTake>n ) nTake = n;
    if( nTake>0 ) memcpy(pOut, (char*)pVal+iOff, nTake);
    *pnGot = nTake;
  }
  sqlite3_free(pVal);
  return rc;
}
int store_maintain(Store *p, int eOp){
  if( p->pMethods->iVersion<2 || p->pMethods->xMaintain==0 ) return SQLITE_OK;
  return p->pMethods->xMaintain(p, eOp);
}
int store_data_version(Store *p, uint64_t *piVersion){
  *piVersion = 0;
  if( p->pMethods->iVersion<3 || p->pMethods->xDataVersion==0 ){
    return SQLITE_NOTFOUND;
  }
  return p->pMethods->xDataVersion(p, piVersion);
}
int store_physical_bytes(Store *p, int64_t *pnByte){
  *pnByte = 0;
  if( p->pMethods->iVersion<2 || p->pMethods->xPhysicalBytes==0 ){
    return SQLITE_OK;
  }
  return p->pMethods->xPhysicalBytes(p, pnByte);
}
int store_memory(Store *p, int64_t *pnUsed, int64_t *pnLimit){
  *pnUsed = *pnLimit = 0;
  if( p->pMethods->iVersion<3 || p->pMethods->xMemory==0 ) return SQLITE_OK;
  return p->pMethods->xMemory(p, pnUsed, pnLimit);
}
int store_max_value(Store *p){
  return p->pMethods->xMaxValue(p);
}
const char *store_errmsg(Store *p){
  return p->pMethods->xErrMsg(p);
}
int store_writer_lock(Store *p, const void *pKey, int nKey){
  if( nKey<1 || nKey>STORE_LOCK_KEY_MAX ) return SQLITE_MISUSE;
  return p->pMethods->xWriterLock(p, pKey, nKey);
}
int store_writer_unlock(Store *p, const void *pKey, int nKey){
  if( nKey<1 || nKey>STORE_LOCK_KEY_MAX ) return SQLITE_MISUSE;
  return p->pMethods->xWriterUnlock(p, pKey, nKey);
}
int store_writer_held(Store *p, const void *pKey, int nKey, int *pbHeld){
  *pbHeld = 0;
  if( nKey<1 || nKey>STORE_LOCK_KEY_MAX ) return SQLITE_MISUSE;
  return p->pMethods->xWriterHeld(p, pKey, nKey, pbHeld);
}
