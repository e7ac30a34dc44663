/*
** branch.c -- branch records, forks, buckets and pins in the outer store
** (see vfs/db.h): the format-version row (written with the first branch,
** checked by every open of a store), resolving a (bucket, db, branch) name
** through bucket parents, the read chain of a forked branch, the state of a branch as of
** a txid, pointer rows with their history, and DB_PIN rows with the
** refcount / descendant-pin / restore-point-pin summaries kept per branch.
*/
#include "config.h"
#include "vfs/db.h"
#include "vfs/lock.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <sys/time.h>

#define BRANCH_MAX_BUCKET_DEPTH 64

static int brErr(char **pzErr, int rc, char *zMsg){
  if( pzErr ){
    sqlite3_free(*pzErr);
    *pzErr = zMsg;
  }else{
    sqlite3_free(zMsg);
  }
  return rc;
}

static int brStoreErr(Store *pStore, char **pzErr, int rc){
  return brErr(pzErr, rc, sqlite3_mprintf("depot: %s", store_errmsg(pStore)));
}

static uint64_t brNowMs(void){
  struct timeval tv;
  gettimeofday(&tv, 0);
  return (uint64_t)tv.tv_sec*1000 + (uint64_t)tv.tv_usec/1000;
}

/* ---- the format row ---- */

int depot_db_check_format(Store *pStore, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int nKey = layout_key_format(k);
  int rc = store_get(pStore, k, nKey, &pVal, &nVal);
  uint32_t v = (pVal && nVal==4) ? bytes_get32(pVal) : 0;
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal && (v<LAYOUT_VERSION_OLDEST || v>LAYOUT_VERSION) ){
    rc = brErr(pzErr, SQLITE_CANTOPEN, sqlite3_mprintf("depot: the store has"
               " an unknown layout version (this build reads versions %d"
               " to %d)", LAYOUT_VERSION_OLDEST, LAYOUT_VERSION));
  }else if( pVal && v!=LAYOUT_VERSION ){
    /* the store backend migrated the file when it opened it writable:
    ** say so, so that builds that read only the old layout refuse it (a
    ** read-only handle cannot write and reads the old layout as it is) */
    unsigned char a[4];
    bytes_put32(a, LAYOUT_VERSION);
    rc = store_put(pStore, k, nKey, a, 4);
    if( (rc&0xff)==SQLITE_READONLY ) rc = SQLITE_OK;
    if( rc!=SQLITE_OK ) rc = brStoreErr(pStore, pzErr, rc);
  }
  sqlite3_free(pVal);
  return rc;
}

/* ---- one-row scans ---- */

typedef struct BrHit BrHit;
struct BrHit {
  int bFound;
  unsigned char aKey[LAYOUT_MAX_KEY];
  int nKey;
  unsigned char aVal[LAYOUT_MAX_ROW];
  int nVal;
};

static int brHitRow(void *pArg, const unsigned char *pKey, int nKey,
                    const unsigned char *pVal, int nVal){
  BrHit *p = (BrHit*)pArg;
  p->bFound = 1;
  p->nKey = nKey<LAYOUT_MAX_KEY ? nKey : LAYOUT_MAX_KEY;
  memcpy(p->aKey, pKey, p->nKey);
  p->nVal = nVal<LAYOUT_MAX_ROW ? nVal : -1;
  if( p->nVal>0 ) memcpy(p->aVal, pVal, nVal);
  return 1;
}

/* The last row with lo <= key < hi, if any. */
static int brLast(Store *pStore, const unsigned char *lo, int nLo,
                  const unsigned char *hi, int nHi, BrHit *pHit,
                  char **pzErr){
  int rc;
  memset(pHit, 0, sizeof(*pHit));
  rc = store_scan(pStore, lo, nLo, hi, nHi, STORE_SCAN_REVERSE, 1,
                  brHitRow, pHit);
  return rc==SQLITE_OK ? rc : brStoreErr(pStore, pzErr, rc);
}

/* ---- pointers ---- */

