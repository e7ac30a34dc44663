/*
** depot_sql.c -- the SQL surface of branchable databases: registers the
** "depot" VFS once per process (xProcess of its component) and, per
** connection,
**
**   SELECT * FROM depot_commits(store[, db[, branch]]);
**       txid, time, db_pages, page_size, pages_written, bytes_stored,
**       checksum -- one row per commit, in txid order
**   SELECT * FROM depot_stats(store);
**       databases, branches, stored_bytes, logical_bytes, (physical_bytes
**       last: the store file plus its -wal on disk),
**       compression_ratio, cache_hits, cache_misses, quota_used_bytes,
**       quota_databases, quota_full_databases, synchronous_commit,
**       sync_standbys, standbys, timeline, standby, replay_lag (a
**       PostgreSQL store's replication; NULL for a store file) -- one row
**   SELECT * FROM depot_memory[(schema)];
**       name, scope, bytes, limit_bytes -- the memory of this connection's
**       depot database (main by default), one row per structure
**   SELECT depot_import(src_path, store[, db]);         -- pages copied
**   SELECT depot_export(store, db, branch, dst_path);   -- pages copied
**   SELECT depot_default_vfs([on[, params]]);           -- default VFS name
**   SELECT depot_last_error();                          -- text or NULL
**   SELECT depot_replay_lag(store);     -- seconds a standby is behind
**
** depot_commits, depot_stats and depot_memory are listings
** (ext/listing.h), all SQLITE_DIRECTONLY.  depot_import, depot_export and depot_default_vfs with
** arguments write files or change the process and are SQLITE_DIRECTONLY.
** See docs/SQL.md, "Branchable databases (depot VFS)".
*/
#include "config.h"
#include "ext/depot_int.h"
#include "ext/listing.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ================= depot_commits ================= */

/* An argument of depot_commits or depot_stats: text (else "depot: <zWhat>
** must be text"); the store must not be empty (SQLite would open an
** anonymous temporary file): "depot: store must be non-empty text".
** Empty names are left to the name checks.  NULL after *pzErr is set. */
static const char *dsqlListingArg(sqlite3_value *pVal, const char *zWhat,
                                  char **pzErr){
  if( sqlite3_value_type(pVal)!=SQLITE_TEXT ){
    *pzErr = sqlite3_mprintf("depot: %s must be text", zWhat);
    return 0;
  }
  if( strcmp(zWhat, "store")==0 && depot_text_value(pVal)==0 ){
    *pzErr = sqlite3_mprintf("depot: store must be non-empty text");
    return 0;
  }
  return (const char*)sqlite3_value_text(pVal);
}

/* depot_list_commits callback: one row. */
static int dsqlCommitRow(void *pArg, const DepotCommitInfo *c){
  DepotRows *p = (DepotRows*)pArg;
  time_t t = (time_t)(c->iTimeMs/1000);
  struct tm tm;
  char zTime[40], z[64];
  gmtime_r(&t, &tm);
  strftime(zTime, sizeof(zTime), "%Y-%m-%d %H:%M:%S", &tm);
  depot_rows_int(p, (sqlite3_int64)c->iTxid);
  sqlite3_snprintf(sizeof(z), z, "%s.%03d", zTime, (int)(c->iTimeMs%1000));
  depot_rows_text(p, z);
  depot_rows_int(p, c->nPage);
  depot_rows_int(p, c->szPage);
  depot_rows_int(p, c->nWritten);
  depot_rows_int(p, (sqlite3_int64)c->nStored);
  sqlite3_snprintf(sizeof(z), z, "%016llx", (unsigned long long)c->iChecksum);
  depot_rows_text(p, z);
  return p->rc!=SQLITE_OK;
}

static int dsqlCommitsRows(DepotRows *p, sqlite3_value **apArg,
                           char **pzErr){
  static const char *const azWhat[3] = { "store", "db", "branch" };
  const char *az[3] = { 0, "main", "main" };
  int i;
  for(i=0; i<3; i++){
    if( apArg[i]==0 ) continue;
    if( (az[i] = dsqlListingArg(apArg[i], azWhat[i], pzErr))==0 ){
      return SQLITE_ERROR;
    }
  }
  return depot_list_commits(az[0], az[1], az[2], dsqlCommitRow, p, pzErr);
}

