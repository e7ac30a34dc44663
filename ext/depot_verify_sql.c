/*
** depot_verify_sql.c -- the SQL surface of quotas and verification of
** depot stores (registered per connection by the "vfs" component in
** ext/depot_sql.c):
**
**   depot_quota(store, db)          -> the cap in bytes, or NULL
**   depot_quota(store, db, bytes)   -> sets the cap (NULL removes it)
**   SELECT * FROM depot_quotas(store);
**       db, used_bytes, cap_bytes, free_bytes -- one row per database
**   SELECT * FROM depot_verify(store[, db[, branch]]);
**       db, branch, branch_id, kind, txid, pgno, key, message -- one row
**       per finding, none when the store is healthy
**
** All are SQLITE_DIRECTONLY.  docs/SQL.md has the details.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* ================= depot_quota ================= */

/* Argument pVal as non-empty text without NUL bytes, or NULL after setting
** an error naming zWhat. */
static const char *dvText(sqlite3_context *ctx, sqlite3_value *pVal,
                          const char *zWhat){
  const char *z = (const char*)sqlite3_value_text(pVal);
  if( sqlite3_value_type(pVal)!=SQLITE_TEXT || z==0 || z[0]==0
   || (int)strlen(z)!=sqlite3_value_bytes(pVal) ){
    char *zMsg = sqlite3_mprintf("depot: depot_quota(store, db[, bytes]):"
                                 " %s must be non-empty text", zWhat);
    sqlite3_result_error(ctx, zMsg, -1);
    sqlite3_free(zMsg);
    return 0;
  }
  return z;
}

static void dvError(sqlite3_context *ctx, int rc, char *zErr){
  sqlite3_result_error(ctx, zErr ? zErr : "depot: out of memory", -1);
  if( (rc&0xff)!=SQLITE_ERROR ) sqlite3_result_error_code(ctx, rc);
  sqlite3_free(zErr);
}

/* The bytes argument: NULL (remove) or an integer >= 0; 0 after an
** error. */
static int dvBytes(sqlite3_context *ctx, sqlite3_value *pVal, int *pbRemove,
                   sqlite3_int64 *pn){
  *pbRemove = sqlite3_value_type(pVal)==SQLITE_NULL;
  *pn = sqlite3_value_int64(pVal);
  if( *pbRemove ) return 1;
  if( sqlite3_value_type(pVal)!=SQLITE_INTEGER || *pn<0 ){
    sqlite3_result_error(ctx, "depot: depot_quota(store, db, bytes): bytes"
        " must be NULL (no quota) or an integer of 0 or more", -1);
    return 0;
  }
  return 1;
}

