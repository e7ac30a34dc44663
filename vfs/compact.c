/*
** compact.c -- compaction of a branch's page deltas into versioned shards
** (depot_compact, the background threshold and compactor; see
** vfs/depot_vfs.h for the calls, docs/ARCHITECTURE.md "Compaction and
** reclaim" for the design).
**
** A compaction job of branch B with watermark W picks a target T, the
** largest coverage point (vfs/coverage.h) at most CMP_MAX_COMMITS commits
** past W (or, when the first one is further, W + CMP_MAX_COMMITS, covered
** like a coverage point so that no install folds more than
** CMP_MAX_COMMITS commits), and
**   1. plans: in one store read transaction the generation, W, the head
**      H and the coverage points but those in time; then in read
**      transactions of at most CMP_PLAN_BATCH rows each (each continuing
**      after the last row of the one before, each checking that the
**      generation and W are still the plan's: else the plan is stale)
**      the commit rows up to H for the retained points in time, which
**      gives T, and every page index row (P, t) with W < t <= T, and for
**      each the pair (shard of P, smallest coverage point >= t); a commit
**      between batches only adds rows past H;
**   2. builds each pair's shard version in its own write transaction: the
**      full image of the shard's pages as B reads them at that point,
**      through its ancestors; this only adds rows, so it may be repeated
**      or abandoned at any time;
**   3. installs in one write transaction, after checking that the
**      generation, W and the bucket counter are unchanged and every
**      planned shard version exists: clears the COMMITS and VTX rows of
**      txids W+1..T that are not coverage points and sets W = T;
**   4. sweeps, in write transactions of at most CMP_SWEEP rows each: the
**      page index rows of txids at or below W, then the DELTA rows of
**      those txids, crediting their bytes to the branch's, the store's and
**      the database's counters as they go.
** Any coverage point X >= t then has a shard version in [t, X] holding the
** page as of t, which a read at X prefers to a page index row of txid t
** (vfs/db.c), so the rows the sweep clears are no longer read; until it
** has, they are folded rows that verify and the next plan skip.  A plan
** that finds DELTA rows at or below W (a sweep a crash or an error cut
** short) sweeps again first.  So the memory of a job is its plan (16
** bytes a distinct shard version to build, and the coverage points; the
** page index rows are visited, not kept), one shard
** version (LAYOUT_SHARD_SIZE pages) and one batch of rows, whatever the
** size of the commits it folds, and no store write transaction of it
** holds more than one shard version, CMP_MAX_COMMITS commit rows or
** CMP_SWEEP rows, nor any read transaction of it more than
** CMP_PLAN_BATCH page index rows (the outer store's snapshot is never
** pinned for a whole scan of the index).  A changed
** generation (a pin came or went, another job installed, GC ran) makes the
** job plan again.  The progress hook (vfs/progress.c) is called before
** each shard version is built; a stop request deletes the versions the
** job wrote (cmpAbandon) and fails the call with SQLITE_INTERRUPT.
*/
#include "config.h"
#include "vfs/coverage.h"
#include "vfs/vfs_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMP_MAX_COMMITS 4096     /* commits one install folds at most */
#define CMP_MAX_RETRY   4        /* plans per job before giving up */
#define CMP_LEVEL       3        /* zstd level of shard blobs */
#define CMP_SWEEP       1024     /* rows one sweep transaction visits */
#define CMP_PLAN_BATCH  1024     /* page index rows one plan transaction
                                 ** visits */

#ifdef DEPOT_TEST
int depot_compact_test_plan_batch = 0;
void (*depot_compact_test_plan_between)(const char *zStore) = 0;
#endif

static int cmpPlanBatch(void){
#ifdef DEPOT_TEST
  if( depot_compact_test_plan_batch>0 ) return depot_compact_test_plan_batch;
#endif
  return CMP_PLAN_BATCH;
}

/* A shard version to build: shard number and as_of. */
typedef struct ShardPair ShardPair;
struct ShardPair {
  uint32_t iShard;
  uint64_t iAsOf;
};

typedef struct Plan Plan;
struct Plan {
  uint64_t iBranch;
  int64_t iGen, iMark, iBuckets;
  uint64_t iHead;           /* the branch head the plan saw */
  uint64_t iTarget;         /* 0: nothing to fold */
  U64Set K;                 /* coverage points */
  int nPair, nPairAlloc;
  ShardPair *aPair;
  int64_t *aWrote;          /* per pair: blob bytes this job wrote, or -1 */
  int bSweep;               /* DELTA rows at or below W remain (step 4) */
  CovPitr *pWalk;           /* while the plan walks the commit rows */
  int nRow;                 /* page index rows the plan batch visited */
  unsigned char aLast[LAYOUT_MAX_KEY+1];  /* ... the last one's key */
  int nLast;
  int rc;
};

static void cmpPlanReset(Plan *pl){
  sqlite3_free(pl->aPair);
  sqlite3_free(pl->aWrote);
  cov_set_free(&pl->K);
  memset(pl, 0, sizeof(*pl));
}

static int cmpPlanGrow(Plan *pl){
  int nNew = pl->nPairAlloc ? pl->nPairAlloc*2 : 64;
  ShardPair *a = sqlite3_realloc64(pl->aPair, sizeof(ShardPair)*nNew);
  if( a==0 ) return SQLITE_NOMEM;
  pl->aPair = a;
  pl->nPairAlloc = nNew;
  return SQLITE_OK;
}

static int cmpPlanPair(Plan *pl, uint32_t iShard, uint64_t iAsOf){
  if( pl->nPair>0 && pl->aPair[pl->nPair-1].iShard==iShard
   && pl->aPair[pl->nPair-1].iAsOf==iAsOf ){
    return SQLITE_OK;
  }
  if( pl->nPair>=pl->nPairAlloc ){
    int rc = cmpPlanGrow(pl);
    if( rc!=SQLITE_OK ) return rc;
  }
  pl->aPair[pl->nPair].iShard = iShard;
  pl->aPair[pl->nPair++].iAsOf = iAsOf;
  return SQLITE_OK;
}

static int cmpPair(const void *a, const void *b){
  const ShardPair *x = (const ShardPair*)a, *y = (const ShardPair*)b;
  if( x->iShard!=y->iShard ) return x->iShard<y->iShard ? -1 : 1;
  return x->iAsOf<y->iAsOf ? -1 : x->iAsOf>y->iAsOf;
}

/* Sort the pairs and drop duplicates. */
static void cmpPlanSortPairs(Plan *pl){
  int i, j = 0;
  if( pl->nPair<2 ) return;
  qsort(pl->aPair, pl->nPair, sizeof(ShardPair), cmpPair);
  for(i=1; i<pl->nPair; i++){
    if( cmpPair(&pl->aPair[i], &pl->aPair[j]) ) pl->aPair[++j] = pl->aPair[i];
  }
  pl->nPair = j+1;
}

