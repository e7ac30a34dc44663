/*
** list.c -- the catalog listings behind depot_branches
** (depot_list_branches: every branch record) and depot_databases
** (depot_list_databases: every name a bucket shows, its own or inherited
** from an ancestor bucket).  Neither shows an unborn branch
** (vfs/layout.h).  Each runs as one read-only operation of vfs/op.h, so a
** store on read-only media lists too.
*/
#include "config.h"
#include "vfs/op.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

typedef struct BranchScan BranchScan;
struct BranchScan {
  Op *p;
  const char *zDb;          /* NULL: all */
  DepotBranchFn xFn;
  void *pArg;
  int rc, bStop;
};

static int listBucketName(Op *p, uint64_t iBucket, char *zOut){
  unsigned char k[LAYOUT_MAX_KEY];
  BucketRecord rec;
  void *pVal = 0;
  int nVal = 0, rc;
  if( iBucket==0 ){
    memcpy(zOut, "main", 5);
    return SQLITE_OK;
  }
  rc = store_get(p->pStore, k, layout_key_bucket(k, iBucket, 0), &pVal, &nVal);
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  rc = pVal ? layout_bucket_decode(pVal, nVal, &rec) : SQLITE_CORRUPT;
  sqlite3_free(pVal);
  if( rc!=SQLITE_OK ){
    return op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt record"
        " of bucket %llu", (unsigned long long)iBucket));
  }
  memcpy(zOut, rec.zName, strlen(rec.zName)+1);
  return SQLITE_OK;
}

/* The stored-byte counter of branch iBranch (0 when it has none yet). */
static int listStored(Op *p, uint64_t iBranch, int64_t *pn){
  unsigned char k[LAYOUT_MAX_KEY];
  void *pVal = 0;
  int nVal = 0;
  int rc = store_get(p->pStore, k, layout_key_br(k, iBranch, LAYOUT_BR_QUOTA),
                     &pVal, &nVal);
  *pn = 0;
  if( rc!=SQLITE_OK ) return op_store_err(p, rc);
  if( pVal && nVal==8 ) *pn = (int64_t)bytes_get64le(pVal);
  else if( pVal ) rc = op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot:"
      " corrupt counter row of branch %llu", (unsigned long long)iBranch));
  sqlite3_free(pVal);
  return rc;
}

static int listBranchRow(void *pArg, const unsigned char *pKey, int nKey,
                         const unsigned char *pVal, int nVal){
  BranchScan *s = (BranchScan*)pArg;
  DepotBranchInfo info;
  BranchRecord rec;
  DbHead head;
  char zBucket[LAYOUT_MAX_NAME+1];
  uint64_t iBranch;
  int bUnborn = 0;
  if( nKey!=10 ) return 0;
  iBranch = bytes_get64(pKey+2);
  if( layout_branch_decode(pVal, nVal, &rec)!=SQLITE_OK ){
    s->rc = op_fail(s->p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
        " record of branch %llu", (unsigned long long)iBranch));
    return 1;
  }
  if( s->zDb && strcmp(s->zDb, rec.zDb)!=0 ) return 0;
  s->rc = depot_branch_unborn(s->p->pStore, iBranch, &bUnborn, s->p->pzErr);
  if( s->rc!=SQLITE_OK ) return 1;
  if( bUnborn ) return 0;
  s->rc = depot_db_head(s->p->pStore, iBranch, &head, s->p->pzErr);
  if( s->rc==SQLITE_OK ) s->rc = listBucketName(s->p, rec.iBucket, zBucket);
  if( s->rc==SQLITE_OK ) s->rc = op_refcount(s->p, iBranch, &info.nRef);
  if( s->rc==SQLITE_OK ) s->rc = listStored(s->p, iBranch, &info.nStored);
  if( s->rc!=SQLITE_OK ) return 1;
  info.zBucket = zBucket;
  info.zDb = rec.zDb;
  info.zBranch = rec.zBranch;
  info.iBranch = iBranch;
  info.iParent = rec.iParent;
  info.iForkTxid = rec.iParentTxid;
  info.iHeadTxid = head.iTxid;
  info.eState = rec.eState;
  info.nLogical = (int64_t)head.nPage*head.szPage;
  s->bStop = s->xFn(s->pArg, &info);
  return s->bStop;
}

int depot_list_branches(const char *zStore, const char *zDb,
                        DepotBranchFn xFn, void *pArg, char **pzErr){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BRANCHES };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BRANCHES+1 };
  BranchScan s;
  Op op;
  int rc = op_open_as(&op, zStore, 0, 1, pzErr);
  if( rc==SQLITE_OK && zDb ) rc = op_check_name(&op, "database", zDb);
  if( rc==SQLITE_OK && zDb && strchr(zDb, '/') ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: depot_branches"
        " matches db in every bucket: give it without a bucket part, got"
        " '%s'", zDb));
  }
  memset(&s, 0, sizeof(s));
  s.p = &op;
  s.zDb = zDb;
  s.xFn = xFn;
  s.pArg = pArg;
  if( rc==SQLITE_OK ){
    rc = store_scan(op.pStore, lo, 2, hi, 2, 0, -1, listBranchRow, &s);
    if( rc!=SQLITE_OK ) rc = op_store_err(&op, rc);
    else rc = s.rc;
  }
  return op_end(&op, rc);
}

