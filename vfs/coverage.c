/*
** coverage.c -- the coverage points of a branch (vfs/coverage.h), the
** sorted u64 sets they are kept in, the store context of a compaction or
** reclaim, and the commit-row scan both fold by.
*/
#include "config.h"
#include "vfs/coverage.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

int cov_set_add(U64Set *s, uint64_t v){
  if( s->n>=s->nAlloc ){
    int nNew = s->nAlloc ? s->nAlloc*2 : 32;
    uint64_t *a = sqlite3_realloc64(s->a, sizeof(uint64_t)*nNew);
    if( a==0 ) return SQLITE_NOMEM;
    s->a = a;
    s->nAlloc = nNew;
  }
  s->a[s->n++] = v;
  return SQLITE_OK;
}

static int covU64(const void *a, const void *b){
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x<y ? -1 : x>y;
}

void cov_set_sort(U64Set *s){
  int i, j = 0;
  if( s->n==0 ) return;
  qsort(s->a, s->n, sizeof(uint64_t), covU64);
  for(i=1; i<s->n; i++) if( s->a[i]!=s->a[j] ) s->a[++j] = s->a[i];
  s->n = j+1;
}

/* The smallest member >= v, or 0 when none (members are never 0). */
uint64_t cov_set_ceil(const U64Set *s, uint64_t v){
  int lo = 0, hi = s->n;
  while( lo<hi ){
    int mid = (lo+hi)/2;
    if( s->a[mid]<v ) lo = mid+1; else hi = mid;
  }
  return lo<s->n ? s->a[lo] : 0;
}

void cov_set_free(U64Set *s){
  sqlite3_free(s->a);
  memset(s, 0, sizeof(*s));
}

/* ---- the context ---- */

int cov_fail(Cov *p, int rc, char *zMsg){
  sqlite3_free(*p->pzErr);
  *p->pzErr = zMsg;
  return rc;
}

int cov_store_err(Cov *p, int rc){
  return cov_fail(p, rc, sqlite3_mprintf("depot: %s", store_errmsg(p->pStore)));
}

int64_t cov_now_ms(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (int64_t)tv.tv_sec*1000 + tv.tv_usec/1000;
}

/* An 8-byte row: big-endian (bLe 0) or a little-endian counter; absent
** reads as 0. */
int cov_get64(Cov *p, const unsigned char *k, int nKey, int bLe,
              int64_t *pv){
  void *pVal = 0;
  int nVal = 0, rc = store_get(p->pStore, k, nKey, &pVal, &nVal);
  uint64_t v = 0;
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  if( pVal && nVal!=8 ){
    sqlite3_free(pVal);
    return cov_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
        " counter or watermark row (%d bytes)", nVal));
  }
  if( pVal ){
    v = bLe ? bytes_get64le((const unsigned char*)pVal)
            : bytes_get64((const unsigned char*)pVal);
  }
  sqlite3_free(pVal);
  *pv = (int64_t)v;
  return SQLITE_OK;
}

int cov_br_get(Cov *p, uint64_t b, int eSub, int bLe, int64_t *pv){
  unsigned char k[LAYOUT_MAX_KEY];
  return cov_get64(p, k, layout_key_br(k, b, eSub), bLe, pv);
}

/* Add iDelta to branch b's net stored bytes, the store's and its
** database's quota use, through depot_quota_charge() and never enforcing
** the cap (compaction and reclaim must not fail on it).  b's record must
** still exist. */
int cov_credit(Cov *p, uint64_t b, int64_t iDelta){
  if( iDelta==0 ) return SQLITE_OK;
  return depot_quota_charge(p->pStore, b, iDelta, 0, p->pzErr);
}

/* Run xTxn as one write transaction: committed when it returns SQLITE_OK
** and did not report the plan stale, else rolled back. */
int cov_in_write(Cov *p, int rc, int bStale){
  if( rc==SQLITE_OK && !bStale ){
    rc = store_commit(p->pStore);
    if( rc!=SQLITE_OK ) cov_store_err(p, rc);
  }else{
    store_rollback(p->pStore);
  }
  return rc;
}

static int covBranchRow(void *pArg, const unsigned char *pKey, int nKey,
                        const unsigned char *pVal, int nVal){
  U64Set *s = (U64Set*)pArg;
  (void)pVal; (void)nVal;
  if( nKey!=10 ) return 0;
  return cov_set_add(s, bytes_get64(pKey+2))!=SQLITE_OK;
}

/* Every branch id of the store. */
int cov_all_branches(Cov *p, U64Set *s){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BRANCHES };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BRANCHES+1 };
  int rc = store_scan(p->pStore, lo, 2, hi, 2, 0, -1, covBranchRow, s);
  return rc==SQLITE_OK ? rc : cov_store_err(p, rc);
}

