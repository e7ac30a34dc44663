/*
** depot_sql.c -- the SQL surface of branchable databases (the "depot" VFS
** component): registers the VFS once per process and, per connection,
**
**   SELECT * FROM depot_commits(store[, db[, branch]]);
**       txid, time, db_pages, page_size, pages_written, bytes_stored,
**       checksum -- one row per commit, in txid order
**   SELECT * FROM depot_stats(store);
**       databases, branches, stored_bytes, logical_bytes,
**       compression_ratio, cache_hits, cache_misses, quota_used_bytes,
**       quota_databases, quota_full_databases -- one row
**   SELECT depot_import(src_path, store[, db]);         -- pages copied
**   SELECT depot_export(store, db, branch, dst_path);   -- pages copied
**
** depot_import and depot_export write files and are SQLITE_DIRECTONLY.
** See docs/SQL.md, "Branchable databases (depot VFS)".
*/
#include "config.h"
#include "ext/depot_int.h"
#include "vfs/depot_vfs.h"
SQLITE_EXTENSION_INIT3

#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ================= depot_commits ================= */

#define DC_STORE 7        /* first hidden column */

typedef struct DcCursor DcCursor;
struct DcCursor {
  sqlite3_vtab_cursor base;   /* must be first */
  DepotCommitInfo *a;
  int n, nAlloc, i;
};

static int dcConnect(sqlite3 *db, void *pAux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr){
  sqlite3_vtab *p;
  int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(txid INTEGER, time TEXT,"
      " db_pages INTEGER, page_size INTEGER, pages_written INTEGER,"
      " bytes_stored INTEGER, checksum TEXT, store HIDDEN, db HIDDEN,"
      " branch HIDDEN)");
  (void)pAux; (void)argc; (void)argv; (void)pzErr;
  if( rc!=SQLITE_OK ) return rc;
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = p;
  return SQLITE_OK;
}

static int dcDisconnect(sqlite3_vtab *p){
  sqlite3_free(p);
  return SQLITE_OK;
}

int depot_tvf_best_index(sqlite3_index_info *pInfo, int iFirst, int nArg){
  int aIdx[DEPOT_TVF_MAX_ARG] = { -1, -1, -1 };
  int i, nUsed = 0, mask = 0;
  for(i=0; i<pInfo->nConstraint; i++){
    const struct sqlite3_index_constraint *c = &pInfo->aConstraint[i];
    int iArg = c->iColumn - iFirst;
    if( iArg<0 || iArg>=nArg || c->op!=SQLITE_INDEX_CONSTRAINT_EQ ) continue;
    if( !c->usable ) return SQLITE_CONSTRAINT;
    aIdx[iArg] = i;
  }
  if( aIdx[0]<0 ) return SQLITE_CONSTRAINT;
  for(i=0; i<nArg; i++){
    if( aIdx[i]<0 ) continue;
    pInfo->aConstraintUsage[aIdx[i]].argvIndex = ++nUsed;
    pInfo->aConstraintUsage[aIdx[i]].omit = 1;
    mask |= 1<<i;
  }
  pInfo->idxNum = mask;
  pInfo->estimatedCost = 1000;
  return SQLITE_OK;
}

static int dcBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  (void)pVtab;
  return depot_tvf_best_index(pInfo, DC_STORE, 3);
}

static int dcOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  DcCursor *p = sqlite3_malloc64(sizeof(*p));
  (void)pVtab;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  *ppCur = &p->base;
  return SQLITE_OK;
}

static int dcClose(sqlite3_vtab_cursor *pCur){
  DcCursor *p = (DcCursor*)pCur;
  sqlite3_free(p->a);
  sqlite3_free(p);
  return SQLITE_OK;
}

static int dcCollect(void *pArg, const DepotCommitInfo *pInfo){
  DcCursor *p = (DcCursor*)pArg;
  if( p->n==p->nAlloc ){
    int nNew = p->nAlloc ? p->nAlloc*2 : 16;
    DepotCommitInfo *a = sqlite3_realloc64(p->a, sizeof(*a)*nNew);
    if( a==0 ) return 1;
    p->a = a;
    p->nAlloc = nNew;
  }
  p->a[p->n++] = *pInfo;
  return 0;
}