static int cmpDeltaRow(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  (void)pKey; (void)nKey; (void)pVal; (void)nVal;
  *(int*)pArg = 1;
  return 1;
}

static uint64_t cmpPlanAsOf(const Plan *pl, uint64_t t);
static int cmpGenSame(Cov *p, const Plan *pl, int *pbSame);

/* PIDX row 02 30 {b:8} 20 {pgno:4}{txid:8}. */
static int cmpPlanPidxRow(void *pArg, const unsigned char *pKey, int nKey,
                          const unsigned char *pVal, int nVal){
  Plan *pl = (Plan*)pArg;
  uint32_t pgno;
  uint64_t t;
  (void)pVal; (void)nVal;
  pl->nRow++;
  if( nKey<=LAYOUT_MAX_KEY ){
    memcpy(pl->aLast, pKey, nKey);
    pl->nLast = nKey;
  }
  if( nKey!=23 ) return 0;
  pgno = bytes_get32(pKey+11);
  t = bytes_get64(pKey+15);
  if( t<=(uint64_t)pl->iMark || t>pl->iTarget || pgno==0 ) return 0;
  pl->rc = cmpPlanPair(pl, (pgno-1)/LAYOUT_SHARD_SIZE, cmpPlanAsOf(pl, t));
  if( pl->rc==SQLITE_OK && pl->nPair>=pl->nPairAlloc ){
    cmpPlanSortPairs(pl);             /* keep the list to distinct pairs */
    if( pl->nPair*4 > pl->nPairAlloc*3 ) pl->rc = cmpPlanGrow(pl);
  }
  return pl->rc!=SQLITE_OK;
}

/* The target: the largest coverage point at most CMP_MAX_COMMITS past the
** watermark; when the first one past it is further, the txid
** CMP_MAX_COMMITS past it, which this job covers as if it were one (its
** shard versions are correct images; its commit row goes at install).
** 0: nothing to fold. */
static uint64_t cmpPlanTarget(const Plan *pl){
  uint64_t W = (uint64_t)pl->iMark, T = cov_set_ceil(&pl->K, W+1);
  int i;
  if( T>W+CMP_MAX_COMMITS ) return W+CMP_MAX_COMMITS;
  for(i=0; T && i<pl->K.n; i++){
    if( pl->K.a[i]>T && pl->K.a[i]<=W+CMP_MAX_COMMITS ) T = pl->K.a[i];
  }
  return T;
}

/* The shard version a row of txid t (W < t <= target) is folded into. */
static uint64_t cmpPlanAsOf(const Plan *pl, uint64_t t){
  uint64_t c = cov_set_ceil(&pl->K, t);
  return c && c<=pl->iTarget ? c : pl->iTarget;
}

static int cmpCtrGet(Cov *p, const char *zName, int64_t *pv){
  unsigned char k[LAYOUT_MAX_KEY];
  return cov_get64(p, k, layout_key_ctr(k, zName), 1, pv);
}

/* Step 1's start, inside a read transaction: the branch's state and its
** coverage points but those in time (pl->iHead 0: nothing to fold). */
static int cmpPlanTxn(Cov *p, Plan *pl, CovPitr *pWalk){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  BranchRecord rec;
  DbHead head;
  uint64_t b = pl->iBranch;
  int64_t nRef = 0;
  int rc = depot_branch_get(p->pStore, b, &rec, p->pzErr);
  if( rc==SQLITE_NOTFOUND ) return SQLITE_OK;   /* reclaimed meanwhile */
  if( rc==SQLITE_OK ) rc = cov_get64(p, lo, layout_key_branch_sub(lo, b,
                                     LAYOUT_BRANCH_REFCOUNT), 1, &nRef);
  if( rc!=SQLITE_OK ) return rc;
  if( rec.eState==LAYOUT_STATE_DROPPED && nRef<=0 ) return SQLITE_OK;
  rc = depot_db_head(p->pStore, b, &head, p->pzErr);
  if( rc==SQLITE_OK ) rc = cov_br_get(p, b, LAYOUT_BR_CMPGEN, 1, &pl->iGen);
  if( rc==SQLITE_OK ) rc = cov_br_get(p, b, LAYOUT_BR_CMPMARK, 0, &pl->iMark);
  if( rc==SQLITE_OK ) rc = cmpCtrGet(p, "bucket", &pl->iBuckets);
  if( rc==SQLITE_OK && pl->iMark>0 ){     /* an unfinished sweep? */
    int n = layout_key_delta(lo, b, 0, 0);
    layout_key_delta(hi, b, (uint64_t)pl->iMark+1, 0);
    rc = store_scan(p->pStore, lo, n, hi, n, 0, 1, cmpDeltaRow, &pl->bSweep);
    if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  }
  if( rc!=SQLITE_OK || head.iTxid<=(uint64_t)pl->iMark ) return rc;
  pl->iHead = head.iTxid;
  rc = cov_load_buckets(p);
  if( rc==SQLITE_OK ) rc = cov_points_base(p, b, head.iTxid, &pl->K);
  if( rc==SQLITE_OK ) rc = cov_pitr_begin(p, rec.zDb, &pl->K, pWalk);
  return rc;
}

/* Step 1 over the page index, one batch of at most cmpPlanBatch() rows
** from key lo on, in a read transaction of its own; the generation,
** watermark and bucket counter are those the plan began with, else the
** plan is stale (pl->iGen -1: no build or install will pass). */
static int cmpPlanBatchTxn(Cov *p, Plan *pl, const unsigned char *lo,
                           int nLo, const unsigned char *hi, int nHi){
  int bSame = 0;
  int rc = store_begin(p->pStore, 0);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  pl->nRow = 0;
  rc = cmpGenSame(p, pl, &bSame);
  if( rc==SQLITE_OK && !bSame ){
    pl->iGen = -1;
  }else if( rc==SQLITE_OK && lo==0 ){          /* points in time */
    int bMore = 0;
    rc = cov_pitr_some(p, pl->iBranch, pl->iHead, pl->pWalk, cmpPlanBatch(),
                       &bMore);
    pl->nRow = bMore ? cmpPlanBatch() : 0;
  }else if( rc==SQLITE_OK ){
    rc = store_scan(p->pStore, lo, nLo, hi, nHi, 0, cmpPlanBatch(),
                    cmpPlanPidxRow, pl);
    if( rc!=SQLITE_OK ) rc = cov_store_err(p, rc);
    else rc = pl->rc;
  }
  store_rollback(p->pStore);
  return rc;
}

