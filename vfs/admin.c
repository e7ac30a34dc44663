/*
** admin.c -- read-only inspection of a store for the SQL surface:
** depot_list_commits() and depot_store_stats() (with the quota figures
** of depot_quota_list()) of vfs/depot_vfs.h.  Each call opens its own
** store handle (default VFS) and closes it again.  Also
** depot_store_on_read_only_fs(), the store layer's answer.
*/
#include "config.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

static int adminOpen(const char *zStore, Store **ppStore, char **pzErr){
  StoreSqliteConfig cfg;
  int rc;
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSynchronous = 2;
  cfg.bInspect = 1;
  rc = store_open(zStore, &cfg, ppStore, pzErr);
  if( rc==SQLITE_OK ) rc = depot_db_check_format(*ppStore, pzErr);
  if( rc!=SQLITE_OK ){
    store_close(*ppStore);
    *ppStore = 0;
    if( (rc&0xff)!=SQLITE_NOMEM ) rc = SQLITE_CANTOPEN;
  }
  return rc;
}

typedef struct AdminList AdminList;
struct AdminList {
  DepotCommitFn xCommit;
  void *pArg;
};

static int adminCommitRow(void *pArg, const CommitRow *pRow){
  AdminList *p = (AdminList*)pArg;
  DepotCommitInfo info;
  info.iTxid = pRow->iTxid;
  info.iTimeMs = pRow->iTimeMs;
  info.szPage = pRow->szPage;
  info.nPage = pRow->nPage;
  info.nWritten = pRow->nWritten;
  info.nStored = pRow->nBlob;
  info.iChecksum = pRow->iChecksum;
  return p->xCommit(p->pArg, &info);
}

/* The own branch of zBranch of database zQual (NAME in bucket main, or
** BUCKET/NAME) into *piBranch; 0 when there is none (a name a forked
** bucket only inherits has no commits of its own there). */
static int adminResolve(Store *pStore, const char *zQual, const char *zBranch,
                        uint64_t *piBranch, char **pzErr){
  const char *zSlash = strchr(zQual, '/');
  char zBucket[LAYOUT_MAX_NAME+1];
  uint64_t iBucket = 0;
  DepotName nm;
  int bFound = 0, rc;
  if( zSlash==0 ) return depot_db_resolve(pStore, zQual, zBranch, piBranch,
                                          pzErr);
  memcpy(zBucket, zQual, (size_t)(zSlash-zQual));
  zBucket[zSlash-zQual] = 0;
  rc = depot_bucket_find(pStore, zBucket, &iBucket, &bFound, pzErr);
  if( rc==SQLITE_OK && !bFound ){
    *pzErr = sqlite3_mprintf("depot: bucket %s does not exist", zBucket);
    rc = SQLITE_ERROR;
  }
  if( rc==SQLITE_OK ) rc = depot_name_resolve(pStore, iBucket, zSlash+1,
                                              zBranch, &nm, pzErr);
  *piBranch = rc==SQLITE_OK ? nm.iBranch : 0;
  return rc;
}

/* NAME or BUCKET/NAME, each part 1..LAYOUT_MAX_NAME bytes. */
static int adminQualOk(const char *zQual){
  const char *zSlash = zQual ? strchr(zQual, '/') : 0;
  if( zSlash==0 ) return layout_name_ok(zQual);
  return zSlash>zQual && zSlash-zQual<=LAYOUT_MAX_NAME
      && layout_name_ok(zSlash+1) && strchr(zSlash+1, '/')==0;
}

int depot_list_commits(const char *zStore, const char *zDb,
                       const char *zBranch, DepotCommitFn xCommit,
                       void *pArg, char **pzErr){
  Store *pStore = 0;
  uint64_t iBranch = 0;
  AdminList ctx;
  int rc;
  if( !adminQualOk(zDb) || !layout_name_ok(zBranch) ){
    *pzErr = sqlite3_mprintf("depot: db is NAME or BUCKET/NAME and branch a"
                             " name, each 1..%d bytes", LAYOUT_MAX_NAME);
    return SQLITE_ERROR;
  }
  rc = adminOpen(zStore, &pStore, pzErr);
  if( rc==SQLITE_OK ) rc = adminResolve(pStore, zDb, zBranch, &iBranch,
                                        pzErr);
  ctx.xCommit = xCommit;
  ctx.pArg = pArg;
  if( rc==SQLITE_OK && iBranch ){
    rc = depot_db_list_commits(pStore, iBranch, adminCommitRow, &ctx, pzErr);
  }
  store_close(pStore);
  return rc;
}

typedef struct AdminStats AdminStats;
struct AdminStats {
  DepotStats *pStats;
  Store *pStore;
  unsigned char zPrevDb[LAYOUT_MAX_NAME+1];
  int nPrevDb;
  int rc;
  char **pzErr;
};