static const DepotListingCol aCommitsCol[] = {
  DEPOT_COLUMN("txid", "INTEGER"),
  DEPOT_COLUMN("time", "TEXT"),
  DEPOT_COLUMN("db_pages", "INTEGER"),
  DEPOT_COLUMN("page_size", "INTEGER"),
  DEPOT_COLUMN("pages_written", "INTEGER"),
  DEPOT_COLUMN("bytes_stored", "INTEGER"),
  DEPOT_COLUMN("checksum", "TEXT"),
  DEPOT_ARGUMENT("store"),
  DEPOT_ARGUMENT("db"),
  DEPOT_ARGUMENT("branch"),
};

static const DepotListing dsqlCommits = {
  "depot_commits", 10, aCommitsCol, 1, SQLITE_VTAB_DIRECTONLY, 1000.0, 0,
  dsqlCommitsRows
};

/* ================= depot_stats ================= */

static int dsqlStatsRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  DepotStats s;
  const char *zStore = dsqlListingArg(apArg[0], "store", pzErr);
  int rc;
  if( zStore==0 ) return SQLITE_ERROR;
  memset(&s, 0, sizeof(s));
  rc = depot_store_stats(zStore, &s, pzErr);
  if( rc!=SQLITE_OK ) return rc;
  depot_rows_int(p, s.nDatabase);
  depot_rows_int(p, s.nBranch);
  depot_rows_int(p, s.nStored);
  depot_rows_int(p, s.nLogical);
  if( s.nLogical>0 ){
    depot_rows_real(p, (double)s.nStored/(double)s.nLogical);
  }else{
    depot_rows_null(p);
  }
  depot_rows_int(p, s.nCacheHit);
  depot_rows_int(p, s.nCacheMiss);
  depot_rows_int(p, s.nCompactLag);
  depot_rows_int(p, s.nReclaimable);
  depot_rows_int(p, s.nQuotaUsed);
  depot_rows_int(p, s.nQuotaCapped);
  depot_rows_int(p, s.nQuotaFull);
  depot_rows_int(p, s.nPhysical);
  /* a PostgreSQL store's replication; NULL for a store file or unknown */
  if( s.bPg ){
    depot_rows_text(p, s.zSyncCommit);
    if( s.nSyncStandby>=0 ) depot_rows_int(p, s.nSyncStandby);
    else depot_rows_null(p);
    if( s.nStandby>=0 ) depot_rows_int(p, s.nStandby);
    else depot_rows_null(p);
    if( s.iTimeline>0 ) depot_rows_int(p, s.iTimeline);
    else depot_rows_null(p);
    depot_rows_int(p, s.bStandby);
    if( s.rReplayLag<0 ) return depot_rows_null(p);
    return depot_rows_real(p, s.rReplayLag);
  }
  depot_rows_null(p);
  depot_rows_null(p);
  depot_rows_null(p);
  depot_rows_null(p);
  depot_rows_null(p);
  return depot_rows_null(p);
}

/* The store argument stands before the quota columns, which came later:
** SELECT * lists them last. */
static const DepotListingCol aStatsCol[] = {
  DEPOT_COLUMN("databases", "INTEGER"),
  DEPOT_COLUMN("branches", "INTEGER"),
  DEPOT_COLUMN("stored_bytes", "INTEGER"),
  DEPOT_COLUMN("logical_bytes", "INTEGER"),
  DEPOT_COLUMN("compression_ratio", "REAL"),
  DEPOT_COLUMN("cache_hits", "INTEGER"),
  DEPOT_COLUMN("cache_misses", "INTEGER"),
  DEPOT_COLUMN("compaction_lag", "INTEGER"),
  DEPOT_COLUMN("reclaimable_bytes", "INTEGER"),
  DEPOT_ARGUMENT("store"),
  DEPOT_COLUMN("quota_used_bytes", "INTEGER"),
  DEPOT_COLUMN("quota_databases", "INTEGER"),
  DEPOT_COLUMN("quota_full_databases", "INTEGER"),
  DEPOT_COLUMN("physical_bytes", "INTEGER"),
  DEPOT_COLUMN("synchronous_commit", "TEXT"),
  DEPOT_COLUMN("sync_standbys", "INTEGER"),
  DEPOT_COLUMN("standbys", "INTEGER"),
  DEPOT_COLUMN("timeline", "INTEGER"),
  DEPOT_COLUMN("standby", "INTEGER"),
  DEPOT_COLUMN("replay_lag", "REAL"),
};

static const DepotListing dsqlStats = {
  "depot_stats", 20, aStatsCol, 1, SQLITE_VTAB_DIRECTONLY, 1000.0, 0,
  dsqlStatsRows
};

/* ================= depot_memory ================= */