/* Step 1: the branch's state in one read transaction, then its page
** index rows of txids W+1..target in batches (above), each continuing
** from the last key the one before visited.  A commit between batches
** adds rows past the target only, which the plan skips; a pin, an install
** or a reclaim meanwhile changes the generation: the plan goes stale. */
static int cmpPlan(Cov *p, Plan *pl){
  unsigned char lo[LAYOUT_MAX_KEY+1], hi[LAYOUT_MAX_KEY];
  CovPitr walk;
  int nLo, nHi;
  int rc = store_begin(p->pStore, 0);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  memset(&walk, 0, sizeof(walk));
  rc = cmpPlanTxn(p, pl, &walk);
  store_rollback(p->pStore);
  if( rc!=SQLITE_OK || pl->iHead==0 ) return rc;
  pl->pWalk = &walk;
  for(;;){                     /* the points in time, a batch at a time */
    rc = cmpPlanBatchTxn(p, pl, 0, 0, 0, 0);
    if( rc!=SQLITE_OK || pl->iGen<0 || pl->nRow<cmpPlanBatch() ) break;
#ifdef DEPOT_TEST
    if( depot_compact_test_plan_between ){
      depot_compact_test_plan_between(p->zPath);
    }
#endif
  }
  pl->pWalk = 0;
  if( rc==SQLITE_OK ) rc = cov_pitr_end(&walk);
  if( rc!=SQLITE_OK || pl->iGen<0 ) return rc;
  cov_set_sort(&pl->K);
  pl->iTarget = cmpPlanTarget(pl);
  if( pl->iTarget==0 ) return SQLITE_OK;
  nLo = layout_key_br(lo, pl->iBranch, LAYOUT_BR_PIDX);
  nHi = layout_key_br(hi, pl->iBranch, LAYOUT_BR_PIDX+1);
  for(;;){
    rc = cmpPlanBatchTxn(p, pl, lo, nLo, hi, nHi);
    if( rc!=SQLITE_OK || pl->iGen<0 || pl->nRow<cmpPlanBatch() ) break;
    memcpy(lo, pl->aLast, pl->nLast);
    lo[pl->nLast] = 0;                      /* the key right after it */
    nLo = pl->nLast+1;
#ifdef DEPOT_TEST
    if( depot_compact_test_plan_between ){
      depot_compact_test_plan_between(p->zPath);
    }
#endif
  }
  if( rc==SQLITE_OK ) cmpPlanSortPairs(pl);
  return rc;
}

/* ---- compaction: build one shard version ---- */

#ifdef DEPOT_TEST
void (*depot_compact_test_encoded)(const char *zStore) = 0;
#endif

/* The pages of shard iShard as branch b reads them at iAsOf (state pSt):
** non-zero pages go into aPgno/apPage (each szPage bytes of aBuf). */
static int cmpReadShard(Cov *p, uint64_t b, uint32_t iShard, uint64_t iAsOf,
                        const DbHead *pSt, unsigned char *aBuf,
                        uint32_t *aPgno, unsigned char **apPage, int *pn){
  DepotChain chain;
  DepotChunkCache chunks;
  uint32_t i, sz = pSt->szPage;
  int rc = depot_db_chain(p->pStore, b, iAsOf, &chain, p->pzErr);
  memset(&chunks, 0, sizeof(chunks));
  *pn = 0;
  for(i=0; rc==SQLITE_OK && i<LAYOUT_SHARD_SIZE; i++){
    uint32_t pgno = iShard*LAYOUT_SHARD_SIZE + 1 + i, j;
    unsigned char *a = aBuf + (size_t)(*pn)*sz;
    if( pgno>pSt->nPage ) break;
    rc = depot_db_read_page(p->pStore, 0, &chunks, p->pDctx, &chain, pgno,
                            sz, a, 0, p->pzErr);
    for(j=0; rc==SQLITE_OK && j<sz && a[j]==0; j++){}
    if( rc==SQLITE_OK && j<sz ){
      aPgno[*pn] = pgno;
      apPage[(*pn)++] = a;
    }
  }
  depot_chunk_cache_clear(&chunks);
  return rc;
}

/* A shard version encoded in a read transaction, waiting to be written. */
typedef struct ShardOut ShardOut;
struct ShardOut {
  ShardRow row;
  unsigned char *aBlob;     /* sqlite3_malloc'd; NULL: nothing to write */
  int64_t nBlob;
  int nPage;
};

/* Write the encoded shard blob and its row; count its bytes. */
static int cmpPutShard(Cov *p, uint64_t b, const ShardPair *pPair,
                       ShardOut *pOut){
  unsigned char k[LAYOUT_MAX_KEY];
  unsigned char v[LAYOUT_SHARD_ROW];
  ShardRow *pRow = &pOut->row;
  int64_t off, nBlob = pOut->nBlob;
  uint32_t i;
  int rc = SQLITE_OK;
  pRow->szChunk = (uint32_t)store_max_value(p->pStore);
  pRow->nBlob = (uint64_t)nBlob;
  pRow->nChunk = (uint32_t)((nBlob + pRow->szChunk - 1)/pRow->szChunk);
  for(off=0, i=0; rc==SQLITE_OK && off<nBlob; off+=pRow->szChunk, i++){
    int64_t nPart = nBlob-off < pRow->szChunk ? nBlob-off : pRow->szChunk;
    rc = store_put(p->pStore, k, layout_key_shard_chunk(k, b, pPair->iShard,
                   pPair->iAsOf, i), pOut->aBlob+off, (int)nPart);
  }
  if( rc==SQLITE_OK ) rc = store_put(p->pStore, k, layout_key_shard(k, b,
      pPair->iShard, pPair->iAsOf), v, layout_shard_encode(v, pRow));
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  return cov_credit(p, b, nBlob);
}

/* Encode the pages read for one shard version into pOut. */
static int cmpEncodeShard(Cov *p, uint64_t iAsOf, const DbHead *pSt,
                          const uint32_t *aPgno,
                          const unsigned char *const *apPage, int n,
                          ShardOut *pOut){
  LtxFrameRef aRef[LAYOUT_SHARD_SIZE];
  LtxHeader h;
  int i, rc;
  memset(&h, 0, sizeof(h));
  h.szPage = pOut->row.szPage = pSt->szPage;
  h.nPage = pOut->row.nPage = pSt->nPage;
  h.iMinTxid = h.iMaxTxid = iAsOf;
  h.iTimeMs = (uint64_t)p->iNowMs;
  h.nFrame = (uint32_t)n;
  rc = ltx_encode(&h, aPgno, apPage, pSt->iChecksum, p->pCctx, CMP_LEVEL,
                  &pOut->aBlob, &pOut->nBlob, aRef);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    uint32_t iSlot = (aPgno[i]-1) % LAYOUT_SHARD_SIZE;
    pOut->row.aOff[iSlot] = aRef[i].iOffset;
    pOut->row.aLen[iSlot] = aRef[i].nByte;
  }
  pOut->nPage = n;
  return rc;
}

/* Is the generation still pl->iGen?  (inside a transaction) */
static int cmpGenSame(Cov *p, const Plan *pl, int *pbSame){
  int64_t g = 0, w = 0, nb = 0;
  int rc = cov_br_get(p, pl->iBranch, LAYOUT_BR_CMPGEN, 1, &g);
  if( rc==SQLITE_OK ) rc = cov_br_get(p, pl->iBranch, LAYOUT_BR_CMPMARK, 0, &w);
  if( rc==SQLITE_OK ) rc = cmpCtrGet(p, "bucket", &nb);
  *pbSame = g==pl->iGen && w==pl->iMark && nb==pl->iBuckets;
  return rc;
}