/* Text argument i of xFilter, or NULL with an error in the vtab.  The
** store path must not be empty (SQLite would open an anonymous temporary
** file); empty names are left to the name checks. */
static const char *tvfTextArg(sqlite3_vtab *pVtab, sqlite3_value *pVal,
                              const char *zWhat){
  const char *z;
  if( sqlite3_value_type(pVal)!=SQLITE_TEXT ){
    sqlite3_free(pVtab->zErrMsg);
    pVtab->zErrMsg = sqlite3_mprintf("depot: %s must be text", zWhat);
    return 0;
  }
  z = (const char*)sqlite3_value_text(pVal);
  if( z && z[0]==0 && strcmp(zWhat, "store")==0 ){
    sqlite3_free(pVtab->zErrMsg);
    pVtab->zErrMsg = sqlite3_mprintf("depot: store must be non-empty text");
    return 0;
  }
  return z;
}

static int dcFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  DcCursor *p = (DcCursor*)pCur;
  const char *az[3] = { 0, "main", "main" };
  const char *azWhat[3] = { "store", "db", "branch" };
  char *zErr = 0;
  int i, j = 0, rc;
  (void)idxStr;
  p->n = p->i = 0;
  for(i=0; i<3; i++){
    if( (idxNum & (1<<i))==0 || j>=argc ) continue;
    az[i] = tvfTextArg(pCur->pVtab, argv[j++], azWhat[i]);
    if( az[i]==0 ) return SQLITE_ERROR;
  }
  rc = depot_list_commits(az[0], az[1], az[2], dcCollect, p, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_free(pCur->pVtab->zErrMsg);
    pCur->pVtab->zErrMsg = zErr;
    return rc;
  }
  sqlite3_free(zErr);
  return SQLITE_OK;
}

static int dcNext(sqlite3_vtab_cursor *pCur){
  ((DcCursor*)pCur)->i++;
  return SQLITE_OK;
}

static int dcEof(sqlite3_vtab_cursor *pCur){
  DcCursor *p = (DcCursor*)pCur;
  return p->i>=p->n;
}

static void dcTime(sqlite3_context *ctx, uint64_t iMs){
  time_t t = (time_t)(iMs/1000);
  struct tm tm;
  char z[40];
  gmtime_r(&t, &tm);
  strftime(z, sizeof(z), "%Y-%m-%d %H:%M:%S", &tm);
  sqlite3_result_text(ctx, sqlite3_mprintf("%s.%03d", z, (int)(iMs%1000)),
                      -1, sqlite3_free);
}

static int dcColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  DcCursor *p = (DcCursor*)pCur;
  const DepotCommitInfo *c = &p->a[p->i];
  switch( i ){
    case 0: sqlite3_result_int64(ctx, (sqlite3_int64)c->iTxid); break;
    case 1: dcTime(ctx, c->iTimeMs); break;
    case 2: sqlite3_result_int64(ctx, c->nPage); break;
    case 3: sqlite3_result_int64(ctx, c->szPage); break;
    case 4: sqlite3_result_int64(ctx, c->nWritten); break;
    case 5: sqlite3_result_int64(ctx, (sqlite3_int64)c->nStored); break;
    case 6:
      sqlite3_result_text(ctx, sqlite3_mprintf("%016llx",
          (unsigned long long)c->iChecksum), -1, sqlite3_free);
      break;
    default: break;
  }
  return SQLITE_OK;
}

static int dcRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  *pRowid = ((DcCursor*)pCur)->i + 1;
  return SQLITE_OK;
}

