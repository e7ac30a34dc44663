/*
** gc.c -- reclaim (depot_gc, depot_gc_preview): each branch in batches,
** one write transaction each (a read transaction for the preview), so a
** writer waits at most for one batch.  A batch visits at most GC_BATCH
** commit rows, shard versions (whole shards: past GC_BATCH, the rest of
** the shard it is in), staged rows past the head (one staged page list
** with its page index rows: at most 1,025) or rows of a dropped branch, and keeps what it visits only for its own transaction: its
** memory is that of GC_BATCH rows (16 bytes a commit, 24 a shard
** version) plus the branch's coverage points, whatever the size of the
** database.  Each batch
** reads the branch's head, watermark and coverage points again, so a
** commit, a compaction or a new pin between batches is taken into account
** as it would be by a later depot_gc().  A dropped branch nothing
** pins any more loses every row; any other branch loses the COMMITS and
** VTX rows of txids at or below its compaction watermark W that are not
** coverage points (vfs/coverage.h), and every shard version that is not
** the newest version at or before some coverage point.  The freed bytes
** are credited back to the branch's, the store's and the database's
** counters in the same transaction.  Blob rows past a branch's head,
** which a write transaction staged (vfs/db.h, DepotStageStream) and a
** crash, a failed commit or a failed cleanup left behind, go too, unless a
** writer holds the branch name's write lock (it may be staging them now);
** they were never charged.  An unborn branch (vfs/layout.h) whose writer
** is gone loses its name, then its rows and record, as a dropped one.
** The progress hook (vfs/progress.c)
** is called before each branch and may stop the reclaim there.
*/
#include "config.h"
#include "vfs/coverage.h"
#include "vfs/lock.h"
#include "vfs/vfs_test.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

#define GC_BATCH 1024             /* rows one batch visits (see above) */

#ifdef DEPOT_TEST
int depot_gc_test_batch = 0;
void (*depot_gc_test_between)(const char *zStore) = 0;
#endif

static int gcBatch(void){
#ifdef DEPOT_TEST
  if( depot_gc_test_batch>0 ) return depot_gc_test_batch;
#endif
  return GC_BATCH;
}

/* Where the reclaim of one branch stands between its batches. */
typedef struct GcCursor GcCursor;
struct GcCursor {
  int bDone;
  int bStaged;              /* staged rows past the head handled */
  uint64_t iStagedHead;     /* ... the head they were past */
  int bCommitsDone;         /* every commit row up to the watermark seen */
  uint64_t iCommit;         /* ... those up to this txid are */
  uint32_t iShard;          /* shard rows of shards below it are done */
  int bCredited;            /* dropped branch: its bytes are credited */
  int iRange;               /* dropped branch: the range being cleared */
  unsigned char aKey[LAYOUT_MAX_KEY+1];  /* ... from this key on */
  int nKey;                 /* 0: from the range's start */
};

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

/* Count (and unless bDry clear) at most nMax rows of lo <= key < hi from
** pCur's key on; *pbMore is set when rows may remain, and pCur's key
** moves past the last one visited. */
static int gcRangeSome(Cov *p, GcCursor *pCur, const unsigned char *lo,
                       int nLo, const unsigned char *hi, int nHi, int nMax,
                       int bDry, int64_t *pnRow, int *pbMore){
  const unsigned char *pFrom = pCur->nKey ? pCur->aKey : lo;
  int nFrom = pCur->nKey ? pCur->nKey : nLo;
  unsigned char aNext[LAYOUT_MAX_KEY+1];
  int64_t n = 0;
  int nNext = 0;
  int rc = store_clear_some(p->pStore, pFrom, nFrom, hi, nHi, nMax, bDry, &n,
                            aNext, (int)sizeof(aNext), &nNext);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  *pnRow += n;
  *pbMore = nNext>0;
  memcpy(pCur->aKey, aNext, nNext);
  pCur->nKey = nNext;
  return SQLITE_OK;
}