static int dsqlMemoryRow(void *pArg, const char *zName, const char *zScope,
                         int64_t nBytes, int64_t nLimit){
  DepotRows *p = (DepotRows*)pArg;
  depot_rows_text(p, zName);
  depot_rows_text(p, zScope);
  depot_rows_int(p, nBytes);
  return nLimit<0 ? depot_rows_null(p) : depot_rows_int(p, nLimit);
}

/* The rows of depot_vfs_memory() for the database of schema apArg[0] (NULL:
** main) of the connection (pAux); none for a database of another VFS. */
static int dsqlMemoryRows(DepotRows *p, sqlite3_value **apArg, char **pzErr){
  sqlite3 *db = (sqlite3*)p->pAux;
  const char *zSchema = apArg[0] ? (const char*)sqlite3_value_text(apArg[0])
                                 : "main";
  void *pFile = 0;
  int rc;
  if( zSchema==0 ) zSchema = "main";
  if( sqlite3_file_control(db, zSchema, SQLITE_FCNTL_FILE_POINTER, &pFile)
      !=SQLITE_OK || pFile==0 ){
    *pzErr = sqlite3_mprintf("depot: depot_memory: no database %s",
                             zSchema);
    return SQLITE_ERROR;
  }
  rc = depot_vfs_memory(pFile, dsqlMemoryRow, p);
  return rc==SQLITE_NOTFOUND ? SQLITE_OK : rc;
}

static const DepotListingCol aMemoryCol[] = {
  DEPOT_COLUMN("name", "TEXT"),
  DEPOT_COLUMN("scope", "TEXT"),
  DEPOT_COLUMN("bytes", "INTEGER"),
  DEPOT_COLUMN("limit_bytes", "INTEGER"),
  DEPOT_ARGUMENT("schema"),
};

static const DepotListing dsqlMemory = {
  "depot_memory", 5, aMemoryCol, 0, SQLITE_VTAB_DIRECTONLY, 10.0, 0,
  dsqlMemoryRows
};

/* ================= depot_import / depot_export ================= */

/* Append n bytes of z to pStr, %-escaping the bytes that would end or
** change a URI part: '?' '#' '%' always, '&' '=' too in a parameter. */
static void dsqlUriAppend(sqlite3_str *pStr, const char *z, size_t n,
                          int bParam){
  size_t i;
  for(i=0; i<n; i++){
    char c = z[i];
    if( c=='?' || c=='#' || c=='%' || (bParam && (c=='&' || c=='=')) ){
      sqlite3_str_appendf(pStr, "%%%02X", (unsigned char)c);
    }else{
      sqlite3_str_appendchar(pStr, 1, c);
    }
  }
}

/* "file:" URI of branch zBranch of database zDb (NAME, or BUCKET/NAME as
** the branch functions take it) in store zStore (a path, or a PostgreSQL
** store's URI, given as store=); NULL on OOM. */
static char *dsqlUri(const char *zStore, const char *zDb,
                     const char *zBranch){
  sqlite3_str *pStr = sqlite3_str_new(0);
  const char *zSlash = strchr(zDb, '/');
  if( strncmp(zStore, "postgresql://", 13)==0
   || strncmp(zStore, "postgres://", 11)==0 ){
    /* a PostgreSQL store: named by the store= parameter */
    sqlite3_str_appendf(pStr, "file:depot-pg-store?vfs=%s&store=",
                        DEPOT_VFS_NAME);
    dsqlUriAppend(pStr, zStore, strlen(zStore), 1);
  }else{
    sqlite3_str_appendall(pStr, "file:");
    dsqlUriAppend(pStr, zStore, strlen(zStore), 0);
    sqlite3_str_appendf(pStr, "?vfs=%s", DEPOT_VFS_NAME);
  }
  if( zSlash ){
    sqlite3_str_appendall(pStr, "&bucket=");
    dsqlUriAppend(pStr, zDb, (size_t)(zSlash-zDb), 1);
    zDb = zSlash+1;
  }
  sqlite3_str_appendall(pStr, "&db=");
  dsqlUriAppend(pStr, zDb, strlen(zDb), 1);
  sqlite3_str_appendall(pStr, "&branch=");
  dsqlUriAppend(pStr, zBranch, strlen(zBranch), 1);
  return sqlite3_str_finish(pStr);
}

static int dsqlStopAtFirst(void *pArg, const DepotNameInfo *pInfo){
  (void)pArg; (void)pInfo;
  return 1;
}

