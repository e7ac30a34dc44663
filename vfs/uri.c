/*
** uri.c -- the parameters of a depot open (vfs/uri.h): the URI parameters
** of the main database name, or the depot_vfs_set_default_params()
** string in their place, checked and read into a UriArgs.
*/
#include "config.h"
#include "vfs/uri.h"
#include "vfs/depot_vfs.h"
#include "vfs/layout.h"
SQLITE_EXTENSION_INIT3

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The decimal integer zVal in iMin..iMax into *pV; 0 if zVal is anything
** else (empty, trailing text, hex, out of range). */
static int uriIntText(const char *zVal, sqlite3_int64 iMin,
                      sqlite3_int64 iMax, sqlite3_int64 *pV){
  char *zEnd = 0;
  long long n;
  if( (zVal[0]<'0' || zVal[0]>'9') && zVal[0]!='-' && zVal[0]!='+' ){
    return 0;                       /* empty, or blanks strtoll would skip */
  }
  errno = 0;
  n = strtoll(zVal, &zEnd, 10);
  if( *zEnd || errno==ERANGE || n<iMin || n>iMax ) return 0;
  *pV = n;
  return 1;
}

/* Parameter zKey of an open: the name's own URI parameter, else the one
** depot_default_vfs(1, params) gave (a->zDflt), else NULL. */
static const char *uriArg(const UriArgs *a, const char *zKey){
  const char *z = sqlite3_uri_parameter(a->zName, zKey);
  if( z==0 && a->zDflt ) z = sqlite3_uri_parameter(a->zDflt, zKey);
  return z;
}

/* Parameter zParam of the open as an integer in iMin..iMax, iDflt when it
** is absent; a value that is not such an integer sets *pzErr (which says
** "depot: <zParam> must be an integer <zRange>, got <value>"). */
static void uriInt(const UriArgs *a, const char *zParam,
                   sqlite3_int64 iDflt, sqlite3_int64 iMin,
                   sqlite3_int64 iMax, const char *zRange,
                   sqlite3_int64 *pV, char **pzErr){
  const char *zVal = uriArg(a, zParam);
  *pV = iDflt;
  if( zVal==0 || *pzErr || uriIntText(zVal, iMin, iMax, pV) ) return;
  *pzErr = sqlite3_mprintf("depot: %s must be an integer %s, got '%s'",
                           zParam, zRange, zVal);
}

/* The integer URI parameters: cache_kb, map_kb, spill_kb, store_cache_kb,
** zstd_level, compact_after, txn_budget_kb, readahead and threads. */
static void uriParseInts(UriArgs *a, char **pzErr){
  sqlite3_int64 iLevel = URI_DEFAULT_LEVEL;
  uriInt(a, "cache_kb", URI_DEFAULT_CACHE_KB, 0,
         URI_MAX_CACHE_KB, "0..1073741824", &a->nCacheKb, pzErr);
  uriInt(a, "zstd_level", URI_DEFAULT_LEVEL, -7, 19, "-7..19",
         &iLevel, pzErr);
  uriInt(a, "compact_after", -1, 0, LLONG_MAX,
         ">= 0 (0: no background compaction)", &a->nCompactAfter, pzErr);
  a->iLevel = (int)iLevel;
  a->bLevelGiven = uriArg(a, "zstd_level")!=0;
  a->bCacheGiven = uriArg(a, "cache_kb")!=0;
  uriInt(a, "map_kb", URI_DEFAULT_MAP_KB, 0,
         URI_MAX_CACHE_KB, "0..1073741824", &a->nMapKb, pzErr);
  a->bMapGiven = uriArg(a, "map_kb")!=0;
  uriInt(a, "spill_kb", URI_DEFAULT_SPILL_KB, 0, URI_MAX_SPILL_KB,
         "0..1073741824", &a->nSpillKb, pzErr);
  a->bSpillGiven = uriArg(a, "spill_kb")!=0;
  uriInt(a, "store_cache_kb", URI_DEFAULT_STORE_CACHE_KB, 1, 1048576,
         "1..1048576", &a->nStoreCacheKb, pzErr);
  uriInt(a, "txn_budget_kb", URI_DEFAULT_TXN_BUDGET_KB, 0, URI_MAX_CACHE_KB,
         "0..1073741824", &a->nTxBudgetKb, pzErr);
  uriInt(a, "readahead", -1, 0, URI_MAX_READAHEAD,
         "0..4096", &a->nReadahead, pzErr);
  uriInt(a, "threads", -1, 0, 64, "0..64", &a->nThreads, pzErr);
}