static int cmpExists(Cov *p, const unsigned char *k, int nKey, int *pb){
  void *pVal = 0;
  int nVal = 0, rc = store_get(p->pStore, k, nKey, &pVal, &nVal);
  *pb = pVal!=0;
  sqlite3_free(pVal);
  return rc==SQLITE_OK ? rc : cov_store_err(p, rc);
}

/* Is the plan still current (*pbStale otherwise) and the version still
** to be built (*pbHave otherwise)?  Inside a transaction. */
static int cmpPairTodo(Cov *p, const Plan *pl, const ShardPair *pPair,
                       int *pbStale, int *pbHave){
  unsigned char k[LAYOUT_MAX_KEY];
  int bSame = 0;
  int rc = cmpGenSame(p, pl, &bSame);
  *pbStale = !bSame;
  *pbHave = 0;
  if( rc!=SQLITE_OK || !bSame ) return rc;
  return cmpExists(p, k, layout_key_shard(k, pl->iBranch, pPair->iShard,
                   pPair->iAsOf), pbHave);
}

/* Step 2a for one pair, inside a read transaction: read the shard's pages
** as of the pair's txid and encode them into pOut (left empty when the
** plan is stale or the version exists).  The store's write lock is not
** held, so commits go on meanwhile; what is read is immutable history. */
static int cmpBuildRead(Cov *p, const Plan *pl, const ShardPair *pPair,
                        int *pbStale, ShardOut *pOut){
  uint32_t aPgno[LAYOUT_SHARD_SIZE];
  unsigned char *apPage[LAYOUT_SHARD_SIZE];
  unsigned char *aBuf = 0;
  DbHead st;
  int n = 0, bHave = 0;
  int rc = cmpPairTodo(p, pl, pPair, pbStale, &bHave);
  if( rc!=SQLITE_OK || *pbStale || bHave ) return rc;
  rc = depot_db_state_at(p->pStore, pl->iBranch, pPair->iAsOf, &st, p->pzErr);
  if( rc==SQLITE_OK ){
    aBuf = sqlite3_malloc64((uint64_t)st.szPage*LAYOUT_SHARD_SIZE);
    if( aBuf==0 ) rc = SQLITE_NOMEM;
  }
  if( rc==SQLITE_OK ) rc = cmpReadShard(p, pl->iBranch, pPair->iShard,
                                        pPair->iAsOf, &st, aBuf, aPgno,
                                        apPage, &n);
  if( rc==SQLITE_OK ) rc = cmpEncodeShard(p, pPair->iAsOf, &st, aPgno,
                                          (const unsigned char*const*)apPage,
                                          n, pOut);
  sqlite3_free(aBuf);
  return rc;
}

/* Step 2b for one pair, inside a write transaction: write pOut unless the
** plan went stale or another job wrote the version meanwhile. */
static int cmpBuildWrite(Cov *p, const Plan *pl, const ShardPair *pPair,
                         int *pbStale, ShardOut *pOut,
                         DepotCompactResult *pRes){
  int bHave = 0;
  int rc = cmpPairTodo(p, pl, pPair, pbStale, &bHave);
  if( rc!=SQLITE_OK || *pbStale || bHave ) return rc;
  rc = cmpPutShard(p, pl->iBranch, pPair, pOut);
  if( rc==SQLITE_OK ) pl->aWrote[pPair-pl->aPair] = pOut->nBlob;
  if( rc==SQLITE_OK ){
    pRes->nShard++;
    pRes->nPage += pOut->nPage;
    pRes->nShardBytes += pOut->nBlob;
  }
  return rc;
}

/* Step 2 for one pair: read and encode in a read transaction, then write
** in a short write transaction, so the write lock is held only for the
** rows themselves. */
static int cmpBuildPair(Cov *p, const Plan *pl, const ShardPair *pPair,
                        int *pbStale, DepotCompactResult *pRes){
  ShardOut out;
  int rc = store_begin(p->pStore, 0);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  memset(&out, 0, sizeof(out));
  rc = cmpBuildRead(p, pl, pPair, pbStale, &out);
  store_rollback(p->pStore);
#ifdef DEPOT_TEST
  if( rc==SQLITE_OK && out.aBlob && depot_compact_test_encoded ){
    depot_compact_test_encoded(p->zPath);
  }
#endif
  if( rc==SQLITE_OK && out.aBlob ){
    rc = store_begin(p->pStore, 1);
    if( rc!=SQLITE_OK ){
      rc = cov_store_err(p, rc);
    }else{
      rc = cmpBuildWrite(p, pl, pPair, pbStale, &out, pRes);
      rc = cov_in_write(p, rc, *pbStale);
    }
  }
  sqlite3_free(out.aBlob);
  return rc;
}

/* Delete the shard versions this job wrote (pl->aWrote) in one write
** transaction and credit their bytes back: the job leaves the store as
** it found it.  Versions another job wrote meanwhile are not touched. */
static int cmpAbandon(Cov *p, const Plan *pl){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int64_t nByte = 0;
  int i, n, rc = store_begin(p->pStore, 1);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  for(i=0; rc==SQLITE_OK && i<pl->nPair; i++){
    const ShardPair *q = &pl->aPair[i];
    if( pl->aWrote[i]<0 ) continue;
    n = layout_key_shard_chunk(lo, pl->iBranch, q->iShard, q->iAsOf, 0);
    layout_key_shard_chunk(hi, pl->iBranch, q->iShard, q->iAsOf+1, 0);
    rc = store_clear_range(p->pStore, lo, n, hi, n);
    if( rc==SQLITE_OK ) rc = store_clear(p->pStore, lo, layout_key_shard(lo,
                                         pl->iBranch, q->iShard, q->iAsOf));
    if( rc!=SQLITE_OK ) rc = cov_store_err(p, rc);
    nByte += pl->aWrote[i];
  }
  if( rc==SQLITE_OK && nByte ) rc = cov_credit(p, pl->iBranch, -nByte);
  return cov_in_write(p, rc, 0);
}