/* For a database named BUCKET/NAME: the reason it cannot be opened when
** the bucket does not exist in zStore or the store cannot be read (an
** open would only say "unable to open database file"); NULL when zDb has
** no bucket part or the bucket is there.  sqlite3_malloc'd. */
static char *dsqlBucketProblem(const char *zStore, const char *zDb){
  const char *zSlash = strchr(zDb, '/');
  char *zBucket, *zErr = 0;
  int rc;
  if( zSlash==0 ) return 0;
  zBucket = sqlite3_mprintf("%.*s", (int)(zSlash-zDb), zDb);
  if( zBucket==0 ) return sqlite3_mprintf("%s", sqlite3_errstr(SQLITE_NOMEM));
  rc = depot_list_databases(zStore, zBucket, dsqlStopAtFirst, 0, &zErr);
  if( rc!=SQLITE_OK && zErr==0 ) zErr = sqlite3_mprintf("%s",
                                                        sqlite3_errstr(rc));
  sqlite3_free(zBucket);
  return zErr;
}

static int dsqlStopAtFirstCommit(void *pArg, const DepotCommitInfo *pInfo){
  (void)pArg; (void)pInfo;
  return 1;
}

/* Why the existing file zStore cannot serve as the store of database zDb
** (NAME or BUCKET/NAME): not a store (another program's database), a store
** of a newer layout, a bucket that does not exist, and, when bWrite (an
** import writes it), a store on a read-only file system.  Returns
** SQLITE_OK when zStore does not exist (an import creates it, an export
** reports the missing file) or is usable; else the code (SQLITE_CANTOPEN
** for a file that is not a store or cannot be written there) with *pzErr
** set to the store's own message, which an open through the depot VFS
** only sends to the error log. */
static int dsqlStoreProblem(const char *zStore, const char *zDb,
                            int bWrite, char **pzErr){
  struct stat st;
  int rc;
  if( stat(zStore, &st)!=0 ) return SQLITE_OK;
  if( bWrite && depot_store_on_read_only_fs(zStore) ){
    *pzErr = sqlite3_mprintf("store: cannot open %s: it is on a read-only"
        " file system, where a store opens only with immutable=1", zStore);
    return *pzErr ? SQLITE_CANTOPEN : SQLITE_NOMEM;
  }
  rc = depot_list_commits(zStore, zDb, "main", dsqlStopAtFirstCommit, 0,
                          pzErr);
  if( rc!=SQLITE_OK && *pzErr==0 ){
    *pzErr = sqlite3_mprintf("%s", sqlite3_errstr(rc));
  }
  return rc;
}

/* Pages one backup step copies while a progress hook is installed. */
#define DSQL_STEP_PAGES 256

/* Run backup pB to the end: in one step, or, with a progress hook
** (vfs/progress.c), DSQL_STEP_PAGES pages per step with a report before
** each.  The destination stays in one write transaction from the first
** step to the last, which commits it, so a stop request (the hook
** returns nonzero: SQLITE_INTERRUPT, and sqlite3_backup_finish() rolls
** the destination back) stores nothing.  Returns what the last step
** returned. */
static int dsqlCopySteps(sqlite3_backup *pB, const char *zWhat,
                         sqlite3 *pFrom){
  int rc, szPage = 0;
  sqlite3_int64 nTotal, nDone;
  if( !depot_progress_active() ) return sqlite3_backup_step(pB, -1);
  for(;;){
    nTotal = sqlite3_backup_pagecount(pB);
    nDone = nTotal - sqlite3_backup_remaining(pB);
    if( szPage==0 && nTotal>0 ){
      sqlite3_stmt *pStmt = 0;
      if( sqlite3_prepare_v2(pFrom, "PRAGMA page_size", -1, &pStmt,
                             0)==SQLITE_OK
       && sqlite3_step(pStmt)==SQLITE_ROW ){
        szPage = sqlite3_column_int(pStmt, 0);
      }
      sqlite3_finalize(pStmt);
    }
    if( depot_progress_report(zWhat, nDone, nTotal ? nTotal : -1,
                              nDone*szPage) ){
      return SQLITE_INTERRUPT;
    }
    rc = sqlite3_backup_step(pB, DSQL_STEP_PAGES);
    if( rc==SQLITE_DONE ){
      nTotal = sqlite3_backup_pagecount(pB);
      depot_progress_report(zWhat, nTotal, nTotal, nTotal*szPage);
    }
    if( rc!=SQLITE_OK && rc!=SQLITE_BUSY && rc!=SQLITE_LOCKED ) return rc;
    if( rc!=SQLITE_OK ) sqlite3_sleep(10);
  }
}

