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
      pAt->eType = DEPOT_AT_TXID;
      pAt->iTxid = sqlite3_value_int64(pVal);
      return 1;
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
  char *zErr = 0;
  int rc;
  (void)argc;
  if( zDb==0 ) return;
  if( sqlite3_value_type(argv[2])==SQLITE_INTEGER
   && sqlite3_value_int64(argv[2])>0 ){
    iBranch = (uint64_t)sqlite3_value_int64(argv[2]);
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
  if( sqlite3_value_type(pVal)!=SQLITE_INTEGER
   || (*piOut = sqlite3_value_int64(pVal))<0 ){
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
  if( zNew==0 || !bsAt(ctx, argc>3 ? argv[3] : 0, zF, &at) ) return;
  rc = depot_fork_bucket(zStore, zBucket, zNew, &at, &iVs, &zErr);
  if( rc!=SQLITE_OK ) return bsError(ctx, rc, zErr);
  sqlite3_result_int64(ctx, (sqlite3_int64)iVs);
}

/* ================= table-valued functions ================= */

/* A listing: fixed schema, up to two text arguments (the first required),
** rows collected in xFilter as arrays of cells. */
typedef struct BsCell BsCell;
struct BsCell {
  int eType;                  /* SQLITE_INTEGER, SQLITE_TEXT, SQLITE_NULL */
  sqlite3_int64 i;
  char *z;
};

typedef struct BsCursor BsCursor;
typedef int (*BsFill)(BsCursor*, const char *zArg0, const char *zArg1,
                      char **pzErr);

typedef struct BsTable BsTable;
struct BsTable {
  const char *zSchema;        /* CREATE TABLE x(...) with hidden arguments */
  int nCol;                   /* visible columns */
  int nArg;                   /* hidden argument columns after them */
  BsFill xFill;
};

struct BsCursor {
  sqlite3_vtab_cursor base;   /* must be first */
  const BsTable *pTab;
  BsCell *a;                  /* nRow * nCol */
  int nRow, nAlloc, iRow;
  int rc;
};

typedef struct BsVtab BsVtab;
struct BsVtab {
  sqlite3_vtab base;          /* must be first */
  const BsTable *pTab;
};

static void bsCellsFree(BsCursor *p){
  int i;
  for(i=0; i<p->nRow*p->pTab->nCol; i++) sqlite3_free(p->a[i].z);
  sqlite3_free(p->a);
  p->a = 0;
  p->nRow = p->nAlloc = p->iRow = 0;
}

/* A new row of cells, or NULL (p->rc set) when out of memory. */
static BsCell *bsNewRow(BsCursor *p){
  int nCol = p->pTab->nCol;
  if( p->nRow==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    BsCell *a = sqlite3_realloc64(p->a, sizeof(BsCell)*nCol*nNew);
    if( a==0 ){
      p->rc = SQLITE_NOMEM;
      return 0;
    }
    p->a = a;
    p->nAlloc = nNew;
  }
  memset(&p->a[p->nRow*nCol], 0, sizeof(BsCell)*nCol);
  return &p->a[nCol*p->nRow++];
}

static void bsInt(BsCell *c, sqlite3_int64 i){
  c->eType = SQLITE_INTEGER;
  c->i = i;
}

static void bsStr(BsCursor *p, BsCell *c, char *z){
  if( z==0 ){
    p->rc = SQLITE_NOMEM;
    return;
  }
  c->eType = SQLITE_TEXT;
  c->z = z;
}

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
  BsCursor *p = (BsCursor*)pArg;
  BsCell *c = bsNewRow(p);
  if( c==0 ) return 1;
  bsStr(p, &c[0], sqlite3_mprintf("%s", b->zDb));
  bsStr(p, &c[1], sqlite3_mprintf("%s", b->zBranch));
  bsInt(&c[2], (sqlite3_int64)b->iBranch);
  if( b->iParent ) bsInt(&c[3], (sqlite3_int64)b->iParent);
  if( b->iParent ) bsInt(&c[4], (sqlite3_int64)b->iForkTxid);
  bsInt(&c[5], (sqlite3_int64)b->iHeadTxid);
  bsStr(p, &c[6], sqlite3_mprintf("%s", azState[b->eState]));
  bsInt(&c[7], b->nLogical);
  bsStr(p, &c[8], sqlite3_mprintf("%s", b->zBucket));
  bsInt(&c[9], b->nRef);
  return p->rc!=SQLITE_OK;
}