/* Step 2 for every pair.  The progress hook (vfs/progress.c) is called
** before each pair; when it asks to stop, the job is abandoned (its
** shard versions deleted) and the call fails with SQLITE_INTERRUPT. */
static int cmpBuild(Cov *p, Plan *pl, int *pbStale,
                    DepotCompactResult *pRes){
  int i, rc = SQLITE_OK;
  pl->aWrote = sqlite3_malloc64(sizeof(int64_t)*(pl->nPair+1));
  if( pl->aWrote==0 ) return SQLITE_NOMEM;
  for(i=0; i<pl->nPair; i++) pl->aWrote[i] = -1;
  for(i=0; rc==SQLITE_OK && !*pbStale && i<pl->nPair; i++){
    if( depot_progress_report("compact", i, pl->nPair, pRes->nShardBytes) ){
      int rc2 = cmpAbandon(p, pl);
      if( rc2!=SQLITE_OK ) return rc2;
      return cov_fail(p, SQLITE_INTERRUPT,
                      sqlite3_mprintf("depot: interrupted"));
    }
    rc = cmpBuildPair(p, pl, &pl->aPair[i], pbStale, pRes);
  }
  if( rc==SQLITE_OK && !*pbStale ){
    depot_progress_report("compact", pl->nPair, pl->nPair, pRes->nShardBytes);
  }
  return rc;
}

/* ---- compaction: install ---- */

/* Every planned shard version exists (else the plan is stale). */
static int cmpPairsPresent(Cov *p, const Plan *pl, int *pbStale){
  unsigned char k[LAYOUT_MAX_KEY];
  int i, rc = SQLITE_OK, bHave = 1;
  for(i=0; rc==SQLITE_OK && bHave && i<pl->nPair; i++){
    rc = cmpExists(p, k, layout_key_shard(k, pl->iBranch, pl->aPair[i].iShard,
                   pl->aPair[i].iAsOf), &bHave);
  }
  if( !bHave ) *pbStale = 1;
  return rc;
}

/* Step 3, inside the write transaction. */
static int cmpInstallTxn(Cov *p, const Plan *pl, int *pbStale,
                         DepotCompactResult *pRes){
  unsigned char k[LAYOUT_MAX_KEY], k2[LAYOUT_MAX_KEY];
  uint64_t b = pl->iBranch;
  FoldScan f;
  int bSame = 0;
  int rc = cmpGenSame(p, pl, &bSame);
  *pbStale = !bSame;
  if( rc==SQLITE_OK && bSame ) rc = cmpPairsPresent(p, pl, pbStale);
  if( rc!=SQLITE_OK || *pbStale ) return rc;
  memset(&f, 0, sizeof(f));
  f.pK = &pl->K;
  rc = cov_scan_commits(p, b, (uint64_t)pl->iMark, pl->iTarget, &f);
  if( rc==SQLITE_OK ) rc = cov_drop_commits(p, b, &f);
  if( rc==SQLITE_OK ){
    bytes_put64(k2, pl->iTarget);
    rc = store_put(p->pStore, k, layout_key_br(k, b, LAYOUT_BR_CMPMARK), k2,
                   8);
    if( rc==SQLITE_OK ) rc = store_add(p->pStore, k,
        layout_key_br(k, b, LAYOUT_BR_CMPGEN), 1, 0);
    if( rc!=SQLITE_OK ) rc = cov_store_err(p, rc);
  }
  if( rc==SQLITE_OK ) pRes->nCommit += f.nCommit;
  cov_set_free(&f.drop);
  cov_set_free(&f.dropVs);
  return rc;
}

static int cmpInstall(Cov *p, const Plan *pl, int *pbStale,
                      DepotCompactResult *pRes){
  DepotCompactResult r;
  int rc = store_begin(p->pStore, 1);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  memset(&r, 0, sizeof(r));
  rc = cmpInstallTxn(p, pl, pbStale, &r);
  rc = cov_in_write(p, rc, *pbStale);
  if( rc==SQLITE_OK && !*pbStale ){
    pRes->nCommit += r.nCommit;
    pRes->nFreed += r.nFreed;
  }
  return rc;
}

/* The last key a bounded sweep scan visited, and the rows and bytes of
** those at or below the watermark. */
typedef struct CmpSweep CmpSweep;
struct CmpSweep {
  uint64_t iMark;
  int bPidx;                /* scanning page index rows (else DELTA rows) */
  int n;                    /* rows visited */
  int nDel;                 /* page index rows to clear (aPgno, aTxid) */
  uint32_t *aPgno;
  uint64_t *aTxid;
  int64_t nByte;            /* bytes of the DELTA rows visited */
  unsigned char aKey[LAYOUT_MAX_KEY+1];
  int nKey;
};

static int cmpSweepRow(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  CmpSweep *w = (CmpSweep*)pArg;
  (void)pVal;
  w->n++;
  if( nKey<=LAYOUT_MAX_KEY ){
    memcpy(w->aKey, pKey, nKey);
    w->nKey = nKey;
  }
  if( w->bPidx ){
    if( nKey==23 && bytes_get64(pKey+15)<=w->iMark ){
      w->aPgno[w->nDel] = bytes_get32(pKey+11);
      w->aTxid[w->nDel++] = bytes_get64(pKey+15);
    }
  }else{
    w->nByte += nVal;
  }
  return 0;
}

/* One sweep transaction (step 4) from pCur (nCur bytes; 0: the start):
** at most CMP_SWEEP page index rows, or once those are done DELTA rows,
** of branch b.  *pbDone when nothing is left; pCur moves on. */
static int cmpSweepTxn(Cov *p, uint64_t b, int *pbPidx, unsigned char *pCur,
                       int *pnCur, int *pbDone, DepotCompactResult *pRes){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int64_t W = 0;
  CmpSweep w;
  int i, nLo, nHi, nMax = CMP_SWEEP, rc;
#ifdef DEPOT_TEST
  if( depot_gc_test_batch>0 ) nMax = depot_gc_test_batch;
#endif
  memset(&w, 0, sizeof(w));
  w.bPidx = *pbPidx;
  *pbDone = 0;
  rc = cov_br_get(p, b, LAYOUT_BR_CMPMARK, 0, &W);
  if( rc!=SQLITE_OK ) return rc;
  if( w.bPidx ){
    w.aPgno = sqlite3_malloc64(sizeof(uint32_t)*(uint64_t)nMax);
    w.aTxid = sqlite3_malloc64(sizeof(uint64_t)*(uint64_t)nMax);
    if( w.aPgno==0 || w.aTxid==0 ){
      sqlite3_free(w.aPgno);
      sqlite3_free(w.aTxid);
      return SQLITE_NOMEM;
    }
  }
  w.iMark = (uint64_t)W;
  if( w.bPidx ){
    nLo = layout_key_br(lo, b, LAYOUT_BR_PIDX);
    nHi = layout_key_br(hi, b, LAYOUT_BR_PIDX+1);
  }else{
    nLo = layout_key_delta(lo, b, 0, 0);
    nHi = layout_key_delta(hi, b, (uint64_t)W+1, 0);
  }
  if( *pnCur ){
    memcpy(lo, pCur, *pnCur);
    nLo = *pnCur;
  }
  rc = store_scan(p->pStore, lo, nLo, hi, nHi, 0, nMax, cmpSweepRow, &w);
  for(i=0; rc==SQLITE_OK && i<w.nDel; i++){
    rc = store_clear(p->pStore, lo, layout_key_pidx(lo, b, w.aPgno[i],
                                                    w.aTxid[i]));
  }
  sqlite3_free(w.aPgno);
  sqlite3_free(w.aTxid);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  if( !w.bPidx && w.n>0 ){
    w.aKey[w.nKey++] = 0;               /* just past the last key */
    rc = store_clear_range(p->pStore, lo, nLo, w.aKey, w.nKey);
    if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
    rc = cov_credit(p, b, -w.nByte);
    if( rc!=SQLITE_OK ) return rc;
    pRes->nFreed += w.nByte;
  }else if( w.n>0 ){
    w.aKey[w.nKey++] = 0;
  }
  if( w.n<nMax ){                       /* this kind of row is through */
    *pnCur = 0;
    if( w.bPidx ) *pbPidx = 0;
    else *pbDone = 1;
  }else{
    memcpy(pCur, w.aKey, w.nKey);
    *pnCur = w.nKey;
  }
  return SQLITE_OK;
}