/* Copy every page of zFromUri into zToUri with the backup API (each opened
** with its flags: SQLITE_OPEN_URI for a depot URI, none for a plain path);
** returns the page count or -1 with *pzErr set.  zWhat names the copy
** ("import", "export") to the progress hook. */
static sqlite3_int64 dsqlCopy(const char *zWhat,
                              const char *zFromUri, int fromFlags,
                              const char *zToUri, int toFlags, int *pRc,
                              char **pzErr){
  sqlite3 *pFrom = 0, *pTo = 0;
  sqlite3_backup *pB = 0;
  sqlite3_int64 nPage = -1;
  int rc = sqlite3_open_v2(zFromUri, &pFrom,
                           fromFlags|SQLITE_OPEN_PRIVATECACHE,
                           depot_vfs_plain());
  *pRc = rc;
  if( rc==SQLITE_OK ){
    rc = sqlite3_open_v2(zToUri, &pTo, toFlags|SQLITE_OPEN_PRIVATECACHE,
                         depot_vfs_plain());
    if( rc!=SQLITE_OK ) *pzErr = sqlite3_mprintf("%s", sqlite3_errmsg(pTo));
  }else{
    *pzErr = sqlite3_mprintf("%s", sqlite3_errmsg(pFrom));
  }
  if( rc==SQLITE_OK ){
    pB = sqlite3_backup_init(pTo, "main", pFrom, "main");
    if( pB==0 ) *pzErr = sqlite3_mprintf("%s", sqlite3_errmsg(pTo));
  }
  if( pB ){
    rc = dsqlCopySteps(pB, zWhat, pFrom);
    nPage = sqlite3_backup_pagecount(pB);
    sqlite3_backup_finish(pB);
    if( rc==SQLITE_INTERRUPT ){
      *pzErr = sqlite3_mprintf("interrupted");
      *pRc = rc;
      nPage = -1;
    }else if( rc!=SQLITE_DONE ){
      *pzErr = sqlite3_mprintf("%s", sqlite3_errmsg(pTo));
      *pRc = rc;
      nPage = -1;
    }
  }else if( rc!=SQLITE_OK ){
    *pRc = rc;
  }
  sqlite3_close(pFrom);
  sqlite3_close(pTo);
  return nPage;
}

/* Give a failed copy's I/O, full-disk or lock code (SQLITE_FULL,
** SQLITE_IOERR_*, SQLITE_BUSY: the caller may retry) to the caller instead
** of SQLITE_ERROR; other codes keep the default SQLITE_ERROR of
** sqlite3_result_error(). */
static void dsqlResultCode(sqlite3_context *ctx, int rc){
  int e = rc & 0xff;
  if( e==SQLITE_FULL || e==SQLITE_IOERR || e==SQLITE_NOMEM
   || e==SQLITE_BUSY || e==SQLITE_LOCKED || e==SQLITE_INTERRUPT ){
    sqlite3_result_error_code(ctx, rc);
  }
}

/* Remove what a failed export wrote: the target file (which did not exist
** before the export) and its rollback journal, so a retry can write it. */
static void dsqlExportRemove(const char *zTo){
  char *zJournal = sqlite3_mprintf("%s-journal", zTo);
  unlink(zTo);
  if( zJournal ) unlink(zJournal);
  sqlite3_free(zJournal);
}

/* Every argument must be non-empty text (depot_text_value). */
static int dsqlCopyArgs(sqlite3_context *ctx, int argc, sqlite3_value **argv,
                        const char *zUsage){
  int i;
  for(i=0; i<argc; i++){
    if( depot_text_value(argv[i])==0 ){
      char *z = sqlite3_mprintf("depot: %s takes non-empty text arguments;"
                                " argument %d is not", zUsage, i+1);
      sqlite3_result_error(ctx, z, -1);
      sqlite3_free(z);
      return 0;
    }
  }
  return 1;
}

/* The page size of the database zPath opened with flags (read-only), or 0
** when it cannot be opened or read. */
static int dsqlPageSizeOf(const char *zPath, int flags){
  sqlite3 *db = 0;
  sqlite3_stmt *pStmt = 0;
  int sz = 0;
  if( sqlite3_open_v2(zPath, &db, flags|SQLITE_OPEN_PRIVATECACHE,
                      depot_vfs_plain())==SQLITE_OK
   && sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &pStmt, 0)==SQLITE_OK
   && sqlite3_step(pStmt)==SQLITE_ROW ){
    sz = sqlite3_column_int(pStmt, 0);
  }
  sqlite3_finalize(pStmt);
  sqlite3_close(db);
  return sz;
}

