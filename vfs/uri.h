/*
** uri.h -- the parameters of a depot open (private to vfs/).
**
** A depot main database is opened by a URI filename whose parameters
** (vfs/depot_vfs.h) say the database, branch, bucket and how to open the
** store; depot_vfs_set_default_params() gives the same parameters as one
** string "KEY=VALUE&KEY=VALUE" for the opens that do not name the depot
** VFS.  Both are read by one parser, uri_parse_args(): the string is
** first made into a filename object of sqlite3_create_filename() by
** uri_params_file(), so that sqlite3_uri_parameter() reads it as it reads
** the name's own parameters.
*/
#ifndef DEPOT_URI_H
#define DEPOT_URI_H

#include "sqlite3ext.h"

#define URI_DEFAULT_CACHE_KB 65536
#define URI_DEFAULT_LEVEL    3
#define URI_DEFAULT_MAP_KB   8192
#define URI_DEFAULT_STORE_CACHE_KB 8192
#define URI_MAX_CACHE_KB     (1<<30)
#define URI_DEFAULT_SPILL_KB 262144
#define URI_MAX_SPILL_KB     (1<<30)
#define URI_DEFAULT_TXN_BUDGET_KB 32768
#define URI_DEFAULT_READAHEAD 256   /* of a store file; 0 on PostgreSQL */
#define URI_MAX_READAHEAD    4096

/* The parameters of one open. */
typedef struct UriArgs UriArgs;
struct UriArgs {
  const char *zName;             /* the name SQLite opens */
  const char *zDflt;             /* depot_default_vfs parameters, or 0 */
  const char *zDb, *zBranch, *zBucket, *zStoreVfs;
  sqlite3_int64 nCacheKb;
  int bCacheGiven;
  sqlite3_int64 nSpillKb;        /* the cache's spill file (spill_kb) */
  int bSpillGiven;
  sqlite3_int64 nMapKb;          /* page map limit (map_kb) */
  int bMapGiven;
  sqlite3_int64 nStoreCacheKb;   /* the store connection's page cache */
  sqlite3_int64 nReadahead;      /* pages decoded ahead of a scan (0: off,
                                 ** -1: absent) */
  int iSync;
  int iLevel;
  int bLevelGiven;               /* zstd_level named (else the default) */
  sqlite3_int64 nCompactAfter;   /* -1: the store's setting */
  sqlite3_int64 nTxBudgetKb;     /* dirty pages before staging (0: never) */
  sqlite3_int64 nThreads;        /* compression workers (-1: one per core) */
};

/* The parameters of a main database name zName, and of zDflt (a file of
** uri_params_file(), or 0) where the name has none of its own; *pzErr
** (which must be NULL on entry) and SQLITE_CANTOPEN on a bad value.  The
** strings of *a point into zName and zDflt. */
int uri_parse_args(const char *zName, const char *zDflt, UriArgs *a,
                   char **pzErr);

/* zParams ("db=crm&branch=try": KEY=VALUE pairs joined by '&', KEY one of
** the parameters uri_parse_args() reads, each at most once) as a filename
** object of sqlite3_create_filename() (free it with
** sqlite3_free_filename()) whose values uri_parse_args() accepts; or NULL
** with *pRc (SQLITE_ERROR with *pzErr, or SQLITE_NOMEM). */
const char *uri_params_file(const char *zParams, int *pRc, char **pzErr);

#endif /* DEPOT_URI_H */