/* The pointer of (zDb, zBranch) in bucket iBucket as of sequence iCapVs
** (UINT64_MAX: now).  *pbFound 0 when none; a found 0 id is a tombstone. */
static int brPtrAt(Store *pStore, uint64_t iBucket, const char *zDb,
                   const char *zBranch, uint64_t iCapVs, int *pbFound,
                   uint64_t *piBranch, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, n, rc;
  PtrValue pv;
  BrHit hit;
  *pbFound = 0;
  *piBranch = 0;
  rc = store_get(pStore, k, layout_key_ptr(k, iBucket, zDb, zBranch),
                 &pVal, &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal ){
    rc = layout_ptr_decode(pVal, nVal, &pv);
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK ){
      return brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
          "depot: corrupt pointer row of database %s", zDb));
    }
    if( pv.iVs<=iCapVs ){
      *pbFound = 1;
      *piBranch = pv.iBranch;
      return SQLITE_OK;
    }
  }
  if( iCapVs==UINT64_MAX ) return SQLITE_OK;
  n = layout_key_ptr_hist(k, iBucket, zDb, zBranch, 0);
  layout_key_ptr_hist(hi, iBucket, zDb, zBranch, iCapVs+1);
  rc = brLast(pStore, k, n, hi, n, &hit, pzErr);
  if( rc==SQLITE_OK && hit.bFound ){
    PtrHistory h;
    if( layout_hist_decode(hit.aVal, hit.nVal, &h)!=SQLITE_OK ){
      return brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
          "depot: corrupt pointer history row of database %s", zDb));
    }
    *pbFound = 1;
    *piBranch = h.iNew;
  }
  return rc;
}

static int brBucketGet(Store *pStore, uint64_t iBucket, BucketRecord *pRec,
                       char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int rc = store_get(pStore, k, layout_key_bucket(k, iBucket, 0), &pVal,
                     &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal==0 || layout_bucket_decode(pVal, nVal, pRec)!=SQLITE_OK ){
    rc = brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
        "depot: bucket %llu has no valid record", (unsigned long long)iBucket));
  }
  sqlite3_free(pVal);
  return rc;
}

int depot_name_resolve(Store *pStore, uint64_t iBucket, const char *zDb,
                       const char *zBranch, DepotName *pName, char **pzErr){
  uint64_t b = iBucket, iCap = UINT64_MAX, iId = 0;
  int bFound = 0, nDepth = 0, rc;
  memset(pName, 0, sizeof(*pName));
  for(;;){
    BucketRecord rec;
    rc = brPtrAt(pStore, b, zDb, zBranch, iCap, &bFound, &iId, pzErr);
    if( rc!=SQLITE_OK || bFound || b==0 ) break;
    if( ++nDepth>BRANCH_MAX_BUCKET_DEPTH ){
      return brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
          "depot: bucket ancestry deeper than %d", BRANCH_MAX_BUCKET_DEPTH));
    }
    rc = brBucketGet(pStore, b, &rec, pzErr);
    if( rc!=SQLITE_OK ) return rc;
    if( rec.iForkVs<iCap ) iCap = rec.iForkVs;
    b = rec.iParent;
  }
  if( rc!=SQLITE_OK || !bFound || iId==0 ) return rc;
  if( b==iBucket ){
    pName->iBranch = iId;
    return SQLITE_OK;
  }
  pName->iInhBranch = iId;
  return depot_db_txid_at_vs(pStore, iId, iCap, &pName->iInhTxid, pzErr);
}

int depot_bucket_find(Store *pStore, const char *zBucket, uint64_t *piBucket,
                      int *pbFound, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, rc;
  *piBucket = 0;
  *pbFound = 1;
  if( strcmp(zBucket, "main")==0 ) return SQLITE_OK;
  rc = store_get(pStore, k, layout_key_bucket_ptr(k, zBucket), &pVal, &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  *pbFound = pVal!=0;
  if( pVal && nVal!=8 ){
    rc = brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
        "depot: corrupt pointer row of bucket %s", zBucket));
  }else if( pVal ){
    *piBucket = bytes_get64(pVal);
  }
  sqlite3_free(pVal);
  return rc;
}

int depot_ptr_set(Store *pStore, uint64_t iBucket, const char *zDb,
                  const char *zBranch, uint64_t iOld, uint64_t iNew,
                  uint64_t iVs, int eReason, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  PtrValue pv;
  PtrHistory h;
  int nKey = layout_key_ptr(k, iBucket, zDb, zBranch), rc;
  pv.iBranch = iNew;
  pv.iVs = iVs;
  if( iNew==0 && iBucket==0 ){
    rc = store_clear(pStore, k, nKey);
  }else{
    rc = store_put(pStore, k, nKey, v, layout_ptr_encode(v, &pv));
  }
  h.iOld = iOld;
  h.iNew = iNew;
  h.iTimeMs = brNowMs();
  h.eReason = eReason;
  if( rc==SQLITE_OK ) rc = store_put(pStore, k,
      layout_key_ptr_hist(k, iBucket, zDb, zBranch, iVs), v,
      layout_hist_encode(v, &h));
  return rc==SQLITE_OK ? rc : brStoreErr(pStore, pzErr, rc);
}

