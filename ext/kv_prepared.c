/*
** kv_prepared.c -- named prepared transactions from SQL (the engine side
** is ext/kv/indoubt.c):
**
**   SELECT kv_prepare(h, 'order-42');          -- in kv_func.c: prepared,
**                                              -- in doubt, handle ended
**   SELECT * FROM kv_prepared;                 -- gid, tid, prepared,
**   SELECT * FROM kv_prepared('/data/kv');     --   tables, keys
**   SELECT kv_commit_prepared('order-42'[, dir]);    -> 1, or 0 if it was
**   SELECT kv_rollback_prepared('order-42'[, dir]);  -- already resolved so
**
** dir names the store (NULL or absent: the main database's default
** store).  Resolving needs no handle and works from any connection of any
** process that opens the store, after any number of restarts.  Errors:
** a gid that is not 1..200 bytes of text (SQLITE_RANGE), no such gid
** (SQLITE_NOTFOUND), a gid resolved the other way (SQLITE_CONSTRAINT), a
** resolution under way elsewhere (SQLITE_BUSY), a read-only connection
** (SQLITE_READONLY).  SQLITE_DIRECTONLY: never from a trigger or view.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/kv/kv.h"
#include "ext/kv_sql.h"
#include "ext/listing.h"
SQLITE_EXTENSION_INIT3

#include <stdio.h>
#include <string.h>
#include <time.h>

/* kv_commit_prepared(gid[, dir]) (bCommit) and kv_rollback_prepared(gid[,
** dir]). */
static void prepResolve(sqlite3_context *ctx, int argc, sqlite3_value **argv,
                        int bCommit){
  KvConn *pConn = (KvConn*)sqlite3_user_data(ctx);
  const char *zFunc = bCommit ? "kv_commit_prepared" : "kv_rollback_prepared";
  KvEngine *pEng = 0;
  char *zErr = 0;
  int bDone = 0, rc;
  if( sqlite3_value_type(argv[0])!=SQLITE_TEXT ){
    kv_sql_error(ctx, SQLITE_RANGE, sqlite3_mprintf("kv: a gid must be text "
        "of 1..%d bytes, got %s", KV_GID_MAX_BYTES,
        kv_value_type_name(argv[0])));
    return;
  }
  rc = kv_conn_writable(pConn->db, zFunc, &zErr);
  if( rc==SQLITE_OK ) rc = kv_conn_store_arg(pConn, argc>1 ? argv[1] : 0, 1, &pEng,
                                     &zErr);
  if( rc==SQLITE_OK ){
    rc = kv_prepared_resolve(pEng, (const char*)sqlite3_value_text(argv[0]),
                             sqlite3_value_bytes(argv[0]), bCommit, &bDone,
                             &zErr);
  }
  kv_engine_unref(pEng);
  if( rc!=SQLITE_OK ){
    kv_sql_error(ctx, rc, zErr);
    return;
  }
  sqlite3_result_int(ctx, bDone);
}

static void prepCommitFunc(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv){
  prepResolve(ctx, argc, argv, 1);
}

static void prepRollbackFunc(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv){
  prepResolve(ctx, argc, argv, 0);
}

/* The listing kv_prepared([dir]). */
static int prepRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  KvConn *pConn = (KvConn*)p->pAux;
  KvEngine *pEng = 0;
  KvPreparedInfo *a = 0;
  int i, n = 0;
  int rc = kv_conn_store_arg(pConn, apArg[0], 1, &pEng, pzErr);
  if( rc==SQLITE_OK ) rc = kv_prepared_list(pEng, &a, &n);
  for(i=0; rc==SQLITE_OK && i<n; i++){
    char zTime[32];
    time_t t = (time_t)(a[i].iPreparedMs/1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(zTime, sizeof(zTime), "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(zTime+19, sizeof(zTime)-19, ".%03d",
             (int)(a[i].iPreparedMs%1000));
    depot_rows_cell(p, DEPOT_CELL_TEXT, 0, a[i].zGid, a[i].nGid);
    depot_rows_int(p, (sqlite3_int64)a[i].tid);
    depot_rows_text(p, zTime);
    depot_rows_text(p, a[i].zTables);
    rc = depot_rows_int(p, a[i].nKey);
  }
  kv_prepared_list_free(a, n);
  kv_engine_unref(pEng);
  return rc;
}

static const DepotListingCol aPrepCol[] = {
  DEPOT_COLUMN("gid", "TEXT"),
  DEPOT_COLUMN("tid", "INTEGER"),
  DEPOT_COLUMN("prepared", "TEXT"),
  DEPOT_COLUMN("\"tables\"", "TEXT"),
  DEPOT_COLUMN("keys", "INTEGER"),
  DEPOT_ARGUMENT("dir"),
};

static const DepotListing prepListing = {
  "kv_prepared", 6, aPrepCol, 0, SQLITE_VTAB_DIRECTONLY, 10.0, 0, prepRows
};

static int prepConnection(sqlite3 *db, KvConn *pConn){
  static const struct {
    const char *zName;
    int nArg;
    void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
  } aFunc[] = {
    { "kv_commit_prepared",   1, prepCommitFunc },
    { "kv_commit_prepared",   2, prepCommitFunc },
    { "kv_rollback_prepared", 1, prepRollbackFunc },
    { "kv_rollback_prepared", 2, prepRollbackFunc },
  };
  size_t i;
  int rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<sizeof(aFunc)/sizeof(aFunc[0]); i++){
    kv_conn_ref(pConn);
    rc = sqlite3_create_function_v2(db, aFunc[i].zName, aFunc[i].nArg,
        SQLITE_UTF8|SQLITE_DIRECTONLY, pConn, aFunc[i].xFunc, 0, 0,
        kv_conn_unref);
  }
  if( rc==SQLITE_OK ){
    kv_conn_ref(pConn);
    rc = depot_listing_register(db, &prepListing, pConn, kv_conn_unref);
  }
  return rc;
}

const DepotComponent depotKvPreparedComponent = {
  "kv: cannot register the KV functions", 0, prepConnection
};
