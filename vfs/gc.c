/*
** gc.c -- reclaim (depot_gc, depot_gc_preview): one write transaction per
** branch (a read transaction for the preview).  A dropped branch nothing
** pins any more loses every row; any other branch loses the COMMITS and
** VTX rows of txids at or below its compaction watermark W that are not
** coverage points (vfs/coverage.h), and every shard version that is not
** the newest version at or before some coverage point.  The freed bytes
** are credited back to the branch's, the store's and the database's
** counters in the same transaction.  Blob rows past a branch's head,
** which a write transaction staged (vfs/db.h, DepotStageStream) and a
** crash, a failed commit or a failed cleanup left behind, go too, unless a
** writer holds the branch name's write lock (it may be staging them now);
** they were never charged.  The progress hook (vfs/progress.c)
** is called before each branch and may stop the reclaim there.
*/
#include "config.h"
#include "vfs/coverage.h"
#include "vfs/lock.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

static int gcCountRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  (void)pKey; (void)nKey; (void)pVal; (void)nVal;
  (*(int64_t*)pArg)++;
  return 0;
}

/* Count (and unless bDry clear) the rows lo <= key < hi. */
static int gcRange(Cov *p, const unsigned char *lo, int nLo,
                   const unsigned char *hi, int nHi, int bDry,
                   int64_t *pnRow){
  int rc = store_scan(p->pStore, lo, nLo, hi, nHi, 0, -1, gcCountRow, pnRow);
  if( rc==SQLITE_OK && !bDry ) rc = store_clear_range(p->pStore, lo, nLo,
                                                      hi, nHi);
  return rc==SQLITE_OK ? rc : cov_store_err(p, rc);
}

/* A dropped branch nothing pins: every row of it goes.  Its bytes are
** credited back first, while its record still names its database. */
static int gcDropBranch(Cov *p, uint64_t b, int bDry, DepotGcResult *pRes){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int64_t nQuota = 0;
  int n, rc = cov_br_get(p, b, LAYOUT_BR_QUOTA, 1, &nQuota);
  if( rc==SQLITE_OK && !bDry ) rc = cov_credit(p, b, -nQuota);
  if( rc==SQLITE_OK ){
    n = layout_key_br(lo, b, 0);
    layout_key_br(hi, b+1, 0);
    rc = gcRange(p, lo, n, hi, n, bDry, &pRes->nRow);
  }
  if( rc==SQLITE_OK ){
    n = layout_key_branch(lo, b);
    layout_key_branch(hi, b+1);
    rc = gcRange(p, lo, n, hi, n, bDry, &pRes->nRow);
  }
  if( rc==SQLITE_OK ){
    n = layout_key_pin(lo, b, 0, 0, 0, 0) - 9;
    layout_key_pin(hi, b+1, 0, 0, 0, 0);
    rc = gcRange(p, lo, n, hi, n, bDry, &pRes->nRow);
  }
  if( rc==SQLITE_OK ){
    pRes->nBranch++;
    pRes->nByte += nQuota;
  }
  return rc;
}

/* Shard rows of one branch in key order (shard, as_of). */
typedef struct ShardList ShardList;
struct ShardList {
  int n, nAlloc;
  struct ShardVer { uint32_t iShard; uint64_t iAsOf, nBlob; } *a;
  int rc;
};

static int gcShardRow(void *pArg, const unsigned char *pKey, int nKey,
                      const unsigned char *pVal, int nVal){
  ShardList *l = (ShardList*)pArg;
  ShardRow row;
  if( nKey!=23 || layout_shard_decode(pVal, nVal, &row)!=SQLITE_OK ){
    l->rc = SQLITE_CORRUPT;
    return 1;
  }
  if( l->n>=l->nAlloc ){
    int nNew = l->nAlloc ? l->nAlloc*2 : 64;
    struct ShardVer *a = sqlite3_realloc64(l->a, sizeof(*a)*nNew);
    if( a==0 ){ l->rc = SQLITE_NOMEM; return 1; }
    l->a = a;
    l->nAlloc = nNew;
  }
  l->a[l->n].iShard = bytes_get32(pKey+11);
  l->a[l->n].iAsOf = bytes_get64(pKey+15);
  l->a[l->n++].nBlob = row.nBlob;
  return 0;
}

