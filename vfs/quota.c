/*
** quota.c -- net-byte quotas of databases (see "Quotas" in vfs/layout.h):
** depot_quota_charge() (vfs/db.h), the one place that moves the stored-byte
** counters, and the quota calls of vfs/depot_vfs.h: read and set a
** database's cap, and list every database's use.
*/
#include "config.h"
#include "vfs/depot_vfs.h"
#include "vfs/db.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>

static int quErr(char **pzErr, int rc, char *zMsg){
  if( zMsg==0 ) return SQLITE_NOMEM;
  if( pzErr ){
    sqlite3_free(*pzErr);
    *pzErr = zMsg;
  }else{
    sqlite3_free(zMsg);
  }
  return rc;
}

static int quStoreErr(Store *pStore, char **pzErr, int rc){
  return quErr(pzErr, rc, sqlite3_mprintf("depot: %s", store_errmsg(pStore)));
}

/* An i64 LE row: *pbFound and its value (0 when absent). */
static int quGetI64(Store *pStore, const unsigned char *k, int nKey,
                    int *pbFound, int64_t *pn, char **pzErr){
  void *pVal = 0;
  int nVal = 0;
  int rc = store_get(pStore, k, nKey, &pVal, &nVal);
  *pbFound = 0;
  *pn = 0;
  if( rc!=SQLITE_OK ) return quStoreErr(pStore, pzErr, rc);
  if( pVal && nVal!=8 ){
    rc = quErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
        " counter row (%d bytes, not 8)", nVal));
  }else if( pVal ){
    *pbFound = 1;
    *pn = (int64_t)bytes_get64le(pVal);
  }
  sqlite3_free(pVal);
  return rc;
}

/* ---- the branches of a database ---- */

typedef struct QuIds QuIds;
struct QuIds {
  uint64_t iBucket;
  const char *zDb;
  uint64_t *a;
  int n, nAlloc;
  int rc;
};

static int quBranchRow(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  QuIds *p = (QuIds*)pArg;
  BranchRecord rec;
  if( nKey!=10 || layout_branch_decode(pVal, nVal, &rec)!=SQLITE_OK ) return 0;
  if( rec.iBucket!=p->iBucket || strcmp(rec.zDb, p->zDb)!=0 ) return 0;
  if( p->n==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    uint64_t *aNew = sqlite3_realloc64(p->a, sizeof(uint64_t)*nNew);
    if( aNew==0 ){
      p->rc = SQLITE_NOMEM;
      return 1;
    }
    p->a = aNew;
    p->nAlloc = nNew;
  }
  p->a[p->n++] = bytes_get64(pKey+2);
  return 0;
}

/* The sum of the BR 02 counters of every branch of (iBucket, zDb).
** Records that do not decode are skipped (depot_verify reports them). */
static int quSumBranches(Store *pStore, uint64_t iBucket, const char *zDb,
                         int64_t *pnSum, char **pzErr){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BRANCHES };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BRANCHES+1 };
  unsigned char k[LAYOUT_MAX_KEY];
  QuIds ids;
  int i, bFound, rc;
  memset(&ids, 0, sizeof(ids));
  ids.iBucket = iBucket;
  ids.zDb = zDb;
  *pnSum = 0;
  rc = store_scan(pStore, lo, 2, hi, 2, 0, -1, quBranchRow, &ids);
  if( rc!=SQLITE_OK ) rc = quStoreErr(pStore, pzErr, rc);
  else rc = ids.rc;
  for(i=0; rc==SQLITE_OK && i<ids.n; i++){
    int64_t n = 0;
    rc = quGetI64(pStore, k, layout_key_br(k, ids.a[i], LAYOUT_BR_QUOTA),
                  &bFound, &n, pzErr);
    *pnSum = (int64_t)((uint64_t)*pnSum + (uint64_t)n);
  }
  sqlite3_free(ids.a);
  return rc;
}

/* Bytes used by (iBucket, zDb): its QUOTA 'u' row (*pbRow 1), or the sum
** of its branch counters when the row does not exist yet. */
static int quUsed(Store *pStore, uint64_t iBucket, const char *zDb,
                  int64_t *pnUsed, int *pbRow, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  int rc = quGetI64(pStore, k, layout_key_quota(k, iBucket, zDb,
                    LAYOUT_QUOTA_USED), pbRow, pnUsed, pzErr);
  if( rc==SQLITE_OK && !*pbRow ){
    rc = quSumBranches(pStore, iBucket, zDb, pnUsed, pzErr);
  }
  return rc;
}