/* A dropped branch nothing pins: every row of it goes, its BR rows, then
** its pins, then its record, at most a batch of rows per call.  Its bytes
** are credited back first, while its record still names its database. */
static int gcDropBranch(Cov *p, uint64_t b, int bDry, DepotGcResult *pRes,
                        GcCursor *pCur){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int64_t nQuota = 0;
  int n = 0, nMax = gcBatch(), bMore = 0, rc = SQLITE_OK;
  if( !pCur->bCredited ){
    pCur->nKey = 0;
    rc = cov_br_get(p, b, LAYOUT_BR_QUOTA, 1, &nQuota);
    if( rc==SQLITE_OK && !bDry ) rc = cov_credit(p, b, -nQuota);
    if( rc!=SQLITE_OK ) return rc;
    pCur->bCredited = 1;
    pRes->nBranch++;
    pRes->nByte += nQuota;
  }
  while( rc==SQLITE_OK && nMax>0 && pCur->iRange<3 ){
    int64_t nRow = 0;
    switch( pCur->iRange ){
      case 0:
        n = layout_key_br(lo, b, 0);
        layout_key_br(hi, b+1, 0);
        break;
      case 1:
        n = layout_key_pin(lo, b, 0, 0, 0, 0) - 9;
        layout_key_pin(hi, b+1, 0, 0, 0, 0);
        break;
      default:
        n = layout_key_branch(lo, b);
        layout_key_branch(hi, b+1);
        break;
    }
    rc = gcRangeSome(p, pCur, lo, n, hi, n, nMax, bDry, &nRow, &bMore);
    pRes->nRow += nRow;
    nMax -= (int)nRow;
    if( rc==SQLITE_OK && !bMore ) pCur->iRange++;
  }
  if( pCur->iRange>=3 ) pCur->bDone = 1;
  return rc;
}

