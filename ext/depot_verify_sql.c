/*
** depot_verify_sql.c -- the SQL surface of quotas and verification of
** depot stores:
**
**   depot_quota(store, db)          -> the cap in bytes, or NULL
**   depot_quota(store, db, bytes)   -> sets the cap (NULL removes it)
**   SELECT * FROM depot_quotas(store);
**       db, used_bytes, cap_bytes, free_bytes -- one row per database
**   SELECT * FROM depot_verify(store[, db[, branch]]);
**       db, branch, branch_id, kind, txid, pgno, key, message -- one row
**       per finding, none when the store is healthy
**
** The two tables are listings (ext/listing.h).  All are
** SQLITE_DIRECTONLY.  docs/SQL.md has the details.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/listing.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* ================= depot_quota ================= */

/* Argument pVal as non-empty text, or NULL after setting an error naming
** zWhat. */
static const char *verifyText(sqlite3_context *ctx, sqlite3_value *pVal,
                              const char *zWhat){
  return depot_text_arg(ctx, pVal, "depot_quota(store, db[, bytes])", zWhat);
}

/* The bytes argument: NULL (remove) or an integer >= 0; 0 after an
** error. */
static int verifyBytes(sqlite3_context *ctx, sqlite3_value *pVal, int *pbRemove,
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

static void verifyQuota(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zStore = verifyText(ctx, argv[0], "store");
  const char *zDb = zStore ? verifyText(ctx, argv[1], "db") : 0;
  int64_t nUsed = 0, nCap = 0;
  sqlite3_int64 nNew = 0;
  char *zErr = 0;
  int bCap = 0, bRemove = 0, rc;
  if( zDb==0 ) return;
  if( argc>2 ){
    if( !verifyBytes(ctx, argv[2], &bRemove, &nNew) ) return;
    rc = depot_quota_set(zStore, zDb, bRemove, nNew, &zErr);
    bCap = !bRemove;
    nCap = nNew;
  }else{
    rc = depot_quota_get(zStore, zDb, &nUsed, &nCap, &bCap, &zErr);
  }
  if( rc!=SQLITE_OK ){
    depot_result_error(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  if( bCap ) sqlite3_result_int64(ctx, nCap);
}

/* ======================= listings (ext/listing.h) ======================= */

static int verifyQuotaRow(void *pArg, const DepotQuotaInfo *q){
  DepotRows *p = (DepotRows*)pArg;
  depot_rows_text(p, q->zDb);
  depot_rows_int(p, q->nUsed);
  if( q->bCap ){
    depot_rows_int(p, q->nCap);
    depot_rows_int(p, q->nCap>q->nUsed ? q->nCap-q->nUsed : 0);
  }else{
    depot_rows_null(p);
    depot_rows_null(p);
  }
  return p->rc!=SQLITE_OK;
}

static int verifyQuotasRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  const char *az[1];
  int rc = depot_text_args(apArg, 1, 1, az, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  return depot_quota_list(az[0], verifyQuotaRow, p, pzErr);
}

static int verifyFindingRow(void *pArg, const DepotFinding *f){
  DepotRows *p = (DepotRows*)pArg;
  depot_rows_text(p, f->zDb);
  depot_rows_text(p, f->zBranch);
  if( f->iBranch ) depot_rows_int(p, (sqlite3_int64)f->iBranch);
  else depot_rows_null(p);
  depot_rows_text(p, f->zKind);
  if( f->iTxid>=0 ) depot_rows_int(p, f->iTxid);
  else depot_rows_null(p);
  if( f->iPgno>=0 ) depot_rows_int(p, f->iPgno);
  else depot_rows_null(p);
  depot_rows_text(p, f->zKey);
  depot_rows_text(p, f->zMsg);
  return p->rc!=SQLITE_OK;
}

static int verifyFindingsRows(DepotRows *p, sqlite3_value **apArg,
                              char **pzErr){
  const char *az[3];
  int rc = depot_text_args(apArg, 3, 1, az, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  return depot_verify(az[0], az[1], az[2], verifyFindingRow, p, pzErr);
}

static const DepotListingCol aQuotasCol[] = {
  DEPOT_COLUMN("db", "TEXT"),
  DEPOT_COLUMN("used_bytes", "INTEGER"),
  DEPOT_COLUMN("cap_bytes", "INTEGER"),
  DEPOT_COLUMN("free_bytes", "INTEGER"),
  DEPOT_ARGUMENT("store"),
};
static const DepotListingCol aVerifyCol[] = {
  DEPOT_COLUMN("db", "TEXT"),
  DEPOT_COLUMN("branch", "TEXT"),
  DEPOT_COLUMN("branch_id", "INTEGER"),
  DEPOT_COLUMN("kind", "TEXT"),
  DEPOT_COLUMN("txid", "INTEGER"),
  DEPOT_COLUMN("pgno", "INTEGER"),
  DEPOT_COLUMN("key", "TEXT"),
  DEPOT_COLUMN("message", "TEXT"),
  DEPOT_ARGUMENT("store"),
  DEPOT_ARGUMENT("db_arg"),
  DEPOT_ARGUMENT("branch_arg"),
};

static const DepotListing aVerifyListing[] = {
  { "depot_quotas", 5, aQuotasCol, 1, SQLITE_VTAB_DIRECTONLY, 1000.0, 0,
    verifyQuotasRows },
  { "depot_verify", 11, aVerifyCol, 1, SQLITE_VTAB_DIRECTONLY, 1000.0, 0,
    verifyFindingsRows },
};

static int verifyConnection(sqlite3 *db, KvConn *pKv){
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  int rc = sqlite3_create_function(db, "depot_quota", 2, f, 0, verifyQuota,
                                   0, 0);
  (void)pKv;
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_quota", 3, f,
                                   0, verifyQuota, 0, 0);
  if( rc==SQLITE_OK ) rc = depot_listing_register(db, &aVerifyListing[0], 0,
                                                  0);
  if( rc==SQLITE_OK ) rc = depot_listing_register(db, &aVerifyListing[1], 0,
                                                  0);
  return rc;
}

const DepotComponent depotVerifySqlComponent = {
  "depot: cannot register the depot SQL functions", 0, verifyConnection
};