int depot_next_vs(Store *pStore, uint64_t *piVs, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  int64_t iNew = 0;
  int rc = store_add(pStore, k, layout_key_ctr(k, "vs"), 1, &iNew);
  *piVs = (uint64_t)iNew;
  return rc==SQLITE_OK ? rc : brStoreErr(pStore, pzErr, rc);
}

/* ---- branch records, chains, states ---- */

int depot_branch_get(Store *pStore, uint64_t iBranch, BranchRecord *pRec,
                     char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int rc = store_get(pStore, k, layout_key_branch(k, iBranch), &pVal, &nVal);
  memset(pRec, 0, sizeof(*pRec));
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal==0 ){
    rc = brErr(pzErr, SQLITE_NOTFOUND, sqlite3_mprintf(
        "depot: branch %llu does not exist", (unsigned long long)iBranch));
  }else if( layout_branch_decode(pVal, nVal, pRec)!=SQLITE_OK ){
    rc = brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
        "depot: corrupt record of branch %llu", (unsigned long long)iBranch));
  }
  sqlite3_free(pVal);
  return rc;
}

int depot_db_chain(Store *pStore, uint64_t iBranch, uint64_t iCap,
                   DepotChain *pChain, char **pzErr){
  uint64_t b = iBranch, c = iCap;
  pChain->n = 0;
  while( b ){
    BranchRecord rec;
    int rc;
    if( pChain->n>DEPOT_MAX_FORK_DEPTH ){
      return brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf("depot: branch"
          " %llu has more than %d ancestors", (unsigned long long)iBranch,
          DEPOT_MAX_FORK_DEPTH));
    }
    rc = depot_branch_get(pStore, b, &rec, pzErr);
    if( rc==SQLITE_NOTFOUND ) rc = SQLITE_CORRUPT;
    if( rc!=SQLITE_OK ) return rc;
    pChain->aBranch[pChain->n] = b;
    pChain->aGapLo[pChain->n] = pChain->aGapHi[pChain->n] = 0;
    pChain->aCap[pChain->n++] = c;
    b = rec.iParent;
    c = rec.iParentTxid;
  }
  return SQLITE_OK;
}

int depot_db_state_at(Store *pStore, uint64_t iBranch, uint64_t iTxid,
                      DbHead *pHead, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, rc;
  CommitRow row;
  memset(pHead, 0, sizeof(*pHead));
  if( iTxid==0 ){
    rc = store_get(pStore, k, layout_key_br(k, iBranch, LAYOUT_BR_FORKHEAD),
                   &pVal, &nVal);
    if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
    if( pVal && layout_head_decode(pVal, nVal, pHead)!=SQLITE_OK ){
      rc = brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
          "depot: corrupt fork head of branch %llu", (unsigned long long)iBranch));
    }
    sqlite3_free(pVal);
    return rc;
  }
  rc = store_get(pStore, k, layout_key_commit(k, iBranch, iTxid), &pVal, &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal==0 ){
    rc = brErr(pzErr, SQLITE_NOTFOUND, sqlite3_mprintf("depot: txid %llu of"
        " branch %llu does not exist or is no longer retained",
        (unsigned long long)iTxid, (unsigned long long)iBranch));
  }else if( layout_commit_decode(pVal, nVal, &row)!=SQLITE_OK ){
    rc = brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt commit"
        " row %llu", (unsigned long long)iTxid));
  }else{
    pHead->iTxid = row.iTxid;
    pHead->szPage = row.szPage;
    pHead->nPage = row.nPage;
    pHead->iChecksum = row.iChecksum;
    pHead->iVs = row.iVs;
  }
  sqlite3_free(pVal);
  return rc;
}

int depot_db_txid_at_vs(Store *pStore, uint64_t iBranch, uint64_t iVs,
                        uint64_t *piTxid, char **pzErr){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
  int n = layout_key_vtx(lo, iBranch, 0);
  BrHit hit;
  int rc;
  *piTxid = 0;
  if( iVs==UINT64_MAX ){
    n = layout_key_br(lo, iBranch, LAYOUT_BR_VTX);
    layout_key_br(hi, iBranch, LAYOUT_BR_VTX+1);
  }else{
    layout_key_vtx(hi, iBranch, iVs+1);
  }
  rc = brLast(pStore, lo, n, hi, n, &hit, pzErr);
  if( rc==SQLITE_OK && hit.bFound ){
    if( hit.nVal!=8 ){
      return brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf(
          "depot: corrupt VTX row of branch %llu", (unsigned long long)iBranch));
    }
    *piTxid = bytes_get64(hit.aVal);
  }
  return rc;
}