/* Open zStore for compaction, gc or, with bInspect, a call that only
** reads (which opens a store on read-only media too: StoreSqliteConfig). */
int cov_open(Cov *p, const char *zStore, int bInspect, char **pzErr){
  StoreSqliteConfig cfg;
  int rc;
  memset(p, 0, sizeof(*p));
  p->pzErr = pzErr;
  p->zPath = zStore;
  if( zStore==0 ){
    return cov_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: the store path"
        " must not be NULL"));
  }
  memset(&cfg, 0, sizeof(cfg));
  cfg.iSynchronous = 2;
  cfg.bInspect = bInspect;
  rc = store_open(zStore, &cfg, &p->pStore, pzErr);
  if( rc==SQLITE_OK ) rc = depot_db_check_format(p->pStore, pzErr);
  if( rc==SQLITE_OK ){
    p->pCctx = ZSTD_createCCtx();
    p->pDctx = ZSTD_createDCtx();
    if( p->pCctx==0 || p->pDctx==0 ) rc = SQLITE_NOMEM;
  }
  if( rc!=SQLITE_OK && (rc&0xff)!=SQLITE_NOMEM ) rc = SQLITE_CANTOPEN;
  return rc;
}

void cov_close(Cov *p){
  store_close(p->pStore);
  ZSTD_freeCCtx(p->pCctx);
  ZSTD_freeDCtx(p->pDctx);
  cov_set_free(&p->forkVs);
  p->pStore = 0;
}

/* ---- coverage points ---- */

static int covBucketRow(void *pArg, const unsigned char *pKey, int nKey,
                        const unsigned char *pVal, int nVal){
  Cov *p = (Cov*)pArg;
  BucketRecord rec;
  if( nKey!=10 ) return 0;
  if( layout_bucket_decode(pVal, nVal, &rec)!=SQLITE_OK ) return 0;
  return cov_set_add(&p->forkVs, rec.iForkVs)!=SQLITE_OK;
}

/* The store sequence of every bucket fork (read once per operation). */
int cov_load_buckets(Cov *p){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BUCKET };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BUCKET+1 };
  int rc;
  p->forkVs.n = 0;
  rc = store_scan(p->pStore, lo, 2, hi, 2, 0, -1, covBucketRow, p);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  cov_set_sort(&p->forkVs);
  return SQLITE_OK;
}

static int covPinRow(void *pArg, const unsigned char *pKey, int nKey,
                     const unsigned char *pVal, int nVal){
  U64Set *pK = (U64Set*)pArg;
  uint64_t t = nKey>=18 ? bytes_get64(pKey+10) : 0;
  (void)pVal; (void)nVal;
  return t && cov_set_add(pK, t)!=SQLITE_OK;
}

/* The point-in-time policy of database zDb. */
static int covPolicy(Cov *p, const char *zDb, PitrPolicy *pPol){
  unsigned char k[LAYOUT_MAX_KEY];
  int i, rc;
  pPol->iIntervalMs = DEPOT_PITR_DEFAULT_INTERVAL_S*1000LL;
  pPol->iRetentionMs = DEPOT_PITR_DEFAULT_RETENTION_S*1000LL;
  for(i=0; i<2; i++){
    void *pVal = 0;
    int nVal = 0;
    rc = store_get(p->pStore, k, layout_key_pitr(k, i==0 ? zDb : 0),
                   &pVal, &nVal);
    if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
    if( pVal==0 ) continue;
    rc = layout_pitr_decode(pVal, nVal, pPol);
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK ){
      return cov_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
          " point-in-time policy row"));
    }
    break;
  }
  return SQLITE_OK;
}

static int covPitrRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  CovPitr *w = (CovPitr*)pArg;
  CommitRow row;
  (void)pKey; (void)nKey;
  w->nRow++;
  if( layout_commit_decode(pVal, nVal, &row)!=SQLITE_OK ){
    w->rc = SQLITE_CORRUPT;
    return 1;
  }
  if( w->bHave && (w->iInterval==0
       || row.iTimeMs/w->iInterval != w->iPrevTime/w->iInterval) ){
    if( (int64_t)w->iPrevTime > w->iCutoff ){
      if( cov_set_add(w->pK, w->iPrevTxid) ){ w->rc = SQLITE_NOMEM; return 1; }
    }else{
      w->iOldRep = w->iPrevTxid;
    }
  }
  w->bHave = 1;
  w->iPrevTxid = row.iTxid;
  w->iPrevTime = row.iTimeMs;
  return 0;
}

int cov_pitr_begin(Cov *p, const char *zDb, U64Set *pK, CovPitr *w){
  PitrPolicy pol;
  int rc = covPolicy(p, zDb, &pol);
  memset(w, 0, sizeof(*w));
  if( rc!=SQLITE_OK ) return rc;
  w->bOn = pol.iRetentionMs!=0;
  w->iInterval = pol.iIntervalMs;
  w->iCutoff = p->iNowMs - pol.iRetentionMs;
  w->pK = pK;
  return SQLITE_OK;
}

