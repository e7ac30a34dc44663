/*
** cmd_store.c -- the commands on a whole store:
**
**   depot verify STORE [DB [BRANCH]]   depot_verify: each finding, exit 3
**   depot compact STORE [DB [BRANCH]]  depot_compact
**   depot gc STORE                     depot_gc
**   depot stats STORE                  depot_stats
**   depot du STORE                     depot_branches, depot_stats, stat()
**
** verify, compact and gc run with the progress bar and stop requests of
** out_run_long(); each is one SQL statement of one step, so the bar is
** erased before anything is printed.
*/
#include "config.h"
#include "ext/cli/cli.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* Print the members of JSON object zJson as "key  value" lines (text). */
static int storeFields(Cli *p, const char *zJson){
  sqlite3_stmt *pStmt;
  int rc;
  if( p->bJson || p->bQuiet ) return SQLITE_OK;
  pStmt = cli_prepare(p, "SELECT key, quote(value) FROM json_each(?1)");
  if( pStmt==0 ) return SQLITE_ERROR;
  sqlite3_bind_text(pStmt, 1, zJson, -1, SQLITE_STATIC);
  while( (rc = sqlite3_step(pStmt))==SQLITE_ROW ){
    const char *zVal = (const char*)sqlite3_column_text(pStmt, 1);
    if( zVal[0]=='\'' ){
      printf("%-22s %.*s\n", sqlite3_column_text(pStmt, 0),
             (int)strlen(zVal)-2, zVal+1);
    }else{
      printf("%-22s %s\n", sqlite3_column_text(pStmt, 0), zVal);
    }
  }
  sqlite3_finalize(pStmt);
  return rc==SQLITE_DONE ? SQLITE_OK : rc;
}

/* Bind the texts azArg[0..nArg-1] to ?1..?nArg and NULL to the rest up to
** nMax. */
static void storeBind(sqlite3_stmt *pStmt, int nArg, char **azArg, int nMax){
  int i;
  for(i=0; i<nMax; i++){
    if( i<nArg ) sqlite3_bind_text(pStmt, i+1, azArg[i], -1, SQLITE_STATIC);
    else sqlite3_bind_null(pStmt, i+1);
  }
}

static void storeNames(Cli *p, int nArg, char **azArg){
  out_begin(p);
  out_str(p, "store", azArg[0]);
  if( nArg>1 ) out_str(p, "db", azArg[1]);
  if( nArg>2 ) out_str(p, "branch", azArg[2]);
}