/* ---- pins ---- */

typedef struct PinMin PinMin;
struct PinMin {
  int bFork;                /* looking for 'f' rows, else 'r'/'h' */
  int bFound;
  uint64_t iTxid;
};

static int brPinRow(void *pArg, const unsigned char *pKey, int nKey,
                    const unsigned char *pVal, int nVal){
  PinMin *p = (PinMin*)pArg;
  int bFork = nKey>18 && pKey[18]==LAYOUT_PIN_FORK;
  (void)pVal; (void)nVal;
  if( nKey<19 || bFork!=p->bFork ) return 0;
  p->bFound = 1;
  p->iTxid = bytes_get64(pKey+10);
  return 1;
}

/* Recompute the descendant pin (bFork) or the restore-point pin of
** iBranch from its DB_PIN rows: the smallest txid, or no row. */
static int brPinSummary(Store *pStore, uint64_t iBranch, int bFork){
  unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY], k[LAYOUT_MAX_KEY];
  unsigned char v[8];
  PinMin m;
  int nLo = layout_key_pin(lo, iBranch, 0, 0, 0, 0) - 9;
  int nKey, rc;
  layout_key_pin(hi, iBranch+1, 0, 0, 0, 0);
  memset(&m, 0, sizeof(m));
  m.bFork = bFork;
  rc = store_scan(pStore, lo, nLo, hi, nLo, 0, -1, brPinRow, &m);
  nKey = layout_key_branch_sub(k, iBranch,
      bFork ? LAYOUT_BRANCH_DESCPIN : LAYOUT_BRANCH_RPPIN);
  if( rc!=SQLITE_OK ) return rc;
  if( !m.bFound ) return store_clear(pStore, k, nKey);
  bytes_put64(v, m.iTxid);
  return store_put(pStore, k, nKey, v, 8);
}

static int brPinChange(Store *pStore, uint64_t iBranch, uint64_t iTxid,
                       int eKind, const void *pOwner, int nOwner, int bAdd,
                       char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  int nKey = layout_key_pin(k, iBranch, iTxid, eKind, pOwner, nOwner);
  int rc = bAdd ? store_put(pStore, k, nKey, "", 0)
                : store_clear(pStore, k, nKey);
  if( rc==SQLITE_OK ) rc = store_add(pStore, k,
      layout_key_branch_sub(k, iBranch, LAYOUT_BRANCH_REFCOUNT),
      bAdd ? 1 : -1, 0);
  if( rc==SQLITE_OK ){
    rc = brPinSummary(pStore, iBranch, eKind==LAYOUT_PIN_FORK);
  }
  /* a staged compaction of iBranch planned without (or with) this pin
  ** must not install */
  if( rc==SQLITE_OK ) rc = store_add(pStore, k,
      layout_key_br(k, iBranch, LAYOUT_BR_CMPGEN), 1, 0);
  return rc==SQLITE_OK ? rc : brStoreErr(pStore, pzErr, rc);
}

int depot_pin_add(Store *pStore, uint64_t iBranch, uint64_t iTxid, int eKind,
                  const void *pOwner, int nOwner, char **pzErr){
  return brPinChange(pStore, iBranch, iTxid, eKind, pOwner, nOwner, 1, pzErr);
}

int depot_pin_remove(Store *pStore, uint64_t iBranch, uint64_t iTxid,
                     int eKind, const void *pOwner, int nOwner, char **pzErr){
  return brPinChange(pStore, iBranch, iTxid, eKind, pOwner, nOwner, 0, pzErr);
}

int depot_branch_create(Store *pStore, const BranchRecord *pRec,
                        const DbHead *pState, uint64_t *piNew, char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW], o[8];
  DbHead head = *pState;
  int64_t iNew = 0;
  int rc = store_add(pStore, k, layout_key_ctr(k, "branch"), 1, &iNew);
  if( rc==SQLITE_OK ) rc = store_put(pStore, k,
      layout_key_branch(k, (uint64_t)iNew), v, layout_branch_encode(v, pRec));
  head.iTxid = 0;
  if( rc==SQLITE_OK && pRec->iParent ){
    rc = store_put(pStore, k, layout_key_br(k, (uint64_t)iNew, LAYOUT_BR_HEAD),
                   v, layout_head_encode(v, &head));
    if( rc==SQLITE_OK ) rc = store_put(pStore, k,
        layout_key_br(k, (uint64_t)iNew, LAYOUT_BR_FORKHEAD), v,
        layout_head_encode(v, &head));
  }
  bytes_put32(v, LAYOUT_VERSION);
  if( rc==SQLITE_OK ) rc = store_put(pStore, k, layout_key_format(k), v, 4);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  *piNew = (uint64_t)iNew;
  if( pRec->iParent==0 ) return SQLITE_OK;
  bytes_put64(o, (uint64_t)iNew);
  return depot_pin_add(pStore, pRec->iParent, pRec->iParentTxid,
                       LAYOUT_PIN_FORK, o, 8, pzErr);
}

