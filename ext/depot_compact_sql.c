/*
** depot_compact_sql.c -- the SQL surface of compaction and reclaim
** (registered per connection by the "vfs" component in ext/depot_sql.c):
**
**   depot_compact(store[, db[, branch]])     -> JSON: what was folded
**   depot_gc(store)                          -> JSON: what was reclaimed
**   depot_vacuum(store)                      -> JSON: physical bytes before
**                                               and after the rewrite
**   depot_compact_threshold(store[, n])      -> the background threshold
**
** Every function is SQLITE_DIRECTONLY; see vfs/depot_vfs.h for what is
** durable when each returns and docs/SQL.md for the details.
*/
#include "config.h"
#include "ext/depot_int.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <string.h>

/* Argument i as non-empty text without NUL bytes, else NULL after setting
** an error naming zWhat. */
static const char *csText(sqlite3_context *ctx, sqlite3_value *pVal,
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

/* Report rc/zErr (consumed) as the function's error. */
static void csError(sqlite3_context *ctx, int rc, char *zErr){
  sqlite3_result_error(ctx, zErr ? zErr : "depot: out of memory", -1);
  if( (rc&0xff)!=SQLITE_ERROR ) sqlite3_result_error_code(ctx, rc);
  sqlite3_free(zErr);
}

static void csResultText(sqlite3_context *ctx, char *z){
  if( z==0 ){
    sqlite3_result_error_nomem(ctx);
  }else{
    sqlite3_result_text(ctx, z, -1, sqlite3_free);
    sqlite3_result_subtype(ctx, 'J');
  }
}

static void csCompactFunc(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  const char *zStore, *zDb = 0, *zBranch = 0;
  DepotCompactResult r;
  char *zErr = 0;
  int rc;
  if( (zStore = csText(ctx, argv[0], "depot_compact", "store"))==0 ) return;
  if( argc>1 && (zDb = csText(ctx, argv[1], "depot_compact", "db"))==0 ){
    return;
  }
  if( argc>2 && (zBranch = csText(ctx, argv[2], "depot_compact",
                                  "branch"))==0 ){
    return;
  }
  rc = depot_compact(zStore, zDb, zBranch, &r, &zErr);
  if( rc!=SQLITE_OK ){
    csError(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  csResultText(ctx, sqlite3_mprintf("{\"branches\":%lld,\"commits\":%lld,"
      "\"shards\":%lld,\"pages\":%lld,\"shard_bytes\":%lld,"
      "\"freed_bytes\":%lld,\"skipped\":%lld}", (long long)r.nBranch,
      (long long)r.nCommit, (long long)r.nShard, (long long)r.nPage,
      (long long)r.nShardBytes, (long long)r.nFreed, (long long)r.nSkipped));
}

static void csGcFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zStore;
  DepotGcResult r;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( (zStore = csText(ctx, argv[0], "depot_gc", "store"))==0 ) return;
  rc = depot_gc(zStore, &r, &zErr);
  if( rc!=SQLITE_OK ){
    csError(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  csResultText(ctx, sqlite3_mprintf("{\"dropped_branches\":%lld,"
      "\"rows\":%lld,\"bytes\":%lld}", (long long)r.nBranch,
      (long long)r.nRow, (long long)r.nByte));
}

static void csVacuumFunc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zStore;
  int64_t nBefore = 0, nAfter = 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( (zStore = csText(ctx, argv[0], "depot_vacuum", "store"))==0 ) return;
  rc = depot_vacuum(zStore, &nBefore, &nAfter, &zErr);
  if( rc!=SQLITE_OK ){
    csError(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  csResultText(ctx, sqlite3_mprintf("{\"bytes_before\":%lld,"
      "\"bytes_after\":%lld}", (long long)nBefore, (long long)nAfter));
}

static void csThresholdFunc(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv){
  const char *zStore;
  int64_t n = -1;
  char *zErr = 0;
  int rc;
  if( (zStore = csText(ctx, argv[0], "depot_compact_threshold",
                       "store"))==0 ){
    return;
  }
  if( argc>1 ){
    sqlite3_int64 iArg = -1;
    if( !depot_value_int64(argv[1], &iArg) || iArg<0 ){
      sqlite3_result_error(ctx, "depot: depot_compact_threshold: n must be"
          " an integer >= 0 (0 turns background compaction off)", -1);
      return;
    }
    n = iArg;
  }
  rc = depot_compact_threshold(zStore, n, &n, &zErr);
  if( rc!=SQLITE_OK ){
    csError(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  sqlite3_result_int64(ctx, n);
}

int depot_compact_sql_register(sqlite3 *db){
  static const struct {
    const char *zName;
    int nArg;
    void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
  } aFunc[] = {
    { "depot_compact", 1, csCompactFunc },
    { "depot_compact", 2, csCompactFunc },
    { "depot_compact", 3, csCompactFunc },
    { "depot_gc", 1, csGcFunc },
    { "depot_vacuum", 1, csVacuumFunc },
    { "depot_compact_threshold", 1, csThresholdFunc },
    { "depot_compact_threshold", 2, csThresholdFunc },
  };
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  int i, rc = SQLITE_OK;
  for(i=0; rc==SQLITE_OK && i<(int)(sizeof(aFunc)/sizeof(aFunc[0])); i++){
    rc = sqlite3_create_function(db, aFunc[i].zName, aFunc[i].nArg, f, 0,
                                 aFunc[i].xFunc, 0, 0);
  }
  return rc;
}