static void dvQuotaFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zStore = dvText(ctx, argv[0], "store");
  const char *zDb = zStore ? dvText(ctx, argv[1], "db") : 0;
  int64_t nUsed = 0, nCap = 0;
  sqlite3_int64 nNew = 0;
  char *zErr = 0;
  int bCap = 0, bRemove = 0, rc;
  if( zDb==0 ) return;
  if( argc>2 ){
    if( !dvBytes(ctx, argv[2], &bRemove, &nNew) ) return;
    rc = depot_quota_set(zStore, zDb, bRemove, nNew, &zErr);
    bCap = !bRemove;
    nCap = nNew;
  }else{
    rc = depot_quota_get(zStore, zDb, &nUsed, &nCap, &bCap, &zErr);
  }
  if( rc!=SQLITE_OK ){
    dvError(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  if( bCap ) sqlite3_result_int64(ctx, nCap);
}

/* ================= the table-valued functions ================= */

typedef struct DvCell DvCell;
struct DvCell {
  int eType;                  /* SQLITE_NULL, _INTEGER or _TEXT */
  sqlite3_int64 i;
  char *z;
};

typedef struct DvCursor DvCursor;
typedef int (*DvFill)(DvCursor*, const char *const *azArg, char **pzErr);

typedef struct DvTable DvTable;
struct DvTable {
  const char *zSchema;        /* visible columns, then hidden arguments */
  int nCol, nArg;
  DvFill xFill;
};

struct DvCursor {
  sqlite3_vtab_cursor base;   /* must be first */
  const DvTable *pTab;
  DvCell *a;                  /* nRow * nCol */
  int nRow, nAlloc, iRow;
  int rc;
};

typedef struct DvVtab DvVtab;
struct DvVtab {
  sqlite3_vtab base;          /* must be first */
  const DvTable *pTab;
};

static void dvCellsFree(DvCursor *p){
  int i;
  for(i=0; i<p->nRow*p->pTab->nCol; i++) sqlite3_free(p->a[i].z);
  sqlite3_free(p->a);
  p->a = 0;
  p->nRow = p->nAlloc = p->iRow = 0;
}

static DvCell *dvNewRow(DvCursor *p){
  int nCol = p->pTab->nCol;
  if( p->nRow==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    DvCell *a = sqlite3_realloc64(p->a, sizeof(DvCell)*nCol*nNew);
    if( a==0 ){
      p->rc = SQLITE_NOMEM;
      return 0;
    }
    p->a = a;
    p->nAlloc = nNew;
  }
  memset(&p->a[p->nRow*nCol], 0, sizeof(DvCell)*nCol);
  return &p->a[nCol*p->nRow++];
}

static void dvInt(DvCell *c, sqlite3_int64 i){
  c->eType = SQLITE_INTEGER;
  c->i = i;
}

/* A copy of z (NULL stays NULL). */
static void dvStr(DvCursor *p, DvCell *c, const char *z){
  if( z==0 ) return;
  c->z = sqlite3_mprintf("%s", z);
  if( c->z==0 ) p->rc = SQLITE_NOMEM;
  else c->eType = SQLITE_TEXT;
}

static int dvQuotaRow(void *pArg, const DepotQuotaInfo *q){
  DvCursor *p = (DvCursor*)pArg;
  DvCell *c = dvNewRow(p);
  if( c==0 ) return 1;
  dvStr(p, &c[0], q->zDb);
  dvInt(&c[1], q->nUsed);
  if( q->bCap ) dvInt(&c[2], q->nCap);
  if( q->bCap ) dvInt(&c[3], q->nCap>q->nUsed ? q->nCap-q->nUsed : 0);
  return p->rc!=SQLITE_OK;
}

static int dvFillQuotas(DvCursor *p, const char *const *az, char **pzErr){
  return depot_quota_list(az[0], dvQuotaRow, p, pzErr);
}

static int dvFindingRow(void *pArg, const DepotFinding *f){
  DvCursor *p = (DvCursor*)pArg;
  DvCell *c = dvNewRow(p);
  if( c==0 ) return 1;
  dvStr(p, &c[0], f->zDb);
  dvStr(p, &c[1], f->zBranch);
  if( f->iBranch ) dvInt(&c[2], (sqlite3_int64)f->iBranch);
  dvStr(p, &c[3], f->zKind);
  if( f->iTxid>=0 ) dvInt(&c[4], f->iTxid);
  if( f->iPgno>=0 ) dvInt(&c[5], f->iPgno);
  dvStr(p, &c[6], f->zKey);
  dvStr(p, &c[7], f->zMsg);
  return p->rc!=SQLITE_OK;
}

static int dvFillVerify(DvCursor *p, const char *const *az, char **pzErr){
  return depot_verify(az[0], az[1], az[2], dvFindingRow, p, pzErr);
}

static const DvTable dvQuotas = {
  "CREATE TABLE x(db TEXT, used_bytes INTEGER, cap_bytes INTEGER,"
  " free_bytes INTEGER, store HIDDEN)", 4, 1, dvFillQuotas
};
static const DvTable dvVerify = {
  "CREATE TABLE x(db TEXT, branch TEXT, branch_id INTEGER, kind TEXT,"
  " txid INTEGER, pgno INTEGER, key TEXT, message TEXT, store HIDDEN,"
  " db_arg HIDDEN, branch_arg HIDDEN)", 8, 3, dvFillVerify
};

static int dvConnect(sqlite3 *db, void *pAux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr){
  const DvTable *pTab = (const DvTable*)pAux;
  DvVtab *p;
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

static int dvDisconnect(sqlite3_vtab *p){
  sqlite3_free(p);
  return SQLITE_OK;
}

/* See depot_tvf_best_index(): the hidden argument columns. */
static int dvBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  const DvTable *pTab = ((DvVtab*)pVtab)->pTab;
  return depot_tvf_best_index(pInfo, pTab->nCol, pTab->nArg);
}

static int dvOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  DvCursor *p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  p->pTab = ((DvVtab*)pVtab)->pTab;
  *ppCur = &p->base;
  return SQLITE_OK;
}