/* Why an import failed: the page sizes differ (the depot database keeps
** that of its first commit; *pRc becomes SQLITE_ERROR), else the error of
** the copy. */
static char *dsqlImportError(const char *zFrom, const char *zUri,
                             const char *zDb, const char *zErr, int *pRc){
  int szFrom = dsqlPageSizeOf(zFrom, SQLITE_OPEN_READONLY);
  int szTo = dsqlPageSizeOf(zUri, SQLITE_OPEN_READONLY|SQLITE_OPEN_URI);
  if( szFrom && szTo && szFrom!=szTo ){
    *pRc = SQLITE_ERROR;                 /* a usage error, not an I/O one */
    return sqlite3_mprintf("depot: import failed: %s has pages of %d bytes,"
        " database %s has pages of %d bytes (fixed by its first commit)",
        zFrom, szFrom, zDb, szTo);
  }
  return sqlite3_mprintf("depot: import failed: %s", zErr);
}

/* The name dsqlNameExists() looks for, and whether it was found. */
typedef struct DsqlFind DsqlFind;
struct DsqlFind { const char *zDb; int bFound; };

/* Whether a name of depot_list_databases() is branch main of the
** database zDb (NAME or BUCKET/NAME) pArg looks for (stops there). */
static int dsqlIsMainOf(void *pArg, const DepotNameInfo *pInfo){
  DsqlFind *pF = (DsqlFind*)pArg;
  const char *zDb = pF->zDb;
  const char *zSlash = strchr(zDb, '/');
  const char *zName = zSlash ? zSlash+1 : zDb;
  int bBucket = zSlash ? (strlen(pInfo->zBucket)==(size_t)(zSlash-zDb)
                          && strncmp(pInfo->zBucket, zDb, zSlash-zDb)==0)
                       : strcmp(pInfo->zBucket, "main")==0;
  pF->bFound = bBucket && strcmp(pInfo->zDb, zName)==0
            && strcmp(pInfo->zBranch, "main")==0;
  return pF->bFound;
}

/* 1 if branch main of zDb is a name in zStore (its own or inherited), or
** the store cannot tell; 0 if not (an import creates it). */
static int dsqlNameExists(const char *zStore, const char *zDb){
  const char *zSlash = strchr(zDb, '/');
  char *zBucket = sqlite3_mprintf("%.*s", zSlash ? (int)(zSlash-zDb) : 4,
                                  zSlash ? zDb : "main");
  char *zErr = 0;
  struct stat st;
  DsqlFind f;
  int rc;
  f.zDb = zDb;
  f.bFound = 0;
  if( zBucket==0 ) return 1;
  if( stat(zStore, &st)!=0 ){
    sqlite3_free(zBucket);
    return strncmp(zStore, "postgres", 8)==0;   /* a new store file: no */
  }
  rc = depot_list_databases(zStore, zBucket, dsqlIsMainOf, &f, &zErr);
  sqlite3_free(zErr);
  sqlite3_free(zBucket);
  return rc!=SQLITE_OK || f.bFound;
}

/* After a failed import into a new name zDb (its first staged batch
** creates the name's branch, unborn until the commit), take the name
** away again, so no empty database stays behind; the branch's rows go
** with depot_gc, which would also take the name away. */
static void dsqlImportUndo(const char *zStore, const char *zDb){
  char *zErr = 0;
  depot_abandon_unborn(zStore, zDb, "main", &zErr);
  sqlite3_free(zErr);
}

static void dsqlImport(sqlite3_context *ctx, int argc,
                       sqlite3_value **argv){
  const char *zUsage = "depot_import(src_path, store[, db])";
  const char *zDb;
  char *zUri, *zFrom, *zErr = 0, *z;
  sqlite3_int64 n;
  int rc = SQLITE_OK;
  if( !dsqlCopyArgs(ctx, argc, argv, zUsage) ) return;
  zDb = argc>2 ? (const char*)sqlite3_value_text(argv[2]) : "main";
  zUri = dsqlUri((const char*)sqlite3_value_text(argv[1]), zDb, "main");
  zFrom = sqlite3_mprintf("%s", (const char*)sqlite3_value_text(argv[0]));
  if( zUri==0 || zFrom==0 ){
    sqlite3_result_error_nomem(ctx);
  }else if( (rc = dsqlStoreProblem((const char*)sqlite3_value_text(argv[1]),
                                   zDb, 1, &zErr))!=SQLITE_OK ){
    sqlite3_result_error(ctx, zErr ? zErr : sqlite3_errstr(rc), -1);
    sqlite3_result_error_code(ctx, rc);
  }else if( (zErr = dsqlBucketProblem(
             (const char*)sqlite3_value_text(argv[1]), zDb))!=0 ){
    sqlite3_result_error(ctx, zErr, -1);
  }else{
    const char *zStore = (const char*)sqlite3_value_text(argv[1]);
    int bExisted = dsqlNameExists(zStore, zDb);
    struct stat st;
    n = dsqlCopy("import", zFrom, SQLITE_OPEN_READONLY, zUri,
                 SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI,
                 &rc, &zErr);
    if( n<0 && !bExisted && (stat(zStore, &st)==0
                             || strncmp(zStore, "postgres", 8)==0) ){
      dsqlImportUndo(zStore, zDb);
    }
    if( n<0 && (z = dsqlImportError(zFrom, zUri, zDb, zErr, &rc))!=0 ){
      sqlite3_result_error(ctx, z, -1);
      dsqlResultCode(ctx, rc);
      sqlite3_free(z);
    }else if( n<0 ){
      sqlite3_result_error_nomem(ctx);
    }else{
      sqlite3_result_int64(ctx, n);
    }
  }
  sqlite3_free(zErr);
  sqlite3_free(zUri);
  sqlite3_free(zFrom);
}