/* Step 4: sweep the rows folded into shards at or below the watermark,
** one write transaction per batch. */
static int cmpSweep(Cov *p, uint64_t b, DepotCompactResult *pRes){
  unsigned char aCur[LAYOUT_MAX_KEY+1];
  int nCur = 0, bPidx = 1, bDone = 0, rc = SQLITE_OK;
  while( rc==SQLITE_OK && !bDone ){
    rc = store_begin(p->pStore, 1);
    if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
    rc = cmpSweepTxn(p, b, &bPidx, aCur, &nCur, &bDone, pRes);
    rc = cov_in_write(p, rc, 0);
#ifdef DEPOT_TEST
    if( rc==SQLITE_OK && !bDone && depot_gc_test_between ){
      depot_gc_test_between(p->zPath);
    }
#endif
  }
  return rc;
}

/* Compact branch b until its watermark reaches the head it had when this
** call began (or a job stays stale CMP_MAX_RETRY times in a row, which is
** counted as skipped).  Commits made meanwhile are left for the next call,
** so a writer that keeps committing cannot keep it (and the reclaim that
** follows it in the background) from finishing. */
static int cmpBranch(Cov *p, uint64_t b, DepotCompactResult *pRes){
  Plan pl;
  uint64_t iStop = 0;
  int rc = SQLITE_OK, nStale = 0, bDid = 0;
  memset(&pl, 0, sizeof(pl));
  while( rc==SQLITE_OK ){
    int bStale = 0;
    cmpPlanReset(&pl);
    pl.iBranch = b;
    p->iNowMs = cov_now_ms();
    rc = cmpPlan(p, &pl);
    if( rc==SQLITE_OK && pl.bSweep ) rc = cmpSweep(p, b, pRes);
    if( rc==SQLITE_OK && pl.iGen<0 ){         /* stale while planning */
      if( ++nStale>=CMP_MAX_RETRY ){
        pRes->nSkipped++;
        break;
      }
      continue;
    }
    if( rc!=SQLITE_OK || pl.iTarget==0 ) break;
    if( iStop==0 ) iStop = pl.iHead;
    rc = cmpBuild(p, &pl, &bStale, pRes);
    if( rc==SQLITE_OK && !bStale ) rc = cmpInstall(p, &pl, &bStale, pRes);
    if( rc==SQLITE_OK && !bStale ) rc = cmpSweep(p, b, pRes);
    if( rc==SQLITE_OK && bStale && ++nStale>=CMP_MAX_RETRY ){
      pRes->nSkipped++;
      break;
    }
    if( !bStale ){ nStale = 0; bDid = 1; }
    if( !bStale && pl.iTarget>=iStop ) break;
  }
  if( rc==SQLITE_OK && bDid ) pRes->nBranch++;
  cmpPlanReset(&pl);
  return rc;
}

/* ---- choosing branches ---- */

/* Keep the branches of s whose record names database zQual: "NAME" (any
** bucket) or "BUCKET/NAME" (branches that bucket created). */
static int cmpFilterDb(Cov *p, U64Set *s, const char *zQual){
  const char *zSlash = strchr(zQual, '/');
  const char *zDb = zSlash ? zSlash+1 : zQual;
  uint64_t iBucket = 0;
  int i, j = 0, rc = SQLITE_OK;
  if( zSlash ){
    char zBucket[LAYOUT_MAX_NAME+1];
    size_t nB = (size_t)(zSlash-zQual);
    int bFound = 0;
    if( nB<1 || nB>LAYOUT_MAX_NAME ) nB = 0;
    memcpy(zBucket, zQual, nB);
    zBucket[nB] = 0;
    if( nB ) rc = depot_bucket_find(p->pStore, zBucket, &iBucket, &bFound,
                                    p->pzErr);
    if( rc==SQLITE_OK && !bFound ){
      return cov_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %.*s"
          " does not exist", (int)(zSlash-zQual), zQual));
    }
  }
  for(i=0; rc==SQLITE_OK && i<s->n; i++){
    BranchRecord rec;
    rc = depot_branch_get(p->pStore, s->a[i], &rec, p->pzErr);
    if( rc==SQLITE_OK && strcmp(rec.zDb, zDb)==0
     && (!zSlash || rec.iBucket==iBucket) ){
      s->a[j++] = s->a[i];
    }
  }
  s->n = j;
  if( rc==SQLITE_OK && j==0 ){
    rc = cov_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s does"
        " not exist in this store", zQual));
  }
  return rc;
}

/* The own branch of name (bucket/)zDb, zBranch. */
static int cmpNamedBranch(Cov *p, const char *zQual, const char *zBranch,
                          U64Set *s){
  const char *zSlash = strchr(zQual, '/');
  char zBucket[LAYOUT_MAX_NAME+1];
  const char *zDb = zSlash ? zSlash+1 : zQual;
  size_t nB = zSlash ? (size_t)(zSlash-zQual) : 4;
  uint64_t iBucket = 0;
  DepotName nm;
  int bFound = 1, rc;
  if( nB<1 || nB>LAYOUT_MAX_NAME || !layout_name_ok(zDb) ){
    return cov_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: a database is"
        " named NAME or BUCKET/NAME, each part 1..%d bytes; got '%s'",
        LAYOUT_MAX_NAME, zQual));
  }
  memcpy(zBucket, zSlash ? zQual : "main", nB);
  zBucket[nB] = 0;
  rc = depot_bucket_find(p->pStore, zBucket, &iBucket, &bFound, p->pzErr);
  if( rc==SQLITE_OK && !bFound ){
    return cov_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
        " not exist", zBucket));
  }
  if( rc==SQLITE_OK ) rc = depot_name_resolve(p->pStore, iBucket, zDb,
                                              zBranch, &nm, p->pzErr);
  if( rc==SQLITE_OK && nm.iBranch==0 && nm.iInhBranch==0 ){
    return cov_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: database %s has"
        " no branch %s", zQual, zBranch));
  }
  if( rc==SQLITE_OK && nm.iBranch ) rc = cov_set_add(s, nm.iBranch);
  return rc;
}