/* The parameters of a main database name zName, and of zDflt (the
** parameters of depot_default_vfs, or 0) where the name has none of its
** own; *pzErr on a bad value.  The strings of *a point into zName and
** zDflt. */
int uri_parse_args(const char *zName, const char *zDflt, UriArgs *a,
                   char **pzErr){
  static const char *const azSync[] = { "off", "normal", "full", "extra" };
  const char *zSync;
  int i;
  a->zName = zName;
  a->zDflt = zDflt;
  zSync = uriArg(a, "store_sync");
  a->zDb = uriArg(a, "db");
  a->zBranch = uriArg(a, "branch");
  a->zBucket = uriArg(a, "bucket");
  if( a->zBucket==0 ) a->zBucket = "main";
  a->zStoreVfs = uriArg(a, "store_vfs");
  if( a->zDb==0 ) a->zDb = "main";
  if( a->zBranch==0 ) a->zBranch = "main";
  a->iSync = zSync ? -1 : 2;
  for(i=0; zSync && i<4; i++){
    if( sqlite3_stricmp(zSync, azSync[i])==0 ) a->iSync = i;
  }
  if( !layout_name_ok(a->zDb) || !layout_name_ok(a->zBranch)
   || !layout_name_ok(a->zBucket) ){
    *pzErr = sqlite3_mprintf("depot: bucket, db and branch names must be"
        " 1..%d bytes, got %d, %d and %d", LAYOUT_MAX_NAME,
        (int)strlen(a->zBucket), (int)strlen(a->zDb), (int)strlen(a->zBranch));
  }else if( sqlite3_uri_boolean(zName, "nolock", 0) ){
    *pzErr = sqlite3_mprintf("depot: nolock=1 is not supported: a depot"
        " database takes its snapshot and its write lock in its locks");
  }else if( strchr(a->zDb, '/') ){
    *pzErr = sqlite3_mprintf("depot: a db name may not contain '/' (a"
        " database BUCKET/NAME is opened with bucket=BUCKET&db=NAME), got"
        " '%s'", a->zDb);
  }else if( a->iSync<0 ){
    *pzErr = sqlite3_mprintf("depot: store_sync must be off, normal, full or"
                             " extra, got %s", zSync);
  }else if( a->zStoreVfs && (sqlite3_vfs_find(a->zStoreVfs)==0
                     || strcmp(a->zStoreVfs, DEPOT_VFS_NAME)==0) ){
    *pzErr = sqlite3_mprintf("depot: store_vfs %s is not a registered VFS"
                             " other than depot", a->zStoreVfs);
  }
  uriParseInts(a, pzErr);
  return *pzErr ? SQLITE_CANTOPEN : SQLITE_OK;
}


/* The parameters zParams as a checked filename object (vfs/uri.h). */
const char *uri_params_file(const char *zParams, int *pRc, char **pzErr){
  static const char *const azKey[] = { "db", "branch", "bucket", "cache_kb",
    "store_vfs", "store_sync", "zstd_level", "compact_after", "map_kb", "store_cache_kb",
    "txn_budget_kb", "readahead", "threads", "spill_kb" };
  const int nKeyAll = (int)(sizeof(azKey)/sizeof(azKey[0]));
  const char *azParam[2*14];
  char *zCopy = sqlite3_mprintf("%s", zParams);
  const char *zNoParams = sqlite3_create_filename("depot", "", "", 0, 0);
  const char *zFile = 0;
  char *z, *zNext;
  int i, n = 0;
  *pRc = SQLITE_NOMEM;
  if( zCopy==0 || zNoParams==0 ) goto done;
  *pRc = SQLITE_ERROR;
  for(z=zCopy; z; z=zNext){
    char *zEq;
    int k;
    if( (zNext = strchr(z, '&'))!=0 ) *zNext++ = 0;
    zEq = strchr(z, '=');
    if( zEq ) *zEq = 0;
    for(k=0; k<nKeyAll && strcmp(z, azKey[k])!=0; k++){}
    if( zEq==0 || k==nKeyAll ){
      *pzErr = sqlite3_mprintf("depot: depot_default_vfs parameters are "
          "KEY=VALUE pairs joined by '&' with KEY one of db, branch, bucket, "
          "cache_kb, map_kb, spill_kb, store_cache_kb, store_vfs, store_sync,"
          " zstd_level,"
          " compact_after, txn_budget_kb, readahead, threads;"
          " got "
          "'%s'", zParams);
      goto done;
    }
    for(i=0; i<n; i++){
      if( strcmp(azParam[2*i], z)==0 ){
        *pzErr = sqlite3_mprintf("depot: depot_default_vfs parameters name "
                                 "%s twice", z);
        goto done;
      }
    }
    azParam[2*n] = z;
    azParam[2*n+1] = zEq+1;
    n++;
  }
  zFile = sqlite3_create_filename("depot", "", "", n, azParam);
  if( zFile==0 ){
    *pRc = SQLITE_NOMEM;
    goto done;
  }
  /* the values are those an open will read: check them now */
  {
    UriArgs a;
    if( uri_parse_args(zNoParams, zFile, &a, pzErr)!=SQLITE_OK ){
      sqlite3_free_filename(zFile);
      zFile = 0;
      goto done;
    }
  }
  *pRc = SQLITE_OK;
done:
  sqlite3_free(zCopy);
  sqlite3_free_filename(zNoParams);
  return zFile;
}