/* "NAME" for bucket main, else "BUCKET/NAME", into zOut (2*256 bytes). */
static void quLabel(Store *pStore, uint64_t iBucket, const char *zDb,
                    char *zOut){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  BucketRecord rec;
  if( iBucket==0 ){
    sqlite3_snprintf(2*(LAYOUT_MAX_NAME+1), zOut, "%s", zDb);
    return;
  }
  if( store_get(pStore, k, layout_key_bucket(k, iBucket, 0), &pVal, &nVal)
       ==SQLITE_OK && pVal
   && layout_bucket_decode(pVal, nVal, &rec)==SQLITE_OK ){
    sqlite3_snprintf(2*(LAYOUT_MAX_NAME+1), zOut, "%s/%s", rec.zName, zDb);
  }else{
    sqlite3_snprintf(2*(LAYOUT_MAX_NAME+1), zOut, "bucket %llu/%s",
                     (unsigned long long)iBucket, zDb);
  }
  sqlite3_free(pVal);
}

/* SQLITE_FULL with the message when a charge of nDelta would pass the
** cap of (iBucket, zDb); SQLITE_OK when it fits or there is no cap. */
static int quEnforce(Store *pStore, uint64_t iBucket, const char *zDb,
                     int64_t nUsed, int64_t nDelta, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  char zLabel[2*(LAYOUT_MAX_NAME+1)];
  int64_t nCap = 0;
  int bCap = 0;
  int rc = quGetI64(pStore, k, layout_key_quota(k, iBucket, zDb,
                    LAYOUT_QUOTA_CAP), &bCap, &nCap, pzErr);
  if( rc!=SQLITE_OK || !bCap || (nUsed<=nCap
      && (uint64_t)nDelta<=(uint64_t)nCap-(uint64_t)nUsed) ){
    return rc;
  }
  quLabel(pStore, iBucket, zDb, zLabel);
  return quErr(pzErr, SQLITE_FULL, sqlite3_mprintf("depot: quota of database"
      " '%s' exceeded: commit needs %lld bytes, %lld of %lld used", zLabel,
      (long long)nDelta, (long long)nUsed, (long long)nCap));
}

int depot_quota_charge(Store *pStore, uint64_t iBranch, int64_t nDelta,
                       int bEnforce, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[8];
  BranchRecord rec;
  int64_t nUsed = 0;
  int bRow = 0;
  int rc = depot_branch_get(pStore, iBranch, &rec, pzErr);
  if( rc==SQLITE_NOTFOUND ) rc = SQLITE_CORRUPT;
  if( rc==SQLITE_OK ) rc = quUsed(pStore, rec.iBucket, rec.zDb, &nUsed,
                                  &bRow, pzErr);
  if( rc==SQLITE_OK && bEnforce && nDelta>0 ){
    rc = quEnforce(pStore, rec.iBucket, rec.zDb, nUsed, nDelta, pzErr);
  }
  if( rc!=SQLITE_OK ) return rc;
  bytes_put64le(v, (uint64_t)nUsed + (uint64_t)nDelta);
  rc = store_put(pStore, k, layout_key_quota(k, rec.iBucket, rec.zDb,
                 LAYOUT_QUOTA_USED), v, 8);
  if( rc==SQLITE_OK ) rc = store_add(pStore, k,
      layout_key_br(k, iBranch, LAYOUT_BR_QUOTA), nDelta, 0);
  if( rc==SQLITE_OK ) rc = store_add(pStore, k, layout_key_ctr(k, "stored"),
      nDelta, 0);
  return rc==SQLITE_OK ? rc : quStoreErr(pStore, pzErr, rc);
}

/* ---- the SQL-facing calls ---- */

