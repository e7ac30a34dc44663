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
  *pn = 0;
  if( *pbRemove ) return 1;
  if( !depot_value_int64(pVal, pn) || *pn<0 ){
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

static int dvQuotaRow(void *pArg, const DepotQuotaInfo *q){
  DepotTvfCursor *p = (DepotTvfCursor*)pArg;
  DepotTvfCell *c = depot_tvf_row(p);
  if( c==0 ) return 1;
  depot_tvf_str(p, &c[0], q->zDb);
  depot_tvf_int(&c[1], q->nUsed);
  if( q->bCap ) depot_tvf_int(&c[2], q->nCap);
  if( q->bCap ) depot_tvf_int(&c[3], q->nCap>q->nUsed ? q->nCap-q->nUsed : 0);
  return p->rc!=SQLITE_OK;
}

static int dvFillQuotas(DepotTvfCursor *p, const char *const *az, char **pzErr){
  return depot_quota_list(az[0], dvQuotaRow, p, pzErr);
}

static int dvFindingRow(void *pArg, const DepotFinding *f){
  DepotTvfCursor *p = (DepotTvfCursor*)pArg;
  DepotTvfCell *c = depot_tvf_row(p);
  if( c==0 ) return 1;
  depot_tvf_str(p, &c[0], f->zDb);
  depot_tvf_str(p, &c[1], f->zBranch);
  if( f->iBranch ) depot_tvf_int(&c[2], (sqlite3_int64)f->iBranch);
  depot_tvf_str(p, &c[3], f->zKind);
  if( f->iTxid>=0 ) depot_tvf_int(&c[4], f->iTxid);
  if( f->iPgno>=0 ) depot_tvf_int(&c[5], f->iPgno);
  depot_tvf_str(p, &c[6], f->zKey);
  depot_tvf_str(p, &c[7], f->zMsg);
  return p->rc!=SQLITE_OK;
}

static int dvFillVerify(DepotTvfCursor *p, const char *const *az, char **pzErr){
  return depot_verify(az[0], az[1], az[2], dvFindingRow, p, pzErr);
}

static const DepotTvf dvQuotas = {
  "CREATE TABLE x(db TEXT, used_bytes INTEGER, cap_bytes INTEGER,"
  " free_bytes INTEGER, store HIDDEN)", 4, 1, dvFillQuotas, 1
};
static const DepotTvf dvVerify = {
  "CREATE TABLE x(db TEXT, branch TEXT, branch_id INTEGER, kind TEXT,"
  " txid INTEGER, pgno INTEGER, key TEXT, message TEXT, store HIDDEN,"
  " db_arg HIDDEN, branch_arg HIDDEN)", 8, 3, dvFillVerify, 1
};

int depot_verify_sql_register(sqlite3 *db){
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  int rc = sqlite3_create_function(db, "depot_quota", 2, f, 0, dvQuotaFunc,
                                   0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_quota", 3, f,
                                   0, dvQuotaFunc, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_quotas",
                                   &depot_tvf_module, (void*)&dvQuotas);
  if( rc==SQLITE_OK ) rc = sqlite3_create_module(db, "depot_verify",
                                   &depot_tvf_module, (void*)&dvVerify);
  return rc;
}