/* Delete shard version i of l (row and chunks). */
static int gcShardVersion(Cov *p, uint64_t b, const struct ShardVer *v,
                          int bDry, DepotGcResult *pRes){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_shard_chunk(lo, b, v->iShard, v->iAsOf, 0);
  int rc;
  layout_key_shard_chunk(hi, b, v->iShard, v->iAsOf+1, 0);
  rc = gcRange(p, lo, n, hi, n, bDry, &pRes->nRow);
  if( rc==SQLITE_OK && !bDry ){
    rc = store_clear(p->pStore, lo, layout_key_shard(lo, b, v->iShard,
                                                     v->iAsOf));
    if( rc!=SQLITE_OK ) rc = cov_store_err(p, rc);
  }
  pRes->nRow++;
  pRes->nByte += (int64_t)v->nBlob;
  return rc;
}

/* Every shard version of b that is not the newest at or before some
** coverage point.  *pnByte gets the bytes freed. */
static int gcShards(Cov *p, uint64_t b, const U64Set *pK, int bDry,
                    DepotGcResult *pRes, int64_t *pnByte){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  ShardList l;
  int i, rc;
  int64_t nBefore = pRes->nByte;
  memset(&l, 0, sizeof(l));
  rc = store_scan(p->pStore, lo, layout_key_br(lo, b, LAYOUT_BR_SHARD),
                  hi, layout_key_br(hi, b, LAYOUT_BR_SHARD+1), 0, -1,
                  gcShardRow, &l);
  if( rc!=SQLITE_OK ) rc = cov_store_err(p, rc);
  else if( l.rc!=SQLITE_OK ) rc = cov_fail(p, l.rc, sqlite3_mprintf(
      "depot: corrupt shard row of branch %llu", (unsigned long long)b));
  for(i=0; rc==SQLITE_OK && i<l.n; i++){
    int bLast = i+1==l.n || l.a[i+1].iShard!=l.a[i].iShard;
    uint64_t c = cov_set_ceil(pK, l.a[i].iAsOf);
    if( c && (bLast || c<l.a[i+1].iAsOf) ) continue;
    rc = gcShardVersion(p, b, &l.a[i], bDry, pRes);
  }
  sqlite3_free(l.a);
  *pnByte = pRes->nByte - nBefore;
  return rc;
}

/* Staged blob rows past the head iHead of b, when no writer of the name
** holds its lock (checked inside this write transaction: a writer that
** takes it later stages only after this transaction). */
static int gcStaged(Cov *p, uint64_t b, const BranchRecord *pRec,
                    uint64_t iHead, int bDry, DepotGcResult *pRes){
  DepotLock lk;
  int bExists = 0, bHeld = 0;
  int64_t nRow = 0;
  int rc = depot_stage_exists(p->pStore, b, iHead+1, &bExists, p->pzErr);
  if( rc!=SQLITE_OK || !bExists ) return rc;
  depot_lock_init(&lk, p->pStore, pRec->iBucket, pRec->zDb, pRec->zBranch);
  rc = depot_lock_other(&lk, &bHeld, p->pzErr);
  if( rc!=SQLITE_OK || bHeld ) return rc;
  if( bDry ){
    unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
    int nLo = layout_key_delta(lo, b, iHead+1, 0);
    int nHi = layout_key_br(hi, b, LAYOUT_BR_DELTA+1);
    rc = store_scan(p->pStore, lo, nLo, hi, nHi, 0, -1, gcCountRow, &nRow);
    if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  }else{
    rc = depot_stage_clear(p->pStore, b, iHead+1, &nRow, p->pzErr);
  }
  pRes->nRow += nRow;
  return rc;
}

/* A branch something can still read: old commit rows and shards. */
static int gcKeepBranch(Cov *p, uint64_t b, const BranchRecord *pRec,
                        int bDry, DepotGcResult *pRes){
  unsigned char k[LAYOUT_MAX_KEY];
  U64Set K;
  DbHead head;
  FoldScan f;
  int64_t W = 0, nByte = 0;
  int rc = depot_db_head(p->pStore, b, &head, p->pzErr);
  memset(&K, 0, sizeof(K));
  memset(&f, 0, sizeof(f));
  if( rc==SQLITE_OK ) rc = cov_br_get(p, b, LAYOUT_BR_CMPMARK, 0, &W);
  if( rc==SQLITE_OK ) rc = gcStaged(p, b, pRec, head.iTxid, bDry, pRes);
  if( rc==SQLITE_OK ) rc = cov_points(p, b, pRec, head.iTxid, &K);
  f.pK = &K;
  if( rc==SQLITE_OK && W>0 ) rc = cov_scan_commits(p, b, 0, (uint64_t)W, &f);
  if( rc==SQLITE_OK && !bDry ) rc = cov_drop_commits(p, b, &f);
  pRes->nRow += 2*(int64_t)f.drop.n;
  if( rc==SQLITE_OK ) rc = gcShards(p, b, &K, bDry, pRes, &nByte);
  if( rc==SQLITE_OK && !bDry && (f.drop.n || nByte) ){
    rc = store_add(p->pStore, k, layout_key_br(k, b, LAYOUT_BR_CMPGEN), 1, 0);
    if( rc!=SQLITE_OK ) rc = cov_store_err(p, rc);
    if( rc==SQLITE_OK ) rc = cov_credit(p, b, -nByte);
  }
  cov_set_free(&f.drop);
  cov_set_free(&f.dropVs);
  cov_set_free(&K);
  return rc;
}

