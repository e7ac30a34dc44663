/*
** depot_branch_sql.c -- the SQL surface of forks, restore points,
** point-in-time restore, rollback and buckets:
**
**   depot_fork(store, db, from_branch, new_branch[, at])   -> branch id
**   depot_restore_point(store, db, branch, name)           -> name
**   depot_drop_restore_point(store, db, name)              -> 1
**   depot_restore(store, db, branch, at)                   -> undo point
**   depot_rollback(store, db, branch[, at])                -> branch id
**   depot_drop_branch(store, db, branch_or_id)             -> 1
**   depot_pitr_policy(store[, db][, interval, retention])  -> JSON policy
**   depot_fork_bucket(store, bucket, new_bucket[, at])     -> fork sequence
**   SELECT * FROM depot_branches(store[, db]);
**   SELECT * FROM depot_databases(store[, bucket]);
**   SELECT * FROM depot_restore_points(store, db);
**
** The three tables are listings (ext/listing.h).  Every function and
** table is SQLITE_DIRECTONLY; every state change is one store transaction
** (see vfs/depot_vfs.h).  docs/SQL.md has the details.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/listing.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <time.h>

/* ================= argument checks ================= */

/* `at`: NULL (head), an integer, or text; 0 after an error. */
static int branchAt(sqlite3_context *ctx, sqlite3_value *pVal,
                    const char *zFunc, DepotAt *pAt){
  memset(pAt, 0, sizeof(*pAt));
  switch( pVal ? sqlite3_value_type(pVal) : SQLITE_NULL ){
    case SQLITE_NULL:
      pAt->eType = DEPOT_AT_HEAD;
      return 1;
    case SQLITE_INTEGER:
    case SQLITE_FLOAT: {
      sqlite3_int64 i;
      if( !depot_value_int64(pVal, &i) ) break;
      pAt->eType = DEPOT_AT_TXID;
      pAt->iTxid = i;
      return 1;
    }
    case SQLITE_TEXT:
      pAt->eType = DEPOT_AT_TEXT;
      pAt->zText = depot_text_arg(ctx, pVal, zFunc, "at");
      return pAt->zText!=0;
  }
  {
    char *z = sqlite3_mprintf("depot: %s: at must be NULL, an integer, an"
        " ISO-8601 time or a restore point name", zFunc);
    sqlite3_result_error(ctx, z, -1);
    sqlite3_free(z);
  }
  return 0;
}

/* ================= scalar functions ================= */

