/*
** fork.c -- forks: depot_fork() gives a branch of a database a new branch
** forked at a point of its history (a branch record with parent and cap,
** nothing copied); depot_fork_bucket() forks a whole bucket at a store
** sequence number (its databases read the capped fork until they write).
** Each is one operation of vfs/op.h.
*/
#include "config.h"
#include "vfs/op.h"
#include "sqlite3ext.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

int depot_fork(const char *zStore, const char *zDb, const char *zFrom,
               const char *zNew, const DepotAt *pAt, uint64_t *piNew,
               char **pzErr){
  Op op;
  OpView v;
  DepotName nm;
  uint64_t iFrom = 0, iTxid = 0, iVs = 0;
  int rc = op_open(&op, zStore, zDb, pzErr);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "branch", zFrom);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "new branch", zNew);
  if( rc==SQLITE_OK ) rc = depot_name_resolve(op.pStore, op.iBucket, op.zDb,
                                              zNew, &nm, pzErr);
  if( rc==SQLITE_OK && (nm.iBranch || nm.iInhBranch) ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: database %s"
        " already has a branch %s", op.zDb, zNew));
  }
  if( rc==SQLITE_OK ) rc = op_view(&op, zFrom, &v);
  if( rc==SQLITE_OK ) rc = pitr_resolve_at(&op, &v, pAt, &iFrom, &iTxid);
  if( rc==SQLITE_OK ) rc = op_next_vs(&op, &iVs);
  if( rc==SQLITE_OK ) rc = op_new_fork(&op, zNew, iFrom, iTxid, iVs, piNew);
  if( rc==SQLITE_OK ) rc = depot_ptr_set(op.pStore, op.iBucket, op.zDb, zNew,
                                         0, *piNew, iVs, 'f', pzErr);
  return op_end(&op, rc);
}

static int forkBucketDepth(Op *p, uint64_t iBucket, int *pnDepth){
  *pnDepth = 0;
  while( iBucket ){
    unsigned char k[LAYOUT_MAX_KEY];
    BucketRecord rec;
    void *pVal = 0;
    int nVal = 0;
    int rc = store_get(p->pStore, k, layout_key_bucket(k, iBucket, 0), &pVal,
                       &nVal);
    if( rc!=SQLITE_OK ) return op_store_err(p, rc);
    rc = pVal ? layout_bucket_decode(pVal, nVal, &rec) : SQLITE_CORRUPT;
    sqlite3_free(pVal);
    if( rc!=SQLITE_OK || ++*pnDepth>OP_MAX_BUCKET_DEPTH ){
      return op_fail(p, SQLITE_CORRUPT, sqlite3_mprintf("depot: corrupt"
          " bucket ancestry"));
    }
    iBucket = rec.iParent;
  }
  return SQLITE_OK;
}

/* Write the records of bucket zNew forked from iSrc at iVs. */
static int forkPutBucket(Op *p, uint64_t iSrc, const char *zNew, uint64_t iVs){
  unsigned char k[LAYOUT_MAX_KEY], v[LAYOUT_MAX_ROW];
  BucketRecord rec;
  int64_t iNew = 0;
  int rc = store_add(p->pStore, k, layout_key_ctr(k, "bucket"), 1, &iNew);
  memset(&rec, 0, sizeof(rec));
  rec.iParent = iSrc;
  rec.iForkVs = iVs;
  memcpy(rec.zName, zNew, strlen(zNew));
  bytes_put64(v, (uint64_t)iNew);
  if( rc==SQLITE_OK ) rc = store_put(p->pStore, k,
      layout_key_bucket_ptr(k, zNew), v, 8);
  if( rc==SQLITE_OK ) rc = store_put(p->pStore, k,
      layout_key_bucket(k, (uint64_t)iNew, 0), v, layout_bucket_encode(v, &rec));
  if( rc==SQLITE_OK ) rc = store_put(p->pStore, k,
      layout_key_bchild(k, iSrc, iVs, (uint64_t)iNew), "", 0);
  if( rc==SQLITE_OK ) rc = store_add(p->pStore, k,
      layout_key_bucket(k, iSrc, LAYOUT_BRANCH_REFCOUNT), 1, 0);
  return rc==SQLITE_OK ? rc : op_store_err(p, rc);
}

int depot_fork_bucket(const char *zStore, const char *zBucket,
                      const char *zNew, const DepotAt *pAt, uint64_t *piVs,
                      char **pzErr){
  Op op;
  uint64_t iSrc = 0, iOther = 0, iVs = 0;
  int bFound = 0, nDepth = 0;
  int rc = op_open(&op, zStore, 0, pzErr);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "bucket", zBucket);
  if( rc==SQLITE_OK ) rc = op_check_name(&op, "new bucket", zNew);
  if( rc==SQLITE_OK && strchr(zNew, '/') ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: a bucket name may"
        " not contain '/': %s", zNew));
  }
  if( rc==SQLITE_OK ) rc = depot_bucket_find(op.pStore, zBucket, &iSrc,
                                             &bFound, pzErr);
  if( rc==SQLITE_OK && !bFound ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s does"
        " not exist", zBucket));
  }
  if( rc==SQLITE_OK ) rc = depot_bucket_find(op.pStore, zNew, &iOther,
                                             &bFound, pzErr);
  if( rc==SQLITE_OK && bFound ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket %s already"
        " exists", zNew));
  }
  if( rc==SQLITE_OK ) rc = forkBucketDepth(&op, iSrc, &nDepth);
  if( rc==SQLITE_OK && nDepth>=OP_MAX_BUCKET_DEPTH ){
    rc = op_fail(&op, SQLITE_ERROR, sqlite3_mprintf("depot: bucket fork depth"
        " limit of %d reached", OP_MAX_BUCKET_DEPTH));
  }
  if( rc==SQLITE_OK ) rc = pitr_bucket_at(&op, pAt, &iVs);
  if( rc==SQLITE_OK ) rc = forkPutBucket(&op, iSrc, zNew, iVs);
  *piVs = iVs;
  return op_end(&op, rc);
}