/* Reclaim one branch in one transaction (a read one when bDry). */
static int gcBranch(Cov *p, uint64_t b, int bDry, DepotGcResult *pRes){
  unsigned char k[LAYOUT_MAX_KEY];
  BranchRecord rec;
  int64_t nRef = 0;
  int rc = store_begin(p->pStore, bDry ? 0 : 1);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  p->iNowMs = cov_now_ms();
  rc = depot_branch_get(p->pStore, b, &rec, p->pzErr);
  if( rc==SQLITE_NOTFOUND ){
    store_rollback(p->pStore);
    return SQLITE_OK;                 /* reclaimed meanwhile */
  }
  if( rc==SQLITE_OK ) rc = cov_get64(p, k, layout_key_branch_sub(k, b,
                                     LAYOUT_BRANCH_REFCOUNT), 1, &nRef);
  if( rc==SQLITE_OK ) rc = cov_load_buckets(p);
  if( rc==SQLITE_OK ){
    if( rec.eState==LAYOUT_STATE_DROPPED && nRef<=0 ){
      rc = gcDropBranch(p, b, bDry, pRes);
    }else{
      rc = gcKeepBranch(p, b, &rec, bDry, pRes);
    }
  }
  return cov_in_write(p, rc, bDry);
}

static int gcRun(const char *zStore, int bDry, DepotGcResult *pRes,
                 char **pzErr){
  Cov c;
  U64Set s;
  int i, rc = cov_open(&c, zStore, bDry, pzErr);
  memset(pRes, 0, sizeof(*pRes));
  memset(&s, 0, sizeof(s));
  if( rc==SQLITE_OK ) rc = cov_all_branches(&c, &s);
  for(i=0; rc==SQLITE_OK && i<s.n; i++){
    /* Between branches: every branch reclaimed so far is committed. */
    if( !bDry && depot_progress_report("gc", i, s.n, pRes->nByte) ){
      rc = cov_fail(&c, SQLITE_INTERRUPT,
                    sqlite3_mprintf("depot: interrupted"));
      break;
    }
    rc = gcBranch(&c, s.a[i], bDry, pRes);
  }
  if( rc==SQLITE_OK && !bDry ) depot_progress_report("gc", s.n, s.n,
                                                     pRes->nByte);
  if( rc==SQLITE_OK && !bDry ){
    /* the freed pages go back to the file system, the -wal is truncated */
    rc = store_maintain(c.pStore, STORE_MAINT_RECLAIM);
    if( rc!=SQLITE_OK ) rc = cov_store_err(&c, rc);
  }
  cov_set_free(&s);
  cov_close(&c);
  return rc;
}

int depot_gc(const char *zStore, DepotGcResult *pRes, char **pzErr){
  return gcRun(zStore, 0, pRes, pzErr);
}

int depot_gc_preview(const char *zStore, DepotGcResult *pRes, char **pzErr){
  return gcRun(zStore, 1, pRes, pzErr);
}

int depot_vacuum(const char *zStore, int64_t *pnBefore, int64_t *pnAfter,
                 char **pzErr){
  Cov c;
  int rc = cov_open(&c, zStore, 0, pzErr);
  *pnBefore = *pnAfter = 0;
  if( rc!=SQLITE_OK ){           /* *pzErr says why; there is no store */
    cov_close(&c);
    return rc;
  }
  rc = store_physical_bytes(c.pStore, pnBefore);
  if( rc==SQLITE_OK ) rc = store_maintain(c.pStore, STORE_MAINT_VACUUM);
  if( rc==SQLITE_OK ) rc = store_physical_bytes(c.pStore, pnAfter);
  if( rc!=SQLITE_OK ) rc = cov_store_err(&c, rc);
  cov_close(&c);
  return rc;
}