static void branchFork(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zF = "depot_fork(store, db, from_branch, new_branch[, at])";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? depot_text_arg(ctx, argv[1], zF, "db") : 0;
  const char *zFrom = zDb ? depot_text_arg(ctx, argv[2], zF, "from_branch") : 0;
  const char *zNew = zFrom ? depot_text_arg(ctx, argv[3], zF, "new_branch") : 0;
  DepotAt at;
  uint64_t iNew = 0;
  char *zErr = 0;
  int rc;
  if( zNew==0 || !branchAt(ctx, argc>4 ? argv[4] : 0, zF, &at) ) return;
  rc = depot_fork(zStore, zDb, zFrom, zNew, &at, &iNew, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_int64(ctx, (sqlite3_int64)iNew);
}

static void branchRestorePoint(sqlite3_context *ctx, int argc,
                               sqlite3_value **argv){
  const char *zF = "depot_restore_point(store, db, branch, name)";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? depot_text_arg(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = zDb ? depot_text_arg(ctx, argv[2], zF, "branch") : 0;
  const char *zName = zBranch ? depot_text_arg(ctx, argv[3], zF, "name") : 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( zName==0 ) return;
  rc = depot_restore_point(zStore, zDb, zBranch, zName, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_text(ctx, zName, -1, SQLITE_TRANSIENT);
}

static void branchDropRestorePoint(sqlite3_context *ctx, int argc,
                                   sqlite3_value **argv){
  const char *zF = "depot_drop_restore_point(store, db, name)";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? depot_text_arg(ctx, argv[1], zF, "db") : 0;
  const char *zName = zDb ? depot_text_arg(ctx, argv[2], zF, "name") : 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( zName==0 ) return;
  rc = depot_drop_restore_point(zStore, zDb, zName, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_int(ctx, 1);
}

static void branchRestore(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  const char *zF = "depot_restore(store, db, branch, at)";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? depot_text_arg(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = zDb ? depot_text_arg(ctx, argv[2], zF, "branch") : 0;
  char *zUndo = 0, *zErr = 0;
  DepotAt at;
  int rc;
  (void)argc;
  if( zBranch==0 || !branchAt(ctx, argv[3], zF, &at) ) return;
  if( at.eType==DEPOT_AT_HEAD ){
    sqlite3_result_error(ctx, "depot: depot_restore: at must name a txid, a"
        " time or a restore point, not NULL", -1);
    return;
  }
  rc = depot_restore(zStore, zDb, zBranch, &at, &zUndo, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_text(ctx, zUndo, -1, sqlite3_free);
}

static void branchRollback(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv){
  const char *zF = "depot_rollback(store, db, branch[, at])";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? depot_text_arg(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = zDb ? depot_text_arg(ctx, argv[2], zF, "branch") : 0;
  uint64_t iNew = 0;
  char *zErr = 0;
  DepotAt at;
  int rc;
  if( zBranch==0 || (argc>3 && !branchAt(ctx, argv[3], zF, &at)) ) return;
  if( argc>3 && at.eType==DEPOT_AT_HEAD ){
    sqlite3_result_error(ctx, "depot: depot_rollback: at must name a txid,"
        " a time or a restore point; leave it out to undo", -1);
    return;
  }
  rc = depot_rollback(zStore, zDb, zBranch, argc>3 ? &at : 0, &iNew, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_int64(ctx, (sqlite3_int64)iNew);
}

static void branchDropBranch(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv){
  const char *zF = "depot_drop_branch(store, db, branch)";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? depot_text_arg(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = 0;
  uint64_t iBranch = 0;
  sqlite3_int64 iArg = 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( zDb==0 ) return;
  if( depot_value_int64(argv[2], &iArg) && iArg>0 ){
    iBranch = (uint64_t)iArg;
  }else if( (zBranch = depot_text_arg(ctx, argv[2], zF,
                                      "branch (a name or a branch id)"))==0 ){
    return;
  }
  rc = depot_drop_branch(zStore, zDb, zBranch, iBranch, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_int(ctx, 1);
}

/* Integer seconds >= 0, else an error. */
static int branchSeconds(sqlite3_context *ctx, sqlite3_value *pVal,
                         const char *zWhat, sqlite3_int64 *piOut){
  if( !depot_value_int64(pVal, piOut) || *piOut<0 ){
    char *z = sqlite3_mprintf("depot: depot_pitr_policy: %s must be an"
        " integer number of seconds >= 0", zWhat);
    sqlite3_result_error(ctx, z, -1);
    sqlite3_free(z);
    return 0;
  }
  return 1;
}

static void branchPitr(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zF = "depot_pitr_policy(store[, db][, interval, retention])";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zDb = 0;
  sqlite3_int64 iInt = 0, iRet = 0;
  int64_t iI = 0, iR = 0;
  char *zErr = 0;
  int rc = SQLITE_OK, iNum = argc==3 ? 1 : 2;
  if( zStore==0 ) return;
  if( (argc==2 || argc==4) && sqlite3_value_type(argv[1])!=SQLITE_NULL
   && (zDb = depot_text_arg(ctx, argv[1], zF, "db"))==0 ) return;
  if( argc>=3 ){
    if( !branchSeconds(ctx, argv[iNum], "interval", &iInt)
     || !branchSeconds(ctx, argv[iNum+1], "retention", &iRet) ) return;
    rc = depot_pitr_set(zStore, zDb, iInt, iRet, &zErr);
  }
  if( rc==SQLITE_OK ) rc = depot_pitr_get(zStore, zDb, &iI, &iR, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_text(ctx, sqlite3_mprintf("{\"interval\":%lld,"
      "\"retention\":%lld}", (long long)iI, (long long)iR), -1, sqlite3_free);
}

/* The `at` of depot_fork_bucket is NULL, an integer (or a real with an
** integral value) or text (a time; a bucket has no restore points): 0
** after reporting another real or a blob. */
static int branchBucketAtType(sqlite3_context *ctx, sqlite3_value *pVal){
  int t = pVal ? sqlite3_value_type(pVal) : SQLITE_NULL;
  sqlite3_int64 i;
  char *z;
  if( t!=SQLITE_FLOAT && t!=SQLITE_BLOB ) return 1;
  if( t==SQLITE_FLOAT && depot_value_int64(pVal, &i) ) return 1;
  z = sqlite3_mprintf("depot: a bucket fork point is NULL, a store sequence"
      " number or an ISO-8601 time, got %s",
      t==SQLITE_BLOB ? "a blob" : (const char*)sqlite3_value_text(pVal));
  if( z==0 ){
    sqlite3_result_error_nomem(ctx);
  }else{
    sqlite3_result_error(ctx, z, -1);
    sqlite3_free(z);
  }
  return 0;
}

static void branchForkBucket(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv){
  const char *zF = "depot_fork_bucket(store, bucket, new_bucket[, at])";
  const char *zStore = depot_text_arg(ctx, argv[0], zF, "store");
  const char *zBucket = zStore ? depot_text_arg(ctx, argv[1], zF, "bucket") : 0;
  const char *zNew = zBucket ? depot_text_arg(ctx, argv[2], zF, "new_bucket")
                             : 0;
  uint64_t iVs = 0;
  char *zErr = 0;
  DepotAt at;
  int rc;
  if( zNew==0 || !branchBucketAtType(ctx, argc>3 ? argv[3] : 0)
   || !branchAt(ctx, argc>3 ? argv[3] : 0, zF, &at) ) return;
  rc = depot_fork_bucket(zStore, zBucket, zNew, &at, &iVs, &zErr);
  if( rc!=SQLITE_OK ) return depot_result_error(ctx, rc, zErr);
  sqlite3_result_int64(ctx, (sqlite3_int64)iVs);
}

/* ======================= listings (ext/listing.h) ======================= */

/* Milliseconds since the epoch as ISO-8601 UTC text into z (40 bytes). */
static void branchTime(uint64_t iMs, char *z){
  time_t t = (time_t)(iMs/1000);
  struct tm tm;
  char zSec[32];
  gmtime_r(&t, &tm);
  strftime(zSec, sizeof(zSec), "%Y-%m-%dT%H:%M:%S", &tm);
  sqlite3_snprintf(40, z, "%s.%03dZ", zSec, (int)(iMs%1000));
}

static const char *const azBranchState[] = { "live", "frozen", "dropped" };

/* A text cell that is never NULL: a name the store does not have is ''. */
static int branchName(DepotRows *p, const char *z){
  return depot_rows_text(p, z ? z : "");
}

static int branchInfoRow(void *pArg, const DepotBranchInfo *b){
  DepotRows *p = (DepotRows*)pArg;
  branchName(p, b->zDb);
  branchName(p, b->zBranch);
  depot_rows_int(p, (sqlite3_int64)b->iBranch);
  if( b->iParent ){
    depot_rows_int(p, (sqlite3_int64)b->iParent);
    depot_rows_int(p, (sqlite3_int64)b->iForkTxid);
  }else{
    depot_rows_null(p);
    depot_rows_null(p);
  }
  depot_rows_int(p, (sqlite3_int64)b->iHeadTxid);
  depot_rows_text(p, azBranchState[b->eState]);
  depot_rows_int(p, b->nLogical);
  branchName(p, b->zBucket);
  depot_rows_int(p, b->nRef);
  depot_rows_int(p, b->nStored);
  return p->rc!=SQLITE_OK;
}

static int branchBranchesRows(DepotRows *p, sqlite3_value **apArg,
                              char **pzErr){
  const char *az[2];
  int rc = depot_text_args(apArg, 2, 1, az, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  return depot_list_branches(az[0], az[1], branchInfoRow, p, pzErr);
}

static int branchNameRow(void *pArg, const DepotNameInfo *n){
  DepotRows *p = (DepotRows*)pArg;
  branchName(p, n->zBucket);
  branchName(p, n->zDb);
  branchName(p, n->zBranch);
  depot_rows_int(p, (sqlite3_int64)n->iBranch);
  depot_rows_int(p, (sqlite3_int64)n->iTxid);
  depot_rows_int(p, n->bInherited);
  depot_rows_int(p, n->nLogical);
  return p->rc!=SQLITE_OK;
}

static int branchDatabasesRows(DepotRows *p, sqlite3_value **apArg,
                               char **pzErr){
  const char *az[2];
  int rc = depot_text_args(apArg, 2, 1, az, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  return depot_list_databases(az[0], az[1], branchNameRow, p, pzErr);
}

static int branchRestorePointRow(void *pArg, const DepotRpInfo *r){
  DepotRows *p = (DepotRows*)pArg;
  char zTime[40];
  branchTime(r->iTimeMs, zTime);
  branchName(p, r->zName);
  branchName(p, r->zBranch);
  depot_rows_int(p, (sqlite3_int64)r->iBranch);
  depot_rows_int(p, (sqlite3_int64)r->iTxid);
  depot_rows_text(p, zTime);
  depot_rows_text(p, r->bUndo ? "undo" : "user");
  return p->rc!=SQLITE_OK;
}

static int branchRestorePointsRows(DepotRows *p, sqlite3_value **apArg,
                                   char **pzErr){
  const char *az[2];
  int rc = depot_text_args(apArg, 2, 2, az, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  if( az[1]==0 ){
    *pzErr = sqlite3_mprintf("depot: depot_restore_points(store, db) needs"
                             " the db argument");
    return SQLITE_ERROR;
  }
  return depot_list_restore_points(az[0], az[1], branchRestorePointRow, p,
                                   pzErr);
}

static const DepotListingCol aBranchesCol[] = {
  DEPOT_COLUMN("database", "TEXT"),
  DEPOT_COLUMN("branch", "TEXT"),
  DEPOT_COLUMN("branch_id", "INTEGER"),
  DEPOT_COLUMN("parent", "INTEGER"),
  DEPOT_COLUMN("fork_txid", "INTEGER"),
  DEPOT_COLUMN("head_txid", "INTEGER"),
  DEPOT_COLUMN("state", "TEXT"),
  DEPOT_COLUMN("logical_size", "INTEGER"),
  DEPOT_COLUMN("bucket", "TEXT"),
  DEPOT_COLUMN("pins", "INTEGER"),
  DEPOT_ARGUMENT("store"),
  DEPOT_ARGUMENT("db"),
  DEPOT_COLUMN("stored_bytes", "INTEGER"),
};
static const DepotListingCol aDatabasesCol[] = {
  DEPOT_COLUMN("bucket", "TEXT"),
  DEPOT_COLUMN("database", "TEXT"),
  DEPOT_COLUMN("branch", "TEXT"),
  DEPOT_COLUMN("branch_id", "INTEGER"),
  DEPOT_COLUMN("head_txid", "INTEGER"),
  DEPOT_COLUMN("inherited", "INTEGER"),
  DEPOT_COLUMN("logical_size", "INTEGER"),
  DEPOT_ARGUMENT("store"),
  DEPOT_ARGUMENT("bucket_arg"),
};
static const DepotListingCol aRestorePointsCol[] = {
  DEPOT_COLUMN("name", "TEXT"),
  DEPOT_COLUMN("branch", "TEXT"),
  DEPOT_COLUMN("branch_id", "INTEGER"),
  DEPOT_COLUMN("txid", "INTEGER"),
  DEPOT_COLUMN("time", "TEXT"),
  DEPOT_COLUMN("kind", "TEXT"),
  DEPOT_ARGUMENT("store"),
  DEPOT_ARGUMENT("db"),
};

static const DepotListing aBranchListing[] = {
  { "depot_branches", 13, aBranchesCol, 1, SQLITE_VTAB_DIRECTONLY, 1000.0, 0,
    branchBranchesRows },
  { "depot_databases", 9, aDatabasesCol, 1, SQLITE_VTAB_DIRECTONLY, 1000.0,
    0, branchDatabasesRows },
  { "depot_restore_points", 8, aRestorePointsCol, 1, SQLITE_VTAB_DIRECTONLY,
    1000.0, 0, branchRestorePointsRows },
};

/* ================= registration ================= */

typedef struct BranchFunc BranchFunc;
struct BranchFunc {
  const char *zName;
  int nMin, nMax;
  void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
};

static const BranchFunc aBranchFunc[] = {
  { "depot_fork", 4, 5, branchFork },
  { "depot_restore_point", 4, 4, branchRestorePoint },
  { "depot_drop_restore_point", 3, 3, branchDropRestorePoint },
  { "depot_restore", 4, 4, branchRestore },
  { "depot_rollback", 3, 4, branchRollback },
  { "depot_drop_branch", 3, 3, branchDropBranch },
  { "depot_pitr_policy", 1, 4, branchPitr },
  { "depot_fork_bucket", 3, 4, branchForkBucket },
};

static int branchConnection(sqlite3 *db, KvConn *pKv){
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  int rc = SQLITE_OK;
  size_t i;
  int n;
  (void)pKv;
  for(i=0; rc==SQLITE_OK && i<sizeof(aBranchFunc)/sizeof(aBranchFunc[0]); i++){
    for(n=aBranchFunc[i].nMin; rc==SQLITE_OK && n<=aBranchFunc[i].nMax; n++){
      rc = sqlite3_create_function(db, aBranchFunc[i].zName, n, f, 0,
                                   aBranchFunc[i].xFunc, 0, 0);
    }
  }
  for(i=0; rc==SQLITE_OK && i<sizeof(aBranchListing)/sizeof(aBranchListing[0]);
      i++){
    rc = depot_listing_register(db, &aBranchListing[i], 0, 0);
  }
  return rc;
}

const DepotComponent depotBranchSqlComponent = {
  "depot: cannot register the depot SQL functions", 0, branchConnection
};