static void dsqlExport(sqlite3_context *ctx, int argc,
                       sqlite3_value **argv){
  const char *zDst;
  char *zUri = 0, *zTo = 0, *zErr = 0;
  struct stat st;
  sqlite3_int64 n;
  int rc = SQLITE_OK;
  int fromFlags = SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI;
  if( !dsqlCopyArgs(ctx, argc, argv,
                    "depot_export(store, db, branch, dst_path)") ) return;
  zDst = (const char*)sqlite3_value_text(argv[3]);
  if( stat(zDst, &st)==0 ){
    char *z = sqlite3_mprintf("depot: export target %s already exists", zDst);
    sqlite3_result_error(ctx, z, -1);
    sqlite3_free(z);
    return;
  }
  zUri = dsqlUri((const char*)sqlite3_value_text(argv[0]),
                 (const char*)sqlite3_value_text(argv[1]),
                 (const char*)sqlite3_value_text(argv[2]));
  if( zUri
   && depot_store_on_read_only_fs((const char*)sqlite3_value_text(argv[0])) ){
    zUri = sqlite3_mprintf("%z&immutable=1", zUri);
    fromFlags = SQLITE_OPEN_READONLY|SQLITE_OPEN_URI;
  }
  zTo = sqlite3_mprintf("%s", zDst);
  if( zUri==0 || zTo==0 ){
    sqlite3_result_error_nomem(ctx);
  }else if( (rc = dsqlStoreProblem((const char*)sqlite3_value_text(argv[0]),
                         (const char*)sqlite3_value_text(argv[1]), 0, &zErr))
           !=SQLITE_OK ){
    sqlite3_result_error(ctx, zErr ? zErr : sqlite3_errstr(rc), -1);
    sqlite3_result_error_code(ctx, rc);
  }else if( (zErr = dsqlBucketProblem(
             (const char*)sqlite3_value_text(argv[0]),
             (const char*)sqlite3_value_text(argv[1])))!=0 ){
    sqlite3_result_error(ctx, zErr, -1);
  }else{
    n = dsqlCopy("export", zUri, fromFlags, zTo,
                 SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, &rc, &zErr);
    if( n<0 ){
      char *z = sqlite3_mprintf("depot: export failed: %s", zErr);
      dsqlExportRemove(zTo);
      sqlite3_result_error(ctx, z, -1);
      dsqlResultCode(ctx, rc);
      sqlite3_free(z);
    }else{
      sqlite3_result_int64(ctx, n);
    }
  }
  sqlite3_free(zErr);
  sqlite3_free(zUri);
  sqlite3_free(zTo);
}