/* Open zStore (it must exist) and start a transaction; split zQual
** ("NAME" or "BUCKET/NAME", may be NULL) and find its bucket. */
static int quOpen(const char *zStore, const char *zQual, int bWrite,
                  Store **ppStore, uint64_t *piBucket, char *zDb,
                  char **pzErr){
  StoreSqliteConfig cfg;
  char zBucket[LAYOUT_MAX_NAME+1];
  const char *zSlash = zQual ? strchr(zQual, '/') : 0;
  size_t nB = zSlash ? (size_t)(zSlash-zQual) : 4;
  int rc, bFound = 1;
  *ppStore = 0;
  if( zQual && (nB<1 || nB>LAYOUT_MAX_NAME
             || !layout_name_ok(zSlash ? zSlash+1 : zQual)) ){
    return quErr(pzErr, SQLITE_ERROR, sqlite3_mprintf("depot: a database is"
        " named NAME or BUCKET/NAME, each part 1..%d bytes; got '%s'",
        LAYOUT_MAX_NAME, zQual));
  }
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSynchronous = 2;
  cfg.bInspect = !bWrite;
  rc = store_open(zStore, &cfg, ppStore, pzErr);
  if( rc!=SQLITE_OK ) return (rc&0xff)==SQLITE_NOMEM ? rc : SQLITE_CANTOPEN;
  rc = depot_db_check_format(*ppStore, pzErr);
  if( rc==SQLITE_OK && (rc = store_begin(*ppStore, bWrite))!=SQLITE_OK ){
    rc = quStoreErr(*ppStore, pzErr, rc);
  }
  if( rc==SQLITE_OK && zQual ){
    memcpy(zBucket, zSlash ? zQual : "main", nB);
    zBucket[nB] = 0;
    strcpy(zDb, zSlash ? zSlash+1 : zQual);
    rc = depot_bucket_find(*ppStore, zBucket, piBucket, &bFound, pzErr);
    if( rc==SQLITE_OK && !bFound ){
      rc = quErr(pzErr, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
          " not exist", zBucket));
    }
  }
  return rc;
}

/* Commit (bWrite, on success) or roll back, then close. */
static int quClose(Store *pStore, int bWrite, int rc, char **pzErr){
  if( pStore && rc==SQLITE_OK && bWrite ){
    rc = store_commit(pStore);
    if( rc!=SQLITE_OK ) quStoreErr(pStore, pzErr, rc);
  }else if( pStore ){
    store_rollback(pStore);
  }
  store_close(pStore);
  return rc;
}

int depot_quota_get(const char *zStore, const char *zDb, int64_t *pnUsed,
                    int64_t *pnCap, int *pbCap, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  char zName[LAYOUT_MAX_NAME+1];
  Store *pStore = 0;
  uint64_t iBucket = 0;
  int bRow = 0;
  int rc = quOpen(zStore, zDb, 0, &pStore, &iBucket, zName, pzErr);
  *pnUsed = *pnCap = 0;
  *pbCap = 0;
  if( rc==SQLITE_OK ) rc = quUsed(pStore, iBucket, zName, pnUsed, &bRow,
                                  pzErr);
  if( rc==SQLITE_OK ) rc = quGetI64(pStore, k, layout_key_quota(k, iBucket,
                          zName, LAYOUT_QUOTA_CAP), pbCap, pnCap, pzErr);
  return quClose(pStore, 0, rc, pzErr);
}

int depot_quota_set(const char *zStore, const char *zDb, int bRemove,
                    int64_t nCap, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[8];
  char zName[LAYOUT_MAX_NAME+1];
  Store *pStore = 0;
  uint64_t iBucket = 0;
  int nKey, rc;
  if( !bRemove && nCap<0 ){
    return quErr(pzErr, SQLITE_ERROR, sqlite3_mprintf("depot: a quota is"
        " 0 or more bytes, got %lld", (long long)nCap));
  }
  rc = quOpen(zStore, zDb, 1, &pStore, &iBucket, zName, pzErr);
  if( rc==SQLITE_OK ){
    nKey = layout_key_quota(k, iBucket, zName, LAYOUT_QUOTA_CAP);
    bytes_put64le(v, (uint64_t)nCap);
    rc = bRemove ? store_clear(pStore, k, nKey)
                 : store_put(pStore, k, nKey, v, 8);
    if( rc!=SQLITE_OK ) rc = quStoreErr(pStore, pzErr, rc);
  }
  return quClose(pStore, 1, rc, pzErr);
}

/* ---- listing ---- */

typedef struct QuDb QuDb;
struct QuDb {
  uint64_t iBucket;
  char zDb[LAYOUT_MAX_NAME+1];
};

typedef struct QuList QuList;
struct QuList {
  QuDb *a;
  int n, nAlloc;
  int rc;
};

static int quDbCmp(const void *a, const void *b){
  const QuDb *x = (const QuDb*)a, *y = (const QuDb*)b;
  if( x->iBucket!=y->iBucket ) return x->iBucket<y->iBucket ? -1 : 1;
  return strcmp(x->zDb, y->zDb);
}

/* Sort the list and keep one entry per (bucket, db). */
static void quListUnique(QuList *l){
  int i, j;
  if( l->n>1 ) qsort(l->a, l->n, sizeof(QuDb), quDbCmp);
  for(i=j=0; i<l->n; i++){
    if( j>0 && quDbCmp(&l->a[j-1], &l->a[i])==0 ) continue;
    l->a[j++] = l->a[i];
  }
  l->n = j;
}