/* Shard rows of one branch in key order (shard, as_of). */
typedef struct ShardList ShardList;
struct ShardList {
  int n, nAlloc;
  struct ShardVer { uint32_t iShard; uint64_t iAsOf, nBlob; } *a;
  int nMax;                 /* past this many, stop at the next shard ... */
  int bMore;                /* ... whose number is iNext */
  uint32_t iNext;
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
  if( l->n>=l->nMax && l->a[l->n-1].iShard!=bytes_get32(pKey+11) ){
    l->bMore = 1;
    l->iNext = bytes_get32(pKey+11);
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
** coverage point, among the shards from pCur->iShard on that one batch
** visits.  *pnByte gets the bytes freed. */
static int gcShards(Cov *p, uint64_t b, const U64Set *pK, int bDry,
                    DepotGcResult *pRes, int64_t *pnByte, GcCursor *pCur){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  ShardList l;
  int i, rc;
  int64_t nBefore = pRes->nByte;
  memset(&l, 0, sizeof(l));
  l.nMax = gcBatch();
  rc = store_scan(p->pStore, lo, layout_key_shard(lo, b, pCur->iShard, 0),
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
  if( l.bMore ) pCur->iShard = l.iNext;
  else pCur->bDone = 1;
  return rc;
}

/* Staged rows past the head iHead of b (chunk rows, page index rows and
** the STAGE rows that name them) and published STAGE rows, when no
** writer of the name holds its lock (checked inside this write
** transaction: a writer that takes it later stages only after this
** transaction), at most a batch of them; pCur->bStaged once none is left.
** A preview counts the chunk rows; a head that moved since its last
** batch starts their range over. */
static int gcStaged(Cov *p, uint64_t b, const BranchRecord *pRec,
                    uint64_t iHead, int bDry, DepotGcResult *pRes,
                    GcCursor *pCur){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  DepotLock lk;
  int bExists = 0, bHeld = 0, bMore = 0, nLo, nHi;
  int64_t nRow = 0;
  int rc = depot_stage_exists(p->pStore, b, iHead+1, &bExists, p->pzErr);
  if( rc==SQLITE_OK && bExists ){
    depot_lock_init(&lk, p->pStore, pRec->iBucket, pRec->zDb, pRec->zBranch);
    rc = depot_lock_other(&lk, &bHeld, p->pzErr);
  }
  if( rc!=SQLITE_OK || !bExists || bHeld ){
    pCur->bStaged = 1;
    pCur->nKey = 0;
    return rc;
  }
  if( !bDry ){
    /* published STAGE rows, or one staged page list with its page index
    ** rows, or chunk rows (vfs/db.h) */
    rc = depot_stage_step(p->pStore, b, gcBatch(), &nRow, &bMore, p->pzErr);
    pRes->nRow += nRow;
    if( rc==SQLITE_OK && !bMore ) pCur->bStaged = 1;
    return rc;
  }
  if( pCur->iStagedHead!=iHead ) pCur->nKey = 0;
  pCur->iStagedHead = iHead;
  nLo = layout_key_delta(lo, b, iHead+1, 0);
  nHi = layout_key_br(hi, b, LAYOUT_BR_DELTA+1);
  rc = gcRangeSome(p, pCur, lo, nLo, hi, nHi, gcBatch(), bDry, &nRow,
                   &bMore);
  pRes->nRow += nRow;
  if( rc==SQLITE_OK && !bMore ) pCur->bStaged = 1;
  return rc;
}

/* A branch something can still read: old commit rows and shards, one
** batch of them (the commit rows first). */
static int gcKeepBranch(Cov *p, uint64_t b, const BranchRecord *pRec,
                        int bDry, DepotGcResult *pRes, GcCursor *pCur){
  unsigned char k[LAYOUT_MAX_KEY];
  U64Set K;
  DbHead head;
  FoldScan f;
  int64_t W = 0, nByte = 0;
  int rc = depot_db_head(p->pStore, b, &head, p->pzErr);
  memset(&K, 0, sizeof(K));
  memset(&f, 0, sizeof(f));
  if( rc==SQLITE_OK ) rc = cov_br_get(p, b, LAYOUT_BR_CMPMARK, 0, &W);
  if( rc==SQLITE_OK && !pCur->bStaged ){
    rc = gcStaged(p, b, pRec, head.iTxid, bDry, pRes, pCur);
    if( rc!=SQLITE_OK || !pCur->bStaged ) return rc;   /* more next batch */
  }
  if( rc==SQLITE_OK ) rc = cov_points(p, b, pRec, head.iTxid, &K);
  f.pK = &K;
  f.nMax = gcBatch();
  if( rc==SQLITE_OK && !pCur->bCommitsDone ){
    if( (uint64_t)W>pCur->iCommit ){
      rc = cov_scan_commits(p, b, pCur->iCommit, (uint64_t)W, &f);
    }
    if( f.nCommit>=f.nMax ){
      pCur->iCommit = f.iLast;
    }else{
      pCur->bCommitsDone = 1;
    }
  }
  if( rc==SQLITE_OK && !bDry ) rc = cov_drop_commits(p, b, &f);
  pRes->nRow += 2*(int64_t)f.drop.n;
  if( rc==SQLITE_OK && pCur->bCommitsDone && f.nCommit==0 ){
    rc = gcShards(p, b, &K, bDry, pRes, &nByte, pCur);
  }
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

/* One batch of the reclaim of branch b in one transaction (a read one
** when bDry); pCur->bDone once the branch is through. */
static int gcBranch(Cov *p, uint64_t b, int bDry, DepotGcResult *pRes,
                    GcCursor *pCur){
  unsigned char k[LAYOUT_MAX_KEY];
  BranchRecord rec;
  int64_t nRef = 0;
  int rc = store_begin(p->pStore, bDry ? 0 : 1);
  if( rc!=SQLITE_OK ) return cov_store_err(p, rc);
  p->iNowMs = cov_now_ms();
  rc = depot_branch_get(p->pStore, b, &rec, p->pzErr);
  if( rc==SQLITE_NOTFOUND ){
    store_rollback(p->pStore);
    pCur->bDone = 1;
    return SQLITE_OK;                 /* reclaimed meanwhile */
  }
  if( rc==SQLITE_OK ) rc = cov_get64(p, k, layout_key_branch_sub(k, b,
                                     LAYOUT_BRANCH_REFCOUNT), 1, &nRef);
  if( rc==SQLITE_OK ) rc = cov_load_buckets(p);
  if( rc==SQLITE_OK && !bDry && nRef<=0 && !pCur->bCredited ){
    int bGone = 0;                /* unborn, its writer gone: drop it */
    rc = depot_branch_abandon(p->pStore, b, &rec, &bGone, p->pzErr);
    if( bGone ) rec.eState = LAYOUT_STATE_DROPPED;
  }
  if( rc==SQLITE_OK ){
    if( rec.eState==LAYOUT_STATE_DROPPED && nRef<=0 ){
      rc = gcDropBranch(p, b, bDry, pRes, pCur);
    }else if( pCur->bCredited ){
      pCur->bDone = 1;                /* pinned again meanwhile */
    }else{
      rc = gcKeepBranch(p, b, &rec, bDry, pRes, pCur);
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
    {
      GcCursor cur;
      memset(&cur, 0, sizeof(cur));
      while( rc==SQLITE_OK ){
        rc = gcBranch(&c, s.a[i], bDry, pRes, &cur);
        if( rc!=SQLITE_OK || cur.bDone ) break;
#ifdef DEPOT_TEST
        if( depot_gc_test_between ) depot_gc_test_between(zStore);
#endif
      }
    }
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