/* The branches an operation covers: all, those of zDb, or one name. */
static int cmpTargets(Cov *p, const char *zDb, const char *zBranch,
                      U64Set *s){
  int rc;
  if( zBranch && !layout_name_ok(zBranch) ){
    return cov_fail(p, SQLITE_ERROR, sqlite3_mprintf("depot: branch name must"
        " be 1..%d bytes, got %d", LAYOUT_MAX_NAME, (int)strlen(zBranch)));
  }
  if( zDb && zBranch ) return cmpNamedBranch(p, zDb, zBranch, s);
  rc = cov_all_branches(p, s);
  if( rc==SQLITE_OK && zDb ) rc = cmpFilterDb(p, s, zDb);
  return rc;
}

/* ---- the public calls ---- */

int depot_compact(const char *zStore, const char *zDb, const char *zBranch,
                  DepotCompactResult *pRes, char **pzErr){
  Cov c;
  U64Set s;
  int i, rc = cov_open(&c, zStore, 0, pzErr);
  memset(pRes, 0, sizeof(*pRes));
  memset(&s, 0, sizeof(s));
  if( rc==SQLITE_OK ) rc = cmpTargets(&c, zDb, zBranch, &s);
  for(i=0; rc==SQLITE_OK && i<s.n; i++) rc = cmpBranch(&c, s.a[i], pRes);
  cov_set_free(&s);
  cov_close(&c);
  return rc;
}

/* Commits past the watermark of every branch not dropped. */
static int cmpLagTxn(Cov *p, const U64Set *s, int64_t *pnLag){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<s->n; i++){
    BranchRecord rec;
    DbHead head;
    int64_t W = 0;
    rc = depot_branch_get(p->pStore, s->a[i], &rec, p->pzErr);
    if( rc!=SQLITE_OK || rec.eState==LAYOUT_STATE_DROPPED ) continue;
    rc = depot_db_head(p->pStore, s->a[i], &head, p->pzErr);
    if( rc==SQLITE_OK ) rc = cov_br_get(p, s->a[i], LAYOUT_BR_CMPMARK, 0, &W);
    if( rc==SQLITE_OK && head.iTxid>(uint64_t)W ){
      *pnLag += (int64_t)(head.iTxid - (uint64_t)W);
    }
  }
  return rc;
}

int depot_compaction_lag(const char *zStore, int64_t *pnLag, char **pzErr){
  Cov c;
  U64Set s;
  int rc = cov_open(&c, zStore, 1, pzErr);
  *pnLag = 0;
  memset(&s, 0, sizeof(s));
  if( rc==SQLITE_OK ) rc = store_begin(c.pStore, 0);
  if( rc==SQLITE_OK ){
    rc = cov_all_branches(&c, &s);
    if( rc==SQLITE_OK ) rc = cmpLagTxn(&c, &s, pnLag);
    store_rollback(c.pStore);
  }
  cov_set_free(&s);
  cov_close(&c);
  return rc;
}

/* ---- the background threshold ---- */

/* CONFIG 02 60 "compact" 00 -> u64 threshold (absent: the default). */
static int cmpKeyThreshold(unsigned char *a){
  a[0] = 0x02; a[1] = LAYOUT_P_CONFIG;
  memcpy(a+2, "compact", 8);
  return 10;
}

static int cmpThresholdTxn(Cov *p, int64_t nSet, int64_t *pn){
  unsigned char k[LAYOUT_MAX_KEY], v[8];
  int nKey = cmpKeyThreshold(k), bHave = 0;
  int rc = cmpExists(p, k, nKey, &bHave);
  if( rc==SQLITE_OK && nSet>=0 ){
    bytes_put64(v, (uint64_t)nSet);
    rc = store_put(p->pStore, k, nKey, v, 8);
    if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
    bHave = 1;
  }
  *pn = DEPOT_COMPACT_DEFAULT_THRESHOLD;
  if( rc==SQLITE_OK && bHave ) rc = cov_get64(p, k, nKey, 0, pn);
  return rc;
}

int depot_compact_threshold(const char *zStore, int64_t nSet, int64_t *pn,
                            char **pzErr){
  Cov c;
  int rc = cov_open(&c, zStore, nSet<0, pzErr);
  if( rc==SQLITE_OK ){
    rc = store_begin(c.pStore, nSet>=0);
    if( rc!=SQLITE_OK ) rc = cov_store_err(&c, rc);
    else rc = cov_in_write(&c, cmpThresholdTxn(&c, nSet, pn), nSet<0);
  }
  cov_close(&c);
  return rc;
}

int depot_compact_threshold_read(Store *pStore, int64_t *pn){
  Cov c;
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = cmpKeyThreshold(k), bHave = 0, rc;
  char *zErr = 0;
  memset(&c, 0, sizeof(c));
  c.pStore = pStore;
  c.pzErr = &zErr;
  *pn = DEPOT_COMPACT_DEFAULT_THRESHOLD;
  rc = cmpExists(&c, k, nKey, &bHave);
  if( rc==SQLITE_OK && bHave ) rc = cov_get64(&c, k, nKey, 0, pn);
  sqlite3_free(zErr);
  return rc;
}

int depot_compact_mark(Store *pStore, uint64_t iBranch, uint64_t *piMark){
  Cov c;
  int64_t W = 0;
  char *zErr = 0;
  int rc;
  memset(&c, 0, sizeof(c));
  c.pStore = pStore;
  c.pzErr = &zErr;
  rc = cov_br_get(&c, iBranch, LAYOUT_BR_CMPMARK, 0, &W);
  *piMark = (uint64_t)W;
  sqlite3_free(zErr);
  return rc;
}

int depot_compact_branch_id(const char *zStore, uint64_t iBranch,
                            DepotCompactResult *pRes, char **pzErr){
  Cov c;
  int rc = cov_open(&c, zStore, 0, pzErr);
  memset(pRes, 0, sizeof(*pRes));
  if( rc==SQLITE_OK ) rc = cmpBranch(&c, iBranch, pRes);
  cov_close(&c);
  return rc;
}

/* ---- the background compactor ---- */

/* One queued request: compact branch iBranch of the store at zPath, then
** reclaim the store.  The queue, the thread's pid, the run counter, the
** count of requests queued or running and cmpBusy are guarded by
** cmpMutex; the thread runs for the life of the process.
**
** fork().  A child must not inherit a job in flight: the job's open store
** connection (SQLite's unix VFS would share that file's locks and -shm
** bookkeeping with the child's own connections, so the job's close in the
** parent could checkpoint and delete the -wal the child appends to) or an
** SQLite mutex the thread holds at that instant.  The fork handlers
** (registered by the first request) therefore ask a running job to
** stop at its next progress point (the thread's progress hook answers
** cmpForkStop), wait until the thread holds nothing (cmpBusy 0), and keep
** cmpMutex across fork().  The parent requeues the stopped job at the
** front; the child has no compactor thread: it forgets the parent's queue
** and starts a thread of its own on its first request. */
typedef struct CmpJob CmpJob;
struct CmpJob {
  char *zPath;
  uint64_t iBranch;
  CmpJob *pNext;
};