/* depot_default_vfs([on[, params]]): with no argument, the name of the
** process's default VFS; with 1, makes depot the default, with the
** parameters params (text, or NULL for none) for the opens by plain name
** (depot_vfs_set_default_params()); with 0, gives the default back.
** Returns the default's name after the call. */
static void dsqlDefaultVfs(sqlite3_context *ctx, int argc,
                           sqlite3_value **argv){
  sqlite3_vfs *pDflt;
  if( argc>=1 ){
    int rc;
    char *zErr = 0;
    const char *zParams = 0;
    sqlite3_int64 v = -1;
    if( !depot_value_int64(argv[0], &v) || (v!=0 && v!=1) ){
      sqlite3_result_error(ctx, "depot: depot_default_vfs takes 1 (make "
                           "depot the default VFS) or 0 (give it back)", -1);
      return;
    }
    if( argc==2 ){
      int eType = sqlite3_value_type(argv[1]);
      if( v==0 ){
        sqlite3_result_error(ctx, "depot: depot_default_vfs(0) takes no "
                             "parameters (they go with 1)", -1);
        return;
      }
      if( eType!=SQLITE_TEXT && eType!=SQLITE_NULL ){
        sqlite3_result_error(ctx, "depot: the parameters of "
            "depot_default_vfs must be text such as 'db=crm&branch=dev' "
            "or NULL", -1);
        sqlite3_result_error_code(ctx, SQLITE_MISMATCH);
        return;
      }
      zParams = (const char*)sqlite3_value_text(argv[1]);
    }
    rc = depot_vfs_set_default_params((int)v, zParams, &zErr);
    if( rc!=SQLITE_OK ){
      if( zErr ){
        sqlite3_result_error(ctx, zErr, -1);
        sqlite3_free(zErr);
      }
      sqlite3_result_error_code(ctx, rc);
      return;
    }
  }
  pDflt = sqlite3_vfs_find(0);
  if( pDflt ) sqlite3_result_text(ctx, pDflt->zName, -1, SQLITE_TRANSIENT);
}

/* depot_last_error(): the reason of the last error the depot VFS reported
** on this thread (depot_vfs_last_error()), or NULL. */
static void dsqlLastError(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  const char *z = depot_vfs_last_error();
  (void)argc; (void)argv;
  if( z ) sqlite3_result_text(ctx, z, -1, SQLITE_TRANSIENT);
}

/* depot_replay_lag(store): the replay lag in seconds of the server of a
** PostgreSQL store (depot_store_replica()): 0.0 on a primary and for a
** store file, NULL on a standby that has replayed no commit yet. */
static void dsqlReplayLag(sqlite3_context *ctx, int argc,
                          sqlite3_value **argv){
  char *zErr = 0;
  const char *zStore = dsqlListingArg(argv[0], "store", &zErr);
  int bStandby = 0, rc;
  double rLag = 0.0;
  (void)argc;
  rc = zStore ? depot_store_replica(zStore, &bStandby, &rLag, &zErr)
              : SQLITE_MISUSE;
  if( rc!=SQLITE_OK ){
    sqlite3_result_error(ctx, zErr ? zErr : "depot: out of memory", -1);
    sqlite3_result_error_code(ctx, rc==SQLITE_MISUSE ? SQLITE_ERROR : rc);
    sqlite3_free(zErr);
    return;
  }
  if( rLag>=0 ) sqlite3_result_double(ctx, rLag);
}

/* ================= the component ================= */

static int dsqlProcess(char **pzErr){
  int rc = depot_vfs_register();
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("depot: cannot register the depot VFS");
  }
  return rc;
}

static const struct {
  const char *zName;
  int nArg;
  int bDirect;               /* SQLITE_DIRECTONLY: writes or changes state */
  void (*xFunc)(sqlite3_context*, int, sqlite3_value**);
} aDsqlFunc[] = {
  { "depot_import",      2, 1, dsqlImport },
  { "depot_import",      3, 1, dsqlImport },
  { "depot_export",      4, 1, dsqlExport },
  { "depot_default_vfs", 0, 0, dsqlDefaultVfs },
  { "depot_default_vfs", 1, 1, dsqlDefaultVfs },
  { "depot_default_vfs", 2, 1, dsqlDefaultVfs },
  { "depot_last_error",  0, 0, dsqlLastError },
  { "depot_replay_lag",  1, 1, dsqlReplayLag },
};

static int dsqlConnection(sqlite3 *db, KvConn *pKv){
  int rc = depot_listing_register(db, &dsqlCommits, 0, 0);
  size_t i;
  (void)pKv;
  if( rc==SQLITE_OK ) rc = depot_listing_register(db, &dsqlStats, 0, 0);
  if( rc==SQLITE_OK ) rc = depot_listing_register(db, &dsqlMemory, db, 0);
  for(i=0; rc==SQLITE_OK && i<sizeof(aDsqlFunc)/sizeof(aDsqlFunc[0]); i++){
    rc = sqlite3_create_function(db, aDsqlFunc[i].zName, aDsqlFunc[i].nArg,
        SQLITE_UTF8|(aDsqlFunc[i].bDirect ? SQLITE_DIRECTONLY : 0), 0,
        aDsqlFunc[i].xFunc, 0, 0);
  }
  return rc;
}

const DepotComponent depotSqlComponent = {
  "depot: cannot register the depot SQL functions",
  dsqlProcess, dsqlConnection
};