static const sqlite3_module depotCommitsModule = {
  0, 0, dcConnect, dcBestIndex, dcDisconnect, 0, dcOpen, dcClose, dcFilter,
  dcNext, dcEof, dcColumn, dcRowid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

/* ================= depot_stats ================= */

#define DS_STORE 9

typedef struct DsCursor DsCursor;
struct DsCursor {
  sqlite3_vtab_cursor base;   /* must be first */
  DepotStats s;
  int bEof;
};

static int dsConnect(sqlite3 *db, void *pAux, int argc,
                     const char *const *argv, sqlite3_vtab **ppVtab,
                     char **pzErr){
  sqlite3_vtab *p;
  int rc = sqlite3_declare_vtab(db, "CREATE TABLE x(databases INTEGER,"
      " branches INTEGER, stored_bytes INTEGER, logical_bytes INTEGER,"
      " compression_ratio REAL, cache_hits INTEGER, cache_misses INTEGER,"
      " compaction_lag INTEGER, reclaimable_bytes INTEGER,"
      " store HIDDEN, quota_used_bytes INTEGER, quota_databases INTEGER,"
      " quota_full_databases INTEGER)");
  (void)pAux; (void)argc; (void)argv; (void)pzErr;
  if( rc!=SQLITE_OK ) return rc;
  p = sqlite3_malloc64(sizeof(*p));
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  sqlite3_vtab_config(db, SQLITE_VTAB_DIRECTONLY);
  *ppVtab = p;
  return SQLITE_OK;
}

static int dsBestIndex(sqlite3_vtab *pVtab, sqlite3_index_info *pInfo){
  (void)pVtab;
  return depot_tvf_best_index(pInfo, DS_STORE, 1);
}

static int dsOpen(sqlite3_vtab *pVtab, sqlite3_vtab_cursor **ppCur){
  DsCursor *p = sqlite3_malloc64(sizeof(*p));
  (void)pVtab;
  if( p==0 ) return SQLITE_NOMEM;
  memset(p, 0, sizeof(*p));
  *ppCur = &p->base;
  return SQLITE_OK;
}

static int dsClose(sqlite3_vtab_cursor *pCur){
  sqlite3_free(pCur);
  return SQLITE_OK;
}

static int dsFilter(sqlite3_vtab_cursor *pCur, int idxNum, const char *idxStr,
                    int argc, sqlite3_value **argv){
  DsCursor *p = (DsCursor*)pCur;
  const char *zStore;
  char *zErr = 0;
  int rc;
  (void)idxNum; (void)idxStr;
  p->bEof = 1;
  if( argc<1 ) return SQLITE_CONSTRAINT;
  zStore = tvfTextArg(pCur->pVtab, argv[0], "store");
  if( zStore==0 ) return SQLITE_ERROR;
  rc = depot_store_stats(zStore, &p->s, &zErr);
  if( rc!=SQLITE_OK ){
    sqlite3_free(pCur->pVtab->zErrMsg);
    pCur->pVtab->zErrMsg = zErr;
    return rc;
  }
  sqlite3_free(zErr);
  p->bEof = 0;
  return SQLITE_OK;
}

static int dsNext(sqlite3_vtab_cursor *pCur){
  ((DsCursor*)pCur)->bEof = 1;
  return SQLITE_OK;
}

static int dsEof(sqlite3_vtab_cursor *pCur){
  return ((DsCursor*)pCur)->bEof;
}

static int dsColumn(sqlite3_vtab_cursor *pCur, sqlite3_context *ctx, int i){
  const DepotStats *s = &((DsCursor*)pCur)->s;
  switch( i ){
    case 0: sqlite3_result_int64(ctx, s->nDatabase); break;
    case 1: sqlite3_result_int64(ctx, s->nBranch); break;
    case 2: sqlite3_result_int64(ctx, s->nStored); break;
    case 3: sqlite3_result_int64(ctx, s->nLogical); break;
    case 4:
      if( s->nLogical>0 ){
        sqlite3_result_double(ctx, (double)s->nStored/(double)s->nLogical);
      }
      break;
    case 5: sqlite3_result_int64(ctx, s->nCacheHit); break;
    case 6: sqlite3_result_int64(ctx, s->nCacheMiss); break;
    case 7: sqlite3_result_int64(ctx, s->nCompactLag); break;
    case 8: sqlite3_result_int64(ctx, s->nReclaimable); break;
    case 10: sqlite3_result_int64(ctx, s->nQuotaUsed); break;
    case 11: sqlite3_result_int64(ctx, s->nQuotaCapped); break;
    case 12: sqlite3_result_int64(ctx, s->nQuotaFull); break;
    default: break;
  }
  return SQLITE_OK;
}

static int dsRowid(sqlite3_vtab_cursor *pCur, sqlite3_int64 *pRowid){
  (void)pCur;
  *pRowid = 1;
  return SQLITE_OK;
}

static const sqlite3_module depotStatsModule = {
  0, 0, dsConnect, dsBestIndex, dcDisconnect, 0, dsOpen, dsClose, dsFilter,
  dsNext, dsEof, dsColumn, dsRowid, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
};

/* ================= depot_import / depot_export ================= */

/* Append n bytes of z to pStr, %-escaping the bytes that would end or
** change a URI part: '?' '#' '%' always, '&' '=' too in a parameter. */
static void depotUriAppend(sqlite3_str *pStr, const char *z, size_t n,
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
** the branch functions take it) in store zStore; NULL on OOM. */
static char *depotUri(const char *zStore, const char *zDb,
                      const char *zBranch){
  sqlite3_str *pStr = sqlite3_str_new(0);
  const char *zSlash = strchr(zDb, '/');
  sqlite3_str_appendall(pStr, "file:");
  depotUriAppend(pStr, zStore, strlen(zStore), 0);
  sqlite3_str_appendf(pStr, "?vfs=%s", DEPOT_VFS_NAME);
  if( zSlash ){
    sqlite3_str_appendall(pStr, "&bucket=");
    depotUriAppend(pStr, zDb, (size_t)(zSlash-zDb), 1);
    zDb = zSlash+1;
  }
  sqlite3_str_appendall(pStr, "&db=");
  depotUriAppend(pStr, zDb, strlen(zDb), 1);
  sqlite3_str_appendall(pStr, "&branch=");
  depotUriAppend(pStr, zBranch, strlen(zBranch), 1);
  return sqlite3_str_finish(pStr);
}

static int depotStopAtFirst(void *pArg, const DepotNameInfo *pInfo){
  (void)pArg; (void)pInfo;
  return 1;
}

/* For a database named BUCKET/NAME: the reason it cannot be opened when
** the bucket does not exist in zStore or the store cannot be read (an
** open would only say "unable to open database file"); NULL when zDb has
** no bucket part or the bucket is there.  sqlite3_malloc'd. */
static char *depotBucketProblem(const char *zStore, const char *zDb){
  const char *zSlash = strchr(zDb, '/');
  char *zBucket, *zErr = 0;
  int rc;
  if( zSlash==0 ) return 0;
  zBucket = sqlite3_mprintf("%.*s", (int)(zSlash-zDb), zDb);
  if( zBucket==0 ) return sqlite3_mprintf("%s", sqlite3_errstr(SQLITE_NOMEM));
  rc = depot_list_databases(zStore, zBucket, depotStopAtFirst, 0, &zErr);
  if( rc!=SQLITE_OK && zErr==0 ) zErr = sqlite3_mprintf("%s",
                                                        sqlite3_errstr(rc));
  sqlite3_free(zBucket);
  return zErr;
}

static int depotStopAtFirstCommit(void *pArg, const DepotCommitInfo *pInfo){
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
static int depotStoreProblem(const char *zStore, const char *zDb,
                             int bWrite, char **pzErr){
  struct stat st;
  int rc;
  if( stat(zStore, &st)!=0 ) return SQLITE_OK;
  if( bWrite && depot_store_on_read_only_fs(zStore) ){
    *pzErr = sqlite3_mprintf("store: cannot open %s: it is on a read-only"
        " file system, where a store opens only with immutable=1", zStore);
    return *pzErr ? SQLITE_CANTOPEN : SQLITE_NOMEM;
  }
  rc = depot_list_commits(zStore, zDb, "main", depotStopAtFirstCommit, 0,
                          pzErr);
  if( rc!=SQLITE_OK && *pzErr==0 ){
    *pzErr = sqlite3_mprintf("%s", sqlite3_errstr(rc));
  }
  return rc;
}

/* Copy every page of zFromUri into zToUri with the backup API (each opened
** with its flags: SQLITE_OPEN_URI for a depot URI, none for a plain path);
** returns the page count or -1 with *pzErr set. */
static sqlite3_int64 depotCopy(const char *zFromUri, int fromFlags,
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
    rc = sqlite3_backup_step(pB, -1);
    nPage = sqlite3_backup_pagecount(pB);
    sqlite3_backup_finish(pB);
    if( rc!=SQLITE_DONE ){
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
static void depotResultCode(sqlite3_context *ctx, int rc){
  int e = rc & 0xff;
  if( e==SQLITE_FULL || e==SQLITE_IOERR || e==SQLITE_NOMEM
   || e==SQLITE_BUSY || e==SQLITE_LOCKED ){
    sqlite3_result_error_code(ctx, rc);
  }
}

/* Remove what a failed export wrote: the target file (which did not exist
** before the export) and its rollback journal, so a retry can write it. */
static void depotExportRemove(const char *zTo){
  char *zJournal = sqlite3_mprintf("%s-journal", zTo);
  unlink(zTo);
  if( zJournal ) unlink(zJournal);
  sqlite3_free(zJournal);
}

/* All arguments must be non-NULL text. */
static int depotTextArgs(sqlite3_context *ctx, int argc, sqlite3_value **argv,
                         const char *zUsage){
  int i;
  for(i=0; i<argc; i++){
    if( sqlite3_value_type(argv[i])!=SQLITE_TEXT
     || sqlite3_value_bytes(argv[i])==0 ){
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
static int depotPageSizeOf(const char *zPath, int flags){
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
static char *depotImportError(const char *zFrom, const char *zUri,
                              const char *zDb, const char *zErr, int *pRc){
  int szFrom = depotPageSizeOf(zFrom, SQLITE_OPEN_READONLY);
  int szTo = depotPageSizeOf(zUri, SQLITE_OPEN_READONLY|SQLITE_OPEN_URI);
  if( szFrom && szTo && szFrom!=szTo ){
    *pRc = SQLITE_ERROR;                 /* a usage error, not an I/O one */
    return sqlite3_mprintf("depot: import failed: %s has pages of %d bytes,"
        " database %s has pages of %d bytes (fixed by its first commit)",
        zFrom, szFrom, zDb, szTo);
  }
  return sqlite3_mprintf("depot: import failed: %s", zErr);
}

static void depotImportFunc(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv){
  const char *zUsage = "depot_import(src_path, store[, db])";
  const char *zDb;
  char *zUri, *zFrom, *zErr = 0, *z;
  sqlite3_int64 n;
  int rc = SQLITE_OK;
  if( !depotTextArgs(ctx, argc, argv, zUsage) ) return;
  zDb = argc>2 ? (const char*)sqlite3_value_text(argv[2]) : "main";
  zUri = depotUri((const char*)sqlite3_value_text(argv[1]), zDb, "main");
  zFrom = sqlite3_mprintf("%s", (const char*)sqlite3_value_text(argv[0]));
  if( zUri==0 || zFrom==0 ){
    sqlite3_result_error_nomem(ctx);
  }else if( (rc = depotStoreProblem((const char*)sqlite3_value_text(argv[1]),
                                    zDb, 1, &zErr))!=SQLITE_OK ){
    sqlite3_result_error(ctx, zErr ? zErr : sqlite3_errstr(rc), -1);
    sqlite3_result_error_code(ctx, rc);
  }else if( (zErr = depotBucketProblem(
                 (const char*)sqlite3_value_text(argv[1]), zDb))!=0 ){
    sqlite3_result_error(ctx, zErr, -1);
  }else{
    n = depotCopy(zFrom, SQLITE_OPEN_READONLY, zUri,
                  SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE|SQLITE_OPEN_URI,
                  &rc, &zErr);
    if( n<0 && (z = depotImportError(zFrom, zUri, zDb, zErr, &rc))!=0 ){
      sqlite3_result_error(ctx, z, -1);
      depotResultCode(ctx, rc);
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

static void depotExportFunc(sqlite3_context *ctx, int argc,
                            sqlite3_value **argv){
  const char *zDst;
  char *zUri = 0, *zTo = 0, *zErr = 0;
  struct stat st;
  sqlite3_int64 n;
  int rc = SQLITE_OK;
  int fromFlags = SQLITE_OPEN_READWRITE|SQLITE_OPEN_URI;
  if( !depotTextArgs(ctx, argc, argv,
                     "depot_export(store, db, branch, dst_path)") ) return;
  zDst = (const char*)sqlite3_value_text(argv[3]);
  if( stat(zDst, &st)==0 ){
    char *z = sqlite3_mprintf("depot: export target %s already exists", zDst);
    sqlite3_result_error(ctx, z, -1);
    sqlite3_free(z);
    return;
  }
  zUri = depotUri((const char*)sqlite3_value_text(argv[0]),
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
  }else if( (rc = depotStoreProblem((const char*)sqlite3_value_text(argv[0]),
                         (const char*)sqlite3_value_text(argv[1]), 0, &zErr))
            !=SQLITE_OK ){
    sqlite3_result_error(ctx, zErr ? zErr : sqlite3_errstr(rc), -1);
    sqlite3_result_error_code(ctx, rc);
  }else if( (zErr = depotBucketProblem(
                 (const char*)sqlite3_value_text(argv[0]),
                 (const char*)sqlite3_value_text(argv[1])))!=0 ){
    sqlite3_result_error(ctx, zErr, -1);
  }else{
    n = depotCopy(zUri, fromFlags, zTo,
                  SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, &rc, &zErr);
    if( n<0 ){
      char *z = sqlite3_mprintf("depot: export failed: %s", zErr);
      depotExportRemove(zTo);
      sqlite3_result_error(ctx, z, -1);
      depotResultCode(ctx, rc);
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
static void depotDefaultVfsFunc(sqlite3_context *ctx, int argc,
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
static void depotLastErrorFunc(sqlite3_context *ctx, int argc,
                               sqlite3_value **argv){
  const char *z = depot_vfs_last_error();
  (void)argc; (void)argv;
  if( z ) sqlite3_result_text(ctx, z, -1, SQLITE_TRANSIENT);
}

/* ================= the component ================= */

static int depotSqlProcess(char **pzErr){
  int rc = depot_vfs_register();
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("depot: cannot register the depot VFS");
  }
  return rc;
}

static int depotSqlConnection(sqlite3 *db, char **pzErr){
  int f = SQLITE_UTF8|SQLITE_DIRECTONLY;
  int rc = sqlite3_create_module(db, "depot_commits", &depotCommitsModule, 0);
  if( rc==SQLITE_OK ){
    rc = sqlite3_create_module(db, "depot_stats", &depotStatsModule, 0);
  }
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_import", 2, f,
                                   0, depotImportFunc, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_import", 3, f,
                                   0, depotImportFunc, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_export", 4, f,
                                   0, depotExportFunc, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_default_vfs",
                                   0, SQLITE_UTF8, 0, depotDefaultVfsFunc,
                                   0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_default_vfs",
                                   1, f, 0, depotDefaultVfsFunc, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_default_vfs",
                                   2, f, 0, depotDefaultVfsFunc, 0, 0);
  if( rc==SQLITE_OK ) rc = sqlite3_create_function(db, "depot_last_error",
                                   0, SQLITE_UTF8, 0, depotLastErrorFunc,
                                   0, 0);
  if( rc==SQLITE_OK ) rc = depot_branch_sql_register(db);
  if( rc==SQLITE_OK ) rc = depot_verify_sql_register(db);
  if( rc==SQLITE_OK ) rc = depot_compact_sql_register(db);
  if( rc!=SQLITE_OK ){
    *pzErr = sqlite3_mprintf("depot: cannot register the depot SQL"
                             " functions: %s", sqlite3_errmsg(db));
  }
  return rc;
}

const DepotComponent depotVfsComponent = {
  "vfs", depotSqlProcess, depotSqlConnection
};
