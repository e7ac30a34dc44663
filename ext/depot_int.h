/*
** depot_int.h -- private declarations shared by the files of ext/.
**
** Every component of the extension (a group of SQL functions, a virtual
** table module, the VFS) exposes one DepotComponent; ext/depot.c lists them
** in a single table and runs them in order, so adding a layer to the SQL
** surface is one line there.
*/
#ifndef DEPOT_INT_H
#define DEPOT_INT_H

#include "sqlite3ext.h"

typedef struct DepotComponent DepotComponent;
struct DepotComponent {
  const char *zName;                 /* for error messages: "kv", "vfs", ... */
  /* Called once per process, before the first xConnection, under the
  ** extension's init mutex.  May be NULL.  Returns an SQLite code and on
  ** failure sets *pzErr to an sqlite3_malloc'd message. */
  int (*xProcess)(char **pzErr);
  /* Called for every connection the extension is loaded into.  May be
  ** NULL.  Same error contract as xProcess. */
  int (*xConnection)(sqlite3 *db, char **pzErr);
};

/* True, with *piOut set, if v is an integer, or a real whose value is an
** integer within the 64-bit range (2.0, not 2.5): JavaScript hosts
** (better-sqlite3) bind every number as a real, so a handle or a count
** taken from a result comes back that way.  ext/depot.c. */
int depot_value_int64(sqlite3_value *v, sqlite3_int64 *piOut);

/* ext/version.c: depot_version() */
extern const DepotComponent depotVersionComponent;
/* ext/kv_func.c: KV tables, kv_* functions, kv_tables */
extern const DepotComponent depotKvComponent;

/* ext/depot_sql.c: the depot VFS and depot_commits/stats/import/export */
extern const DepotComponent depotVfsComponent;
/* ext/depot_branch_sql.c: forks, restore points, PITR, rollback, buckets
** (registered by depotVfsComponent's xConnection). */
int depot_branch_sql_register(sqlite3 *db);

/* xBestIndex of the depot table-valued functions (ext/depot_sql.c): the
** hidden columns from iFirst on are the nArg (at most DEPOT_TVF_MAX_ARG)
** arguments; usable equality constraints on them are passed to xFilter in
** column order, idxNum is their bitmask, and the first one is required. */
#define DEPOT_TVF_MAX_ARG 3
int depot_tvf_best_index(sqlite3_index_info *pInfo, int iFirst, int nArg);

/* The listing table-valued functions (ext/depot_tvf.c): register a
** listing with sqlite3_create_module(db, zName, &depot_tvf_module,
** (void*)&aDepotTvf), where the DepotTvf describes it.  xFill gets the
** arguments (azArg[i] NULL when it is absent, or NULL and not one of the
** first nReq) and adds every row with depot_tvf_row() (NULL after setting
** p->rc when out of memory: xFill then stops) and the cell setters; a cell
** left alone is NULL.  It returns SQLITE_OK or an error with *pzErr. */
typedef struct DepotTvfCell DepotTvfCell;
struct DepotTvfCell {
  int eType;                  /* SQLITE_NULL, _INTEGER or _TEXT */
  sqlite3_int64 i;
  char *z;
};
typedef struct DepotTvf DepotTvf;
typedef struct DepotTvfCursor DepotTvfCursor;
struct DepotTvf {
  const char *zSchema;        /* visible columns, then hidden arguments */
  int nCol, nArg;             /* nArg at most DEPOT_TVF_MAX_ARG */
  int (*xFill)(DepotTvfCursor*, const char *const *azArg, char **pzErr);
  int nReq;                   /* leading arguments that may not be NULL
                              ** (at least 1: the store) */
};
struct DepotTvfCursor {
  sqlite3_vtab_cursor base;   /* must be first */
  const DepotTvf *pTab;
  DepotTvfCell *a;            /* nRow * nCol */
  int nRow, nAlloc, iRow;
  int rc;                     /* out of memory while filling */
};
extern const sqlite3_module depot_tvf_module;
DepotTvfCell *depot_tvf_row(DepotTvfCursor*);
void depot_tvf_int(DepotTvfCell*, sqlite3_int64);
/* A copy of z as text (z NULL: the cell stays NULL). */
void depot_tvf_str(DepotTvfCursor*, DepotTvfCell*, const char *z);
/* Text z, sqlite3_malloc'd, owned by the cell from now on (NULL: out of
** memory, p->rc is set). */
void depot_tvf_str_own(DepotTvfCursor*, DepotTvfCell*, char *z);
/* depot_compact, depot_gc (ext/depot_compact_sql.c). */
int depot_compact_sql_register(sqlite3 *db);

/* depot_quota, depot_quotas and depot_verify (ext/depot_verify_sql.c). */
int depot_verify_sql_register(sqlite3 *db);

#endif /* DEPOT_INT_H */