/* Add (iBucket, zDb); a full list is first made unique, and grows only
** when that leaves it more than three quarters full, so it holds about
** one entry per database, not one per branch record. */
static int quListAdd(QuList *p, uint64_t iBucket, const char *zDb, int nDb){
  if( nDb<1 || nDb>LAYOUT_MAX_NAME ) return 0;
  if( p->n==p->nAlloc ){
    int bGrow = 1;
    if( p->nAlloc>0 ){
      quListUnique(p);
      bGrow = p->n*4 > p->nAlloc*3;
    }
    if( bGrow ){
      int nNew = p->nAlloc ? p->nAlloc*2 : 16;
      QuDb *aNew = sqlite3_realloc64(p->a, sizeof(QuDb)*nNew);
      if( aNew==0 ){
        p->rc = SQLITE_NOMEM;
        return 1;
      }
      p->a = aNew;
      p->nAlloc = nNew;
    }
  }
  p->a[p->n].iBucket = iBucket;
  memcpy(p->a[p->n].zDb, zDb, nDb);
  p->a[p->n++].zDb[nDb] = 0;
  return 0;
}

static int quListBranch(void *pArg, const unsigned char *pKey, int nKey,
                        const unsigned char *pVal, int nVal){
  BranchRecord rec;
  if( nKey!=10 || layout_branch_decode(pVal, nVal, &rec)!=SQLITE_OK ) return 0;
  return quListAdd((QuList*)pArg, rec.iBucket, rec.zDb, (int)strlen(rec.zDb));
}

/* A QUOTA row: 02 42 {bucket:8}{db} 00 {sub}. */
static int quListQuota(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  (void)pVal; (void)nVal;
  if( nKey<13 || pKey[nKey-2]!=0 ) return 0;
  return quListAdd((QuList*)pArg, bytes_get64(pKey+2), (const char*)pKey+10,
                   nKey-12);
}

/* Every (bucket, db) with a branch or a QUOTA row, sorted, unique. */
static int quCollect(Store *pStore, QuList *l, char **pzErr){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BRANCHES };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BRANCHES+1 };
  int rc = store_scan(pStore, lo, 2, hi, 2, 0, -1, quListBranch, l);
  lo[1] = LAYOUT_P_QUOTA;
  hi[1] = LAYOUT_P_QUOTA+1;
  if( rc==SQLITE_OK && l->rc==SQLITE_OK ){
    rc = store_scan(pStore, lo, 2, hi, 2, 0, -1, quListQuota, l);
  }
  if( rc!=SQLITE_OK ) return quStoreErr(pStore, pzErr, rc);
  if( l->rc!=SQLITE_OK ) return l->rc;
  quListUnique(l);
  return SQLITE_OK;
}

static int quEmit(Store *pStore, const QuDb *d, DepotQuotaFn xFn, void *pArg,
                  int *pbStop, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  char zLabel[2*(LAYOUT_MAX_NAME+1)];
  DepotQuotaInfo info;
  int bRow = 0, bCap = 0;
  int rc;
  memset(&info, 0, sizeof(info));
  rc = quUsed(pStore, d->iBucket, d->zDb, &info.nUsed, &bRow, pzErr);
  if( rc==SQLITE_OK ) rc = quGetI64(pStore, k, layout_key_quota(k,
      d->iBucket, d->zDb, LAYOUT_QUOTA_CAP), &bCap, &info.nCap, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  quLabel(pStore, d->iBucket, d->zDb, zLabel);
  info.zDb = zLabel;
  info.bCap = bCap;
  *pbStop = xFn(pArg, &info);
  return SQLITE_OK;
}

int depot_quota_list(const char *zStore, DepotQuotaFn xFn, void *pArg,
                     char **pzErr){
  Store *pStore = 0;
  QuList l;
  int i, bStop = 0;
  int rc = quOpen(zStore, 0, 0, &pStore, 0, 0, pzErr);
  memset(&l, 0, sizeof(l));
  if( rc==SQLITE_OK ) rc = quCollect(pStore, &l, pzErr);
  for(i=0; rc==SQLITE_OK && !bStop && i<l.n; i++){
    rc = quEmit(pStore, &l.a[i], xFn, pArg, &bStop, pzErr);
  }
  sqlite3_free(l.a);
  return quClose(pStore, 0, rc, pzErr);
}