static int dvClose(sqlite3_vtab_cursor *pCur){
  DvCursor *p = (DvCursor*)pCur;
  dvCellsFree(p);
  sqlite3_free(p);
  return SQLITE_OK;
}

static int dvVtabErr(sqlite3_vtab_cursor *pCur, int rc, char *zErr){
  sqlite3_free(pCur->pVtab->zErrMsg);
  pCur->pVtab->zErrMsg = zErr ? zErr : sqlite3_mprintf("depot: error %d", rc);
  return rc;
}

static int dvFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  DvCursor *p = (DvCursor*)pCur;
  const char *az[3] = { 0, 0, 0 };
  char *zErr = 0;
  int i, j = 0, rc;
  (void)idxStr;
  dvCellsFree(p);
  p->rc = SQLITE_OK;
  for(i=0; i<p->pTab->nArg; i++){
    if( (idxNum & (1<<i))==0 || j>=argc ) continue;
    if( i>0 && sqlite3_value_type(argv[j])==SQLITE_NULL ){ j++; continue; }
    az[i] = (const char*)sqlite3_value_text(argv[j]);
    if( sqlite3_value_type(argv[j])!=SQLITE_TEXT || az[i]==0 || !az[i][0]
     || (int)strlen(az[i])!=sqlite3_value_bytes(argv[j]) ){
      return dvVtabErr(pCur, SQLITE_ERROR, sqlite3_mprintf("depot: argument"
          " %d must be non-empty text", i+1));
    }
    j++;
  }
  rc = p->pTab->xFill(p, az, &zErr);
  if( rc==SQLITE_OK && p->rc!=SQLITE_OK ) rc = p->rc;
  if( rc!=SQLITE_OK ){
    dvCellsFree(p);
    return dvVtabErr(pCur, rc, zErr);
  }
  sqlite3_free(zErr);
  return SQLITE_OK;
}

static int dvNext(sqlite3_vtab_cursor *pCur){
  ((DvCursor*)pCur)->iRow++;
  return SQLITE_OK;
}

static int dvEof(sqlite3_vtab_cursor *pCur){
  DvCursor *p = (DvCursor*)pCur;
  return p->iRow>=p->nRow;
}

static int dvColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  DvCursor *p = (DvCursor*)pCur;
  const DvCell *c;
  if( i>=p->pTab->nCol ) return SQLITE_OK;
  c = &p->a[p->iRow*p->pTab->nCol + i];
  if( c->eType==SQLITE_INTEGER ) sqlite3_result_int64(ctx, c->i);
  else if( c->eType==SQLITE_TEXT ) sqlite3_result_text(ctx, c->z, -1,
                                                       SQLITE_TRANSIENT);
  return SQLITE_OK;
}

static int dvRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((DvCursor*)pCur)->iRow + 1;
  return SQLITE_OK;
}

static const sqlite3_module dvModule = {
  0, 0, dvConnect, dvBestIndex, dvDisconnect, 0, dvOpen, dvClose, dvFilter,
  dvNext, dvEof, dvColumn, dvRowid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

int depot_verify_sql_register(sqlite3 *db){
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  int rc = sqlite3_create_function(db, "depot_quota", 2, f, 0, dvQuotaFunc,
                                   0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_quota", 3, f,
                                   0, dvQuotaFunc, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_quotas",
                                   &dvModule, (void*)&dvQuotas);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_verify",
                                   &dvModule, (void*)&dvVerify);
  return rc;
}