int cov_pitr_some(Cov *p, uint64_t b, uint64_t iHead, CovPitr *w, int nMax,
                  int *pbMore){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n, rc;
  *pbMore = 0;
  if( !w->bOn || iHead==0 || (w->bHave && w->iPrevTxid>=iHead) ){
    return SQLITE_OK;
  }
  n = layout_key_commit(lo, b, w->bHave ? w->iPrevTxid+1 : 0);
  layout_key_commit(hi, b, iHead+1);
  w->nRow = 0;
  rc = store_scan(p->pStore, lo, n, hi, n, 0, nMax, covPitrRow, w);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  if( w->rc!=SQLITE_OK ){
    return cov_fail(p, w->rc, sqlite3_mprintf("depot: corrupt commit row of"
        " branch %llu", (unsigned long long)b));
  }
  *pbMore = nMax>0 && w->nRow>=nMax;
  return SQLITE_OK;
}

int cov_pitr_end(CovPitr *w){
  if( w->bOn && w->iOldRep ) return cov_set_add(w->pK, w->iOldRep);
  return SQLITE_OK;
}

int cov_points_base(Cov *p, uint64_t b, uint64_t iHead, U64Set *pK){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int nLo = layout_key_pin(lo, b, 0, 0, 0, 0) - 9;
  int i, rc = SQLITE_OK;
  pK->n = 0;
  if( iHead ) rc = cov_set_add(pK, iHead);
  layout_key_pin(hi, b+1, 0, 0, 0, 0);
  if( rc==SQLITE_OK ){
    rc = store_scan(p->pStore, lo, nLo, hi, nLo, 0, -1, covPinRow, pK);
    if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  }
  for(i=0; rc==SQLITE_OK && i<p->forkVs.n; i++){
    uint64_t t = 0;
    rc = depot_db_txid_at_vs(p->pStore, b, p->forkVs.a[i], &t, p->pzErr);
    if( rc==SQLITE_OK && t ) rc = cov_set_add(pK, t);
  }
  return rc;
}

/* Every coverage point of branch b (record pRec, head iHead), sorted. */
int cov_points(Cov *p, uint64_t b, const BranchRecord *pRec,
               uint64_t iHead, U64Set *pK){
  CovPitr w;
  int bMore = 0;
  int rc = cov_points_base(p, b, iHead, pK);
  if( rc==SQLITE_OK ) rc = cov_pitr_begin(p, pRec->zDb, pK, &w);
  if( rc==SQLITE_OK ) rc = cov_pitr_some(p, b, iHead, &w, -1, &bMore);
  if( rc==SQLITE_OK ) rc = cov_pitr_end(&w);
  cov_set_sort(pK);
  return rc;
}

/* ---- commit rows ---- */

static int covFoldRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  FoldScan *f = (FoldScan*)pArg;
  CommitRow row;
  (void)pKey; (void)nKey;
  if( layout_commit_decode(pVal, nVal, &row)!=SQLITE_OK ){
    f->rc = SQLITE_CORRUPT;
    return 1;
  }
  f->nBlob += (int64_t)row.nBlob;
  f->nCommit++;
  f->iLast = row.iTxid;
  if( cov_set_ceil(f->pK, row.iTxid)!=row.iTxid ){
    f->rc = cov_set_add(&f->drop, row.iTxid);
    if( f->rc==SQLITE_OK ) f->rc = cov_set_add(&f->dropVs, row.iVs);
  }
  return f->rc!=SQLITE_OK || (f->nMax>0 && f->nCommit>=f->nMax);
}

/* Delete the COMMITS and VTX rows listed in f. */
int cov_drop_commits(Cov *p, uint64_t b, const FoldScan *f){
  unsigned char k[LAYOUT_MAX_KEY];
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<f->drop.n; i++){
    rc = store_clear(p->pStore, k, layout_key_commit(k, b, f->drop.a[i]));
    if( rc==SQLITE_OK ) rc = store_clear(p->pStore, k,
        layout_key_vtx(k, b, f->dropVs.a[i]));
  }
  return rc==SQLITE_OK ? rc : cov_store_err(p, rc);
}

/* The commits with lo < txid <= hi of branch b, scanned into f. */
int cov_scan_commits(Cov *p, uint64_t b, uint64_t lo, uint64_t hi,
                     FoldScan *f){
  unsigned char kLo[LAYOUT_MAX_KEY], kHi[LAYOUT_MAX_KEY];
  int n = layout_key_commit(kLo, b, lo+1);
  int rc;
  layout_key_commit(kHi, b, hi+1);
  rc = store_scan(p->pStore, kLo, n, kHi, n, 0, -1, covFoldRow, f);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  if( f->rc!=SQLITE_OK ){
    return cov_fail(p, f->rc, sqlite3_mprintf("depot: corrupt commit row of"
        " branch %llu", (unsigned long long)b));
  }
  return SQLITE_OK;
}