/* One DBPTR row: 02 10 {db} 00 {branch} 00 -> branch id. */
static int adminPointerRow(void *pArg, const unsigned char *pKey, int nKey,
                           const unsigned char *pVal, int nVal){
  AdminStats *p = (AdminStats*)pArg;
  const unsigned char *zEnd = memchr(pKey+2, 0, nKey-2);
  int nDb = zEnd ? (int)(zEnd-(pKey+2)) : -1;
  DbHead head;
  PtrValue pv;
  int bUnborn = 0;
  if( nDb<1 || nDb>LAYOUT_MAX_NAME
   || layout_ptr_decode(pVal, nVal, &pv)!=SQLITE_OK ){
    p->rc = SQLITE_CORRUPT;
    *p->pzErr = sqlite3_mprintf("depot: corrupt database pointer row");
    return 1;
  }
  p->rc = depot_branch_unborn(p->pStore, pv.iBranch, &bUnborn, p->pzErr);
  if( p->rc!=SQLITE_OK ) return 1;
  if( bUnborn ) return 0;              /* no commit yet: not shown */
  if( nDb!=p->nPrevDb || memcmp(p->zPrevDb, pKey+2, nDb)!=0 ){
    p->pStats->nDatabase++;
    memcpy(p->zPrevDb, pKey+2, nDb);
    p->nPrevDb = nDb;
  }
  p->pStats->nBranch++;
  p->rc = depot_db_head(p->pStore, pv.iBranch, &head, p->pzErr);
  p->pStats->nLogical += (int64_t)head.nPage*head.szPage;
  return p->rc!=SQLITE_OK;
}

/* Quota figures: one call per database. */
static int adminQuotaRow(void *pArg, const DepotQuotaInfo *q){
  DepotStats *p = (DepotStats*)pArg;
  p->nQuotaUsed += q->nUsed;
  p->nQuotaCapped += q->bCap;
  p->nQuotaFull += q->bCap && q->nUsed>=q->nCap;
  return 0;
}

int depot_store_stats(const char *zStore, DepotStats *pStats, char **pzErr){
  unsigned char lo[4] = { 0x02, LAYOUT_P_DBPTR, 0, 0 };
  unsigned char hi[4] = { 0x02, LAYOUT_P_DBPTR+1, 0, 0 };
  unsigned char k[LAYOUT_MAX_KEY];
  AdminStats ctx;
  void *pVal = 0;
  int nVal = 0;
  int rc;
  memset(pStats, 0, sizeof(*pStats));
  memset(&ctx, 0, sizeof(ctx));
  ctx.pStats = pStats;
  ctx.pzErr = pzErr;
  rc = adminOpen(zStore, &ctx.pStore, pzErr);
  if( rc==SQLITE_OK ){
    rc = store_scan(ctx.pStore, lo, 2, hi, 2, 0, -1, adminPointerRow, &ctx);
    if( rc==SQLITE_OK ) rc = ctx.rc;
  }
  if( rc==SQLITE_OK ){
    rc = store_get(ctx.pStore, k, layout_key_ctr(k, "stored"), &pVal, &nVal);
    if( rc==SQLITE_OK && pVal && nVal==8 ){
      pStats->nStored = (int64_t)bytes_get64le((const unsigned char*)pVal);
    }
    sqlite3_free(pVal);
  }
  if( rc==SQLITE_OK ) rc = store_physical_bytes(ctx.pStore,
                                                &pStats->nPhysical);
  if( rc==SQLITE_OK ){
    StorePgInfo info;
    int rc2 = store_pg_info(ctx.pStore, 1, &info);
    if( rc2==SQLITE_OK ){
      pStats->bPg = 1;
      memcpy(pStats->zSyncCommit, info.zSyncCommit,
             sizeof(pStats->zSyncCommit));
      pStats->nSyncStandby = info.nSyncStandby;
      pStats->nStandby = info.nStandby;
      pStats->iTimeline = info.iTimeline;
    }else if( rc2!=SQLITE_NOTFOUND ){
      rc = rc2;
      if( pzErr ){
        sqlite3_free(*pzErr);
        *pzErr = sqlite3_mprintf("depot: %s", store_errmsg(ctx.pStore));
      }
    }
  }
  if( rc==SQLITE_OK && pStats->bPg ){
    int bStandby = 0;
    rc = store_pg_replica(ctx.pStore, &bStandby, &pStats->rReplayLag);
    pStats->bStandby = bStandby;
    if( rc!=SQLITE_OK && pzErr ){
      sqlite3_free(*pzErr);
      *pzErr = sqlite3_mprintf("depot: %s", store_errmsg(ctx.pStore));
    }
  }
  depot_cache_counters(&pStats->nCacheHit, &pStats->nCacheMiss);
  store_close(ctx.pStore);
  if( rc==SQLITE_OK ) rc = depot_quota_list(zStore, adminQuotaRow, pStats,
                                            pzErr);
  if( rc==SQLITE_OK ) rc = depot_compaction_lag(zStore, &pStats->nCompactLag,
                                                pzErr);
  if( rc==SQLITE_OK ){
    DepotGcResult gc;
    rc = depot_gc_preview(zStore, &gc, pzErr);
    pStats->nReclaimable = gc.nByte;
  }
  return rc;
}

int depot_store_replica(const char *zStore, int *pbStandby, double *prLag,
                        char **pzErr){
  Store *pStore = 0;
  int rc = adminOpen(zStore, &pStore, pzErr);
  *pbStandby = 0;
  *prLag = 0.0;
  if( rc==SQLITE_OK ){
    rc = store_pg_replica(pStore, pbStandby, prLag);
    if( rc!=SQLITE_OK ){
      *pzErr = sqlite3_mprintf("%s", store_errmsg(pStore));
    }
  }
  store_close(pStore);
  return rc;
}

int depot_store_on_read_only_fs(const char *zStore){
  return store_sqlite_read_only_fs(zStore);
}