int cmd_verify(Cli *p, int nArg, char **azArg){
  sqlite3_stmt *pStmt;
  int bStop = 0, rc;
  storeNames(p, nArg, azArg);
  pStmt = cli_prepare(p, "SELECT count(*), json_group_array(json_object("
      "'db', db, 'branch', branch, 'branch_id', branch_id, 'kind', kind,"
      " 'txid', txid, 'pgno', pgno, 'key', key, 'message', message)),"
      " group_concat(kind || ' ' || coalesce(db || coalesce('@' || branch,"
      " ''), 'store') || coalesce(' txid ' || txid, '')"
      " || coalesce(' page ' || pgno, '') || ': ' || message, char(10))"
      " FROM depot_verify(?1, ?2, ?3)");
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  storeBind(pStmt, nArg, azArg, 3);
  rc = out_run_long(p, pStmt, "branches", &bStop);
  if( rc==SQLITE_ROW ){
    sqlite3_int64 n = sqlite3_column_int64(pStmt, 0);
    out_int(p, "problems", n);
    out_json(p, "findings", (const char*)sqlite3_column_text(pStmt, 1));
    if( n>0 ){
      out_text(p, "%s\n%lld problem%s found\n", sqlite3_column_text(pStmt, 2),
               n, n==1 ? "" : "s");
      if( p->bQuiet && !p->bJson ){
        fprintf(stderr, "depot: verify found %lld problem%s\n", n,
                n==1 ? "" : "s");
      }
    }else{
      out_text(p, "ok: no problems found\n");
    }
    rc = n>0 ? CLI_FINDINGS : CLI_OK;
  }else if( bStop ){
    rc = out_fail(p, "verify interrupted");
  }else{
    rc = cli_sql_fail(p);
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}

/* compact, gc and vacuum: one JSON-returning call, run as a long operation. */
static int storeJsonCall(Cli *p, const char *zSql, int nArg, char **azArg,
                         int nMax, const char *zUnit, const char *zWhat){
  sqlite3_stmt *pStmt;
  int bStop = 0, rc;
  storeNames(p, nArg, azArg);
  pStmt = cli_prepare(p, zSql);
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  storeBind(pStmt, nArg, azArg, nMax);
  rc = out_run_long(p, pStmt, zUnit, &bStop);
  if( rc==SQLITE_ROW ){
    const char *zRes = (const char*)sqlite3_column_text(pStmt, 0);
    out_json(p, "result", zRes);
    rc = storeFields(p, zRes)==SQLITE_OK ? CLI_OK : cli_sql_fail(p);
  }else if( bStop ){
    rc = out_fail(p, "%s interrupted: %s", zWhat, strcmp(zWhat, "compact")==0
        ? "the job in progress was rolled back"
        : "the branches reclaimed so far stay reclaimed");
  }else{
    rc = cli_sql_fail(p);
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}

int cmd_compact(Cli *p, int nArg, char **azArg){
  static const char *const azSql[3] = {
    "SELECT depot_compact(?1)",
    "SELECT depot_compact(?1, ?2)",
    "SELECT depot_compact(?1, ?2, ?3)",
  };
  return storeJsonCall(p, azSql[nArg-1], nArg, azArg, nArg, "shards",
                       "compact");
}

int cmd_gc(Cli *p, int nArg, char **azArg){
  return storeJsonCall(p, "SELECT depot_gc(?1)", nArg, azArg, 1, "branches",
                       "gc");
}

int cmd_vacuum(Cli *p, int nArg, char **azArg){
  return storeJsonCall(p, "SELECT depot_vacuum(?1)", nArg, azArg, 1, "bytes",
                       "vacuum");
}

#define STORE_STATS_SQL \
  "SELECT json_object('databases', databases, 'branches', branches," \
  " 'stored_bytes', stored_bytes, 'logical_bytes', logical_bytes," \
  " 'compression_ratio', compression_ratio, 'cache_hits', cache_hits," \
  " 'cache_misses', cache_misses, 'compaction_lag', compaction_lag," \
  " 'reclaimable_bytes', reclaimable_bytes, 'quota_used_bytes'," \
  " quota_used_bytes, 'quota_databases', quota_databases," \
  " 'quota_full_databases', quota_full_databases," \
  " 'physical_bytes', physical_bytes) FROM depot_stats(?1)"

int cmd_stats(Cli *p, int nArg, char **azArg){
  sqlite3_stmt *pStmt;
  int rc = CLI_FAIL;
  storeNames(p, nArg, azArg);
  pStmt = cli_prepare(p, STORE_STATS_SQL);
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  storeBind(pStmt, 1, azArg, 1);
  if( sqlite3_step(pStmt)==SQLITE_ROW ){
    const char *zRes = (const char*)sqlite3_column_text(pStmt, 0);
    out_json(p, "stats", zRes);
    rc = storeFields(p, zRes)==SQLITE_OK ? CLI_OK : cli_sql_fail(p);
  }else{
    cli_sql_fail(p);
  }
  sqlite3_finalize(pStmt);
  return out_end(p, rc);
}

/* Size of file zStore+zSuffix, 0 when it does not exist. */
static sqlite3_int64 storeFileSize(const char *zStore, const char *zSuffix){
  struct stat st;
  char *z = sqlite3_mprintf("%s%s", zStore, zSuffix);
  sqlite3_int64 n = 0;
  if( z && stat(z, &st)==0 ) n = (sqlite3_int64)st.st_size;
  sqlite3_free(z);
  return n;
}

/* One listing of du (databases or branches) under zKey, with a title. */
static int storeDuRows(Cli *p, const char *zKey, const char *zSql,
                       const char *zStore){
  sqlite3_stmt *pStmt = cli_prepare(p, zSql);
  int nRow = 0, rc;
  if( pStmt==0 ) return SQLITE_ERROR;
  sqlite3_bind_text(pStmt, 1, zStore, -1, SQLITE_STATIC);
  rc = out_rows(p, zKey, pStmt, 1, &nRow);
  if( rc!=SQLITE_OK ) cli_sql_fail(p);
  sqlite3_finalize(pStmt);
  if( rc==SQLITE_OK && nRow ) out_text(p, "\n");
  return rc;
}

int cmd_du(Cli *p, int nArg, char **azArg){
  const char *zStore = azArg[0];
  sqlite3_stmt *pStmt;
  sqlite3_int64 nFile, nWal, nShm;
  int rc;
  storeNames(p, nArg, azArg);
  rc = storeDuRows(p, "databases", "SELECT bucket, database AS db,"
      " count(*) AS branches, sum(logical_size) AS logical_bytes,"
      " sum(stored_bytes) AS stored_bytes FROM depot_branches(?1)"
      " GROUP BY bucket, database ORDER BY bucket<>'main', bucket, database",
      zStore);
  if( rc==SQLITE_OK ) rc = storeDuRows(p, "branches", "SELECT bucket,"
      " database AS db, branch, branch_id, state, logical_size AS"
      " logical_bytes, stored_bytes FROM depot_branches(?1)"
      " ORDER BY bucket<>'main', bucket, database, branch_id", zStore);
  if( rc!=SQLITE_OK ) return out_end(p, CLI_FAIL);
  pStmt = cli_prepare(p, "SELECT logical_bytes, stored_bytes"
                         " FROM depot_stats(?1)");
  if( pStmt==0 ) return out_end(p, CLI_FAIL);
  sqlite3_bind_text(pStmt, 1, zStore, -1, SQLITE_STATIC);
  if( sqlite3_step(pStmt)!=SQLITE_ROW ){
    cli_sql_fail(p);
    sqlite3_finalize(pStmt);
    return out_end(p, CLI_FAIL);
  }
  nFile = storeFileSize(zStore, "");
  nWal = storeFileSize(zStore, "-wal");
  nShm = storeFileSize(zStore, "-shm");
  if( p->bJson ){
    char *z = sqlite3_mprintf("{\"logical_bytes\":%lld,\"stored_bytes\":%lld,"
        "\"physical_bytes\":%lld,\"file_bytes\":%lld,\"wal_bytes\":%lld,"
        "\"shm_bytes\":%lld}", sqlite3_column_int64(pStmt, 0),
        sqlite3_column_int64(pStmt, 1), nFile+nWal+nShm, nFile, nWal, nShm);
    out_json(p, "total", z);
    sqlite3_free(z);
  }
  out_text(p, "store: logical %lld, stored %lld, physical %lld bytes"
           " (file %lld, -wal %lld, -shm %lld)\n",
           sqlite3_column_int64(pStmt, 0), sqlite3_column_int64(pStmt, 1),
           nFile+nWal+nShm, nFile, nWal, nShm);
  sqlite3_finalize(pStmt);
  return out_end(p, CLI_OK);
}