/* Names seen while listing a bucket: (db, branch) pairs, deduplicated. */
typedef struct NameSet NameSet;
struct NameSet {
  int n, nAlloc;
  char **az;                /* "db\0branch\0" */
  int rc;
};

static int listNameRow(void *pArg, const unsigned char *pKey, int nKey,
                       const unsigned char *pVal, int nVal){
  NameSet *s = (NameSet*)pArg;
  int iStart = pKey[1]==LAYOUT_P_DBPTR ? 2 : 10, i;
  char *z;
  (void)pVal; (void)nVal;
  if( nKey<=iStart+2 || pKey[nKey-1]!=0
   || memchr(pKey+iStart, 0, nKey-iStart-1)==0 ) return 0;
  for(i=0; i<s->n; i++){
    size_t n = strlen(s->az[i])+1;
    n += strlen(s->az[i]+n)+1;
    if( n==(size_t)(nKey-iStart)
     && memcmp(s->az[i], pKey+iStart, n)==0 ) return 0;
  }
  if( s->n==s->nAlloc ){
    int nNew = s->nAlloc ? s->nAlloc*2 : 16;
    char **az = sqlite3_realloc64(s->az, sizeof(char*)*nNew);
    if( az==0 ){ s->rc = SQLITE_NOMEM; return 1; }
    s->az = az;
    s->nAlloc = nNew;
  }
  z = sqlite3_malloc64(nKey-iStart);
  if( z==0 ){ s->rc = SQLITE_NOMEM; return 1; }
  memcpy(z, pKey+iStart, nKey-iStart);
  s->az[s->n++] = z;
  return 0;
}

/* Collect the names of bucket iBucket and its ancestors. */
static int listCollectNames(Op *p, uint64_t iBucket, NameSet *s){
  int nDepth = 0;
  for(;;){
    unsigned char lo[LAYOUT_MAX_KEY], hi[LAYOUT_MAX_KEY];
    BucketRecord rec;
    void *pVal = 0;
    int nVal = 0, n, rc;
    lo[0] = hi[0] = 0x02;
    lo[1] = iBucket ? LAYOUT_P_BDBPTR : LAYOUT_P_DBPTR;
    bytes_put64(lo+2, iBucket);
    memcpy(hi, lo, 10);
    n = iBucket ? 10 : 2;
    if( iBucket ) bytes_put64(hi+2, iBucket+1); else hi[1]++;
    rc = store_scan(p->pStore, lo, n, hi, n, 0, -1, listNameRow, s);
    if( rc!=SQLITE_OK ) return op_store_err(p, rc);
    if( s->rc!=SQLITE_OK ) return s->rc;
    if( iBucket==0 || ++nDepth>OP_MAX_BUCKET_DEPTH ) return SQLITE_OK;
    rc = store_get(p->pStore, lo, layout_key_bucket(lo, iBucket, 0), &pVal,
                   &nVal);
    if( rc!=SQLITE_OK ) return op_store_err(p, rc);
    rc = pVal ? layout_bucket_decode(pVal, nVal, &rec) : SQLITE_CORRUPT;
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK ){
      return op_fail(p, rc, sqlite3_mprintf("depot: corrupt bucket record"));
    }
    iBucket = rec.iParent;
  }
}

/* A name whose own branch is unborn (vfs/layout.h) shows what it showed
** before that branch was made: the inherited branch it forks, or
** nothing. */
static int listUnborn(Op *p, DepotName *pNm){
  BranchRecord rec;
  int bUnborn = 0;
  int rc = depot_branch_unborn(p->pStore, pNm->iBranch, &bUnborn, p->pzErr);
  if( rc==SQLITE_OK && bUnborn ){
    rc = depot_branch_get(p->pStore, pNm->iBranch, &rec, p->pzErr);
    if( rc==SQLITE_OK ){
      pNm->iBranch = 0;
      pNm->iInhBranch = rec.iParent;
      pNm->iInhTxid = rec.iParent ? rec.iParentTxid : 0;
    }
  }
  return rc;
}

/* Hand out every name of the collected set that resolves in iBucket. */
static int listEmitNames(Op *p, uint64_t iBucket, const char *zBucket,
                         NameSet *s, DepotNameFn xFn, void *pArg, int *pbStop){
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<s->n && !*pbStop; i++){
    const char *zDb = s->az[i], *zBranch = zDb+strlen(zDb)+1;
    DepotNameInfo info;
    DepotName nm;
    DbHead head;
    memset(&head, 0, sizeof(head));
    rc = depot_name_resolve(p->pStore, iBucket, zDb, zBranch, &nm, p->pzErr);
    if( rc==SQLITE_OK ) rc = listUnborn(p, &nm);
    if( rc!=SQLITE_OK || (nm.iBranch==0 && nm.iInhBranch==0) ) continue;
    if( nm.iBranch ){
      rc = depot_db_head(p->pStore, nm.iBranch, &head, p->pzErr);
    }else{
      rc = depot_db_state_at(p->pStore, nm.iInhBranch, nm.iInhTxid, &head,
                             p->pzErr);
      head.iTxid = nm.iInhTxid;
    }
    info.zBucket = zBucket;
    info.zDb = zDb;
    info.zBranch = zBranch;
    info.iBranch = nm.iBranch ? nm.iBranch : nm.iInhBranch;
    info.iTxid = head.iTxid;
    info.bInherited = nm.iBranch==0;
    info.nLogical = (int64_t)head.nPage*head.szPage;
    if( rc==SQLITE_OK ) *pbStop = xFn(pArg, &info);
  }
  return rc;
}