static int bsFillBranches(BsCursor *p, const char *zStore, const char *zDb,
                          char **pzErr){
  return depot_list_branches(zStore, zDb, bsBranchRow, p, pzErr);
}

static int bsNameRow(void *pArg, const DepotNameInfo *n){
  BsCursor *p = (BsCursor*)pArg;
  BsCell *c = bsNewRow(p);
  if( c==0 ) return 1;
  bsStr(p, &c[0], sqlite3_mprintf("%s", n->zBucket));
  bsStr(p, &c[1], sqlite3_mprintf("%s", n->zDb));
  bsStr(p, &c[2], sqlite3_mprintf("%s", n->zBranch));
  bsInt(&c[3], (sqlite3_int64)n->iBranch);
  bsInt(&c[4], (sqlite3_int64)n->iTxid);
  bsInt(&c[5], n->bInherited);
  bsInt(&c[6], n->nLogical);
  return p->rc!=SQLITE_OK;
}

static int bsFillDatabases(BsCursor *p, const char *zStore,
                           const char *zBucket, char **pzErr){
  return depot_list_databases(zStore, zBucket, bsNameRow, p, pzErr);
}

static int bsRpRow(void *pArg, const DepotRpInfo *r){
  BsCursor *p = (BsCursor*)pArg;
  BsCell *c = bsNewRow(p);
  if( c==0 ) return 1;
  bsStr(p, &c[0], sqlite3_mprintf("%s", r->zName));
  bsStr(p, &c[1], sqlite3_mprintf("%s", r->zBranch));
  bsInt(&c[2], (sqlite3_int64)r->iBranch);
  bsInt(&c[3], (sqlite3_int64)r->iTxid);
  bsStr(p, &c[4], bsTime(r->iTimeMs));
  bsStr(p, &c[5], sqlite3_mprintf("%s", r->bUndo ? "undo" : "user"));
  return p->rc!=SQLITE_OK;
}

static int bsFillRps(BsCursor *p, const char *zStore, const char *zDb,
                     char **pzErr){
  if( zDb==0 ){
    *pzErr = sqlite3_mprintf("depot: depot_restore_points(store, db) needs"
                             " the db argument");
    return SQLITE_ERROR;
  }
  return depot_list_restore_points(zStore, zDb, bsRpRow, p, pzErr);
}

static const BsTable bsBranches = {
  "CREATE TABLE x(database TEXT, branch TEXT, branch_id INTEGER,"
  " parent INTEGER, fork_txid INTEGER, head_txid INTEGER, state TEXT,"
  " logical_size INTEGER, bucket TEXT, pins INTEGER, store HIDDEN,"
  " db HIDDEN)", 10, 2, bsFillBranches
};
static const BsTable bsDatabases = {
  "CREATE TABLE x(bucket TEXT, database TEXT, branch TEXT,"
  " branch_id INTEGER, head_txid INTEGER, inherited INTEGER,"
  " logical_size INTEGER, store HIDDEN, bucket_arg HIDDEN)",
  7, 2, bsFillDatabases
};
static const BsTable bsRestorePoints = {
  "CREATE TABLE x(name TEXT, branch TEXT, branch_id INTEGER, txid INTEGER,"
  " time TEXT, kind TEXT, store HIDDEN, db HIDDEN)", 6, 2, bsFillRps
};

