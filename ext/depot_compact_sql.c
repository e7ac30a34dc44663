/*
** depot_compact_sql.c -- the SQL surface of compaction and reclaim:
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

static void compactResultText(sqlite3_context *ctx, char *z){
  if( z==0 ){
    sqlite3_result_error_nomem(ctx);
  }else{
    sqlite3_result_text(ctx, z, -1, sqlite3_free);
    sqlite3_result_subtype(ctx, 'J');
  }
}

static void compactRun(sqlite3_context *ctx, int argc,
                       sqlite3_value **argv){
  const char *zStore, *zDb = 0, *zBranch = 0;
  DepotCompactResult r;
  char *zErr = 0;
  int rc;
  zStore = depot_text_arg(ctx, argv[0], "depot_compact", "store");
  if( zStore==0 ) return;
  if( argc>1
   && (zDb = depot_text_arg(ctx, argv[1], "depot_compact", "db"))==0 ){
    return;
  }
  if( argc>2
   && (zBranch = depot_text_arg(ctx, argv[2], "depot_compact", "branch"))==0 ){
    return;
  }
  rc = depot_compact(zStore, zDb, zBranch, &r, &zErr);
  if( rc!=SQLITE_OK ){
    depot_result_error(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  compactResultText(ctx, sqlite3_mprintf("{\"branches\":%lld,\"commits\":%lld,"
      "\"shards\":%lld,\"pages\":%lld,\"shard_bytes\":%lld,"
      "\"freed_bytes\":%lld,\"skipped\":%lld}", (long long)r.nBranch,
      (long long)r.nCommit, (long long)r.nShard, (long long)r.nPage,
      (long long)r.nShardBytes, (long long)r.nFreed, (long long)r.nSkipped));
}

static void compactGc(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zStore;
  DepotGcResult r;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( (zStore = depot_text_arg(ctx, argv[0], "depot_gc", "store"))==0 ) return;
  rc = depot_gc(zStore, &r, &zErr);
  if( rc!=SQLITE_OK ){
    depot_result_error(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  compactResultText(ctx, sqlite3_mprintf("{\"dropped_branches\":%lld,"
      "\"rows\":%lld,\"bytes\":%lld}", (long long)r.nBranch,
      (long long)r.nRow, (long long)r.nByte));
}

static void compactVacuum(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  const char *zStore;
  int64_t nBefore = 0, nAfter = 0;
  char *zErr = 0;
  int rc;
  (void)argc;
  if( (zStore = depot_text_arg(ctx, argv[0], "depot_vacuum", "store"))==0 ) return;
  rc = depot_vacuum(zStore, &nBefore, &nAfter, &zErr);
  if( rc!=SQLITE_OK ){
    depot_result_error(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  compactResultText(ctx, sqlite3_mprintf("{\"bytes_before\":%lld,"
      "\"bytes_after\":%lld}", (long long)nBefore, (long long)nAfter));
}

static void compactThreshold(sqlite3_context *ctx, int argc,
                             sqlite3_value **argv){
  const char *zStore;
  int64_t n = -1;
  char *zErr = 0;
  int rc;
  if( (zStore = depot_text_arg(ctx, argv[0], "depot_compact_threshold",
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
    depot_result_error(ctx, rc, zErr);
    return;
  }
  sqlite3_free(zErr);
  sqlite3_result_int64(ctx, n);
}

static const struct {
  const char *zName;
  int nArg;
  void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
} aCompactFunc[] = {
  { "depot_compact", 1, compactRun },
  { "depot_compact", 2, compactRun },
  { "depot_compact", 3, compactRun },
  { "depot_gc", 1, compactGc },
  { "depot_vacuum", 1, compactVacuum },
  { "depot_compact_threshold", 1, compactThreshold },
  { "depot_compact_threshold", 2, compactThreshold },
};

static int compactConnection(sqlite3 *db, KvConn *pKv){
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  size_t i;
  int rc = SQLITE_OK;
  (void)pKv;
  for(i=0; rc==SQLITE_OK && i<sizeof(aCompactFunc)/sizeof(aCompactFunc[0]);
      i++){
    rc = sqlite3_create_function(db, aCompactFunc[i].zName,
                                 aCompactFunc[i].nArg, f, 0,
                                 aCompactFunc[i].xFunc, 0, 0);
  }
  return rc;
}

const DepotComponent depotCompactSqlComponent = {
  "depot: cannot register the depot SQL functions", 0, compactConnection
};