static void listNameSetFree(NameSet *s){
  int i;
  for(i=0; i<s->n; i++) sqlite3_free(s->az[i]);
  sqlite3_free(s->az);
  memset(s, 0, sizeof(*s));
}

/* List one bucket. */
static int listBucket(Op *p, uint64_t iBucket, const char *zBucket,
                      DepotNameFn xFn, void *pArg, int *pbStop){
  NameSet s;
  int rc;
  memset(&s, 0, sizeof(s));
  rc = listCollectNames(p, iBucket, &s);
  if( rc==SQLITE_OK ) rc = listEmitNames(p, iBucket, zBucket, &s, xFn, pArg,
                                         pbStop);
  listNameSetFree(&s);
  return rc;
}

/* Bucket names other than main, collected from BUCKET_PTR. */
typedef struct BucketSet BucketSet;
struct BucketSet {
  int n, nAlloc;
  char **az;
  uint64_t *aId;
  int rc;
};

static int listBucketPtrRow(void *pArg, const unsigned char *pKey, int nKey,
                            const unsigned char *pVal, int nVal){
  BucketSet *s = (BucketSet*)pArg;
  if( nVal!=8 || nKey<4 || pKey[nKey-1]!=0 ){
    s->rc = SQLITE_CORRUPT;
    return 1;
  }
  if( s->n==s->nAlloc ){
    int nNew = s->nAlloc ? s->nAlloc*2 : 8;
    char **az = sqlite3_realloc64(s->az, sizeof(char*)*nNew);
    uint64_t *a = az ? sqlite3_realloc64(s->aId, sizeof(uint64_t)*nNew) : 0;
    if( az ) s->az = az;
    if( a==0 ){ s->rc = SQLITE_NOMEM; return 1; }
    s->aId = a;
    s->nAlloc = nNew;
  }
  s->az[s->n] = sqlite3_mprintf("%s", (const char*)pKey+2);
  if( s->az[s->n]==0 ){ s->rc = SQLITE_NOMEM; return 1; }
  s->aId[s->n++] = bytes_get64(pVal);
  return 0;
}

/* depot_databases without a bucket: main, then every other bucket. */
static int listAll(Op *p, DepotNameFn xFn, void *pArg){
  unsigned char lo[2] = { 0x02, LAYOUT_P_BUCKET_PTR };
  unsigned char hi[2] = { 0x02, LAYOUT_P_BUCKET_PTR+1 };
  BucketSet s;
  int bStop = 0, i;
  int rc = listBucket(p, 0, "main", xFn, pArg, &bStop);
  memset(&s, 0, sizeof(s));
  if( rc==SQLITE_OK ){
    rc = store_scan(p->pStore, lo, 2, hi, 2, 0, -1, listBucketPtrRow, &s);
    if( rc!=SQLITE_OK ) rc = op_store_err(p, rc);
    else if( s.rc!=SQLITE_OK ){
      rc = op_fail(p, s.rc, sqlite3_mprintf("depot: corrupt bucket pointer"));
    }
  }
  for(i=0; rc==SQLITE_OK && i<s.n && !bStop; i++){
    rc = listBucket(p, s.aId[i], s.az[i], xFn, pArg, &bStop);
  }
  for(i=0; i<s.n; i++) sqlite3_free(s.az[i]);
  sqlite3_free(s.az);
  sqlite3_free(s.aId);
  return rc;
}

int depot_list_databases(const char *zStore, const char *zBucket,
                         DepotNameFn xFn, void *pArg, char **pzErr){
  Op op;
  uint64_t iBucket = 0;
  int bFound = 1, bStop = 0, rc = op_open_as(&op, zStore, 0, 1, pzErr);
  if( rc!=SQLITE_OK || zBucket==0 ){
    if( rc==SQLITE_OK ) rc = listAll(&op, xFn, pArg);
    return op_end(&op, rc);
  }
  rc = op_check_name(&op, "bucket", zBucket);
  if( rc==SQLITE_OK ) rc = depot_bucket_find(op.pStore, zBucket, &iBucket,
                                             &bFound, pzErr);
  if( rc==SQLITE_OK && !bFound ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
        " not exist", zBucket));
  }
  if( rc==SQLITE_OK ) rc = listBucket(&op, iBucket, zBucket, xFn, pArg,
                                      &bStop);
  return op_end(&op, rc);
}
