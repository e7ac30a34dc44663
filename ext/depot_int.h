/*
** depot_int.h -- private declarations shared by the files of ext/.
**
** The registry.  Every file of ext/ that puts something on a connection
** (SQL functions, virtual-table modules, listings, the VFS) exposes one
** DepotComponent; ext/depot.c lists them all in one table, aDepotComponent[],
** and sqlite3_depot_init() runs them in that order.  No file registers
** another file's functions or modules, so the files of ext/ call each other
** in one direction only, top to bottom:
**
**   depot.c          the entry point and the registry table
**     | calls every component, and kv_conn_new/kv_conn_unref
**   kv_func.c  kv_vtab.c  kv_tables.c  kv_stats.c  kv_vfunc.c  kv_attach.c
**   kv_derived.c (also called by kv_func.c and kv_vtab.c: source writes)
**   kv_queue.c, kv_stream.c (kv_stream.c also called by kv_derived.c: the
**   change streams of source writes)
**   depot_sql.c  depot_branch_sql.c  depot_verify_sql.c
**   depot_compact_sql.c  depot_version.c        (one component each)
**     | call only the shared files
**   listing.c  kv_decl.c  kv_conn.c  kv_readset.c  args.c  sqlite3_api.c
**
** Adding to the SQL surface is one file with its component and one line in
** the table.  Also here: the argument checks of ext/args.c.
*/
#ifndef DEPOT_INT_H
#define DEPOT_INT_H

#include "sqlite3ext.h"

typedef struct KvConn KvConn;        /* ext/kv_sql.h */

typedef struct DepotComponent DepotComponent;
struct DepotComponent {
  /* The start of the message when xConnection fails: "kv: cannot register
  ** the KV functions"; ext/depot.c adds ": " and sqlite3_errmsg(db). */
  const char *zFail;
  /* Called once per process, before the first xConnection, under the
  ** extension's init mutex.  May be NULL.  Returns an SQLite code and on
  ** failure sets *pzErr to an sqlite3_malloc'd message. */
  int (*xProcess)(char **pzErr);
  /* Called for every connection db the extension is loaded into, to
  ** register this file's functions and modules.  pKv is the connection's
  ** KV state, shared by the KV components (each registration that keeps it
  ** takes its own reference with kv_conn_ref); others ignore it.  Returns
  ** an SQLite code; on failure the message is zFail's. */
  int (*xConnection)(sqlite3 *db, KvConn *pKv);
};

/* The components, in registration order (ext/depot.c). */
extern const DepotComponent depotKvFuncComponent;     /* kv_func.c */
extern const DepotComponent depotKvVtabComponent;     /* kv_vtab.c */
extern const DepotComponent depotKvTablesComponent;   /* kv_tables.c */
extern const DepotComponent depotKvStatsComponent;    /* kv_stats.c */
extern const DepotComponent depotKvVfuncComponent;    /* kv_vfunc.c */
extern const DepotComponent depotKvPreparedComponent; /* kv_prepared.c */
extern const DepotComponent depotKvAttachComponent;   /* kv_attach.c */
extern const DepotComponent depotKvDerivedComponent;  /* kv_derived.c */
extern const DepotComponent depotKvQueueComponent;    /* kv_queue.c */
extern const DepotComponent depotKvTtlComponent;      /* kv_ttl.c */
extern const DepotComponent depotSqlComponent;        /* depot_sql.c */
extern const DepotComponent depotBranchSqlComponent;  /* depot_branch_sql.c */
extern const DepotComponent depotVerifySqlComponent;  /* depot_verify_sql.c */
extern const DepotComponent depotCompactSqlComponent; /* depot_compact_sql.c */
extern const DepotComponent depotPoolSqlComponent;    /* pool_sql.c */
extern const DepotComponent depotVersionComponent;    /* depot_version.c */

/* ------------------------------------------------ ext/args.c: arguments */

/* True, with *piOut set, if v is an integer, or a real whose value is an
** integer within the 64-bit range (2.0, not 2.5): JavaScript hosts
** (better-sqlite3) bind every number as a real, so a handle or a count
** taken from a result comes back that way. */
int depot_value_int64(sqlite3_value *v, sqlite3_int64 *piOut);

/* The text of v if it is non-empty text without NUL bytes (a store path,
** a database, branch or bucket name), else NULL. */
const char *depot_text_value(sqlite3_value *v);

/* depot_text_value(v), else NULL after setting the error "depot: <zFunc>:
** <zWhat> must be non-empty text" on ctx. */
const char *depot_text_arg(sqlite3_context *ctx, sqlite3_value *v,
                           const char *zFunc, const char *zWhat);

/* The arguments apArg[0..nArg-1] of a depot listing (ext/listing.h) as
** text in az[]: NULL for one left out, and for a NULL one after the first
** nNotNull (it means "all"); every other one must be depot_text_value
** text, else SQLITE_ERROR with *pzErr "depot: argument N must be non-empty
** text". */
int depot_text_args(sqlite3_value **apArg, int nArg, int nNotNull,
                    const char **az, char **pzErr);

/* The error result of a depot_* function: message zErr (consumed; NULL:
** "depot: out of memory"), and code rc unless it is plain SQLITE_ERROR. */
void depot_result_error(sqlite3_context *ctx, int rc, char *zErr);

/* Run zSql on db with text parameters ?1 = z1 and ?2 = z2 (a NULL pointer
** binds NULL) and return column 0 of its first row as sqlite3_malloc'd
** text in *pz (NULL when there is no row or it is NULL).  db NULL:
** SQLITE_NOMEM. */
int depot_sql_text(sqlite3 *db, const char *zSql, const char *z1,
                   const char *z2, char **pz);

/* Member zPath of JSON text zJson as text in *pz (depot_sql_text; NULL
** when zJson is not JSON or has no such member). */
int depot_json_text(sqlite3 *db, const char *zJson, const char *zPath,
                    char **pz);

#endif /* DEPOT_INT_H */