static int bsConnect(sqlite3 *db, void *pAux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr){
  const BsTable *pTab = (const BsTable*)pAux;
  BsVtab *p;
  int rc = sqlite3_declare_vtab(db, pTab->zSchema);
  (void)argc; (void)argv; (void)pzErr;
  if( rc!=SQLITE_OK ) return rc;
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pTab = pTab;
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = &p->base;
  return SQLITE_OK;
}

static int bsDisconnect(sqlite3_vtab *p){
  sqlite3_free(p);
  return SQLITE_OK;
}

/* Equality constraints on the hidden argument columns go to xFilter in
** column order (idxNum: their bitmask); the first is required. */
static int bsBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  const BsTable *pTab = ((BsVtab*)pVtab)->pTab;
  return depot_tvf_best_index(pInfo, pTab->nCol, pTab->nArg);
}

static int bsOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  BsCursor *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pTab = ((BsVtab*)pVtab)->pTab;
  *ppCur = &p->base;
  return SQLITE_OK;
}

static int bsClose(sqlite3_vtab_cursor *pCur){
  BsCursor *p = (BsCursor*)pCur;
  bsCellsFree(p);
  sqlite3_free(p);
  return SQLITE_OK;
}

static int bsVtabErr(sqlite3_vtab_cursor *pCur, int rc, char *zErr){
  sqlite3_free(pCur->pVtab->zErrMsg);
  pCur->pVtab->zErrMsg = zErr ? zErr : sqlite3_mprintf("depot: error %d", rc);
  return rc;
}

static int bsFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  BsCursor *p = (BsCursor*)pCur;
  const char *az[2] = { 0, 0 };
  char *zErr = 0;
  int i, j = 0, rc;
  (void)idxStr;
  bsCellsFree(p);
  p->rc = SQLITE_OK;
  for(i=0; i<2; i++){
    if( (idxNum & (1<<i))==0 || j>=argc ) continue;
    if( i>0 && sqlite3_value_type(argv[j])==SQLITE_NULL ){ j++; continue; }
    az[i] = (const char*)sqlite3_value_text(argv[j]);
    if( sqlite3_value_type(argv[j++])!=SQLITE_TEXT || az[i]==0 || !az[i][0] ){
      return bsVtabErr(pCur, SQLITE_ERROR, sqlite3_mprintf("depot: argument"
          " %d must be non-empty text", i+1));
    }
  }
  rc = p->pTab->xFill(p, az[0], az[1], &zErr);
  if( rc==SQLITE_OK && p->rc!=SQLITE_OK ) rc = p->rc;
  if( rc!=SQLITE_OK ){
    bsCellsFree(p);
    return bsVtabErr(pCur, rc, zErr);
  }
  sqlite3_free(zErr);
  return SQLITE_OK;
}

static int bsNext(sqlite3_vtab_cursor *pCur){
  ((BsCursor*)pCur)->iRow++;
  return SQLITE_OK;
}

static int bsEof(sqlite3_vtab_cursor *pCur){
  BsCursor *p = (BsCursor*)pCur;
  return p->iRow>=p->nRow;
}

static int bsColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  BsCursor *p = (BsCursor*)pCur;
  const BsCell *c;
  if( i>=p->pTab->nCol ) return SQLITE_OK;
  c = &p->a[p->iRow*p->pTab->nCol + i];
  if( c->eType==SQLITE_INTEGER ) sqlite3_result_int64(ctx, c->i);
  else if( c->eType==SQLITE_TEXT ) sqlite3_result_text(ctx, c->z, -1,
                                                       SQLITE_TRANSIENT);
  return SQLITE_OK;
}

static int bsRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((BsCursor*)pCur)->iRow + 1;
  return SQLITE_OK;
}

static const sqlite3_module bsModule = {
  0, 0, bsConnect, bsBestIndex, bsDisconnect, 0, bsOpen, bsClose, bsFilter,
  bsNext, bsEof, bsColumn, bsRowid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
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
                                   &bsModule, (void*)&bsBranches);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_databases",
                                   &bsModule, (void*)&bsDatabases);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_restore_points",
                                   &bsModule, (void*)&bsRestorePoints);
  return rc;
}
