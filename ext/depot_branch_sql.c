/*
** depot_branch_sql.c -- the SQL surface of forks, restore points,
** point-in-time restore, rollback and buckets (registered per connection
** by the "vfs" component in ext/depot_sql.c):
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
** Every function and table is SQLITE_DIRECTONLY; every state change is one
** store transaction (see vfs/depot_vfs.h).  docs/SQL.md has the details.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <time.h>

/* ================= argument checks ================= */

/* Argument i as non-empty text without NUL bytes, else NULL after setting
** an error naming zWhat in ctx. */
static const char *bsText(sqlite3_context *ctx, sqlite3_value *pVal,
                          const char *zFunc, const char *zWhat){
  const char *z = (const char*)sqlite3_value_text(pVal);
  if( sqlite3_value_type(pVal)!=SQLITE_TEXT || z==0 || z[0]==0
   || (int)strlen(z)!=sqlite3_value_bytes(pVal) ){
    char *zMsg = sqlite3_mprintf("depot: %s: %s must be non-empty text",
                                 zFunc, zWhat);
    sqlite3_result_error(ctx, zMsg, -1);
    sqlite3_free(zMsg);
    return 0;
  }
  return z;
}

/* `at`: NULL (head), an integer, or text; 0 after an error. */
static int bsAt(sqlite3_context *ctx, sqlite3_value *pVal, const char *zFunc,
                DepotAt *pAt){
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
      pAt->zText = bsText(ctx, pVal, zFunc, "at");
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

/* Report rc/zErr (consumed) as the function's error. */
static void bsError(sqlite3_context *ctx, int rc, char *zErr){
  sqlite3_result_error(ctx, zErr ? zErr : "depot: out of memory", -1);
  if( (rc&0xff)!=SQLITE_ERROR ) sqlite3_result_error_code(ctx, rc);
  sqlite3_free(zErr);
}

/* ================= scalar functions ================= */

static void bsForkFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zF = "depot_fork(store, db, from_branch, new_branch[, at])";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? bsText(ctx, argv[1], zF, "db") : 0;
  const char *zFrom = zDb ? bsText(ctx, argv[2], zF, "from_branch") : 0;
  const char *zNew = zFrom ? bsText(ctx, argv[3], zF, "new_branch") : 0;
  DepotAt at;
  uint64_t iNew = 0;
  char *zErr = 0;
  int rc;
  if( zNew==0 || !bsAt(ctx, argc>4 ? argv[4] : 0, zF, &at) ) return;
  rc = depot_fork(zStore, zDb, zFrom, zNew, &at, &iNew, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_int64(ctx, (sqlite3_int64)iNew);
}

static void bsRpFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zF = "depot_restore_point(store, db, branch, name)";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? bsText(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = zDb ? bsText(ctx, argv[2], zF, "branch") : 0;
  const char *zName = zBranch ? bsText(ctx, argv[3], zF, "name") : 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( zName==0 ) return;
  rc = depot_restore_point(zStore, zDb, zBranch, zName, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_text(ctx, zName, -1, SQLITE_TRANSIENT);
}

static void bsDropRpFunc(sqlite3_context *ctx, int argc,
                         sqlite3_value **argv){
  const char *zF = "depot_drop_restore_point(store, db, name)";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? bsText(ctx, argv[1], zF, "db") : 0;
  const char *zName = zDb ? bsText(ctx, argv[2], zF, "name") : 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( zName==0 ) return;
  rc = depot_drop_restore_point(zStore, zDb, zName, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_int(ctx, 1);
}

static void bsRestoreFunc(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  const char *zF = "depot_restore(store, db, branch, at)";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? bsText(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = zDb ? bsText(ctx, argv[2], zF, "branch") : 0;
  char *zUndo = 0, *zErr = 0;
  DepotAt at;
  int rc;
  (void)argc;
  if( zBranch==0 || !bsAt(ctx, argv[3], zF, &at) ) return;
  if( at.eType==DEPOT_AT_HEAD ){
    sqlite3_result_error(ctx, "depot: depot_restore: at must name a txid, a"
        " time or a restore point, not NULL", -1);
    return;
  }
  rc = depot_restore(zStore, zDb, zBranch, &at, &zUndo, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_text(ctx, zUndo, -1, sqlite3_free);
}

static void bsRollbackFunc(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv){
  const char *zF = "depot_rollback(store, db, branch[, at])";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? bsText(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = zDb ? bsText(ctx, argv[2], zF, "branch") : 0;
  uint64_t iNew = 0;
  char *zErr = 0;
  DepotAt at;
  int rc;
  if( zBranch==0 || (argc>3 && !bsAt(ctx, argv[3], zF, &at)) ) return;
  if( argc>3 && at.eType==DEPOT_AT_HEAD ){
    sqlite3_result_error(ctx, "depot: depot_rollback: at must name a txid,"
        " a time or a restore point; leave it out to undo", -1);
    return;
  }
  rc = depot_rollback(zStore, zDb, zBranch, argc>3 ? &at : 0, &iNew, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_int64(ctx, (sqlite3_int64)iNew);
}

static void bsDropBranchFunc(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv){
  const char *zF = "depot_drop_branch(store, db, branch)";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zDb = zStore ? bsText(ctx, argv[1], zF, "db") : 0;
  const char *zBranch = 0;
  uint64_t iBranch = 0;
  sqlite3_int64 iArg = 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( zDb==0 ) return;
  if( depot_value_int64(argv[2], &iArg) && iArg>0 ){
    iBranch = (uint64_t)iArg;
  }else if( (zBranch = bsText(ctx, argv[2], zF,
                              "branch (a name or a branch id)"))==0 ){
    return;
  }
  rc = depot_drop_branch(zStore, zDb, zBranch, iBranch, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_int(ctx, 1);
}

/* Integer seconds >= 0, else an error. */
static int bsSeconds(sqlite3_context *ctx, sqlite3_value *pVal,
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

static void bsPitrFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zF = "depot_pitr_policy(store[, db][, interval, retention])";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zDb = 0;
  sqlite3_int64 iInt = 0, iRet = 0;
  int64_t iI = 0, iR = 0;
  char *zErr = 0;
  int rc = SQLITE_OK, iNum = argc==3 ? 1 : 2;
  if( zStore==0 ) return;
  if( (argc==2 || argc==4) && sqlite3_value_type(argv[1])!=SQLITE_NULL
   && (zDb = bsText(ctx, argv[1], zF, "db"))==0 ) return;
  if( argc>=3 ){
    if( !bsSeconds(ctx, argv[iNum], "interval", &iInt)
     || !bsSeconds(ctx, argv[iNum+1], "retention", &iRet) ) return;
    rc = depot_pitr_set(zStore, zDb, iInt, iRet, &zErr);
  }
  if( rc==SQLITE_OK ) rc = depot_pitr_get(zStore, zDb, &iI, &iR, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_text(ctx, sqlite3_mprintf("{\"interval\":%lld,"
      "\"retention\":%lld}", (long long)iI, (long long)iR), -1, sqlite3_free);
}

/* The `at` of depot_fork_bucket is NULL, an integer (or a real with an
** integral value) or text (a time; a bucket has no restore points): 0
** after reporting another real or a blob. */
static int bsBucketAtType(sqlite3_context *ctx, sqlite3_value *pVal){
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

static void bsForkBucketFunc(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv){
  const char *zF = "depot_fork_bucket(store, bucket, new_bucket[, at])";
  const char *zStore = bsText(ctx, argv[0], zF, "store");
  const char *zBucket = zStore ? bsText(ctx, argv[1], zF, "bucket") : 0;
  const char *zNew = zBucket ? bsText(ctx, argv[2], zF, "new_bucket") : 0;
  uint64_t iVs = 0;
  char *zErr = 0;
  DepotAt at;
  int rc;
  if( zNew==0 || !bsBucketAtType(ctx, argc>3 ? argv[3] : 0)
   || !bsAt(ctx, argc>3 ? argv[3] : 0, zF, &at) ) return;
  rc = depot_fork_bucket(zStore, zBucket, zNew, &at, &iVs, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_int64(ctx, (sqlite3_int64)iVs);
}

/* ============ table-valued functions (rows for ext/depot_tvf.c) ============ */

static char *bsTime(uint64_t iMs){
  time_t t = (time_t)(iMs/1000);
  struct tm tm;
  char z[40];
  gmtime_r(&t, &tm);
  strftime(z, sizeof(z), "%Y-%m-%dT%H:%M:%S", &tm);
  return sqlite3_mprintf("%s.%03dZ", z, (int)(iMs%1000));
}

static const char *const azState[] = { "live", "frozen", "dropped" };

static int bsBranchRow(void *pArg, const DepotBranchInfo *b){
  DepotTvfCursor *p = (DepotTvfCursor*)pArg;
  DepotTvfCell *c = depot_tvf_row(p);
  if( c==0 ) return 1;
  depot_tvf_str_own(p, &c[0], sqlite3_mprintf("%s", b->zDb));
  depot_tvf_str_own(p, &c[1], sqlite3_mprintf("%s", b->zBranch));
  depot_tvf_int(&c[2], (sqlite3_int64)b->iBranch);
  if( b->iParent ) depot_tvf_int(&c[3], (sqlite3_int64)b->iParent);
  if( b->iParent ) depot_tvf_int(&c[4], (sqlite3_int64)b->iForkTxid);
  depot_tvf_int(&c[5], (sqlite3_int64)b->iHeadTxid);
  depot_tvf_str_own(p, &c[6], sqlite3_mprintf("%s", azState[b->eState]));
  depot_tvf_int(&c[7], b->nLogical);
  depot_tvf_str_own(p, &c[8], sqlite3_mprintf("%s", b->zBucket));
  depot_tvf_int(&c[9], b->nRef);
  return p->rc!=SQLITE_OK;
}

static int bsFillBranches(DepotTvfCursor *p, const char *const *az,
                          char **pzErr){
  return depot_list_branches(az[0], az[1], bsBranchRow, p, pzErr);
}

static int bsNameRow(void *pArg, const DepotNameInfo *n){
  DepotTvfCursor *p = (DepotTvfCursor*)pArg;
  DepotTvfCell *c = depot_tvf_row(p);
  if( c==0 ) return 1;
  depot_tvf_str_own(p, &c[0], sqlite3_mprintf("%s", n->zBucket));
  depot_tvf_str_own(p, &c[1], sqlite3_mprintf("%s", n->zDb));
  depot_tvf_str_own(p, &c[2], sqlite3_mprintf("%s", n->zBranch));
  depot_tvf_int(&c[3], (sqlite3_int64)n->iBranch);
  depot_tvf_int(&c[4], (sqlite3_int64)n->iTxid);
  depot_tvf_int(&c[5], n->bInherited);
  depot_tvf_int(&c[6], n->nLogical);
  return p->rc!=SQLITE_OK;
}

static int bsFillDatabases(DepotTvfCursor *p, const char *const *az,
                           char **pzErr){
  return depot_list_databases(az[0], az[1], bsNameRow, p, pzErr);
}

static int bsRpRow(void *pArg, const DepotRpInfo *r){
  DepotTvfCursor *p = (DepotTvfCursor*)pArg;
  DepotTvfCell *c = depot_tvf_row(p);
  if( c==0 ) return 1;
  depot_tvf_str_own(p, &c[0], sqlite3_mprintf("%s", r->zName));
  depot_tvf_str_own(p, &c[1], sqlite3_mprintf("%s", r->zBranch));
  depot_tvf_int(&c[2], (sqlite3_int64)r->iBranch);
  depot_tvf_int(&c[3], (sqlite3_int64)r->iTxid);
  depot_tvf_str_own(p, &c[4], bsTime(r->iTimeMs));
  depot_tvf_str_own(p, &c[5], sqlite3_mprintf("%s", r->bUndo ? "undo" : "user"));
  return p->rc!=SQLITE_OK;
}

static int bsFillRps(DepotTvfCursor *p, const char *const *az,
                     char **pzErr){
  if( az[1]==0 ){
    *pzErr = sqlite3_mprintf("depot: depot_restore_points(store, db) needs"
                             " the db argument");
    return SQLITE_ERROR;
  }
  return depot_list_restore_points(az[0], az[1], bsRpRow, p, pzErr);
}

static const DepotTvf bsBranches = {
  "CREATE TABLE x(database TEXT, branch TEXT, branch_id INTEGER,"
  " parent INTEGER, fork_txid INTEGER, head_txid INTEGER, state TEXT,"
  " logical_size INTEGER, bucket TEXT, pins INTEGER, store HIDDEN,"
  " db HIDDEN)", 10, 2, bsFillBranches, 1
};
static const DepotTvf bsDatabases = {
  "CREATE TABLE x(bucket TEXT, database TEXT, branch TEXT,"
  " branch_id INTEGER, head_txid INTEGER, inherited INTEGER,"
  " logical_size INTEGER, store HIDDEN, bucket_arg HIDDEN)",
  7, 2, bsFillDatabases, 1
};
static const DepotTvf bsRestorePoints = {
  "CREATE TABLE x(name TEXT, branch TEXT, branch_id INTEGER, txid INTEGER,"
  " time TEXT, kind TEXT, store HIDDEN, db HIDDEN)", 6, 2, bsFillRps, 2
};

/* ================= registration ================= */

typedef struct BsFunc BsFunc;
struct BsFunc {
  const char *zName;
  int nMin, nMax;
  void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
};

static const BsFunc aBsFunc[] = {
  { "depot_fork", 4, 5, bsForkFunc },
  { "depot_restore_point", 4, 4, bsRpFunc },
  { "depot_drop_restore_point", 3, 3, bsDropRpFunc },
  { "depot_restore", 4, 4, bsRestoreFunc },
  { "depot_rollback", 3, 4, bsRollbackFunc },
  { "depot_drop_branch", 3, 3, bsDropBranchFunc },
  { "depot_pitr_policy", 1, 4, bsPitrFunc },
  { "depot_fork_bucket", 3, 4, bsForkBucketFunc },
};

int depot_branch_sql_register(sqlite3 *db){
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  int rc = SQLITE_OK;
  size_t i;
  int n;
  for(i=0; rc==SQLITE_OK && i<sizeof(aBsFunc)/sizeof(aBsFunc[0]); i++){
    for(n=aBsFunc[i].nMin; rc==SQLITE_OK && n<=aBsFunc[i].nMax; n++){
      rc = sqlite3_create_function(db, aBsFunc[i].zName, n, f, 0,
                                   aBsFunc[i].xFunc, 0, 0);
    }
  }
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_branches",
                                   &depot_tvf_module, (void*)&bsBranches);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_databases",
                                   &depot_tvf_module, (void*)&bsDatabases);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_restore_points",
                                   &depot_tvf_module, (void*)&bsRestorePoints);
  return rc;
}