/* ---- unborn branches ---- */

int depot_branch_unborn(Store *pStore, uint64_t iBranch, int *pbUnborn,
                        char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0, rc;
  DbHead head;
  *pbUnborn = 0;
  if( iBranch==0 ) return SQLITE_OK;
  rc = store_get(pStore, k, layout_key_br(k, iBranch, LAYOUT_BR_UNBORN),
                 &pVal, &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal==0 ) return SQLITE_OK;
  sqlite3_free(pVal);
  pVal = 0;
  rc = store_get(pStore, k, layout_key_br(k, iBranch, LAYOUT_BR_HEAD),
                 &pVal, &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  memset(&head, 0, sizeof(head));
  if( pVal && layout_head_decode(pVal, nVal, &head)!=SQLITE_OK ){
    rc = brErr(pzErr, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt head"
               " row of branch %llu", (unsigned long long)iBranch));
  }
  sqlite3_free(pVal);
  if( rc==SQLITE_OK ) *pbUnborn = head.iTxid==0;
  return rc;
}

int depot_branch_abandon(Store *pStore, uint64_t iBranch,
                         const BranchRecord *pRec, int *pbDone,
                         char **pzErr){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW], o[8];
  void *pVal = 0;
  int nVal = 0, nKey, bUnborn = 0, bHeld = 0, rc;
  BranchRecord rec = *pRec;
  PtrValue pv;
  DepotLock lk;
  *pbDone = 0;
  if( rec.eState!=LAYOUT_STATE_LIVE ) return SQLITE_OK;
  rc = depot_branch_unborn(pStore, iBranch, &bUnborn, pzErr);
  if( rc!=SQLITE_OK || !bUnborn ) return rc;
  rc = store_get(pStore, k, layout_key_branch_sub(k, iBranch,
                 LAYOUT_BRANCH_REFCOUNT), &pVal, &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal && nVal==8 && (int64_t)bytes_get64le(pVal)>0 ) bHeld = 1;
  sqlite3_free(pVal);
  pVal = 0;
  if( bHeld ) return SQLITE_OK;                /* forked meanwhile */
  nKey = layout_key_ptr(k, rec.iBucket, rec.zDb, rec.zBranch);
  rc = store_get(pStore, k, nKey, &pVal, &nVal);
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( pVal==0 || layout_ptr_decode(pVal, nVal, &pv)!=SQLITE_OK
   || pv.iBranch!=iBranch ){
    sqlite3_free(pVal);
    return SQLITE_OK;                          /* the name leads elsewhere */
  }
  sqlite3_free(pVal);
  depot_lock_init(&lk, pStore, rec.iBucket, rec.zDb, rec.zBranch);
  rc = depot_lock_other(&lk, &bHeld, pzErr);
  if( rc!=SQLITE_OK || bHeld ) return rc;      /* its writer is alive */
  if( rec.iBucket==0 || rec.iParent ){
    rc = store_clear(pStore, k, nKey);
  }else{
    pv.iBranch = 0;                            /* a tombstone: as before */
    rc = store_put(pStore, k, nKey, v, layout_ptr_encode(v, &pv));
  }
  if( rc==SQLITE_OK ) rc = store_clear(pStore, k, layout_key_ptr_hist(k,
      rec.iBucket, rec.zDb, rec.zBranch, rec.iCreateVs));
  rec.eState = LAYOUT_STATE_DROPPED;
  if( rc==SQLITE_OK ) rc = store_put(pStore, k, layout_key_branch(k, iBranch),
                                     v, layout_branch_encode(v, &rec));
  if( rc!=SQLITE_OK ) return brStoreErr(pStore, pzErr, rc);
  if( rec.iParent ){
    bytes_put64(o, iBranch);
    rc = depot_pin_remove(pStore, rec.iParent, rec.iParentTxid,
                          LAYOUT_PIN_FORK, o, 8, pzErr);
  }
  if( rc==SQLITE_OK ) *pbDone = 1;
  return rc;
}