static pthread_mutex_t cmpMutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cmpCond = PTHREAD_COND_INITIALIZER;
static pthread_cond_t cmpIdleCond = PTHREAD_COND_INITIALIZER;
static pthread_once_t cmpForkOnce = PTHREAD_ONCE_INIT;
static CmpJob *cmpQueue = 0;
static CmpJob *cmpOrphans = 0;   /* the parent's queue, in a child */
static pid_t cmpThreadPid = 0;
static int64_t cmpRuns = 0;
static int cmpPending = 0;
static int cmpBusy = 0;          /* the thread runs a job */
static int cmpForkStop = 0;      /* atomic: a fork() waits for the job */

/* The thread's progress hook: stop when a fork() waits. */
static int cmpProgress(void *pArg, const char *zWhat, int64_t nDone,
                       int64_t nTotal, int64_t nBytes){
  (void)pArg; (void)zWhat; (void)nDone; (void)nTotal; (void)nBytes;
  return __atomic_load_n(&cmpForkStop, __ATOMIC_ACQUIRE);
}

/* Run one job.  1 if it stopped for a fork() (to be run again), else 0. */
static int cmpRunJob(CmpJob *pJob){
  DepotCompactResult r;
  DepotGcResult g;
  char *zErr = 0;
  int rc = depot_compact_branch_id(pJob->zPath, pJob->iBranch, &r, &zErr);
  if( rc==SQLITE_OK ) rc = depot_gc(pJob->zPath, &g, &zErr);
  if( rc==SQLITE_INTERRUPT && __atomic_load_n(&cmpForkStop, __ATOMIC_ACQUIRE) ){
    sqlite3_free(zErr);
    return 1;
  }
  if( rc!=SQLITE_OK ){
    char *zShow = store_pg_redact(pJob->zPath);   /* no password */
    sqlite3_log(rc, "depot: background compaction of %s failed: %s",
                zShow ? zShow : "", zErr ? zErr : "");
    sqlite3_free(zShow);
  }
  sqlite3_free(zErr);
  return 0;
}

static void *cmpThreadMain(void *pArg){
  (void)pArg;
  depot_progress_set(cmpProgress, 0);
  for(;;){
    CmpJob *pJob;
    int bAgain;
    pthread_mutex_lock(&cmpMutex);
    while( cmpQueue==0 ) pthread_cond_wait(&cmpCond, &cmpMutex);
    pJob = cmpQueue;
    cmpQueue = pJob->pNext;
    cmpBusy = 1;
    pthread_mutex_unlock(&cmpMutex);
    bAgain = cmpRunJob(pJob);
    if( !bAgain ){
      sqlite3_free(pJob->zPath);
      sqlite3_free(pJob);
    }
    pthread_mutex_lock(&cmpMutex);
    if( bAgain ){
      pJob->pNext = cmpQueue;
      cmpQueue = pJob;
    }else{
      cmpRuns++;
      cmpPending--;
    }
    cmpBusy = 0;
    pthread_cond_broadcast(&cmpIdleCond);
    pthread_mutex_unlock(&cmpMutex);
  }
  return 0;
}

/* The fork handlers (see above). */
static void cmpForkPrepare(void){
  pthread_mutex_lock(&cmpMutex);
  if( cmpBusy && cmpThreadPid==getpid() ){
    __atomic_store_n(&cmpForkStop, 1, __ATOMIC_RELEASE);
    while( cmpBusy ) pthread_cond_wait(&cmpIdleCond, &cmpMutex);
    __atomic_store_n(&cmpForkStop, 0, __ATOMIC_RELEASE);
  }
}
static void cmpForkParent(void){
  pthread_mutex_unlock(&cmpMutex);
}
static void cmpForkChild(void){
  CmpJob **pp;
  /* the child's copies of the condition variables may still count the
  ** parent thread's wait (glibc would then hang the first signal) */
  pthread_cond_init(&cmpCond, 0);
  pthread_cond_init(&cmpIdleCond, 0);
  for(pp=&cmpOrphans; *pp; pp=&(*pp)->pNext){}
  *pp = cmpQueue;
  cmpQueue = 0;
  cmpPending = 0;
  cmpBusy = 0;
  pthread_mutex_unlock(&cmpMutex);
}
static void cmpForkRegister(void){
  pthread_atfork(cmpForkPrepare, cmpForkParent, cmpForkChild);
}

/* Start the thread of this process if it is not running (cmpMutex held).
** 0 if it cannot be started. */
static int cmpStartThread(void){
  pthread_t t;
  pthread_attr_t attr;
  int ok;
  if( cmpThreadPid==getpid() ) return 1;
  while( cmpOrphans ){        /* copies of the parent's jobs, in a child */
    CmpJob *p = cmpOrphans;
    cmpOrphans = p->pNext;
    sqlite3_free(p->zPath);
    sqlite3_free(p);
  }
  if( pthread_attr_init(&attr)!=0 ) return 0;
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  ok = pthread_create(&t, &attr, cmpThreadMain, 0)==0;
  pthread_attr_destroy(&attr);
  if( ok ) cmpThreadPid = getpid();
  return ok;
}

void depot_compact_wake(const char *zPath, uint64_t iBranch){
  CmpJob *pJob, **pp;
  /* before the thread can start; not under cmpMutex, which a fork() in
  ** another thread may wait for while it holds the fork handler list */
  pthread_once(&cmpForkOnce, cmpForkRegister);
  pthread_mutex_lock(&cmpMutex);
  for(pp=&cmpQueue; *pp; pp=&(*pp)->pNext){
    if( (*pp)->iBranch==iBranch && strcmp((*pp)->zPath, zPath)==0 ) break;
  }
  if( *pp==0 && cmpStartThread()
   && (pJob = sqlite3_malloc64(sizeof(*pJob)))!=0 ){
    pJob->zPath = sqlite3_mprintf("%s", zPath);
    pJob->iBranch = iBranch;
    pJob->pNext = 0;
    if( pJob->zPath ){
      for(pp=&cmpQueue; *pp; pp=&(*pp)->pNext){}
      *pp = pJob;
      cmpPending++;
      pthread_cond_signal(&cmpCond);
    }else{
      sqlite3_free(pJob);
    }
  }
  pthread_mutex_unlock(&cmpMutex);
}

int64_t depot_compact_background_runs(void){
  int64_t n;
  pthread_mutex_lock(&cmpMutex);
  n = cmpRuns;
  pthread_mutex_unlock(&cmpMutex);
  return n;
}

int depot_compact_background_pending(void){
  int n;
  pthread_mutex_lock(&cmpMutex);
  n = cmpPending;
  pthread_mutex_unlock(&cmpMutex);
  return n;
}
